"""Benchmark: how fast the command line answers, against a bare typer application.

Each command runs ``--repeat`` times in a fresh interpreter after one warm-up run (the files
are in the page cache: "warm"); the bench prints the median wall time and the median peak
resident memory of each, and their ratio to the anchor: a typer application of one command
with one option, the floor any typer + rich command line pays.

    python benches/startup.py [--repeat 5]

The issue's bar: ``phisieve --help`` and ``phisieve index --help`` within 0.5 s and 120 MB.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

ANCHOR = """
import typer
app = typer.Typer(add_completion=False)
@app.command()
def index(docs: str, k: int = typer.Option(2, help="k")) -> None:
    print(docs, k)
app()
"""

BAR_SECONDS = 0.5
BAR_MB = 120.0


def run_once(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one run of ``argv`` (its own process only)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({proc.returncode}): {err[-2000:]}")
    return wall, usage.ru_maxrss / 1024  # Linux: kilobytes


def measure(argv: list[str], repeat: int) -> tuple[float, float]:
    """Median wall seconds and median peak MB over ``repeat`` warm runs."""
    run_once(argv)
    runs = [run_once(argv) for _ in range(repeat)]
    return statistics.median(w for w, _ in runs), statistics.median(m for _, m in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    exe = shutil.which("phisieve", path=os.path.dirname(sys.executable)) or "phisieve"
    cases = {
        "anchor: typer app --help": [sys.executable, "-c", ANCHOR, "--help"],
        "phisieve --help": [exe, "--help"],
        "phisieve index --help": [exe, "index", "--help"],
        "phisieve detect --help": [exe, "detect", "--help"],
        "phisieve run --help": [exe, "run", "--help"],
    }
    results = {name: measure(argv, args.repeat) for name, argv in cases.items()}
    base_s, base_mb = results["anchor: typer app --help"]
    print(f"median of {args.repeat} warm runs each (python {sys.version.split()[0]})")
    print(f"{'command':<28} {'wall s':>8} {'peak MB':>8} {'× anchor s':>11} {'× anchor MB':>12}")
    failed = []
    for name, (wall, mb) in results.items():
        print(f"{name:<28} {wall:8.3f} {mb:8.1f} {wall / base_s:11.2f} {mb / base_mb:12.2f}")
        if name in ("phisieve --help", "phisieve index --help") and (
            wall > BAR_SECONDS or mb > BAR_MB
        ):
            failed.append(name)
    if failed:
        print(f"over the bar ({BAR_SECONDS} s, {BAR_MB:.0f} MB): {', '.join(failed)}")


if __name__ == "__main__":
    main()
