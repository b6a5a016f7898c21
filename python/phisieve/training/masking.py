"""Training objectives and the batches they produce (DESIGN.md §4–§6).

:func:`make_batch` turns rows of the ``encoded`` dataset into padded numpy arrays
(``input_ids``, ``attention_mask``, ``labels``) in Rust, with the GIL released and no
per-element Python work. Draws are a pure function of ``(seed, epoch, seq_id)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import _core
from ..errors import ConfigError
from ..io.sources import require_columns

ENCODED_COLUMNS = ("seq_id", "input_ids", "word_ids", "protected", "direct", "indirect")


@dataclass(frozen=True)
class Objective:
    """A training objective: masked or causal LM, and which words it never predicts."""

    name: str
    causal: bool
    protect: str
    """``nothing``, ``all`` (indirect and direct), ``direct`` or ``indirect``."""
    needs_pseudonymized: bool = False


OBJECTIVES: dict[str, Objective] = {
    o.name: o
    for o in (
        Objective("ppmlm", False, "all"),
        Objective("ppclm", True, "all"),
        Objective("mlm", False, "nothing"),
        Objective("clm", True, "nothing"),
        Objective("mlma", False, "nothing", needs_pseudonymized=True),
        Objective("clma", True, "nothing", needs_pseudonymized=True),
        Objective("dpp", False, "direct"),
        Objective("ipp", False, "indirect"),
        Objective("dpp-clm", True, "direct"),
        Objective("ipp-clm", True, "indirect"),
    )
}
"""Every objective by name. ``dpp``/``ipp`` are masked LM; ``dpp-clm``/``ipp-clm`` causal.
:func:`objective` picks the causal form of ``dpp``/``ipp`` for a causal model."""


def objective(name: str, causal: bool | None = None) -> Objective:
    """The objective called ``name``; ``causal`` chooses the form of ``dpp`` and ``ipp``."""
    if name not in OBJECTIVES:
        raise ConfigError(f"unknown objective {name!r}; expected one of {', '.join(OBJECTIVES)}")
    o = OBJECTIVES[name]
    if causal is not None and causal != o.causal:
        other = {"dpp": "dpp-clm", "ipp": "ipp-clm", "dpp-clm": "dpp", "ipp-clm": "ipp"}
        if name not in other:
            kind = "causal" if o.causal else "masked"
            raise ConfigError(f"objective {name} trains a {kind} LM")
        o = OBJECTIVES[other[name]]
    return o


def check_protection(
    objective: Objective, encoding: dict[str, Any], allow_unprotected: bool = False
) -> None:
    """Refuse to train a privacy-preserving objective on a dataset that protects nothing.

    ``ppmlm``/``ppclm`` need a dataset encoded with ``--terms`` or ``--spans``, ``ipp`` one
    with ``--terms`` and ``dpp`` one with ``--spans`` (or terms holding ``direct`` terms):
    otherwise every flag is False and the objective silently trains plain MLM/CLM.
    ``allow_unprotected=True`` is the explicit opt-out.
    """
    if allow_unprotected or objective.protect == "nothing":
        return
    terms, spans = bool(encoding.get("with_terms")), bool(encoding.get("with_spans"))
    direct_terms = terms and encoding.get("direct_terms", 1) > 0  # older datasets: unknown
    has = {
        "all": terms or spans,
        "indirect": terms,
        "direct": spans or direct_terms,
    }[objective.protect]
    if not has:
        need = {
            "all": "--terms TERMS (from `phisieve index`) and/or --spans SPANS (from "
            "`phisieve detect`)",
            "indirect": "--terms TERMS (from `phisieve index`)",
            "direct": "--spans SPANS (from `phisieve detect`)",
        }[objective.protect]
        raise ConfigError(
            f"objective {objective.name} protects {objective.protect} identifiers, but this "
            f"dataset was encoded without what marks them, so no token is protected and it "
            f"would train plain {'CLM' if objective.causal else 'MLM'}: encode again with "
            f"`phisieve encode ... {need}`, or pass allow_unprotected=True "
            "(--allow-unprotected) to train on it anyway"
        )


@dataclass(frozen=True)
class MaskingConfig:
    """How batches are built. Masked LM: ``probability`` of eligible words masked (exactly
    ``round(p × eligible)`` per sequence) and the 80/10/10 replacement split;
    ``mask_only=True`` always uses the mask token (as the PPMLM paper did).

    ``hide_protected_input=True`` (privacy-preserving objectives, masked or causal) also
    hides the protected words from the input: every token of a word the objective protects
    is replaced by the mask token (the padding token for a tokenizer without one, e.g.
    GPT-2's), so protected words are neither targets nor context. Labels are unchanged and
    the other positions are exactly those of the same batch without it. Without it,
    protected words stay in the context (DESIGN.md §4), and with tied input/output embeddings
    their training as context also moves their output scores.
    """

    probability: float = 0.15
    replace_mask: float = 0.8
    replace_random: float = 0.1
    mask_only: bool = False
    hide_protected_input: bool = False


PROTECT_FLAG = {"all": "protected", "direct": "direct", "indirect": "indirect"}
"""The ``encoded`` column of the flag each protection reads."""


def check_masking(objective: Objective, masking: MaskingConfig) -> None:
    """Refuse ``hide_protected_input`` with an objective that protects nothing (it would
    hide nothing)."""
    if masking.hide_protected_input and objective.protect == "nothing":
        raise ConfigError(
            f"hide_protected_input (--hide-protected-input) hides the words a "
            f"privacy-preserving objective protects; objective {objective.name} protects "
            "nothing"
        )


def hidden_positions(rows: pa.RecordBatch, flag: str, length: int) -> tuple[np.ndarray, np.ndarray]:
    """The (row, position) indices, in a batch of ``rows`` padded to ``length`` with each row
    left-aligned (as :func:`make_batch` lays them out), of every token that ``flag`` marks or
    that belongs to a word (``word_ids`` >= 0) one of whose tokens it marks."""
    flags_col, words_col = rows.column(flag), rows.column("word_ids")
    lengths = pc.list_value_length(flags_col).to_numpy(zero_copy_only=False).astype(np.int64)
    flags = pc.list_flatten(flags_col).to_numpy(zero_copy_only=False).astype(bool)
    words = pc.list_flatten(words_col).to_numpy(zero_copy_only=False).astype(np.int64)
    row = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    starts = np.cumsum(lengths) - lengths
    pos = np.arange(len(flags), dtype=np.int64) - np.repeat(starts, lengths)
    if len(pos) and pos.max() >= length:  # pragma: no cover - mask_batch refuses these first
        raise ConfigError(f"a sequence is longer than the batch length {length}")
    stride = int(words.max(initial=0)) + 2
    keys = row * stride + words
    flagged_words = keys[flags & (words >= 0)]
    hide = flags | ((words >= 0) & np.isin(keys, flagged_words))
    return row[hide], pos[hide]


def _sampler_settings(
    objective: Objective,
    masking: MaskingConfig,
    *,
    mask_id: int | None,
    pad_id: int,
    vocab_size: int,
    seed: int,
    epoch: int,
) -> dict[str, Any]:
    """The mask sampler's settings for ``objective`` under ``masking`` (checked), the dict
    that ``_core.mask_batch`` and ``_core.mask_rows`` take."""
    if not objective.causal and mask_id is None:
        raise ConfigError(
            f"objective {objective.name} needs a tokenizer with a mask token (this one has none)"
        )
    check_masking(objective, masking)
    return {
        "causal": objective.causal,
        "protect": objective.protect,
        "probability": masking.probability,
        "replace_mask": 1.0 if masking.mask_only else masking.replace_mask,
        "replace_random": 0.0 if masking.mask_only else masking.replace_random,
        "mask_id": 0 if mask_id is None else mask_id,
        "pad_id": pad_id,
        "vocab_size": vocab_size,
        "seed": seed,
        "epoch": epoch,
    }


def make_batch(
    rows: pa.RecordBatch | pa.Table,
    objective: Objective,
    *,
    length: int,
    pad_id: int,
    mask_id: int | None,
    vocab_size: int,
    seed: int,
    epoch: int,
    masking: MaskingConfig = MaskingConfig(),
    return_seq_ids: bool = False,
) -> dict[str, np.ndarray]:
    """Build one training batch from ``encoded`` rows.

    With ``masking.hide_protected_input`` the protected words of the input are then replaced
    by ``mask_id`` (``pad_id`` when ``mask_id`` is None: causal tokenizers without a mask
    token); see :class:`MaskingConfig`.

    Returns
    -------
    dict
        ``input_ids``, ``attention_mask`` and ``labels`` (int64, rows x ``length``; labels are
        -100 where nothing is predicted), plus ``seq_id`` when ``return_seq_ids``.
    """
    if isinstance(rows, pa.Table):
        rows = rows.combine_chunks().to_batches()[0] if rows.num_rows else None
        if rows is None:
            raise ConfigError("an empty batch")
    settings = _sampler_settings(objective, masking, mask_id=mask_id, pad_id=pad_id,
                                 vocab_size=vocab_size, seed=seed, epoch=epoch)  # fmt: skip
    require_columns(rows.schema, ENCODED_COLUMNS, "encoded batch")
    col = rows.column
    ids, attention, labels = _core.mask_batch(
        col("seq_id"),
        col("input_ids"),
        col("word_ids"),
        col("protected"),
        col("direct"),
        col("indirect"),
        length,
        settings,
    )
    shape = (rows.num_rows, length)
    # Arrow buffers are read-only; torch wants writable arrays, so take one copy here.
    out = {
        "input_ids": np.array(ids.to_numpy().reshape(shape)),
        "attention_mask": np.array(attention.to_numpy().reshape(shape)),
        "labels": np.array(labels.to_numpy().reshape(shape)),
    }
    if masking.hide_protected_input:
        r, p = hidden_positions(rows, PROTECT_FLAG[objective.protect], length)
        out["input_ids"][r, p] = pad_id if mask_id is None else mask_id
    if return_seq_ids:
        out["seq_id"] = col("seq_id").to_numpy().astype(np.int64)
    return out


def batch_length(rows: pa.RecordBatch, max_len: int, pad_to: str | int) -> int:
    """The padded length of a batch: ``max_len``, or the longest row rounded up to a multiple
    of ``pad_to`` (an int) when ``pad_to`` is not ``"max_len"``."""
    if pad_to == "max_len":
        return max_len
    longest = int(pc.max(pc.list_value_length(rows.column("input_ids"))).as_py() or 1)
    return padded_length(longest, max_len, pad_to)


def padded_length(longest: int, max_len: int, pad_to: str | int) -> int:
    """:func:`batch_length` given the longest row's length."""
    if pad_to == "max_len":
        return max_len
    multiple = int(pad_to)
    return -(-max(longest, 1) // multiple) * multiple


def make_batch_from_lists(
    seq_ids: list[int],
    input_ids: list[list[int]],
    word_ids: list[list[int]],
    flags: list[list[bool]] | None,
    objective: Objective,
    *,
    length: int,
    pad_id: int,
    mask_id: int | None,
    vocab_size: int,
    seed: int,
    epoch: int,
    masking: MaskingConfig = MaskingConfig(),
) -> dict[str, np.ndarray]:
    """:func:`make_batch` for rows given as Python lists (what ``transformers.Trainer`` hands a
    collator over a ``datasets`` dataset): each row's lists are read once, in Rust, straight
    into the mask sampler, with the same draws. ``flags`` is the ``encoded`` flag column the
    objective reads (``PROTECT_FLAG[objective.protect]``; None when it protects nothing).
    ``masking.hide_protected_input`` is not supported here (use :func:`make_batch`).

    Returns
    -------
    dict
        ``input_ids``, ``attention_mask`` and ``labels`` (int64, rows x ``length``).
    """
    if masking.hide_protected_input:
        raise ConfigError("make_batch_from_lists does not hide protected input; use make_batch")
    out = _core.mask_rows(
        seq_ids,
        input_ids,
        word_ids,
        flags,
        length,
        _sampler_settings(objective, masking, mask_id=mask_id, pad_id=pad_id,
                          vocab_size=vocab_size, seed=seed, epoch=epoch),
    )  # fmt: skip
    shape = (len(seq_ids), length)
    names = ("input_ids", "attention_mask", "labels")
    return {n: np.frombuffer(b, np.int64).reshape(shape) for n, b in zip(names, out, strict=True)}
