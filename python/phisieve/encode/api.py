"""The encode stage through the Python API (:func:`encode`), and :func:`read_encoding`: how
an encoded dataset was made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from ..errors import InputError
from ..io.dataset import read_manifest
from ..pipeline.runner import run_stage
from .stage import EncodeOptions, EncodeStage

__all__ = ["encode", "read_encoding"]


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


def read_encoding(path: str | Path) -> dict[str, Any]:
    """How the complete ``encoded`` dataset at ``path`` was made (its manifest's
    ``encoding``: tokenizer, ``max_len``, special token ids, protection report...)."""
    manifest = read_manifest(path)
    if "encoding" not in manifest:
        raise InputError(
            f"not an encoded dataset (written by {manifest.get('stage')!r})", path=path
        )
    return manifest["encoding"]
