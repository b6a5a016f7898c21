"""The whole demo chain (``examples/pipeline.toml``) with the local engine and with Ray, on
the synthetic corpus at several sizes: each stage's seconds, and whether the two engines
wrote the same outputs (every output's content fingerprint).

    python benches/engines.py --notes 10000,100000 --workers 2

The Ray engine runs on a local Ray instance with ``--workers`` CPUs, started once before
the first chain (its start-up time is printed apart). Both engines run the same pipeline
file in the same folder one after the other (outputs record their inputs' paths), with the
same key, so their outputs can be compared file for file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from phisieve.catalog import load_pipeline
from phisieve.pipeline.engine import LocalEngine
from phisieve.pipeline.execute import Event, make_engine, run_pipeline

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "pipeline.toml"
NOTES_PER_PATIENT = 5  # synth's default 2:8 notes per patient


def chain(work: Path, engine, notes: int, steps: int, key: Path | None) -> dict[str, float]:
    """Run the demo chain into ``work``; each stage's seconds."""
    if key is not None:
        work.mkdir(parents=True)
        for p in key.parent.glob(key.name + "*"):
            dest = work / p.name
            shutil.copytree(p, dest) if p.is_dir() else shutil.copy2(p, dest)
    overrides = [
        f"synth.patients={max(1, notes // NOTES_PER_PATIENT)}",
        f"train_ppmlm.max-steps={steps}",
        f"train_reference.max-steps={steps}",
    ]
    pipeline = load_pipeline(EXAMPLE, workdir=work, overrides=overrides)
    seconds: dict[str, float] = {}
    started: dict[str, float] = {}

    def report(e: Event) -> None:
        if e.action == "run":
            started[e.step.name] = time.perf_counter()
        elif e.action == "done":
            seconds[e.step.name] = time.perf_counter() - started[e.step.name]

    run_pipeline(pipeline, progress=False, report=report, engine=engine)
    return seconds


def fingerprints(work: Path) -> dict[str, str]:
    return {
        p.parent.relative_to(work).as_posix(): json.loads(p.read_text())["fingerprint"]
        for p in sorted(work.rglob("manifest.json"))
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notes", default="10000", help="Comma-separated corpus sizes, in notes.")
    ap.add_argument("--workers", type=int, default=2, help="Ray CPUs and workers.")
    ap.add_argument("--steps", type=int, default=50, help="Training steps of each model.")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/phisieve-bench-engines"))
    args = ap.parse_args()
    # The audit report's date: the same on both engines, so their outputs can be compared.
    os.environ.setdefault("SOURCE_DATE_EPOCH", "1700000000")
    t0 = time.perf_counter()
    from phisieve.pipeline.ray_engine import connect

    connect(num_cpus=args.workers)
    ray = make_engine("ray", workers=args.workers)
    print(f"Ray start-up: {time.perf_counter() - t0:.1f} s ({args.workers} CPUs)")
    for notes in [int(float(n)) for n in args.notes.split(",")]:
        shutil.rmtree(args.workdir, ignore_errors=True)
        work = args.workdir / "work"
        local = chain(work, LocalEngine(), notes, args.steps, None)
        expected = fingerprints(work)
        done = work.rename(args.workdir / "local")
        on_ray = chain(work, ray, notes, args.steps, done / "demo.key")
        same = fingerprints(work) == expected
        rows = json.loads((done / "notes.meta" / "manifest.json").read_text())["rows"]
        (args.workdir / "seconds.json").write_text(json.dumps({"local": local, "ray": on_ray}))
        print(f"\n{rows:,} notes, steps {args.steps}: same outputs on both engines: {same}")
        print("| stage | local s | ray s | ray / local | share of local |")
        print("|---|---:|---:|---:|---:|")
        total_l, total_r = sum(local.values()), sum(on_ray.values())
        for name in local:
            lo, ra = local[name], on_ray.get(name, float("nan"))
            print(f"| {name} | {lo:.1f} | {ra:.1f} | {ra / lo:.2f} | {lo / total_l:.1%} |")
        print(f"| **total** | {total_l:.1f} | {total_r:.1f} | {total_r / total_l:.2f} | |")
    ray.close()


if __name__ == "__main__":
    main()
