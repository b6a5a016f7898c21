"""Annotated notes re-filled with fresh surrogates: training data that teaches where PHI goes
rather than which PHI these patients have (PHICON, Yue & Zhou 2020).

A model trained on annotated notes learns their names, places and numbers as much as the
contexts they sit in; on new patients only the contexts carry over. Each copy of a note has
every gold span replaced by a placeholder of its category (:func:`~phisieve.phi.gold.
to_placeholders`, equal text within a patient -> equal placeholder) and the placeholders filled
with keyed surrogates (:class:`~phisieve.phi.surrogate.SurrogateFiller`): the same note with
other names, places, phone numbers and dates shifted, and gold spans that say where they are.
Every copy has its own key, made from ``seed`` and the copy's number, so the copies differ from
each other and the same seed gives the same copies.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigError, InputError
from ..io.schema import SPANS
from ..io.sources import require_columns
from .gold import gold_by_doc, placeholder_text, to_placeholders
from .surrogate import SurrogateFiller, latest_years

__all__ = ["COPY_MARK", "refilled"]

COPY_MARK = "#refill"
"""What a copy's ``doc_id`` adds to its note's: ``{doc_id}#refill{n}``, n from 1."""


def _has_placeholder(label: str) -> bool:
    try:
        placeholder_text(label, "x", 1)
    except InputError:
        return False
    return True


def _key(seed: int, copy: int) -> bytes:
    return hashlib.sha256(f"phisieve-refill:{seed}:{copy}".encode()).digest()


def refilled(
    documents: pa.Table, gold: pa.Table, copies: int, seed: int = 0, *, locale: str = "en_US"
) -> tuple[pa.Table, pa.Table, dict[str, Any]]:
    """``copies`` copies of annotated notes, their gold PHI re-filled with fresh surrogates.

    Parameters
    ----------
    documents
        ``doc_id``, ``text`` and ``patient_id`` (where it is missing or null, the note is its
        own patient).
    gold
        ``doc_id``, ``spans``: the gold spans of the notes.
    copies
        How many copies of each note (0: none).
    seed
        The key of the surrogates (not a secret: the copies are training data, not output).
    locale
        Faker locale of the surrogates.

    Returns
    -------
    (pyarrow.Table, pyarrow.Table, dict)
        The copies (``doc_id`` as ``{doc_id}#refill{n}``, ``patient_id`` and ``text``, all
        strings), their gold (``doc_id``, ``spans``: the surrogates, labelled with their
        kinds), and counts: ``copied`` notes per copy, and ``skipped``, the notes left out
        because a gold label of theirs has no placeholder category (they are not copied, as
        their other spans could not be re-filled around it).
    """
    if isinstance(copies, bool) or not isinstance(copies, int) or copies < 0:
        raise ConfigError(f"the number of copies must be a whole number >= 0, not {copies!r}")
    require_columns(documents.schema, ["doc_id", "text"], "documents")
    doc_ids = documents.column("doc_id").cast(pa.string())
    patients = (
        pc.coalesce(documents.column("patient_id").cast(pa.string()), doc_ids)
        if "patient_id" in documents.column_names
        else doc_ids
    )
    notes = pa.table({"doc_id": doc_ids, "patient_id": patients, "text": documents["text"]})
    spans = gold_by_doc(gold.set_column(0, "doc_id", gold.column("doc_id").cast(pa.string())))
    labels = {s["label"] for found in spans.values() for s in found}
    unknown = {label for label in labels if not _has_placeholder(label)}
    skip = sorted(d for d, found in spans.items() if any(s["label"] in unknown for s in found))
    skipped = pc.is_in(notes["doc_id"], value_set=pa.array(skip, pa.string()))
    notes = notes.filter(pc.invert(pc.or_(skipped, pc.is_null(notes["text"]))))
    counts = {"copied": notes.num_rows if copies else 0, "skipped": len(skip)}
    if copies == 0 or notes.num_rows == 0:
        no_gold = pa.table({"doc_id": pa.array([], pa.string()), "spans": pa.array([], SPANS)})
        return notes.slice(0, 0), no_gold, counts
    placed, _ = to_placeholders(notes, {d: s for d, s in spans.items() if d not in skip})
    anchors = latest_years(placed)
    docs_out, gold_out = [], []
    for n in range(1, copies + 1):
        filler = SurrogateFiller(_key(seed, n), locale=locale, anchors=dict(anchors))
        filled = pa.Table.from_batches([filler.fill(placed)])
        ids = pc.binary_join_element_wise(filled["doc_id"], pa.scalar(f"{COPY_MARK}{n}"), "")
        docs_out.append(
            pa.table({"doc_id": ids, "patient_id": filled["patient_id"], "text": filled["text"]})
        )
        gold_out.append(pa.table({"doc_id": ids, "spans": filled["spans"]}))
    return pa.concat_tables(docs_out), pa.concat_tables(gold_out), counts
