"""Patient-level DP-SGD on CUDA against the CPU: the same clipped per-patient gradient sum.

Builds a small BERT masked LM (seeded), freezes what DP-SGD freezes, and computes the clipped
sum of 10 patients' gradients (4 sequences each) with :class:`PrivateGradient` on the CPU, on
CUDA in fp32 and on CUDA under bf16 autocast; prints each one's time, the relative difference
of the per-patient norms and of the sum against the CPU's, and the standard deviation of a
million noise draws (expected: σC).

    python benches/dp_cuda.py

Without a GPU it prints the CPU row only.
"""

from __future__ import annotations

import time

import opacus
import torch
import transformers
from transformers import BertConfig, BertForMaskedLM

from phisieve.training.dp import PrivateGradient, freeze_for_dp

CLIP = 1e-3
SIGMA = 1.0


def main() -> None:
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"opacus {opacus.__version__}, {name}"
    )
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    ids = torch.randint(5, 1000, (40, 64))
    labels = torch.where(torch.rand(40, 64) < 0.15, ids, torch.full_like(ids, -100))
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "labels": labels,
        "units": torch.arange(40) // 4,
    }
    runs = [("cpu", False)]
    if torch.cuda.is_available():
        runs += [("cuda", False), ("cuda", True)]
    out = {}
    for dev, amp in runs:
        torch.manual_seed(0)
        model = BertForMaskedLM(cfg).to(dev)
        freeze_for_dp(model)
        model.train()
        autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if amp else None
        pg = PrivateGradient(
            model,
            causal=False,
            max_grad_norm=CLIP,
            noise_multiplier=SIGMA,
            max_physical_batch=16,
            autocast=autocast,
        )
        b = {k: v.to(dev) for k, v in batch.items()}
        t = time.perf_counter()
        sums, norms = pg.clipped_sum(b)
        t = time.perf_counter() - t
        flat = torch.cat([s.flatten().float().cpu() for s in sums])
        out[(dev, amp)] = (flat, norms.cpu())
        noise = pg.noise(torch.zeros(1_000_000, device=dev))
        print(
            f"{dev} {'bf16' if amp else 'fp32'}: {t:.3f} s, {len(norms)} patients, "
            f"noise std {float(noise.std()):.4g} (σC = {SIGMA * CLIP:.4g})"
        )
        pg.close()
    ref_sum, ref_norms = out[("cpu", False)]
    for key in runs[1:]:
        flat, norms = out[key]
        rel_norms = float(((norms - ref_norms).abs() / ref_norms).max())
        rel_sum = float((flat - ref_sum).norm() / ref_sum.norm())
        print(f"{key}: norms {rel_norms:.2g}, sum {rel_sum:.2g} (relative to the CPU)")


if __name__ == "__main__":
    main()
