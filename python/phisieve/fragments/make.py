"""What the ``fragment`` stage does (:mod:`phisieve.fragments.stage` declares it): cut every
note into chunks on the run's engine, filter the fragments, mix them into examples and
report."""

from __future__ import annotations

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
from ..pipeline.stage import Context
from ..protection.scope import DocSpans, collect_span_words
from ..term_index.build import terms_options
from .chunkers import make_chunker
from .mix import mix
from .pieces import Cutter, combine
from .select import REASONS, Protected, indirect_terms, select, word_patients

__all__ = ["FRAGMENTS", "Made", "examples"]

DEFAULT_NORMALIZE = "nfkc_lower"


@dataclass
class Made:
    """The examples and the report."""

    examples: pa.Table
    report: dict[str, Any]


def examples(ctx: Context, o: Any) -> Made:
    """The examples of the ``docs`` input of ``ctx`` under the stage's options ``o``
    (:class:`~phisieve.fragments.stage.FragmentOptions`), and the report."""
    terms_src = ctx.values.get("terms")
    terms = None if terms_src is None else terms_src.table()
    normalize = resolve_normalize(terms, o.normalize)
    spans, gold = ctx.values.get("spans"), ctx.values.get("gold")
    ctx.hold("docs")
    options: dict[str, Any] = (
        {"model": o.spacy_model} if o.parser == "spacy" else {"model_dir": o.stanza_dir}
    )
    chunker = make_chunker(o.parser, **options)
    cutter = Cutter(
        chunker,
        normalize,
        gold=gold_spans(None if gold is None else gold.table(["doc_id", "spans"])),
    )
    docs = ["doc_id", "patient_id", "text"]
    cut = combine(ctx.pieces("docs", cutter, docs, label="fragments"))
    protected = Protected()
    if terms is not None:
        protected.indirect = indirect_terms(terms)
    if spans is not None:
        doc_spans = DocSpans.read(spans)
        for words in ctx.pieces(
            "docs", partial(span_words, spans=doc_spans, normalize=normalize), docs,
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
                "docs", partial(word_counts, normalize=normalize), ["patient_id", "text"],
                by="patient_id",
            ):  # fmt: skip
                for w, n in piece.items():
                    counts[w] = counts.get(w, 0) + n
            protected.patients = counts
    keep, dropped, masks = select(cut.fragments, protected)
    made, supply = mix(
        cut.fragments.filter(pa.array(keep)), nps=o.nps, vps=o.vps, reuse=o.reuse, seed=o.seed
    )
    report = _report(cut, keep, dropped, masks, supply, gold is not None)
    report["filters"] = {
        "indirect": terms is not None,
        "span": spans is not None,
        "rare_k": o.k if o.k > 1 else None,
        "normalize": normalize,
    }
    return Made(made, report)


def resolve_normalize(terms: pa.Table | None, given: str | None) -> str:
    """The normalisation of the filters: ``given``, else the terms', else the default;
    refused when ``given`` differs from the terms'."""
    made = terms_options(terms).get("normalize") if terms is not None else None
    if given is not None and made is not None and given != made:
        raise ConfigError(
            f"the terms were made with --normalize {made}, not {given}: leave --normalize "
            "out to use the terms' own, or index again"
        )
    return given or made or DEFAULT_NORMALIZE


def span_words(piece: Any, spans: DocSpans, normalize: str) -> set[str]:
    """The normalised words inside the spans of ``piece``'s documents."""
    src = open_source(piece)
    return set(collect_span_words(src, spans, "doc_id", "text", normalize).in_span)


def word_counts(piece: Any, normalize: str) -> dict[str, int]:
    """Patients per word in ``piece`` (whose patients no other piece has); a null note has
    no word, as for the chunkers."""
    words = CorpusStats.of(piece, normalize=normalize).words
    return dict(words.select("w", "patients").iter_rows())


def gold_spans(table: pa.Table | None) -> dict[str, list[tuple[int, int, str]]] | None:
    """Gold spans by document (for the report only)."""
    if table is None:
        return None
    out: dict[str, list[tuple[int, int, str]]] = {}
    for doc, spans in zip(
        table.column("doc_id").to_pylist(), table.column("spans").to_pylist(), strict=True
    ):
        if doc is not None and spans:
            out.setdefault(str(doc), []).extend((s["start"], s["end"], s["label"]) for s in spans)
    return out


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
