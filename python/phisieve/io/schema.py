"""Arrow schemas of the tables phisieve's stages exchange (DESIGN.md section 1)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

DOCUMENTS = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("patient_id", pa.string(), nullable=False),
        pa.field("group_id", pa.string(), nullable=True),
        pa.field("text", pa.large_string(), nullable=False),
    ]
)
"""The ``documents`` table. Readers may add further columns after these four."""

REJECTED = pa.schema(
    [
        pa.field("source", pa.string()),
        pa.field("row", pa.int64()),
        pa.field("column", pa.string()),
        pa.field("reason", pa.string()),
    ]
)
"""Rows a stage could not process: where they came from and why (never their text)."""

TERMS = pa.schema(
    [
        pa.field("term", pa.string(), nullable=False),
        pa.field("n", pa.uint8(), nullable=False),
        pa.field("patients", pa.uint32(), nullable=False),
        pa.field("docs", pa.uint32(), nullable=False),
        pa.field("count", pa.uint64(), nullable=False),
        pa.field("in_span", pa.uint64(), nullable=False),
        pa.field("direct", pa.bool_(), nullable=False),
        pa.field("indirect", pa.bool_(), nullable=False),
        pa.field("patient_ids", pa.list_(pa.field("item", pa.string())), nullable=False),
    ]
)
"""The ``terms`` table: one row per distinct normalised word n-gram (the schema the index
writes, ``phisieve_core::index::terms_schema``). ``in_span``: a single word's occurrences
inside direct-identifier spans (0 for n-grams and for an index made without spans), from
which ``direct`` is marked under the recorded direct scope; ``patient_ids``: up to k patients
using the term, the smallest by ``phisieve._core.id_hashes`` of the id (ties by the id), in
that order."""

SPAN = pa.struct(
    [
        pa.field("start", pa.int32()),
        pa.field("end", pa.int32()),
        pa.field("label", pa.string()),
        pa.field("source", pa.string()),
        pa.field("score", pa.float32()),
    ]
)
"""One span of the ``spans`` table: code-point offsets into ``text``, end exclusive."""

SPANS = pa.list_(SPAN)
"""The ``spans`` column: a document's spans."""


def spans_array(
    documents: int,
    rows: np.ndarray,
    start: pa.Array,
    end: pa.Array,
    label: pa.Array,
    source: pa.Array,
    score: pa.Array,
) -> pa.ListArray:
    """The ``spans`` column of ``documents`` rows from flat spans: span ``i`` belongs to row
    ``rows[i]`` (not decreasing; rows without spans get an empty list)."""
    structs = pa.StructArray.from_arrays(
        [
            start.cast(pa.int32()),
            end.cast(pa.int32()),
            label.cast(pa.string()),
            source.cast(pa.string()),
            score.cast(pa.float32()),
        ],
        fields=list(SPAN),
    )
    offsets = np.searchsorted(rows, np.arange(documents + 1), side="left").astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), structs, type=SPANS)


PART = pa.struct(
    [
        pa.field("text", pa.string()),
        pa.field("kind", pa.string()),
        pa.field("source_doc", pa.string()),
        pa.field("source_patient", pa.string()),
    ]
)
"""One piece of a fragments example: its text, ``NP``/``VP``, and where it was cut from."""

FRAGMENTS = pa.schema(
    [
        pa.field("example_id", pa.uint64(), nullable=False),
        pa.field("text", pa.large_string(), nullable=False),
        pa.field("parts", pa.list_(PART), nullable=False),
    ]
)
"""The ``fragments`` table: one training example per row, made of noun and verb phrases of
different documents and patients (``phisieve fragment``)."""
