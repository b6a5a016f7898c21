"""What the ``fragment`` stage does (:mod:`phisieve.fragments.stage` declares it).

:func:`prepare` runs the corpus-wide passes (the words found inside spans, the patients of
every word for ``--k``) and cuts the documents into blocks of consecutive rows
(:func:`block_bounds`); :func:`blocks` then cuts each block into fragments on the run's
engine (in the worker processes), filters them and mixes them, and yields the block's
examples before it cuts the next one, so that memory holds one block, whatever the size of
the corpus. :class:`Tally` adds up what each block cut, dropped and made into the report.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..detect.recognizers.dictionaries import CorpusStats
from ..errors import ConfigError
from ..io.schema import FRAGMENTS
from ..io.sources import BatchSource, open_source
from ..pipeline.stage import Context
from ..protection.scope import DocSpans, collect_span_words
from ..term_index.build import terms_options
from .chunkers import make_chunker
from .mix import block_seed, mix
from .pieces import Cut, Cutter, combine
from .select import REASONS, Protected, indirect_terms, select, word_patients

__all__ = ["FRAGMENTS", "Plan", "Tally", "block_bounds", "blocks", "prepare"]

DEFAULT_NORMALIZE = "nfkc_lower"
KINDS = ("NP", "VP")
DOCS = ["doc_id", "patient_id", "text"]


@dataclass
class Plan:
    """What the blocks need (the stage's state): the cutter, the protected words, the
    blocks' rows ``(first, end)``, the mixing's options, and the tally of the blocks done."""

    cutter: Cutter
    protected: Protected
    bounds: list[tuple[int, int]]
    nps: int
    vps: int
    reuse: int
    seed: int
    filters: dict[str, Any]
    tally: Tally

    @property
    def report(self) -> dict[str, Any]:
        """What was cut, dropped and made in the blocks done (all of them once
        :func:`blocks` is exhausted)."""
        return {**self.tally.report(), "filters": self.filters}


def prepare(ctx: Context, o: Any) -> Plan:
    """The corpus-wide passes over the ``docs`` input of ``ctx`` under the stage's options
    ``o`` (:class:`~phisieve.fragments.stage.FragmentOptions`), and its blocks."""
    terms_src = ctx.values.get("terms")
    terms = None if terms_src is None else terms_src.table()
    normalize = resolve_normalize(terms, o.normalize)
    spans, gold = ctx.values.get("spans"), ctx.values.get("gold")
    docs = ctx.hold("docs")
    options: dict[str, Any] = (
        {"model": o.spacy_model} if o.parser == "spacy" else {"model_dir": o.stanza_dir}
    )
    cutter = Cutter(
        make_chunker(o.parser, **options),
        normalize,
        gold=gold_spans(None if gold is None else gold.table(["doc_id", "spans"])),
    )
    protected = Protected()
    if terms is not None:
        protected.indirect = indirect_terms(terms)
    if spans is not None:
        doc_spans = DocSpans.read(spans)
        for words in ctx.pieces(
            "docs", partial(span_words, spans=doc_spans, normalize=normalize), DOCS,
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
    filters = {
        "indirect": terms is not None,
        "span": spans is not None,
        "rare_k": o.k if o.k > 1 else None,
        "normalize": normalize,
    }
    bounds = block_bounds(docs, o.block_notes)
    tally = Tally(with_gold=gold is not None)
    return Plan(cutter, protected, bounds, o.nps, o.vps, o.reuse, o.seed, filters, tally)


def blocks(ctx: Context, plan: Plan) -> Iterator[pa.Table]:
    """The examples of each block of ``plan`` in turn (``example_id`` counted on across
    blocks): the block's notes cut on the run's engine, their fragments filtered and mixed
    with the block's own seed (:func:`~phisieve.fragments.mix.block_seed`); what each block
    cut, dropped and made is added to ``plan.tally``."""
    made = 0
    for b, rows in enumerate(plan.bounds):
        label = "fragments" if len(plan.bounds) == 1 else f"fragments {b + 1}/{len(plan.bounds)}"
        cut = combine(ctx.pieces("docs", plan.cutter, DOCS, label=label, rows=rows))
        keep, dropped, masks = select(cut.fragments, plan.protected)
        examples, supply = mix(
            cut.fragments.filter(pa.array(keep)), nps=plan.nps, vps=plan.vps,
            reuse=plan.reuse, seed=block_seed(plan.seed, b),
        )  # fmt: skip
        plan.tally.add(cut, keep, dropped, masks, supply)
        ids = pa.array(np.arange(made, made + examples.num_rows, dtype=np.uint64))
        made += examples.num_rows
        yield examples.set_column(0, FRAGMENTS.field("example_id"), ids)


def block_bounds(src: BatchSource, notes: int, column: str = "patient_id") -> list[tuple[int, int]]:
    """The blocks of ``src``'s rows, ``(first, end)``: ``ceil(rows / notes)`` runs of
    consecutive rows of about equal size (at most ``notes``), each end moved forward to the
    first row where ``column`` (the patient) changes, so that a patient's consecutive notes
    stay in one block (a block then holds more than ``notes``). A function of the rows'
    patients and ``notes`` alone; one empty block when ``src`` has no row."""
    if notes < 1:
        raise ConfigError(f"a block holds at least one note, not {notes}")
    total = src.num_rows
    if total is None:
        total = sum(b.num_rows for b in src.batches([column]))
    count = max(1, math.ceil(total / notes))
    targets = [total * i // count for i in range(1, count)]
    ends: list[int] = []
    row, last, t = 0, None, 0
    for batch in src.batches([column]):
        for patient in batch.column(0).to_pylist():
            if t < len(targets) and row >= targets[t] and row > 0 and patient != last:
                ends.append(row)
                while t < len(targets) and targets[t] <= row:
                    t += 1
            last = patient
            row += 1
    firsts = [0, *ends]
    return list(zip(firsts, [*ends, total], strict=True))


@dataclass
class Tally:
    """What the blocks cut, dropped and made, added up block by block (counts add; means and
    shares are taken from the sums): the report (:meth:`report`)."""

    with_gold: bool = False
    blocks: int = 0
    notes: int = 0
    words: int = 0
    words_in_fragments: int = 0
    gold_words: Counter[str] = field(default_factory=Counter)
    cut: Counter[str] = field(default_factory=Counter)
    kept: Counter[str] = field(default_factory=Counter)
    length_sum: Counter[str] = field(default_factory=Counter)
    by_length: dict[str, Counter[int]] = field(
        default_factory=lambda: {kind: Counter() for kind in KINDS}
    )
    dropped: Counter[str] = field(default_factory=Counter)
    examples: int = 0
    ran_out: Counter[str] = field(default_factory=Counter)
    supply: dict[str, Counter[str]] = field(
        default_factory=lambda: {kind: Counter() for kind in KINDS}
    )
    gold_rows: dict[str, tuple[int, Counter[str]]] = field(default_factory=dict)
    """Per row of the gold table after the full text (``fragments``, then ``- REASON``
    for each filter applied in turn): words and gold words by label."""
    filtered: set[str] = field(default_factory=set)
    """The reasons that dropped a fragment in some block."""

    def add(
        self,
        cut: Cut,
        keep: np.ndarray,
        dropped: dict[str, int],
        masks: dict[str, np.ndarray],
        supply: dict[str, Any],
    ) -> None:
        """Add one block: what it cut, the filters' ``keep``, ``dropped`` and ``masks``
        (:func:`~phisieve.fragments.select.select`) and the mixing's ``supply``."""
        self.blocks += 1
        self.notes += cut.notes
        self.words += cut.words
        self.words_in_fragments += cut.words_in_fragments
        self.gold_words.update(cut.gold_words)
        frags = cut.fragments
        kinds = frags.column("kind").to_numpy(zero_copy_only=False)
        lengths = frags.column("length").to_numpy(zero_copy_only=False)
        for kind in KINDS:
            mine = kinds == kind
            self.cut[kind] += int(mine.sum())
            self.kept[kind] += int((mine & keep).sum())
            self.length_sum[kind] += int(lengths[mine].sum())
            values, counts = np.unique(lengths[mine], return_counts=True)
            self.by_length[kind].update(dict(zip(values.tolist(), counts.tolist(), strict=True)))
        self.dropped.update(dropped)
        for reason in REASONS:
            self.dropped.setdefault(reason, 0)
            if masks[reason].any():
                self.filtered.add(reason)
        self.examples += supply["examples"]
        self.ran_out[supply["ran_out"]] += 1
        for kind in KINDS:
            self.supply[kind].update(supply[kind])
        if self.with_gold:
            alive = np.ones(frags.num_rows, dtype=bool)
            rows = {"fragments": _gold_counts(frags, alive)}
            for reason in REASONS:  # an empty mask changes nothing: its row equals the last
                alive &= ~masks[reason]
                rows[f"- {reason}"] = _gold_counts(frags, alive)
            for name, (words, labels) in rows.items():
                was = self.gold_rows.get(name, (0, Counter()))
                self.gold_rows[name] = (was[0] + words, was[1] + Counter(labels))

    def report(self) -> dict[str, Any]:
        """What was cut, dropped and made; with gold spans, the share of PHI words by label
        in the notes, the fragments, and the fragments left after each filter in turn (a
        filter that dropped nothing has no row)."""
        by_kind = {
            kind: {
                "cut": self.cut[kind],
                "kept": self.kept[kind],
                "length_mean": self.length_sum[kind] / self.cut[kind] if self.cut[kind] else 0.0,
                "by_length": {str(n): c for n, c in sorted(self.by_length[kind].items())},
            }
            for kind in KINDS
        }
        supply: dict[str, Any] = {
            "examples": self.examples,
            # The kind that ran out in most blocks (each block deals until one kind does).
            "ran_out": max(KINDS, key=lambda kind: self.ran_out[kind]),
            "blocks": self.blocks,
            "ran_out_blocks": {kind: self.ran_out[kind] for kind in KINDS},
        }
        for kind in KINDS:
            supply[kind] = {k: self.supply[kind][k] for k in ("fragments", "copies", "used")}
        cut, kept = sum(self.cut.values()), sum(self.kept.values())
        report: dict[str, Any] = {
            "notes": self.notes,
            "words": self.words,
            "words_in_fragments": self.words_in_fragments,
            "coverage": self.words_in_fragments / self.words if self.words else 0.0,
            "fragments": {"all": cut, "kept": kept, **by_kind},
            "dropped": {reason: self.dropped[reason] for reason in REASONS},
            "supply": supply,
        }
        if self.with_gold:
            rows = [("full text", self.words, self.gold_words)]
            names = ["fragments", *(f"- {r}" for r in REASONS if r in self.filtered)]
            rows += [(name, *self.gold_rows.get(name, (0, Counter()))) for name in names]
            labels = sorted({label for _, _, c in rows for label in c})
            report["gold"] = [
                {
                    "text": name,
                    "words": words,
                    "phi_share": sum(c.values()) / words if words else 0.0,
                    "by_label": {
                        label: c.get(label, 0) / words if words else 0.0 for label in labels
                    },
                }
                for name, words, c in rows
            ]
        return report


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


def _gold_counts(frags: pa.Table, alive: np.ndarray) -> tuple[int, dict[str, int]]:
    """The words of the fragments ``alive``, and those inside a gold span by label."""
    live = frags.filter(pa.array(alive))
    words = pc.sum(pc.list_value_length(live.column("words"))).as_py() or 0
    labels = pc.value_counts(pc.list_flatten(live.column("gold")))
    return int(words), {
        str(x["values"]): int(x["counts"]) for x in labels.to_pylist() if x["values"] is not None
    }
