"""Protection coverage: the default pipeline run on annotated notes, scored against the gold.

``detect`` → ``index --spans`` → ``encode --terms --spans`` run on a PhysioNet-format folder
(``id.text`` and ``id-phi.phrase``), and two numbers come out: the share of gold PHI tokens
(model tokens inside one of phisieve's words that overlap a gold span) the encoded dataset
protects, and the share of all tokens it protects, with the breakdown by reason. Any user
with annotated notes can check their own recognizers, scope and tokenizer with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..pipeline.work import Work, work
from ..protection.policy import DEFAULT_MIN_SHARE, DEFAULT_SCOPE, check_scope


def coverage(
    documents: pa.Table,
    gold: pa.Table,
    tokenizer: Any,
    *,
    recognizers: Iterable[str] = ("rules", "lists"),
    k: int = 2,
    ngram: int = 1,
    direct_scope: str = DEFAULT_SCOPE,
    min_share: float = DEFAULT_MIN_SHARE,
    max_len: int = 512,
    detect_options: dict[str, Any] | None = None,
    ctx: Work | None = None,
) -> dict[str, Any]:
    """Run detect → index → encode on ``documents`` and score the protection on ``gold``.

    Parameters
    ----------
    documents, gold
        ``documents`` rows and their gold ``spans`` (e.g. from :func:`read_physionet`).
    tokenizer
        A Hugging Face fast tokenizer or the local path of one.
    recognizers, detect_options
        What ``detect`` runs (:func:`phisieve.detect.run.find_spans`).
    k, ngram, direct_scope, min_share, max_len
        The options of ``index`` and ``encode``.
    ctx
        Where the encoded copy is kept while it is scored (a scratch folder,
        :class:`~phisieve.pipeline.work.Work`; default: the system's temporary folder).

    Returns
    -------
    dict
        ``coverage`` (protected gold PHI tokens / gold PHI tokens), ``protected_share``
        (protected tokens / all tokens) and the encode stage's ``protection`` report.
    """
    from ..detect.run import find_spans
    from ..pipeline.runner import run_stage
    from ..term_index.build import index
    from .stage import EncodeStage

    check_scope(direct_scope, min_share)
    spans = find_spans(documents, recognizers, **(detect_options or {}))
    terms = index(
        documents, k=k, ngram=ngram, spans=spans, direct_scope=direct_scope, min_share=min_share
    )
    inputs = {"docs": documents, "terms": terms, "spans": spans, "gold": gold}
    if isinstance(tokenizer, (str, Path)):
        inputs["tokenizer"], tokenizer = tokenizer, None
    stage = EncodeStage(tokenizer=tokenizer, ngram=ngram, max_len=max_len)
    with work(ctx).scratch("coverage") as tmp:
        manifest = run_stage(stage, inputs, Path(tmp) / "encoded")
    report = manifest["encoding"]["protection"]
    return {
        "documents": documents.num_rows,
        "patients": len(set(documents.column("patient_id").to_pylist())),
        "coverage": report["gold"]["coverage"],
        "protected_share": report["protected_share"],
        "options": {
            "recognizers": list(recognizers),
            "k": k,
            "ngram": ngram,
            "direct_scope": direct_scope,
            "min_share": min_share,
            "max_len": max_len,
        },
        "protection": report,
    }


def patient_folds(documents: pa.Table, folds: int, seed: int = 0) -> list[pa.Table]:
    """``documents`` split into ``folds`` parts by patient (each patient in exactly one),
    a pure function of the patient ids and ``seed``."""
    import hashlib

    patients = sorted(set(documents.column("patient_id").to_pylist()))
    key = {
        p: hashlib.sha256(f"{seed}\x00{p}".encode()).digest() for p in patients
    }  # a stable shuffle
    order = sorted(patients, key=key.__getitem__)
    fold_of = {p: i % folds for i, p in enumerate(order)}
    which = np.array([fold_of[p] for p in documents.column("patient_id").to_pylist()])
    return [documents.filter(pa.array(which == f)) for f in range(folds)]
