"""``phisieve train``: fine-tune a Hugging Face model on an ``encoded`` dataset.

A plain PyTorch loop: AdamW, linear warm-up and decay, gradient accumulation, automatic mixed
precision on CUDA (bfloat16 where supported, else float16 with a gradient scaler),
checkpoints, and a JSON-lines metrics log. With :class:`~phisieve.training.dp.DPConfig`,
DP-SGD with the patient as the privacy unit (:mod:`phisieve.training.dp`): Poisson sampling of
patients, each patient's gradient clipped, Gaussian noise, and the ε per patient that Opacus'
accountant gives at δ < 1/N.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..dependencies import require
from ..encode.encoding import read_encoding
from ..errors import ConfigError
from ..pipeline.progress import quiet_transformers
from .dp import DPConfig
from .masking import MaskingConfig, Objective, check_masking, check_protection, objective
from .sparse_head import SparseHead


@dataclass
class TrainConfig:
    """Training settings; ``max_steps`` (optimizer steps), when set, overrides ``epochs``."""

    objective: str = "ppmlm"
    batch_size: int = 8
    epochs: int = 1
    max_steps: int | None = None
    learning_rate: float = 5e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.0
    grad_accumulation: int = 1
    max_grad_norm: float | None = 1.0
    seed: int = 0
    num_workers: int = 0
    device: str = "auto"
    amp: bool = True
    checkpoint_every: int | None = None
    pad_to: str | int = "max_len"
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    dp: DPConfig | None = None
    allow_unprotected: bool = False
    """Train a privacy-preserving objective on a dataset that protects nothing (refused by
    default: it would silently train plain MLM/CLM)."""
    sparse_output: bool = True
    """Apply the output layer only at the positions that carry a label
    (:class:`~phisieve.training.sparse_head.SparseHead`): the same loss, less work. Not under
    DP-SGD (Opacus needs every sample's full computation)."""
    untie_output: bool | None = None
    """Give the output layer its own weight before training when it is tied to the input
    embeddings (BERT, GPT-2), initialised as a copy of them: a protected word, never a target,
    still trains as context, and through tied embeddings that moves its output score too
    (DESIGN.md §4). The saved model keeps them untied (``tie_word_embeddings = False``).
    Refused with DP-SGD, which freezes both (nothing trains through them). ``None`` (the
    default) unties for the masked-LM objectives that protect words (``ppmlm``, ``dpp``,
    ``ipp``) without DP, and not otherwise: measured on a pretrained MiniLM-L6 fine-tuned
    with ``ppmlm``, untying cut the members' memorisation gain on identifiers from 0.92 to
    0.18 nats at the same utility; on causal LMs it did not help (benches/RESULTS.md)."""


def load_model(path: str | Path, causal: bool) -> Any:
    """A masked- or causal-LM model from a local folder (nothing is downloaded)."""
    require("transformers")
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    cls = AutoModelForCausalLM if causal else AutoModelForMaskedLM
    if not Path(path).exists():
        raise ConfigError(f"no model folder at {path}")
    with quiet_transformers():
        return cls.from_pretrained(str(path), local_files_only=True)


def _device(name: str) -> Any:
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _train(
    encoded: str | Path, model: Any, out: Path, cfg: TrainConfig, metrics: Path
) -> dict[str, Any]:
    require("torch")
    import torch

    from .dp import PrivateGradient, dp_summary, freeze_for_dp, plan_dp
    from .loaders import MaskedBatches

    encoding = read_encoding(encoded)
    obj = objective(cfg.objective)
    check_protection(obj, encoding, cfg.allow_unprotected)
    check_masking(obj, cfg.masking)
    if cfg.untie_output is True and cfg.dp is not None:
        raise ConfigError(
            "untie_output (--untie-output) has no effect under DP-SGD: it freezes the token "
            "embeddings and the output layer, so nothing trains through their tie"
        )
    if isinstance(model, (str, Path)):
        model = load_model(model, obj.causal)
    kind = type(model).__name__
    causal = (
        True
        if kind.endswith(("ForCausalLM", "LMHeadModel"))
        else False
        if kind.endswith("ForMaskedLM")
        else obj.causal
    )
    obj = objective(cfg.objective, causal)
    if cfg.grad_accumulation < 1:
        raise ConfigError("grad_accumulation must be at least 1")
    if cfg.dp is not None and cfg.grad_accumulation != 1:
        raise ConfigError("DP-SGD here takes one Poisson batch per step: grad_accumulation = 1")
    torch.manual_seed(cfg.seed)
    device = _device(cfg.device)
    untie = cfg.untie_output
    if untie is None:
        untie = untie_by_default(obj, cfg.dp is not None)
    untied = untie_output_embeddings(model) if untie else None
    head = SparseHead(model, obj.causal) if cfg.sparse_output and cfg.dp is None else None
    model.to(device)
    model.train()
    use_amp = cfg.amp and device.type == "cuda"
    amp_dtype = torch.bfloat16 if use_amp and torch.cuda.is_bf16_supported() else torch.float16
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp and amp_dtype == torch.float16)

    private = None
    dp_plan: dict[str, Any] | None = None
    if cfg.dp is not None:
        dp_plan = plan_dp(encoded, obj, cfg)
        dp_plan["frozen"] = freeze_for_dp(model)
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=cfg.learning_rate,
        weight_decay=cfg.weight_decay,
    )
    if dp_plan is None:
        loader: Any = MaskedBatches(
            encoded,
            obj.name,
            batch_size=cfg.batch_size,
            seed=cfg.seed,
            num_workers=cfg.num_workers,
            pin_memory=device.type == "cuda",
            pad_to=cfg.pad_to,
            masking=cfg.masking,
            allow_unprotected=cfg.allow_unprotected,
        )
        batches_per_epoch = len(loader)
    else:
        assert cfg.dp is not None
        steps_data = dp_plan.pop("data")
        dp_autocast = None
        if use_amp and amp_dtype == torch.bfloat16:

            def dp_autocast() -> Any:
                return torch.autocast(device.type, dtype=amp_dtype)

        use_amp = False  # the forward's autocast is inside PrivateGradient; no scaler
        private = PrivateGradient(
            model,
            causal=obj.causal,
            max_grad_norm=cfg.dp.max_grad_norm,
            noise_multiplier=dp_plan["noise_multiplier"],
            max_physical_batch=cfg.dp.max_physical_batch,
            noise_seed=dp_plan.pop("noise_seed"),
            secure_mode=cfg.dp.secure_mode,
            autocast=dp_autocast,
        )
        dp_plan["amp"] = "bfloat16" if dp_autocast is not None else None  # no fp16 scaler
        loader = torch.utils.data.DataLoader(
            steps_data,
            batch_size=None,
            num_workers=cfg.num_workers,
            pin_memory=device.type == "cuda",
        )
        batches_per_epoch = dp_plan["steps_per_epoch"]
    steps_per_epoch = max(1, batches_per_epoch // cfg.grad_accumulation)
    total = (
        dp_plan["planned_steps"]
        if dp_plan is not None
        else (cfg.max_steps or cfg.epochs * steps_per_epoch)
    )
    warmup = int(cfg.warmup_ratio * total)

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total - step) / max(1, total - warmup))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    log = metrics.open("w")
    step, micro, epoch, losses = 0, 0, 0, []
    started = time.perf_counter()
    last_loss = math.nan

    def record(loss: float, tokens: int, **more: Any) -> None:
        """One line of ``metrics.jsonl``, and a checkpoint when one is due."""
        line = {"step": step, "epoch": epoch, "loss": loss, "lr": scheduler.get_last_lr()[0],
                "tokens": tokens, **more, "seconds": time.perf_counter() - started}  # fmt: skip
        log.write(json.dumps(line) + "\n")
        log.flush()
        if cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
            _save(model, out / f"checkpoint-{step}", untied)

    try:
        if private is not None:
            assert dp_plan is not None
            for batch in loader:
                batch = {
                    k: v.to(device, non_blocking=True)
                    for k, v in batch.items()
                    if k in ("input_ids", "attention_mask", "labels", "units")
                }
                loss_value = private.step_gradients(batch, dp_plan["expected_units_per_step"])
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                epoch = (step - 1) // steps_per_epoch
                if math.isfinite(loss_value):
                    last_loss = loss_value
                    losses.append(loss_value)
                tokens = int(batch["attention_mask"].sum()) if "attention_mask" in batch else 0
                units = int(batch["units"].max()) + 1 if len(batch["units"]) else 0
                record(loss_value, tokens, units=units)
            epoch = math.ceil(step / steps_per_epoch)
        while private is None and step < total:
            loader.set_epoch(epoch)
            window: list[float] = []
            tokens = 0
            for batch in loader:
                batch = {
                    k: v.to(device, non_blocking=True) for k, v in batch.items() if k != "seq_id"
                }
                with torch.autocast(device.type, dtype=amp_dtype, enabled=use_amp):
                    loss = head.loss(batch) if head is not None else model(**batch).loss
                if not torch.isfinite(loss):
                    continue  # a batch with no target (all words protected)
                scaler.scale(loss / cfg.grad_accumulation).backward()
                window.append(float(loss.detach()))
                tokens += int(batch["attention_mask"].sum())
                micro += 1
                if micro % cfg.grad_accumulation:
                    continue
                if cfg.max_grad_norm:
                    scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                scaler.step(optimizer)
                scaler.update()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                last_loss = sum(window) / len(window)
                losses.append(last_loss)
                record(last_loss, tokens)
                window, tokens = [], 0
                if step >= total:
                    break
            epoch += 1
    finally:
        log.close()
        if head is not None:
            head.close()
        if private is not None:
            private.close()
    _save(model, out, untied)
    summary: dict[str, Any] = {
        "objective": obj.name,
        "steps": step,
        "epochs_started": epoch,
        "final_loss": last_loss,
        "first_loss": losses[0] if losses else math.nan,
        "device": device.type,
        "amp": (str(amp_dtype).removeprefix("torch.") if use_amp else (dp_plan or {}).get("amp")),
        "encoding": encoding,
        "config": {k: v for k, v in asdict(cfg).items() if k not in ("masking", "dp")},
        "masking": asdict(cfg.masking),
        "untie_output": untie,
        "sparse_output": head is not None and head.active,
        "output_untied": untied is not None,
    }
    if dp_plan is not None:
        summary["dp"] = dp_summary(dp_plan, step)
    return summary


@dataclass
class Untied:
    """What :func:`untie_output_embeddings` did: the output layer's parameters that other
    modules also held, as (the output layer's own copy, the parameter the others still
    hold). :meth:`sync` copies the trained values back into the latter before saving (BERT's
    head keeps its output bias twice: ``cls.predictions.bias`` and the decoder's bias)."""

    aliases: list[tuple[Any, Any]] = field(default_factory=list, repr=False)

    def sync(self) -> None:
        import torch

        with torch.no_grad():
            for own, other in self.aliases:
                other.copy_(own)


def untie_by_default(obj: Objective, dp: bool) -> bool:
    """Whether ``untie_output=None`` unties: for a masked-LM objective that protects words,
    without DP-SGD (see :attr:`TrainConfig.untie_output`)."""
    return not obj.causal and obj.protect != "nothing" and not dp


def untie_output_embeddings(model: Any) -> Untied | None:
    """Give ``model``'s output layer its own weight when it is tied to the input embeddings.

    The new weight is a copy of the input embeddings (so the model computes exactly what it
    did); any other parameter the output layer shares (BERT's output bias) gets its own copy
    too. ``model.config.tie_word_embeddings`` becomes False, so ``save_pretrained`` writes
    both and ``from_pretrained`` loads them untied.

    Returns
    -------
    Untied or None
        None when the model has no output layer tied to its input embeddings (nothing done).
    """
    import torch

    inp = model.get_input_embeddings()
    out = model.get_output_embeddings()
    if inp is None or out is None or getattr(out, "weight", None) is not inp.weight:
        return None
    own_params = dict(out.named_parameters(recurse=False))
    shared = {id(p) for p in own_params.values()}
    held = set()
    for module in model.modules():
        if module is not out:
            held |= {id(p) for p in module.parameters(recurse=False)} & shared
    out_name = next(n for n, m in model.named_modules() if m is out)
    untied = Untied()
    for name, p in own_params.items():
        if id(p) not in held:
            continue
        own = torch.nn.Parameter(p.detach().clone(), requires_grad=p.requires_grad)
        setattr(out, name, own)
        if p is not inp.weight:
            untied.aliases.append((own, p))
        tied = getattr(model, "all_tied_weights_keys", None)  # transformers >= 5
        if isinstance(tied, dict):
            tied.pop(f"{out_name}.{name}", None)
    configs = [model.config]
    if hasattr(model.config, "get_text_config"):
        configs.append(model.config.get_text_config())
    for config in configs:
        config.tie_word_embeddings = False
    return untied


def _save(model: Any, path: Path, untied: Untied | None) -> None:
    """Save the Hugging Face model (inside any Opacus wrapper) to ``path``."""
    if untied is not None:
        untied.sync()
    with quiet_transformers():
        _unwrap(model).save_pretrained(path)


def _unwrap(model: Any) -> Any:
    """The Hugging Face model inside an Opacus wrapper."""
    return getattr(model, "_module", model)
