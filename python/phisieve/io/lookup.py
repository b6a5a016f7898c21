"""A fixed set of strings looked up by many batches: :class:`StringIndex`."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import _core
from .sources import string_array

__all__ = ["StringIndex", "string_hashes"]


def string_hashes(values: pa.Array) -> np.ndarray:
    """The strings' 64-bit hashes (:func:`phisieve._core.id_hashes`; a null hashes as 0)."""
    h = _core.id_hashes(string_array(values))
    return pc.fill_null(h, 0).to_numpy(zero_copy_only=False)


class StringIndex:
    """The row of each string of ``values`` (no nulls), for lookups by many batches.

    ``pc.is_in`` and ``pc.index_in`` build a hash table of their value set at every call, so
    a batch's lookup cost grows with the set (a corpus's direct terms or patients, looked up
    once per batch: quadratic in the corpus). Here the strings' 64-bit hashes are sorted
    once; a lookup is a sorted search, each hit checked against the string itself (a
    collision falls back to the strings of that hash).
    """

    def __init__(self, values: pa.Array | pa.ChunkedArray) -> None:
        self.values = string_array(values)
        hashes = string_hashes(self.values)
        self._order = np.argsort(hashes, kind="stable")
        self._hashes = hashes[self._order]

    def __len__(self) -> int:
        return len(self.values)

    def find(self, ids: pa.Array | pa.ChunkedArray | list[str]) -> np.ndarray:
        """The row of each of ``ids`` in :attr:`values` (int64; -1: absent, and for a null)."""
        given = isinstance(ids, (pa.Array, pa.ChunkedArray))
        ids = string_array(ids if given else pa.array(ids, pa.string()))
        if not len(self.values) or not len(ids):
            return np.full(len(ids), -1, np.int64)
        # A batch repeats its strings (words, patients): each distinct one is looked up once.
        encoded = pc.dictionary_encode(ids)
        rows = np.append(self._rows(encoded.dictionary), -1)
        codes = pc.fill_null(encoded.indices, len(encoded.dictionary))
        return rows[codes.to_numpy(zero_copy_only=False)]

    def _rows(self, ids: pa.Array) -> np.ndarray:
        rows = np.full(len(ids), -1, np.int64)
        if not len(self.values) or not len(ids):
            return rows
        q = string_hashes(ids)
        at = np.minimum(np.searchsorted(self._hashes, q), len(self._hashes) - 1)
        hit = np.flatnonzero(self._hashes[at] == q)
        if not len(hit):
            return rows
        rows[hit] = self._order[at[hit]]
        same = pc.equal(self.values.take(pa.array(rows[hit])), ids.take(pa.array(hit)))
        for i in hit[~pc.fill_null(same, False).to_numpy(zero_copy_only=False)]:
            rows[i] = self._search(ids[i].as_py(), q[i])  # hashes collide: check them all
        return rows

    def contains(self, ids: pa.Array | pa.ChunkedArray | list[str]) -> np.ndarray:
        """Whether each of ``ids`` is one of :attr:`values` (bool; a null is not)."""
        return self.find(ids) >= 0

    def _search(self, value: str | None, h: np.uint64) -> int:
        lo = int(np.searchsorted(self._hashes, h, side="left"))
        hi = int(np.searchsorted(self._hashes, h, side="right"))
        for j in range(lo, hi):
            row = int(self._order[j])
            if value is not None and self.values[row].as_py() == value:
                return row
        return -1
