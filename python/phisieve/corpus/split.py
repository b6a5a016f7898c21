"""``phisieve split``: divide a documents dataset by patient into members, reference and
held-out parts (DESIGN.md §9: members and non-members are split **by patient**).

Every patient goes to exactly one part. Patients are ordered by a keyed hash of their id
(BLAKE2b keyed with the seed), so the assignment depends on the seed and the set of patients
only: not on the order of the rows, the batch boundaries or the number of threads. The
ordered list is cut at the cumulative fractions; part ``i`` gets ``round(fraction_i ×
patients)`` patients (largest remainder, so the parts add up exactly).

The output ``out/`` is a plain folder holding one documents dataset per part (``out/members/``,
``out/reference/``, ``out/heldout/``), each with its own ``.meta/manifest.json``; the manifest
of every part records the whole split (``split``: by, seed, fractions, and patients and rows
of every part) and which part it is.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable

from ..errors import ConfigError

__all__ = ["BY", "assign", "check_fractions", "check_seed", "parse_fractions", "part_sizes"]

BY = {"patient": "patient_id", "document": "doc_id"}
"""What a split keeps together, and the column that names it."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_PERSON = b"phisieve-split"


def check_fractions(fractions: dict[str, float]) -> dict[str, float]:
    """``fractions`` checked: safe folder names (letters, digits, ``_``, ``-``; at most 64),
    positive finite shares that sum to 1 (± 1e-9).

    Raises
    ------
    ConfigError
        When a name or a share is not usable.
    """
    if not fractions:
        raise ConfigError("a split needs at least one part")
    out = {}
    for name, value in fractions.items():
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ConfigError(
                f"part name {name!r} is not a plain folder name (letters, digits, _ and -, "
                "starting with a letter or digit, at most 64 characters)"
            )
        try:
            share = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"the fraction of part {name} is not a number") from None
        if not math.isfinite(share) or share <= 0:
            raise ConfigError(f"the fraction of part {name} must be positive, not {value!r}")
        out[name] = share
    if len({n.lower() for n in out}) != len(out):
        raise ConfigError("part names must differ (ignoring case)")
    total = math.fsum(out.values())
    if abs(total - 1.0) > 1e-9:
        raise ConfigError(f"the fractions must sum to 1, not {total:.12g}")
    return out


def parse_fractions(text: str) -> dict[str, float]:
    """``"members=0.6,reference=0.2,heldout=0.2"`` -> ``{"members": 0.6, ...}`` (checked by
    :func:`check_fractions`; the parts keep the order given).

    Raises
    ------
    ConfigError
        On text that is not ``NAME=SHARE`` pairs separated by commas, a repeated name, or
        shares that :func:`check_fractions` refuses.
    """
    fractions: dict[str, float] = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise ConfigError(
                f"fractions must be NAME=SHARE pairs separated by commas, e.g. "
                f"members=0.6,reference=0.2,heldout=0.2; not {text!r}"
            )
        if name in fractions:
            raise ConfigError(f"part {name!r} is named twice")
        try:
            fractions[name] = float(value)
        except ValueError:
            raise ConfigError(f"the fraction of part {name!r} is not a number: {value!r}") from None
    return check_fractions(fractions)


def part_sizes(n: int, fractions: dict[str, float]) -> dict[str, int]:
    """How many of ``n`` units each part gets: ``round(fraction × n)`` by the largest
    remainder method, so the sizes sum to ``n`` exactly (ties go to the earlier part)."""
    fractions = check_fractions(fractions)
    quotas = [f * n for f in fractions.values()]
    sizes = [math.floor(q + 1e-9) for q in quotas]
    left = n - sum(sizes)
    order = sorted(range(len(quotas)), key=lambda i: (-(quotas[i] - sizes[i]), i))
    for i in order[: max(0, left)]:
        sizes[i] += 1
    return dict(zip(fractions, sizes, strict=True))


def check_seed(seed: int) -> bytes:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise ConfigError(f"the seed must be an integer in [0, 2**64), not {seed!r}")
    return seed.to_bytes(8, "little")


def assign(units: Iterable[str], fractions: dict[str, float], seed: int = 0) -> dict[str, str]:
    """The part of every unit (patient or document id): ids ordered by
    ``BLAKE2b(id, key=seed)``, then cut at the cumulative fractions (:func:`part_sizes`).

    A pure function of the set of ids, the fractions and the seed.
    """
    key = check_seed(seed)
    ids = set(units)
    ordered = sorted(
        ids,
        key=lambda u: (
            hashlib.blake2b(u.encode("utf-8"), key=key, person=_PERSON, digest_size=16).digest(),
            u,
        ),
    )
    out: dict[str, str] = {}
    start = 0
    for name, size in part_sizes(len(ordered), fractions).items():
        for u in ordered[start : start + size]:
            out[u] = name
        start += size
    return out
