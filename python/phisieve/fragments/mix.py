"""Mixing fragments into training examples, none of which links two pieces of one record.

Every fragment is drawn up to ``reuse`` times: each copy gets a keyed hash of (seed,
document, offsets, kind, copy), and each kind's copies are dealt in the order of their
hashes. An example takes the next ``nps`` NPs and ``vps`` VPs whose documents *and*
patients differ from every other piece of the example; a copy skipped for that stays for a
later example. Dealing stops when one kind runs out (VPs, usually). The examples are
therefore a pure function of the seed and of the set of fragments: never of the order the
notes came in, of batch sizes or of worker counts.

The ``fragment`` stage mixes each block of the corpus apart (:mod:`phisieve.fragments.make`),
each with its own seed, a keyed hash of the stage's seed and the block's number
(:func:`block_seed`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import ConfigError
from ..io.schema import FRAGMENTS, PART

__all__ = ["FRAGMENTS", "PART", "block_seed", "mix"]

LOOKAHEAD = 100_000
"""How far past a kind's first free copy an example looks for one from a new document and
patient before dealing stops."""


@dataclass(frozen=True, slots=True)
class _Copy:
    doc: str
    patient: str
    text: str


def block_seed(seed: int, block: int) -> int:
    """The seed of block number ``block``: a keyed hash (the key: ``seed``) of the block's
    number, so that no two blocks deal their copies in a related order."""
    key = hashlib.blake2b(str(seed).encode(), digest_size=16).digest()
    data = f"block\x1f{block}".encode()
    return int.from_bytes(hashlib.blake2b(data, key=key, digest_size=8).digest(), "big")


def _order(fragments: pa.Table, kind: str, reuse: int, seed: int) -> list[_Copy]:
    """The copies of one kind's fragments in the order of their keyed hashes."""
    key = hashlib.blake2b(str(seed).encode(), digest_size=16).digest()
    rows = fragments.filter(pa.compute.equal(fragments.column("kind"), kind))
    cols = [rows.column(c).to_pylist() for c in ("source_doc", "source_patient", "start", "end")]
    texts = rows.column("text").to_pylist()
    keyed = []
    for doc, patient, start, end, text in zip(*cols, texts, strict=True):
        for copy in range(reuse):
            data = f"{doc}\x1f{start}\x1f{end}\x1f{kind}\x1f{copy}".encode()
            h = hashlib.blake2b(data, key=key, digest_size=8).digest()
            keyed.append((h, doc, start, end, copy, _Copy(doc, patient, text)))
    keyed.sort(key=lambda k: k[:5])
    return [k[-1] for k in keyed]


class _Deck:
    """One kind's copies, dealt in order; a copy skipped stays for later."""

    def __init__(self, copies: list[_Copy]) -> None:
        self.copies = copies
        self.taken = np.zeros(len(copies), dtype=bool)
        self.head = 0

    def pick(self, count: int, patients: set[str], docs: set[str]) -> list[int] | None:
        picked: list[int] = []
        seen_p, seen_d = set(patients), set(docs)
        i, scanned = self.head, 0
        while len(picked) < count and i < len(self.copies) and scanned < LOOKAHEAD:
            if not self.taken[i]:
                c = self.copies[i]
                if c.patient not in seen_p and c.doc not in seen_d:
                    picked.append(i)
                    seen_p.add(c.patient)
                    seen_d.add(c.doc)
                scanned += 1
            i += 1
        return picked if len(picked) == count else None

    def take(self, picked: list[int]) -> None:
        self.taken[picked] = True
        while self.head < len(self.copies) and self.taken[self.head]:
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
    """
    if nps < 0 or vps < 0 or nps + vps < 1:
        raise ConfigError(f"an example needs at least one piece (--nps {nps} --vps {vps})")
    if reuse < 1:
        raise ConfigError(f"reuse must be at least 1, got {reuse}")
    decks = {kind: _Deck(_order(fragments, kind, reuse, seed)) for kind in ("NP", "VP")}
    need = [("NP", nps), ("VP", vps)]
    texts: list[str] = []
    parts: list[list[dict[str, str]]] = []
    ran_out = None
    while ran_out is None:
        patients: set[str] = set()
        docs: set[str] = set()
        picks: dict[str, list[int]] = {}
        for kind, count in need:
            got = decks[kind].pick(count, patients, docs)
            if got is None:
                ran_out = kind
                break
            picks[kind] = got
            for i in got:
                patients.add(decks[kind].copies[i].patient)
                docs.add(decks[kind].copies[i].doc)
        if ran_out is not None:
            break
        for kind, got in picks.items():
            decks[kind].take(got)
        order = _alternate(picks.get("NP", []), picks.get("VP", []))
        pieces = [(kind, decks[kind].copies[i]) for kind, i in order]
        texts.append(" ".join(c.text for _, c in pieces))
        parts.append(
            [
                {"text": c.text, "kind": kind, "source_doc": c.doc, "source_patient": c.patient}
                for kind, c in pieces
            ]
        )
    examples = pa.table(
        {
            "example_id": pa.array(np.arange(len(texts), dtype=np.uint64)),
            "text": pa.array(texts, pa.large_string()),
            "parts": pa.array(parts, pa.list_(PART)),
        },
        schema=FRAGMENTS,
    )
    supply: dict[str, Any] = {"examples": len(texts), "ran_out": ran_out}
    for kind, deck in decks.items():
        supply[kind] = {
            "fragments": len(deck.copies) // reuse,
            "copies": len(deck.copies),
            "used": deck.used,
        }
    return examples, supply


def _alternate(nps: list[int], vps: list[int]) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for j in range(max(len(nps), len(vps))):
        if j < len(nps):
            out.append(("NP", nps[j]))
        if j < len(vps):
            out.append(("VP", vps[j]))
    return out
