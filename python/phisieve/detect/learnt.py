"""Deny lists grown from annotated notes: the words a site's annotators mark as PHI.

Clinicians, hospitals, units named after people and towns of a hospital's catchment recur
across its patients' notes. A word that annotators marked as PHI in most of the places it
occurs, in the notes of a site's annotated patients, is very likely PHI in its other
patients' notes too: :func:`learn_deny_list` returns such words as a deny list for the
``lists`` recognizer (``phisieve detect --deny``). Fit it on annotated notes only (in
cross-validation, the training folds: :mod:`phisieve.detect.cv`).
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..errors import InputError
from ..text.words import tokenize
from .labels import category

__all__ = ["learn_deny_list", "write_word_list"]


def learn_deny_list(
    documents: pa.Table,
    gold: pa.Table,
    *,
    min_rate: float = 0.5,
    min_patients: int = 1,
    min_length: int = 2,
) -> dict[str, str]:
    """Words annotated as PHI in at least ``min_rate`` of their occurrences.

    Parameters
    ----------
    documents
        ``doc_id``, ``text`` and (optionally) ``patient_id`` of the annotated notes.
    gold
        The ``spans`` table of their gold PHI (``doc_id``, ``spans``).
    min_rate
        The share of a word's occurrences that must lie inside gold spans.
    min_patients
        The number of patients whose notes annotate the word at least once.
    min_length
        Shorter words (initials) are never listed.

    Returns
    -------
    dict
        Normalised word (as :func:`phisieve.text.words.normalize_word`) -> label, the most
        frequent category (:func:`phisieve.detect.labels.category`) of its annotated
        occurrences (ties: alphabetical), alphabetic words only: numbers and dates are the
        rules' work.
    """
    for table, name, cols in (
        (documents, "documents", ("doc_id", "text")),
        (gold, "gold spans", ("doc_id", "spans")),
    ):
        if missing := [c for c in cols if c not in table.column_names]:
            raise InputError(f"the {name} have no {missing[0]!r} column", column=missing[0])
    doc_ids = documents.column("doc_id").cast(pa.string()).to_pylist()
    patients = (
        documents.column("patient_id").cast(pa.string()).to_pylist()
        if "patient_id" in documents.column_names
        else doc_ids
    )
    spans_of = dict(
        zip(
            gold.column("doc_id").cast(pa.string()).to_pylist(),
            gold.column("spans").to_pylist(),
            strict=True,
        )
    )
    starts, ends, words = tokenize(documents.column("text"))
    total: Counter[str] = Counter()
    marked: Counter[str] = Counter()
    labels: defaultdict[str, Counter[str]] = defaultdict(Counter)
    marked_by: defaultdict[str, set[str]] = defaultdict(set)
    for row, (doc, patient) in enumerate(zip(doc_ids, patients, strict=True)):
        ws = words[row].values.to_pylist() if words[row].is_valid else []
        if not ws:
            continue
        s = np.asarray(starts[row].values)
        e = np.asarray(ends[row].values)
        gold_spans = spans_of.get(doc) or []
        # The gold span each word overlaps, -1 for none.
        covering = np.full(len(ws), -1)
        for j, g in enumerate(gold_spans):
            covering[(s < g["end"]) & (e > g["start"])] = j
        for w, c in zip(ws, covering.tolist(), strict=True):
            if w is None or len(w) < min_length or not w.isalpha():
                continue
            total[w] += 1
            if c >= 0:
                marked[w] += 1
                labels[w][_category(gold_spans[c]["label"])] += 1
                marked_by[w].add(patient)
    out = {}
    for w, n in marked.items():
        if n >= min_rate * total[w] and len(marked_by[w]) >= min_patients:
            best = max(sorted(labels[w]), key=lambda k: labels[w][k])
            out[w] = best
    return dict(sorted(out.items()))


def _category(label: str) -> str:
    """The category the trained recognizer tags (NAME, LOCATION...)."""
    return category(label) or "NAME"


def write_word_list(words: dict[str, str], path: str | os.PathLike[str]) -> None:
    """Write ``word<TAB>LABEL`` lines (what :func:`phisieve.detect.read_word_list` reads),
    atomically: a temporary sibling renamed over ``path``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(
        "# learnt from annotated notes (phisieve)\n"
        + "".join(f"{w}\t{label}\n" for w, label in sorted(words.items())),
        encoding="utf-8",
    )
    os.replace(tmp, path)
