"""Arrow schemas of the tables phisieve's stages exchange (DESIGN.md section 1)."""

from __future__ import annotations

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
        pa.field("direct", pa.bool_(), nullable=False),
        pa.field("indirect", pa.bool_(), nullable=False),
    ]
)
"""The ``terms`` table: one row per distinct normalised word n-gram."""
