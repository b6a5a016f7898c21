"""Which words are direct identifiers beyond the spans that were detected: the scope policy.

A detected (or gold) span of a direct identifier protects the words it overlaps *in place*.
Its words may also be direct identifiers where no span was found: the same surname in
another note of the patient, a nurse's name that the detector found in other patients' notes.
Propagating every word of every span to the whole corpus, as phisieve did first, protected
``in``, ``a``, ``s``, digits, ``care``, ``foley``... everywhere (15% of the PhysioNet tokens).
The scope says how far a span's words reach (DESIGN.md §3):

``span``
    only the words inside a span, where it is;
``patient``
    also every other use, by the same patient, of a word found inside one of the patient's
    spans (digits and single letters included: a date or an initial repeats within a
    patient's notes, and the cost stays within that patient's text);
``identifying`` (default)
    ``patient``, plus corpus-wide the alphabetic words of at least two letters whose uses
    are mostly identifying: at least ``min_share`` (default 0.2) of the word's occurrences
    in the corpus lie inside direct spans. "care" inside one span out of thousands of uses
    stays unprotected; a nurse's surname found in most of its uses is protected everywhere.
    The cost of that rule is bounded: it protects at most ``(1 - min_share) / min_share``
    times as many occurrences as the spans themselves hold;
``corpus``
    the old behaviour: ``patient``, plus every word found inside any span, everywhere.

:class:`SpanWords` collects, in one pass over the documents, each word's occurrences inside
spans; the index stores them per single-word term (the
``terms`` table's ``in_span`` column) and :func:`direct_expr` applies the scope to them and to
the words' counts, so that merged indexes (whose counts add) mark the same words as one.
:func:`corpus_direct_words` applies it to a :class:`SpanWords` directly.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from .. import _core
from ..errors import ConfigError
from ..io.lookup import StringIndex
from ..io.sources import open_source, require_columns, string_array
from .policy import DEFAULT_MIN_SHARE, DEFAULT_SCOPE, check_scope

REASONS = ("span", "patient", "corpus", "indirect")
"""Why a token is protected: inside a direct span of its document; outside them, the same
word as a direct span of the same patient; outside them, a corpus-wide ``direct`` term; an
indirect identifier."""


def merged_spans(spans: list[dict[str, Any]] | None) -> tuple[np.ndarray, np.ndarray]:
    """A document's spans as sorted, disjoint ``(starts, ends)`` (overlapping ones united)."""
    pairs = sorted((int(s["start"]), int(s["end"])) for s in spans or () if s["end"] > s["start"])
    starts: list[int] = []
    ends: list[int] = []
    for s, e in pairs:
        if ends and s <= ends[-1]:
            ends[-1] = max(ends[-1], e)
        else:
            starts.append(s)
            ends.append(e)
    return np.array(starts, np.int64), np.array(ends, np.int64)


def align_ranges(
    starts: np.ndarray,
    ends: np.ndarray,
    counts: np.ndarray,
    target_starts: np.ndarray,
    target_ends: np.ndarray,
    target_counts: np.ndarray,
    flags: list[np.ndarray],
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Ranges against sorted, disjoint target ranges, text by text (``counts`` and
    ``target_counts`` per text, offsets local to each text; ``_core.align_tokens``): per range
    the text-local number of the first target it overlaps (-1: none), and per flag (one value
    per target) whether any target it overlaps has it."""
    i64 = functools.partial(pa.array, type=pa.int64())
    first, out = _core.align_tokens(
        *(i64(np.ascontiguousarray(a, np.int64)) for a in (starts, ends, counts)),
        *(i64(np.ascontiguousarray(a, np.int64)) for a in (target_starts, target_ends)),
        i64(np.ascontiguousarray(target_counts, np.int64)),
        [pa.array(np.asarray(f, bool)) for f in flags],
    )
    return (
        first.to_numpy(zero_copy_only=False),
        tuple(f.to_numpy(zero_copy_only=False) for f in out),
    )


class DocSpans:
    """Spans by document id, each document's merged into sorted, disjoint ranges.

    Held as flat arrays: the ids (``docs``, one Arrow string per document that has a span),
    per document an offset into the merged ``starts`` and ``ends``, and the ids' 64-bit hashes
    (:func:`phisieve._core.id_hashes`) sorted for lookup, a hit checked against the id itself.
    About 40 bytes per document and 16 per span (a dict of numpy arrays took some 500 per
    document), and a lookup costs a sorted search, whatever the number of documents.
    """

    def __init__(
        self, docs: pa.Array, offsets: np.ndarray, starts: np.ndarray, ends: np.ndarray
    ) -> None:
        self.docs = docs
        self.offsets, self.starts, self.ends = offsets, starts, ends
        self._index = StringIndex(docs)

    @classmethod
    def empty(cls) -> DocSpans:
        """No span."""
        zero = np.zeros(0, np.int64)
        return cls(pa.array([], pa.string()), np.zeros(1, np.int64), zero, zero)

    @classmethod
    def read(cls, spans: Any) -> DocSpans:
        """From ``spans`` (``doc_id``, ``spans``: lists of ``start``, ``end``...): a dataset
        folder or file, a table, or anything else :func:`~phisieve.io.sources.open_source`
        reads, read batch by batch. A document in several rows has their spans united; empty
        spans (``end <= start``) and null ids are dropped."""
        src = open_source(spans, batch_size=65_536)
        require_columns(src.schema, ["doc_id", "spans"], src.name)
        docs, counts, starts, ends = [], [], [], []
        for b in src.batches(["doc_id", "spans"]):
            doc, sp = b.column(0), b.column(1)
            if doc.null_count:
                keep = pc.is_valid(doc)
                doc, sp = doc.filter(keep), sp.filter(keep)
            n = pc.fill_null(pc.list_value_length(sp), 0).to_numpy(zero_copy_only=False)
            flat = pc.list_flatten(sp)
            docs.append(string_array(doc))
            counts.append(n.astype(np.int64))
            starts.append(_ints(flat.field("start")))
            ends.append(_ints(flat.field("end")))
        if not docs:
            return cls.empty()
        ids = pa.chunked_array(docs, pa.string()).combine_chunks()
        return cls.from_spans(ids, np.concatenate(counts), np.concatenate(starts),
                              np.concatenate(ends))  # fmt: skip

    @classmethod
    def from_spans(
        cls, docs: pa.Array, counts: np.ndarray, starts: np.ndarray, ends: np.ndarray
    ) -> DocSpans:
        """From rows of documents: row ``i`` gives ``counts[i]`` spans (flat ``starts``,
        ``ends``) of document ``docs[i]``; ids may repeat (their spans are united)."""
        encoded = pc.dictionary_encode(string_array(docs))
        codes = np.repeat(encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64), counts)
        starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
        keep = ends > starts
        codes, starts, ends = codes[keep], starts[keep], ends[keep]
        if not len(codes):
            return cls.empty()
        order = np.lexsort((starts, codes))
        codes, starts, ends = codes[order], starts[order], ends[order]
        # Merge within each document with one running maximum over the whole array: each
        # document's offsets are shifted past the previous document's largest end.
        width = int(ends.max()) + 1
        if len(encoded.dictionary) * width >= 2**62:  # pragma: no cover - 2^31 docs of 2 GB
            raise ConfigError("too many or too long documents to merge their spans")
        base = codes * width
        reach = np.maximum.accumulate(base + ends)
        new = np.ones(len(codes), bool)
        new[1:] = base[1:] + starts[1:] > reach[:-1]
        first = np.flatnonzero(new)
        last = np.r_[first[1:] - 1, len(codes) - 1]
        owner = codes[first]
        used, per_doc = np.unique(owner, return_counts=True)
        offsets = np.zeros(len(used) + 1, np.int64)
        np.cumsum(per_doc, out=offsets[1:])
        return cls(
            encoded.dictionary.take(pa.array(used)),
            offsets,
            starts[first],
            reach[last] - base[last],
        )

    @classmethod
    def from_dict(cls, by_doc: dict[str, tuple[Any, Any]]) -> DocSpans:
        """From ``{doc_id: (starts, ends)}``."""
        docs = list(by_doc)
        counts = np.array([len(by_doc[d][0]) for d in docs], np.int64)
        flat = [np.asarray(by_doc[d][i], np.int64).ravel() for d in docs for i in (0, 1)]
        starts = np.concatenate([np.zeros(0, np.int64), *flat[0::2]])
        ends = np.concatenate([np.zeros(0, np.int64), *flat[1::2]])
        return cls.from_spans(pa.array(docs, pa.string()), counts, starts, ends)

    def __len__(self) -> int:
        return len(self.docs)

    def items(self) -> Iterator[tuple[str, tuple[np.ndarray, np.ndarray]]]:
        """``(doc_id, (starts, ends))`` for every document with a span."""
        for i, doc in enumerate(self.docs.to_pylist()):
            a, b = self.offsets[i], self.offsets[i + 1]
            yield doc, (self.starts[a:b], self.ends[a:b])

    def find(self, doc_ids: pa.Array | list[str]) -> np.ndarray:
        """The row of each id in :attr:`docs` (int64, -1 when it has no span)."""
        return self._index.find(doc_ids)

    def overlap(
        self,
        doc_ids: pa.Array | list[str],
        starts: np.ndarray,
        ends: np.ndarray,
        counts: np.ndarray,
    ) -> np.ndarray:
        """For ranges ``[starts, ends)`` (flat, ``counts[i]`` of them for document
        ``doc_ids[i]``, offsets local to each document), whether each overlaps a span of its
        document (``_core.align_tokens``: the ranges against each document's merged spans)."""
        n = int(np.sum(counts))
        if n == 0 or not len(self.docs):
            return np.zeros(n, bool)
        rows = self.find(doc_ids)
        has = rows >= 0
        if not has.any():
            return np.zeros(n, bool)
        per_doc = np.where(has, self.offsets[rows + 1] - self.offsets[np.maximum(rows, 0)], 0)
        total = int(per_doc.sum())
        # The spans of each document in turn: its first span's index, then consecutive.
        first = np.repeat(self.offsets[rows[has]], per_doc[has])
        before = np.repeat(np.cumsum(per_doc[has]) - per_doc[has], per_doc[has])
        take = first + np.arange(total) - before
        _, (inside,) = align_ranges(
            starts, ends, counts, self.starts[take], self.ends[take], per_doc,
            [np.ones(total, bool)],
        )  # fmt: skip
        return inside


def _ints(col: pa.Array) -> np.ndarray:
    return pc.fill_null(col, 0).cast(pa.int64()).to_numpy(zero_copy_only=False)


@dataclass
class SpanWords:
    """What the direct spans say about words, collected batch by batch.

    Attributes
    ----------
    in_span
        Per normalised word, its occurrences inside spans over the whole corpus.
    """

    spans: DocSpans
    in_span: Counter[str] = field(default_factory=Counter)

    def add(self, doc_ids: pa.Array, texts: pa.Array, normalize: str) -> None:
        """Record one batch of documents (string arrays), cut into words under
        ``normalize``."""
        words = _core.tokenize(texts, normalize=normalize)
        counts = pc.list_value_length(words.column("words")).to_numpy(zero_copy_only=False)
        starts = words.column("starts").flatten().to_numpy(zero_copy_only=False)
        ends = words.column("ends").flatten().to_numpy(zero_copy_only=False)
        inside = self.spans.overlap(doc_ids, starts, ends, counts)
        if inside.any():
            uses = pc.value_counts(words.column("words").flatten().filter(pa.array(inside)))
            values, n = uses.field("values").to_pylist(), uses.field("counts").to_pylist()
            self.in_span.update(dict(zip(values, n, strict=True)))


def collect_span_words(
    src: Any, spans: DocSpans, doc_col: str, text_col: str, normalize: str
) -> SpanWords:
    """The words of the direct spans of ``src``'s documents (a source of documents with
    ``doc_col`` and ``text_col``): a pass that tokenises only the documents that have
    spans."""
    found = SpanWords(spans)
    if not len(spans):
        return found
    for batch in src.batches([doc_col, text_col]):
        keep = spans.find(batch.column(0)) >= 0
        if not keep.any():
            continue
        b = batch.filter(pa.array(keep))
        found.add(*(string_array(c) for c in b.columns), normalize)
    return found


IDENTIFYING_WORD = r"^[^\W\d_]{2,}$"
"""The words the ``identifying`` scope may propagate: alphabetic, at least two letters."""


def direct_expr(scope: str = DEFAULT_SCOPE, min_share: float = DEFAULT_MIN_SHARE) -> pl.Expr:
    """Whether ``scope`` makes a term a direct identifier in every note of the corpus, as a
    polars expression over a ``terms`` table's ``n``, ``term``, ``count`` and ``in_span`` (the
    term's occurrences inside direct spans). Only single words are ever direct: a date's "7"
    would otherwise mark every n-gram with a 7.

    ``span`` and ``patient``: none; ``corpus``: every word found inside a span;
    ``identifying``: the alphabetic words of at least two letters with
    ``in_span >= min_share * count``. The index and :func:`phisieve.merge_terms` both mark
    ``direct`` with it, so a merged index marks what one index of the whole corpus marks.
    """
    check_scope(scope, min_share)
    if scope in ("span", "patient"):
        return pl.lit(False)
    inside = (pl.col("n") == 1) & (pl.col("in_span") > 0)
    if scope == "corpus":
        return inside
    return (
        inside
        & pl.col("term").str.contains(IDENTIFYING_WORD)
        & (pl.col("in_span").cast(pl.Float64) >= min_share * pl.col("count").cast(pl.Float64))
    )


def corpus_direct_words(
    span_words: SpanWords,
    unigram_counts: pa.Table,
    scope: str = DEFAULT_SCOPE,
    min_share: float = DEFAULT_MIN_SHARE,
) -> set[str]:
    """The words that ``scope`` makes direct identifiers in every note of the corpus.

    Parameters
    ----------
    span_words
        The span words of the corpus.
    unigram_counts
        ``term`` and ``count`` of every word of the corpus (the index's ``n = 1`` rows).
    scope, min_share
        See the module's documentation.
    """
    check_scope(scope, min_share)
    if scope in ("span", "patient") or not span_words.in_span:
        return set()
    inside = pl.DataFrame(
        {"term": list(span_words.in_span), "in_span": list(span_words.in_span.values())},
        schema={"term": pl.String, "in_span": pl.UInt64},
    )
    counts = pl.from_arrow(unigram_counts.select(["term", "count"]))
    assert isinstance(counts, pl.DataFrame)
    picked = (
        inside.join(counts, on="term", how="left")
        .with_columns(n=pl.lit(1, pl.UInt8), count=pl.col("count").fill_null(0))
        .filter(direct_expr(scope, min_share))
        .get_column("term")
    )
    return set(picked.to_list())
