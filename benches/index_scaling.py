"""Benchmark: the patient x term index, phisieve vs the polars-expression way vs plain Python.

Every method runs on the same synthetic corpus (``phisieve synth``) in its own subprocess, so
its peak memory (max RSS) is its own. Tokens are phisieve's words (runs of letters, marks and
digits); throughput is tokens per second of wall time, reading the Parquet data included and
imports excluded, best of ``--reps`` runs (this VM's timings are noisy).

    python benches/index_scaling.py                       # 1M and 10M tokens, n = 1 and n <= 3
    python benches/index_scaling.py --sizes 1e8 --anchors-max 1e7 --budget 2GB
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

WORD = r"[\p{L}\p{M}\p{N}]+"


def run_phisieve(data: Path, ngram: int, budget: str | None) -> dict:
    import pyarrow.compute as pc

    import phisieve
    from phisieve.term_index.build import IndexReport

    report = IndexReport()
    t = phisieve.term_index.index(data, ngram=ngram, k=2, memory_budget=budget, report=report)
    indirect = pc.sum(t.column("indirect")).as_py()
    return {
        "terms": t.num_rows,
        "indirect": indirect,
        "tokens": report.tokens,
        "passes": report.passes,
        "index_mib": report.peak_index_bytes / 2**20,
    }


def run_polars(data: Path, ngram: int) -> dict:
    """The idiomatic polars way: extract words, explode, shift for n-grams, group by term."""
    import polars as pl

    from phisieve.io.sources import parquet_files

    words = (
        pl.scan_parquet(parquet_files(data))
        .select(
            "doc_id",
            "patient_id",
            pl.col("text").str.to_lowercase().str.extract_all(WORD).alias("w"),
        )
        .explode("w")
        .drop_nulls("w")
    )
    grams = []
    for n in range(1, ngram + 1):
        parts = [pl.col("w").shift(-i).over("doc_id") for i in range(n)]
        grams.append(
            words.select(
                "doc_id",
                "patient_id",
                pl.concat_str(parts, separator=" ").alias("term"),
                pl.lit(n, pl.UInt8).alias("n"),
            ).drop_nulls("term")
        )
    terms = (
        pl.concat(grams)
        .group_by("n", "term")
        .agg(
            patients=pl.col("patient_id").n_unique(),
            docs=pl.col("doc_id").n_unique(),
            count=pl.len(),
        )
        .collect()
    )
    return {"terms": terms.height, "indirect": int((terms["patients"] < 2).sum())}


def run_python(data: Path, ngram: int) -> dict:
    """Plain Python: a regex for words, dicts of sets for patients and documents."""
    import re

    import pyarrow.dataset as ds

    from phisieve.io.sources import parquet_files

    word = re.compile(r"[^\W_]+")  # Unicode letters and digits
    patients: dict = defaultdict(set)
    docs: dict = defaultdict(int)
    count: dict = defaultdict(int)
    for batch in ds.dataset(parquet_files(data)).to_batches(columns=["patient_id", "text"]):
        pids, texts = batch.column(0).to_pylist(), batch.column(1).to_pylist()
        for pid, text in zip(pids, texts, strict=True):
            ws = word.findall(text.lower())
            seen = set()
            for n in range(1, ngram + 1):
                for i in range(len(ws) - n + 1):
                    term = " ".join(ws[i : i + n])
                    count[term, n] += 1
                    patients[term, n].add(pid)
                    seen.add((term, n))
            for key in seen:
                docs[key] += 1
    return {"terms": len(count), "indirect": sum(len(p) < 2 for p in patients.values())}


def child(args: argparse.Namespace) -> None:
    # Imports are not timed: a long-running pipeline pays them once.
    import polars  # noqa: F401
    import pyarrow.dataset  # noqa: F401

    import phisieve  # noqa: F401

    run = {
        "phisieve": lambda: run_phisieve(args.data, args.ngram, args.budget),
        "polars": lambda: run_polars(args.data, args.ngram),
        "python": lambda: run_python(args.data, args.ngram),
    }[args.run]
    best = float("inf")
    for _ in range(args.reps):
        start = time.perf_counter()
        out = run()
        best = min(best, time.perf_counter() - start)
    out["seconds"] = best
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))


def measure(method: str, data: Path, ngram: int, budget: str | None = None, reps: int = 1) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--run",
        method,
        "--data",
        str(data),
        "--ngram",
        str(ngram),
        "--reps",
        str(reps),
    ]
    if budget:
        cmd += ["--budget", budget]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def corpus(tokens: float, root: Path) -> tuple[Path, int]:
    """A synthetic corpus of about ``tokens`` words (cached under ``root``)."""
    import phisieve
    from phisieve.errors import InputError
    from phisieve.io.dataset import read_manifest

    path = root / f"synth_{int(tokens):d}"
    try:
        return path, read_manifest(path)["rows"]
    except InputError:  # not there yet (or incomplete): write it
        pass
    # ~ 5 notes x ~230 words per patient on average; calibrate on a small sample.
    probe = phisieve.synth(root / "probe", patients=200, seed=0, overwrite=True)
    per_patient = probe["tokens"] / 200
    m = phisieve.synth(path, patients=max(10, int(tokens / per_patient)), seed=0, overwrite=True)
    return path, m["rows"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", choices=["phisieve", "polars", "python"])
    p.add_argument("--data", type=Path)
    p.add_argument("--ngram", type=int, default=1)
    p.add_argument("--budget")
    p.add_argument(
        "--reps",
        type=int,
        default=3,
        help="runs of phisieve and polars (best kept); plain Python runs once",
    )
    p.add_argument("--sizes", default="1e6,1e7", help="corpus sizes in tokens")
    p.add_argument("--ngrams", default="1,3")
    p.add_argument(
        "--anchors-max",
        type=float,
        default=1e7,
        help="run polars and plain Python only up to this many tokens",
    )
    p.add_argument("--root", type=Path, default=Path("bench_out"))
    args = p.parse_args()
    if args.run:
        child(args)
        return
    import polars as pl

    args.root.mkdir(exist_ok=True)
    print(f"cores: {os.cpu_count()}, polars {pl.__version__}, python {sys.version.split()[0]}")
    header = f"{'tokens':>12} {'n':>2} {'method':<22} {'seconds':>8} {'Mtok/s':>8} {'peak MiB':>9}"
    print(header)
    for size in (float(s) for s in args.sizes.split(",")):
        data, _ = corpus(size, args.root)
        for ngram in (int(n) for n in args.ngrams.split(",")):
            base = measure("phisieve", data, ngram, reps=args.reps)
            tokens = base["tokens"]
            rows = [("phisieve", base)]
            if args.budget:
                rows.append(
                    (
                        f"phisieve --budget {args.budget}",
                        measure("phisieve", data, ngram, args.budget, reps=args.reps),
                    )
                )
            if size <= args.anchors_max:
                rows.append(("polars expressions", measure("polars", data, ngram, reps=args.reps)))
                rows.append(("plain python", measure("python", data, ngram)))
            for name, r in rows:
                extra = (
                    f" passes={r['passes']} index={r['index_mib']:.0f}MiB" if "passes" in r else ""
                )
                print(
                    f"{tokens:>12,} {ngram:>2} {name:<22} {r['seconds']:>8.2f} "
                    f"{tokens / r['seconds'] / 1e6:>8.2f} {r['peak_rss_mib']:>9.0f}{extra}"
                )
            for name, r in rows[1:]:
                if name.startswith("phisieve"):
                    assert (r["terms"], r["indirect"]) == (base["terms"], base["indirect"])
                    continue
                same = (r["terms"], r["indirect"]) == (base["terms"], base["indirect"])
                print(
                    f"{'':>15} phisieve / {name}: {r['seconds'] / base['seconds']:.1f}x faster"
                    f"; same terms and indirect counts: {same}"
                )
            sys.stdout.flush()


if __name__ == "__main__":
    main()
