"""Numbers of the privacy audit: membership-inference curves, bootstrap intervals, exposure.

Pure functions of numpy arrays (numpy and scikit-learn only, no torch), so that every number
``phisieve audit`` reports can be recomputed from the scores it saves. Every random choice
(the bootstrap) is a pure function of the ``seed`` argument and the input.

Measures and where they come from:

* Loss-threshold membership inference, its threshold at the mean training loss and the
  membership advantage TPR − FPR (called "privacy leakage" here, as in Jagannatha et al.):
  S. Yeom, I. Giacomelli, M. Fredrikson, S. Jha, "Privacy Risk in Machine Learning: Analyzing
  the Connection to Overfitting", IEEE CSF 2018.
* Sample- and patient-level (group) attacks on clinical language models: A. Jagannatha,
  B. P. S. Rawat, H. Yu, "Membership Inference Attack Susceptibility of Clinical Language
  Models", arXiv:2104.08305, 2021.
* True-positive rate at a low false-positive rate, rather than AUC alone: N. Carlini, S. Chien,
  M. Nasr, S. Song, A. Terzis, F. Tramèr, "Membership Inference Attacks From First
  Principles", IEEE S&P 2022.
* Exposure of inserted canaries: N. Carlini, C. Liu, Ú. Erlingsson, J. Kos, D. Song, "The
  Secret Sharer: Evaluating and Testing Unintended Memorization in Neural Networks", USENIX
  Security 2019.
* The zlib-normalised score: N. Carlini, F. Tramèr, E. Wallace, M. Jagielski, A. Herbert-Voss,
  K. Lee, A. Roberts, T. Brown, D. Song, Ú. Erlingsson, A. Oprea, C. Raffel, "Extracting
  Training Data from Large Language Models", USENIX Security 2021.
* Min-K% Prob: W. Shi, A. Ajith, M. Xia, Y. Huang, D. Liu, T. Blevins, D. Chen,
  L. Zettlemoyer, "Detecting Pretraining Data from Large Language Models", ICLR 2024.
* Min-K%++: J. Zhang, J. Sun, E. Yeats, Y. Ouyang, M. Kuo, J. Zhang, H. F. Yang, H. Li,
  "Min-K%++: Improved Baseline for Detecting Pre-Training Data from Large Language Models",
  arXiv:2404.02936, 2024 (ICLR 2025).
* Percentile bootstrap (B. Efron, R. Tibshirani, "An Introduction to the Bootstrap", 1993),
  resampling whole patients (clusters) rather than single sequences because sequences of one
  patient are not independent (C. A. Field, A. H. Welsh, "Bootstrapping clustered data",
  JRSS B 69(3), 2007).

Conventions: a membership *score* is "higher = more likely a member" everywhere; log
probabilities are natural logarithms; ranks start at 1 (the best).
"""

from __future__ import annotations

import math
import zlib
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve

from ..errors import ConfigError

__all__ = [
    "bootstrap_mean_difference",
    "estimated_rank",
    "exposure",
    "loss_score",
    "min_k_pp_score",
    "min_k_score",
    "patient_means",
    "precision_recall_f1",
    "roc_summary",
    "token_stats_from_logits",
    "topk_accuracy",
    "zlib_score",
]

#: Min-K%++ divides by the standard deviation of log p under the model; below this it is
#: raised to this value (a near one-hot next-token distribution).
SIGMA_FLOOR = 1e-6

# Rows of logits turned into probabilities at a time (bounds the temporaries).
_LOGIT_ROWS = 64


# --------------------------------------------------------------------------- helpers


def _scores(values: Any, name: str, *, allow_empty: bool = False) -> np.ndarray:
    """A 1-D float64 array of finite values, or ConfigError."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ConfigError(f"{name} must be a 1-D array, got shape {arr.shape}")
    if arr.size == 0 and not allow_empty:
        raise ConfigError(f"{name} is empty: at least one score is needed")
    if not np.all(np.isfinite(arr)):
        bad = int(np.count_nonzero(~np.isfinite(arr)))
        raise ConfigError(f"{name} has {bad} non-finite value(s) (nan or inf)")
    return arr


def _group_index(groups: Any, n: int, name: str) -> tuple[np.ndarray, int]:
    """Dense 0-based group ids (np.unique order) of n items and the number of groups."""
    g = np.asarray(groups)
    if g.ndim != 1 or g.shape[0] != n:
        raise ConfigError(f"{name} must be 1-D with one group per score ({n}), got {g.shape}")
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    uniq, inverse = np.unique(g, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64), int(uniq.shape[0])


def _check_n_boot(n_boot: int) -> int:
    if isinstance(n_boot, bool) or int(n_boot) != n_boot or n_boot < 0:
        raise ConfigError(f"n_boot must be a non-negative integer, got {n_boot!r}")
    return int(n_boot)


def _resample_counts(rng: np.random.Generator, n_groups: int) -> np.ndarray:
    """How often each of n_groups groups is drawn in n_groups draws with replacement."""
    return np.bincount(rng.integers(0, n_groups, size=n_groups), minlength=n_groups)


def _percentile_ci(values: np.ndarray) -> tuple[float, float]:
    lo, hi = np.percentile(values, [2.5, 97.5])
    return float(lo), float(hi)


class _WeightedAuc:
    """AUC of a positive and a negative sample with integer multiplicities (the bootstrap).

    AUC = Σ_i Σ_j w_i v_j ([p_i > n_j] + ½[p_i = n_j]) / (Σ w · Σ v), the Mann–Whitney form of
    the area under the ROC curve; with all weights 1 it equals sklearn's ``roc_auc_score``.
    """

    def __init__(self, pos: np.ndarray, neg: np.ndarray) -> None:
        self.neg_order = np.argsort(neg, kind="stable")
        sorted_neg = neg[self.neg_order]
        self.lo = np.searchsorted(sorted_neg, pos, side="left")
        self.hi = np.searchsorted(sorted_neg, pos, side="right")

    def __call__(self, w_pos: np.ndarray, w_neg: np.ndarray) -> float:
        cum = np.zeros(w_neg.shape[0] + 1, dtype=np.int64)
        np.cumsum(w_neg[self.neg_order], out=cum[1:])
        below, upto = cum[self.lo], cum[self.hi]
        num = int(np.dot(w_pos, below + upto))  # 2·(below + ½·ties)
        den = 2 * int(w_pos.sum()) * int(cum[-1])
        return num / den


def _downsample(fpr: np.ndarray, tpr: np.ndarray, max_points: int) -> tuple[list, list]:
    """At most max_points points of a ROC curve, endpoints kept, dense at low FPR too."""
    n = fpr.shape[0]
    if n > max_points:
        n_log = max_points // 2
        idx = [np.round(np.linspace(0, n - 1, max_points - n_log)).astype(np.int64)]
        positive = fpr[fpr > 0]
        if n_log > 0 and positive.size:
            grid = np.geomspace(positive.min(), 1.0, n_log)
            idx.append(np.searchsorted(fpr, grid, side="right") - 1)
        keep = np.unique(np.concatenate(idx))
        fpr, tpr = fpr[keep], tpr[keep]
    return [float(x) for x in fpr], [float(x) for x in tpr]


# --------------------------------------------------------------------------- curves


def roc_summary(
    members: np.ndarray,
    non_members: np.ndarray,
    *,
    member_groups: np.ndarray | None = None,
    non_member_groups: np.ndarray | None = None,
    fprs: tuple[float, ...] = (0.01, 0.001),
    threshold: float | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    max_points: int = 200,
) -> dict:
    """How well a membership score separates members from non-members.

    A membership-inference attack gives every sequence (or patient) a score, higher meaning
    "more likely used in training". This summarises how well the scores of the true members
    stand out from those of the non-members.

    Parameters
    ----------
    members, non_members
        1-D arrays of finite scores of the members (training data) and non-members (held
        out). Both must be non-empty.
    member_groups, non_member_groups
        Optional patient id of each score (same length as the scores). When given (both
        must be), the bootstrap resamples patients instead of single scores.
    fprs
        False-positive rates at which the true-positive rate is reported, each in (0, 1].
    threshold
        Decision threshold of the privacy leakage; ``None`` = the mean member score.
    n_boot
        Bootstrap resamples for the AUC interval; 0 skips it (``auc_ci`` is ``None``).
    seed
        Seed of the bootstrap; the result is a pure function of the seed and the input.
    max_points
        Most points of the returned ROC curve (at least 2).

    Returns
    -------
    dict
        The ``R`` object of the audit report:

        ``auc``
            Area under the ROC curve (scikit-learn ``roc_auc_score``): the probability that
            a randomly drawn member scores higher than a randomly drawn non-member, ties
            counting one half. 0.5 = the score says nothing about membership; 1.0 = it
            separates them perfectly.
        ``auc_ci``
            ``[lo, hi]``, the 95 % percentile bootstrap interval of the AUC: the 2.5th and
            97.5th percentiles (linear interpolation) of the AUC over ``n_boot`` resamples.
            Each resample draws, with replacement and separately for members and
            non-members, as many patients as there are on that side and takes all their
            scores (every score is its own "patient" when no groups are given). Both sides
            are never empty, so every resample has an AUC.
        ``members``, ``non_members``
            Number of scores on each side.
        ``tpr_at_fpr``
            One entry per requested rate ``fpr``: ``tpr`` is the largest true-positive rate
            (share of members flagged) over all thresholds whose empirical false-positive
            rate (share of non-members flagged, a score being flagged when it is at least
            the threshold) is at most ``fpr``, i.e. the most liberal threshold that keeps
            the false alarms within ``fpr``. ``negatives`` is the number of non-member
            scores; the rate is ``estimable`` only when ``negatives × fpr ≥ 1`` (fewer
            non-members cannot measure a false-positive rate that small) and ``tpr`` is
            ``None`` otherwise.
        ``pl``
            Privacy leakage (Yeom et al.'s membership advantage) ``pl = tpr − fpr`` of the
            rule "member when score ≥ threshold", with ``tpr`` and ``fpr`` its empirical
            rates. The default threshold is the mean member score: Yeom et al.'s attacker
            knows the average training loss, and with score = −loss "loss ≤ mean training
            loss" is "score ≥ mean member score". 0 = no leakage, 1 = every member and no
            non-member flagged.
        ``roc``
            ``{"fpr": [...], "tpr": [...]}``, the ROC curve (scikit-learn ``roc_curve``)
            reduced to at most ``max_points`` points: its first and last points, points
            evenly spaced along the curve and points at log-spaced false-positive rates
            (for log-log plots).

    Raises
    ------
    ConfigError
        Empty or non-finite scores, mismatched groups, or out-of-range options.
    """
    pos = _scores(members, "members")
    neg = _scores(non_members, "non_members")
    if (member_groups is None) != (non_member_groups is None):
        raise ConfigError("give both member_groups and non_member_groups, or neither")
    n_boot = _check_n_boot(n_boot)
    if int(max_points) != max_points or max_points < 2:
        raise ConfigError(f"max_points must be an integer of at least 2, got {max_points!r}")
    fprs = tuple(float(f) for f in fprs)
    for f in fprs:
        if not 0.0 < f <= 1.0:
            raise ConfigError(f"each false-positive rate must be in (0, 1], got {f}")
    if threshold is not None and not math.isfinite(float(threshold)):
        raise ConfigError(f"threshold must be finite, got {threshold!r}")

    y = np.concatenate([np.ones(pos.size, dtype=np.int8), np.zeros(neg.size, dtype=np.int8)])
    s = np.concatenate([pos, neg])
    auc = float(roc_auc_score(y, s))

    if member_groups is None:
        pos_g, pos_n = np.arange(pos.size), pos.size
        neg_g, neg_n = np.arange(neg.size), neg.size
    else:
        pos_g, pos_n = _group_index(member_groups, pos.size, "member_groups")
        neg_g, neg_n = _group_index(non_member_groups, neg.size, "non_member_groups")

    auc_ci: list[float] | None = None
    if n_boot > 0:
        weighted = _WeightedAuc(pos, neg)
        rng = np.random.default_rng(seed)
        aucs = np.empty(n_boot)
        for b in range(n_boot):
            w_pos = _resample_counts(rng, pos_n)[pos_g]
            w_neg = _resample_counts(rng, neg_n)[neg_g]
            aucs[b] = weighted(w_pos, w_neg)
        auc_ci = list(_percentile_ci(aucs))

    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    at_fpr = []
    for f in fprs:
        estimable = neg.size * f >= 1.0 - 1e-9
        at = float(tpr[fpr <= f + 1e-12].max()) if estimable else None
        at_fpr.append({"fpr": f, "tpr": at, "negatives": int(neg.size), "estimable": estimable})

    t = float(np.mean(pos)) if threshold is None else float(threshold)
    pl_tpr = float(np.mean(pos >= t))
    pl_fpr = float(np.mean(neg >= t))

    curve_fpr, curve_tpr, _ = roc_curve(y, s)
    roc_fpr, roc_tpr = _downsample(curve_fpr, curve_tpr, int(max_points))
    return {
        "auc": auc,
        "auc_ci": auc_ci,
        "members": int(pos.size),
        "non_members": int(neg.size),
        "tpr_at_fpr": at_fpr,
        "pl": {"threshold": t, "tpr": pl_tpr, "fpr": pl_fpr, "pl": pl_tpr - pl_fpr},
        "roc": {"fpr": roc_fpr, "tpr": roc_tpr},
    }


def bootstrap_mean_difference(
    a_values: np.ndarray,
    a_groups: np.ndarray,
    b_values: np.ndarray,
    b_groups: np.ndarray,
    *,
    n_boot: int = 1000,
    seed: int = 0,
) -> tuple[float, tuple[float, float] | None]:
    """Difference of two means with a 95 % interval that resamples patients.

    Used for the memorisation measures: with ``a`` the identifier occurrences of members and
    ``b`` those of non-members, and per occurrence the value NLL_reference − NLL_model, it is
    the calibrated memorisation gain; with the value NLL_model and the sides swapped
    (non-members as ``a``), the uncalibrated gap.

    Parameters
    ----------
    a_values, b_values
        1-D arrays of finite values, one per occurrence; both non-empty.
    a_groups, b_groups
        Patient id of each value (same length as its values).
    n_boot
        Bootstrap resamples (0 = no interval).
    seed
        Seed of the bootstrap; the result is a pure function of the seed and the input.

    Returns
    -------
    estimate
        ``mean(a_values) − mean(b_values)``, each mean taken over occurrences (a patient
        with more occurrences weighs more).
    ci
        ``(lo, hi)``, the 2.5th and 97.5th percentiles of the same difference over
        ``n_boot`` resamples, each drawing with replacement as many patients as there are
        on each side, separately for ``a`` and ``b``, and taking all the occurrences of the
        drawn patients (as often as they are drawn). ``None`` when a side has fewer than two
        patients (resampling one patient has no spread to show) or ``n_boot`` is 0.

    Raises
    ------
    ConfigError
        Empty or non-finite values, or groups that do not match the values.
    """
    a = _scores(a_values, "a_values")
    b = _scores(b_values, "b_values")
    a_g, a_n = _group_index(a_groups, a.size, "a_groups")
    b_g, b_n = _group_index(b_groups, b.size, "b_groups")
    n_boot = _check_n_boot(n_boot)
    estimate = float(np.mean(a) - np.mean(b))
    if n_boot == 0 or a_n < 2 or b_n < 2:
        return estimate, None
    a_sum, a_cnt = np.bincount(a_g, weights=a, minlength=a_n), np.bincount(a_g, minlength=a_n)
    b_sum, b_cnt = np.bincount(b_g, weights=b, minlength=b_n), np.bincount(b_g, minlength=b_n)
    rng = np.random.default_rng(seed)
    diffs = np.empty(n_boot)
    for i in range(n_boot):
        ca = _resample_counts(rng, a_n)
        cb = _resample_counts(rng, b_n)
        diffs[i] = ca @ a_sum / (ca @ a_cnt) - cb @ b_sum / (cb @ b_cnt)
    return estimate, _percentile_ci(diffs)


# --------------------------------------------------------------------------- classification


def _as_bool(values: Any, name: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype != np.bool_:
        if arr.size and not np.isin(arr, (0, 1)).all():
            raise ConfigError(f"{name} must be boolean (or 0/1)")
        arr = arr.astype(np.bool_)
    return arr.reshape(-1)


def precision_recall_f1(predicted: np.ndarray, truth: np.ndarray) -> dict:
    """Precision, recall and F1 of a yes/no attack (e.g. "this patient was a member").

    Parameters
    ----------
    predicted
        Boolean array, True where the attack says "member".
    truth
        Boolean array of the same shape, True where it really is a member.

    Returns
    -------
    dict
        ``tp``, ``fp``, ``fn``, ``tn`` (ints): true positives (flagged members), false
        positives (flagged non-members), false negatives (missed members), true negatives.
        ``precision = tp / (tp + fp)``, the share of flagged that are members, ``None`` when
        nothing is flagged. ``recall = tp / (tp + fn)``, the share of members flagged,
        ``None`` when there are no members. ``f1 = 2·precision·recall / (precision +
        recall)``, their harmonic mean; ``None`` when either is ``None`` and 0.0 when both
        are 0.

    Raises
    ------
    ConfigError
        Shapes differ or values are not boolean.
    """
    p = np.asarray(predicted)
    t = np.asarray(truth)
    if p.shape != t.shape:
        raise ConfigError(f"predicted {p.shape} and truth {t.shape} differ in shape")
    p, t = _as_bool(p, "predicted"), _as_bool(t, "truth")
    tp = int(np.count_nonzero(p & t))
    fp = int(np.count_nonzero(p & ~t))
    fn = int(np.count_nonzero(~p & t))
    tn = int(np.count_nonzero(~p & ~t))
    precision = tp / (tp + fp) if tp + fp else None
    recall = tp / (tp + fn) if tp + fn else None
    if precision is None or recall is None:
        f1 = None
    elif precision + recall == 0:
        f1 = 0.0
    else:
        f1 = 2 * precision * recall / (precision + recall)
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "tn": tn,
    }


def topk_accuracy(
    ranks: np.ndarray, ks: tuple[int, ...] = (1, 10, 100, 1000)
) -> dict[str, float | None]:
    """Share of targets whose true value is among the k best-ranked guesses.

    Parameters
    ----------
    ranks
        1-D array, the rank of the true value of each target among the guesses (1 = the best
        guess; may be fractional, e.g. an estimated rank), ``np.inf`` when it was not ranked
        at all (always a miss).
    ks
        The cut-offs k (positive integers).

    Returns
    -------
    dict
        ``{"top1": ..., "top10": ..., ...}``: for each k the share of targets with
        rank ≤ k, in [0, 1]; ``None`` when there are no targets.

    Raises
    ------
    ConfigError
        A rank below 1 or nan, or a k below 1.
    """
    r = np.asarray(ranks, dtype=np.float64)
    if r.ndim != 1:
        raise ConfigError(f"ranks must be a 1-D array, got shape {r.shape}")
    if np.isnan(r).any() or (r < 1).any():
        raise ConfigError("ranks must be at least 1 (or np.inf for not ranked)")
    out: dict[str, float | None] = {}
    for k in ks:
        if int(k) != k or k < 1:
            raise ConfigError(f"each k must be a positive integer, got {k!r}")
        out[f"top{int(k)}"] = float(np.mean(r <= k)) if r.size else None
    return out


# --------------------------------------------------------------------------- canaries


def exposure(rank: float, space: int) -> float:
    """Exposure of a secret (Carlini et al. 2019, The Secret Sharer).

    ``exposure = log2(space) − log2(rank)``: how many bits of the secret the model gives
    away. The model ranks all ``space`` possible values of a secret (e.g. every 9-digit
    number) by likelihood; a secret ranked first has the maximal exposure ``log2(space)``
    (the model singles it out), one ranked last has exposure 0, and a secret the model did
    not learn has an expected exposure of about 1.

    Parameters
    ----------
    rank
        Rank of the true secret among the candidates, in [1, space] (1 = most likely; may
        be fractional when estimated, see :func:`estimated_rank`).
    space
        Number of possible values of the secret (a positive integer).

    Raises
    ------
    ConfigError
        ``space`` below 1 or ``rank`` outside [1, space].
    """
    if isinstance(space, bool) or int(space) != space or space < 1:
        raise ConfigError(f"space must be a positive integer, got {space!r}")
    rank = float(rank)
    if not 1.0 <= rank <= space:
        raise ConfigError(f"rank must be in [1, space={space}], got {rank}")
    return math.log2(space) - math.log2(rank)


def estimated_rank(n_better: int, n_sample: int, space: int) -> float:
    """Rank of a secret estimated from a sample of the other candidates.

    When the space of possible secrets is too large to score in full, the model scores
    ``n_sample`` candidates drawn uniformly, without replacement, from the ``space − 1``
    other values; ``n_better`` of them score at least as well as the true secret (ties
    count against the secret). The estimated rank is

    ``rank = 1 + (space − 1) · n_better / n_sample``,

    the unbiased estimate of one plus the number of other values scoring at least as well;
    it is exact when ``n_sample == space − 1`` (every other value was scored).

    Parameters
    ----------
    n_better
        Sampled candidates scoring at least as well as the secret, in [0, n_sample].
    n_sample
        Candidates scored, in [1, space − 1] (0 only when ``space`` is 1).
    space
        Number of possible values of the secret, the secret included.

    Raises
    ------
    ConfigError
        Counts out of range.
    """
    for name, v in (("n_better", n_better), ("n_sample", n_sample), ("space", space)):
        if isinstance(v, bool) or int(v) != v:
            raise ConfigError(f"{name} must be an integer, got {v!r}")
    if space < 1:
        raise ConfigError(f"space must be at least 1, got {space}")
    if space == 1 and n_sample == 0 and n_better == 0:
        return 1.0
    if not 1 <= n_sample <= space - 1:
        raise ConfigError(f"n_sample must be in [1, space - 1 = {space - 1}], got {n_sample}")
    if not 0 <= n_better <= n_sample:
        raise ConfigError(f"n_better must be in [0, n_sample = {n_sample}], got {n_better}")
    return 1.0 + (space - 1) * n_better / n_sample


# --------------------------------------------------------------------------- token scores


def _logprobs(logprobs: Any) -> np.ndarray:
    arr = np.asarray(logprobs, dtype=np.float64)
    if arr.ndim != 1:
        raise ConfigError(f"log-probabilities must be a 1-D array, got shape {arr.shape}")
    return arr


def _lowest_count(k: float, n: int) -> int:
    """ceil(k·n), immune to k·n landing a hair above an integer (0.2·15)."""
    if not 0.0 < k <= 1.0:
        raise ConfigError(f"k must be in (0, 1], got {k}")
    return max(1, math.ceil(round(k * n, 9)))


def loss_score(logprobs: np.ndarray) -> float:
    """Loss score (Yeom et al. 2018): the mean log-probability of the sequence's tokens.

    ``score = (1/n) Σ_t log p(x_t | context)`` = −(mean negative log-likelihood, the loss).
    Training data tend to have a lower loss, hence a higher score.

    Parameters
    ----------
    logprobs
        1-D array, natural log-probability the model gives each scored token of one sequence.

    Returns
    -------
    float
        The score; nan for an empty sequence.
    """
    lp = _logprobs(logprobs)
    return float(lp.mean()) if lp.size else math.nan


def min_k_score(logprobs: np.ndarray, k: float = 0.2) -> float:
    """Min-K% Prob (Shi et al. 2024): the mean of the lowest k share of token log-probabilities.

    With ``n`` tokens, ``m = ceil(k·n)`` (at least 1) and ``score = (1/m) Σ`` of the ``m``
    smallest ``log p(x_t | context)``. A sequence seen in training has fewer very unlikely
    tokens, hence a higher score.

    Parameters
    ----------
    logprobs
        1-D array, natural log-probability of each scored token of one sequence.
    k
        Share of tokens kept, in (0, 1] (0.2 = the 20 % least likely).

    Returns
    -------
    float
        The score; nan for an empty sequence.
    """
    lp = _logprobs(logprobs)
    m = _lowest_count(k, lp.size)
    if lp.size == 0:
        return math.nan
    return float(np.partition(lp, m - 1)[:m].mean())


def min_k_pp_score(
    logprobs: np.ndarray, mu: np.ndarray, sigma: np.ndarray, k: float = 0.2
) -> float:
    """Min-K%++ (Zhang et al. 2024): Min-K% of log-probabilities normalised per position.

    Each token's log-probability is compared with what the model expects at that position:
    ``z_t = (log p(x_t) − μ_t) / σ_t``, where ``μ_t = Σ_v p(v) log p(v)`` and
    ``σ_t = sqrt(Σ_v p(v) (log p(v) − μ_t)²)`` are the mean and standard deviation of
    ``log p(z)`` for ``z`` drawn from the model's own next-token distribution at ``t`` (see
    :func:`token_stats_from_logits`). With ``m = ceil(k·n)`` (at least 1), the score is the
    mean of the ``m`` smallest ``z_t``. A ``σ_t`` below ``SIGMA_FLOOR`` (1e-6; a near one-hot
    distribution) is raised to it.

    Parameters
    ----------
    logprobs, mu, sigma
        1-D arrays of the same length: per token, its natural log-probability, ``μ_t`` and
        ``σ_t``.
    k
        Share of tokens kept, in (0, 1].

    Returns
    -------
    float
        The score; nan for an empty sequence.
    """
    lp = _logprobs(logprobs)
    mu_ = np.asarray(mu, dtype=np.float64)
    sigma_ = np.asarray(sigma, dtype=np.float64)
    if mu_.shape != lp.shape or sigma_.shape != lp.shape:
        raise ConfigError(
            f"logprobs {lp.shape}, mu {mu_.shape} and sigma {sigma_.shape} differ in shape"
        )
    if (sigma_ < 0).any():
        raise ConfigError("sigma must be non-negative")
    m = _lowest_count(k, lp.size)
    if lp.size == 0:
        return math.nan
    z = (lp - mu_) / np.maximum(sigma_, SIGMA_FLOOR)
    return float(np.partition(z, m - 1)[:m].mean())


def zlib_score(logprobs: np.ndarray, text: str) -> float:
    """zlib-normalised loss (Carlini et al. 2021): loss relative to the text's compressibility.

    ``score = (1/n) Σ_t log p(x_t) / Z`` = −(mean negative log-likelihood in nats per token)
    / ``Z``, where the zlib entropy ``Z = len(zlib.compress(text.encode("utf-8")))`` is the
    size in bytes of the text compressed by zlib at its default level (6). Dividing by ``Z``
    discounts text that is likely only because it is repetitive or simple: such text also
    compresses well. Higher = more likely a member.

    Parameters
    ----------
    logprobs
        1-D array, natural log-probability of each scored token of one sequence.
    text
        The sequence's text (only its compressed length is used).

    Returns
    -------
    float
        The score; nan for an empty sequence.
    """
    lp = _logprobs(logprobs)
    if lp.size == 0:
        return math.nan
    return float(lp.mean()) / len(zlib.compress(text.encode("utf-8")))


def token_stats_from_logits(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Log-probabilities of every vocabulary entry and the per-position statistics of Min-K%++.

    Parameters
    ----------
    logits
        ``[n, V]`` array of the model's logits at ``n`` positions over a vocabulary of ``V``;
        ``-inf`` entries (excluded tokens) are allowed, nan and ``+inf`` are not, and each row
        needs one finite entry.

    Returns
    -------
    logprobs_all
        ``[n, V]`` float64, ``log_softmax(logits)``: ``log p(v) = l_v − log Σ_u exp(l_u)``,
        computed after subtracting each row's maximum.
    mu
        ``[n]``, ``μ = Σ_v p(v) log p(v)`` (minus the entropy), terms with ``p(v) = 0``
        counted as 0.
    sigma
        ``[n]``, ``σ = sqrt(Σ_v p(v) (log p(v) − μ)²)``, which equals
        ``sqrt(Σ_v p(v) log p(v)² − μ²)`` but is computed in this two-pass form, which does
        not lose precision to cancellation.

    Raises
    ------
    ConfigError
        Not 2-D, nan or ``+inf`` logits, or a row with no finite logit.
    """
    x = np.asarray(logits, dtype=np.float64)
    if x.ndim != 2:
        raise ConfigError(f"logits must be a 2-D [positions, vocabulary] array, got {x.shape}")
    if np.isnan(x).any() or np.isposinf(x).any():
        raise ConfigError("logits must not contain nan or +inf")
    n = x.shape[0]
    if n and x.shape[1] == 0:
        raise ConfigError("logits have an empty vocabulary axis")
    logp = np.empty_like(x)
    mu = np.empty(n)
    sigma = np.empty(n)
    for start in range(0, n, _LOGIT_ROWS):
        rows = x[start : start + _LOGIT_ROWS]
        top = rows.max(axis=1, keepdims=True)
        if not np.isfinite(top).all():
            raise ConfigError("every row of logits needs at least one finite value")
        shifted = rows - top
        lp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        p = np.exp(lp)
        lp0 = np.where(p > 0, lp, 0.0)  # p·log p := 0 where p = 0 (and log p may be -inf)
        m = (p * lp0).sum(axis=1)
        var = (p * (lp0 - m[:, None]) ** 2).sum(axis=1)
        logp[start : start + _LOGIT_ROWS] = lp
        mu[start : start + _LOGIT_ROWS] = m
        sigma[start : start + _LOGIT_ROWS] = np.sqrt(var)
    return logp, mu, sigma


def patient_means(scores: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Patient-level scores for the group (patient) membership attack.

    A patient's score is the mean of the scores of their sequences (each sequence weighs
    the same, whatever its length): the attacker asks "was this patient's record used in
    training?" rather than "was this sequence?".

    Parameters
    ----------
    scores
        1-D array, one score per sequence (a nan makes its patient's mean nan).
    groups
        1-D array of the same length, the patient of each sequence.

    Returns
    -------
    groups
        The distinct patients, sorted (``np.unique`` order).
    means
        float64, the mean score of each of those patients, in the same order.

    Raises
    ------
    ConfigError
        Shapes differ or are not 1-D.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1:
        raise ConfigError(f"scores must be a 1-D array, got shape {s.shape}")
    g = np.asarray(groups)
    if g.ndim != 1 or g.shape[0] != s.shape[0]:
        raise ConfigError(f"groups must be 1-D with one group per score ({s.size}), got {g.shape}")
    uniq, inverse = np.unique(g, return_inverse=True)
    inverse = inverse.reshape(-1)
    sums = np.bincount(inverse, weights=s, minlength=uniq.size)
    counts = np.bincount(inverse, minlength=uniq.size)
    return uniq, sums / np.maximum(counts, 1)
