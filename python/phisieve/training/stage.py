"""The training stages: ``tokenizer``, ``init-model`` and ``train``, their options and
inputs, declared without importing what they need to run (torch, transformers, tokenizers,
pyarrow...): the algorithms (:mod:`phisieve.training.learn_tokenizer`,
:mod:`phisieve.training.model_init`, :mod:`phisieve.training.loop`) are imported when a stage
runs."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._lazy import LazyModule
from ..errors import ConfigError
from ..pipeline.options import option
from ..pipeline.stage import FOLDER, PATH, BuildStage, Context, Input, Output, require
from ..pipeline.summary import Line

loop = LazyModule(".loop", __package__)
model_init = LazyModule(".model_init", __package__)
# What they import (torch, transformers) is imported when a stage runs, through these
# proxies, never by an import statement here (model_init imports this module, for the
# options' type).

__all__ = [
    "InitModelOptions",
    "InitModelStage",
    "TokenizerOptions",
    "TokenizerStage",
    "TrainOptions",
    "TrainStage",
]


@dataclass(frozen=True)
class TokenizerOptions:
    """Options of ``phisieve tokenizer``."""

    kind: str = option("wordpiece", "wordpiece (BERT-style) or bpe (GPT-2-style byte level).")
    vocab_size: int = option(8000, "Tokens in the vocabulary.")
    max_len: int = option(512, "The longest sequence the tokenizer declares.")
    text_col: str = option("text", "Note text column.")


class TokenizerStage(BuildStage):
    """``phisieve tokenizer``: a tokenizer learnt on a documents dataset's text, one line at
    a time (:func:`~phisieve.training.learn_tokenizer.train_wordpiece`,
    :func:`~phisieve.training.learn_tokenizer.train_bpe`); deterministic."""

    name = "tokenizer"
    help = (
        "Learn a WordPiece (BERT-style) or byte-level BPE (GPT-2-style) tokenizer on the "
        "notes' lines; learn it on patients the audited model is not judged on."
    )
    Options = TokenizerOptions
    inputs = (Input("docs", "The documents dataset to learn on.", positional=True),)
    output = Output(FOLDER, "The tokenizer folder to write.")
    summary = ("a {kind_of_tokenizer} tokenizer of {vocab_size:,} tokens written to {out}",)

    def check(self) -> None:
        if self.options.kind not in ("wordpiece", "bpe"):
            raise ConfigError(f"--kind is wordpiece or bpe, not {self.options.kind!r}")
        if self.options.vocab_size < 16:
            raise ConfigError(f"--vocab-size must be at least 16, not {self.options.vocab_size}")

    def build(self, ctx: Context, target: Path) -> None:
        from .learn_tokenizer import train_bpe, train_wordpiece

        o = self.options
        require(ctx.source("docs"), [o.text_col])
        lines = [
            line
            for batch in ctx.scan("docs", [o.text_col], "lines")
            for text in batch.column(0).to_pylist()
            for line in (text or "").splitlines()
        ]
        learn = train_wordpiece if o.kind == "wordpiece" else train_bpe
        learn(lines, target, vocab_size=o.vocab_size, max_len=o.max_len)
        from tokenizers import Tokenizer

        size = Tokenizer.from_file(str(target / "tokenizer.json")).get_vocab_size()
        ctx.stats.update(kind_of_tokenizer=o.kind, vocab_size=size, lines=len(lines))


ARCHITECTURES = ("bert", "gpt2")
"""What ``init-model`` makes: a BERT masked LM or a GPT-2 causal LM."""


@dataclass(frozen=True)
class InitModelOptions:
    """Options of ``phisieve init-model``."""

    architecture: str = option("bert", "bert (masked LM) or gpt2 (causal LM).")
    hidden_size: int = option(64, "Width of the hidden states.")
    layers: int = option(2, "Transformer layers.")
    heads: int = option(2, "Attention heads.")
    intermediate_size: int = option(128, "Width of the feed-forward layers.")
    max_positions: int = option(128, "Longest sequence (position embeddings).")
    seed: int = option(0, "Seed of the random weights.")


class InitModelStage(BuildStage):
    """``phisieve init-model``: a new model with seeded random weights, sized for the
    tokenizer's vocabulary, saved with the tokenizer (a folder ``train`` and ``audit`` load).
    The same options and tokenizer give the same bytes."""

    name = "init-model"
    help = (
        "Make a small BERT or GPT-2 with random (seeded) weights for a tokenizer, to train "
        "from scratch."
    )
    Options = InitModelOptions
    inputs = (Input("tokenizer", "The tokenizer folder the model reads.", kind=PATH),)
    output = Output(FOLDER, "The model folder to write.")
    summary = ("a new {architecture} of {parameters:,} parameters written to {out}",)

    def check(self) -> None:
        o = self.options
        if o.architecture not in ARCHITECTURES:
            raise ConfigError(f"--architecture is bert or gpt2, not {o.architecture!r}")
        if o.hidden_size % o.heads:
            raise ConfigError("--hidden-size must be a multiple of --heads")

    def build(self, ctx: Context, target: Path) -> None:
        ctx.stats.update(model_init.init_model(self.options, ctx.path("tokenizer"), target))


@dataclass(frozen=True)
class TrainOptions:
    """Options of ``phisieve train`` (the fields of :class:`~phisieve.training.loop.
    TrainConfig`, flat)."""

    objective: str = option("ppmlm", "ppmlm, ppclm, mlm, clm, mlma, clma, dpp or ipp.")
    batch_size: int = option(
        8, "Sequences per batch (with --dp: the expected patients per step, Poisson-sampled)."
    )
    epochs: int = option(1, "Epochs (unless --max-steps).")
    max_steps: int | None = option(None, "Optimizer steps.")
    learning_rate: float = option(5e-5, "Peak learning rate.")
    weight_decay: float = option(0.01, "AdamW weight decay.")
    warmup_ratio: float = option(0.0, "Share of steps warming up.")
    grad_accumulation: int = option(1, "Batches per optimizer step.")
    clip_norm: float | None = option(1.0, "Gradient clipping norm (without --dp).")
    mask_probability: float = option(0.15, "Masked-LM share of words.")
    mask_only: bool = option(False, "Always [MASK] (no 80/10/10).")
    seed: int = option(0, "Seed of masks, order and initialisation.")
    num_workers: int = option(0, "DataLoader workers.", decides=False)
    device: str = option("auto", "auto, cpu, cuda, cuda:1...")
    amp: bool = option(True, "Mixed precision on CUDA (bfloat16 where supported).")
    pad_to: str = option(
        "max_len", "Pad batches to max_len, or to a multiple of this number (e.g. 8)."
    )
    checkpoint_every: int | None = option(None, "Checkpoint every N steps.")
    dp: bool = option(
        False, "DP-SGD with the patient as the privacy unit (ε per patient, δ < 1/N)."
    )
    dp_unit: str = option(
        "patient",
        "DP-SGD: patient (patients sampled and clipped), or sequence (then the patient's ε "
        "comes from group privacy over --max-per-patient).",
    )
    target_epsilon: float | None = option(
        None, "DP-SGD: choose the noise that reaches this ε per patient over the planned steps."
    )
    noise_multiplier: float | None = option(
        None, "DP-SGD noise multiplier σ (default 1.0, or the one --target-epsilon needs)."
    )
    max_grad_norm: float = option(1.0, "DP-SGD: clipping norm C of each patient's gradient.")
    max_per_patient: int = option(
        50, "DP-SGD: sequences of a patient per step (--dp-unit sequence: in all)."
    )
    delta: float | None = option(None, "DP δ (default 1/N^1.1 for N patients; must be < 1/N).")
    accountant: str = option("rdp", "DP-SGD accountant: rdp or prv (Opacus).")
    max_physical_batch: int = option(
        64, "DP-SGD: sequences per forward pass (memory only).", decides=False
    )
    allow_unprotected: bool = option(
        False,
        "Train a privacy-preserving objective on a dataset encoded without --terms and "
        "--spans (nothing protected).",
    )
    sparse_output: bool = option(
        True,
        "Apply the output layer only where a token is predicted (same loss, faster; not "
        "with --dp).",
        decides=False,
    )
    untie_output: bool | None = option(
        None,
        "Give the output layer its own copy of the input embeddings (BERT and GPT-2 tie "
        "them, so protected words seen as context move their output scores). Default: on "
        "for ppmlm, dpp and ipp without --dp; off otherwise.",
    )
    hide_protected_input: bool = option(
        False,
        "Show the words the objective protects as [MASK] (the padding token when the "
        "tokenizer has none) in the input too.",
    )

    @classmethod
    def of(cls, cfg: loop.TrainConfig) -> TrainOptions:
        """The options of a :class:`~phisieve.training.loop.TrainConfig`."""
        dp = cfg.dp
        return cls(
            objective=cfg.objective,
            batch_size=cfg.batch_size,
            epochs=cfg.epochs,
            max_steps=cfg.max_steps,
            learning_rate=cfg.learning_rate,
            weight_decay=cfg.weight_decay,
            warmup_ratio=cfg.warmup_ratio,
            grad_accumulation=cfg.grad_accumulation,
            clip_norm=cfg.max_grad_norm,
            mask_probability=cfg.masking.probability,
            mask_only=cfg.masking.mask_only,
            seed=cfg.seed,
            num_workers=cfg.num_workers,
            device=cfg.device,
            amp=cfg.amp,
            pad_to=str(cfg.pad_to),
            checkpoint_every=cfg.checkpoint_every,
            dp=dp is not None,
            dp_unit=dp.unit if dp else "patient",
            target_epsilon=dp.target_epsilon if dp else None,
            noise_multiplier=dp.noise_multiplier if dp else None,
            max_grad_norm=dp.max_grad_norm if dp else 1.0,
            max_per_patient=(dp.max_per_patient or 0) if dp else 50,
            delta=dp.delta if dp else None,
            accountant=dp.accountant if dp else "rdp",
            max_physical_batch=dp.max_physical_batch if dp else 64,
            allow_unprotected=cfg.allow_unprotected,
            untie_output=cfg.untie_output,
            sparse_output=cfg.sparse_output,
            hide_protected_input=cfg.masking.hide_protected_input,
        )

    def config(self, secure_mode: bool = False, secret: bytes | None = None) -> loop.TrainConfig:
        """The :class:`~phisieve.training.loop.TrainConfig` of these options (``secret`` keys
        DP-SGD's draws)."""
        from .dp import DPConfig
        from .masking import MaskingConfig

        pad_to: str | int = self.pad_to if self.pad_to == "max_len" else int(self.pad_to)
        dp = None
        if self.dp:
            dp = DPConfig(
                noise_multiplier=self.noise_multiplier,
                max_grad_norm=self.max_grad_norm,
                max_per_patient=self.max_per_patient or None,
                delta=self.delta,
                secure_mode=secure_mode,
                unit=self.dp_unit,
                target_epsilon=self.target_epsilon,
                accountant=self.accountant,
                max_physical_batch=self.max_physical_batch,
                secret=secret,
            )
        return loop.TrainConfig(
            objective=self.objective,
            batch_size=self.batch_size,
            epochs=self.epochs,
            max_steps=self.max_steps,
            learning_rate=self.learning_rate,
            weight_decay=self.weight_decay,
            warmup_ratio=self.warmup_ratio,
            grad_accumulation=self.grad_accumulation,
            max_grad_norm=self.clip_norm,
            seed=self.seed,
            num_workers=self.num_workers,
            device=self.device,
            amp=self.amp,
            checkpoint_every=self.checkpoint_every,
            pad_to=pad_to,
            masking=MaskingConfig(
                probability=self.mask_probability,
                mask_only=self.mask_only,
                hide_protected_input=self.hide_protected_input,
            ),
            dp=dp,
            allow_unprotected=self.allow_unprotected,
            untie_output=self.untie_output,
            sparse_output=self.sparse_output,
        )


class TrainStage(BuildStage):
    """``phisieve train``: a masked or causal LM fine-tuned on an encoded dataset with a
    (privacy-preserving) objective. The output is the model folder, written atomically;
    ``metrics.jsonl`` and ``train.json`` go beside it in ``OUT.meta/``."""

    name = "train"
    help = (
        "Fine-tune a masked or causal LM on an encoded dataset with a (privacy-preserving) "
        "objective; writes the model to OUT, metrics.jsonl and train.json to OUT.meta."
    )
    Options = TrainOptions
    inputs = (
        Input("encoded", "The encoded dataset.", positional=True),
        Input("model", "A local Hugging Face model folder.", kind=PATH),
        Input(
            "secret-file",
            "DP-SGD: key of the patient sampling and the noise (the same key, seed and data "
            "give the same model); without it they are fresh and the run cannot be repeated.",
            kind=PATH,
            required=False,
            secret=True,
        ),
    )
    output = Output(FOLDER, "The model folder to write.")
    summary = (
        "{objective}: {steps} steps on {device}, loss {first_loss:.3f} -> {final_loss:.3f}",
        Line("DP-SGD without noise: no finite ε (clipping only)", when="dp", unless="dp[epsilon]"),
        "DP-SGD: ε = {dp[epsilon]:.2f} per patient at δ = {dp[delta]:.2g} ({dp[accountant]}, "
        "{dp[patients]:,} patients, σ = {dp[noise_multiplier]:.3g})",
        "  by group privacy over {dp[max_per_patient]} sequences from ε = "
        "{dp[sequence][epsilon]:.2f} per sequence",
        "model written to {out}",
    )

    def __init__(
        self,
        options: Any = None,
        /,
        *,
        model: Any = None,
        secret: bytes | None = None,
        secure_mode: bool = False,
        **values: Any,
    ) -> None:
        self.model = model
        self.secret = secret
        self.secure_mode = secure_mode
        super().__init__(options, **values)

    @classmethod
    def of(cls, cfg: loop.TrainConfig, model: Any = None) -> TrainStage:
        """The stage that trains as ``cfg`` (a :class:`~phisieve.training.loop.TrainConfig`,
        its DP-SGD key and secure mode included) says; ``model``, a model object, is trained
        in place of the ``model`` input's folder (the stage then needs no such input)."""
        dp = cfg.dp
        secret, secure = (dp.secret, dp.secure_mode) if dp else (None, False)
        return cls(TrainOptions.of(cfg), model=model, secret=secret, secure_mode=secure)

    def check(self) -> None:
        o = self.options
        if o.pad_to != "max_len" and not o.pad_to.isdigit():
            raise ConfigError(f"--pad-to is max_len or a number, not {o.pad_to!r}")
        from .masking import objective

        objective(o.objective)
        dp = o.config().dp
        if dp is not None:
            from .dp import check_config

            check_config(dp)

    def provided(self) -> set[str]:
        given = {"model"} if self.model is not None else set()
        return given | ({"secret-file"} if self.secret is not None else set())

    def build(self, ctx: Context, target: Path) -> None:
        secret = self.secret
        if secret is None and ctx.path("secret-file") is not None:
            from ..phi.secret import read_secret

            secret = read_secret(ctx.path("secret-file"), ctx.out)
        cfg = self.options.config(self.secure_mode, secret)
        model = self.model if self.model is not None else ctx.path("model")
        encoded = ctx.values["encoded"]
        path = encoded.path if encoded.path is not None else encoded
        metrics = ctx.writer.log_path("metrics.jsonl")
        with warnings.catch_warnings():
            summary = loop._train(path, model, target, cfg, metrics)
        ctx.writer.write_side("train.json", json.dumps(summary, indent=2, default=str))
        ctx.stats.update(summary)
