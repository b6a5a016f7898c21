"""A complete, realistic ``audit.json`` dict (schema ``phisieve-audit/1``) for the tests.

Every field of the schema is filled with plausible numbers drawn from a seeded
``numpy.random.RandomState``, so a given ``(seed, label, causal)`` always gives the same dict.
A few values are null with their ``why`` (TPR at 0.1% FPR on 110 non-member patients, the
memorisation gain on numbers). Models whose label starts with ``pp`` (PPMLM, PPCLM) withhold
identifiers but not membership, like the real objectives.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve

SCORES = ("loss", "reference", "zlib", "min_k", "min_k_pp")
FPRS = (0.01, 0.001)
#: Identifier words that only appear in ``top_recovered[*]["text"]`` (with show_identifiers).
RECOVERED_TEXTS = ("Quillfeather", "Zebulonsky", "Marisabel", "4471", "Pemberton-Vale")


def _r(x: float, digits: int = 4) -> float:
    return float(round(float(x), digits))


def _sha(*parts: object) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()


def _group(n: int, hits1: int, hits5: int, nll: float, rank: float) -> dict[str, Any]:
    top1 = hits1 / n
    return {
        "n": int(n),
        "top1": _r(top1),
        "top5": _r(hits5 / n),
        "privacy": _r(1 - top1),
        "mean_nll": _r(nll, 3),
        "median_rank": float(rank),
    }


def _identifiers(rng: np.random.RandomState, member: bool, pp: bool) -> dict[str, Any]:
    """A 2 × 2 table (direct/indirect × alpha/numeric) whose margins are the five groups."""
    if member:
        base = {"direct": 0.03, "indirect": 0.11} if pp else {"direct": 0.19, "indirect": 0.27}
        shift = 0.0 if pp else 0.35
    else:
        base = {"direct": 0.025, "indirect": 0.10}
        shift = 0.0
    cells: dict[tuple[str, str], tuple[int, int, int, float]] = {}
    for scope in ("direct", "indirect"):
        for kind in ("alpha", "numeric"):
            n = int(rng.randint(300, 900) if scope == "indirect" else rng.randint(150, 400))
            p1 = base[scope] * (1.3 if kind == "alpha" else 0.6) * rng.uniform(0.9, 1.1)
            h1 = int(np.rint(n * p1))
            h5 = min(n, int(np.rint(h1 * rng.uniform(1.8, 2.4))))
            nll = rng.uniform(4.5, 6.5) - shift + (0.8 if kind == "numeric" else 0.0)
            cells[scope, kind] = (n, h1, h5, nll)

    def margin(keys: list[tuple[str, str]]) -> dict[str, Any]:
        n = sum(cells[k][0] for k in keys)
        h1 = sum(cells[k][1] for k in keys)
        h5 = sum(cells[k][2] for k in keys)
        nll = sum(cells[k][0] * cells[k][3] for k in keys) / n
        rank = float(int(np.exp(nll * 0.9)) + int(rng.randint(0, 5)))
        return _group(n, h1, h5, nll, rank)

    everything = list(cells)
    return {
        "overall": margin(everything),
        "direct": margin([k for k in everything if k[0] == "direct"]),
        "indirect": margin([k for k in everything if k[0] == "indirect"]),
        "alpha": margin([k for k in everything if k[1] == "alpha"]),
        "numeric": margin([k for k in everything if k[1] == "numeric"]),
    }


def _roc(members: np.ndarray, non_members: np.ndarray, points: int = 200) -> dict[str, list]:
    y = np.r_[np.ones(len(members)), np.zeros(len(non_members))]
    fpr, tpr, _ = roc_curve(y, np.r_[members, non_members])
    if len(fpr) > points:
        keep = np.unique(np.round(np.linspace(0, len(fpr) - 1, points)).astype(int))
        fpr, tpr = fpr[keep], tpr[keep]
    return {"fpr": [_r(v, 5) for v in fpr], "tpr": [_r(v, 5) for v in tpr]}


def _auc(members: np.ndarray, non_members: np.ndarray) -> float:
    """Mann-Whitney AUC (the scores are continuous: no ties)."""
    ranks = np.argsort(np.argsort(np.r_[members, non_members])) + 1
    n = len(members)
    return float((ranks[:n].sum() - n * (n + 1) / 2) / (n * len(non_members)))


def _attack(
    rng: np.random.RandomState, n_mem: int, n_non: int, effect: float, patient: bool
) -> dict[str, Any]:
    loc = rng.uniform(-3.0, -1.0)
    mem = rng.normal(loc + effect, 1.0, n_mem)
    non = rng.normal(loc, 1.0, n_non)
    y = np.r_[np.ones(n_mem), np.zeros(n_non)]
    scores = np.r_[mem, non]
    auc = float(roc_auc_score(y, scores))
    boot = []
    for _ in range(200):
        i = rng.randint(0, n_mem, n_mem)
        j = rng.randint(0, n_non, n_non)
        boot.append(_auc(mem[i], non[j]))
    rates = []
    for target in FPRS:
        estimable = n_non * target >= 1
        entry: dict[str, Any] = {"fpr": target, "negatives": int(n_non), "estimable": estimable}
        if estimable:
            thr = np.sort(non)[::-1][int(np.floor(n_non * target))]
            entry["tpr"] = _r(np.mean(mem > thr))
        else:
            entry["tpr"] = None
            entry["why"] = (
                f"{n_non} non-members: an FPR of {target:g} is below one false positive "
                f"(needs at least {round(1 / target)})"
            )
        rates.append(entry)
    thr = float(np.mean(mem))
    tpr, fpr = float(np.mean(mem >= thr)), float(np.mean(non >= thr))
    out: dict[str, Any] = {
        "auc": _r(auc),
        "auc_ci": [_r(np.percentile(boot, 2.5)), _r(np.percentile(boot, 97.5))],
        "members": int(n_mem),
        "non_members": int(n_non),
        "tpr_at_fpr": rates,
        "pl": {"threshold": _r(thr), "tpr": _r(tpr), "fpr": _r(fpr), "pl": _r(tpr - fpr)},
        "roc": _roc(mem, non),
    }
    if patient:
        out["scores"] = {
            "members": [_r(v) for v in mem],
            "non_members": [_r(v) for v in non],
        }
    return out


def _memorisation(
    rng: np.random.RandomState, pp: bool, m_pat: int, n_pat: int
) -> dict[str, dict[str, Any]]:
    out = {}
    for name, size in (("all", 0.55), ("alpha", 0.7), ("numeric", 0.2)):
        effect = size * (0.15 if pp else 1.0) * rng.uniform(0.85, 1.15)
        gap = effect * rng.uniform(1.1, 1.4)
        half = rng.uniform(0.08, 0.2)
        entry: dict[str, Any] = {
            "gain": _r(effect, 3),
            "gain_ci": [_r(effect - half, 3), _r(effect + half, 3)],
            "gap": _r(gap, 3),
            "gap_ci": [_r(gap - 1.2 * half, 3), _r(gap + 1.2 * half, 3)],
            "member_patients": m_pat,
            "non_member_patients": n_pat,
            "why": None,
        }
        if name == "numeric":
            entry["gain"] = entry["gain_ci"] = None
            entry["non_member_patients"] = 7
            entry["why"] = "only 7 non-member patients have numeric identifiers (needs 10)"
        out[name] = entry
    return out


def _canaries(rng: np.random.RandomState, pp: bool) -> dict[str, Any]:
    kinds = (("name", 5000 * 20000), ("phone", 10**7), ("mrn", 10**6))
    canaries = []
    for repeats in (1, 4, 16):
        for i in range(4):
            kind, space = kinds[(i + repeats) % len(kinds)]
            top = np.log2(space)
            slope = 0.6 if pp else 3.2
            exposure = min(top, max(0.0, rng.normal(1.0 + slope * np.log2(repeats), 1.0)))
            rank = max(1.0, float(np.round(space / 2**exposure)))
            estimated = space > 10**6
            canaries.append(
                {
                    "id": f"canary-{kind}-{repeats:02d}-{i}",
                    "kind": kind,
                    "repeats": repeats,
                    "space": int(space),
                    "rank": rank,
                    "exposure": _r(np.log2(space) - np.log2(rank), 3),
                    "estimated": bool(estimated),
                    "sample": 20000 if estimated else int(space),
                }
            )
    by = []
    for repeats in (1, 4, 16):
        group = [c for c in canaries if c["repeats"] == repeats]
        exp = [c["exposure"] for c in group]
        by.append(
            {
                "repeats": repeats,
                "n": len(group),
                "mean_exposure": _r(np.mean(exp), 3),
                "max_exposure": _r(np.max(exp), 3),
                "max_possible": _r(max(np.log2(c["space"]) for c in group), 3),
            }
        )
    return {"canaries": canaries, "by_repeats": by}


def sample_audit(
    seed: int = 0, label: str = "mlm", causal: bool = False, show_identifiers: bool = False
) -> dict[str, Any]:
    """A full ``phisieve-audit/1`` dict, a pure function of its arguments.

    Parameters
    ----------
    seed
        Seed of the numbers.
    label
        The model's label; labels starting with ``pp`` get the numbers of a privacy-preserving
        objective (identifiers withheld, membership not hidden).
    causal
        A causal LM (``generation`` filled, ``inversion`` null) instead of a masked one.
    show_identifiers
        Give ``top_recovered`` entries their ``text`` (an audit run with --show-identifiers).
    """
    rng = np.random.RandomState(seed)
    pp = label.lower().startswith("pp")
    objective = ("pp" if pp else "") + ("clm" if causal else "mlm")
    m_pat, n_pat, m_seq, n_seq = 120, 110, 2400, 2200

    model = {
        "path": f"/models/{label}",
        "class": "GPT2LMHeadModel" if causal else "BertForMaskedLM",
        "kind": "causal" if causal else "masked",
        "fingerprint": _sha("model", label, seed),
        "objective": objective,
        "label": label,
    }
    reference = {
        "path": "/models/reference",
        "class": model["class"],
        "kind": model["kind"],
        "fingerprint": _sha("reference", causal),
        "objective": None,
        "label": "reference",
    }
    members = _identifiers(rng, True, pp)
    non_members = _identifiers(rng, False, pp)
    utility_top1 = rng.uniform(0.42, 0.5) - (0.03 if pp else 0.0)
    identifiers = {
        "members": members,
        "non_members": non_members,
        "utility": {
            "words": int(rng.randint(40000, 60000)),
            "top1": _r(utility_top1),
            "top5": _r(utility_top1 + rng.uniform(0.15, 0.2)),
            "perplexity": _r(rng.uniform(8, 12) + (1.5 if pp else 0.0), 2),
        },
        "top_recovered": [
            {
                "category": category,
                "length": len(text),
                "occurrences": int(rng.randint(2, 40)),
                "patients": int(rng.randint(1, 6)),
                **({"text": text} if show_identifiers else {}),
            }
            for category, text in zip(
                (
                    "direct/alpha",
                    "direct/alpha",
                    "indirect/alpha",
                    "direct/numeric",
                    "indirect/alpha",
                ),
                RECOVERED_TEXTS,
                strict=True,
            )
        ],
    }
    memorisation = _memorisation(rng, pp, m_pat, n_pat)
    membership: dict[str, dict[str, Any]] = {"sample": {}, "patient": {}}
    for name in SCORES:
        effect = {"loss": 0.25, "reference": 0.55, "zlib": 0.3, "min_k": 0.35, "min_k_pp": 0.45}
        e = effect[name] * (0.8 if pp else 1.0)
        membership["sample"][name] = _attack(rng, m_seq, n_seq, e, patient=False)
        membership["patient"][name] = _attack(rng, m_pat, n_pat, 2.2 * e, patient=True)
    tp = int(rng.randint(10, 25) if pp else rng.randint(50, 80))
    fp = int(rng.randint(8, 20))
    fn, tn = m_pat - tp, n_pat - fp
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    identifier_mia = {
        "precision": _r(precision),
        "recall": _r(recall),
        "f1": _r(2 * precision * recall / (precision + recall)),
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "tn": tn,
    }
    generation = (
        {
            "prompts": 200,
            "tokens": 200 * 64,
            "identifier_hits": int(rng.randint(20, 60)),
            "own_patient_hits": int(rng.randint(1, 10)),
            "distinct_identifiers": int(rng.randint(10, 20)),
        }
        if causal
        else None
    )
    inversion = None
    if not causal:
        lift = 0.1 if pp else 1.0
        baseline = {"top1": 0.0033, "top10": 0.02, "top100": 0.0867, "top1000": 0.2933}
        model_acc = {
            k: _r(min(1.0, v * (1 + lift * rng.uniform(1.5, 3.0)))) for k, v in baseline.items()
        }
        inversion = {
            "slots": 300,
            "in_candidates": 264,
            "candidates": {"first": 5000, "last": 20000},
            "model": model_acc,
            "baseline": baseline,
            "why": None,
        }
    canaries = _canaries(rng, pp)
    p_auc = membership["patient"]["loss"]
    p_tpr = p_auc["tpr_at_fpr"][0]["tpr"]
    gain = memorisation["alpha"]
    top16 = canaries["by_repeats"][-1]
    privacy = members["overall"]["privacy"]
    verdict = [
        {
            "measure": "Identifier privacy (members, all identifiers)",
            "value": privacy,
            "ci": None,
            "reading": f"{privacy:.0%} of members' identifiers are not the model's first guess",
            "level": "ok" if privacy >= 0.9 else "warn",
        },
        {
            "measure": "Memorisation gain, names and places (nats)",
            "value": gain["gain"],
            "ci": gain["gain_ci"],
            "reading": "members' names and places are easier for the model than non-members'"
            if gain["gain_ci"][0] > 0
            else "no sign that members' names and places were learnt",
            "level": "bad"
            if gain["gain_ci"][0] > 0.3
            else "warn"
            if gain["gain_ci"][0] > 0
            else "ok",
        },
        {
            "measure": "Memorisation gain, numbers (nats)",
            "value": None,
            "ci": None,
            "reading": "not estimable: too few non-member patients with numeric identifiers",
            "level": "info",
        },
        {
            "measure": "Patient membership inference AUC (loss)",
            "value": p_auc["auc"],
            "ci": p_auc["auc_ci"],
            "reading": "an attacker can tell whether a patient's notes were in the training data"
            if p_auc["auc_ci"][0] > 0.5
            else "no evidence that patients in the training data can be told apart",
            "level": "bad" if p_auc["auc_ci"][0] > 0.6 else "warn",
        },
        {
            "measure": "Patients found at 1% false positives (loss)",
            "value": p_tpr,
            "ci": None,
            "reading": f"{p_tpr:.0%} of member patients are flagged while 1% of others are",
            "level": "warn",
        },
        {
            "measure": "Canary exposure at 16 repetitions (bits)",
            "value": top16["mean_exposure"],
            "ci": None,
            "reading": f"of at most {top16['max_possible']:.1f} bits for a fully memorised secret",
            "level": "bad" if top16["mean_exposure"] > 10 else "ok",
        },
    ]
    notes = [
        "PPMLM and PPCLM withhold identifiers from the training objective; they do not hide "
        "which patients' notes were used: the membership inference section measures that.",
        f"TPR at 0.1% FPR needs at least 1000 non-member patients; with {n_pat} it is not "
        "estimable at patient level.",
        "Confidence intervals are 95% bootstrap intervals over patients (1000 resamples).",
    ]
    return {
        "schema": "phisieve-audit/1",
        "created": f"2025-06-{1 + seed % 28:02d}T10:15:00+00:00",
        "phisieve_version": "0.9.0",
        "versions": {
            "python": "3.11.2",
            "torch": "2.5.1",
            "transformers": "4.46.3",
            "numpy": "2.1.3",
            "scikit-learn": "1.9.1",
        },
        "config": {
            "model": model["path"],
            "reference_model": reference["path"],
            "members": "/data/split/members",
            "non_members": "/data/split/non_members",
            "canaries": "/data/canaries",
            "seed": seed,
            "bootstrap": 1000,
            "batch_size": 32,
            "max_len": 128,
            "min_k": 0.2,
            "generate": causal,
            "show_identifiers": show_identifiers,
            "device": "cpu",
        },
        "model": model,
        "reference_model": reference,
        "data": {
            "members": {
                "path": "/data/split/members",
                "fingerprint": _sha("members", seed),
                "patients": m_pat,
                "sequences": m_seq,
            },
            "non_members": {
                "path": "/data/split/non_members",
                "fingerprint": _sha("non_members", seed),
                "patients": n_pat,
                "sequences": n_seq,
            },
        },
        "verdict": verdict,
        "identifiers": identifiers,
        "memorisation": memorisation,
        "membership": membership,
        "identifier_mia": identifier_mia,
        "generation": generation,
        "inversion": inversion,
        "canaries": canaries,
        "notes": notes,
    }
