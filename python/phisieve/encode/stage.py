"""The ``encode`` stage: documents -> the ``encoded`` dataset (:mod:`phisieve.encode.batches`
does the work)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .._lazy import LazyModule
from ..errors import ConfigError
from ..pipeline.options import option
from ..pipeline.stage import PATH, Context, Input, MapStage, require
from ..pipeline.stats import Stats
from ..pipeline.summary import Each, Line, Table, Within

if TYPE_CHECKING:
    import pyarrow as pa

    from .batches import Encoder
    from .numbering import SequenceOffsets

batches = LazyModule(".batches", __package__)
numbering = LazyModule(".numbering", __package__)
tokenizing = LazyModule(".tokenizer", __package__)
documents = LazyModule("..fragments.documents", __package__)
scope = LazyModule("..protection.scope", __package__)
term_index = LazyModule("..term_index.build", __package__)

__all__ = ["PROTECTION", "EncodeOptions", "EncodeStage"]

PROTECTION = (
    Table(
        "by_reason",
        "protected tokens by reason",
        (
            ("reason", "{label}"),
            ("tokens", "{tokens:,}"),
            ("% of tokens", "{share:.2%}"),
            ("only this reason", "{only:,}"),
            ("% of tokens ", "{only_share:.2%}"),
        ),
        labels={
            "span": "inside a direct span",
            "patient": "same word as a span of the patient",
            "corpus": "corpus-wide direct term",
            "indirect": "indirect identifier",
        },
        total=("[bold]any", "{protected:,}", "{protected_share:.2%}", "", ""),
    ),
    Line(
        "gold PHI tokens protected: {gold[protected]:,} of {gold[tokens]:,} "
        "([bold]{gold[coverage]:.2%}[/]); by reason:"
    ),
    Each("gold[by_reason]", "  {key}: {value:,}"),
)
"""The summary of a protection report (:func:`phisieve.encode.batches.protection_report`):
the protected share of tokens by reason, and the gold coverage when gold spans were scored.
``encode`` shows its own; ``coverage`` too."""


@dataclass(frozen=True)
class EncodeOptions:
    """Options of ``phisieve encode``."""

    max_len: int = option(512, "Tokens per sequence, specials included.")
    ngram: int = option(1, "Use indirect n-grams up to this length.")
    policy: str = option("all", "n-gram policy: all or minimal.")
    pseudonymize: bool = option(False, "Replace direct identifiers by X (MLMA/CLMA baselines).")
    normalize: str | None = option(None, "Word normalisation (default: the terms' own).")
    direct_scope: str | None = option(
        None, "span, patient, identifying or corpus (default: the terms' own)."
    )
    doc_col: str = option("doc_id", "Document id column.")
    patient_col: str = option("patient_id", "Patient id column.")
    text_col: str = option("text", "Note text column.")


@dataclass
class _Prepared:
    tokenizer: Any
    terms: pa.Table | None
    normalize: str
    direct_scope: str
    encoder: Encoder


class EncodeStage(MapStage):
    """``phisieve encode``: documents tokenised for a model, with per-token protected,
    direct and indirect flags, packed per patient into sequences.

    Reduce: the tokenizer, the terms and the spans loaded, the normalisation and scope
    resolved. Map: :class:`~phisieve.encode.batches.Encoder` on each batch of documents
    (grouped by patient: a patient's documents that come back after another patient's are
    refused; unless the scope is ``span``, each patient's documents are encoded together,
    once the patient's direct span words are known), the last sequence at the end. Then
    every sequence is numbered corpus-wide (:mod:`phisieve.encode.numbering`): ``seq_id``
    depends on the documents alone, never on their order or batching.
    """

    name = "encode"
    help = (
        "Tokenise documents for a model, with per-token protected/direct flags, packed per "
        "patient into sequences of at most MAX_LEN tokens."
    )
    Options = EncodeOptions
    inputs = (
        Input("docs", "The documents dataset.", positional=True),
        Input("tokenizer", "A local Hugging Face fast tokenizer (folder or tokenizer.json).",
              kind=PATH),
        Input("terms", "The terms of `phisieve index`.", required=False),
        Input("spans", "Spans of direct identifiers.", required=False,
              columns=("doc_id", "spans")),
        Input("gold", "Gold PHI spans to score the protection against (they protect nothing).",
              required=False, columns=("doc_id", "spans")),
    )  # fmt: skip
    main = "docs"
    batch_rows = 1024
    rows_per_part = 50_000
    grouped = True
    two_pass = True
    distributed = True
    summary = (
        "{documents:,} documents -> {sequences:,} sequences, {tokens:,} tokens; protected "
        "{protected:,} ({encoding[protection][protected_share]:.1%}), direct {direct:,}; "
        "written to {out}",
        Within("encoding[protection]", PROTECTION),
    )

    def __init__(self, options: Any = None, /, *, tokenizer: Any = None, **values: Any) -> None:
        self.tokenizer = tokenizer
        super().__init__(options, **values)

    def check(self) -> None:
        o = self.options
        if o.max_len < 4:
            raise ConfigError(f"max_len must be at least 4, not {o.max_len}")
        if o.policy not in ("all", "minimal"):
            raise ConfigError(f"unknown n-gram policy {o.policy!r}; expected all or minimal")

    def provided(self) -> set[str]:
        return {"tokenizer"} if self.tokenizer is not None else set()

    def open(self, ctx: Context) -> None:
        o = self.options
        src = ctx.source("docs")
        if documents.is_fragments(src.schema) and o.doc_col not in src.schema.names:
            # Examples of `phisieve fragment`: one per sequence (see as_documents).
            ctx.values["docs"] = documents.as_documents(src)
        require(ctx.source("docs"), [o.doc_col, o.patient_col, o.text_col])

    def recorded(self) -> dict[str, Any]:
        o = self.options
        out = {
            "max_len": o.max_len,
            "ngram": o.ngram,
            "policy": o.policy,
            "normalize": o.normalize,
            "direct_scope": o.direct_scope,
            "pseudonymize": o.pseudonymize,
        }
        for col, default in (("doc_col", "doc_id"), ("patient_col", "patient_id"),
                             ("text_col", "text")):  # fmt: skip
            if getattr(o, col) != default:
                out[col] = getattr(o, col)
        return out

    @property
    def columns(self) -> tuple[str, ...]:  # type: ignore[override]
        o = self.options
        return (o.doc_col, o.patient_col, o.text_col)

    def schema(self, ctx: Context, state: _Prepared) -> pa.Schema:
        return batches.ENCODED  # the schema of every encoded dataset

    def reduce(self, ctx: Context) -> _Prepared:
        o = self.options
        tok = (
            self.tokenizer
            if self.tokenizer is not None
            else tokenizing.open_tokenizer(ctx.path("tokenizer"))
        )
        terms = ctx.values.get("terms")
        term_table = None if terms is None else terms.table()
        normalize, direct_scope = batches.resolve_options(term_table, o.normalize, o.direct_scope)
        spans, gold = ctx.values.get("spans"), ctx.values.get("gold")
        doc_spans = None if spans is None else scope.DocSpans.read(spans)
        gold_spans = None if gold is None else scope.DocSpans.read(gold)
        encoder = batches.Encoder(
            tok,
            terms=term_table,
            spans=doc_spans,
            patient_scope=direct_scope != "span",
            max_len=o.max_len,
            ngram=o.ngram,
            policy=o.policy,
            normalize=normalize,
            pseudonymize=o.pseudonymize,
            gold=gold_spans,
            where=ctx.source("docs").name,
        )
        return _Prepared(tok, term_table, normalize, direct_scope, encoder)

    def group_columns(self) -> tuple[str, str]:
        return (self.options.patient_col, "patient_id")

    def fork(self, state: _Prepared, row: int = 0) -> _Prepared:
        return replace(state, encoder=state.encoder.fork(row))

    def map(self, batch: pa.RecordBatch, state: _Prepared, stats: Stats) -> Any:
        out = state.encoder(batch)
        stats.merge(state.encoder.drain())
        return out

    def flush(self, state: _Prepared, stats: Stats) -> Any:
        out = state.encoder.flush()
        stats.merge(state.encoder.drain())
        return [out]

    def settle(self, out: Iterable[pa.RecordBatch]) -> SequenceOffsets:
        counts: dict[str, int] = {}
        numbering.count_sequences(out, counts)
        return numbering.SequenceOffsets(counts)

    def finalize(self, batch: pa.RecordBatch, settled: SequenceOffsets) -> pa.RecordBatch:
        return settled.number(batch)

    def finish(self, ctx: Context, state: _Prepared) -> None:
        o = self.options
        stats = {k: ctx.stats.get(k, 0) for k in state.encoder.stats}
        special = tokenizing.SpecialTokens.of(state.tokenizer)
        terms = state.terms
        direct_terms = 0
        if terms is not None and "direct" in terms.column_names:
            direct_terms = term_index.count_true(terms.column("direct"))
        ctx.stats.update(stats)
        ctx.stats["encoding"] = {
            "tokenizer": str(getattr(state.tokenizer, "name_or_path", "")),
            "max_len": o.max_len,
            "vocab_size": special.vocab_size,
            "pad_token_id": special.pad_id,
            "mask_token_id": special.mask_id,
            "pseudonymized": o.pseudonymize,
            "ngram": o.ngram,
            "policy": o.policy,
            "normalize": state.normalize,
            "direct_scope": state.direct_scope,
            "with_terms": terms is not None,
            "with_spans": ctx.values.get("spans") is not None,
            "direct_terms": direct_terms,
            "protection": batches.protection_report(stats),
        }
