"""``phisieve init-model``: a small model with random weights (seeded) for a tokenizer, to
train from scratch: what the demo and the tests train and audit in minutes on a CPU (the
stage: :class:`~phisieve.training.stage.InitModelStage`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..dependencies import require
from ..pipeline.progress import quiet_transformers

if TYPE_CHECKING:
    from .stage import InitModelOptions


def init_model(o: InitModelOptions, tokenizer: str | Path, target: Path) -> dict[str, Any]:
    """A new model of options ``o`` with seeded random weights, sized for the tokenizer at
    ``tokenizer``, saved with the tokenizer to the folder ``target``; returns its stats
    (architecture, parameters, vocabulary size). The same options and tokenizer give the
    same bytes."""
    require("transformers")
    import torch
    from transformers import (
        AutoTokenizer,
        BertConfig,
        BertForMaskedLM,
        GPT2Config,
        GPT2LMHeadModel,
    )

    tok = AutoTokenizer.from_pretrained(str(tokenizer), local_files_only=True)
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
    return {
        "architecture": o.architecture,
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tok),
    }
