"""The ``fragment`` stage: notes cut into noun and verb phrases, filtered, and mixed into
training examples whose pieces come from different documents and patients (after
Ignashina & Ive; DESIGN.md section 8).

The reduce (:func:`phisieve.fragments.make.prepare`) runs the corpus-wide passes on the
run's engine: with ``--spans``, the words found inside spans; with ``--k`` and no
``--terms``, the patients of every word. It also cuts the documents into blocks of about
``--block-notes`` consecutive rows, each ended where the patient changes. Then the batches
(:func:`phisieve.fragments.make.blocks`), block after block: the block's notes are cut into
chunks on the engine (in the worker processes; :class:`~phisieve.fragments.pieces.Cutter`),
filtered (:mod:`phisieve.fragments.select`) and mixed (:mod:`phisieve.fragments.mix`) with
the block's seed, and its examples are written before the next block is cut: memory holds
one block, whatever the size of the corpus. The output is a ``fragments`` dataset; the
report (``report.json`` beside it), added up over the blocks, says what was cut, dropped
and made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._lazy import LazyModule
from ..errors import ConfigError
from ..pipeline.options import option
from ..pipeline.stage import Context, Input, RowsStage
from ..pipeline.summary import Each, Table
from .chunkers import PARSERS, SPACY_MODEL

BLOCK_NOTES = 20_000
"""Notes per block (``--block-notes``): the examples of a block take their pieces from its
patients only. 20,000 notes are about 440 patients at MIMIC-III's 45 notes per patient
(4,000 of the synthetic corpus's 5), against 4 pieces per example, and about 0.6M fragments
(30 per note of 200 words; some hundreds of MB while the block is filtered and mixed)."""

if TYPE_CHECKING:
    import pyarrow as pa

make = LazyModule(".make", __package__)

__all__ = ["FragmentOptions", "FragmentStage"]


@dataclass(frozen=True)
class FragmentOptions:
    """Options of ``phisieve fragment``."""

    parser: str = option("spacy", "spacy (offline default) or stanza (its models on disk).")
    nps: int = option(2, "Noun phrases per example.")
    vps: int = option(2, "Verb phrases per example.")
    reuse: int = option(1, "Times a fragment may be used.")
    k: int = option(0, "Drop fragments with a word fewer than K patients use (0: off).", flag="--k")
    seed: int = option(0, "Seed of the draw.")
    block_notes: int = option(
        BLOCK_NOTES,
        "Notes mixed together at most: blocks of this many consecutive rows, each ended where "
        "the patient changes (memory holds one block).",
    )
    normalize: str | None = option(
        None, "Word normalisation for the filters (default: the terms', else nfkc_lower)."
    )
    spacy_model: str = option(SPACY_MODEL, "The spaCy package or folder (--parser spacy).")
    stanza_dir: str | None = option(None, "Stanza's resources folder (--parser stanza).")


class FragmentStage(RowsStage):
    """``phisieve fragment`` (see the module's documentation)."""

    name = "fragment"
    help = (
        "Cut notes into noun and verb phrases, drop those holding protected or rare words, "
        "and mix them into examples of NPS noun and VPS verb phrases from different "
        "documents and patients of the same block of about BLOCK_NOTES consecutive notes "
        "(a fragments dataset; report.json in OUT.meta)."
    )
    Options = FragmentOptions
    inputs = (
        Input("docs", "The documents dataset.", positional=True,
              columns=("doc_id", "patient_id", "text")),
        Input("terms", "The terms of `phisieve index`: drop fragments with an indirect "
              "identifier (and count patients per word for --k).", required=False),
        Input("spans", "Direct-identifier spans: drop fragments with a word found inside one.",
              required=False, columns=("doc_id", "spans")),
        Input("gold", "Gold PHI spans, for the report only (the share of PHI words).",
              required=False, columns=("doc_id", "spans")),
    )  # fmt: skip
    batch_rows = 1024
    rows_per_part = 500_000
    unit = "documents"
    summary = (
        "{report[notes]:,} notes: {report[coverage]:.1%} of their words are in a fragment",
        Table(
            "report[fragments]",
            "fragments by kind",
            (
                ("kind", "{key}"),
                ("cut", "{cut:,}"),
                ("kept", "{kept:,}"),
                ("used", "{supply[used]:,}"),
                ("mean words", "{length_mean:.2f}"),
            ),
            keys=("NP", "VP"),
            also={"supply": "report[supply]"},
        ),
        "dropped (a fragment may count twice):",
        Each("report[dropped]", "  {key}: {value:,}"),
        Table(
            "report[gold]",
            "gold PHI share of words",
            (("text", "{text}"), ("words", "{words:,}"), ("PHI", "{phi_share:.2%}")),
        ),
        "{report[supply][examples]:,} examples written to {out}",
        "{report[supply][blocks]:,} blocks mixed apart; the {report[supply][ran_out]}s ran out "
        "first in most",
    )

    def check(self) -> None:
        o = self.options
        if o.parser not in PARSERS:
            raise ConfigError(f"unknown parser {o.parser!r}: use one of {', '.join(PARSERS)}")
        if o.k < 0:
            raise ConfigError(f"k must be 0 (off) or more, got {o.k}")
        if o.block_notes < 1:
            raise ConfigError(f"--block-notes must be at least 1, got {o.block_notes}")

    def schema(self, ctx: Context, state: Any) -> pa.Schema:
        return make.FRAGMENTS

    def reduce(self, ctx: Context) -> Any:
        return make.prepare(ctx, self.options)

    def batches(self, ctx: Context, state: Any) -> Any:
        for examples in make.blocks(ctx, state):
            yield from examples.to_batches(max_chunksize=self.batch_rows)

    def finish(self, ctx: Context, state: Any) -> None:
        report = state.report
        ctx.writer.write_side("report.json", json.dumps(report, indent=2))
        ctx.stats.update(examples=report["supply"]["examples"], report=report)
