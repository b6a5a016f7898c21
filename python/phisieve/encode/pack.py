"""Packing: each patient's consecutive documents into sequences of at most ``max_len``
tokens (sequences never mix patients), as rows of the ``encoded`` table."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..errors import ConfigError
from .tokenizer import SpecialTokens

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


@dataclass
class _Sequence:
    patient: str
    doc_ids: list[str] = field(default_factory=list)
    parts: list[tuple[np.ndarray, ...]] = field(default_factory=list)
    length: int = 0
    has_word: bool = False


class _Packer:
    """Packs one patient's documents into sequences of at most ``max_len`` tokens."""

    def __init__(self, max_len: int, special: SpecialTokens) -> None:
        self.special = special
        self.capacity = max_len - len(special.prefix) - len(special.suffix)
        if self.capacity < 2:
            raise ConfigError(f"max_len {max_len} leaves no room for tokens")
        self.current: _Sequence | None = None
        self.done: list[_Sequence] = []
        self.patient: str | None = None
        self.next_word = 0
        self.dropped_tokens = 0
        """Tokens left out because the sequence they would have formed holds no word."""

    def _emit(self) -> None:
        # A sequence without a word (only separators or punctuation) would be a training
        # row with nothing to learn or mask: it is left out, and its tokens counted.
        if self.current is not None and self.current.length > 0:
            if self.current.has_word:
                self.done.append(self.current)
            else:
                self.dropped_tokens += self.current.length
        self.current = None

    def add(
        self,
        patient: str,
        doc_id: str,
        ids: np.ndarray,
        words: np.ndarray,
        direct: np.ndarray,
        indirect: np.ndarray,
    ) -> None:
        """Append one document; ``words`` are the document's word numbers (-1: none)."""
        if patient != self.patient:
            self._emit()
            self.patient, self.next_word = patient, 0
        if len(ids) == 0:
            return  # a document without tokens adds nothing, not even a separator
        # Patient-wide word numbers, so two documents in one sequence never share a number.
        n_words = int(words.max(initial=-1)) + 1
        words = np.where(words >= 0, words + self.next_word, -1)
        self.next_word += n_words
        n_tokens = len(ids)
        if self.special.doc_end is not None:
            ids = np.append(ids, self.special.doc_end)
            words = np.append(words, -1)
            direct = np.append(direct, False)
            indirect = np.append(indirect, False)
        start = 0
        while start < len(ids):
            if self.current is None:
                self.current = _Sequence(patient)
            room = self.capacity - self.current.length
            end = min(len(ids), start + room)
            # Do not cut inside a word when the word can start the next sequence instead.
            if end < len(ids) and words[end] >= 0 and words[end] == words[end - 1]:
                first = end - 1
                while first > start and words[first - 1] == words[end]:
                    first -= 1
                if first > start or self.current.length > 0:
                    end = first
            if end > start:
                part = (ids[start:end], words[start:end], direct[start:end], indirect[start:end])
                self.current.parts.append(part)
                self.current.has_word = self.current.has_word or bool((part[1] >= 0).any())
                if not self.current.doc_ids or self.current.doc_ids[-1] != doc_id:
                    self.current.doc_ids.append(doc_id)
                self.current.length += end - start
                start = end
            if start >= n_tokens:
                # Only the separator is left and the sequence is full: the end of the
                # sequence ends the document (the separator would otherwise open a sequence
                # of its own, [CLS] [SEP], or one that starts with [SEP]).
                break
            if start < len(ids):
                self._emit()

    def finish_patient(self) -> None:
        """The patient's last sequence is complete (kept even when short)."""
        self._emit()

    def take(self, seq_ids: np.ndarray) -> pa.RecordBatch | None:
        """The finished sequences as an ``encoded`` batch, with these ``seq_id`` (one per
        finished sequence)."""
        if not self.done:
            return None
        sp = self.special
        ids, words, direct, indirect, lengths = [], [], [], [], []
        for s in self.done:
            i = np.concatenate([p[0] for p in s.parts])
            w = np.concatenate([p[1] for p in s.parts])
            # Number the sequence's words 0, 1, 2... in order.
            valid = w >= 0
            new = valid & np.concatenate([[True], w[1:] != w[:-1]])
            local = np.where(valid, np.cumsum(new) - 1, -1)
            d = np.concatenate([p[2] for p in s.parts])
            x = np.concatenate([p[3] for p in s.parts])
            pre, suf = len(sp.prefix), len(sp.suffix)
            if suf and len(i) and i[-1] == sp.suffix[-1]:
                suf = 0  # the last document already ends with [SEP]
            ids.append(np.concatenate([sp.prefix, i, sp.suffix[:suf]]).astype(np.uint32))
            words.append(np.concatenate([[-1] * pre, local, [-1] * suf]).astype(np.int32))
            falses = np.zeros(pre, bool), np.zeros(suf, bool)
            direct.append(np.concatenate([falses[0], d, falses[1]]))
            indirect.append(np.concatenate([falses[0], x, falses[1]]))
            lengths.append(len(ids[-1]))
        offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
        d_all, x_all = np.concatenate(direct), np.concatenate(indirect)

        def lst(values: np.ndarray, t: pa.DataType) -> pa.Array:
            return pa.ListArray.from_arrays(offsets, pa.array(values, t))

        doc_counts = [len(s.doc_ids) for s in self.done]
        doc_offsets = pa.array(np.concatenate([[0], np.cumsum(doc_counts)]).astype(np.int32))
        batch = pa.record_batch(
            [
                pa.array(np.asarray(seq_ids, dtype=np.uint64)),
                pa.array([s.patient for s in self.done], pa.string()),
                pa.ListArray.from_arrays(
                    doc_offsets, pa.array([d for s in self.done for d in s.doc_ids], pa.string())
                ),
                lst(np.concatenate(ids), pa.uint32()),
                lst(np.concatenate(words), pa.int32()),
                lst(d_all | x_all, pa.bool_()),
                lst(d_all, pa.bool_()),
                lst(x_all, pa.bool_()),
            ],
            schema=ENCODED,
        )
        self.done = []
        return batch
