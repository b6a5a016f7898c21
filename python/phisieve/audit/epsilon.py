"""A differential-privacy guarantee, checked against what the audit measures (DESIGN.md §9).

Two checks, for a model that claims (ε, δ) per patient (``train.json`` of ``phisieve train
--dp``):

* :func:`tpr_bound`: whatever the attack, (ε, δ)-DP caps its true-positive rate at each
  false-positive rate (Kairouz et al. 2015, the hypothesis-testing view of DP):
  ``TPR ≤ min(1, e^ε·FPR + δ, 1 − e^(−ε)·(1 − δ − FPR))``. The audit prints this cap beside
  each membership attack's measured TPR.
* :func:`one_run_audit`: an empirical **lower** bound on ε from one training run (Steinke,
  Nasr & Jagielski 2023, "Privacy auditing with one (1) training run"). ``m`` canaries (here
  canary patients) are each planted with probability 1/2 by a keyed coin; the auditor ranks
  them by the model's score, guesses "planted" for the ``k`` highest and "left out" for the
  ``k`` lowest, and counts its correct guesses ``v`` out of ``r = 2k``. If the training
  were (ε, δ)-DP, ``P[v' ≥ v] ≤ P[Binomial(r, e^ε/(1+e^ε)) ≥ v] + 2mδ·max_i P[v−i ≤
  Binomial < v]/i`` (their Theorem 5.2); the largest ε this rejects at confidence 1 − β is
  the bound. Several ``k`` are tried, each at β / (number of k) (Bonferroni), so the bound
  holds at 1 − β whatever ``k`` turns out best. It holds for any model, DP or not.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ConfigError

DP_FPRS = (0.01, 0.05, 0.1, 0.25, 0.5)
"""False-positive rates at which a DP model's cap is compared with the measured TPR."""
GUESS_SHARES = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5)
"""Shares of the canaries guessed each way (``k = share × m``) that :func:`one_run_audit`
tries."""


def tpr_bound(epsilon: float, delta: float, fpr: float) -> float:
    """The largest true-positive rate an attack can reach at false-positive rate ``fpr``
    against an (ε, δ)-DP mechanism: ``min(1, e^ε·FPR + δ, 1 − e^(−ε)·(1 − δ − FPR))``."""
    if not 0 <= fpr <= 1:
        raise ConfigError(f"a false-positive rate is in [0, 1], not {fpr}")
    if not math.isfinite(epsilon):
        return 1.0
    a = math.exp(epsilon) * fpr + delta
    b = 1 - math.exp(-epsilon) * (1 - delta - fpr)
    return float(min(1.0, a, b))


def clopper_pearson(successes: int, trials: int, confidence: float = 0.95) -> list[float]:
    """The exact (Clopper–Pearson) interval of a binomial proportion."""
    from scipy.stats import beta

    if trials <= 0:
        return [0.0, 1.0]
    a = 1 - confidence
    lo = 0.0 if successes == 0 else float(beta.ppf(a / 2, successes, trials - successes + 1))
    hi = (
        1.0
        if successes == trials
        else float(beta.ppf(1 - a / 2, successes + 1, trials - successes))
    )
    return [lo, hi]


def dp_check(
    members: np.ndarray,
    non_members: np.ndarray,
    epsilon: float | None,
    delta: float | None,
    fprs: tuple[float, ...] = DP_FPRS,
) -> list[dict[str, Any]]:
    """For each false-positive rate ``f`` the non-members can measure (at least one false
    positive allowed): the attack's best operating point within it (the most members
    flagged with at most ``f`` of the non-members, then the fewest non-members), its TPR
    and FPR with exact (Clopper–Pearson) 95% intervals, and the TPR cap (ε, δ) puts at that
    FPR (``None`` without a claim). ``exceeds``: even the interval's lowest TPR is above the
    cap at the interval's highest FPR, so the attack contradicts the claimed guarantee
    whatever the sampling error of either rate."""
    pos = np.sort(np.asarray(members, dtype=np.float64))
    neg = np.sort(np.asarray(non_members, dtype=np.float64))
    out: list[dict[str, Any]] = []
    if not pos.size or not neg.size:
        return out
    thresholds = np.unique(np.concatenate([pos, neg, [np.inf]]))
    # Flagged when score >= t: counts by threshold.
    fp = neg.size - np.searchsorted(neg, thresholds, side="left")
    tp = pos.size - np.searchsorted(pos, thresholds, side="left")
    claim = epsilon is not None and delta is not None
    for f in fprs:
        if neg.size * f < 1 - 1e-9:
            continue
        ok = np.flatnonzero(fp <= f * neg.size + 1e-9)
        i = ok[np.lexsort((fp[ok], -tp[ok]))[0]]
        tpr, fpr = tp[i] / pos.size, fp[i] / neg.size
        tpr_ci = clopper_pearson(int(tp[i]), int(pos.size))
        fpr_ci = clopper_pearson(int(fp[i]), int(neg.size))
        cap = tpr_bound(epsilon, delta, float(fpr)) if claim else None  # type: ignore[arg-type]
        out.append(
            {
                "fpr_at_most": f,
                "fpr": float(fpr),
                "fpr_ci": fpr_ci,
                "tpr": float(tpr),
                "tpr_ci": tpr_ci,
                "tpr_bound": cap,
                "exceeds": claim and tpr_ci[0] > tpr_bound(epsilon, delta, fpr_ci[1]),  # type: ignore[arg-type]
                "members": int(pos.size),
                "non_members": int(neg.size),
            }
        )
    return out


def _binom_tail(v: int, r: int, p: float) -> float:
    """``P[Binomial(r, p) >= v]``."""
    from scipy.stats import binom

    return float(binom.sf(v - 1, r, p))


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    """The probability, under (ε, δ)-DP, of at least ``v`` correct guesses out of ``r``
    when ``m`` canaries are each planted by a fair coin (Steinke, Nasr & Jagielski 2023,
    Theorem 5.2; δ = 0 is their Theorem 3.1)."""
    from scipy.stats import binom

    if not 0 <= v <= r <= m:
        raise ConfigError(f"need 0 <= correct ({v}) <= guesses ({r}) <= canaries ({m})")
    q = 1.0 / (1.0 + math.exp(-epsilon)) if math.isfinite(epsilon) else 1.0
    tail = _binom_tail(v, r, q)
    if delta <= 0 or v == 0:
        return min(1.0, tail)
    pmf = binom.pmf(np.arange(v - 1, -1, -1), r, q)  # P[B = v-1], P[B = v-2], ...
    between = np.cumsum(pmf)  # P[v-i <= B < v] for i = 1..v
    alpha = float(np.max(between / np.arange(1, v + 1)))
    return min(1.0, tail + 2 * m * delta * alpha)


def one_run_lower_bound(m: int, r: int, v: int, delta: float = 0.0, beta: float = 0.05) -> float:
    """The largest ε whose p-value (:func:`one_run_p_value`) for ``v`` correct guesses of
    ``r`` is below ``beta``: the training is not (ε', δ)-DP for any ε' below it, at
    confidence 1 − β. 0 when even ε = 0 is not rejected."""
    if one_run_p_value(m, r, v, 0.0, delta) >= beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while one_run_p_value(m, r, v, hi, delta) < beta:
        lo, hi = hi, 2 * hi
        if hi > 1e3:  # numerically saturated: what is certain so far
            return lo
    for _ in range(60):
        mid = (lo + hi) / 2
        if one_run_p_value(m, r, v, mid, delta) < beta:
            lo = mid
        else:
            hi = mid
    return lo


def one_run_audit(
    scores: np.ndarray,
    included: np.ndarray,
    *,
    delta: float = 0.0,
    confidence: float = 0.95,
    shares: tuple[float, ...] = GUESS_SHARES,
    tiebreak: np.ndarray | None = None,
) -> dict[str, Any]:
    """The one-run lower bound on ε from canaries' scores (higher = more likely planted)
    and whether each was planted (a fair keyed coin).

    For each share ``s``: ``k = max(1, round(s·m))``, guesses "planted" for the ``k``
    highest scores and "left out" for the ``k`` lowest (ties in the order of ``tiebreak``,
    then position), ``v`` correct of ``r = 2k``, and the bound at β = (1 − confidence) /
    len(shares). Returns every try and the best bound.
    """
    s = np.asarray(scores, dtype=np.float64)
    inc = np.asarray(included, dtype=bool)
    m = int(s.size)
    if m != inc.size:
        raise ConfigError("one score per canary, and whether it was planted")
    if m < 2 or not np.isfinite(s).all():
        raise ConfigError("the one-run audit needs at least two canaries with finite scores")
    beta = (1 - confidence) / len(shares)
    tie = np.arange(m) if tiebreak is None else np.asarray(tiebreak)
    order = np.lexsort((np.arange(m), tie, -s))  # highest score first
    tries = []
    for share in shares:
        k = min(m // 2, max(1, round(share * m)))
        top, bottom = order[:k], order[m - k :]
        v = int(inc[top].sum() + (~inc[bottom]).sum())
        r = 2 * k
        tries.append(
            {
                "share": share,
                "guesses": r,
                "correct": v,
                "epsilon": one_run_lower_bound(m, r, v, delta, beta),
            }
        )
    best = max(tries, key=lambda t: t["epsilon"])
    return {
        "canaries": m,
        "planted": int(inc.sum()),
        "delta": delta,
        "confidence": confidence,
        "beta_per_try": beta,
        "tries": tries,
        "epsilon_lower": best["epsilon"],
        "best": best,
    }
