"""Mixing fragments into training examples, none of which links two pieces of one record.

Every fragment is drawn up to ``reuse`` times: each copy gets a keyed hash of (seed,
document, offsets, kind, copy), and each kind's copies are dealt in the order of their
hashes (equal hashes, never seen, in the order of document, offsets and copy). An example
takes the next ``nps`` NPs and ``vps`` VPs whose documents *and* patients differ from every
other piece of the example; a copy skipped for that stays for a later example. Dealing
stops when one kind runs out (VPs, usually). The examples are therefore a pure function of
the seed and of the set of fragments: never of the order the notes came in, of batch sizes
or of worker counts.

The ``fragment`` stage mixes each block of the corpus apart (:mod:`phisieve.fragments.make`),
each with its own seed, a keyed hash of the stage's seed and the block's number
(:func:`block_seed`).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigError
from ..io.schema import FRAGMENTS, PART

__all__ = ["FRAGMENTS", "PART", "block_seed", "mix"]

LOOKAHEAD = 100_000
"""How far past a kind's first free copy an example looks for one from a new document and
patient before dealing stops."""


def block_seed(seed: int, block: int) -> int:
    """The seed of block number ``block``: a keyed hash (the key: ``seed``) of the block's
    number, so that no two blocks deal their copies in a related order."""
    key = hashlib.blake2b(str(seed).encode(), digest_size=16).digest()
    data = f"block\x1f{block}".encode()
    return int.from_bytes(hashlib.blake2b(data, key=key, digest_size=8).digest(), "big")


CHUNK = 65_536
"""Fragments hashed at a time (their columns read into Python a slice at a time)."""


def _codes(column: pa.ChunkedArray) -> np.ndarray:
    """Per row, a number that is the same for equal values (nulls too)."""
    encoded = column.combine_chunks().dictionary_encode()
    return encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def _order(rows: pa.Table, kind: str, reuse: int, seed: int) -> np.ndarray:
    """The copies of one kind's fragments ``rows`` in the order of their keyed hashes (then,
    for equal hashes, of their document, offsets and copy number): the copy ``row * reuse +
    copy`` of each place in turn."""
    key = hashlib.blake2b(str(seed).encode(), digest_size=16).digest()
    hashes = np.empty(rows.num_rows * reuse, dtype=np.uint64)
    for first in range(0, rows.num_rows, CHUNK):
        part = rows.slice(first, CHUNK)
        cols = [part.column(c).to_pylist() for c in ("source_doc", "start", "end")]
        hashes[first * reuse : (first + part.num_rows) * reuse] = np.fromiter(
            (
                int.from_bytes(
                    hashlib.blake2b(
                        f"{doc}\x1f{start}\x1f{end}\x1f{kind}\x1f{copy}".encode(), key=key,
                        digest_size=8,
                    ).digest(),
                    "big",
                )
                for doc, start, end in zip(*cols, strict=True)
                for copy in range(reuse)
            ),
            dtype=np.uint64,
            count=part.num_rows * reuse,
        )  # fmt: skip
    order = np.argsort(hashes, kind="stable")
    ranked = hashes[order]

    def tie_key(k: int) -> tuple[Any, ...]:
        r = k // reuse
        return (*(rows.column(c)[r].as_py() for c in ("source_doc", "start", "end")), k % reuse)

    for lo, hi in _runs(np.flatnonzero(ranked[1:] == ranked[:-1])):
        # Equal 64-bit hashes (never seen): ordered as the module says all the same.
        order[lo:hi] = sorted(order[lo:hi].tolist(), key=tie_key)
    return order


def _runs(ties: np.ndarray) -> list[tuple[int, int]]:
    """The runs ``(first, end)`` of sorted positions whose hashes are equal, from the
    positions ``i`` whose hash equals that of ``i + 1``."""
    runs: list[tuple[int, int]] = []
    for i in ties.tolist():
        if runs and runs[-1][1] == i + 1:
            runs[-1] = (runs[-1][0], i + 2)
        else:
            runs.append((i, i + 2))
    return runs


class _Deck:
    """One kind's copies, dealt in order; a copy skipped stays for later. Each copy is the
    row of its fragment, with its document's and patient's numbers (:func:`_codes`)."""

    def __init__(self, rows: np.ndarray, docs: np.ndarray, patients: np.ndarray) -> None:
        self.rows, self.docs, self.patients = rows, docs.tolist(), patients.tolist()
        self.taken = np.zeros(len(rows), dtype=bool)
        self.head = 0

    def __len__(self) -> int:
        return len(self.rows)

    def pick(self, count: int, patients: set[int], docs: set[int]) -> list[int] | None:
        picked: list[int] = []
        seen_p, seen_d = set(patients), set(docs)
        i, scanned = self.head, 0
        while len(picked) < count and i < len(self.rows) and scanned < LOOKAHEAD:
            if not self.taken[i]:
                patient, doc = self.patients[i], self.docs[i]
                if patient not in seen_p and doc not in seen_d:
                    picked.append(i)
                    seen_p.add(patient)
                    seen_d.add(doc)
                scanned += 1
            i += 1
        return picked if len(picked) == count else None

    def take(self, picked: list[int]) -> None:
        self.taken[picked] = True
        while self.head < len(self.rows) and self.taken[self.head]:
            self.head += 1

    @property
    def used(self) -> int:
        return int(self.taken.sum())


def mix(
    fragments: pa.Table, *, nps: int = 2, vps: int = 2, reuse: int = 1, seed: int = 0
) -> tuple[pa.Table, dict[str, Any]]:
    """Examples of ``nps`` NPs and ``vps`` VPs (see the module's documentation).

    Parameters
    ----------
    fragments
        The fragments that may be shared: ``source_doc``, ``source_patient``, ``start``,
        ``end``, ``kind``, ``text``.
    nps, vps
        Pieces of each kind per example; the pieces alternate NP, VP, NP, VP...
    reuse
        Times a fragment may be used.
    seed
        The draw's seed.

    Returns
    -------
    examples
        A ``fragments`` table (:data:`FRAGMENTS`), ``example_id`` from 0.
    supply
        Fragments and copies of each kind, those used, the examples made and the kind that
        ran out.

    The decks hold numbers (rows, documents, patients), not Python objects: the texts are
    read for the pieces used only.
    """
    if nps < 0 or vps < 0 or nps + vps < 1:
        raise ConfigError(f"an example needs at least one piece (--nps {nps} --vps {vps})")
    if reuse < 1:
        raise ConfigError(f"reuse must be at least 1, got {reuse}")
    doc_codes = _codes(fragments.column("source_doc"))
    patient_codes = _codes(fragments.column("source_patient"))
    kinds = fragments.column("kind")
    decks = {}
    for kind in ("NP", "VP"):
        mine = np.flatnonzero(pc.equal(kinds, kind).to_numpy(zero_copy_only=False))
        places = fragments.select(["source_doc", "start", "end"]).take(mine)
        rows = mine[_order(places, kind, reuse, seed) // reuse]
        decks[kind] = _Deck(rows, doc_codes[rows], patient_codes[rows])
    need = [("NP", nps), ("VP", vps)]
    pieces: list[int] = []  # the fragments' rows, example after example
    piece_kinds: list[str] = []
    ran_out = None
    while ran_out is None:
        patients: set[int] = set()
        docs: set[int] = set()
        picks: dict[str, list[int]] = {}
        for kind, count in need:
            got = decks[kind].pick(count, patients, docs)
            if got is None:
                ran_out = kind
                break
            picks[kind] = got
            patients.update(decks[kind].patients[i] for i in got)
            docs.update(decks[kind].docs[i] for i in got)
        if ran_out is not None:
            break
        for kind, got in picks.items():
            decks[kind].take(got)
        for kind, i in _alternate(picks.get("NP", []), picks.get("VP", [])):
            pieces.append(int(decks[kind].rows[i]))
            piece_kinds.append(kind)
    examples = _examples(fragments, pieces, piece_kinds, nps + vps)
    supply: dict[str, Any] = {"examples": examples.num_rows, "ran_out": ran_out}
    for kind, deck in decks.items():
        supply[kind] = {"fragments": len(deck) // reuse, "copies": len(deck), "used": deck.used}
    return examples, supply


def _examples(fragments: pa.Table, pieces: list[int], kinds: list[str], width: int) -> pa.Table:
    """The ``fragments`` table of examples of ``width`` pieces each: the rows ``pieces`` of
    ``fragments`` (of kinds ``kinds``) in turn."""
    rows = pa.array(pieces, pa.int64())

    def column(name: str) -> pa.Array:
        return fragments.column(name).take(rows).combine_chunks().cast(pa.string())

    text = column("text")
    struct = pa.StructArray.from_arrays(
        [text, pa.array(kinds, pa.string()), column("source_doc"), column("source_patient")],
        fields=list(PART),
    )
    count = len(pieces) // width
    offsets = pa.array(np.arange(count + 1, dtype=np.int32) * width)
    texts = text.to_pylist()
    return pa.table(
        {
            "example_id": pa.array(np.arange(count, dtype=np.uint64)),
            "text": pa.array(
                [" ".join(texts[j : j + width]) for j in range(0, len(texts), width)],
                pa.large_string(),
            ),
            "parts": pa.ListArray.from_arrays(offsets, struct, type=pa.list_(PART)),
        },
        schema=FRAGMENTS,
    )


def _alternate(nps: list[int], vps: list[int]) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for j in range(max(len(nps), len(vps))):
        if j < len(nps):
            out.append(("NP", nps[j]))
        if j < len(vps):
            out.append(("VP", vps[j]))
    return out
