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

:class:`SpanWords` collects, in one pass over the documents, each patient's span words and
each word's occurrences inside spans; the index stores the latter per single-word term (the
``terms`` table's ``in_span`` column) and :func:`direct_expr` applies the scope to them and to
the words' counts, so that merged indexes (whose counts add) mark the same words as one.
:func:`corpus_direct_words` applies it to a :class:`SpanWords` directly.
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from .. import _core
from ..errors import ConfigError
from ..io.sources import read_spans, string_array

SCOPES = ("span", "patient", "identifying", "corpus")
"""The direct-identifier scopes, from the narrowest to the widest."""

DEFAULT_SCOPE = "identifying"
DEFAULT_MIN_SHARE = 0.2

REASONS = ("span", "patient", "corpus", "indirect")
"""Why a token is protected: inside a direct span of its document; outside them, the same
word as a direct span of the same patient; outside them, a corpus-wide ``direct`` term; an
indirect identifier."""


def check_scope(scope: str, min_share: float = DEFAULT_MIN_SHARE) -> None:
    """Raise :class:`ConfigError` for an unknown scope or a share outside (0, 1]."""
    if scope not in SCOPES:
        raise ConfigError(f"unknown direct scope {scope!r}; expected one of {', '.join(SCOPES)}")
    if not 0.0 < min_share <= 1.0:
        raise ConfigError(f"min_share must be in (0, 1], not {min_share}")


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


@dataclass
class DocSpans:
    """Spans by document id, each document's merged into sorted, disjoint ranges."""

    by_doc: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Any) -> DocSpans:
        """From a ``spans`` dataset folder or file, or a ``spans`` table."""
        table = path if isinstance(path, pa.Table) else read_spans(path)
        out = cls()
        for doc, sp in zip(
            table.column("doc_id").to_pylist(), table.column("spans").to_pylist(), strict=True
        ):
            if doc is None or not sp:
                continue
            s, e = merged_spans(sp)
            if str(doc) in out.by_doc:  # the same document in two rows: unite them
                s0, e0 = out.by_doc[str(doc)]
                s, e = merged_spans(
                    [{"start": a, "end": b} for a, b in zip([*s0, *s], [*e0, *e], strict=True)]
                )
            out.by_doc[str(doc)] = (s, e)
        return out

    def overlap(
        self, doc_ids: list[str], starts: np.ndarray, ends: np.ndarray, counts: np.ndarray
    ) -> np.ndarray:
        """For ranges ``[starts, ends)`` (flat, ``counts[i]`` of them for document
        ``doc_ids[i]``, offsets local to each document), whether each overlaps a span of its
        document (``_core.align_tokens``: the ranges against each document's merged spans)."""
        n = int(counts.sum())
        if n == 0 or not self.by_doc:
            return np.zeros(n, bool)
        span_s, span_e = [], []
        per_doc = np.zeros(len(doc_ids), np.int64)
        for i, doc in enumerate(doc_ids):
            sp = self.by_doc.get(doc)
            if sp is not None:
                span_s.append(sp[0])
                span_e.append(sp[1])
                per_doc[i] = len(sp[0])
        if not span_s:
            return np.zeros(n, bool)
        ss, se = np.concatenate(span_s), np.concatenate(span_e)
        _, (inside,) = align_ranges(starts, ends, counts, ss, se, per_doc, [np.ones(len(ss), bool)])
        return inside


@dataclass
class SpanWords:
    """What the direct spans say about words, collected batch by batch.

    Attributes
    ----------
    by_patient
        Per patient, the normalised words found inside the patient's spans.
    in_span
        Per normalised word, its occurrences inside spans over the whole corpus.
    """

    spans: DocSpans
    by_patient: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    in_span: Counter[str] = field(default_factory=Counter)

    def add(self, doc_ids: pa.Array, patients: pa.Array, texts: pa.Array, normalize: str) -> None:
        """Record one batch of documents (string arrays), cut into words under
        ``normalize``."""
        words = _core.tokenize(texts, normalize=normalize)
        counts = pc.list_value_length(words.column("words")).to_numpy(zero_copy_only=False)
        starts = words.column("starts").flatten().to_numpy(zero_copy_only=False)
        ends = words.column("ends").flatten().to_numpy(zero_copy_only=False)
        inside = self.spans.overlap([str(d) for d in doc_ids.to_pylist()], starts, ends, counts)
        if inside.any():
            rows = np.repeat(np.arange(len(patients)), counts)[inside]
            found = pa.table(
                {
                    "patient": patients.take(pa.array(rows)),
                    "word": words.column("words").flatten().filter(pa.array(inside)),
                }
            )
            grouped = found.group_by("patient").aggregate([("word", "distinct")])
            for p, ws in zip(
                grouped.column("patient").to_pylist(),
                grouped.column("word_distinct").to_pylist(),
                strict=True,
            ):
                self.by_patient[p].update(ws)
            uses = pc.value_counts(found.column("word"))
            values, n = uses.field("values").to_pylist(), uses.field("counts").to_pylist()
            self.in_span.update(dict(zip(values, n, strict=True)))

    def patient_words(self) -> dict[str, set[str]]:
        """Per patient, the words that the patient's spans make direct in all their notes."""
        return dict(self.by_patient)


def collect_span_words(
    src: Any, spans: DocSpans, doc_col: str, patient_col: str, text_col: str, normalize: str
) -> SpanWords:
    """The words of the direct spans of ``src``'s documents (a source of documents with
    ``doc_col``, ``patient_col`` and ``text_col``), per patient and over the corpus: a pass
    that tokenises only the documents that have spans."""
    found = SpanWords(spans)
    wanted = pa.array(list(spans.by_doc), pa.string())
    if not len(wanted):
        return found
    for batch in src.batches([doc_col, patient_col, text_col]):
        keep = pc.is_in(string_array(batch.column(0)), value_set=wanted)
        if not pc.any(keep).as_py():
            continue
        b = batch.filter(keep)
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
