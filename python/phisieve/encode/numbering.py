"""Corpus-wide sequence numbers that depend on the data alone.

The :class:`~phisieve.encode.batches.Encoder` numbers each patient's sequences 0, 1, 2...
in document order. A sequence's ``seq_id`` is then its patient's **offset** plus that
number, where the offsets are a prefix sum of the patients' sequence counts with the
patients in the order of a fixed hash of their id (:func:`patient_order`). ``seq_id`` is
dense (0 .. sequences - 1) and a pure function of the documents: it does not depend on the
order the documents arrive in, on batch sizes, or on how a cluster partitions them. The
masks (a function of (seed, epoch, seq_id)) and the audit's samples follow from it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

import numpy as np
import pyarrow as pa

from ..io.lookup import StringIndex
from ..io.sources import string_array

__all__ = ["SequenceOffsets", "count_sequences", "patient_order"]


def _order_key(patient: str) -> tuple[bytes, str]:
    return hashlib.blake2b(patient.encode("utf-8"), digest_size=8).digest(), patient


def patient_order(patients: Iterable[str]) -> list[str]:
    """``patients`` in the order of the first 8 bytes of their BLAKE2b digest (ties, which
    never happen in practice, by the id): an order that is stable across versions and
    platforms and says nothing about the patients' ids."""
    return sorted(patients, key=_order_key)


def count_sequences(batches: Iterable[pa.RecordBatch], counts: dict[str, int]) -> None:
    """Add to ``counts`` (patient -> sequences) the sequences of ``encoded`` batches numbered
    within their patient (``patient_id``, ``seq_id``): a patient's count is its largest
    number plus one."""
    for b in batches:
        if b.num_rows == 0:
            continue
        table = pa.table({"p": string_array(b.column("patient_id")), "s": b.column("seq_id")})
        grouped = table.group_by("p").aggregate([("s", "max")])
        for p, s in zip(
            grouped.column("p").to_pylist(), grouped.column("s_max").to_pylist(), strict=True
        ):
            counts[p] = max(counts.get(p, 0), int(s) + 1)


class SequenceOffsets:
    """Each patient's first ``seq_id``, from every patient's sequence count."""

    def __init__(self, counts: Mapping[str, int]) -> None:
        order = patient_order(counts)
        sizes = np.fromiter((counts[p] for p in order), dtype=np.uint64, count=len(order))
        self.patients = pa.array(order, pa.string())
        self._index = StringIndex(self.patients)
        self.offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.uint64)
        self.total = int(sizes.sum())

    def number(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with corpus-wide ``seq_id`` (its own are numbers within the patient)."""
        if batch.num_rows == 0:
            return batch
        at = self._index.find(batch.column("patient_id"))
        if (at < 0).any():  # pragma: no cover - every patient was counted
            raise ValueError("a patient without a sequence count")
        own = batch.column("seq_id").to_numpy(zero_copy_only=False).astype(np.uint64)
        seq = self.offsets[at] + own
        i = batch.schema.get_field_index("seq_id")
        return batch.set_column(i, batch.schema.field(i), pa.array(seq, pa.uint64()))
