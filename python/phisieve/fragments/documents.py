"""A ``fragments`` dataset read as documents: each example its own document and "patient"
(``doc_id`` = ``patient_id`` = its ``example_id``), so that ``encode`` packs one example per
sequence and never puts two examples' fragments, which may share a patient, together."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from ..io.schema import FRAGMENTS
from ..io.sources import BatchSource

__all__ = ["as_documents", "is_fragments"]

_DOCS = pa.schema(
    [
        pa.field("doc_id", pa.string()),
        pa.field("patient_id", pa.string()),
        pa.field("text", pa.large_string()),
    ]
)


def is_fragments(schema: pa.Schema) -> bool:
    """Whether ``schema`` is a ``fragments`` table's."""
    return all(name in schema.names for name in FRAGMENTS.names)


def as_documents(src: BatchSource) -> BatchSource:
    """``src`` (a fragments dataset) as documents: ``doc_id``, ``patient_id`` (both the
    example's id, as a string) and ``text``."""

    def batches(columns: list[str] | None) -> Iterator[pa.RecordBatch]:
        for b in src.batches(["example_id", "text"]):
            ids = b.column(0).cast(pa.string())
            table = pa.RecordBatch.from_arrays([ids, ids, b.column(1)], schema=_DOCS)
            yield table if columns is None else table.select(columns)

    return BatchSource(batches, _DOCS, src.reiterable, src.name, src.num_rows)
