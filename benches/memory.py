"""Benchmark: peak memory (max RSS) of ``phisieve index`` against ``--memory-budget`` (issue 16).

Synthetic corpora (``phisieve.api.synth``, streamed to disk, cached under ``--cache``)
of about the given sizes of note text are indexed by the CLI, each run in its own process, at
each budget and n-gram length. The peak RSS of the run is compared with the budget and with
the *baseline*: the peak of a process that only imports what ``phisieve index`` imports
(Python, pyarrow, polars, numpy, phisieve). ``passes`` and ``index MiB`` (the largest
``peak_index_bytes`` of a pass: the index's tables, vocabulary and what finishing a pass adds,
as phisieve counts them) come from the run's manifest (``execution``).

    python benches/memory.py                                  # 50 MB; none, 256MB, 64MB, 16MB
    python benches/memory.py --sizes 50,500 --ngrams 1,2 --budgets none,256MB,64MB
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TEXT_MB_PER_1000_PATIENTS = 6.2
"""Note text of 1,000 synthetic patients (default note counts and lengths), in MB."""

RUNNER = """
import json, resource, sys, time
from phisieve.cli import main
import phisieve.term_index, pyarrow.parquet
argv = json.loads(sys.argv[1])
t = time.perf_counter()
if argv:
    try:
        main(argv)
    except SystemExit as e:
        if e.code:
            raise
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": time.perf_counter() - t, "peak_mib": peak}))
"""


def text_bytes(path: Path) -> int:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from phisieve.io.dataset import dataset_files

    total = 0
    for f in dataset_files(path):
        with pq.ParquetFile(f) as pf:
            for b in pf.iter_batches(batch_size=4096, columns=["text"]):
                total += int(pc.sum(pc.binary_length(b.column(0))).as_py() or 0)
    return total


def corpus(mb: float, cache: Path) -> tuple[Path, int]:
    """A synthetic corpus of about ``mb`` MB of text (made once, then reused)."""
    from phisieve import synth

    patients = max(1, round(mb / TEXT_MB_PER_1000_PATIENTS * 1000))
    path = cache / f"synth-{patients}"
    info = cache / f"synth-{patients}.json"
    if not info.exists():
        t = time.perf_counter()
        synth(path, patients=patients, seed=0, overwrite=True)
        size = text_bytes(path)
        info.write_text(json.dumps({"patients": patients, "text_bytes": size}))
        print(f"made {path} ({size / 1e6:.0f} MB of text) in {time.perf_counter() - t:.0f} s")
    return path, json.loads(info.read_text())["text_bytes"]


def run(argv: list[str]) -> dict:
    """Run ``phisieve ARGV`` in a process of its own: its seconds and peak RSS, or the error
    it stopped with (a budget too small for the vocabulary is refused)."""
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(argv)], capture_output=True, text=True
    )
    if done.returncode:
        if "budget" in done.stderr:
            return {"error": " ".join(done.stderr.split())[:160]}
        raise SystemExit(f"phisieve {' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="50", help="corpus sizes, MB of text, comma-separated")
    ap.add_argument("--budgets", default="none,256MB,64MB,16MB")
    ap.add_argument("--ngrams", default="1,2")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/phisieve-bench"))
    args = ap.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    from phisieve.io.dataset import read_manifest
    from phisieve.term_index.build import parse_size

    base = run([])["peak_mib"]
    print(f"baseline (imports only): {base:.0f} MiB")
    print(
        "| corpus (MB of text) | ngram | budget | peak RSS (MiB) | peak − baseline (MiB) | "
        "index MiB | passes | time (s) |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for mb in (float(s) for s in args.sizes.split(",")):
        path, size = corpus(mb, args.cache)
        for ngram in args.ngrams.split(","):
            for budget in args.budgets.split(","):
                with tempfile.TemporaryDirectory(prefix="phisieve-memory-") as tmp:
                    out = Path(tmp) / "terms"
                    argv = ["index", str(path), "-o", str(out), "-q", "--ngram", ngram]
                    if budget != "none":
                        argv += ["--memory-budget", budget]
                    got = run(argv)
                    if "error" in got:
                        print(f"| {size / 1e6:.0f} | {ngram} | {budget} | refused: {got['error']}")
                        continue
                    stats = read_manifest(out)["execution"]
                limit = parse_size(budget) if budget != "none" else None
                over = got["peak_mib"] - base
                mark = "" if limit is None else f" ({over * 2**20 / limit:.1f}x)"
                print(
                    f"| {size / 1e6:.0f} | {ngram} | {budget} | {got['peak_mib']:.0f} | "
                    f"{over:.0f}{mark} | {stats['peak_index_bytes'] / 2**20:.1f} | "
                    f"{stats['passes']} | {got['seconds']:.1f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
