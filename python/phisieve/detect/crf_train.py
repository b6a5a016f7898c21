"""``phisieve detect-train-crf``: the ``crf`` recognizer trained on annotated notes.

Every word of the notes gets the features of :func:`~phisieve.detect.recognizers.crf.
crf_features` (with the spans that ``rules`` and ``lists`` find in them, as ``detect``
computes them, and the dictionaries' statistics of the notes) and the category of the gold
span it overlaps (``O`` outside). CRFsuite fits the linear-chain CRF with L-BFGS and elastic-net
regularisation; the fit is deterministic, so the same notes and options give the same model
file.

A share of the ``rules``/``lists`` spans (``drop_spans``, 15% by default, each by a keyed draw of
``seed`` and the span, :func:`hidden_spans`) is hidden from the training notes' features. The
rules were written against the PhysioNet notes and find nearly all their PHI; trained on that
alone, the CRF learns to trust them and finds little of what they miss, which is what matters
on new patients' notes, where they miss more.
Under cross-validation with 15% of the held-out rules' spans hidden at random, this lifts
recall from 0.862 to 0.901 (``benches/RESULTS.md``).

A second CRF, the *finder*, is trained on the same words without the spans' features: it
learns PHI from the words and their context alone, so what it finds does not depend on the
rules having found it. With it, the stress test above gives 0.940 (``benches/RESULTS.md``).
The finder also learns from ``augment`` copies of every training note whose gold PHI is
re-filled with fresh keyed surrogates (:func:`phisieve.phi.augment.refilled`): other names,
places and numbers in the same contexts, so it learns where PHI goes rather than which names
these patients have. The tagger learns from the notes as given (trained on the copies too,
it loses a point of recall under cross-validation: ``benches/RESULTS.md``).

The bare ``crf`` recognizer's model (:func:`~phisieve.detect.recognizers.crf.physionet_crf`,
the distribution ``phisieve-models-physionet``, ``models/physionet/`` in the repository) was
made with ``make crf-model``::

    phisieve detect-train-crf ../shared/data/physionet-deid \
        --out models/physionet/src/phisieve_models_physionet/crf --overwrite
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from ..errors import InputError
from ..io.schema import SPANS
from ..io.sources import open_source, require_columns
from ..pipeline.work import Work, work
from .labels import category
from .recognizers.crf import (
    FINDER_FILE,
    FORMAT,
    INFO_FILE,
    MODEL_FILE,
    crf_features,
    feature_columns,
    overlaps,
    sequences,
    sorted_words,
    token_table,
    word_evidence,
)
from .stage import STACKING_OPTIONS, CrfTrainOptions, check_crf_options

__all__ = ["train_crf", "word_labels"]

TRAINED_WITH = ("rules", "lists")
"""The recognizers whose spans are the CRF's features, as ``detect`` runs them by default."""


def _notes(documents: pa.Table) -> pa.Table:
    """``doc_id``, ``patient_id`` (the ``doc_id`` where unknown) and ``text`` of notes, as
    strings: notes and their re-filled copies in one table."""
    require_columns(documents.schema, ["doc_id", "text"], "documents")
    doc_ids = documents.column("doc_id").cast(pa.string())
    has_patients = "patient_id" in documents.column_names
    patients = documents.column("patient_id").cast(pa.string()) if has_patients else doc_ids
    text = documents.column("text").cast(pa.large_string())
    return pa.table({"doc_id": doc_ids, "patient_id": patients, "text": text})


def _gold(gold: pa.Table) -> pa.Table:
    """``doc_id`` (as strings) and ``spans`` of a gold table, as the copies' gold has them."""
    require_columns(gold.schema, ["doc_id", "spans"], "spans")
    return pa.table(
        {"doc_id": gold["doc_id"].cast(pa.string()), "spans": gold["spans"].cast(SPANS)}
    )


def word_labels(words: pl.DataFrame, gold: pa.Table, doc_ids: list[str]) -> pl.DataFrame:
    """``words`` (``row``, ``i``, ``s``, ``e``, sorted) with ``y``: the category
    (:func:`~phisieve.detect.labels.category`) of a gold span the word overlaps (the earliest
    starting one), ``O`` outside every gold span. ``doc_ids[row]`` names each row's note."""
    spans = pl.from_arrow(gold.select(["doc_id", "spans"]))
    assert isinstance(spans, pl.DataFrame)
    spans = (
        spans.with_columns(pl.col("doc_id").cast(pl.String))
        .explode("spans")
        .drop_nulls("spans")
        .unnest("spans")
        .select("doc_id", "start", "end", "label")
    )
    rows = pl.DataFrame(
        {"doc_id": doc_ids, "row": range(len(doc_ids))},
        schema={"doc_id": pl.String, "row": pl.Int64},
    )
    cats = {label: category(label) or "OTHER" for label in spans.get_column("label").unique()}
    spans = spans.join(rows, on="doc_id").with_columns(
        y=pl.col("label").replace_strict(cats, return_dtype=pl.String)
    )
    span_index, word_index = overlaps(words, spans)
    hit = (
        spans.select("start", "y")[span_index]
        .with_columns(_word=pl.Series(word_index, dtype=pl.Int64))
        .sort("_word", "start")
        .group_by("_word", maintain_order=True)
        .agg(pl.col("y").first())
    )
    y = np.full(words.height, "O", dtype=object)
    y[hit.get_column("_word").to_numpy()] = hit.get_column("y").to_numpy()
    return words.with_columns(y=pl.Series(y, dtype=pl.String))


def hidden_spans(spans: pl.DataFrame, doc_ids: list[str], share: float, seed: int) -> pl.Series:
    """Which of the ``rules``/``lists`` ``spans`` (``row``, ``start``, ``end``, ``label``)
    training hides: those whose keyed draw (HMAC-SHA256 under ``seed`` of the note's id, the
    offsets and the label, :func:`phisieve._core.keyed_draws`) falls below ``share``. A span's
    fate is a function of the span alone, never of the other spans: a new rule leaves hidden
    the spans it does not touch (a draw by position would reshuffle them all)."""
    from .. import _core

    ids = pl.Series("doc_id", doc_ids, dtype=pl.String)
    parts = [
        ids.gather(spans.get_column("row")).to_arrow(),
        *(spans.get_column(c).cast(pl.String).to_arrow() for c in ("start", "end", "label")),
    ]
    draws = _core.keyed_draws(f"phisieve-drop-spans:{seed}".encode(), parts).to_numpy()
    return pl.Series("hidden", draws < np.uint64(int(share * 2**64)))  # share < 1


def _labelled(
    notes: pa.Table,
    gold: pa.Table,
    corpus: Any,
    o: CrfTrainOptions,
    ctx: Work,
    evidence: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Every word of ``notes`` (:func:`_notes`) with its CRF features (the ``rules``/``lists``
    spans found in them, a share hidden; the model's ``evidence`` when given) and gold
    category ``y``, sorted."""
    from .run import detector

    found = detector(open_source(notes, 4096), TRAINED_WITH, corpus=corpus, ctx=ctx)
    texts = notes.column("text").combine_chunks()
    tok, spans = found.found(texts)
    assert tok is not None
    doc_ids = notes.column("doc_id").to_pylist()
    if o.drop_spans > 0 and spans.height:
        spans = spans.filter(~hidden_spans(spans, doc_ids, o.drop_spans, o.seed))
    tok = token_table(texts, tok)
    if evidence is not None:
        rows = pl.DataFrame(
            {"doc_id": doc_ids, "row": range(len(doc_ids))},
            schema={"doc_id": pl.String, "row": pl.Int64},
        )
        tok = word_evidence(sorted_words(tok), evidence.join(rows, on="doc_id"))
    feats = crf_features(tok, spans)
    return word_labels(feats, gold, doc_ids).sort("row", "i")


def _fit(
    path: Path, labelled: pl.DataFrame, columns: list[str], o: CrfTrainOptions, ctx: Work
) -> None:
    """Fit one CRF on the ``columns`` of :func:`_labelled`'s words and write it to ``path``."""
    import pycrfsuite

    rows = int(labelled.get_column("row").max() or 0) + 1 if labelled.height else 0
    xs = sequences(labelled.select("row", "i", f=pl.concat_list(columns)), rows)
    ys = sequences(labelled.select("row", "i", f=pl.col("y")), rows)
    trainer = pycrfsuite.Trainer(verbose=False)
    with ctx.bar(f"detect-train-crf {path.name}", len(xs), "notes") as adv:
        for x, y in zip(xs, ys, strict=True):
            if x:
                trainer.append(x, y)
            adv(1)
    trainer.set_params(
        {
            "c1": o.c1,
            "c2": o.c2,
            "max_iterations": o.max_iterations,
            "feature.possible_transitions": True,
        }
    )
    trainer.train(str(path))


def train_crf(
    documents: pa.Table,
    gold: pa.Table,
    out: str | Path,
    options: CrfTrainOptions | None = None,
    *,
    corpus: Any = None,
    evidence: pl.DataFrame | None = None,
    ctx: Work | None = None,
) -> dict[str, Any]:
    """Train the ``crf`` recognizer on annotated notes and write its folder.

    Parameters
    ----------
    documents, gold
        The notes (``doc_id``, ``text``, ``patient_id`` when known) and their gold ``spans``
        table.
    out
        The folder to write: ``crf.crfsuite`` and ``phisieve.json`` (format, options,
        counts; no text).
    options
        Regularisation and iterations (:class:`CrfTrainOptions`).
    corpus
        The notes the dictionaries' statistics are counted over, when not ``documents``
        (as :func:`phisieve.detect.run.find_spans`'s ``corpus``).
    evidence
        A token classifier's scores of the notes (``doc_id`` and :data:`~phisieve.detect.
        recognizers.model.TOKEN_SCORES` but ``row``), out of fold: the tagger learns from
        them too (:mod:`phisieve.detect.stacking`, which writes the model beside it).
    ctx
        Where the progress is drawn (:class:`~phisieve.pipeline.work.Work`; default none).

    Returns
    -------
    dict
        What ``phisieve.json`` records, and the seconds taken.
    """
    o = options or CrfTrainOptions()
    ctx = work(ctx)
    check_crf_options(o)
    started = time.perf_counter()
    notes = _notes(documents)
    labelled = _labelled(notes, gold, corpus, o, ctx, evidence)
    phi_words = int((labelled.get_column("y") != "O").sum())
    if not phi_words:
        raise InputError("the annotated notes have no gold PHI span to learn from")
    words, labels = labelled.height, _labels(labelled)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    # The tagger sees the rules'/lists' spans, of the notes as given: it is the same with or
    # without copies. The finder sees only the words, of the notes and their copies.
    _fit(folder / MODEL_FILE, labelled, feature_columns(labelled), o, ctx)
    copied = {"copied": 0, "skipped": 0}
    if o.augment:
        from ..phi.augment import refilled

        copies, copies_gold, copied = refilled(notes, gold, o.augment, o.seed)
        counted = notes if corpus is None else _notes(open_source(corpus).table())
        labelled = _labelled(
            pa.concat_tables([notes, copies]),
            pa.concat_tables([_gold(gold), copies_gold]),
            pa.concat_tables([counted, copies]),
            o,
            ctx,
        )
    _fit(folder / FINDER_FILE, labelled, feature_columns(labelled, spans=False), o, ctx)
    # The finder can emit labels only the copies hold (e.g. an ID surrogate's kind).
    info = {
        "format": FORMAT,
        # The options of the model a stacked CRF reads are recorded under `stacked`.
        "options": {k: v for k, v in asdict(o).items() if k not in STACKING_OPTIONS},
        "notes": notes.num_rows,
        "refilled_copies": copied,
        "words": words,
        "phi_words": phi_words,
        "labels": labels,
        "finder_labels": _labels(labelled),
        "features_from": list(TRAINED_WITH),
    }
    (folder / INFO_FILE).write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
    return {**info, "seconds": time.perf_counter() - started}


def _labels(labelled: pl.DataFrame) -> list[str]:
    """The labels a model trained on ``labelled`` can emit, sorted."""
    return sorted(labelled.get_column("y").unique().to_list())
