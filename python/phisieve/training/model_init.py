"""``phisieve init-model``: a small model with random weights (seeded) for a tokenizer, to
train from scratch: what the demo and the tests train and audit in minutes on a CPU."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, MissingDependencyError
from ..pipeline.options import option
from ..pipeline.progress import quiet_transformers
from ..pipeline.stage import FOLDER, PATH, Context, Input, Output, Stage

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


class InitModelStage(Stage):
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

    def check(self) -> None:
        o = self.options
        if o.architecture not in ARCHITECTURES:
            raise ConfigError(f"--architecture is bert or gpt2, not {o.architecture!r}")
        if o.hidden_size % o.heads:
            raise ConfigError("--hidden-size must be a multiple of --heads")

    def build(self, ctx: Context, target: Path) -> None:
        try:
            import torch
            from transformers import (
                AutoTokenizer,
                BertConfig,
                BertForMaskedLM,
                GPT2Config,
                GPT2LMHeadModel,
            )
        except ImportError as e:
            raise MissingDependencyError("transformers", "torch") from e
        o = self.options
        tok = AutoTokenizer.from_pretrained(str(ctx.path("tokenizer")), local_files_only=True)
        torch.manual_seed(o.seed)
        if o.architecture == "bert":
            config = BertConfig(vocab_size=len(tok), hidden_size=o.hidden_size,
                                num_hidden_layers=o.layers, num_attention_heads=o.heads,
                                intermediate_size=o.intermediate_size,
                                max_position_embeddings=o.max_positions,
                                pad_token_id=tok.pad_token_id or 0)  # fmt: skip
            model = BertForMaskedLM(config)
        else:
            config = GPT2Config(vocab_size=len(tok), n_embd=o.hidden_size, n_layer=o.layers,
                                n_head=o.heads, n_inner=o.intermediate_size,
                                n_positions=o.max_positions, bos_token_id=tok.bos_token_id,
                                eos_token_id=tok.eos_token_id)  # fmt: skip
            model = GPT2LMHeadModel(config)
        with quiet_transformers():
            model.save_pretrained(target)
            tok.save_pretrained(str(target))
        ctx.stats.update(
            architecture=o.architecture,
            parameters=sum(p.numel() for p in model.parameters()),
            vocab_size=len(tok),
        )
