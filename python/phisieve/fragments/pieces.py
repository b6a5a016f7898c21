"""Fragments cut from notes: the chunkers' NPs and VPs with their words (under the index's
normalisation), and what the report counts about the notes they came from.

:class:`Cutter` is the reduce step the engine runs on pieces of the corpus; its results are
combined with :func:`combine`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from ..io.sources import open_source, require_columns, string_array
from ..text.words import tokenize

__all__ = ["CUT", "Cut", "Cutter", "combine"]

CUT = pa.schema(
    [
        pa.field("source_doc", pa.string()),
        pa.field("source_patient", pa.string()),
        pa.field("start", pa.int32()),
        pa.field("end", pa.int32()),
        pa.field("kind", pa.string()),
        pa.field("length", pa.int32()),
        pa.field("text", pa.string()),
        pa.field("words", pa.list_(pa.string())),
        pa.field("gold", pa.list_(pa.string())),
    ]
)
"""Every fragment cut, widened to whole words (phisieve's words, as the index cuts them):
where it comes from (document, patient, code points), its kind,
length (the parser's words), text, normalised words (the words of the note that overlap it)
and, with gold spans, the label of each of its words inside one (``gold``)."""


@dataclass
class Cut:
    """What cutting a piece of the corpus gave."""

    fragments: pa.Table
    notes: int = 0
    words: int = 0
    words_in_fragments: int = 0
    gold_words: Counter[str] = field(default_factory=Counter)
    """Words of the notes inside a gold span, by label (the full text's PHI)."""


@dataclass
class Cutter:
    """Cut the fragments of a piece of the corpus (documents with ``doc_id``,
    ``patient_id`` and ``text``).

    Parameters
    ----------
    chunker
        A chunker (:mod:`phisieve.fragments.chunkers`): texts -> chunks.
    normalize
        The words' normalisation (the index's).
    gold
        Optional: per document id, its gold spans ``(start, end, label)`` (for the report).
    batch_rows
        Notes handed to the chunker at a time (the fragments never depend on it).

    A reduce step (:meth:`phisieve.pipeline.stage.Context.pieces`): the engine draws the
    progress of the notes read.
    """

    chunker: Any
    normalize: str = "nfkc_lower"
    gold: dict[str, list[tuple[int, int, str]]] | None = None
    batch_rows: int = 256

    def __call__(self, piece: Any) -> Cut:
        src = open_source(piece, batch_size=self.batch_rows)
        require_columns(src.schema, ["doc_id", "patient_id", "text"], src.name)
        cut = Cut(CUT.empty_table())
        tables = []
        for batch in src.batches(["doc_id", "patient_id", "text"]):
            for b in pa.Table.from_batches([batch]).to_batches(self.batch_rows):
                tables.append(self._batch(b, cut))
        cut.fragments = pa.concat_tables([cut.fragments, *tables])
        return cut

    def _batch(self, batch: pa.RecordBatch, cut: Cut) -> pa.Table:
        docs = string_array(batch.column(0)).to_pylist()
        patients = string_array(batch.column(1)).to_pylist()
        texts = string_array(batch.column(2)).to_pylist()
        chunks = self.chunker(texts)
        words = tokenize(pa.array([t or "" for t in texts], pa.large_string()), self.normalize)
        cols: dict[str, list[Any]] = {name: [] for name in CUT.names}
        for i, doc in enumerate(docs):
            text = texts[i] or ""
            starts = np.asarray(words.column("starts")[i].values, dtype=np.int64)
            ends = np.asarray(words.column("ends")[i].values, dtype=np.int64)
            normal = words.column("words")[i].values.to_pylist()
            labels = _word_labels(starts, ends, (self.gold or {}).get(doc, []))
            cut.notes += 1
            cut.words += len(starts)
            cut.gold_words.update(x for x in labels if x is not None)
            covered = np.zeros(len(starts), dtype=bool)
            for start, end, kind, length in chunks[i]:
                first = int(np.searchsorted(ends, start, side="right"))
                last = int(np.searchsorted(starts, end, side="left"))
                if first < last:
                    # Out to whole words: a parser token may end inside one of phisieve's
                    # words ("d" of "MD'd"), which the filters would not see as shared.
                    start = min(start, int(starts[first]))
                    end = max(end, int(ends[last - 1]))
                covered[first:last] = True
                cols["source_doc"].append(doc)
                cols["source_patient"].append(patients[i])
                cols["start"].append(start)
                cols["end"].append(end)
                cols["kind"].append(kind)
                cols["length"].append(length)
                cols["text"].append(text[start:end])
                cols["words"].append(normal[first:last])
                cols["gold"].append([x for x in labels[first:last] if x is not None])
            cut.words_in_fragments += int(covered.sum())
        return pa.table(cols, schema=CUT)


def _word_labels(
    starts: np.ndarray, ends: np.ndarray, spans: list[tuple[int, int, str]]
) -> list[str | None]:
    """Each word's gold label: that of a span it overlaps (``None``: outside every span)."""
    labels: list[str | None] = [None] * len(starts)
    for start, end, label in spans:
        first = int(np.searchsorted(ends, start, side="right"))
        last = int(np.searchsorted(starts, end, side="left"))
        for j in range(first, last):
            labels[j] = label
    return labels


def combine(cuts: list[Cut]) -> Cut:
    """One :class:`Cut` from those of pieces that split the corpus: the fragments sorted by
    (document, start, end, kind), so the result never depends on the pieces."""
    table = pa.concat_tables([c.fragments for c in cuts]).sort_by(
        [("source_doc", "ascending"), ("start", "ascending"), ("end", "ascending"),
         ("kind", "ascending")]
    )  # fmt: skip
    gold: Counter[str] = Counter()
    for c in cuts:
        gold.update(c.gold_words)
    return Cut(
        table,
        notes=sum(c.notes for c in cuts),
        words=sum(c.words for c in cuts),
        words_in_fragments=sum(c.words_in_fragments for c in cuts),
        gold_words=gold,
    )
