"""Patient-level k-fold cross-validation of detection (``phisieve detect-eval --cv K``).

A de-identification tool is judged on notes it has not seen. The annotated patients are cut
into ``k`` folds by a keyed hash of their ids (:func:`phisieve.corpus.split.assign`); for each
fold, everything learnt from annotations is fitted on the other folds only and the fold's
notes are detected as a corpus of their own and scored:

* the deny list grown from the training folds' gold (:func:`phisieve.detect.learnt.
  learn_deny_list`), when ``learn_deny`` is on and ``lists`` runs;
* the CRF (recognizer ``crf`` with no path, which otherwise loads the model of
  ``phisieve-models-physionet``, trained on these very notes): trained on the training folds
  (:func:`phisieve.detect.crf_train.train_crf`), so cross-validation needs no model
  distribution;
* the token-classification model (recognizer ``model`` with no path): trained from ``base``
  on the training folds (:func:`phisieve.detect.train.train_recognizer`);
* with both ``crf`` and ``model``, the stacked CRF (:func:`phisieve.detect.stacking.
  train_stacked`): the model's scores of the training notes come from models trained
  without them, the inner folds being the other outer folds, so that the model of every
  pair of folds is trained once and serves both (``k`` (k - 1) / 2 models, and one per
  fold on all its training notes).

The built-in dictionaries and rules are fixed. Their statistics of the corpus (patients per
word, places named after a trigger) are counted over all the annotated notes, as they would be
over a site's whole corpus when it is detected, without reading any gold: a held-out fold is a
fifth of a corpus, and counted alone its site vocabulary would look rare.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigError
from ..pipeline.work import Work, work
from .folds import folds
from .run import evaluate, find_spans

__all__ = ["cross_validate", "folds", "summarise"]


def _mean_sd(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "sd": None}
    return {
        "mean": statistics.fmean(values),
        "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
    }


def summarise(per_fold: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and sample standard deviation over folds of span recall, character precision and
    recall, and each gold label's span recall (over the folds that have that label), with the
    pooled counts."""
    # A ratio over nothing (no gold in a fold, nothing detected) is no measurement: such
    # folds are left out of that mean rather than counted as perfect.
    measured = {
        "span_recall": lambda f: f["gold_spans"] > 0,
        "char_precision": lambda f: f.get("detected_chars", 1) > 0,
        "char_recall": lambda f: f.get("gold_chars", 1) > 0,
    }
    out: dict[str, Any] = {
        metric: _mean_sd([f[metric] for f in per_fold if ok(f)]) for metric, ok in measured.items()
    }
    labels = sorted({label for f in per_fold for label in f["by_label"]})
    out["by_label"] = {}
    for label in labels:
        present = [f["by_label"][label] for f in per_fold if label in f["by_label"]]
        out["by_label"][label] = {
            "gold": sum(m["gold"] for m in present),
            "found": sum(m["found"] for m in present),
            "recall": _mean_sd([m["recall"] for m in present]),
        }
    gold = sum(f["gold_spans"] for f in per_fold)
    out["pooled"] = {
        "gold_spans": gold,
        "found": sum(sum(m["found"] for m in f["by_label"].values()) for f in per_fold),
    }
    return out


def _take(table: pa.Table, column: str, keep: set[str]) -> pa.Table:
    ids = table.column(column).cast(pa.string())
    return table.filter(pc.is_in(ids, value_set=pa.array(sorted(keep), pa.string())))


def cross_validate(
    documents: pa.Table,
    gold: pa.Table,
    recognizers: Iterable[str] = ("rules", "lists", "crf"),
    *,
    k: int = 5,
    seed: int = 0,
    learn_deny: bool = True,
    base: str | Path | None = None,
    train_options: dict[str, Any] | None = None,
    oof: str = "nested",
    on_fold: Callable[[int, dict[str, Any]], None] | None = None,
    ctx: Work | None = None,
    **detect_kwargs: Any,
) -> dict[str, Any]:
    """Patient-level k-fold cross-validation of :func:`phisieve.detect.run.find_spans`.

    Parameters
    ----------
    documents, gold
        The annotated notes (``doc_id``, ``patient_id``, ``text``) and their gold ``spans``
        table.
    recognizers
        As :func:`phisieve.detect.run.find_spans`; a bare ``model`` is trained per fold from
        ``base``, a bare ``crf`` on the fold's training notes (``model:PATH`` and
        ``crf:PATH``, models trained before, are refused: they may have seen the held-out
        patients).
    k, seed
        The number of folds and the key of the patients' assignment (:func:`folds`).
    learn_deny
        Grow a deny list from each fold's training gold for ``lists``
        (:func:`phisieve.detect.learnt.learn_deny_list`), added to ``deny``.
    base, train_options
        The checkpoint and the options of :func:`phisieve.detect.train.train_recognizer`.
    oof
        Where the stacked CRF's out-of-fold scores of a fold's training notes come from:
        ``nested`` (models trained on the other training folds, never on the held-out
        patients: k (k - 1) / 2 + k models), or ``outer`` (each training fold scored by the
        model of the fold that held it out, which saw the held-out patients' notes: k
        models, the held-out fold's features from a model that never saw it either way; a
        shortcut when models are slow to train, its leak second-order: the CRF learns how
        far to trust scores made by models that saw the held-out fold, never those scores).
    on_fold
        Called with each fold's number and scores as it finishes.
    ctx
        Where each fold's models are trained (a scratch folder,
        :class:`~phisieve.pipeline.work.Work`; default: the system's temporary folder).
    detect_kwargs
        Passed to :func:`phisieve.detect.run.find_spans` (``deny``, ``allow``, ``min_score``...).

    Returns
    -------
    dict
        ``k``, ``seed``, ``recognizers``, ``learn_deny``, ``folds`` (each fold's patients,
        notes, seconds and :func:`phisieve.detect.evaluate` scores, no text) and the
        :func:`summarise` of them.
    """
    recognizers = list(recognizers)
    if trained := [r for r in recognizers if r.startswith(("model:", "crf:"))]:
        raise ConfigError(
            f"cross-validation trains its models on each fold's training patients "
            f"({trained[0]} may have seen the held-out ones): use the recognizer `model` "
            "with --base, or `crf`"
        )
    trains_model = "model" in recognizers
    if trains_model and base is None:
        raise ConfigError("the recognizer `model` in cross-validation needs --base (a BERT folder)")
    if trains_model:
        from dataclasses import fields

        from .stage import DetectTrainOptions, check_options

        known = {f.name for f in fields(DetectTrainOptions)}
        given = {k: v for k, v in (train_options or {}).items() if k in known}
        check_options(DetectTrainOptions(**given))  # before any fold is trained
    if "patient_id" not in documents.column_names:
        raise ConfigError("cross-validation needs the notes' patient_id column")
    if documents.column("patient_id").null_count:
        raise ConfigError("cross-validation needs a patient_id for every note; some are null")
    patients = documents.column("patient_id").cast(pa.string()).to_pylist()
    fold_of = folds(patients, k, seed)
    doc_ids = documents.column("doc_id").cast(pa.string()).to_pylist()
    deny = dict(detect_kwargs.pop("deny", None) or {})
    stacked = trains_model and "crf" in recognizers
    if oof not in ("nested", "outer"):
        raise ConfigError(f"oof must be nested or outer, not {oof!r}")
    with ExitStack() as stack:
        cache = evidence = None
        if stacked:
            from .stacking import ModelCache, out_of_fold

            cache = ModelCache(stack.enter_context(work(ctx).scratch("cv-models")))
            if oof == "outer":
                options = DetectTrainOptions(**(train_options or {}))
                model_options = detect_kwargs.get("model_options")
                evidence = out_of_fold(
                    documents,
                    gold,
                    base,
                    options,
                    fold_of,
                    cache,
                    model_options,
                    ctx,  # type: ignore[arg-type]
                )
        results = _folds(
            documents, gold, recognizers, k, fold_of, doc_ids, patients, deny, learn_deny,
            base, train_options, cache, evidence, on_fold, ctx, detect_kwargs,
        )  # fmt: skip
    summary = summarise(results)
    out = {
        "k": k,
        "seed": seed,
        "recognizers": recognizers,
        "learn_deny": learn_deny,
        "patients": len(fold_of),
        "documents": len(doc_ids),
        "folds": results,
        **summary,
    }
    if cache is not None:
        out["models_trained"] = cache.trained
        out["oof"] = oof
    return out


def _folds(
    documents: pa.Table,
    gold: pa.Table,
    recognizers: list[str],
    k: int,
    fold_of: dict[str, int],
    doc_ids: list[str],
    patients: list[str],
    deny: dict[str, str],
    learn_deny: bool,
    base: str | Path | None,
    train_options: dict[str, Any] | None,
    cache: Any,
    evidence: pl.DataFrame | None,
    on_fold: Callable[[int, dict[str, Any]], None] | None,
    ctx: Work | None,
    detect_kwargs: dict[str, Any],
) -> list[dict[str, Any]]:
    """Each fold of :func:`cross_validate` fitted on the others, detected and scored."""
    from .learnt import learn_deny_list
    from .stage import DetectTrainOptions

    trains_model = "model" in recognizers
    results = []
    for f in range(k):
        test_patients = {p for p, g in fold_of.items() if g == f}
        test_docs = {d for d, p in zip(doc_ids, patients, strict=True) if p in test_patients}
        train_docs = set(doc_ids) - test_docs
        train, test = (_take(documents, "doc_id", s) for s in (train_docs, test_docs))
        train_gold, test_gold = (_take(gold, "doc_id", s) for s in (train_docs, test_docs))
        fold_deny = dict(deny)
        learnt = {}
        if learn_deny and "lists" in recognizers:
            learnt = learn_deny_list(train, train_gold)
            fold_deny = {**learnt, **deny}
        t = time.perf_counter()
        with work(ctx).scratch("cv") as tmp:
            names = list(recognizers)
            if cache is not None:
                from .stacking import train_stacked

                crf_dir = Path(tmp) / "crf"
                inner = {p: g for p, g in fold_of.items() if g != f}
                known = None
                if evidence is not None:
                    known = evidence.filter(pl.col("doc_id").is_in(sorted(train_docs)))
                train_stacked(
                    train, train_gold, base, crf_dir,  # type: ignore[arg-type]
                    model=DetectTrainOptions(**(train_options or {})), fold_of=inner,
                    cache=cache, corpus=documents, evidence=known,
                    model_options=detect_kwargs.get("model_options"), ctx=ctx,
                )  # fmt: skip
                names = [f"crf:{crf_dir}" if r == "crf" else r for r in names if r != "model"]
            elif "crf" in names:
                from .crf_train import train_crf

                crf_dir = Path(tmp) / "crf"
                train_crf(train, train_gold, crf_dir, corpus=documents)
                names = [f"crf:{crf_dir}" if r == "crf" else r for r in names]
            if trains_model and cache is None:
                from .train import train_recognizer

                model_dir = Path(tmp) / "model"
                train_recognizer(
                    train, train_gold, base, model_dir, DetectTrainOptions(**(train_options or {}))
                )
                names = [f"model:{model_dir}" if r == "model" else r for r in names]
            fit_s = time.perf_counter() - t
            t = time.perf_counter()
            detected = find_spans(test, names, deny=fold_deny, corpus=documents, **detect_kwargs)
            detect_s = time.perf_counter() - t
        scores = evaluate(test, detected, test_gold, detect_s)
        scores.update(
            fold=f,
            patients=len(test_patients),
            fit_seconds=fit_s,
            detect_seconds=detect_s,
            learnt_words=len(learnt),
        )
        results.append(scores)
        if on_fold is not None:
            on_fold(f, scores)
    return results


def format_mean_sd(value: dict[str, float | None]) -> str:
    """``0.971 ± 0.012`` (``n/a`` when no fold had the measure)."""
    mean, sd = value["mean"], value["sd"]
    if mean is None or sd is None or math.isnan(mean):
        return "n/a"
    return f"{mean:.3f} ± {sd:.3f}"
