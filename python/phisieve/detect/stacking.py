"""The transformer's evidence inside the CRF: stacked detection (``detect-train-crf --base``).

A token classifier (:mod:`phisieve.detect.train`) reads a whole window of context and finds
PHI that no rule knows, but on its own it costs precision: added to the default's spans it
lifted recall under cross-validation at ten points of precision (``benches/RESULTS.md``,
issue 42). Stacked, it becomes evidence rather than spans. Each word of the notes carries
two more features for the CRF's *tagger* (:data:`~phisieve.detect.recognizers.crf.STACKED`):

* ``mp``, the model's highest PHI probability (1 - P(O)) over the word's tokens, in
  :data:`BUCKETS`, and the same of the words just before and after;
* ``ml``, the category of that token when it is at least :data:`LABELLED`, else ``O``.

The tagger learns, beside the rules' spans, how far to trust the model in each context, and
its Viterbi tags and vetting decide; the model's own spans are never added. The *finder*
stays on the words alone.

Stacking needs the model's probabilities on the CRF's training notes from models that did
not see them (*out of fold*), or the CRF learns the overconfidence of a model on its own
training data. :func:`train_stacked` cuts the training patients into folds, trains one model
per fold on the others and scores the fold with it, then trains the model that ships on
every note (as scikit-learn's ``StackingClassifier`` refits its estimators on all the data).

Models are cached by the notes they were trained on (:class:`ModelCache`): patient-level
cross-validation whose inner folds are the other outer folds (:func:`phisieve.detect.cv.
cross_validate`) trains the model of folds {f, g} once for the outer folds f and g.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigError
from ..pipeline.work import Work, work
from .recognizers.crf import BUCKETS, LABELLED, word_evidence
from .recognizers.model import TOKEN_SCORES
from .stage import CrfTrainOptions, DetectTrainOptions

__all__ = [
    "BUCKETS",
    "LABELLED",
    "MODEL_DIR",
    "ModelCache",
    "out_of_fold",
    "train_stacked",
    "word_evidence",
]

MODEL_DIR = "model"
"""The stacked CRF folder's sub-folder holding the model it reads (from ``detect-train``)."""


def _fingerprint(*parts: Any) -> str:
    return hashlib.blake2b(
        json.dumps(parts, sort_keys=True, default=str).encode(), digest_size=12
    ).hexdigest()


class ModelCache:
    """Models trained by :func:`phisieve.detect.train.train_recognizer`, in ``root``, one
    folder per (notes, base, options): the same notes ask for the same model once."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.trained = 0
        """How many models this cache trained (not found)."""

    def model(
        self,
        documents: pa.Table,
        gold: pa.Table,
        base: str | Path,
        options: DetectTrainOptions,
        ctx: Work | None = None,
    ) -> Path:
        """The folder of the model trained on ``documents`` (keyed by their ids and
        texts' digests, ``base`` and ``options``), trained now when not cached."""
        from . import train

        ids = documents.column("doc_id").cast(pa.string()).to_pylist()
        texts = documents.column("text").to_pylist()
        notes = sorted(
            (d, hashlib.blake2b((t or "").encode(), digest_size=8).hexdigest())
            for d, t in zip(ids, texts, strict=True)
        )
        folder = self.root / _fingerprint(notes, str(base), asdict(options))
        if not (folder / "phisieve.json").is_file():
            partial = folder.with_name(folder.name + ".partial")
            train.train_recognizer(documents, gold, base, partial, options, ctx)
            partial.rename(folder)
            self.trained += 1
        return folder


def _take(table: pa.Table, keep: set[str]) -> pa.Table:
    ids = table.column("doc_id").cast(pa.string())
    return table.filter(pc.is_in(ids, value_set=pa.array(sorted(keep), pa.string())))


def out_of_fold(
    documents: pa.Table,
    gold: pa.Table,
    base: str | Path,
    options: DetectTrainOptions,
    fold_of: dict[str, int],
    cache: ModelCache,
    model_options: dict[str, Any] | None = None,
    ctx: Work | None = None,
) -> pl.DataFrame:
    """The model's token scores on every note of ``documents``, each from a model trained
    on the other folds' notes only.

    Parameters
    ----------
    documents, gold
        The notes (``doc_id``, ``patient_id``, ``text``) and their gold ``spans`` table.
    base, options
        The checkpoint and options of the models (:func:`phisieve.detect.train.
        train_recognizer`).
    fold_of
        Every patient's fold.
    cache
        Where the fold models are trained, or found (:class:`ModelCache`).
    model_options
        Options of the :class:`~phisieve.detect.recognizers.model.ModelRecognizer` that
        scores each fold (``device``, ``batch_size``).

    Returns
    -------
    polars.DataFrame
        ``doc_id`` and :data:`~phisieve.detect.recognizers.model.TOKEN_SCORES` but ``row``.
    """
    from .recognizers.model import ModelRecognizer

    patients = documents.column("patient_id").cast(pa.string()).to_pylist()
    ids = documents.column("doc_id").cast(pa.string()).to_pylist()
    if missing := sorted(set(patients) - set(fold_of)):
        raise ConfigError(f"{len(missing)} patients have no fold")
    parts = []
    for g in sorted(set(fold_of[p] for p in patients)):
        held = {d for d, p in zip(ids, patients, strict=True) if fold_of[p] == g}
        rest = set(ids) - held
        if not rest:
            raise ConfigError("stacking needs at least two folds of patients")
        folder = cache.model(_take(documents, rest), _take(gold, rest), base, options, ctx)
        scored = _take(documents, held)
        recognizer = ModelRecognizer(folder, **(model_options or {}))
        scores = recognizer.token_scores(scored.column("text").to_pylist())
        names = pl.Series("doc_id", scored.column("doc_id").cast(pa.string()).to_pylist())
        parts.append(scores.with_columns(doc_id=names.gather(scores.get_column("row"))).drop("row"))
    schema = {"doc_id": pl.String, **{k: v for k, v in TOKEN_SCORES.items() if k != "row"}}
    if not parts:
        return pl.DataFrame(schema=schema)
    return pl.concat(parts).select(list(schema))


def train_stacked(
    documents: pa.Table,
    gold: pa.Table,
    base: str | Path,
    out: str | Path,
    options: CrfTrainOptions | None = None,
    model: DetectTrainOptions | None = None,
    *,
    folds: int = 5,
    fold_of: dict[str, int] | None = None,
    cache: ModelCache | None = None,
    corpus: Any = None,
    model_options: dict[str, Any] | None = None,
    evidence: pl.DataFrame | None = None,
    ctx: Work | None = None,
) -> dict[str, Any]:
    """Train the stacked CRF: a token classifier and a CRF that reads its probabilities.

    Parameters
    ----------
    documents, gold
        The annotated notes (``doc_id``, ``text``, ``patient_id``; a note without a patient
        is its own) and their gold ``spans`` table.
    base
        The checkpoint the models are fine-tuned from (a local BERT folder).
    out
        The folder to write: the CRF (:func:`phisieve.detect.crf_train.train_crf`), with
        ``model/``, the model trained on every note, and ``phisieve.json`` recording the
        stacking.
    options, model
        Options of the CRF and of the models.
    folds, fold_of
        The patients' folds of the out-of-fold scores: ``folds`` keyed by the CRF's seed
        (:func:`phisieve.detect.folds.folds`), or ``fold_of`` given.
    cache
        Where the fold models are trained or found (default: a scratch folder of ``ctx``).
    corpus
        The notes the dictionaries' statistics are counted over (:func:`~phisieve.detect.
        crf_train.train_crf`).
    model_options
        Options of the recognizer that scores the folds (``device``, ``batch_size``).
    evidence
        The model's scores of the notes made beforehand (:func:`out_of_fold`'s table), instead
        of by ``folds`` models here (cross-validation's ``oof="outer"``).
    ctx
        Progress and scratch folders (:class:`~phisieve.pipeline.work.Work`).

    Returns
    -------
    dict
        What ``phisieve.json`` records, and the seconds taken.
    """
    from .crf_train import INFO_FILE, train_crf
    from .folds import folds as assign_folds

    o = options or CrfTrainOptions()
    m = model or DetectTrainOptions()
    ctx = work(ctx)
    started = time.perf_counter()
    ids = documents.column("doc_id").cast(pa.string())
    if "patient_id" in documents.column_names:
        patients = pc.coalesce(documents.column("patient_id").cast(pa.string()), ids)
    else:
        patients = ids
    documents = documents.drop_columns(
        [c for c in ("patient_id",) if c in documents.column_names]
    ).append_column("patient_id", patients)
    if fold_of is None:
        fold_of = assign_folds(patients.to_pylist(), folds, o.seed)
    out = Path(out)

    given = evidence is not None
    with ExitStack() as stack:
        if cache is None:
            cache = ModelCache(stack.enter_context(ctx.scratch("stacking")))
        if evidence is None:
            evidence = out_of_fold(documents, gold, base, m, fold_of, cache, model_options, ctx)
        final = cache.model(documents, gold, base, m, ctx)
        out.mkdir(parents=True, exist_ok=True)
        shutil.copytree(final, out / MODEL_DIR, dirs_exist_ok=True)
    info = train_crf(documents, gold, out, o, corpus=corpus, evidence=evidence, ctx=ctx)
    info["stacked"] = {
        "model": MODEL_DIR,
        "folds": None if given else len(set(fold_of.values())),
        "buckets": list(BUCKETS),
        "labelled": LABELLED,
        "model_options": asdict(m),
        "scored_tokens": evidence.height,
    }
    info.pop("seconds", None)
    (out / INFO_FILE).write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
    return {**info, "seconds": time.perf_counter() - started}
