"""The patient x term index: which terms fewer than k patients use (indirect identifiers).

The counting runs in Rust (:class:`phisieve._core.IndexBuilder`); this module streams record
batches into it, keeps its memory under a budget by splitting terms into hash partitions
counted in separate passes, sorts input that is not grouped by patient, merges partial
indexes, and computes the statistics the papers report.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import _core
from ..errors import ConfigError, InputError, MemoryBudgetExceeded, NotGroupedError
from ..io.dataset import dataset_files
from ..io.schema import TERMS
from ..io.sources import BatchSource, open_source, require_columns, string_array
from ..pipeline.work import Work, work
from ..protection.scope import (
    DEFAULT_MIN_SHARE,
    DEFAULT_SCOPE,
    DocSpans,
    SpanWords,
    check_scope,
    direct_expr,
)

MAX_PARTITIONS = 4096
"""The most hash partitions a memory budget may split the terms into."""

MIN_TERM_SHARE = 4
"""A budget is refused when the vocabulary (which every partition pass holds) would leave
less than 1/MIN_TERM_SHARE of it to the terms: splitting would take too many passes."""

HEAPS_EXPONENT = 0.7
"""How distinct terms grow with text, to guess how far an overflowing pass must be split."""

QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0)

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1e3,
    "m": 1e6,
    "g": 1e9,
    "t": 1e12,
    "ki": 2**10,
    "mi": 2**20,
    "gi": 2**30,
    "ti": 2**40,
}


def parse_size(size: int | str | None) -> int | None:
    """Bytes from ``2GB``, ``512MiB``, ``1.5g`` or an integer; ``None`` stays ``None``."""
    if size is None or isinstance(size, int):
        return size
    m = _SIZE.match(size)
    if not m:
        raise ConfigError(f"cannot read {size!r} as a memory size (e.g. 2GB, 512MiB)")
    unit = (m.group(2) or "").lower().removesuffix("b")
    return int(float(m.group(1)) * _UNITS[unit])


@dataclass
class IndexReport:
    """What an index run saw and did (also written to ``_SUCCESS.json``)."""

    documents: int = 0
    tokens: int = 0
    patients: int = 0
    passes: int = 0
    partitions: int = 0
    sorted_input: bool = False
    peak_index_bytes: int = 0
    patient_ids: list[str] = field(default_factory=list, repr=False)


def is_grouped(src: BatchSource, patient_col: str) -> bool:
    """Whether each patient's rows are contiguous in ``src`` (reads only the patient column)."""
    heads: list[pl.Series] = []
    last = None
    for batch in src.batches([patient_col]):
        s = pl.from_arrow(string_array(batch.column(0)))
        if len(s) == 0:
            continue
        starts = s != s.shift(1)
        starts[0] = last is None or s[0] != last
        heads.append(s.filter(starts))
        last = s[-1]
    if not heads:
        return True
    runs = pl.concat(heads)
    return runs.n_unique() == len(runs)


def _sorted_copy(src: BatchSource, cols: list[str], tmp: Path) -> BatchSource:
    """Sort ``src`` by patient (``cols[0]``, stable) into a temporary Parquet file, out of
    core, keeping ``cols``."""
    out = tmp / "sorted.parquet"
    patient_col = cols[0]
    if src.path is None:  # a table, stream or Dataset object
        table = pa.Table.from_batches(list(src.batches(cols)))
        table = table.set_column(0, patient_col, string_array(table.column(0)))
        pl.from_arrow(table).sort(patient_col, maintain_order=True).write_parquet(out)
    else:
        lf = pl.scan_parquet(dataset_files(src.path)).select(
            pl.col(patient_col).cast(pl.String), *(pl.col(c) for c in cols[1:])
        )
        lf.sort(patient_col, maintain_order=True).sink_parquet(out)
    return open_source(out)


READ_SHARE = 16
"""Under a memory budget, the text fed to the index at a time is at most this share of it."""

STEP_SHARE = 8
"""Under a memory budget, a piece of text should grow the index by at most this share of it
(pieces are sized from the growth per byte of text seen so far)."""

FIRST_GROWTH = 64
"""Bytes of index per byte of text assumed (per n-gram length) before any has been seen:
every word new, a term costing ~200 bytes counted and finished, ~6 bytes of text a word."""

ROW_BYTES = 8192
"""Under a memory budget, the bytes a row read is assumed to cost when choosing how many rows
to read at a time (:func:`_read_rows`): ~2 kB of note text, and the Parquet reader's buffers
take several times the text they decode."""

MIN_PIECE = 1 << 14
"""The least text (bytes) fed to the index at a time, however small the budget."""


def _read_rows(budget: int | None, batch_size: int) -> int:
    """Rows per batch read from a Parquet dataset: ``batch_size``, or under a budget about
    ``budget / READ_SHARE`` bytes at :data:`ROW_BYTES` a row (64 to ``batch_size``)."""
    if budget is None:
        return batch_size
    return int(min(max(budget // (READ_SHARE * ROW_BYTES), 64), batch_size))


def _lean_source(src: BatchSource, rows: int) -> BatchSource:
    """``src`` re-opened to read batches of ``rows`` rows (a source on disk; one in memory
    is kept)."""
    return src if src.path is None else open_source(src.path, rows)


def _pieces(
    batch: pa.RecordBatch, text: int, max_bytes: Callable[[], int | None]
) -> Iterator[pa.RecordBatch]:
    """``batch`` cut into runs of rows of at most ``max_bytes()`` of text each (a longer row
    alone; the limit is asked again before every run); whole when it is None."""
    limit = max_bytes()
    if limit is None or batch.num_rows <= 1:
        yield batch
        return
    sizes = pc.fill_null(pc.binary_length(batch.column(text)), 0)
    cum = np.cumsum(sizes.to_numpy(zero_copy_only=False), dtype=np.int64)
    start = 0
    while start < batch.num_rows:
        base = int(cum[start - 1]) if start else 0
        end = max(int(np.searchsorted(cum, base + limit, side="right")), start + 1)
        yield batch.slice(start, end - start)
        start = end
        limit = max_bytes() or limit


def _run_pass(
    src: BatchSource,
    cols: list[str],
    builder: _core.IndexBuilder,
    budget: int | None,
    report: IndexReport,
    label: str,
    ctx: Work,
    each: Callable[[pa.RecordBatch], None] | None = None,
    ngram: int = 1,
) -> tuple[float, float]:
    """Feed every batch to ``builder`` (and to ``each``, when given). Returns 1.0 when done,
    or, when it outgrew ``budget``, by how much the budget must be split: the estimated ratio
    of the whole pass's terms to the room the vocabulary leaves them; and the vocabulary's
    estimated bytes over the whole pass (every partition holds it whole).

    Under a budget the text goes in by pieces sized to grow the index by about
    ``budget / STEP_SHARE`` each (from the growth per byte of text seen so far; at most
    ``budget / READ_SHARE`` bytes of text), and the budget is checked after each piece
    against what the pass will hold at its peak: the index's tables and vocabulary and what
    finishing them adds (:meth:`phisieve._core.IndexBuilder.peak_bytes`)."""
    rows = 0
    growth = float(FIRST_GROWTH * ngram)

    def piece_bytes() -> int | None:
        if budget is None:
            return None
        return int(min(max(budget / STEP_SHARE / growth, MIN_PIECE), budget / READ_SHARE))

    with ctx.bar(label, src.num_rows, "docs") as advance:
        for batch in src.batches(cols):
            for piece in _pieces(batch, 1, piece_bytes):
                before = builder.peak_bytes()
                texts = string_array(piece.column(1))
                builder.add(string_array(piece.column(0)), texts)
                if each is not None:
                    each(piece)
                advance(piece.num_rows)
                rows += piece.num_rows
                used = builder.peak_bytes()
                if budget is not None:
                    # The index's growth per byte of text: the last piece's, falling at most
                    # by half a piece (a piece of repeated words says little of the next).
                    size = int(pc.sum(pc.binary_length(texts)).as_py() or 0)
                    if size:
                        growth = max((used - before) / size, growth / 2, 1.0)
                report.peak_index_bytes = max(report.peak_index_bytes, used)
                if budget is not None and used > budget:
                    # Distinct terms and words grow sublinearly with text (Heaps' law,
                    # exponent ~0.7): extrapolate both to the whole pass.
                    share = rows / src.num_rows if src.num_rows else 1.0
                    grow = share**-HEAPS_EXPONENT
                    fixed = builder.fixed_bytes() * grow
                    room = max(budget - fixed, 1.0)
                    return min(max((used * grow - fixed) / room, 2.0), 8.0), fixed
    return 1.0, 0.0


def index(
    source: Any,
    *,
    k: int = 2,
    ngram: int = 1,
    normalize: str = "nfkc_lower",
    patient_col: str = "patient_id",
    text_col: str = "text",
    memory_budget: int | str | None = None,
    threads: int = 0,
    batch_size: int = 16_384,
    report: IndexReport | None = None,
    spans: str | Path | pa.Table | None = None,
    doc_col: str = "doc_id",
    direct_scope: str = DEFAULT_SCOPE,
    min_share: float = DEFAULT_MIN_SHARE,
    ctx: Work | None = None,
) -> pa.Table:
    """Build the patient x term index of a corpus.

    Parameters
    ----------
    source
        Documents: a Parquet dataset folder or file, a pyarrow ``Table``/``RecordBatch``/
        ``RecordBatchReader``, a polars ``DataFrame``, or anything with ``__arrow_c_stream__``.
    k
        A term used by fewer than ``k`` distinct patients is an indirect identifier.
    ngram
        Count word n-grams for n = 1..ngram (at most 4).
    normalize
        Term normalisation: ``nfkc_lower`` (default), ``nfkc``, ``nfc_lower``, ``nfc``,
        ``lower`` or ``none``.
    patient_col, text_col
        Column names of the patient id and the note text.
    memory_budget
        Bytes (or a size such as ``"2GB"``) the counting may take: the index's term tables
        and vocabulary, what finishing a pass adds to them (sort order, output batches) and
        the text read at a time (a sixteenth of the budget). Past it, the terms are split
        into hash partitions counted in separate passes over the input (which must then be a
        dataset or table, not a one-shot stream); the budget is checked after every piece of
        text, and a Parquet input is read without read-ahead. Not counted: the interpreter
        and its libraries (~150 MB), the Parquet reader's own buffers (~30 MB), the returned
        ``terms`` table, which holds every term, and what is computed from it afterwards
        (the ``index`` stage's statistics). ``None``: one pass, read in ``batch_size`` rows,
        freed memory kept for reuse (faster).
    threads
        Worker threads (0: all cores). Results do not depend on it.
    batch_size
        Rows per record batch read from a dataset. Results do not depend on it.
    report
        Filled with totals (documents, tokens, patients, passes) when given.
    spans, doc_col
        A ``spans`` dataset of direct identifiers (``doc_id``, ``spans``: from
        ``phisieve detect`` or ``phisieve surrogate``; a folder, file or table) and the
        documents' id column: each single-word term's occurrences inside spans go to
        ``in_span``, and the single-word terms that ``direct_scope`` makes direct identifiers
        corpus-wide are marked ``direct``.
    direct_scope, min_share
        How far the words of direct spans reach (:mod:`phisieve.protection.scope`):
        ``identifying`` (default) marks the alphabetic words of which at least
        ``min_share`` of the occurrences lie inside spans; ``corpus`` every word found
        inside a span; ``patient`` and ``span`` none (their protection is per patient and
        per document, applied by ``encode``).
    ctx
        Where progress is drawn and the sorted copy of an input not grouped by patient is
        kept (:class:`~phisieve.pipeline.work.Work`; default: nothing drawn, the system's
        temporary folder).

    Returns
    -------
    pyarrow.Table
        The ``terms`` table (schema :data:`phisieve.io.schema.TERMS`) sorted by (n, term):
        ``term``, ``n``, ``patients``, ``docs``, ``count``, ``in_span`` (a single word's
        occurrences inside direct spans; 0 for n-grams and without spans), ``direct``,
        ``indirect`` (patients < k) and ``patient_ids`` (the up to k patients using the term
        that are the smallest by :func:`phisieve._core.id_hashes` of the id, ties by the id,
        in that order: independent of the documents' order, and partial indexes merge
        exactly). Its schema metadata records the options (:func:`terms_options`:
        ``normalize``, ``k``, ``ngram``, ``direct_scope``...), so that ``encode`` cuts and
        normalises words the same way and ``merge_terms`` marks ``direct`` again.
    """
    budget = parse_size(memory_budget)
    if k < 1:
        raise ConfigError(f"k must be at least 1, got {k}")
    check_scope(direct_scope, min_share)
    report = report if report is not None else IndexReport()
    ctx = work(ctx)
    src = open_source(source, batch_size=batch_size)
    cols = [patient_col, text_col] + ([doc_col] if spans is not None else [])
    require_columns(src.schema, cols, src.name)
    # Spans are read before the work starts, and their words collected in the first pass
    # (a one-shot stream cannot be read a second time).
    doc_spans = DocSpans.read(spans) if spans is not None else None
    span_words = SpanWords(doc_spans) if doc_spans is not None else None
    collected = False  # span words come from the first pass that reads the whole input

    def collect(batch: pa.RecordBatch) -> None:
        assert span_words is not None
        columns = [string_array(batch.column(i)) for i in (2, 1)]  # doc, text
        span_words.add(*columns, normalize)

    with ctx.scratch("index") as tmp:
        # In small batches under a budget.
        rows = _read_rows(budget, batch_size)
        src = _lean_source(src, rows)
        if src.reiterable and not is_grouped(src, patient_col):
            src = _sorted_copy(src, cols, tmp)
            report.sorted_input = True
            src = _lean_source(src, rows)
        pending = [(1, 0)]
        parts: list[pa.Table] = []
        builder: _core.IndexBuilder | None = None
        while pending:
            modulus, residue = pending.pop(0)
            builder = None  # the last pass's index goes before the next one grows
            builder = _core.IndexBuilder(
                ngram=ngram,
                k=k,
                normalize=normalize,
                modulus=modulus,
                residue=residue,
                threads=threads,
                hold=budget is None,
            )
            label = "indexing" if modulus == 1 else f"indexing {residue + 1}/{modulus}"
            report.passes += 1
            each = None
            if doc_spans is not None and not collected:
                span_words = SpanWords(doc_spans)  # a pass cut short leaves part of them
                each = collect
            try:
                overflow, fixed = _run_pass(
                    src, cols, builder, budget, report, label, ctx, each, ngram
                )
            except NotGroupedError:
                raise NotGroupedError(
                    "documents are not grouped by patient and a one-shot stream cannot be "
                    "sorted: pass a table or a dataset path instead",
                    column=patient_col,
                ) from None
            if overflow > 1.0:
                if not src.reiterable:
                    raise MemoryBudgetExceeded(
                        "the index outgrew the memory budget and a one-shot stream cannot be "
                        "read again: pass a table or a dataset path instead"
                    )
                assert budget is not None
                if fixed > budget * (1 - 1 / MIN_TERM_SHARE):
                    # Partitions split the terms, not the vocabulary every pass holds.
                    raise MemoryBudgetExceeded(
                        f"the word vocabulary alone, which every pass holds, needs about "
                        f"{fixed / 1e6:.0f} MB of the {budget / 1e6:.0f} MB budget: give at "
                        f"least {fixed * MIN_TERM_SHARE / (MIN_TERM_SHARE - 1) / 1e6:.0f} MB"
                    )
                # Split this partition in as many (a power of two) as the memory it would
                # need, extrapolated from how far the pass got, calls for.
                split = 1 << math.ceil(math.log2(overflow))
                if modulus * split > MAX_PARTITIONS:
                    raise MemoryBudgetExceeded(
                        f"the index does not fit in {budget} bytes even split into "
                        f"{modulus} partitions (the word vocabulary alone may be larger)"
                    )
                pending += [(modulus * split, residue + i * modulus) for i in range(split)]
                continue
            collected = collected or each is not None
            parts.append(builder.finish())
            totals = builder.totals()
            report.documents, report.tokens = totals["documents"], totals["tokens"]
            report.patients = totals["patients"]
            report.patient_ids = builder.patient_ids()
            report.partitions += 1
    table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
    if len(parts) > 1:
        table = table.sort_by([("n", "ascending"), ("term", "ascending")])
    options: dict[str, Any] = {"normalize": normalize, "k": k, "ngram": ngram, "spans": False}
    if span_words is not None:
        table = _with_direct(_with_in_span(table, span_words), direct_scope, min_share)
        options.update(spans=True, direct_scope=direct_scope, min_share=min_share)
    return with_terms_options(table, **options)


def _with_in_span(terms: pa.Table, span_words: SpanWords) -> pa.Table:
    """``terms`` with ``in_span`` set: each single-word term's occurrences inside spans."""
    if not span_words.in_span:
        return terms
    words = pa.array(list(span_words.in_span), pa.string())
    inside = pa.array(list(span_words.in_span.values()), pa.uint64())
    slot = pc.index_in(terms.column("term"), value_set=words)
    slot = pc.if_else(pc.equal(terms.column("n"), 1), slot, pa.scalar(None, pa.int32()))
    counts = pc.fill_null(pc.take(inside, slot), pa.scalar(0, pa.uint64()))
    at = terms.schema.get_field_index("in_span")
    return terms.set_column(at, terms.schema.field(at), counts)


def _with_direct(terms: pa.Table, scope: str, min_share: float) -> pa.Table:
    """``terms`` with ``direct`` computed from its counts under ``scope``
    (:func:`phisieve.protection.scope.direct_expr`)."""
    df = pl.from_arrow(terms)
    assert isinstance(df, pl.DataFrame)
    df = df.with_columns(direct=direct_expr(scope, min_share))
    return df.to_arrow().cast(terms.schema)


TERMS_OPTIONS = b"phisieve.terms"
"""The key of the terms table's schema metadata that records how it was made."""


def terms_options(terms: pa.Table | pa.Schema) -> dict[str, Any]:
    """How a ``terms`` table was made (``normalize``, ``k``, ``ngram``, ``spans``,
    ``direct_scope``, ``min_share``); empty for a table that does not say."""
    schema = terms if isinstance(terms, pa.Schema) else terms.schema
    raw = (schema.metadata or {}).get(TERMS_OPTIONS)
    return json.loads(raw) if raw else {}


def with_terms_options(terms: pa.Table, **options: Any) -> pa.Table:
    """``terms`` with ``options`` recorded in its schema metadata."""
    meta = dict(terms.schema.metadata or {})
    meta[TERMS_OPTIONS] = json.dumps(options, sort_keys=True).encode()
    return terms.replace_schema_metadata(meta)


def mark_direct(terms: pa.Table, words: set[str]) -> pa.Table:
    """``terms`` with ``direct`` set on the single-word terms in ``words`` (normalised words
    found inside direct spans). n-grams are left alone: a date's "7" would otherwise mark
    every n-gram with a 7. (The index marks ``direct`` from its ``in_span`` counts under its
    direct scope instead; a word marked here stays marked only until ``merge_terms``, which
    marks ``direct`` again from the counts.)"""
    if not words:
        return terms
    df = pl.from_arrow(terms)
    assert isinstance(df, pl.DataFrame)
    hit = (pl.col("n") == 1) & pl.col("term").is_in(list(words))
    df = df.with_columns(direct=pl.col("direct") | hit)
    return df.to_arrow().cast(terms.schema)


def merge_terms(
    tables: Sequence[pa.Table], *, k: int = 2, patients_disjoint: bool = True
) -> pa.Table:
    """Merge partial ``terms`` tables (indexes of shards of a corpus) into one.

    Counts add (``docs``, ``count``, ``in_span``; ``patients`` too when the shards split
    patients). ``patient_ids`` become the ``k`` smallest of the union of the parts' lists by
    :func:`phisieve._core.id_hashes` of the id (ties by the id), in that order: each part
    kept its own ``k`` smallest, so these are the whole corpus's. ``direct`` is marked again
    from the summed ``count`` and ``in_span`` under the parts' recorded ``direct_scope`` and
    ``min_share`` (:func:`phisieve.protection.scope.direct_expr`). For shards that split
    the corpus by patient, the result equals the index of the whole corpus, every column
    included.

    Parameters
    ----------
    tables
        Partial indexes, each made with the same ``k``, ``ngram``, normalisation and (when
        made with spans) ``direct_scope`` and ``min_share``; all with spans or all without.
    k
        The ``k`` of the indirect test.
    patients_disjoint
        True when the shards split the corpus by patient (no patient in two shards): patient
        counts then add exactly. Otherwise a term's patients are the union of the up-to-``k``
        patient ids kept per shard: exact below ``k`` (so ``indirect`` is exact), and a lower
        bound at or above it.

    Returns
    -------
    pyarrow.Table
        The merged ``terms`` table (schema :data:`phisieve.io.schema.TERMS`), sorted by
        (n, term).
    """
    if not tables:
        raise ConfigError("merge_terms needs at least one table")
    options = [terms_options(t) for t in tables]
    for key in ("normalize", "ngram", "spans", "direct_scope", "min_share"):
        if key == "spans":
            seen = {str(bool(o.get(key, False))) for o in options}
        else:  # a table that does not say is taken at its word
            seen = {json.dumps(o[key]) for o in options if key in o}
        if len(seen) > 1:
            raise ConfigError(f"the partial indexes were made with different {key}: {sorted(seen)}")
    spans = bool(options[0].get("spans", False))
    frames = []
    for t in tables:
        if "in_span" not in t.column_names:
            if spans:
                raise ConfigError(
                    "a partial index made with spans has no in_span column (an older "
                    "phisieve): index the shards again to merge them"
                )
            t = t.append_column("in_span", pa.array(np.zeros(t.num_rows, np.uint64)))
        df = pl.from_arrow(t.select(list(TERMS.names)))
        assert isinstance(df, pl.DataFrame)
        frames.append(df)
    df = pl.concat(frames, how="vertical")
    # Every (term, patient) pair once, ordered by the patient's hash, then id.
    pairs = (
        df.select("term", "n", "patient_ids")
        .explode("patient_ids")
        .drop_nulls("patient_ids")
        .unique()
    )
    hashes = _core.id_hashes(pairs.get_column("patient_ids").to_arrow())
    pairs = pairs.with_columns(hash=pl.from_arrow(hashes)).sort(["hash", "patient_ids"])
    kept = pairs.group_by(["term", "n"]).agg(
        patient_ids=pl.col("patient_ids").head(k), union=pl.len()
    )
    patients = pl.col("patients").sum() if patients_disjoint else pl.col("patients").max()
    merged = (
        df.group_by(["term", "n"])
        .agg(
            patients=patients,
            docs=pl.col("docs").sum(),
            count=pl.col("count").sum(),
            in_span=pl.col("in_span").sum(),
        )
        .join(kept, on=["term", "n"], how="left")
        .with_columns(union=pl.col("union").fill_null(0))
    )
    if not patients_disjoint:
        union = pl.col("union")
        merged = merged.with_columns(
            patients=pl.when(union < k)
            .then(union)
            .otherwise(pl.max_horizontal(pl.col("patients"), union))
        )
    if spans:
        recorded = options[0]
        direct = direct_expr(
            recorded.get("direct_scope", DEFAULT_SCOPE),
            recorded.get("min_share", DEFAULT_MIN_SHARE),
        )
    else:
        direct = pl.lit(False)
    merged = (
        merged.with_columns(
            direct=direct,
            indirect=pl.col("patients") < k,
            patient_ids=pl.col("patient_ids").fill_null(pl.lit([], pl.List(pl.String))),
        )
        .select(TERMS.names)
        .sort(["n", "term"])
    )
    merged_options = {key: value for o in options for key, value in o.items()}
    merged_options.update(k=k, spans=spans)
    return with_terms_options(merged.to_arrow().cast(TERMS), **merged_options)


def marker(terms: pa.Table, normalize: str = "nfkc_lower") -> _core.Marker:
    """A :class:`phisieve._core.Marker` that protects the indirect terms of ``terms``."""
    indirect = terms.filter(pc.field("indirect"))
    return _core.Marker(string_array(indirect.column("term")), normalize=normalize)


def _numpy(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    return values.to_numpy(zero_copy_only=False)


def _quantiles(values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {}
    qs = np.quantile(values, QUANTILES)
    out = {f"q{int(q * 100):02d}": float(v) for q, v in zip(QUANTILES, qs, strict=True)}
    out["mean"] = float(values.mean())
    return out


def term_stats(
    terms: pa.Table,
    *,
    k: int,
    patient_ids: Iterable[str],
    tokens: int | None = None,
) -> dict[str, Any]:
    """What the papers plot: shares of indirect terms and occurrences, identifiers per patient.

    Parameters
    ----------
    terms
        A ``terms`` table.
    k
        The k it was built with.
    patient_ids
        Every patient of the corpus (patients with no identifier count as zero).
    tokens
        Word occurrences of the corpus (defaults to the unigram counts' sum).
    """
    # Numbers and masks over the table's columns as they are (no copy of the table): in
    # polars, the join and group-bys took ~7 times the table's size at the peak.
    patients = pa.array(list(patient_ids), pa.string())
    ns = _numpy(terms.column("n")).astype(np.int64)
    count = _numpy(terms.column("count")).astype(np.int64)
    indirect = _numpy(terms.column("indirect")).astype(bool)
    # Every indirect term's patient ids, as the patient's slot and the term's row.
    ids = terms.column("patient_ids")
    rows = _numpy(pc.list_parent_indices(ids))
    slots = pc.index_in(pc.list_flatten(ids), value_set=patients)
    known = _numpy(pc.is_valid(slots)).astype(bool) & indirect[rows]
    slot_of = _numpy(pc.fill_null(slots, 0))[known]
    n_of = ns[rows[known]]
    del rows, slots, known
    per_n: dict[str, Any] = {}
    for n in np.unique(ns).tolist():
        mine = ns == n
        distinct = int(mine.sum())
        n_indirect = int((mine & indirect).sum())
        occ = int(count[mine].sum())
        occ_ind = int(count[mine & indirect].sum())
        counts = np.bincount(slot_of[n_of == n], minlength=len(patients)).astype(float)
        per_n[str(n)] = {
            "distinct_terms": distinct,
            "indirect_terms": n_indirect,
            "share_distinct_indirect": n_indirect / distinct if distinct else 0.0,
            "occurrences": occ,
            "indirect_occurrences": occ_ind,
            "share_occurrences_indirect": occ_ind / occ if occ else 0.0,
            "identifiers_per_patient": _quantiles(counts),
        }
    if tokens is None:
        tokens = int(count[ns == 1].sum())
    return {
        "k": k,
        "patients": len(patients),
        "tokens": int(tokens),
        "per_n": dict(sorted(per_n.items())),
    }


def protected_share(
    source: Any,
    terms: pa.Table,
    *,
    normalize: str = "nfkc_lower",
    text_col: str = "text",
    batch_size: int = 16_384,
    memory_budget: int | str | None = None,
    ctx: Work | None = None,
) -> dict[str, float | int]:
    """Share of word occurrences each n-gram policy protects.

    ``all`` protects every word of every indirect n-gram; ``minimal`` only the last word of
    minimal indirect n-grams (no indirect sub-gram). With unigrams both equal the share of
    indirect word occurrences. Under ``memory_budget`` the text is read and marked by
    pieces, as the index reads it. ``ctx`` draws the progress
    (:class:`~phisieve.pipeline.work.Work`).
    """
    counts = ProtectedCounts(terms, normalize, text_col, batch_size, memory_budget)
    src = open_source(source, batch_size=batch_size)
    return shares([counts(work(ctx).counted(src, "protected share", "docs"))])


class ProtectedCounts:
    """Word occurrences, and those each n-gram policy protects, in a piece of a corpus
    (:func:`protected_share`; a reduce step the engine may run on pieces of the corpus).
    Its marker is built once, where it first runs, and never pickled."""

    def __init__(
        self,
        terms: pa.Table,
        normalize: str = "nfkc_lower",
        text_col: str = "text",
        batch_size: int = 16_384,
        memory_budget: int | str | None = None,
    ) -> None:
        self.terms, self.normalize, self.text_col = terms, normalize, text_col
        self.batch_size = batch_size
        self.budget = parse_size(memory_budget)
        self._marker: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_marker": None}

    def __call__(self, source: Any) -> dict[str, int]:
        if self._marker is None:
            self._marker = marker(self.terms, self.normalize)
        src = open_source(source, batch_size=self.batch_size)
        require_columns(src.schema, [self.text_col], src.name)
        piece_bytes = None
        if self.budget is not None:
            src = _lean_source(src, _read_rows(self.budget, self.batch_size))
            piece_bytes = max(self.budget // READ_SHARE, MIN_PIECE)
        total = {"words": 0, "all": 0, "minimal": 0}
        for batch in src.batches([self.text_col]):
            for piece in _pieces(batch, 0, lambda: piece_bytes):
                c = self._marker.counts(string_array(piece.column(0)))
                for key in total:
                    total[key] += c[key]
        return total


def shares(counts: Iterable[dict[str, int]]) -> dict[str, float | int]:
    """The shares :func:`protected_share` reports, from :class:`ProtectedCounts` of pieces
    that together make the corpus."""
    words = prot_all = prot_min = 0
    for c in counts:
        words += c["words"]
        prot_all += c["all"]
        prot_min += c["minimal"]
    return {
        "words": words,
        "all": prot_all / words if words else 0.0,
        "minimal": prot_min / words if words else 0.0,
    }


def read_terms(path: str | Path) -> pa.Table:
    """Read a ``terms`` dataset written by the ``index`` stage (:func:`phisieve.api.index`)."""
    path = Path(path)
    if not path.exists():
        raise InputError("no such terms folder", path=path)
    return pa.concat_tables([pq.read_table(f) for f in dataset_files(path)])


def index_piece(piece: Any, **options: Any) -> tuple[pa.Table, IndexReport]:
    """The index of one piece of the corpus (all the documents of its patients)."""
    report = IndexReport()
    return index(piece, report=report, **options), report


def count_true(column: pa.ChunkedArray) -> int:
    """How many rows of a boolean column are true."""
    return int(pc.sum(column).as_py() or 0)


def blacklist(terms: pa.Table) -> str:
    """``blacklist.txt``: the indirect terms, one per line."""
    indirect = terms.filter(pc.field("indirect")).column("term").to_pylist()
    return "".join(t + "\n" for t in indirect)
