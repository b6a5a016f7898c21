"""Benchmark: the loader's share of a training step, and the sparse output layer's saving.

A BERT masked LM (MiniLM's 30,522-token WordPiece vocabulary; random initialisation, nothing
downloaded) trains on 512-token PhysioNet sequences (``phisieve encode``, tiled) with the
PPMLM objective, as ``phisieve train`` does (AdamW, bf16 autocast on CUDA). Each row times the
same steps, in one run:

* ``in memory, full head``: one batch built once and kept on the device, the output layer at
  every position (``--no-sparse-output``: what ``train`` did before);
* ``in memory, sparse head``: the same, the output layer at labelled positions only (the
  default now);
* ``MaskedBatches, N workers``: phisieve's loader builds every batch from Parquet (masks drawn
  in Rust), copied to the device each step, sparse head.

* ``in memory, the loader's batches``: the loader's own batches, built beforehand and kept on
  the device (sparse head): separates the loader's cost from the batches' variation.

The loader's share of a step is (loader row − the loader's batches in memory) / loader row.

    python benches/loader.py                                   # CPU: tiny BERT, 2 workers
    python benches/loader.py --device cuda --size base --batch-size 16 --steps 50
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from masking import LENGTH, build

SIZES = {
    "tiny": {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2,
             "intermediate_size": 512},
    "minilm": {"num_hidden_layers": 6, "hidden_size": 384, "num_attention_heads": 12,
               "intermediate_size": 1536},
    "base": {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
             "intermediate_size": 3072},
}  # fmt: skip


def new_model(size: str, vocab: int, pad: int):
    import torch
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=vocab, max_position_embeddings=LENGTH, pad_token_id=pad,
                     **SIZES[size])  # fmt: skip
    return BertForMaskedLM(cfg)


def timed_steps(model, batches, steps: int, device, sparse: bool) -> list[float]:
    """Seconds per optimizer step (after 2 warm-up steps), the batch's copy included."""
    import torch

    from phisieve.training.sparse_head import SparseHead

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    head = SparseHead(model, causal=False) if sparse else None
    use_amp = device.type == "cuda"
    times: list[float] = []
    it = iter(batches)
    t = time.perf_counter()
    try:
        for i in range(steps + 2):
            batch = next(it)
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items() if k != "seq_id"}
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp):
                loss = head.loss(batch) if head else model(**batch).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize()
            now = time.perf_counter()
            if i >= 2:
                times.append(now - t)
            t = now
    finally:
        if head:
            head.close()
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--size", default="tiny", choices=sorted(SIZES))
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--workers", default="0,2", help="loader worker counts to time")
    args = p.parse_args()

    import torch

    from phisieve.encode import read_encoding
    from phisieve.training.loaders import MaskedBatches

    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 1)))
    bs, steps = args.batch_size, args.steps
    rows: list[tuple[str, list[float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        _, _, enc = build(Path(tmp), (steps + 2) * bs)
        info = read_encoding(enc)
        first = next(iter(MaskedBatches(enc, "ppmlm", batch_size=bs, seed=0)))
        first = {k: v.to(device) for k, v in first.items() if k != "seq_id"}
        labelled = float((first["labels"] != -100).float().mean())

        def forever():
            while True:
                yield first

        for sparse in (False, True):
            model = new_model(args.size, info["vocab_size"], info["pad_token_id"]).to(device)
            name = f"in memory, {'sparse' if sparse else 'full'} head"
            rows.append((name, timed_steps(model, forever(), steps, device, sparse)))
        # The loader's batches, built beforehand and kept on the device: what the loader rows
        # cost beyond this is the loader's; what this costs beyond one repeated batch is the
        # batches' variation (labelled positions per batch change the head's shapes).
        distinct = [
            {k: v.to(device) for k, v in b.items() if k != "seq_id"}
            for b in MaskedBatches(enc, "ppmlm", batch_size=bs, seed=0)
        ]
        model = new_model(args.size, info["vocab_size"], info["pad_token_id"]).to(device)
        rows.append(("in memory, the loader's batches, sparse",
                     timed_steps(model, iter(distinct), steps, device, True)))  # fmt: skip
        for w in [int(x) for x in args.workers.split(",") if x.strip()]:
            model = new_model(args.size, info["vocab_size"], info["pad_token_id"]).to(device)
            loader = MaskedBatches(enc, "ppmlm", batch_size=bs, seed=0, num_workers=w,
                                   pin_memory=device.type == "cuda")  # fmt: skip
            rows.append((f"MaskedBatches, {w} workers, sparse head",
                         timed_steps(model, iter(loader), steps, device, True)))  # fmt: skip

    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
    print(
        f"BERT {args.size} ({SIZES[args.size]['num_hidden_layers']} layers, "
        f"{SIZES[args.size]['hidden_size']} wide, vocabulary {info['vocab_size']}), "
        f"batch {bs} x {LENGTH} tokens, {labelled:.1%} of positions labelled, "
        f"{steps} steps, device {device} {gpu}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} CPU threads"
    )
    print(f"{'run':<40} {'median s/step':>14} {'mean':>8} {'seq/s':>8}")
    med = {}
    for name, times in rows:
        med[name] = statistics.median(times)
        mean = statistics.fmean(times)
        print(f"{name:<40} {med[name]:>14.4f} {mean:>8.4f} {bs / med[name]:>8.1f}")
    full, sparse = med["in memory, full head"], med["in memory, sparse head"]
    print(f"sparse head: {full / sparse:.2f}x faster per step ({full:.4f} -> {sparse:.4f} s)")
    prebuilt = med["in memory, the loader's batches, sparse"]
    for name in med:
        if name.startswith("MaskedBatches"):
            share = (med[name] - prebuilt) / med[name]
            print(f"loader share of a step ({name.split(', ')[1]}): {share:.1%}")
    print("command: python " + " ".join(sys.argv))


if __name__ == "__main__":
    main()
