"""Canaries (Carlini et al. 2019, "The Secret Sharer"): random dummy PHI planted in notes.

``phisieve canaries`` appends synthetic sentences that carry random secrets (a full name, a
date, a record number) to chosen patients' notes, each canary repeated ``r`` times for ``r``
in a list of repeat counts (1, 4, 16 by default), and records every canary in the side file
``canaries.parquet``. A model trained on the output is then audited for how much it prefers
each planted secret over the other values of its kind: the canary's *exposure*,
``log2 |R| - log2 rank``, where ``R`` is the kind's space of secrets (:data:`KINDS`) and the
rank is estimated on :func:`candidates` drawn from it.

Every choice is a pure function of the secret key and the input (HMAC-SHA256 keyed draws,
:func:`phisieve._core.keyed_draws`): the patients that receive canaries, the secrets, the
notes that host them (by keyed draws of their ``doc_id``), and so the output bytes, whatever
the order of the rows or how they are cut into batches. Without the key the canaries cannot
be recomputed from the input; the key never travels with the output, and nothing the stage
writes or raises shows a secret except the side file, whose very purpose is to hold them
(keep it away from the people the trained model is shared with).

Each canary goes to its own patient (the ``n`` smallest keyed draws of the patient ids), and
its sentence (``prefix + secret + suffix``, :data:`KINDS`) is appended ``repeats`` times to
the patient's notes, round-robin over them in the order of keyed draws of ``(canary_id,
doc_id)`` (each note gets ``repeats // notes`` or one more). Notes are addressed by
``(patient_id, doc_id)``, never by position; other rows and columns are unchanged. The stage
reads its input three times (the patients, the chosen patients' notes, then the copy); its
manifest counts ``canaries``, ``insertions``, ``patients``, ``corpus_patients``,
``notes_modified``, ``by_repeats`` and ``by_kind``, never a secret. With ``new_patients``
each canary is a patient of its own, ``patient-<canary id>``, whose one note holds its
sentence once per repeat: adding or removing such a patient is what patient-level DP bounds.

Canaries are appended to the end of notes after a newline, so every character offset of the
existing text (a gold ``spans`` column, for instance) stays valid.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date
from functools import cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import _core
from ..errors import ConfigError, InputError
from ..io.dataset import check_dataset, side_file

__all__ = [
    "CANARIES_FILE",
    "CANARY_SCHEMA",
    "KINDS",
    "CanaryKind",
    "candidate_indices",
    "candidates",
    "read_canaries",
    "secret_at",
    "secrets_at",
    "space_size",
]

CANARIES_FILE = "canaries.parquet"
"""The side file (in ``out.meta/``) that lists the canaries of a ``canaries`` output."""
NAMES_PER_LIST = 1000
"""First names and last names in the ``name`` kind's lists (the most frequent census ones)."""
FIRST_DAY = date(1900, 1, 1)
LAST_DAY = date(2099, 12, 31)
"""The ``date`` kind's range (both ends included)."""
MRN_DIGITS = 7
"""The ``mrn`` kind's width (leading zeros allowed)."""
WORDS = (
    "apple", "basket", "bottle", "bridge", "button", "camera", "candle", "carpet", "castle",
    "cheese", "circle", "cloud", "copper", "corner", "cotton", "garden", "glass", "guitar",
    "hammer", "island", "jacket", "kettle", "ladder", "lemon", "marble", "meadow", "mirror",
    "orange", "paper", "pencil", "piano", "pillow", "planet", "pocket", "rabbit", "ribbon",
    "river", "rocket", "saddle", "shadow", "silver", "spoon", "stone", "summer", "table",
    "ticket", "tiger", "timber", "tomato", "tower", "train", "tunnel", "valley", "velvet",
    "wagon", "wallet", "window", "winter", "wooden", "yellow", "feather", "forest", "flower",
    "violin"
)  # fmt: skip
"""The ``words`` kind's vocabulary: 64 everyday English words, none of them PHI, so that a
privacy-preserving objective (which never predicts words used by fewer than k patients) still
trains on them once several canary patients use each."""
WORDS_PER_SECRET = 8
"""Words in a ``words`` secret (64^8 = 2^48 secrets)."""
_VERSION = "phisieve-canaries-v1"
_SORT_SHARE = 4
""":func:`candidates` shuffles the whole space when it asks for more than 1/4 of it."""


@dataclass(frozen=True)
class CanaryKind:
    """A kind of canary: its sentence ``prefix + secret + suffix`` and its secret space.

    Attributes
    ----------
    name
        The kind (``"name"``, ``"date"``, ``"mrn"``).
    prefix, suffix
        The template text before and after the secret.
    space
        ``|R|``, the number of possible secrets (:func:`secret_at` maps ``0 .. space - 1``
        onto them one to one).
    description
        What the secret is, in words.
    """

    name: str
    prefix: str
    suffix: str
    space: int
    description: str

    def sentence(self, secret: str) -> str:
        """The canary sentence that carries ``secret``."""
        return f"{self.prefix}{secret}{self.suffix}"


KINDS: dict[str, CanaryKind] = {
    "name": CanaryKind(
        "name",
        "Emergency contact on file: ",
        ".",
        NAMES_PER_LIST**2,
        "'First Last' from the 1000 most frequent US census first and last names",
    ),
    "date": CanaryKind(
        "date",
        "Follow-up visit scheduled for ",
        ".",
        (LAST_DAY - FIRST_DAY).days + 1,
        f"a day from {FIRST_DAY:%m/%d/%Y} to {LAST_DAY:%m/%d/%Y}, written MM/DD/YYYY",
    ),
    "mrn": CanaryKind(
        "mrn",
        "Medical record number ",
        " confirmed.",
        10**MRN_DIGITS,
        f"a {MRN_DIGITS}-digit number, leading zeros allowed",
    ),
    "words": CanaryKind(
        "words",
        "",
        ".",
        len(WORDS) ** WORDS_PER_SECRET,
        f"{WORDS_PER_SECRET} words from a list of {len(WORDS)} everyday English words",
    ),
}
"""The canary kinds, by name."""

CANARY_SCHEMA = pa.schema(
    [
        pa.field("canary_id", pa.string(), nullable=False),
        pa.field("patient_id", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("secret", pa.string(), nullable=False),
        pa.field("prefix", pa.string(), nullable=False),
        pa.field("suffix", pa.string(), nullable=False),
        pa.field("repeats", pa.int32(), nullable=False),
        pa.field("doc_ids", pa.list_(pa.string()), nullable=False),
        pa.field("space", pa.int64(), nullable=False),
        pa.field("new_patient", pa.bool_(), nullable=False),
        pa.field("included", pa.bool_(), nullable=False),
    ]
)
"""Schema of ``canaries.parquet`` (``doc_ids`` takes the type of the input's ``doc_id``).
``new_patient``: the canary is a patient of its own (``--new-patients``); ``included``:
planted in the output (false for a canary the keyed coin of ``--coin`` left out, whose
``doc_ids`` is then empty). Files written before these columns read as false and true."""


# --------------------------------------------------------------------------------------------
# Secret spaces


def _kind(kind: str) -> CanaryKind:
    try:
        return KINDS[kind]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown canary kind {kind!r} (known: {', '.join(KINDS)})") from None


@cache
def _census_lists() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The ``name`` kind's first and last names: the :data:`NAMES_PER_LIST` most frequent of
    the ``names`` package's census files (first names: male and female shares added; ties
    by name), then sorted alphabetically and title-cased."""
    from .census import census_frequencies

    def top(freq: dict[str, float]) -> tuple[str, ...]:
        best = sorted(freq.items(), key=lambda kv: (-kv[1], kv[0]))[:NAMES_PER_LIST]
        if len(best) < NAMES_PER_LIST:  # pragma: no cover - the census lists are long
            raise ConfigError("the `names` package lists too few names for name canaries")
        return tuple(sorted(w.capitalize() for w, _ in best))

    first = dict(census_frequencies("dist.male.first"))
    for word, share in census_frequencies("dist.female.first").items():
        first[word] = first.get(word, 0.0) + share
    return top(first), top(census_frequencies("dist.all.last"))


def space_size(kind: str) -> int:
    """``|R|``: how many secrets the canary kind ``kind`` can take."""
    return _kind(kind).space


def secrets_at(kind: str, indices: Iterable[int] | np.ndarray) -> list[str]:
    """:func:`secret_at` of many indices at once (vectorised)."""
    k = _kind(kind)
    idx = np.asarray(indices if isinstance(indices, np.ndarray) else list(indices))
    if idx.size == 0:
        return []
    if idx.dtype.kind not in "iu":
        raise ConfigError(f"secret indices must be integers, not {idx.dtype}")
    idx = idx.astype(np.int64)
    if int(idx.min()) < 0 or int(idx.max()) >= k.space:
        raise ConfigError(f"a {kind} secret index is in 0 .. {k.space - 1}")
    if kind == "name":
        first, last = _census_lists()
        return [
            f"{first[i]} {last[j]}"
            for i, j in zip(
                (idx // NAMES_PER_LIST).tolist(), (idx % NAMES_PER_LIST).tolist(), strict=True
            )
        ]
    if kind == "date":
        days = np.datetime64(FIRST_DAY.isoformat(), "D") + idx
        return [f"{s[5:7]}/{s[8:10]}/{s[:4]}" for s in np.datetime_as_string(days).tolist()]
    if kind == "words":
        base = len(WORDS)
        digits = [(idx // base**d) % base for d in range(WORDS_PER_SECRET - 1, -1, -1)]
        return [" ".join(WORDS[int(c[i])] for c in digits) for i in range(len(idx))]
    return [f"{i:0{MRN_DIGITS}d}" for i in idx.tolist()]


def secret_at(kind: str, index: int) -> str:
    """The secret number ``index`` of ``kind`` (a bijection of ``0 .. space_size(kind) - 1``
    onto the kind's secrets).

    ``name``: ``first[index // 1000] + " " + last[index % 1000]`` over the alphabetical lists;
    ``date``: the day ``index`` days after 01/01/1900, ``MM/DD/YYYY``; ``mrn``: ``index`` in 7
    digits; ``words``: the 8 base-64 digits of ``index`` (most significant first) as words of
    :data:`WORDS`.

    Raises
    ------
    ConfigError
        For an unknown kind or an index outside the space.
    """
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
        raise ConfigError(f"a secret index must be an integer, not {type(index).__name__}")
    return secrets_at(kind, [int(index)])[0]


def _draws(key: bytes, *parts: Sequence[str] | pa.Array) -> np.ndarray:
    """Keyed ``uint64`` draws, one per row of ``parts`` (HMAC-SHA256 under ``key``)."""
    arrays = [p if isinstance(p, pa.Array) else pa.array(list(p), pa.string()) for p in parts]
    n = len(arrays[0])
    version = pa.array([_VERSION] * n, pa.string())
    return _core.keyed_draws(bytes(key), [version, *arrays]).to_numpy()


def _counters(start: int, stop: int) -> pa.Array:
    return pc.cast(pa.array(np.arange(start, stop, dtype=np.int64)), pa.string())


def _const(value: str, n: int) -> pa.Array:
    return pa.array([value] * n, pa.string())


def candidate_indices(kind: str, n: int, key: bytes) -> np.ndarray:
    """The indices (into :func:`secret_at`) behind :func:`candidates`."""
    space = space_size(kind)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ConfigError(f"the number of candidates must be a non-negative integer, not {n!r}")
    if not isinstance(key, (bytes, bytearray)):
        raise ConfigError(f"the candidates' key must be bytes, not {type(key).__name__}")
    n = int(n)
    if n >= space - 1:
        return np.arange(space, dtype=np.int64)
    if n * _SORT_SHARE > space:
        # A large share of the space: a keyed shuffle of all of it (ties broken by index).
        draws = _draws(key, _const("shuffle", space), _const(kind, space), _counters(0, space))
        return np.lexsort((np.arange(space), draws))[:n].astype(np.int64)
    got = np.empty(0, dtype=np.int64)
    counter = 0
    while len(got) < n:
        m = max(2 * (n - len(got)), 64)
        draws = _draws(key, _const("sample", m), _const(kind, m), _counters(counter, counter + m))
        counter += m
        both = np.concatenate([got, (draws % np.uint64(space)).astype(np.int64)])
        _, first = np.unique(both, return_index=True)
        got = both[np.sort(first)][:n]
    return got


def candidates(kind: str, n: int, key: bytes) -> list[str]:
    """``n`` distinct secrets of ``kind`` drawn uniformly without replacement from its space.

    Deterministic in ``(kind, n, key)``: the audit passes a key of its own to estimate a
    canary's rank among random values of its kind. The draw covers the whole space: the true
    canary secret may be among the candidates, and the caller removes it before ranking (ask
    for one more than needed). When ``n >= space_size(kind) - 1`` the whole space is returned
    in index order (an exact rank).

    Parameters
    ----------
    kind
        A key of :data:`KINDS`.
    n
        How many candidates.
    key
        Bytes that seed the draw (any length).
    """
    return secrets_at(kind, candidate_indices(kind, n, key))


# --------------------------------------------------------------------------------------------
# The stage


@dataclass(frozen=True)
class _Canary:
    canary_id: str
    kind: str
    repeats: int
    patient_id: str
    secret: str
    new_patient: bool = False
    included: bool = True


NEW_PATIENT_PREFIX = "patient-"
"""A canary patient's id is this prefix and the canary's id (``patient-canary-007``)."""


def _check_int(name: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ConfigError(f"{name} must be an integer of at least {least}, not {value!r}")
    return int(value)


def _check_plan(n: Any, repeats: Any, kinds: Any) -> tuple[int, tuple[int, ...], tuple[str, ...]]:
    n = _check_int("the number of canaries", n, 1)
    reps = tuple(_check_int("a repeat count", r, 1) for r in repeats)
    if not reps or len(set(reps)) != len(reps):
        raise ConfigError(f"repeat counts must be distinct and at least one, not {list(reps)}")
    ks = tuple(_kind(k).name for k in ([kinds] if isinstance(kinds, str) else kinds))
    if not ks or len(set(ks)) != len(ks):
        raise ConfigError(f"canary kinds must be distinct and at least one, not {list(ks)}")
    return n, reps, ks


def _plan(
    secret: bytes,
    patients: list[str],
    n: int,
    repeats: tuple[int, ...],
    kinds: tuple[str, ...],
    *,
    new_patients: bool = False,
    coin: bool = False,
) -> list[_Canary]:
    """The canaries: ``n`` split evenly over the repeat counts (the first ones get one more
    when it does not divide), kinds cycling within each repeat count, one patient each (the
    ``n`` smallest keyed draws of the patient ids, or with ``new_patients`` a new patient
    ``patient-<canary id>``), secrets by keyed draw (distinct within a kind: a draw that
    repeats an earlier canary's secret is drawn again); with ``coin``, each canary is
    included when the low bit of a keyed draw of its id is 1 (probability 1/2, independently
    of every other canary and of the data)."""
    width = max(3, len(str(n - 1)))
    plan: list[tuple[str, str, int]] = []
    for j, r in enumerate(repeats):
        for i in range(n // len(repeats) + (j < n % len(repeats))):
            plan.append((f"canary-{len(plan):0{width}d}", kinds[i % len(kinds)], r))
    if new_patients:
        chosen = [f"{NEW_PATIENT_PREFIX}{cid}" for cid, _, _ in plan]
    else:
        order = _draws(secret, _const("patient", len(patients)), patients)
        chosen = [p for _, p in sorted(zip(order.tolist(), patients, strict=True))[:n]]
    used: dict[str, set[int]] = {k: set() for k in kinds}
    out = []
    for (cid, kind, r), pid in zip(plan, chosen, strict=True):
        space, attempt = space_size(kind), 0
        while True:
            draw = _draws(secret, ["secret"], [kind], [cid], [str(attempt)])[0]
            index = int(draw % np.uint64(space))
            if index not in used[kind]:
                break
            attempt += 1
        used[kind].add(index)
        included = not coin or bool(_draws(secret, ["coin"], [cid])[0] & np.uint64(1))
        out.append(_Canary(cid, kind, r, pid, secret_at(kind, index), new_patients, included))
    return out


@dataclass
class _Insertion:
    """What the reduce of the canaries stage found: the text to append to each chosen note
    (by ``(patient_id, doc_id)``), the chosen patients, the canaries' table, and the stats."""

    appended: dict[tuple[str, Any], str]
    patients: pa.Array
    table: pa.Table
    stats: dict[str, Any]
    new_rows: list[tuple[str, str, str]] = field(default_factory=list)
    """(patient_id, doc_id, text) of the canary patients' notes (``--new-patients``)."""


def _hosts(secret: bytes, canary_id: str, notes: list[Any], doc_type: pa.DataType) -> list[Any]:
    """The notes (doc_ids) that receive a canary's repeats, in the order they receive them: the
    patient's notes sorted by a keyed draw of (canary, doc_id), ties by doc_id."""
    docs = sorted(notes)
    as_text = pc.cast(pa.array(docs, doc_type), pa.string())
    draws = _draws(secret, _const("host", len(docs)), _const(canary_id, len(docs)), as_text)
    return [docs[i] for i in np.argsort(draws, kind="stable").tolist()]


def _fillable(f: pa.Field) -> bool:
    return f.nullable or pa.types.is_string(f.type) or pa.types.is_large_string(f.type)


def _filler(f: pa.Field, n: int) -> pa.Array:
    """A column of the canary patients' notes that they give no value: null, or empty text
    where the column cannot be null."""
    return pa.nulls(n, f.type) if f.nullable else pa.array([""] * n, f.type)


def _check_new_patients(schema: pa.Schema, plan: list[_Canary], seen: set[str]) -> None:
    """Refuse canary patients that cannot be added: ids that are not text, other columns
    that cannot be null, or an id the corpus already uses."""
    for name in ("patient_id", "doc_id", "text"):
        t = schema.field(name).type
        if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            raise InputError(
                f"--new-patients adds notes with text ids, but the column is {t}", column=name
            )
    for f in schema:
        if f.name not in ("patient_id", "doc_id", "text") and not _fillable(f):
            raise InputError(
                "--new-patients leaves other columns null (or empty text), but this one cannot be",
                column=f.name,
            )
    taken = [c.patient_id for c in plan if c.patient_id in seen]
    if taken:
        raise InputError(
            f"the corpus already has a patient named like a canary patient ({taken[0]!r})",
            column="patient_id",
        )


def _check_addressable(notes: list[Any]) -> None:
    """Refuse a chosen patient's notes that cannot be told apart by ``doc_id`` (canaries are
    addressed by ``(patient_id, doc_id)``)."""
    if any(d is None for d in notes):
        raise InputError("a note of a patient chosen for a canary has no doc_id", column="doc_id")
    if len(set(notes)) != len(notes):
        (twice, _), *_ = Counter(notes).most_common(1)
        raise InputError(
            f"the doc_id {twice!r} names several notes of a patient chosen for a canary: "
            "canaries are addressed by (patient_id, doc_id), which must then be unique",
            column="doc_id",
        )


def _append(
    batch: pa.RecordBatch, text_at: int, rows: list[int], extra: list[str]
) -> pa.RecordBatch:
    """``batch`` with ``extra[i]`` appended to the text of row ``rows[i]``."""
    text = batch.column(text_at)
    if text.null_count and any(not text[r].is_valid for r in rows):
        r = next(r for r in rows if not text[r].is_valid)
        doc = batch.column("doc_id")[r].as_py()
        raise InputError(f"the note {doc!r}, chosen for a canary, has no text", column="text")
    tails = [""] * batch.num_rows
    for r, tail in zip(rows, extra, strict=True):
        tails[r] = tail
    joined = pc.binary_join_element_wise(
        text.cast(pa.large_string()),
        pa.array(tails, pa.large_string()),
        pa.scalar("", pa.large_string()),
    )
    return batch.set_column(text_at, batch.schema.field(text_at), joined.cast(text.type))


def read_canaries(path: str | os.PathLike[str]) -> pa.Table:
    """The canaries of a ``canaries`` output (:data:`CANARY_SCHEMA`, one row per canary).

    Raises
    ------
    InputError
        When ``path`` is not a complete dataset, or not one the canaries stage wrote.
    """
    manifest = check_dataset(path)
    if manifest.get("stage") != "canaries":
        raise InputError(
            f"not a canaries output (its stage is {manifest.get('stage')!r}); run "
            "`phisieve canaries` first",
            path=path,
        )
    f = side_file(path, CANARIES_FILE)
    if not f.is_file():
        raise InputError(f"the canaries output has no {CANARIES_FILE}", path=path)
    table = pq.read_table(f)
    for name, value in (("new_patient", False), ("included", True)):  # older outputs
        if name not in table.column_names:
            table = table.append_column(
                pa.field(name, pa.bool_(), nullable=False),
                pa.array([value] * table.num_rows, pa.bool_()),
            )
    return table


def _parse_list(option: str, value: str) -> list[str]:
    items = [s.strip() for s in str(value).split(",")]
    if not items or any(not s for s in items):
        raise ConfigError(f"{option} takes a comma-separated list, not {value!r}")
    return items
