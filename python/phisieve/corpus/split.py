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
import os
import re
from collections.abc import Iterable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigError, InputError
from ..io.dataset import MANIFEST, META_SUFFIX, DatasetWriter, check_inputs, check_output, meta_dir
from ..io.sources import open_source, require_columns
from ..pipeline.progress import progress_bar

__all__ = [
    "DEFAULT_FRACTIONS",
    "assign",
    "check_fractions",
    "parse_fractions",
    "part_sizes",
    "split",
    "split_command",
]

DEFAULT_FRACTIONS: dict[str, float] = {"members": 0.6, "reference": 0.2, "heldout": 0.2}
"""Members (trained on), reference (trains the calibration model) and held-out patients."""

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


def _check_seed(seed: int) -> bytes:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise ConfigError(f"the seed must be an integer in [0, 2**64), not {seed!r}")
    return seed.to_bytes(8, "little")


def assign(units: Iterable[str], fractions: dict[str, float], seed: int = 0) -> dict[str, str]:
    """The part of every unit (patient or document id): ids ordered by
    ``BLAKE2b(id, key=seed)``, then cut at the cumulative fractions (:func:`part_sizes`).

    A pure function of the set of ids, the fractions and the seed.
    """
    key = _check_seed(seed)
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


def _check_out(out: Path, names: list[str]) -> None:
    """``out`` must be a plain folder (or not exist yet) that holds nothing but these parts."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise InputError("the output must be a folder", path=out)
    if out.name.endswith(META_SUFFIX) or (meta_dir(out) / MANIFEST).exists():
        raise InputError(
            "the output of split is a folder of datasets, not a dataset itself", path=out
        )
    if not out.exists():
        return
    allowed = {*names, *(n + META_SUFFIX for n in names)}
    for entry in out.iterdir():
        if not entry.name.startswith(".") and entry.name not in allowed:
            raise InputError(
                f"the output folder holds something other than the parts "
                f"({', '.join(names)}), e.g. {entry.name}; use a new or empty folder",
                path=out,
            )


def split(
    docs: Any,
    out: str | os.PathLike[str],
    *,
    fractions: dict[str, float] | None = None,
    by: str = "patient",
    seed: int = 0,
    overwrite: bool = False,
    progress: bool = False,
) -> dict[str, Any]:
    """Split a documents dataset into one dataset per part, by patient.

    Two passes over ``docs``: the first collects the distinct patient ids, the second routes
    every row to its patient's part (rows keep their order within a part; every column is
    kept).

    Parameters
    ----------
    docs
        A documents dataset folder, Parquet file or table (``patient_id``; ``doc_id`` with
        ``by="document"``). One-shot streams are refused (read twice).
    out
        The output folder: it gets one dataset per part, ``out/<name>/`` with its manifest in
        ``out/<name>.meta/``, and nothing else.
    fractions
        Part names (plain folder names) and their shares of the patients, positive and
        summing to 1 (default :data:`DEFAULT_FRACTIONS`: members 0.6, reference 0.2,
        heldout 0.2).
    by
        ``"patient"`` (every patient's documents in one part: what membership audits need)
        or ``"document"`` (documents assigned one by one, by ``doc_id``: a patient may be in
        several parts, so such parts are no members/non-members split).
    seed
        The key of the hash that orders the patients (0 ≤ seed < 2**64).
    overwrite
        Replace existing parts (each atomically). Without it an existing part is refused.
    progress
        Show progress bars.

    Returns
    -------
    dict
        ``by``, ``seed``, ``fractions``, ``units`` (patients or documents: what was split),
        ``rows`` and ``parts``: per part its ``path``, ``units``, ``patients`` (distinct
        patients; ``None`` by document without a ``patient_id`` column) and ``rows``. The
        same summary is in every part's manifest (``split``, with ``part`` = its name).

    Raises
    ------
    ConfigError
        Bad fractions, seed or ``by``.
    InputError
        A missing column, a null id, a one-shot stream, or an output folder that holds other
        things.
    OutputExistsError
        A part exists and ``overwrite`` is False.
    """
    fractions = check_fractions(dict(DEFAULT_FRACTIONS if fractions is None else fractions))
    if by not in BY:
        raise ConfigError(f"unknown split unit {by!r}; expected one of {', '.join(BY)}")
    _check_seed(seed)
    column = BY[by]
    out = Path(out)
    names = list(fractions)
    inputs = check_inputs(docs=docs)
    _check_out(out, names)
    for name in names:
        check_output(out / name, overwrite, inputs)
    src = open_source(docs, 16_384)
    require_columns(src.schema, [column], src.name)
    if not src.reiterable:
        raise InputError("the split stage reads its input twice: pass a dataset or a table")

    units: set[str] = set()
    seen = 0
    with progress_bar(f"{by}s", total=src.num_rows, unit="documents", enabled=progress) as adv:
        for b in src.batches([column]):
            col = b.column(0)
            if col.null_count:
                row = seen + int(pc.index(pc.is_null(col), True).as_py())
                raise InputError(f"a null {column}", path=src.name, row=row, column=column)
            units.update(pc.unique(col.cast(pa.large_string())).to_pylist())
            seen += b.num_rows
            adv(b.num_rows)
    parts = assign(units, fractions, seed)
    members = {name: [] for name in names}
    for u, name in parts.items():
        members[name].append(u)
    value_sets = {name: pa.array(sorted(ids), pa.large_string()) for name, ids in members.items()}
    options = {"by": by, "seed": seed, "fractions": fractions}
    rows = dict.fromkeys(names, 0)
    count_patients = by != "patient" and "patient_id" in src.schema.names
    patients: dict[str, set[str]] = {name: set() for name in names}
    with ExitStack() as stack:
        writers = {
            name: stack.enter_context(
                DatasetWriter(
                    out / name,
                    src.schema,
                    stage="split",
                    inputs=inputs,
                    options={**options, "part": name},
                    overwrite=overwrite,
                )
            )
            for name in names
        }
        with progress_bar("split", total=src.num_rows, unit="documents", enabled=progress) as adv:
            for b in src.batches(None):
                keys = b.column(column).cast(pa.large_string())
                for name in names:
                    mask = pc.is_in(keys, value_set=value_sets[name])
                    part = b.filter(mask)
                    rows[name] += part.num_rows
                    writers[name].write(part)
                    if count_patients:
                        patients[name].update(pc.unique(part.column("patient_id")).to_pylist())
                adv(b.num_rows)
        total = sum(rows.values())
        if total != seen:  # pragma: no cover - every id was assigned in the first pass
            raise InputError("the dataset changed between the two passes", path=src.name)

        def n_patients(name: str) -> int | None:
            if by == "patient":
                return len(members[name])
            return len(patients[name]) if count_patients else None

        summary: dict[str, Any] = {
            "by": by,
            "seed": seed,
            "fractions": fractions,
            "units": len(units),
            "rows": total,
            "parts": {
                name: {
                    "path": str(out / name),
                    "units": len(members[name]),
                    "patients": n_patients(name),
                    "rows": rows[name],
                }
                for name in names
            },
        }
        for name in names:
            writers[name].close(split={**summary, "part": name})
    return summary


def split_command(
    docs: Path,
    out: Path,
    by: str = "patient",
    fractions: str = "members=0.6,reference=0.2,heldout=0.2",
    seed: int = 0,
    overwrite: bool = False,
    quiet: bool = False,
) -> dict[str, Any]:
    """What ``phisieve split`` runs: parse ``fractions`` (:func:`parse_fractions`), split
    (:func:`split`) and print a table of the parts (patients and rows) to standard output.

    Returns the summary of :func:`split`.
    """
    from rich.console import Console
    from rich.table import Table

    summary = split(
        docs,
        out,
        fractions=parse_fractions(fractions),
        by=by,
        seed=seed,
        overwrite=overwrite,
        progress=not quiet,
    )
    table = Table(title=f"split by {by} (seed {seed})")
    for col in ("part", "fraction", "patients", "documents", "folder"):
        table.add_column(col, justify="left" if col in ("part", "folder") else "right")
    for name, part in summary["parts"].items():
        table.add_row(
            name,
            f"{summary['fractions'][name]:g}",
            "-" if part["patients"] is None else f"{part['patients']:,}",
            f"{part['rows']:,}",
            part["path"],
        )
    console = Console()
    console.print(table)
    console.print(f"{summary['units']:,} {by}s, {summary['rows']:,} documents, written to {out}")
    return summary
