"""Benchmark: the stacked CRF's two thresholds, scored on the held-out folds of
``detect-eval --cv`` (the optimistic view: no threshold here is chosen by inner folds).

``detect --recognizers rules,lists,crf,model`` keeps a ``rules``/``lists`` span only when the
stacked CRF gives one of its words a PHI probability of at least ``verify`` (0.005), and tags
the words its finder gives at least ``find`` (0.5). Both were set for the CRF without the
model. This runs the same patient-level cross-validation as

    phisieve detect-eval --cv 5 --recognizers rules,lists,crf,model --base MINILM \\
        --model-layers 1 --seed S

(the model and the CRF trained per fold, the CRF's model scores out of fold, nested), and
scores each held-out fold at every pair of the grid with that fold's models. The row of the
defaults is the cross-validation's own result (checked). Reading a threshold off this table
and quoting its score would be tuning on the scored notes: a pair that looks better here
needs a nested choice (inner folds of the training patients) before it is a claim.

    python benches/detect_stacked_grid.py --base MINILM [--layers 1] [--seed 0] [--k 5] [--json F]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path

import pyarrow as pa
from _physionet import corpus

VERIFY = (0.005, 0.002, 0.001, 0.0005, 0.0)
FIND = (0.5, 0.3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="a BERT-style model folder (MiniLM-L6)")
    ap.add_argument("--layers", type=int, default=1, help="the model's first N layers")
    ap.add_argument("--seed", type=int, default=0, help="the folds' assignment")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--json", default=None, help="also write every fold's scores here")
    args = ap.parse_args()

    from phisieve.detect import cv
    from phisieve.detect.recognizers.crf import FIND as DEFAULT_FIND
    from phisieve.detect.recognizers.crf import VERIFY as DEFAULT_VERIFY
    from phisieve.detect.run import evaluate
    from phisieve.io.annotated import read_physionet

    documents, gold = read_physionet(corpus())
    grid = list(itertools.product(VERIFY, FIND))
    scores: dict[tuple[float, float], list[dict]] = {pair: [] for pair in grid}
    find_spans = cv.find_spans

    def scored(test: pa.Table, names: list[str], **options):
        """The fold's own detection, and its scores at every pair of the grid."""
        found = find_spans(test, names, **options)
        doc_ids = set(test.column("doc_id").cast(pa.string()).to_pylist())
        test_gold = cv._take(gold, "doc_id", doc_ids)
        for verify, find in grid:
            crf = {"verify": verify, "find": find}
            other = find_spans(test, names, **options, crf_options=crf)
            scores[verify, find].append(evaluate(test, other, test_gold))
        return found

    cv.find_spans = scored  # the folds' models are trained once, scored at every pair
    started = time.perf_counter()
    result = cv.cross_validate(
        documents,
        gold,
        ["rules", "lists", "crf", "model"],
        k=args.k,
        seed=args.seed,
        base=args.base,
        train_options={"layers": args.layers},
        on_fold=lambda f, s: print(
            f"fold {f + 1}/{args.k}: span recall {s['span_recall']:.4f}, "
            f"char precision {s['char_precision']:.4f}",
            flush=True,
        ),
    )
    seconds = time.perf_counter() - started
    if args.json:
        rows = [{"verify": v, "find": f, "folds": r} for (v, f), r in scores.items()]
        Path(args.json).write_text(json.dumps({"cv": result, "grid": rows}, indent=1))
    default = scores[DEFAULT_VERIFY, DEFAULT_FIND]
    same = all(
        own[key] == again[key]
        for own, again in zip(result["folds"], default, strict=True)
        for key in ("span_recall", "char_precision")
    )
    print(f"the defaults' row is the cross-validation's own result: {same}")

    def mean(rows: list[dict], key: str) -> float:
        return statistics.fmean(r[key] for r in rows)

    print(
        f"\n{args.k} folds (seed {args.seed}), {args.layers}-layer model, "
        f"{result['models_trained']} models trained, {seconds:.0f} s"
    )
    print("| verify | find | span recall | char precision | gold spans found |")
    print("|---:|---:|---:|---:|---:|")
    for verify, find in grid:
        rows = scores[verify, find]
        found = round(sum(r["span_recall"] * r["gold_spans"] for r in rows))
        total = sum(r["gold_spans"] for r in rows)
        mark = " (default)" if (verify, find) == (DEFAULT_VERIFY, DEFAULT_FIND) else ""
        print(
            f"| {verify}{mark} | {find} | {mean(rows, 'span_recall'):.4f} | "
            f"{mean(rows, 'char_precision'):.4f} | {found} of {total} |"
        )


if __name__ == "__main__":
    main()
