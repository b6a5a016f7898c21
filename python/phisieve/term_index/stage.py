"""The ``index`` and ``merge`` stages: the ``terms`` dataset, with ``blacklist.txt`` and
``stats.json`` beside it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from .._lazy import LazyModule
from ..errors import ConfigError
from ..pipeline.options import option
from ..pipeline.stage import Context, Input, RowsStage
from ..pipeline.summary import Line, Table
from ..protection.policy import (
    DEFAULT_MIN_SHARE,
    DEFAULT_SCOPE,
    DIRECT_SCOPE_HELP,
    MIN_SHARE_HELP,
    check_scope,
)

if TYPE_CHECKING:
    import pyarrow as pa

build = LazyModule(".build", __package__)

__all__ = ["IndexOptions", "IndexStage", "MergeOptions", "MergeStage"]


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


class IndexStage(RowsStage):
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
    summary = (
        "[bold]{documents:,} documents[/], {patients:,} patients, {tokens:,} words; k = {k}",
        "counted in {execution[pieces]} piece(s), at most {execution[passes]} pass(es) each; "
        "index peak {execution[peak_index_bytes]:MiB} (the largest piece)",
        Table(
            "per_n",
            "indirect identifiers: terms used by fewer than k patients (per patient: median count)",
            (
                ("n", "{key}"),
                ("terms", "{distinct_terms:,}"),
                ("indirect", "{indirect_terms:,}"),
                ("% of terms", "{share_distinct_indirect:.1%}"),
                ("% of uses", "{share_occurrences_indirect:.2%}"),
                ("per patient", "{identifiers_per_patient[q50]:,.0f}"),
                ("p90", "{identifiers_per_patient[q90]:,.0f}"),
                ("max", "{identifiers_per_patient[q100]:,.0f}"),
            ),
        ),
        Line(
            "protected word occurrences at n <= {ngram}: policy all {protected_share[all]:.1%}, "
            "policy minimal {protected_share[minimal]:.1%}",
            when="protected_share",
        ),
        Line(
            "{direct_terms:,} words of direct spans marked direct in the whole corpus (scope "
            "{direct_scope})",
            when="spans",
        ),
        "terms written to {out}; blacklist.txt and stats.json to {meta}",
    )

    def check(self) -> None:
        o = self.options
        build.parse_size(o.memory_budget)
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
        # The engine cuts the corpus into pieces that split it by patient (Ray's partitions;
        # a local engine's one piece, the whole corpus counted in passes under the budget by
        # Rust threads on every core: worker processes would each read the whole corpus for
        # their patients and double the memory); their indexes merge into the index of the
        # whole corpus, every column included.
        pieces = ctx.pieces(
            "docs",
            partial(
                build.index_piece,
                k=o.k,
                ngram=o.ngram,
                normalize=o.normalize,
                patient_col=o.patient_col,
                text_col=o.text_col,
                memory_budget=o.memory_budget,
                threads=o.threads,
                batch_size=self.batch_rows,
                ctx=ctx.detached(),
                spans=None if spans is None else spans.table(["doc_id", "spans"]),
                direct_scope=o.direct_scope,
                min_share=o.min_share,
            ),
            columns,
            by=o.patient_col,
            threaded=True,
        )
        reports = [r for _, r in pieces]
        if len(pieces) == 1:
            terms = pieces[0][0]
        else:
            terms = build.merge_terms([t for t, _ in pieces], k=o.k, patients_disjoint=True)
        stats = build.term_stats(
            terms,
            k=o.k,
            patient_ids=[p for r in reports for p in r.patient_ids],
            tokens=sum(r.tokens for r in reports),
        )
        stats.update(
            direct_terms=build.count_true(terms.column("direct")),
            documents=sum(r.documents for r in reports),
            ngram=o.ngram,
            normalize=o.normalize,
        )
        if o.policy_stats:
            counted = ctx.pieces(
                "docs",
                build.ProtectedCounts(
                    terms, o.normalize, o.text_col, self.batch_rows, o.memory_budget
                ),
                [o.text_col],
                label="protected share",
                # Each worker would build the marker of every term again for a pass that
                # takes seconds: at 10M words, 1.5x the time and 2x the memory.
                threaded=True,
            )
            stats["protected_share"] = build.shares(counted)
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
        return build.TERMS.with_metadata(state.terms.schema.metadata)

    def batches(self, ctx: Context, state: _Index) -> Any:
        yield from state.terms.to_batches()

    def finish(self, ctx: Context, state: _Index) -> None:
        terms = state.terms
        ctx.writer.write_side("blacklist.txt", build.blacklist(terms))
        ctx.writer.write_side("stats.json", json.dumps(state.stats, indent=2))
        ctx.stats.update(state.stats)
        ctx.stats.update(build.terms_options(terms))
        ctx.stats["execution"] = state.execution


@dataclass(frozen=True)
class MergeOptions:
    """Options of ``phisieve merge``."""

    k: int = option(2, "The k the parts were built with.", flag="--k")
    shared_patients: bool = option(
        False, "Shards may share patients (counts >= k become lower bounds)."
    )


class MergeStage(RowsStage):
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
    summary = ("{rows:,} terms ({indirect_terms:,} indirect) written to {out}",)

    def reduce(self, ctx: Context) -> pa.Table:
        parts = ctx.values["parts"]
        return build.merge_terms(
            [build.read_terms(p) for p in parts],
            k=self.options.k,
            patients_disjoint=not self.options.shared_patients,
        )

    def schema(self, ctx: Context, state: pa.Table) -> pa.Schema:
        return build.TERMS.with_metadata(state.schema.metadata)

    def batches(self, ctx: Context, state: pa.Table) -> Any:
        yield from state.to_batches()

    def finish(self, ctx: Context, state: pa.Table) -> None:
        ctx.stats.update(
            build.terms_options(state),
            merged_from=[str(p) for p in ctx.values["parts"]],
            indirect_terms=build.count_true(state.column("indirect")),
            direct_terms=build.count_true(state.column("direct")),
        )
