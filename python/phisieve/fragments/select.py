"""Which fragments may be shared: none holding a protected word.

A fragment is dropped, for each reason that applies (all are counted):

* ``indirect``: it holds an indirect identifier of the ``terms`` (an n-gram fewer than k
  patients use, for every n the terms were counted with), words compared under the terms'
  normalisation;
* ``span``: it holds a word found inside a direct-identifier span anywhere in the corpus
  (the ``corpus`` direct scope: a name recognised once is dropped everywhere);
* ``rare``: one of its words is used by fewer than ``k`` patients.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["REASONS", "Protected", "select"]

REASONS = ("indirect", "span", "rare")
CHUNK = 65_536
"""Fragments whose words are read into Python at a time."""


@dataclass
class Protected:
    """What the filters compare a fragment's words with.

    Attributes
    ----------
    indirect
        Indirect identifiers by n: the terms' n-grams (words joined by spaces).
    span_words
        Normalised words found inside direct spans.
    patients
        Patients per normalised word (for ``k``); ``None``: no ``rare`` filter.
    k
        A word used by fewer than ``k`` patients is rare.
    """

    indirect: dict[int, set[str]] = field(default_factory=dict)
    span_words: set[str] = field(default_factory=set)
    patients: dict[str, int] | None = None
    k: int = 0

    def reasons(self, words: list[str]) -> list[str]:
        """Why a fragment with these words is dropped (empty: kept)."""
        out = []
        for n, terms in self.indirect.items():
            if any(" ".join(words[i : i + n]) in terms for i in range(len(words) - n + 1)):
                out.append("indirect")
                break
        if self.span_words and any(w in self.span_words for w in words):
            out.append("span")
        patients = self.patients
        if patients is not None and any(patients.get(w, 0) < self.k for w in words):
            out.append("rare")
        return out


def indirect_terms(terms: pa.Table) -> dict[int, set[str]]:
    """The indirect identifiers of a ``terms`` table, by n."""
    rows = terms.filter(pc.field("indirect"))
    out: dict[int, set[str]] = {}
    for n, term in zip(rows.column("n").to_pylist(), rows.column("term").to_pylist(), strict=True):
        out.setdefault(int(n), set()).add(term)
    return out


def word_patients(terms: pa.Table) -> dict[str, int]:
    """Patients per word (the unigrams of a ``terms`` table)."""
    rows = terms.filter(pc.equal(terms.column("n"), 1))
    return dict(
        zip(rows.column("term").to_pylist(), rows.column("patients").to_pylist(), strict=True)
    )


def select(
    fragments: pa.Table, protected: Protected
) -> tuple[np.ndarray, dict[str, int], dict[str, np.ndarray]]:
    """Which ``fragments`` (a :data:`~phisieve.fragments.pieces.CUT` table) are kept.

    Returns
    -------
    keep
        A boolean mask over the rows.
    dropped
        Fragments dropped for each reason (a fragment may count under several).
    masks
        Per reason, the rows it drops.
    """
    n = fragments.num_rows
    masks = {r: np.zeros(n, dtype=bool) for r in REASONS}
    column = fragments.column("words")
    for first in range(0, n, CHUNK):  # a slice at a time as Python lists
        for i, ws in enumerate(column.slice(first, CHUNK).to_pylist(), first):
            for reason in protected.reasons(ws or []):
                masks[reason][i] = True
    drop = np.zeros(n, dtype=bool)
    for m in masks.values():
        drop |= m
    return ~drop, {r: int(m.sum()) for r, m in masks.items()}, masks
