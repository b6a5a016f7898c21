"""The ``encode`` stage: documents -> the ``encoded`` dataset (:mod:`phisieve.encode.batches`
does the work), and :func:`read_encoding`, how an encoded dataset was made."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigError, InputError
from ..fragments.documents import as_documents, is_fragments
from ..io.dataset import read_manifest
from ..pipeline.options import option
from ..pipeline.runner import run_stage
from ..pipeline.stage import PATH, Context, Input, Stage, require
from ..pipeline.stats import Stats
from ..protection.scope import DocSpans
from .batches import Encoder, protection_report, resolve_options
from .numbering import SequenceOffsets, count_sequences
from .pack import ENCODED
from .tokenizer import SpecialTokens, load_tokenizer, open_tokenizer

__all__ = ["ENCODED", "EncodeStage", "SpecialTokens", "encode", "load_tokenizer", "read_encoding"]


def encode(
    docs: Any,
    out: str | Path,
    tokenizer: str | Path | Any,
    *,
    terms: str | Path | pa.Table | None = None,
    spans: str | Path | pa.Table | None = None,
    max_len: int = 512,
    ngram: int = 1,
    policy: str = "all",
    normalize: str | None = None,
    direct_scope: str | None = None,
    pseudonymize: bool = False,
    doc_col: str = "doc_id",
    patient_col: str = "patient_id",
    text_col: str = "text",
    progress: bool = False,
    gold: str | Path | pa.Table | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Tokenise documents for a model and write the ``encoded`` dataset.

    Parameters
    ----------
    docs
        The documents (a dataset folder, or any Arrow table or stream), each patient's
        documents consecutive and in order.
    out
        Output folder (Parquet parts only; the manifest, with the ``encoding`` that
        :func:`read_encoding` returns, is in ``out.meta/``). An existing one is replaced
        (atomically) only with ``overwrite``.
    tokenizer
        A Hugging Face fast tokenizer, or the local path of one (folder or ``tokenizer.json``).
    terms
        The ``terms`` of :func:`phisieve.index`: its indirect terms (``n <= ngram``) and
        ``direct`` terms mark tokens. Without it, no token is indirect.
    spans
        A ``spans`` dataset (``doc_id``, ``spans``) of direct identifiers: their words are
        protected in place and, unless ``direct_scope`` is ``span``, in every document of
        the same patient (:mod:`phisieve.protection.scope`).
    max_len
        Largest sequence length in model tokens, special tokens included.
    ngram, policy
        Use indirect n-grams up to ``ngram`` words, protecting their words under ``policy``
        (``all`` or ``minimal``, see :class:`phisieve._core.Marker`).
    normalize, direct_scope
        Word normalisation and direct scope. ``None``: the ones the terms were made with
        (recorded in their metadata), else ``nfkc_lower`` and ``identifying``. Values that
        differ from the terms' are refused.
    pseudonymize
        Replace the words of direct identifiers by ``X`` (the MLMA/CLMA baselines).
    gold
        Gold PHI spans to score the protection against (coverage of gold PHI tokens, in the
        manifest's ``protection`` report); they protect nothing.

    Returns
    -------
    dict
        The manifest: sequences, tokens and how many tokens are protected, direct, indirect,
        and ``protection``: the protected share by reason (and the gold coverage).
    """
    stage = EncodeStage(
        EncodeOptions(
            max_len=max_len,
            ngram=ngram,
            policy=policy,
            pseudonymize=pseudonymize,
            normalize=normalize,
            direct_scope=direct_scope,
            doc_col=doc_col,
            patient_col=patient_col,
            text_col=text_col,
        ),
        tokenizer=None if isinstance(tokenizer, (str, Path)) else tokenizer,
    )
    inputs = {"docs": docs, "terms": terms, "spans": spans, "gold": gold}
    if isinstance(tokenizer, (str, Path)):
        inputs["tokenizer"] = tokenizer
    return run_stage(stage, inputs, out, overwrite=overwrite, progress=progress)


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


class EncodeStage(Stage):
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
        if is_fragments(src.schema) and o.doc_col not in src.schema.names:
            # Examples of `phisieve fragment`: one per sequence (see as_documents).
            ctx.values["docs"] = as_documents(src)
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
        return ENCODED

    def reduce(self, ctx: Context) -> _Prepared:
        o = self.options
        tok = (
            self.tokenizer if self.tokenizer is not None else open_tokenizer(ctx.path("tokenizer"))
        )
        terms = ctx.values.get("terms")
        term_table = None if terms is None else terms.table()
        normalize, direct_scope = resolve_options(term_table, o.normalize, o.direct_scope)
        spans, gold = ctx.values.get("spans"), ctx.values.get("gold")
        doc_spans = None if spans is None else DocSpans.read(spans)
        gold_spans = None if gold is None else DocSpans.read(gold)
        encoder = Encoder(
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

    def fork(self, state: _Prepared) -> _Prepared:
        return replace(state, encoder=state.encoder.fork())

    def map(self, batch: pa.RecordBatch, state: _Prepared, stats: Stats) -> Any:
        out = state.encoder(batch)
        stats.merge(state.encoder.drain())
        return out

    def flush(self, state: _Prepared, stats: Stats) -> Any:
        out = state.encoder.flush()
        stats.merge(state.encoder.drain())
        return [out]

    def settle(self, batches: Iterable[pa.RecordBatch]) -> SequenceOffsets:
        counts: dict[str, int] = {}
        count_sequences(batches, counts)
        return SequenceOffsets(counts)

    def finalize(self, batch: pa.RecordBatch, settled: SequenceOffsets) -> pa.RecordBatch:
        return settled.number(batch)

    def finish(self, ctx: Context, state: _Prepared) -> None:
        o = self.options
        stats = {k: ctx.stats.get(k, 0) for k in state.encoder.stats}
        special = SpecialTokens.of(state.tokenizer)
        terms = state.terms
        direct_terms = 0
        if terms is not None and "direct" in terms.column_names:
            direct_terms = int(pc.sum(terms.column("direct")).as_py() or 0)
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
            "protection": protection_report(stats),
        }


def read_encoding(path: str | Path) -> dict[str, Any]:
    """How the complete ``encoded`` dataset at ``path`` was made (its manifest's
    ``encoding``: tokenizer, ``max_len``, special token ids, protection report...)."""
    manifest = read_manifest(path)
    if "encoding" not in manifest:
        raise InputError(
            f"not an encoded dataset (written by {manifest.get('stage')!r})", path=path
        )
    return manifest["encoding"]
