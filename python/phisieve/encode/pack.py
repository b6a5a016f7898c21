"""The ``encoded`` table. Packing each patient's consecutive documents into its rows
(sequences of at most ``max_len`` tokens that never mix patients) is ``_core.Packer``
(``phisieve_core::pack``); ``tests/reference.py`` keeps a plain Python reference of it."""

from __future__ import annotations

import pyarrow as pa

__all__ = ["ENCODED"]

ENCODED = pa.schema(
    [
        pa.field("seq_id", pa.uint64(), nullable=False),
        pa.field("patient_id", pa.string(), nullable=False),
        pa.field("doc_ids", pa.list_(pa.string()), nullable=False),
        pa.field("input_ids", pa.list_(pa.uint32()), nullable=False),
        pa.field("word_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("protected", pa.list_(pa.bool_()), nullable=False),
        pa.field("direct", pa.list_(pa.bool_()), nullable=False),
        pa.field("indirect", pa.list_(pa.bool_()), nullable=False),
    ]
)
"""The ``encoded`` table (DESIGN.md §1, plus the ``indirect`` flags the IPP baseline needs).
``word_ids`` number the words of a sequence 0, 1, 2...; -1 marks tokens outside any word
(special tokens, punctuation)."""
