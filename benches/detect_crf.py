"""Benchmark: the ``crf`` recognizer's vetting threshold chosen honestly, by nested
patient-level cross-validation on the PhysioNet deid notes.

``detect``'s default keeps a ``rules``/``lists`` span only when the CRF gives one of its words
a PHI probability of at least ``VERIFY``. That one number was read off a cross-validation grid
of the same notes, so its CV score is slightly optimistic. Here each outer fold chooses the
threshold from an inner cross-validation of its own training patients only (the largest one
whose inner span recall is within ``--max-loss`` of keeping every span), trains the CRF on all
its training patients, and is scored with the chosen threshold on its held-out patients.
The same outer folds are also scored with every threshold of the grid (the optimistic view),
as ``phisieve detect-eval --cv`` does with the default.

    python benches/detect_crf.py [--k 5] [--inner 4] [--max-loss 0.002]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from _physionet import corpus

GRID = (0.0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)


def split(documents: pa.Table, gold: pa.Table, test_patients: set[str]):
    from phisieve.detect.cv import _take

    doc_ids = documents.column("doc_id").cast(pa.string()).to_pylist()
    patients = documents.column("patient_id").cast(pa.string()).to_pylist()
    test = {d for d, p in zip(doc_ids, patients, strict=True) if p in test_patients}
    train = set(doc_ids) - test
    return (
        _take(documents, "doc_id", train),
        _take(gold, "doc_id", train),
        _take(documents, "doc_id", test),
        _take(gold, "doc_id", test),
    )


def scores_by_threshold(train, train_gold, test, test_gold, corpus_docs, tmp: Path):
    """Train the CRF (and the deny list) on ``train``; score ``test`` at every threshold."""
    from phisieve.detect.crf_train import train_crf
    from phisieve.detect.learnt import learn_deny_list
    from phisieve.detect.run import evaluate, find_spans

    model = tmp / "crf"
    train_crf(train, train_gold, model, corpus=corpus_docs)
    deny = learn_deny_list(train, train_gold)
    out = {}
    for v in GRID:
        found = find_spans(
            test,
            ["rules", "lists", f"crf:{model}"],
            deny=deny,
            corpus=corpus_docs,
            crf_options={"verify": v},
        )
        out[v] = evaluate(test, found, test_gold)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--inner", type=int, default=4)
    ap.add_argument("--max-loss", type=float, default=0.002)
    args = ap.parse_args()

    from phisieve.detect.cv import folds
    from phisieve.io.annotated import read_physionet

    documents, gold = read_physionet(corpus())
    patients = documents.column("patient_id").cast(pa.string()).to_pylist()
    outer = folds(patients, args.k, 0)
    started = time.perf_counter()
    nested, grid_scores = [], {v: [] for v in GRID}
    for f in range(args.k):
        test_patients = {p for p, g in outer.items() if g == f}
        train, train_gold, test, test_gold = split(documents, gold, test_patients)
        train_patients = sorted(set(train.column("patient_id").cast(pa.string()).to_pylist()))
        inner = folds(train_patients, args.inner, 1)
        recall = {v: [] for v in GRID}
        with tempfile.TemporaryDirectory() as tmp:
            for g in range(args.inner):
                held = {p for p, h in inner.items() if h == g}
                parts = split(train, train_gold, held)
                for v, s in scores_by_threshold(*parts, documents, Path(tmp)).items():
                    recall[v].append(s["span_recall"])
            mean = {v: statistics.fmean(r) for v, r in recall.items()}
            chosen = max(v for v in GRID if mean[v] >= mean[0.0] - args.max_loss)
            scores = scores_by_threshold(train, train_gold, test, test_gold, documents, Path(tmp))
        for v, s in scores.items():
            grid_scores[v].append(s)
        s = scores[chosen]
        nested.append(s)
        print(
            f"fold {f + 1}/{args.k}: inner recall at 0 {mean[0.0]:.4f}, chosen verify {chosen} "
            f"(inner {mean[chosen]:.4f}); held out: span recall {s['span_recall']:.3f}, "
            f"char precision {s['char_precision']:.3f}",
            flush=True,
        )

    def mean_sd(rows, key):
        values = [r[key] for r in rows]
        return f"{statistics.fmean(values):.3f} ± {statistics.stdev(values):.3f}"

    print(f"\n{args.k} outer folds, {args.inner} inner, {time.perf_counter() - started:.0f} s")
    print("| verify | span recall | char precision |")
    print("|---|---:|---:|")
    print(
        f"| nested choice | {mean_sd(nested, 'span_recall')} | "
        f"{mean_sd(nested, 'char_precision')} |"
    )
    for v in GRID:
        rows = grid_scores[v]
        print(f"| {v} | {mean_sd(rows, 'span_recall')} | {mean_sd(rows, 'char_precision')} |")


if __name__ == "__main__":
    main()
