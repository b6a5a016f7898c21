"""The ``fragment`` stage: notes cut into noun and verb phrases, filtered, and mixed into
training examples whose pieces come from different documents and patients (after
Ignashina & Ive; DESIGN.md section 8).

Reduce steps (on the run's engine, on pieces of the corpus): the chunks of every note with
their words (:class:`~phisieve.fragments.pieces.Cutter`); with ``--spans``, the words found
inside spans; with ``--k`` and no ``--terms``, the patients of every word. Then, in one
place, the fragments are filtered (:mod:`phisieve.fragments.select`) and mixed
(:mod:`phisieve.fragments.mix`). The output is a ``fragments`` dataset; the report
(``report.json`` beside it) says what was cut, dropped and made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from ..detect.recognizers.dictionaries import CorpusStats
from ..errors import ConfigError
from ..io.schema import FRAGMENTS
from ..io.sources import open_source
from ..pipeline.options import option
from ..pipeline.stage import Context, Input, Stage
from ..protection.scope import DocSpans, collect_span_words
from ..term_index.build import terms_options
from .chunkers import PARSERS, SPACY_MODEL, make_chunker
from .mix import mix
from .pieces import Cutter, combine
from .select import REASONS, Protected, indirect_terms, select, word_patients

__all__ = ["FragmentStage"]

DEFAULT_NORMALIZE = "nfkc_lower"


@dataclass(frozen=True)
class FragmentOptions:
    """Options of ``phisieve fragment``."""

    parser: str = option("spacy", "spacy (offline default) or stanza (its models on disk).")
    nps: int = option(2, "Noun phrases per example.")
    vps: int = option(2, "Verb phrases per example.")
    reuse: int = option(1, "Times a fragment may be used.")
    k: int = option(0, "Drop fragments with a word fewer than K patients use (0: off).", flag="--k")
    seed: int = option(0, "Seed of the draw.")
    normalize: str | None = option(
        None, "Word normalisation for the filters (default: the terms', else nfkc_lower)."
    )
    spacy_model: str = option(SPACY_MODEL, "The spaCy package or folder (--parser spacy).")
    stanza_dir: str | None = option(None, "Stanza's resources folder (--parser stanza).")
    workers: int = option(1, "Parser processes (the output never depends on them).", decides=False)


@dataclass
class _Made:
    examples: pa.Table
    report: dict[str, Any]


def _span_words(piece: Any, spans: DocSpans, normalize: str) -> set[str]:
    """The normalised words inside the spans of ``piece``'s documents."""
    src = open_source(piece)
    return set(collect_span_words(src, spans, "doc_id", "text", normalize).in_span)


def _patients(piece: Any, normalize: str) -> dict[str, int]:
    """Patients per word in ``piece`` (whose patients no other piece has); a null note has
    no word, as for the chunkers."""
    words = CorpusStats.of(piece, normalize=normalize).words
    return dict(words.select("w", "patients").iter_rows())


def _gold(table: pa.Table | None) -> dict[str, list[tuple[int, int, str]]] | None:
    if table is None:
        return None
    out: dict[str, list[tuple[int, int, str]]] = {}
    for doc, spans in zip(
        table.column("doc_id").to_pylist(), table.column("spans").to_pylist(), strict=True
    ):
        if doc is not None and spans:
            out.setdefault(str(doc), []).extend((s["start"], s["end"], s["label"]) for s in spans)
    return out


class FragmentStage(Stage):
    """``phisieve fragment`` (see the module's documentation)."""

    name = "fragment"
    help = (
        "Cut notes into noun and verb phrases, drop those holding protected or rare words, "
        "and mix them into examples of NPS noun and VPS verb phrases from different "
        "documents and patients (a fragments dataset; report.json in OUT.meta)."
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

    def check(self) -> None:
        o = self.options
        if o.parser not in PARSERS:
            raise ConfigError(f"unknown parser {o.parser!r}: use one of {', '.join(PARSERS)}")
        if o.k < 0:
            raise ConfigError(f"k must be 0 (off) or more, got {o.k}")
        if o.workers < 1:
            raise ConfigError(f"workers must be at least 1, got {o.workers}")

    def schema(self, ctx: Context, state: _Made) -> pa.Schema:
        return FRAGMENTS

    def _normalize(self, terms: pa.Table | None) -> str:
        made = terms_options(terms).get("normalize") if terms is not None else None
        given = self.options.normalize
        if given is not None and made is not None and given != made:
            raise ConfigError(
                f"the terms were made with --normalize {made}, not {given}: leave --normalize "
                "out to use the terms' own, or index again"
            )
        return given or made or DEFAULT_NORMALIZE

    def reduce(self, ctx: Context) -> _Made:
        o = self.options
        terms_src = ctx.values.get("terms")
        terms = None if terms_src is None else terms_src.table()
        normalize = self._normalize(terms)
        spans, gold = ctx.values.get("spans"), ctx.values.get("gold")
        ctx.hold("docs")
        options: dict[str, Any] = (
            {"model": o.spacy_model} if o.parser == "spacy" else {"model_dir": o.stanza_dir}
        )
        chunker = make_chunker(o.parser, processes=o.workers, **options)
        cutter = Cutter(
            chunker,
            normalize,
            gold=_gold(None if gold is None else gold.table(["doc_id", "spans"])),
            progress=ctx.progress,
        )
        docs = ["doc_id", "patient_id", "text"]
        cut = combine(ctx.pieces("docs", cutter, docs))
        protected = Protected()
        if terms is not None:
            protected.indirect = indirect_terms(terms)
        if spans is not None:
            doc_spans = DocSpans.read(spans)
            for words in ctx.pieces(
                "docs", partial(_span_words, spans=doc_spans, normalize=normalize), docs,
                label="span words",
            ):  # fmt: skip
                protected.span_words |= words
        if o.k > 1:
            protected.k = o.k
            if terms is not None:
                protected.patients = word_patients(terms)
            else:
                counts: dict[str, int] = {}
                for piece in ctx.pieces(
                    "docs", partial(_patients, normalize=normalize), ["patient_id", "text"],
                    by="patient_id",
                ):  # fmt: skip
                    for w, n in piece.items():
                        counts[w] = counts.get(w, 0) + n
                protected.patients = counts
        keep, dropped, masks = select(cut.fragments, protected)
        examples, supply = mix(
            cut.fragments.filter(pa.array(keep)), nps=o.nps, vps=o.vps, reuse=o.reuse, seed=o.seed
        )
        report = _report(cut, keep, dropped, masks, supply, gold is not None)
        report["filters"] = {
            "indirect": terms is not None,
            "span": spans is not None,
            "rare_k": o.k if o.k > 1 else None,
            "normalize": normalize,
        }
        return _Made(examples, report)

    def batches(self, ctx: Context, state: _Made) -> Any:
        yield from state.examples.to_batches(max_chunksize=self.batch_rows)

    def finish(self, ctx: Context, state: _Made) -> None:
        ctx.writer.write_side("report.json", json.dumps(state.report, indent=2))
        ctx.stats.update(examples=state.report["supply"]["examples"], report=state.report)


def _report(
    cut: Any,
    keep: np.ndarray,
    dropped: dict[str, int],
    masks: dict[str, np.ndarray],
    supply: dict[str, Any],
    with_gold: bool,
) -> dict[str, Any]:
    """What was cut, dropped and made; with gold spans, the share of PHI words by label in
    the notes, the fragments, and the fragments left after each filter in turn."""
    frags = pl.from_arrow(cut.fragments.select(["kind", "length", "words", "gold"]))
    assert isinstance(frags, pl.DataFrame)
    frags = frags.with_columns(n=pl.col("words").list.len(), keep=pl.Series(keep))
    by_kind = {}
    for kind in ("NP", "VP"):
        mine = frags.filter(pl.col("kind") == kind)
        lengths = mine.group_by("length").len().sort("length")
        by_kind[kind] = {
            "cut": mine.height,
            "kept": int(mine.get_column("keep").sum()),
            "length_mean": float(mine.get_column("length").mean() or 0.0),
            "by_length": {str(n): c for n, c in lengths.iter_rows()},
        }
    report: dict[str, Any] = {
        "notes": cut.notes,
        "words": cut.words,
        "words_in_fragments": cut.words_in_fragments,
        "coverage": cut.words_in_fragments / cut.words if cut.words else 0.0,
        "fragments": {"all": frags.height, "kept": int(keep.sum()), **by_kind},
        "dropped": dropped,
        "supply": supply,
    }
    if with_gold:
        rows = [("full text", cut.words, dict(cut.gold_words))]
        alive = np.ones(frags.height, dtype=bool)
        rows.append(("fragments", *_gold_counts(frags, alive)))
        for reason in REASONS:
            if masks[reason].any():
                alive &= ~masks[reason]
                rows.append((f"- {reason}", *_gold_counts(frags, alive)))
        labels = sorted({label for _, _, c in rows for label in c})
        report["gold"] = [
            {
                "text": name,
                "words": words,
                "phi_share": sum(c.values()) / words if words else 0.0,
                "by_label": {label: c.get(label, 0) / words if words else 0.0 for label in labels},
            }
            for name, words, c in rows
        ]
    return report


def _gold_counts(frags: pl.DataFrame, alive: np.ndarray) -> tuple[int, dict[str, int]]:
    live = frags.filter(pl.Series(alive))
    words = int(live.get_column("n").sum() or 0)
    labels = live.get_column("gold").explode().drop_nulls().value_counts()
    return words, {str(label): int(c) for label, c in labels.iter_rows()}
