"""The ``index`` and ``merge`` stages: the ``terms`` dataset, with ``blacklist.txt`` and
``stats.json`` beside it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigError
from ..io.dataset import side_file
from ..io.schema import TERMS
from ..pipeline.options import option
from ..pipeline.runner import run_stage
from ..pipeline.stage import Context, Input, Stage
from ..protection.scope import DEFAULT_MIN_SHARE, DEFAULT_SCOPE, check_scope
from .build import (
    IndexReport,
    ProtectedCounts,
    index,
    merge_terms,
    parse_size,
    read_terms,
    shares,
    term_stats,
    terms_options,
)

__all__ = ["IndexStage", "MergeStage", "write_index"]


def write_index(
    source: Any,
    out: str | Path,
    *,
    k: int = 2,
    ngram: int = 1,
    normalize: str = "nfkc_lower",
    patient_col: str = "patient_id",
    text_col: str = "text",
    memory_budget: int | str | None = None,
    threads: int = 0,
    batch_size: int = 16_384,
    policy_stats: bool = True,
    progress: bool = False,
    spans: str | Path | None = None,
    direct_scope: str = DEFAULT_SCOPE,
    min_share: float = DEFAULT_MIN_SHARE,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Index ``source`` and write the ``terms`` dataset at ``out``, with the side files
    ``blacklist.txt`` (the indirect terms, one per line) and ``stats.json`` beside it in
    ``out.meta/`` (:func:`phisieve.io.dataset.side_file`). Returns the statistics
    (``stats.json``) with how the counting went (the manifest's ``execution``: passes,
    partitions, peak bytes).

    The inputs and the output are checked before the work starts; an existing ``out`` is
    replaced (atomically, side files included) only with ``overwrite``.
    """
    stage = IndexStage(
        k=k,
        ngram=ngram,
        normalize=normalize,
        patient_col=patient_col,
        text_col=text_col,
        memory_budget=None if memory_budget is None else str(memory_budget),
        threads=threads,
        policy_stats=policy_stats,
        direct_scope=direct_scope,
        min_share=min_share,
    )
    stage.batch_rows = batch_size
    m = run_stage(
        stage, {"docs": source, "spans": spans}, out, overwrite=overwrite, progress=progress
    )
    stats = json.loads(side_file(out, "stats.json").read_text(encoding="utf-8"))
    return {**stats, **m["execution"]}


DIRECT_SCOPE_HELP = (
    "How far the words of direct spans reach: span (in place), patient (also the same "
    "patient's other uses), identifying (also corpus-wide the alphabetic words found inside "
    "spans in at least MIN_SHARE of their uses), corpus (every span word everywhere: the old "
    "behaviour)."
)
MIN_SHARE_HELP = "identifying scope: the share of a word's uses inside spans."


@dataclass(frozen=True)
class IndexOptions:
    """Options of ``phisieve index``."""

    k: int = option(2, "Indirect: used by fewer than k patients.", flag="--k")
    ngram: int = option(1, "Count word n-grams for n = 1..NGRAM.")
    normalize: str = option("nfkc_lower", "nfkc_lower, nfkc, nfc_lower, nfc, lower, none.")
    memory_budget: str | None = option(
        None,
        "e.g. 2GB: the memory the counting may take (term tables, vocabulary, finishing a "
        "pass, text read at a time); terms are split into passes to stay under it. Python and "
        "its libraries (~150 MB), the Parquet reader (~30 MB) and the terms table written "
        "come on top.",
        decides=False,
    )
    threads: int = option(0, "Worker threads (0: all cores).", decides=False)
    patient_col: str = option("patient_id", "Patient id column.")
    text_col: str = option("text", "Note text column.")
    policy_stats: bool = option(True, "Measure the share of words each n-gram policy protects.")
    direct_scope: str = option(DEFAULT_SCOPE, DIRECT_SCOPE_HELP)
    min_share: float = option(DEFAULT_MIN_SHARE, MIN_SHARE_HELP)


@dataclass
class _Index:
    terms: pa.Table
    stats: dict[str, Any]
    execution: dict[str, Any]


def _index_piece(piece: Any, **options: Any) -> tuple[pa.Table, IndexReport]:
    """The index of one piece of the corpus (all the documents of its patients)."""
    report = IndexReport()
    return index(piece, report=report, **options), report


class IndexStage(Stage):
    """``phisieve index``: the patient x term index (:func:`phisieve.term_index.index`).

    The stage is a reduce: the whole corpus is counted (in hash partitions under a memory
    budget) before the first term is written; then the terms, ``blacklist.txt`` (the
    indirect terms) and ``stats.json``.
    """

    name = "index"
    help = (
        "Build the patient x term index: the terms dataset in OUT; blacklist.txt and "
        "stats.json in OUT.meta."
    )
    Options = IndexOptions
    inputs = (
        Input("docs", "The documents dataset (from ingest or synth).", positional=True),
        Input("spans", "Direct-identifier spans: the words DIRECT_SCOPE makes direct.",
              required=False, columns=("doc_id", "spans")),
    )  # fmt: skip
    batch_rows = 16_384
    rows_per_part = 1_000_000
    unit = "terms"

    def check(self) -> None:
        o = self.options
        parse_size(o.memory_budget)
        if o.k < 1:
            raise ConfigError(f"k must be at least 1, got {o.k}")
        check_scope(o.direct_scope, o.min_share)

    def recorded(self) -> dict[str, Any]:
        o = self.options
        return {
            "k": o.k,
            "ngram": o.ngram,
            "normalize": o.normalize,
            "patient_col": o.patient_col,
            "text_col": o.text_col,
            "policy_stats": o.policy_stats,
            "direct_scope": o.direct_scope,
            "min_share": o.min_share,
        }

    def reduce(self, ctx: Context) -> _Index:
        o = self.options
        spans = ctx.values.get("spans")
        columns = [o.patient_col, o.text_col] + (["doc_id"] if spans is not None else [])
        # The engine cuts the corpus into pieces that split it by patient (here: one piece,
        # the whole corpus, counted in passes under the budget); their indexes merge into
        # the index of the whole corpus, every column included.
        pieces = ctx.pieces(
            "docs",
            partial(
                _index_piece,
                k=o.k,
                ngram=o.ngram,
                normalize=o.normalize,
                patient_col=o.patient_col,
                text_col=o.text_col,
                memory_budget=o.memory_budget,
                threads=o.threads,
                batch_size=self.batch_rows,
                progress=ctx.progress,
                spans=None if spans is None else spans.table(["doc_id", "spans"]),
                direct_scope=o.direct_scope,
                min_share=o.min_share,
            ),
            columns,
            by=o.patient_col,
        )
        reports = [r for _, r in pieces]
        if len(pieces) == 1:
            terms = pieces[0][0]
        else:
            terms = merge_terms([t for t, _ in pieces], k=o.k, patients_disjoint=True)
        stats = term_stats(
            terms,
            k=o.k,
            patient_ids=[p for r in reports for p in r.patient_ids],
            tokens=sum(r.tokens for r in reports),
        )
        stats.update(
            direct_terms=int(pc.sum(terms.column("direct")).as_py() or 0),
            documents=sum(r.documents for r in reports),
            ngram=o.ngram,
            normalize=o.normalize,
        )
        if o.policy_stats:
            counted = ctx.pieces(
                "docs",
                ProtectedCounts(terms, o.normalize, o.text_col, self.batch_rows, o.memory_budget),
                [o.text_col],
                label="protected share",
            )
            stats["protected_share"] = shares(counted)
        # How the counting went (not what the index holds): in the manifest, not stats.json.
        execution = {
            "pieces": len(pieces),
            "passes": max(r.passes for r in reports),
            "partitions": max(r.partitions for r in reports),
            "sorted_input": all(r.sorted_input for r in reports),
            "peak_index_bytes": max(r.peak_index_bytes for r in reports),
        }
        return _Index(terms, stats, execution)

    def schema(self, ctx: Context, state: _Index) -> pa.Schema:
        # The terms schema, with the options the index records in its metadata.
        return TERMS.with_metadata(state.terms.schema.metadata)

    def batches(self, ctx: Context, state: _Index) -> Any:
        yield from state.terms.to_batches()

    def finish(self, ctx: Context, state: _Index) -> None:
        terms = state.terms
        indirect = terms.filter(pc.field("indirect")).column("term").to_pylist()
        ctx.writer.write_side("blacklist.txt", "".join(t + "\n" for t in indirect))
        ctx.writer.write_side("stats.json", json.dumps(state.stats, indent=2))
        ctx.stats.update(state.stats)
        ctx.stats.update(terms_options(terms))
        ctx.stats["execution"] = state.execution


@dataclass(frozen=True)
class MergeOptions:
    """Options of ``phisieve merge``."""

    k: int = option(2, "The k the parts were built with.", flag="--k")
    shared_patients: bool = option(
        False, "Shards may share patients (counts >= k become lower bounds)."
    )


class MergeStage(Stage):
    """``phisieve merge``: the terms of shards of a corpus, indexed separately, as one index
    (:func:`phisieve.term_index.merge_terms`): counts (``in_span`` included) add, the kept
    ``patient_ids`` are the k smallest of the union by the id hash, and ``direct`` is marked
    again under the recorded direct scope; for shards that split patients, the same terms as
    one index of the whole corpus."""

    name = "merge"
    help = "Merge the terms of shards of a corpus (indexed separately) into one index."
    Options = MergeOptions
    inputs = (Input("parts", "terms folders of shards of a corpus.", positional=True, many=True),)
    rows_per_part = 1_000_000
    unit = "terms"

    def reduce(self, ctx: Context) -> pa.Table:
        parts = ctx.values["parts"]
        return merge_terms(
            [read_terms(p) for p in parts],
            k=self.options.k,
            patients_disjoint=not self.options.shared_patients,
        )

    def schema(self, ctx: Context, state: pa.Table) -> pa.Schema:
        return TERMS.with_metadata(state.schema.metadata)

    def batches(self, ctx: Context, state: pa.Table) -> Any:
        yield from state.to_batches()

    def finish(self, ctx: Context, state: pa.Table) -> None:
        ctx.stats.update(
            terms_options(state),
            merged_from=[str(p) for p in ctx.values["parts"]],
            indirect_terms=int(pc.sum(state.column("indirect")).as_py() or 0),
            direct_terms=int(pc.sum(state.column("direct")).as_py() or 0),
        )
