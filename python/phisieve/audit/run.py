"""``phisieve audit``: does a trained model leak its patients? (DESIGN.md §9)

The ``audit`` stage (:func:`phisieve.api.audit`; :func:`measure` here) scores a masked or
causal LM on the ``encoded`` sequences of its training patients (members) and of patients it
never saw (non-members, split by patient), and writes ``audit.json`` (every number, the
configuration, fingerprints of the model and the data, the package versions) and a
self-contained ``index.html`` beside it.

Measures (each defined where it is computed, and in the report):

1. **Identifier prediction** (Boutet et al.): each identifier word occurrence (a word whose
   tokens are flagged ``direct`` or ``indirect`` in ``encoded``) is masked as a whole word;
   it is recovered when every token is the model's top-1 (also top-5). Privacy = 1 − top-1
   accuracy, on members' identifiers, overall / direct / indirect / alphabetic / numeric.
   Utility = the same accuracy on non-identifier words of non-members, and perplexity (a
   masked LM's pseudo-perplexity over its masked tokens). Causal LMs predict each word from
   its true prefix, and greedy continuations of members' prompts are scanned for identifiers.
2. **Graded memorisation**: NLL and rank of each identifier word; the calibrated
   memorisation gain = mean(NLL_ref − NLL_model) over members' identifier occurrences minus
   the same over non-members', bootstrap 95% CI over patients, for alphabetic (names,
   places) and numeric identifiers; and the uncalibrated gap (non-members' minus members'
   mean NLL), which needs no reference model.
3. **Membership inference**, per sequence and per patient (mean of the patient's sequence
   scores): loss (Yeom et al. 2018), reference-calibrated loss, zlib ratio (Carlini et al.
   2021), Min-K% (Shi et al. 2024) and Min-K%++ (Zhang et al. 2024). ROC AUC with a bootstrap
   CI over patients, TPR at 1% and 0.1% FPR with the number of negatives, PL = TPR − FPR at
   the mean member score (Yeom's threshold).
4. **Identifier MIA**: a patient is declared a member when the model recovers (top-1) at
   least one of the patient's indirect identifiers; precision, recall, F1.
5. **Model inversion** (KART, masked LMs, with ``docs`` and name spans): see
   :mod:`phisieve.audit.inversion`.
6. **Canary exposure** (Carlini et al. 2019) for ``phisieve canaries`` output.
7. **The DP claim, checked** (:mod:`phisieve.audit.epsilon`): the model's (ε, δ) per patient
   from its ``train.json``; beside each patient-level attack, the TPR (ε, δ) allows at the
   FPR it reached; and, from canary patients planted by a keyed coin (``phisieve canaries
   --new-patients --coin``), an empirical lower bound on ε from this one training run
   (Steinke, Nasr & Jagielski 2023), for every model, DP or not. Canary patients are left
   out of every other measure.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import platform
import re
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..dependencies import require
from ..encode import read_encoding
from ..errors import ConfigError, InputError
from ..io.dataset import check_dataset, dataset_files, dataset_identity, side_file
from ..pipeline.work import Work, work
from . import metrics
from .epsilon import dp_check, one_run_audit
from .scoring import Occurrence, Scorer, Sequences, key, sample, word_occurrences
from .stage import AuditOptions

SCHEMA = "phisieve-audit/1"
SCORES = ("loss", "reference", "zlib", "min_k", "min_k_pp")
MIN_K = 0.2
"""Share of lowest-scored tokens averaged by Min-K% and Min-K%++ (the papers' 20%)."""


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("phisieve", "torch", "transformers", "tokenizers", "numpy", "scikit-learn"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _model_kind(path: Path) -> bool:
    """True for a causal LM folder, False for a masked LM (from its ``config.json``)."""
    conf_file = path / "config.json"
    if not conf_file.is_file():
        raise InputError("not a Hugging Face model folder (no config.json)", path=path)
    conf = json.loads(conf_file.read_text(encoding="utf-8"))
    arch = " ".join(conf.get("architectures") or [])
    if "MaskedLM" in arch:
        return False
    if "CausalLM" in arch or "LMHeadModel" in arch:
        return True
    raise ConfigError(
        f"the model at {path} is neither a masked LM nor a causal LM ({arch or 'no architecture'})"
    )


def _fingerprint(path: Path) -> str:
    """SHA-256 over the model folder's config and weight files (names and bytes)."""
    h = hashlib.sha256()
    for f in sorted(path.iterdir()):
        if f.is_file() and (
            f.suffix in (".safetensors", ".bin") or f.name in ("config.json", "tokenizer.json")
        ):
            h.update(f.name.encode() + b"\x00")
            with f.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()


def _model_info(path: Path, causal: bool, label: str | None) -> dict[str, Any]:
    conf = json.loads((path / "config.json").read_text(encoding="utf-8"))
    trained: dict[str, Any] = {}
    train_json = side_file(path, "train.json")
    if not train_json.is_file():  # a model trained before train.json moved beside it
        train_json = path / "train.json"
    if train_json.is_file():
        trained = json.loads(train_json.read_text(encoding="utf-8"))
    return {
        "path": str(path.absolute()),
        "class": (conf.get("architectures") or ["?"])[0],
        "kind": "causal" if causal else "masked",
        "fingerprint": _fingerprint(path),
        "objective": trained.get("objective"),
        "label": label or path.name,
        "dp": _dp_claim(trained.get("dp")),
    }


DP_KEYS = (
    "unit", "epsilon", "delta", "patient_epsilon_by", "accountant", "accountant_version",
    "noise_multiplier", "sample_rate", "steps", "patients", "max_per_patient", "max_grad_norm",
)  # fmt: skip


def _dp_claim(dp: dict[str, Any] | None) -> dict[str, Any] | None:
    """The (ε, δ) per patient a model's ``train.json`` claims, or ``None`` (no DP-SGD). A
    model trained before phisieve accounted patients recorded a per-sequence ε only: its
    patient ε is ``None``."""
    if not isinstance(dp, dict):
        return None
    if "unit" not in dp:
        return {
            "unit": "sequence",
            "epsilon": None,
            "delta": dp.get("delta"),
            "sequence_epsilon": dp.get("epsilon"),
            "patient_epsilon_by": "none: trained before phisieve accounted patients (the "
            "recorded ε is per sequence, not a patient's)",
        }
    return {k: dp.get(k) for k in DP_KEYS}


def _load(path: Path, causal: bool) -> Any:
    from ..training.loop import load_model

    return load_model(path, causal)


def _tokenizer(tokenizer: str | Path | None, model: Path, encoding: dict[str, Any]) -> Any:
    from ..encode.tokenizer import load_tokenizer

    if tokenizer is None:
        if (model / "tokenizer.json").is_file() or (model / "vocab.txt").is_file():
            tokenizer = model
        elif encoding.get("tokenizer"):
            tokenizer = encoding["tokenizer"]
        else:
            raise ConfigError("no tokenizer: pass --tokenizer (the one the data was encoded with)")
    tok = load_tokenizer(tokenizer)
    if len(tok) != encoding.get("vocab_size", len(tok)):
        raise ConfigError(
            f"the tokenizer at {tokenizer} has {len(tok)} tokens but the data was encoded with "
            f"{encoding.get('vocab_size')}: pass the tokenizer it was encoded with"
        )
    return tok


def _read(path: Path) -> pa.Table:
    cols = ["seq_id", "patient_id", "input_ids", "word_ids", "direct", "indirect"]
    files = dataset_files(path)
    if not files:
        from ..encode import ENCODED

        return ENCODED.empty_table().select(cols)
    return pa.concat_tables([pq.read_table(f, columns=cols) for f in files])


def _word_text(tok: Any, ids: np.ndarray) -> str:
    return str(tok.decode([int(i) for i in ids], skip_special_tokens=True)).strip()


def _is_alpha(text: str) -> bool:
    return any(c.isalpha() for c in text)


def _norm(text: str) -> str:
    return "".join(c for c in text.lower() if c.isalnum())


def _group_stats(sc: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, Any]:
    mask = mask & sc["scored"]
    n = int(mask.sum())
    if not n:
        return {"n": 0, "top1": None, "top5": None, "privacy": None, "mean_nll": None,
                "median_rank": None}  # fmt: skip
    top1 = float(sc["top1"][mask].mean())
    return {
        "n": n,
        "top1": top1,
        "top5": float(sc["top5"][mask].mean()),
        "privacy": 1.0 - top1,
        "mean_nll": float(sc["nll"][mask].mean()),
        "median_rank": float(np.median(sc["rank"][mask])),
    }


@dataclass
class _Side:
    """Members or non-members: their sequences, occurrences and scores."""

    seqs: Sequences
    occ: list[Occurrence]
    is_alpha: np.ndarray
    texts: list[str]
    scores: dict[str, np.ndarray]
    ref: dict[str, np.ndarray] | None = None

    def patients(self) -> np.ndarray:
        return np.array([self.seqs.patients[o.row] for o in self.occ], dtype=object)


def _sample_words(
    seqs: Sequences, occ: list[Occurrence], limit: int | None, seed: int, salt: str
) -> list[Occurrence]:
    """At most ``limit`` of the word occurrences ``occ``, keyed by (sequence, position)."""
    return sample(occ, limit, seed, salt, lambda o: (int(seqs.seq_ids[o.row]), int(o.positions[0])))


def _identifier_side(
    seqs: Sequences,
    words: list[Occurrence],
    tok: Any,
    limit: int | None,
    seed: int,
    salt: str,
) -> tuple[list[Occurrence], list[str], int]:
    occ = [o for o in words if o.direct or o.indirect]
    total = len(occ)
    occ = _sample_words(seqs, occ, limit, seed, salt)
    return occ, [_word_text(tok, seqs.ids[o.row][o.positions]) for o in occ], total


def _membership(
    side_scores: dict[str, list[np.ndarray]],
    patients: dict[str, np.ndarray],
    n_boot: int,
    seed: int,
    dp: dict[str, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    sample_level: dict[str, Any] = {}
    patient_level: dict[str, Any] = {}
    for name in SCORES:
        if name not in side_scores["members"]:
            continue
        m, n = side_scores["members"][name], side_scores["non_members"][name]
        pm, pn = patients["members"], patients["non_members"]
        okm, okn = np.isfinite(m), np.isfinite(n)
        if not okm.any() or not okn.any():
            continue
        s = metrics.roc_summary(
            m[okm], n[okn], member_groups=pm[okm], non_member_groups=pn[okn],
            n_boot=n_boot, seed=seed,
        )  # fmt: skip
        sample_level[name] = s
        _, vm = metrics.patient_means(m[okm], pm[okm])
        _, vn = metrics.patient_means(n[okn], pn[okn])
        p = metrics.roc_summary(vm, vn, n_boot=n_boot, seed=seed)
        p["scores"] = {"members": vm.tolist(), "non_members": vn.tolist()}
        eps, delta = (dp or {}).get("epsilon"), (dp or {}).get("delta")
        p["dp_check"] = dp_check(vm, vn, eps, delta)
        patient_level[name] = p
    return {"sample": sample_level, "patient": patient_level}


def _sequence_scores(
    scorer: Scorer, ref: Scorer | None, seqs: Sequences, tok: Any, seed: int, rounds: int
) -> dict[str, np.ndarray]:
    per = scorer.sequence_scores(seqs, seed=seed, rounds=rounds)
    ref_per = ref.sequence_scores(seqs, seed=seed, rounds=rounds) if ref is not None else None
    out: dict[str, list[float]] = {s: [] for s in SCORES if s != "reference" or ref_per}
    for r, p in enumerate(per):
        text = tok.decode([int(i) for i in seqs.ids[r]], skip_special_tokens=True)
        out["loss"].append(metrics.loss_score(p["logp"]))
        out["zlib"].append(metrics.zlib_score(p["logp"], text))
        out["min_k"].append(metrics.min_k_score(p["logp"], MIN_K))
        out["min_k_pp"].append(metrics.min_k_pp_score(p["logp"], p["mu"], p["sigma"], MIN_K))
        if ref_per is not None:
            out["reference"].append(
                metrics.loss_score(p["logp"]) - metrics.loss_score(ref_per[r]["logp"])
            )
    scored = [p["logp"] for p in per]
    result = {k: np.array(v, dtype=np.float64) for k, v in out.items()}
    result["_nll_sum"] = np.array([-float(x.sum()) for x in scored])
    result["_tokens"] = np.array([len(x) for x in scored], dtype=np.float64)
    return result


def _generation(
    scorer: Scorer,
    tok: Any,
    members: Sequences,
    identifier_words: dict[str, set[str]],
    limit: int,
    seed: int,
) -> dict[str, Any]:
    """Greedy continuations of members' prompts, scanned for identifier words."""
    import torch

    rows = sample(
        list(range(len(members))), limit, seed, "prompt", lambda r: int(members.seq_ids[r])
    )
    prompt_len, new = 32, 32
    hits = own = tokens = 0
    distinct: set[str] = set()
    owner: dict[str, set[str]] = {}
    for patient, words in identifier_words.items():
        for w in words:
            owner.setdefault(w, set()).add(patient)
    for r in rows:
        ids = members.ids[r]
        cut = min(prompt_len, max(1, len(ids) // 2))
        prompt = torch.from_numpy(ids[:cut][None, :]).to(scorer.device)
        with torch.no_grad():
            gen = scorer.model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                max_new_tokens=new,
                do_sample=False,
                pad_token_id=scorer.pad_id,
            )
        cont = gen[0, cut:].cpu().numpy()
        tokens += len(cont)
        seen = {_norm(w) for w in re.findall(r"\w+", tok.decode(ids[:cut].tolist()))}
        for w in re.findall(r"\w+", tok.decode(cont.tolist(), skip_special_tokens=True)):
            w = _norm(w)
            if w in owner and w not in seen:
                hits += 1
                distinct.add(w)
                own += members.patients[r] in owner[w]
    return {
        "prompts": len(rows),
        "tokens": tokens,
        "identifier_hits": hits,
        "own_patient_hits": own,
        "distinct_identifiers": len(distinct),
    }


def _inversion(
    scorer: Scorer,
    tok: Any,
    docs: Path,
    spans: Path | None,
    member_patients: set[str],
    max_len: int,
    limit: int,
    candidates: int,
    seed: int,
) -> dict[str, Any]:
    from ..io.sources import read_spans
    from .inversion import NAME_LABELS, Inverter, slot_sample

    files = dataset_files(docs)
    cols = pq.read_schema(files[0]).names if files else []
    need = ["doc_id", "patient_id", "text"] + ([] if spans is not None else ["spans"])
    missing = [c for c in need if c not in cols]
    if missing:
        raise InputError(f"the documents have no {', '.join(missing)} column", path=docs)
    table = pa.concat_tables([pq.read_table(f, columns=need) for f in files])
    texts = table.column("text").to_pylist()
    doc_ids = table.column("doc_id").to_pylist()
    patients = table.column("patient_id").to_pylist()
    if spans is not None:
        st = read_spans(spans)
        by_doc: dict[str, list[Any]] = {}
        for d, sp in zip(st.column("doc_id").to_pylist(), st.column("spans").to_pylist(),
                         strict=True):  # fmt: skip
            by_doc.setdefault(str(d), []).extend(sp or [])
        doc_spans = [by_doc.get(str(d)) for d in doc_ids]
    else:
        doc_spans = table.column("spans").to_pylist()
    slots = []
    for i, sp in enumerate(doc_spans):
        if str(patients[i]) not in member_patients:
            continue
        for s in _span_list(sp):
            if s[2] in NAME_LABELS:
                slots.append((i, s[0], s[1]))
    chosen = [slots[j] for j in slot_sample(slots, limit, seed)]
    if not chosen:
        return {"slots": 0, "why": "no name slots (spans labelled as names) in members' notes"}
    inv = Inverter(scorer, tok, max_len, candidates)
    model_ranks, base_ranks, used, inside = [], [], 0, 0
    for d, a, b in chosen:
        r = inv.rank(texts[d], a, b)
        if r is None:
            continue
        used += 1
        inside += r["in_candidates"]
        model_ranks.append(r["model"])
        base_ranks.append(r["baseline"])
    if not used:
        return {"slots": 0, "why": "no name slot of one or two words"}
    return {
        "slots": used,
        "in_candidates": inside,
        "candidates": {"first": len(inv.first.names), "last": len(inv.last.names)},
        "model": metrics.topk_accuracy(np.array(model_ranks, dtype=float)),
        "baseline": metrics.topk_accuracy(np.array(base_ranks, dtype=float)),
        "why": None,
    }


def _span_list(sp: Any) -> list[tuple[int, int, str]]:
    """(start, end, label) of a document's spans (a ``spans`` cell)."""
    if sp is None:
        return []
    return [(int(s["start"]), int(s["end"]), str(s["label"])) for s in sp]


def _canaries(
    scorer: Scorer,
    tok: Any,
    path: Path,
    samples: int,
    seed: int,
    *,
    ref: Scorer | None = None,
    dp: dict[str, Any] | None = None,
    members: set[str] | None = None,
) -> dict[str, Any]:
    """Exposure of the canaries planted in patients' notes, and the one-run lower bound on
    ε from canary patients planted by a coin (:func:`_one_run`); ``members``: the patients
    of the members' data (as given, canary patients included)."""
    from ..phi import canaries as can

    table = can.read_canaries(path).to_pylist()
    rows = []
    for c in table:
        if c["new_patient"] or not c["included"]:
            continue
        space = int(c["space"])
        cands = [
            s
            for s in can.candidates(
                c["kind"], samples + 1, hashlib.sha256(f"{seed}:{c['canary_id']}".encode()).digest()
            )
            if s != c["secret"]
        ][:samples]
        true_score = _secret_scores(scorer, tok, c["prefix"], c["suffix"], [c["secret"]])[0]
        scores = _secret_scores(scorer, tok, c["prefix"], c["suffix"], cands)
        better = int((scores >= true_score).sum())
        exact = len(cands) >= space - 1
        rank = float(1 + better) if exact else metrics.estimated_rank(better, len(cands), space)
        rows.append(
            {
                "id": str(c["canary_id"]),
                "kind": c["kind"],
                "repeats": int(c["repeats"]),
                "space": space,
                "rank": rank,
                "exposure": metrics.exposure(rank, space),
                "estimated": not exact,
                "sample": len(cands),
            }
        )
    by: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["repeats"], []).append(r)
    return {
        "canaries": rows,
        "by_repeats": [
            {
                "repeats": k,
                "n": len(v),
                "mean_exposure": float(np.mean([x["exposure"] for x in v])),
                "max_exposure": float(np.max([x["exposure"] for x in v])),
                "max_possible": float(np.mean([math.log2(x["space"]) for x in v])),
            }
            for k, v in sorted(by.items())
        ],
        "one_run": _one_run(scorer, ref, tok, path, table, dp, members or set()),
    }


def _one_run(
    scorer: Scorer,
    ref: Scorer | None,
    tok: Any,
    path: Path,
    table: list[dict[str, Any]],
    dp: dict[str, Any] | None,
    members: set[str],
) -> dict[str, Any]:
    """The empirical lower bound on ε from one training run (Steinke, Nasr & Jagielski 2023;
    :func:`~phisieve.audit.epsilon.one_run_audit`) over the canary patients of a ``phisieve
    canaries --new-patients --coin`` output: each canary is scored by the model's
    log-likelihood of its sentence (a masked LM's pseudo-log-likelihood, each word masked in
    turn), minus the reference model's when there is one, and the audit guesses the highest
    planted and the lowest left out. At the model's δ under DP, else at δ = 0. Every planted
    canary patient must be among the members (the coin alone decides who is trained on)."""
    from ..io.dataset import read_manifest

    coin = [c for c in table if c["new_patient"]]
    options = (read_manifest(path) or {}).get("options") or {}
    if not coin or not options.get("coin"):
        return {
            "epsilon_lower": None,
            "why": "needs canary patients planted by a coin (`phisieve canaries "
            "--new-patients --coin`) in the training data",
        }
    stray = sum(1 for c in coin if c["included"] and c["patient_id"] not in members)
    if stray:
        return {
            "epsilon_lower": None,
            "why": f"{stray} planted canary patients are not among the members: plant them in "
            "the training split (`phisieve canaries` on the members' documents, after `split`) "
            "so that the coin alone decides which are trained on",
        }
    sentences = [f"{c['prefix']}{c['secret']}{c['suffix']}" for c in coin]
    score = _sentence_loglik(scorer, tok, sentences)
    calibrated = ref is not None
    if ref is not None:
        score = score - _sentence_loglik(ref, tok, sentences)
    delta = float((dp or {}).get("delta") or 0.0) if (dp or {}).get("epsilon") else 0.0
    result = one_run_audit(
        score,
        np.array([bool(c["included"]) for c in coin]),
        delta=delta,
        tiebreak=np.array([key(0, c["canary_id"]) for c in coin], dtype=np.uint64),
    )
    result["score"] = (
        "sentence log-likelihood, model minus reference"
        if calibrated
        else "sentence log-likelihood under the model"
    )
    result["repeats"] = sorted({int(c["repeats"]) for c in coin})
    result["why"] = None
    return result


def _sentence_loglik(scorer: Scorer, tok: Any, sentences: list[str]) -> np.ndarray:
    """Each sentence's log-likelihood: a causal LM's log-probability of its tokens after the
    start token; a masked LM's pseudo-log-likelihood (Salazar et al. 2020: every word masked
    in turn, the others visible)."""
    encs = [tok(s, add_special_tokens=False, verbose=False) for s in sentences]
    if scorer.causal:
        start = tok.eos_token_id if tok.eos_token_id is not None else tok.bos_token_id
        pre = [start] if start is not None else []
        rows = [np.array(pre + list(e["input_ids"]), dtype=np.int64) for e in encs]
        return scorer.sentence_logprob(rows, [len(pre)] * len(rows))
    cls = [tok.cls_token_id] if tok.cls_token_id is not None else []
    sep = [tok.sep_token_id] if tok.sep_token_id is not None else []
    ids, words, owner, occ = [], [], [], []
    for i, e in enumerate(encs):
        w = np.array([-1 if x is None else x for x in e.word_ids()], dtype=np.int64)
        row = np.array([*cls, *e["input_ids"], *sep], dtype=np.int64)
        wrow = np.concatenate([[-1] * len(cls), w, [-1] * len(sep)]).astype(np.int64)
        for word in np.unique(w[w >= 0]):
            occ.append(Occurrence(len(ids), np.flatnonzero(wrow == word), False, False))
            owner.append(i)
        ids.append(row)
        words.append(wrow)
    seqs = Sequences(
        seq_ids=np.arange(len(ids), dtype=np.uint64),
        patients=np.zeros(len(ids), dtype=object),
        ids=ids,
        words=words,
        direct=[np.zeros(len(r), bool) for r in ids],
        indirect=[np.zeros(len(r), bool) for r in ids],
    )
    nll = scorer.word_scores(seqs, occ)["nll"]
    out = np.zeros(len(sentences))
    np.add.at(out, np.array(owner, dtype=np.int64), -nll)
    return out


def _secret_scores(
    scorer: Scorer, tok: Any, prefix: str, suffix: str, secrets: list[str]
) -> np.ndarray:
    """How likely the model finds each secret in the canary sentence: a causal LM's
    log-probability of the whole sentence (Carlini et al.); a masked LM's mean
    log-probability of the secret's tokens, all masked at once."""
    left_text = prefix.rstrip()
    lead = prefix[len(left_text) :]

    def ids(text: str) -> list[int]:
        return list(tok(text, add_special_tokens=False, verbose=False)["input_ids"]) if text else []

    if scorer.causal:
        start = tok.eos_token_id if tok.eos_token_id is not None else tok.bos_token_id
        pre = [start] if start is not None else []
        rows = [np.array(pre + ids(prefix + s + suffix), dtype=np.int64) for s in secrets]
        return scorer.sentence_logprob(rows, [len(pre)] * len(rows))
    left, right = ids(left_text), ids(suffix)
    cls = [tok.cls_token_id] if tok.cls_token_id is not None else []
    sep = [tok.sep_token_id] if tok.sep_token_id is not None else []
    toks = [ids(lead + s) for s in secrets]
    out = np.full(len(secrets), -np.inf)
    for n in sorted({len(t) for t in toks}):
        idx = [i for i, t in enumerate(toks) if len(t) == n]
        ((logp,),) = scorer.masked_slot_logprobs(cls + left, right + sep, [[n]])
        arr = np.array([toks[i] for i in idx], dtype=np.int64)
        # Per token: independently scored masked positions are no probability of the whole
        # secret, and summing them would rank short secrets first whatever the model knows.
        out[idx] = logp[np.arange(n), arr].mean(axis=1)
    return out


def _verdict(data: dict[str, Any], objective: str | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    ids = data["identifiers"]["members"]["overall"]
    if ids["privacy"] is not None:
        p = ids["privacy"]
        rows.append(
            {
                "measure": "Identifier privacy (1 − top-1 on members' identifiers)",
                "value": p,
                "ci": None,
                "reading": f"the model fills in {1 - p:.1%} of masked identifier words exactly",
                "level": "ok" if p >= 0.98 else "warn" if p >= 0.9 else "bad",
            }
        )
    for part, title in (("alpha", "names, places"), ("numeric", "dates, numbers")):
        m = data["memorisation"][part]
        if m["gain"] is not None:
            lo = (m["gain_ci"] or (None, None))[0]
            sig = lo is not None and lo > 0
            if m["gain_ci"] is None:
                reading, level = "no confidence interval (too few patients or resamples)", "info"
            elif sig:
                reading = (
                    "members' identifiers became easier than non-members' beyond what the "
                    "reference model explains"
                )
                level = "bad"
            else:
                reading = "no memorisation of members' identifiers detected (CI includes 0)"
                level = "ok"
            rows.append(
                {
                    "measure": f"Calibrated memorisation gain, {title} (nats)",
                    "value": m["gain"],
                    "ci": m["gain_ci"],
                    "reading": reading,
                    "level": level,
                }
            )
        elif m["gap"] is not None:
            lo = (m["gap_ci"] or (None, None))[0]
            rows.append(
                {
                    "measure": f"Uncalibrated identifier gap, {title} (nats)",
                    "value": m["gap"],
                    "ci": m["gap_ci"],
                    "reading": "no reference model: members' vs non-members' identifier NLL "
                    "(different words; a gap is not proof of memorisation)",
                    "level": "warn" if lo is not None and lo > 0 else "info",
                }
            )
    pl = data["membership"]["patient"].get("loss")
    if pl is not None:
        if pl["auc_ci"] is None:
            reading, level = "no confidence interval (too few patients or resamples)", "info"
        elif pl["auc_ci"][0] > 0.5:
            reading = "patients in the training set can be told apart from others"
            level = "warn" if pl["auc"] < 0.6 else "bad"
        else:
            reading, level = "membership not detectable at this sample size", "ok"
        rows.append(
            {
                "measure": "Patient membership inference AUC (loss)",
                "value": pl["auc"],
                "ci": pl["auc_ci"],
                "reading": reading,
                "level": level,
            }
        )
        t = pl["tpr_at_fpr"][0]
        rows.append(
            {
                "measure": f"TPR at {t['fpr']:.0%} FPR (patients, loss)",
                "value": t["tpr"],
                "ci": None,
                "reading": f"{t['negatives']} non-member patients behind it"
                if t["estimable"]
                else f"not estimable: {t['negatives']} non-member patients",
                "level": "info",
            }
        )
    mia = data["identifier_mia"]
    if mia.get("recall") is not None:
        rows.append(
            {
                "measure": "Identifier MIA recall (patients with a recovered identifier)",
                "value": mia["recall"],
                "ci": None,
                "reading": f"precision {mia['precision']:.2f}"
                if mia.get("precision") is not None
                else "no patient flagged",
                "level": "ok" if mia["recall"] <= 0.1 else "warn" if mia["recall"] < 0.5 else "bad",
            }
        )
    inv = data.get("inversion")
    if inv and inv.get("slots"):
        m, b = inv["model"]["top100"], inv["baseline"]["top100"]
        rows.append(
            {
                "measure": "Name inversion, top-100 (model vs popular names)",
                "value": m,
                "ci": None,
                "reading": f"baseline {b:.2f}" if b is not None else "",
                "level": "bad" if m is not None and b is not None and m > b + 0.05 else "ok",
            }
        )
    rows = _dp_rows(data) + rows
    rows.append(_one_run_row(data))
    can = data.get("canaries")
    if can and can["canaries"]:
        top = max(can["by_repeats"], key=lambda r: r["repeats"])
        ratio = top["mean_exposure"] / max(top["max_possible"], 1e-9)
        rows.append(
            {
                "measure": f"Canary exposure at {top['repeats']} repeats (bits)",
                "value": top["mean_exposure"],
                "ci": None,
                "reading": f"of at most {top['max_possible']:.1f} bits (random guessing ≈ 1.4)",
                "level": "bad" if ratio > 0.5 else "warn" if top["mean_exposure"] > 4 else "ok",
            }
        )
    return rows


def _dp_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The verdict's rows on the model's DP guarantee: the claim, and the membership attacks
    against the TPR it allows."""
    dp = (data.get("model") or {}).get("dp")
    if not dp:
        return [
            {
                "measure": "Differential privacy (ε per patient)",
                "value": None,
                "ci": None,
                "reading": "not trained with DP-SGD: nothing bounds what the model reveals "
                "about a patient's presence in the training data",
                "level": "info",
            }
        ]
    eps, delta = dp.get("epsilon"), dp.get("delta")
    if eps is None:
        return [
            {
                "measure": "Differential privacy (ε per patient)",
                "value": None,
                "ci": None,
                "reading": f"DP-SGD without a patient's ε: {dp.get('patient_epsilon_by')}",
                "level": "warn",
            }
        ]
    rows = [
        {
            "measure": "Differential privacy: ε per patient (DP-SGD)",
            "value": eps,
            "ci": None,
            "reading": f"at δ = {delta:.2g} over {dp.get('patients')} patients, by "
            f"{dp.get('patient_epsilon_by')} ({dp.get('accountant')})",
            "level": "info",
        }
    ]
    checks = [
        (name, c)
        for name, r in data["membership"]["patient"].items()
        for c in r.get("dp_check") or ()
    ]
    if checks:
        name, worst = max(checks, key=lambda nc: nc[1]["tpr_ci"][0] - nc[1]["tpr_bound"])
        over = [nc for nc in checks if nc[1]["exceeds"]]
        rows.append(
            {
                "measure": "Patient membership attacks vs the TPR (ε, δ) allows",
                "value": worst["tpr"],
                "ci": worst["tpr_ci"],
                "reading": (
                    f"{len(over)} attack(s) above the cap beyond sampling error: the claimed "
                    "guarantee does not hold"
                    if over
                    else "no attack above the cap beyond sampling error (closest: "
                    f"{name} at FPR {worst['fpr']:.2f}, TPR {worst['tpr']:.3f} against a cap "
                    f"of {worst['tpr_bound']:.3f})"
                ),
                "level": "bad" if over else "ok",
            }
        )
    return rows


def _one_run_row(data: dict[str, Any]) -> dict[str, Any]:
    """The verdict's row on the empirical lower bound on ε (one training run)."""
    one = (data.get("canaries") or {}).get("one_run") or {}
    measure = "Empirical lower bound on ε per patient (one run, 95%)"
    lower = one.get("epsilon_lower")
    if lower is None:
        why = one.get("why") or (
            "needs canary patients planted by a coin (`phisieve canaries --new-patients "
            "--coin`) in the training data, passed as --canaries"
        )
        return {"measure": measure, "value": None, "ci": None, "reading": why, "level": "info"}
    dp = (data.get("model") or {}).get("dp") or {}
    eps = dp.get("epsilon")
    best = one["best"]
    seen = (
        f"{best['correct']} of {best['guesses']} guesses right on {one['canaries']} canary "
        f"patients, at δ = {one['delta']:.2g}"
    )
    if eps is not None:
        ok = lower <= eps
        reading = (
            f"{seen}; at most the accountant's ε = {eps:.3g}, as it must be"
            if ok
            else f"{seen}; above the accountant's ε = {eps:.3g}: the guarantee is contradicted"
        )
        level = "ok" if ok else "bad"
    elif lower > 0:
        reading = f"{seen}: the training is not ε-DP for any ε below this"
        level = "warn"
    else:
        reading = f"{seen}: no leak of canary patients detected"
        level = "ok"
    return {"measure": measure, "value": lower, "ci": None, "reading": reading, "level": level}


def _notes(objective: str | None) -> list[str]:
    notes = [
        "Identifier prediction and the memorisation gain measure whether the model learnt "
        "patients' identifiers; membership inference measures whether a patient's notes were "
        "in the training data at all. They are different risks.",
        "Privacy-preserving objectives (ppmlm, ppclm) withhold identifiers from the loss: they "
        "protect identifiers, not membership. The model still trains on most of each patient's "
        "text, so patient-level membership may remain detectable.",
        "Exact recovery is a blunt instrument: a small model may recover no identifier while "
        "making members' identifiers measurably more likely; read the graded measures.",
    ]
    if objective in ("mlm", "clm"):
        notes.append(f"This model was trained with {objective}: nothing was protected.")
    return notes


def measure(
    model: str | Path,
    members: str | Path,
    non_members: str | Path,
    *,
    reference_model: str | Path | None = None,
    canaries: str | Path | None = None,
    docs: str | Path | None = None,
    spans: str | Path | None = None,
    tokenizer: str | Path | None = None,
    options: AuditOptions,
    ctx: Work | None = None,
) -> tuple[dict[str, Any], dict[str, float]]:
    """The audit's measures (the ``audit`` stage's, :class:`~phisieve.audit.stage.AuditStage`,
    whose inputs these are): the content of ``audit.json``, and the seconds each step
    took; ``ctx`` draws the progress (:class:`~phisieve.pipeline.work.Work`)."""
    o = options
    device, batch_size, seed, label = o.device, o.batch_size, o.seed, o.label
    max_identifiers = o.max_identifiers or None
    utility_words, mlm_rounds, n_boot = o.utility_words, o.mlm_rounds, o.n_boot
    generation_prompts, name_slots, name_candidates = (
        o.generation_prompts,
        o.name_slots,
        o.name_candidates,
    )
    canary_samples, show_identifiers = o.canary_samples, o.show_identifiers
    require("torch")
    model, members, non_members = Path(model), Path(members), Path(non_members)
    for p in (members, non_members):
        check_dataset(p)
    enc_m, enc_n = read_encoding(members), read_encoding(non_members)
    for k in ("tokenizer", "vocab_size", "max_len"):
        if enc_m.get(k) != enc_n.get(k):
            raise ConfigError(f"members and non-members were encoded with different {k}")
    causal = _model_kind(model)
    tok = _tokenizer(tokenizer, model, enc_m)
    info = _model_info(model, causal, label)
    ref_info = None
    if reference_model is not None:
        reference_model = Path(reference_model)
        if _model_kind(reference_model) != causal:
            raise ConfigError("the reference model must be of the same kind as the model")
        ref_info = _model_info(reference_model, causal, None)
    tm, tn = _read(members), _read(non_members)
    member_patients = set(pc.unique(tm.column("patient_id")).to_pylist())
    canary_patients = _canary_patients(canaries)
    if canary_patients:  # canary patients are the one-run audit's, not members or not
        tm, tn = _without(tm, canary_patients), _without(tn, canary_patients)
    sm, sn = Sequences.of(tm), Sequences.of(tn)
    if not len(sm) or not len(sn):
        raise InputError("no sequences", path=members if not len(sm) else non_members)
    shared = set(sm.patients.tolist()) & set(sn.patients.tolist())
    if shared:
        raise ConfigError(
            f"{len(shared)} patients are both members and non-members: split by patient "
            "(`phisieve split --by patient`)"
        )
    from ..training.loop import _device

    dev = _device(device)
    mask_id, pad_id = enc_m.get("mask_token_id"), int(enc_m.get("pad_token_id") or 0)
    scorer = Scorer(_load(model, causal), causal=causal, mask_id=mask_id, pad_id=pad_id,
                    device=dev, batch_size=batch_size)  # fmt: skip
    ref = None
    if reference_model is not None:
        ref = Scorer(_load(reference_model, causal), causal=causal, mask_id=mask_id,
                     pad_id=pad_id, device=dev, batch_size=batch_size)  # fmt: skip
    config = {
        "members": str(members.absolute()),
        "non_members": str(non_members.absolute()),
        "reference_model": None if reference_model is None else str(reference_model),
        "canaries": None if canaries is None else str(canaries),
        "docs": None if docs is None else str(docs),
        "spans": None if spans is None else str(spans),
        "device": str(dev),
        "batch_size": batch_size,
        "seed": seed,
        "max_identifiers": max_identifiers,
        "utility_words": utility_words,
        "mlm_rounds": mlm_rounds,
        "n_boot": n_boot,
        "generation_prompts": generation_prompts,
        "name_slots": name_slots,
        "name_candidates": name_candidates,
        "canary_samples": canary_samples,
        "min_k": MIN_K,
        "show_identifiers": show_identifiers,
        "patient_score": "mean of the patient's sequence scores",
        "pl_threshold": "mean member score (Yeom et al.)",
    }
    steps = 6
    timings: dict[str, float] = {}
    clock = [time.perf_counter()]

    def lap(name: str) -> None:
        now = time.perf_counter()
        timings[name] = round(now - clock[0], 3)
        clock[0] = now
        advance(1)

    with work(ctx).bar("audit", steps, "steps") as advance:
        # 1. Membership scores per sequence.
        seq_m = _sequence_scores(scorer, ref, sm, tok, seed, mlm_rounds)
        seq_n = _sequence_scores(scorer, ref, sn, tok, seed, mlm_rounds)
        lap("membership_scores")
        # 2. Identifier words, whole word masked, on both sides (model and reference).
        sides = {}
        totals: dict[str, int] = {}
        words_of = {"members": word_occurrences(sm), "non_members": word_occurrences(sn)}
        for name, seqs in (("members", sm), ("non_members", sn)):
            occ, texts, totals[name] = _identifier_side(
                seqs, words_of[name], tok, max_identifiers, seed, name
            )
            sc = scorer.word_scores(seqs, occ)
            rsc = ref.word_scores(seqs, occ) if ref is not None else None
            alpha = np.array([_is_alpha(t) for t in texts], dtype=bool)
            sides[name] = _Side(seqs, occ, alpha, texts, sc, rsc)
        lap("identifiers")
        # 3. Utility: non-identifier words of non-members.
        plain = [o for o in words_of["non_members"] if not (o.direct or o.indirect)]
        plain = _sample_words(sn, plain, utility_words, seed, "utility")
        usc = scorer.word_scores(sn, plain)
        ok = usc["scored"]
        perplexity = float(np.exp(seq_n["_nll_sum"].sum() / max(1.0, seq_n["_tokens"].sum())))
        utility = {
            "words": int(ok.sum()),
            "top1": float(usc["top1"][ok].mean()) if ok.any() else None,
            "top5": float(usc["top5"][ok].mean()) if ok.any() else None,
            "perplexity": perplexity,
            "perplexity_kind": "causal" if causal else "pseudo (masked tokens)",
        }
        lap("utility")
        identifiers: dict[str, Any] = {"utility": utility}
        for name, side in sides.items():
            d = np.array([o.direct for o in side.occ], dtype=bool)
            i = np.array([o.indirect for o in side.occ], dtype=bool)
            all_ = np.ones(len(side.occ), dtype=bool)
            identifiers[name] = {
                "overall": _group_stats(side.scores, all_),
                "direct": _group_stats(side.scores, d),
                "indirect": _group_stats(side.scores, i),
                "alpha": _group_stats(side.scores, side.is_alpha),
                "numeric": _group_stats(side.scores, ~side.is_alpha),
            }
        identifiers["occurrences"] = {
            name: {"all": totals[name], "scored": len(side.occ)} for name, side in sides.items()
        }
        identifiers["top_recovered"] = _top_recovered(sides["members"], show_identifiers)
        memorisation = _memorisation(sides, n_boot, seed)
        membership = _membership(
            {
                "members": {k: v for k, v in seq_m.items() if not k.startswith("_")},
                "non_members": {k: v for k, v in seq_n.items() if not k.startswith("_")},
            },
            {"members": sm.patients, "non_members": sn.patients},
            n_boot,
            seed,
            info["dp"],
        )
        id_mia = _identifier_mia(sides, sm, sn)
        lap("statistics")
        generation = None
        if causal and generation_prompts > 0:
            words: dict[str, set[str]] = {}
            flagged: set[str] = set()
            unflagged: set[str] = set()
            for side in sides.values():
                for o, t in zip(side.occ, side.texts, strict=True):
                    w = _norm(t)
                    if w:
                        words.setdefault(str(side.seqs.patients[o.row]), set()).add(w)
                        flagged.add(w)
            for seqs, name in ((sm, "members"), (sn, "non_members")):
                for o in words_of[name]:
                    if not (o.direct or o.indirect):
                        unflagged.add(_norm(_word_text(tok, seqs.ids[o.row][o.positions])))
            # Identifier words: flagged in every one of their occurrences in the audited data.
            only = flagged - unflagged
            words = {p: ws & only for p, ws in words.items()}
            generation = _generation(scorer, tok, sm, words, generation_prompts, seed)
        lap("generation")
        inversion: dict[str, Any] | None = None
        if docs is not None and not causal:
            inversion = _inversion(
                scorer, tok, Path(docs), None if spans is None else Path(spans),
                set(sm.patients.tolist()), int(enc_m.get("max_len") or 128), name_slots,
                name_candidates, seed,
            )  # fmt: skip
        elif docs is not None:
            inversion = {"slots": 0, "why": "model inversion is defined here for masked LMs"}
        canary_result = None
        if canaries is not None:
            canary_result = _canaries(
                scorer, tok, Path(canaries), canary_samples, seed, ref=ref, dp=info["dp"],
                members=member_patients,
            )  # fmt: skip
        lap("inversion_and_canaries")
    data: dict[str, Any] = {
        "schema": SCHEMA,
        "created": _created(),
        "phisieve_version": _versions().get("phisieve"),
        "versions": _versions(),
        "config": config,
        "model": info,
        "reference_model": ref_info,
        "data": {
            "members": _data_info(members, sm),
            "non_members": _data_info(non_members, sn),
        },
        "identifiers": identifiers,
        "memorisation": memorisation,
        "membership": membership,
        "identifier_mia": id_mia,
        "generation": generation,
        "inversion": inversion,
        "canaries": canary_result,
    }
    data["verdict"] = _verdict(data, info["objective"])
    data["notes"] = _notes(info["objective"])
    return _jsonable(data), timings


def _canary_patients(canaries: str | Path | None) -> set[str]:
    """The ids of the canary patients (``--new-patients``) of a canaries output."""
    if canaries is None:
        return set()
    from ..phi.canaries import read_canaries

    t = read_canaries(canaries)
    new = t.column("new_patient").to_pylist()
    return {p for p, n in zip(t.column("patient_id").to_pylist(), new, strict=True) if n}


def _without(table: pa.Table, patients: set[str]) -> pa.Table:
    keep = pc.invert(pc.is_in(table.column("patient_id"), value_set=pa.array(sorted(patients))))
    return table.filter(keep)


def _created() -> str:
    """When the audit ran (UTC, to the second), or the time ``SOURCE_DATE_EPOCH`` sets: the
    reproducible-builds convention, so that a report can be rebuilt byte for byte."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = (
        _dt.datetime.fromtimestamp(int(epoch), _dt.timezone.utc)
        if epoch and epoch.isdigit()
        else _dt.datetime.now(_dt.timezone.utc)
    )
    return when.isoformat(timespec="seconds")


def _data_info(path: Path, seqs: Sequences) -> dict[str, Any]:
    ident = dataset_identity(path)
    return {
        "path": ident["path"],
        "fingerprint": ident.get("fingerprint"),
        "patients": len(set(seqs.patients.tolist())),
        "sequences": len(seqs),
    }


def _memorisation(sides: dict[str, _Side], n_boot: int, seed: int) -> dict[str, Any]:
    out = {}
    m, n = sides["members"], sides["non_members"]
    for part in ("all", "alpha", "numeric"):

        def select(side: _Side, part: str = part) -> np.ndarray:
            ok = side.scores["scored"].copy()
            if part == "alpha":
                ok &= side.is_alpha
            elif part == "numeric":
                ok &= ~side.is_alpha
            return ok

        km, kn = select(m), select(n)
        pm, pn = m.patients()[km], n.patients()[kn]
        entry: dict[str, Any] = {
            "member_patients": len(set(pm.tolist())),
            "non_member_patients": len(set(pn.tolist())),
            "gain": None,
            "gain_ci": None,
            "gap": None,
            "gap_ci": None,
            "why": None,
        }
        if not km.any() or not kn.any():
            entry["why"] = "no identifier occurrences on one side"
            out[part] = entry
            continue
        # Gap: positive when members' identifiers are easier (lower NLL) for the model.
        gap, gap_ci = metrics.bootstrap_mean_difference(
            -m.scores["nll"][km], pm, -n.scores["nll"][kn], pn, n_boot=n_boot, seed=seed
        )
        entry["gap"], entry["gap_ci"] = gap, gap_ci
        if m.ref is not None and n.ref is not None:
            gain, gain_ci = metrics.bootstrap_mean_difference(
                m.ref["nll"][km] - m.scores["nll"][km],
                pm,
                n.ref["nll"][kn] - n.scores["nll"][kn],
                pn,
                n_boot=n_boot,
                seed=seed,
            )
            entry["gain"], entry["gain_ci"] = gain, gain_ci
        else:
            entry["why"] = "needs --reference-model"
        out[part] = entry
    return out


def _identifier_mia(sides: dict[str, _Side], sm: Sequences, sn: Sequences) -> dict[str, Any]:
    patients = sorted(set(sm.patients.tolist()) | set(sn.patients.tolist()))
    truth = np.array([p in set(sm.patients.tolist()) for p in patients])
    flagged: set[str] = set()
    for side in sides.values():
        for o, hit in zip(side.occ, side.scores["top1"], strict=True):
            if o.indirect and hit:
                flagged.add(str(side.seqs.patients[o.row]))
    pred = np.array([p in flagged for p in patients])
    return metrics.precision_recall_f1(pred, truth)


def _top_recovered(side: _Side, show: bool, limit: int = 20) -> list[dict[str, Any]]:
    groups: dict[str, dict[str, Any]] = {}
    for o, t, a, hit in zip(side.occ, side.texts, side.is_alpha, side.scores["top1"], strict=True):
        if not hit:
            continue
        g = groups.setdefault(
            _norm(t) or t,
            {
                "category": f"{'direct' if o.direct else 'indirect'}/{'alpha' if a else 'numeric'}",
                "length": len(t),
                "occurrences": 0,
                "patients": set(),
                "text": t,
            },
        )
        g["occurrences"] += 1
        g["patients"].add(str(side.seqs.patients[o.row]))
    rows = sorted(groups.values(), key=lambda g: (-len(g["patients"]), -g["occurrences"]))
    out = []
    for g in rows[:limit]:
        row = {**g, "patients": len(g["patients"])}
        if not show:
            row.pop("text")
        out.append(row)
    return out


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.bool_,)):
        return bool(x)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, (np.floating, float)):
        f = float(x)
        return f if math.isfinite(f) else None
    return x


def render_files(data: dict[str, Any], folder: Path) -> None:
    """``audit.json`` and ``index.html`` of ``data`` into ``folder``."""
    from .report import render_report

    (folder / "audit.json").write_text(json.dumps(data, indent=2, allow_nan=False) + "\n")
    render_report(data, folder)


def read_audit(path: str | Path) -> dict[str, Any]:
    """The ``audit.json`` of a report folder (or the file itself)."""
    p = Path(path)
    f = p / "audit.json" if p.is_dir() else p
    if not f.is_file():
        raise InputError("no audit.json (not a `phisieve audit` report)", path=p)
    data = json.loads(f.read_text(encoding="utf-8"))
    if data.get("schema") != SCHEMA:
        raise InputError(f"not a {SCHEMA} report", path=f)
    return data
