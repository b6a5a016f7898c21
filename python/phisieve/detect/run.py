"""Direct identifiers: find names, dates, phone numbers... in notes (DESIGN.md §3).

Recognizers (combinable):

* ``rules``: the Rust rule recognizers (:func:`phisieve._core.detect_rules`): dates in clinical
  forms (two-digit years after a month, a season, an event or in a range), phone/pager
  numbers, e-mail, URLs, IPs, SSNs, ZIP codes, ages over 89, identifier numbers after their
  context words, places and organisations (before a facility word or an organisation's kind,
  after "lives in", "University of" or "works at"), and names after titles or relation words
  (also lists of them: "daughters Ann and Jo"), before a relation ("Mary (wife)") or before
  credentials;
* ``lists``: a site's deny list (words always direct, e.g. its clinicians and hospitals);
* ``presidio``: presidio-analyzer's default recognizers over a local spaCy model
  (:class:`~phisieve.detect.recognizers.presidio.PresidioRecognizer`), offline, in
  ``nlp.pipe`` batches;
* ``stanza``: Stanza's NER over downloaded models
  (:class:`~phisieve.detect.recognizers.stanza.StanzaRecognizer`);
* ``crf`` (``crf:DIR``): a CRF over words (:class:`~phisieve.detect.recognizers.crf.
  CrfRecognizer`; by default the one trained on the PhysioNet deid notes, from the
  distribution ``phisieve-models-physionet``, GPL-2.0, installed apart from phisieve; or one
  from ``phisieve detect-train-crf``): it tags PHI of its own and drops the
  ``rules``/``lists`` spans it finds very unlikely. The default recognizers include it:
  without that distribution, detection (the ``detect`` stage, :func:`find_spans`) raises
  :class:`~phisieve.errors.MissingModelError` before reading any note, naming it and
  ``rules,lists``;
* ``model:DIR``: a token-classification model trained by ``phisieve detect-train``
  (:class:`~phisieve.detect.recognizers.model.ModelRecognizer`), in overlapping windows,
  batched, on CUDA when available.

``lists`` also runs the built-in dictionaries
(:mod:`~phisieve.detect.recognizers.dictionaries`): census names and US places that are
neither everyday English nor common in the corpus, places named after "transferred to"-like
triggers (flagged corpus-wide), and names grown over neighbouring names and initials.

An allow list (e.g. eponyms such as "Lewy") removes spans whose text it holds. Overlapping
spans are merged, keeping every source. The result is the ``spans`` table (``doc_id``,
``spans``) with code-point offsets; :func:`evaluate` scores it against gold spans.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from .. import _core
from ..errors import ConfigError, InputError
from ..io.schema import SPANS, spans_array
from ..io.sources import BatchSource, open_source, require_columns
from ..pipeline.work import Work, work
from ..text.words import normalize_word
from .recognizers import SPAN_ROWS, dictionaries
from .stage import DEFAULT_RECOGNIZERS, RECOGNIZERS, _kind, check_recognizers

__all__ = [
    "evaluate",
    "find_spans",
    "merge_spans",
    "read_word_list",
    "require_models",
    "resolve",
]


def read_word_list(path: str | os.PathLike[str]) -> dict[str, str]:
    """A word list: one entry per line, ``word`` or ``word<TAB>LABEL``; ``#`` starts a comment.
    Words are normalised like terms (NFKC, lower-case). Returns word -> label (``NAME`` when
    not given)."""
    out: dict[str, str] = {}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read the word list: {e}", path=path) from None
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        word, _, label = line.partition("\t")
        out[normalize_word(word.strip())] = label.strip() or "NAME"
    return out


def _rule_rows(texts: pa.Array) -> pl.DataFrame:
    found = pl.from_arrow(_core.detect_rules(texts))
    assert isinstance(found, pl.DataFrame)
    return found.select(
        pl.col("text").cast(pl.Int64).alias("row"),
        "start",
        "end",
        "label",
        pl.concat_str(pl.lit("rules:"), pl.col("rule")).alias("source"),
        "score",
    )


def _list_rows(texts: pa.Array, deny: dict[str, str]) -> pl.DataFrame:
    flat = dictionaries.word_rows(texts).filter(pl.col("w").is_in(list(deny)))
    return flat.select(
        pl.col("row").cast(pl.Int64),
        pl.col("s").cast(pl.Int32).alias("start"),
        pl.col("e").cast(pl.Int32).alias("end"),
        pl.col("w").replace_strict(deny, return_dtype=pl.String).alias("label"),
        pl.lit("lists:deny").alias("source"),
        pl.lit(1.0, pl.Float32).alias("score"),
    )


def _model_rows(texts: pa.Array, name: str, recognizer: Any) -> pl.DataFrame:
    found = recognizer(texts.to_pylist())
    rows = [
        (i, s, e, label, f"{_kind(name)}:{label}", score)
        for i, spans in enumerate(found)
        for s, e, label, score in spans
    ]
    return pl.DataFrame(
        rows,
        schema=["row", "start", "end", "label", "source", "score"],
        orient="row",
    )


def merge_spans(rows: pl.DataFrame) -> pl.DataFrame:
    """Merge overlapping spans of each row (``row``, ``start``, ``end``, ``label``, ``source``,
    ``score``): the union range, the label of the best-scored span (ties: the first label in
    sort order), every source (``+``-joined, sorted) and the best score."""
    if rows.height == 0:
        return rows
    rows = rows.sort(["row", "start", "end"])
    # A new group starts where a span begins at or after the end of all earlier ones.
    reach = pl.col("end").cum_max().shift(1).over("row")
    rows = rows.with_columns(
        group=((reach.is_null()) | (pl.col("start") >= reach)).cum_sum().cast(pl.Int64)
    )
    return (
        # Ties between equal scores go to the label and source first in sort order, not to
        # whichever recognizer's rows came first.
        rows.sort(["group", "score", "label", "source"], descending=[False, True, False, False])
        .group_by("group", maintain_order=True)
        .agg(
            pl.col("row").first(),
            pl.col("start").min(),
            pl.col("end").max(),
            pl.col("label").first(),
            pl.col("source").unique().sort().str.join("+"),
            pl.col("score").max(),
        )
        .drop("group")
    )


@dataclass
class _Dictionaries:
    """What the ``lists`` recognizer learnt about the whole corpus before detecting. The
    built-in dictionaries themselves (:attr:`lexicon`) are not part of it: each process loads
    them once (a worker rather than unpickling ~250 MB that the driver would have to hold)."""

    stats: dictionaries.CorpusStats
    known_places: pl.DataFrame
    dictionaries: bool = True
    """Whether ``lists`` runs the built-in dictionaries (the statistics may be learnt for the
    ``crf`` recognizer alone)."""

    @property
    def lexicon(self) -> dictionaries.Lexicon:
        """The built-in dictionaries (:func:`dictionaries.lexicon`, loaded once per
        process)."""
        return dictionaries.lexicon()


Pieces = Callable[..., list[Any]]
"""A reduce step's runner: ``pieces(fn, columns, by=..., label=...)`` is ``fn``'s results on
pieces of the corpus (:meth:`phisieve.pipeline.stage.Context.pieces`)."""


def _learn(
    src: BatchSource, ctx: Work | None = None, pieces: Pieces | None = None
) -> _Dictionaries:
    """First passes of the ``lists`` recognizer: patients per word, and the places named after
    a trigger anywhere in the corpus (flagged everywhere after). With ``pieces`` (the run's
    engine), both passes run on pieces of the corpus and their counts add; otherwise ``ctx``
    draws their progress."""
    if pieces is None:
        quiet = work(ctx)

        def pieces(
            fn: Callable[[Any], Any],
            columns: list[str],
            *,
            by: str | None = None,
            label: str | None = None,
        ) -> list[Any]:
            read = src if label is None else quiet.counted(src, label, "documents")
            return [fn(read)]

    # Without patient ids each document counts as its own patient.
    who = "patient_id" if "patient_id" in src.schema.names else "doc_id"
    stats = dictionaries.CorpusStats.combine(
        pieces(dictionaries.CorpusStats.of, [who, "text"], by=who)
    )
    # Each process loads the dictionaries itself (seconds once; this one never does when the
    # pieces run in workers, so it does not hold them).
    counts = pieces(_harvest, ["text"], label="learn places")
    known = dictionaries.known_places(pl.concat(counts), dictionaries.MAX_ZIPF, stats=stats)
    return _Dictionaries(stats, known)


HARVEST_ROWS = 1024
"""Notes whose words :func:`_harvest` holds at once."""


def _harvest(piece: Any) -> pl.DataFrame:
    """The context places named in ``piece``, counted (:func:`dictionaries.place_counts`),
    with their English frequency (``w``, ``hits``, ``zipf``)."""
    lex = dictionaries.lexicon()
    # Word tables of at most HARVEST_ROWS notes at once; counts add up.
    counts = [
        dictionaries.place_counts(b.column("text")[i : i + HARVEST_ROWS], lex)
        for b in open_source(piece).batches(["text"])
        for i in range(0, b.num_rows, HARVEST_ROWS)
    ]
    if not counts:
        counts = [pl.DataFrame(schema={"w": pl.String, "hits": pl.UInt32})]
    totals = pl.concat(counts).group_by("w").agg(pl.col("hits").sum())
    return totals.join(lex.zipf, on="w", how="left")


def _features(texts: pa.Array, lex: Any, stats: Any) -> pl.DataFrame:
    tok = dictionaries.tokens(texts)
    return dictionaries.features(tok, lex, stats, dictionaries.MAX_ZIPF, dictionaries.RARE_SHARE)


def _detect_batch(
    texts: pa.Array,
    recognizers: Iterable[str],
    deny: dict[str, str],
    allow: set[str],
    min_score: dict[str, float],
    models: dict[str, Any] | None = None,
    learnt: _Dictionaries | None = None,
) -> tuple[pl.DataFrame | None, pl.DataFrame]:
    """The merged spans of every recognizer but ``crf`` (``row``, ``start``, ``end``,
    ``label``, ``source``, ``score``), and the dictionaries' word table when ``learnt``."""
    parts = []
    tok = None
    if learnt is not None:
        tok = _features(texts, learnt.lexicon, learnt.stats)
    for name in recognizers:
        if _kind(name) == "crf":
            continue
        if models and name in models:
            parts.append(_model_rows(texts, name, models[name]))
        elif name == "rules":
            parts.append(_rule_rows(texts))
        elif name == "lists":
            if deny:
                parts.append(_list_rows(texts, deny))
            if learnt is not None and tok is not None and learnt.dictionaries:
                parts.append(dictionaries.find(tok, learnt.lexicon, learnt.known_places))
        else:
            raise ConfigError(f"unknown recognizer {name!r}; expected one of {RECOGNIZERS}")
    rows = (
        pl.concat([p.cast(SPAN_ROWS) for p in parts]) if parts else pl.DataFrame(schema=SPAN_ROWS)
    )
    rows = _scored(rows, min_score)
    if tok is not None and learnt is not None and learnt.dictionaries:
        # Rule names that are plain words go; names grow over neighbouring names and initials.
        rows = dictionaries.confirm_names(tok, rows)
        rows = pl.concat([rows, dictionaries.extend_names(tok, rows).cast(SPAN_ROWS)])
    return tok, merge_spans(_allowed(rows, texts, allow))


def _scored(rows: pl.DataFrame, min_score: dict[str, float]) -> pl.DataFrame:
    """``rows`` scored at least their recognizer's threshold (``"*"``: the others')."""
    recognizer = pl.col("source").str.split(":").list.first()
    threshold = recognizer.replace_strict(
        min_score, default=min_score.get("*", 0.0), return_dtype=pl.Float32
    )
    return rows.filter(pl.col("score") >= threshold)


def _allowed(rows: pl.DataFrame, texts: pa.Array, allow: set[str]) -> pl.DataFrame:
    """``rows`` without the spans whose (normalised) text the allow list holds."""
    if not allow or not rows.height:
        return rows
    starts, ends, idx = (rows.get_column(c).to_numpy() for c in ("start", "end", "row"))
    py_texts = texts.to_pylist()
    keep = np.asarray(
        [
            normalize_word(py_texts[r][s:e]) not in allow
            for r, s, e in zip(idx.tolist(), starts.tolist(), ends.tolist(), strict=True)
        ],
        dtype=bool,
    )
    return rows.filter(pl.Series(keep))


def _spans_column(n: int, merged: pl.DataFrame) -> pa.ListArray:
    merged = merged.sort(["row", "start"])
    fields = ("start", "end", "label", "source", "score")
    columns = (merged.get_column(c).to_arrow() for c in fields)
    return spans_array(n, merged.get_column("row").to_numpy(), *columns)


@dataclass
class Detector:
    """The recognizers of a detection run, ready: models loaded, the dictionaries' corpus
    statistics learnt. :meth:`spans` is the batch function of the ``detect`` stage."""

    recognizers: list[str]
    deny: dict[str, str]
    allow: set[str]
    thresholds: dict[str, float]
    models: dict[str, Any]
    learnt: _Dictionaries | None

    def found(self, texts: pa.Array) -> tuple[pl.DataFrame | None, pl.DataFrame]:
        """The merged spans of every recognizer but ``crf`` in ``texts``, and the
        dictionaries' word table when they are learnt (:func:`_detect_batch`)."""
        return _detect_batch(
            texts, self.recognizers, self.deny, self.allow, self.thresholds, self.models,
            self.learnt,
        )  # fmt: skip

    def spans(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The ``spans`` rows (``doc_id``, ``spans``) of a batch of documents."""
        texts = batch.column("text")
        tok, merged = self.found(texts)
        crf = self.crf
        if crf is not None:
            assert tok is not None
            from .recognizers.crf import token_table

            tagged = crf.tag(token_table(texts, tok), merged, texts)
            found = _allowed(_scored(tagged.spans, self.thresholds), texts, self.allow)
            merged = merge_spans(pl.concat([crf.vet(merged, tagged.words), found]))
        return pa.record_batch(
            [batch.column("doc_id").cast(pa.string()), _spans_column(batch.num_rows, merged)],
            schema=SPANS_TABLE,
        )

    @property
    def crf(self) -> Any:
        """The ``crf`` recognizer, if it runs."""
        return next((m for n, m in self.models.items() if _kind(n) == "crf"), None)


SPANS_TABLE = pa.schema([pa.field("doc_id", pa.string()), pa.field("spans", SPANS)])
"""The ``spans`` table: a document's id and its direct-identifier spans."""


def require_models(recognizers: Iterable[str]) -> None:
    """Check that the models the ``recognizers`` load from other distributions are
    installed, before any note is read: a bare ``crf`` needs ``phisieve-models-physionet``,
    a bare ``model`` ``phisieve-models-physionet-stacked``.

    Raises
    ------
    phisieve.errors.MissingModelError
        When one is missing; the message says how to install it, or to detect without it.
    """
    recognizers = list(recognizers)
    if "model" in recognizers:
        from .recognizers.crf import physionet_stacked

        physionet_stacked()
    elif "crf" in recognizers:
        from .recognizers.crf import physionet_crf

        physionet_crf()


def resolve(recognizers: Iterable[str]) -> list[str]:
    """The recognizers with a bare ``model`` replaced by the stacked CRF of
    ``phisieve-models-physionet-stacked`` (:func:`~phisieve.detect.recognizers.crf.
    physionet_stacked`): with ``crf``, ``crf:DIR`` of that folder, whose model runs inside
    it; alone, ``model:DIR`` of its model."""
    names = list(recognizers)
    if "model" not in names:
        return names
    from .recognizers.crf import physionet_stacked

    folder = physionet_stacked()
    if "crf" in names:
        return [f"crf:{folder}" if r == "crf" else r for r in names if r != "model"]
    inner = json.loads((folder / "phisieve.json").read_text())["stacked"]["model"]
    return [f"model:{folder / inner}" if r == "model" else r for r in names]


def detector(
    src: BatchSource,
    recognizers: Iterable[str] = DEFAULT_RECOGNIZERS,
    *,
    deny: dict[str, str] | None = None,
    allow: Iterable[str] | None = None,
    min_score: float | dict[str, float] = 0.0,
    presidio_model: str | None = None,
    stanza: dict[str, Any] | None = None,
    workers: int = 1,
    dictionaries_enabled: bool = True,
    corpus: Any = None,
    model_options: dict[str, Any] | None = None,
    pieces: Pieces | None = None,
    crf_options: dict[str, Any] | None = None,
    ctx: Work | None = None,
) -> Detector:
    """Load the recognizers and, for ``lists``, learn the dictionaries' statistics of the
    corpus (``src``, or ``corpus`` when given): the reduce step of detection
    (:func:`find_spans`, the ``detect`` stage).

    Parameters
    ----------
    src
        The documents (``doc_id``, ``text``).
    recognizers
        Names from :data:`RECOGNIZERS` (``model:DIR`` for a trained model).
    deny
        Word -> label, always direct (:func:`read_word_list`); used by ``lists``.
    allow
        Words never direct (eponyms, clinical terms a rule mistakes for names).
    min_score
        Drop detections scored below this before merging: one threshold, or one per
        recognizer (``{"presidio": 0.85, "rules": 0.0}``; ``"*"`` for the others).
    presidio_model, workers
        The spaCy model of the ``presidio`` recognizer (default
        :data:`~phisieve.detect.recognizers.presidio.DEFAULT_MODEL`) and its ``nlp.pipe``
        processes.
    stanza
        Options of the ``stanza`` recognizer
        (:class:`~phisieve.detect.recognizers.stanza.StanzaRecognizer`: ``package``, ``ner``,
        ``model_dir``, ``use_gpu``...).
    dictionaries_enabled
        Whether ``lists`` also runs the built-in dictionaries
        (:mod:`~phisieve.detect.recognizers.dictionaries`: census names, US places, places
        named after a trigger); they read the corpus twice first (patients per word, context
        places).
    corpus
        The notes the dictionaries learn those corpus statistics from, when not ``src``
        itself (no gold is read): e.g. a site's whole corpus when only some of its patients'
        notes are detected (cross-validation, :mod:`phisieve.detect.cv`).
    model_options
        Options of the ``model:DIR`` recognizers (:class:`phisieve.detect.recognizers.model.
        ModelRecognizer`: ``device``, ``batch_size``).
    pieces
        The run's engine for ``src`` (the stage's reduce steps).
    crf_options
        Options of the ``crf`` recognizer (:class:`phisieve.detect.recognizers.crf.
        CrfRecognizer`: ``verify``).
    ctx
        Where the progress is drawn (:class:`~phisieve.pipeline.work.Work`; default none).
    """
    thresholds = check_recognizers(list(recognizers), min_score)
    recognizers = resolve(recognizers)
    models: dict[str, Any] = {}
    if "presidio" in recognizers:
        from .recognizers.presidio import DEFAULT_MODEL, PresidioRecognizer

        models["presidio"] = PresidioRecognizer(presidio_model or DEFAULT_MODEL, n_process=workers)
    if "stanza" in recognizers:
        from .recognizers.stanza import StanzaRecognizer

        models["stanza"] = StanzaRecognizer(**(stanza or {}))
    for name in recognizers:
        if name.startswith("model:"):
            from .recognizers.model import ModelRecognizer

            models[name] = ModelRecognizer(name.split(":", 1)[1], **(model_options or {}))
    for name in recognizers:
        if _kind(name) == "crf":
            from .recognizers.crf import CrfRecognizer

            folder = name.split(":", 1)[1] if ":" in name else None
            models[name] = CrfRecognizer(folder, model_options=model_options, **(crf_options or {}))
    learnt = None
    uses_dictionaries = "lists" in recognizers and dictionaries_enabled
    if uses_dictionaries or any(_kind(r) == "crf" for r in recognizers):
        if corpus is None:
            learnt = _learn(src, ctx, pieces)
        else:
            learn_src = open_source(corpus, 4096)
            require_columns(learn_src.schema, ["doc_id", "text"], learn_src.name)
            learnt = _learn(learn_src, ctx)
        learnt.dictionaries = uses_dictionaries
    allow_set = {normalize_word(w) for w in allow or ()}
    return Detector(recognizers, deny or {}, allow_set, thresholds, models, learnt)


def find_spans(
    documents: Any, recognizers: Iterable[str] = DEFAULT_RECOGNIZERS, **options: Any
) -> pa.Table:
    """The ``spans`` table of ``documents``, in memory: what the ``detect`` stage
    (:func:`phisieve.api.detect`) writes, with every option of :func:`detector`, including
    those its command line does not offer (a deny list as a mapping, ``corpus``,
    ``dictionaries_enabled``, the recognizers' own options).

    ``documents`` is anything :func:`phisieve.io.sources.open_source` reads, with ``doc_id``
    and ``text``; a one-shot stream is held in memory when the recognizers read the corpus
    more than once. Returns ``doc_id`` and ``spans`` (code-point ``start``/``end``,
    ``label``, ``source`` = the recognizers that found it, ``score``). ``options`` are
    :func:`detector`'s (``ctx`` draws the progress). The models the
    recognizers load from other distributions are checked first (:func:`require_models`).
    """
    recognizers = list(recognizers)
    check_recognizers(recognizers, options.get("min_score", 0.0))
    require_models(recognizers)
    src = open_source(documents, 4096)
    require_columns(src.schema, ["doc_id", "text"], src.name)
    learns = ("lists" in recognizers and options.get("dictionaries_enabled", True)) or any(
        _kind(r) == "crf" for r in recognizers
    )
    if learns and not src.reiterable:
        # The dictionaries read the corpus three times; a one-shot stream is kept in memory.
        src = open_source(src.table(), 4096)
    found = detector(src, recognizers, **options)
    out = []
    with work(options.get("ctx")).bar("detect", src.num_rows, "documents") as adv:
        for b in src.batches(["doc_id", "text"]):
            out.append(found.spans(b))
            adv(b.num_rows)
    return pa.Table.from_batches(out, SPANS_TABLE)


def evaluate(
    documents: pa.Table, detected: pa.Table, gold: pa.Table, seconds: float | None = None
) -> dict[str, Any]:
    """Score detected spans against gold spans.

    A gold span is *found* when any detected span overlaps it (span recall, overall and per
    gold label). Character precision and recall count the code points inside detected and
    gold spans. No text is returned. Document ids are compared as strings (``detect`` writes
    them so). ``detected_chars`` and ``gold_chars`` say whether precision and recall had
    anything to measure (a ratio over nothing is reported as 1.0).
    """

    def ids(table: pa.Table) -> list[str]:
        return table.column("doc_id").cast(pa.string()).to_pylist()

    texts = dict(zip(ids(documents), documents.column("text").to_pylist(), strict=True))
    det = dict(zip(ids(detected), detected.column("spans").to_pylist(), strict=True))
    total: Counter[str] = Counter()
    found: Counter[str] = Counter()
    tp = det_chars = gold_chars = 0
    gold_docs = dict(zip(ids(gold), gold.column("spans").to_pylist(), strict=True))
    for doc, text in texts.items():
        d = det.get(doc) or []
        g = gold_docs.get(doc) or []
        n = len(text or "")
        dmask = np.zeros(n, dtype=bool)
        gmask = np.zeros(n, dtype=bool)
        for s in d:
            dmask[s["start"] : s["end"]] = True
        for s in g:
            gmask[s["start"] : s["end"]] = True
            total[s["label"]] += 1
            if dmask[s["start"] : s["end"]].any():
                found[s["label"]] += 1
        tp += int((dmask & gmask).sum())
        det_chars += int(dmask.sum())
        gold_chars += int(gmask.sum())
    all_gold = sum(total.values())
    result: dict[str, Any] = {
        "documents": len(texts),
        "gold_spans": all_gold,
        "span_recall": sum(found.values()) / all_gold if all_gold else 1.0,
        "char_precision": tp / det_chars if det_chars else 1.0,
        "char_recall": tp / gold_chars if gold_chars else 1.0,
        "detected_chars": det_chars,
        "gold_chars": gold_chars,
        "by_label": {
            k: {"gold": total[k], "found": found[k], "recall": found[k] / total[k]}
            for k in sorted(total)
        },
    }
    if seconds:
        result["notes_per_s"] = len(texts) / seconds
    return result


def evaluate_corpus(
    corpus: str | os.PathLike[str],
    recognizers: Iterable[str] = DEFAULT_RECOGNIZERS,
    **kwargs: Any,
) -> dict[str, Any]:
    """:func:`find_spans` on a PhysioNet deid folder (``id.text``, ``id-phi.phrase``),
    scored."""
    from ..io.annotated import read_physionet

    documents, gold = read_physionet(corpus)
    t = time.perf_counter()
    detected = find_spans(documents, recognizers, **kwargs)
    seconds = time.perf_counter() - t
    return evaluate(documents, detected, gold, seconds)
