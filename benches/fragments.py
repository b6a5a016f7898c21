"""Fragments of the PhysioNet notes: what they hold and what the filters remove (the analogue
of Ignashina & Ive's Table 1), and the parsers' speed.

    python benches/fragments.py [--workers 2] [--out /tmp/phisieve-bench-fragments]

The notes (``PHISIEVE_TEST_CORPUS``) are indexed (k = 2, n = 1, with the detected spans) and
detected with the default recognizers (``rules,lists``); ``phisieve fragment`` then runs with
the gold PHI spans (for the report only):

1. with no filter, in 1 process and in ``--workers`` processes (notes/s: the parse and
   everything after it, one run each);
2. with ``--spans`` alone;
3. with ``--terms --spans --k 2``: the share of gold PHI words by category in the full text,
   in all fragments, and after each filter in turn (indirect identifiers, words inside
   detected spans, words fewer than 2 patients use).

Stanza is measured only when its English models are on disk (phisieve never downloads them).
Detection was developed on these notes, so the share left after ``--spans`` is optimistic
for other notes; the terms and ``--k`` filters fit nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from phisieve.detect.stage import DetectStage
from phisieve.fragments.stage import FragmentStage
from phisieve.io.annotated import PHYSIONET_LABELS, read_physionet
from phisieve.pipeline.runner import run_stage, write_dataset
from phisieve.term_index.stage import IndexStage

CORPUS = Path(os.environ.get("PHISIEVE_TEST_CORPUS", "/work/shared/data/physionet-deid"))
LABELS = list(PHYSIONET_LABELS)


def fragment(work: Path, name: str, inputs: dict[str, Any], **options: Any) -> dict[str, Any]:
    out = work / name
    t = time.perf_counter()
    m = run_stage(FragmentStage(**options), inputs, out, overwrite=True)
    report = json.loads((work / f"{name}.meta" / "report.json").read_text())
    return {"seconds": time.perf_counter() - t, "report": report, "examples": m["examples"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("/tmp/phisieve-bench-fragments"))
    args = ap.parse_args()
    work = args.out
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    docs, gold = read_physionet(CORPUS)
    write_dataset(docs, work / "docs")
    write_dataset(gold, work / "gold")
    run_stage(DetectStage(recognizers="rules,lists"), {"docs": work / "docs"}, work / "spans")
    run_stage(IndexStage(k=2), {"docs": work / "docs", "spans": work / "spans"}, work / "terms")
    base = {"docs": work / "docs", "gold": work / "gold"}

    runs = {}
    runs["raw, 1 process"] = fragment(work, "raw1", base, workers=1)
    runs[f"raw, {args.workers} processes"] = fragment(work, "raw", base, workers=args.workers)
    runs["--spans"] = fragment(
        work, "spans_only", {**base, "spans": work / "spans"}, workers=args.workers
    )
    runs["--terms --spans --k 2"] = fragment(
        work,
        "filtered",
        {**base, "terms": work / "terms", "spans": work / "spans"},
        workers=args.workers,
        k=2,
    )
    notes = runs["raw, 1 process"]["report"]["notes"]
    print(f"{notes:,} notes, {runs['raw, 1 process']['report']['words']:,} words\n")
    print("| run (spaCy) | seconds | notes/s | examples |")
    print("|---|---:|---:|---:|")
    for name, r in runs.items():
        print(f"| {name} | {r['seconds']:.1f} | {notes / r['seconds']:.1f} | {r['examples']:,} |")
    try:
        from phisieve.fragments.chunkers import StanzaChunker

        StanzaChunker()
    except Exception as e:
        print(f"\nStanza: not measured ({type(e).__name__}: {str(e)[:120]}...)")

    r = runs["--terms --spans --k 2"]["report"]
    print("\nGold PHI share of words (%), by category:\n")
    print("| text | words | PHI | " + " | ".join(LABELS) + " |")
    print("|---|---:|---:|" + "---:|" * len(LABELS))
    rows = list(r["gold"])
    spans_only = runs["--spans"]["report"]["gold"][-1]
    rows.append({**spans_only, "text": "fragments - span only"})
    for row in rows:
        cells = " | ".join(f"{100 * row['by_label'].get(label, 0.0):.3f}" for label in LABELS)
        print(f"| {row['text']} | {row['words']:,} | {100 * row['phi_share']:.2f} | {cells} |")

    raw = runs[f"raw, {args.workers} processes"]["report"]
    print(f"\ncoverage: {raw['coverage']:.1%} of the notes' words are in some fragment")
    print("\n| kind | cut | 2 words | 3 words | 4 words | mean | kept (all filters) | used |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for kind in ("NP", "VP"):
        f, by = r["fragments"][kind], r["fragments"][kind]["by_length"]
        print(
            f"| {kind} | {f['cut']:,} | {by.get('2', 0):,} | {by.get('3', 0):,} | "
            f"{by.get('4', 0):,} | {f['length_mean']:.2f} | {f['kept']:,} | "
            f"{r['supply'][kind]['used']:,} |"
        )
    print(f"\ndropped (all filters; a fragment may count twice): {r['dropped']}")
    print(f"examples: {r['supply']['examples']:,}; ran out: {r['supply']['ran_out']}")
    print(f"examples without filters: {raw['supply']['examples']:,}")


if __name__ == "__main__":
    main()
