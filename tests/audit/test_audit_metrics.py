"""Numbers of the privacy audit, checked on hand-made cases."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from phisieve.audit.metrics import (
    _WeightedAuc,
    bootstrap_mean_difference,
    estimated_rank,
    exposure,
    loss_score,
    min_k_pp_score,
    min_k_score,
    patient_means,
    precision_recall_f1,
    roc_summary,
    token_stats_from_logits,
    topk_accuracy,
    zlib_score,
)
from phisieve.errors import ConfigError

# --------------------------------------------------------------------------- roc_summary


def test_perfectly_separable_scores():
    r = roc_summary(np.array([3.0, 4.0, 5.0]), np.array([0.0, 1.0, 2.0]), n_boot=200)
    assert r["auc"] == 1.0
    assert r["auc_ci"] == [1.0, 1.0]
    assert (r["members"], r["non_members"]) == (3, 3)
    assert r["pl"] == {"threshold": 4.0, "tpr": 2 / 3, "fpr": 0.0, "pl": 2 / 3}
    assert r["roc"]["fpr"][0] == 0.0 and r["roc"]["tpr"][-1] == 1.0


def test_identical_distributions_auc_half():
    x = np.array([0.1, 0.5, 0.5, 0.9])
    r = roc_summary(x, x.copy(), n_boot=50)
    assert r["auc"] == 0.5
    assert r["pl"]["pl"] == 0.0


def test_hand_case_tpr_at_fpr_and_pl():
    members = np.array([0.9, 0.8, 0.7, 0.3])
    non_members = np.array([0.85, 0.75] + [0.0] * 98)
    r = roc_summary(members, non_members, n_boot=0)
    # pairs won: 0.9 beats 100, 0.8 beats 99, 0.7 and 0.3 beat 98 each -> 395 / 400
    assert r["auc"] == pytest.approx(395 / 400)
    assert r["auc_ci"] is None
    one, tenth = r["tpr_at_fpr"]
    # FPR <= 1 % allows only the 0.85 false alarm: threshold 0.8 flags 0.9 and 0.8
    assert one == {"fpr": 0.01, "tpr": 0.5, "negatives": 100, "estimable": True}
    assert tenth == {"fpr": 0.001, "tpr": None, "negatives": 100, "estimable": False}
    # threshold = mean member score 0.675: members 0.9, 0.8, 0.7; non-members 0.85, 0.75
    assert r["pl"]["threshold"] == pytest.approx(0.675)
    assert r["pl"]["tpr"] == 0.75
    assert r["pl"]["fpr"] == 0.02
    assert r["pl"]["pl"] == pytest.approx(0.73)
    fixed = roc_summary(members, non_members, n_boot=0, threshold=0.8)["pl"]
    assert fixed == {"threshold": 0.8, "tpr": 0.5, "fpr": 0.01, "pl": 0.49}


def test_tpr_not_estimable_with_50_negatives():
    rng = np.random.default_rng(1)
    r = roc_summary(rng.normal(1, 1, 40), rng.normal(0, 1, 50), n_boot=0, fprs=(0.001, 0.02))
    assert r["tpr_at_fpr"][0] == {"fpr": 0.001, "tpr": None, "negatives": 50, "estimable": False}
    assert r["tpr_at_fpr"][1]["estimable"] is True  # 50 * 2 % = 1 false positive
    assert r["tpr_at_fpr"][1]["tpr"] is not None


def test_roc_downsampled_keeps_endpoints():
    rng = np.random.default_rng(2)
    r = roc_summary(rng.normal(0.5, 1, 3000), rng.normal(0, 1, 3000), n_boot=0, max_points=50)
    fpr, tpr = r["roc"]["fpr"], r["roc"]["tpr"]
    assert 2 < len(fpr) <= 50 and len(fpr) == len(tpr)
    assert (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0.0, 0.0, 1.0, 1.0)
    assert all(type(v) is float for v in fpr + tpr)
    assert fpr == sorted(fpr) and tpr == sorted(tpr)
    assert min(f for f in fpr if f > 0) < 0.01  # dense at low FPR for log-log plots


def test_bootstrap_is_a_function_of_the_seed():
    rng = np.random.default_rng(3)
    m, n = rng.normal(0.3, 1, 60), rng.normal(0, 1, 60)
    a = roc_summary(m, n, n_boot=300, seed=7)
    assert roc_summary(m, n, n_boot=300, seed=7) == a
    assert roc_summary(m, n, n_boot=300, seed=8)["auc_ci"] != a["auc_ci"]
    lo, hi = a["auc_ci"]
    assert 0.0 <= lo < hi <= 1.0


def test_bootstrap_resamples_patients_not_sequences():
    # two member patients, five sequences each: one scores high, the other low
    members = np.array([1.0] * 5 + [-1.0] * 5)
    member_groups = np.array(["a"] * 5 + ["b"] * 5)
    non_members = np.zeros(5)
    non_member_groups = np.arange(5)
    by_patient = roc_summary(
        members,
        non_members,
        member_groups=member_groups,
        non_member_groups=non_member_groups,
        n_boot=1000,
    )
    by_sequence = roc_summary(members, non_members, n_boot=1000)
    assert by_patient["auc"] == by_sequence["auc"] == 0.5
    # resamples {a,a}, {a,b}, {b,b} have AUC 1, 0.5, 0 (a quarter of them each at the ends)
    assert by_patient["auc_ci"] == [0.0, 1.0]
    lo, hi = by_sequence["auc_ci"]
    assert 0.0 < lo < 0.5 < hi < 1.0


def test_roc_summary_rejects_bad_input():
    with pytest.raises(ConfigError, match="members is empty"):
        roc_summary(np.array([]), np.array([1.0]))
    with pytest.raises(ConfigError, match="non_members is empty"):
        roc_summary(np.array([1.0]), np.array([]))
    with pytest.raises(ConfigError, match="non-finite"):
        roc_summary(np.array([np.nan]), np.array([1.0]))
    with pytest.raises(ConfigError, match="both"):
        roc_summary(np.array([1.0]), np.array([0.0]), member_groups=np.array([1]))
    with pytest.raises(ConfigError, match="one group per score"):
        roc_summary(
            np.array([1.0, 2.0]),
            np.array([0.0]),
            member_groups=np.array([1]),
            non_member_groups=np.array([2]),
        )
    with pytest.raises(ConfigError, match="false-positive rate"):
        roc_summary(np.array([1.0]), np.array([0.0]), fprs=(0.0,))


scores = st.lists(st.integers(-5, 5).map(lambda i: i / 2), min_size=1, max_size=30).map(np.array)


@settings(max_examples=60, deadline=None)
@given(scores, scores)
def test_auc_properties(x, y):
    r = roc_summary(x, y, n_boot=20, seed=1)
    swapped = roc_summary(y, x, n_boot=0)
    assert r["auc"] == pytest.approx(1.0 - swapped["auc"])
    labels = np.r_[np.ones(x.size), np.zeros(y.size)]
    assert r["auc"] == pytest.approx(roc_auc_score(labels, np.r_[x, y]))
    # the bootstrap's own AUC (integer multiplicities) agrees with sklearn's
    ones_x, ones_y = np.ones(x.size, dtype=np.int64), np.ones(y.size, dtype=np.int64)
    assert _WeightedAuc(x, y)(ones_x, ones_y) == pytest.approx(r["auc"])
    # multiplicities = repeating the scores
    wx = np.arange(x.size) % 3
    wx[0] = 1
    wy = np.arange(y.size) % 2 + 1
    expected = roc_auc_score(
        np.r_[np.ones(wx.sum()), np.zeros(wy.sum())], np.r_[np.repeat(x, wx), np.repeat(y, wy)]
    )
    assert _WeightedAuc(x, y)(wx, wy) == pytest.approx(expected)
    lo, hi = r["auc_ci"]
    assert 0.0 <= lo <= hi <= 1.0
    assert -1.0 <= r["pl"]["pl"] <= 1.0


# --------------------------------------------------------------------------- mean difference


def test_bootstrap_mean_difference():
    a = np.array([1.0, 3.0, 5.0])
    b = np.array([0.0, 2.0])
    est, ci = bootstrap_mean_difference(a, np.array([1, 1, 2]), b, np.array([7, 8]), n_boot=500)
    assert est == 2.0  # 3 - 1, means over occurrences
    lo, hi = ci
    # extreme resamples: a = {patient 1 twice} mean 2 or {patient 2 twice} mean 5;
    # b = {0, 0} or {2, 2}
    assert 0.0 <= lo < est < hi <= 5.0
    again = bootstrap_mean_difference(a, np.array([1, 1, 2]), b, np.array([7, 8]), n_boot=500)
    assert again == (est, ci)
    # one patient on a side: no interval
    assert bootstrap_mean_difference(a, np.zeros(3), b, np.array([7, 8])) == (2.0, None)
    # each patient constant: the CI only moves with the patient mix
    est, ci = bootstrap_mean_difference(
        np.array([4.0, 4.0]), np.array([1, 2]), np.array([1.0, 1.0]), np.array([3, 4])
    )
    assert (est, ci) == (3.0, (3.0, 3.0))


def test_bootstrap_mean_difference_uses_groups():
    a = np.array([1.0] * 10 + [0.0] * 10)
    a_groups = np.repeat([0, 1], 10)
    b = np.zeros(4)
    b_groups = np.arange(4)
    _, by_patient = bootstrap_mean_difference(a, a_groups, b, b_groups, n_boot=1000)
    _, by_item = bootstrap_mean_difference(a, np.arange(20), b, b_groups, n_boot=1000)
    assert by_patient == (0.0, 1.0)  # resamples {0,0}, {0,1}, {1,1}: 1, 0.5, 0
    assert 0.0 < by_item[0] < by_item[1] < 1.0


def test_bootstrap_mean_difference_rejects_empty():
    with pytest.raises(ConfigError, match="a_values is empty"):
        bootstrap_mean_difference(np.array([]), np.array([]), np.array([1.0]), np.array([1]))


# --------------------------------------------------------------------------- classification


def test_precision_recall_f1_hand_case():
    predicted = np.array([True, True, True, False, False, False])
    truth = np.array([True, True, False, True, False, False])
    r = precision_recall_f1(predicted, truth)
    assert r == {
        "precision": 2 / 3,
        "recall": 2 / 3,
        "f1": pytest.approx(2 / 3),
        "tp": 2,
        "fp": 1,
        "fn": 1,
        "tn": 2,
    }
    assert all(type(r[k]) is int for k in ("tp", "fp", "fn", "tn"))


def test_precision_recall_f1_undefined():
    none_predicted = precision_recall_f1(np.zeros(3, bool), np.array([True, False, False]))
    assert none_predicted == {
        "precision": None,
        "recall": 0.0,
        "f1": None,
        "tp": 0,
        "fp": 0,
        "fn": 1,
        "tn": 2,
    }
    all_wrong = precision_recall_f1(np.array([1, 0]), np.array([0, 1]))
    assert (all_wrong["precision"], all_wrong["recall"], all_wrong["f1"]) == (0.0, 0.0, 0.0)
    with pytest.raises(ConfigError, match="boolean"):
        precision_recall_f1(np.array([2, 0]), np.array([0, 1]))
    with pytest.raises(ConfigError, match="shape"):
        precision_recall_f1(np.array([True]), np.array([True, False]))


def test_topk_accuracy():
    ranks = np.array([1, 2, 10, 11, 500, 1000, 1001, np.inf])
    assert topk_accuracy(ranks) == {
        "top1": 1 / 8,
        "top10": 3 / 8,
        "top100": 4 / 8,
        "top1000": 6 / 8,
    }
    assert topk_accuracy(np.array([]), ks=(1, 5)) == {"top1": None, "top5": None}
    assert topk_accuracy(np.array([1.5, 4.0]), ks=(1, 2)) == {"top1": 0.0, "top2": 0.5}
    with pytest.raises(ConfigError):
        topk_accuracy(np.array([0.0]))


# --------------------------------------------------------------------------- canaries


def test_exposure():
    assert exposure(1, 1024) == 10.0
    assert exposure(1024, 1024) == 0.0
    assert exposure(4, 1024) == 8.0
    for rank, space in ((0, 10), (11, 10), (1, 0)):
        with pytest.raises(ConfigError):
            exposure(rank, space)


def test_estimated_rank():
    # every other candidate scored: exact rank = 1 + number at least as good
    assert estimated_rank(3, 9, 10) == 4.0
    assert estimated_rank(0, 9, 10) == 1.0
    assert estimated_rank(9, 9, 10) == 10.0
    # 10 of 100 sampled beat it: a tenth of the 1000 others
    assert estimated_rank(10, 100, 1001) == 101.0
    assert estimated_rank(0, 0, 1) == 1.0
    assert exposure(estimated_rank(0, 9, 10), 10) == math.log2(10)
    with pytest.raises(ConfigError, match="n_sample"):
        estimated_rank(1, 10, 10)
    with pytest.raises(ConfigError, match="n_better"):
        estimated_rank(5, 4, 10)


# --------------------------------------------------------------------------- token scores


def test_loss_and_min_k():
    lp = np.array([-1.0, -2.0, -3.0, -4.0, -5.0])
    assert loss_score(lp) == -3.0
    assert min_k_score(lp, k=0.4) == -4.5  # ceil(2) lowest: -5, -4
    assert min_k_score(lp, k=0.3) == -4.5  # ceil(1.5) = 2
    assert min_k_score(lp, k=0.1) == -5.0  # at least one token
    assert min_k_score(lp, k=1.0) == -3.0
    # 0.2 * 15 = 3.0000000000000004 in floats: still the 3 lowest
    assert min_k_score(-np.arange(1.0, 16.0), k=0.2) == -14.0
    with pytest.raises(ConfigError, match="k must be"):
        min_k_score(lp, k=0.0)


def test_min_k_pp_hand_case():
    lp = np.array([-1.0, -2.0, -3.0])
    mu = np.array([-1.0, -1.0, -1.0])
    sigma = np.array([1.0, 2.0, 0.5])
    # z = [0, -0.5, -4]; ceil(0.5 * 3) = 2 lowest: -4, -0.5
    assert min_k_pp_score(lp, mu, sigma, k=0.5) == -2.25
    # sigma 0 (one-hot distribution, token is its mode) does not divide by zero
    assert min_k_pp_score(np.array([0.0]), np.array([0.0]), np.array([0.0])) == 0.0
    with pytest.raises(ConfigError, match="shape"):
        min_k_pp_score(lp, mu[:2], sigma)


def test_zlib_hand_case():
    text = "Patient seen in clinic."
    expected = -2.0 / len(zlib.compress(text.encode("utf-8")))
    assert zlib_score(np.array([-1.0, -3.0]), text) == expected


def test_empty_sequences_score_nan():
    empty = np.array([])
    assert math.isnan(loss_score(empty))
    assert math.isnan(min_k_score(empty))
    assert math.isnan(min_k_pp_score(empty, empty, empty))
    assert math.isnan(zlib_score(empty, ""))


def test_token_stats_from_logits():
    rng = np.random.default_rng(4)
    logits = rng.normal(0, 3, (130, 17)).astype(np.float32)  # more rows than one chunk
    logits[0, 3] = -np.inf
    logits[1] = 1000.0  # uniform, would overflow a naive exp
    logp, mu, sigma = token_stats_from_logits(logits)
    x = logits.astype(np.float64)
    with np.errstate(over="ignore", divide="ignore"):
        e = np.exp(x[2:] - x[2:].max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    direct = np.log(p)
    np.testing.assert_allclose(logp[2:], direct, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mu[2:], (p * direct).sum(axis=1), rtol=1e-12)
    var = (p * direct**2).sum(axis=1) - ((p * direct).sum(axis=1)) ** 2
    np.testing.assert_allclose(sigma[2:], np.sqrt(var), rtol=1e-9)
    assert logp[0, 3] == -np.inf and np.isfinite(mu[0]) and np.isfinite(sigma[0])
    np.testing.assert_allclose(logp[1], -np.log(17), rtol=1e-12)
    assert mu[1] == pytest.approx(-np.log(17)) and sigma[1] == pytest.approx(0.0, abs=1e-12)
    # one-hot: mu = 0, sigma = 0
    _, mu1, sigma1 = token_stats_from_logits(np.array([[0.0, -np.inf, -np.inf]]))
    assert (mu1[0], sigma1[0]) == (0.0, 0.0)
    with pytest.raises(ConfigError, match="finite"):
        token_stats_from_logits(np.full((1, 3), -np.inf))
    with pytest.raises(ConfigError, match="nan"):
        token_stats_from_logits(np.array([[np.nan, 0.0]]))


# --------------------------------------------------------------------------- patients


def test_patient_means():
    groups, means = patient_means(
        np.array([1.0, 2.0, 3.0, 10.0, -1.0]), np.array(["p2", "p1", "p2", "p3", "p1"])
    )
    assert groups.tolist() == ["p1", "p2", "p3"]
    assert means.tolist() == [0.5, 2.0, 10.0]
    groups, means = patient_means(np.array([]), np.array([], dtype=np.int64))
    assert groups.size == 0 and means.size == 0
    with pytest.raises(ConfigError):
        patient_means(np.array([1.0]), np.array([1, 2]))
