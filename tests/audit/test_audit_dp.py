"""The audit checks a DP guarantee: the TPR (ε, δ) allows beside each membership attack, and
an empirical lower bound on ε from one training run (Steinke, Nasr & Jagielski 2023)."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from phisieve.audit.epsilon import (
    clopper_pearson,
    dp_check,
    one_run_audit,
    one_run_lower_bound,
    one_run_p_value,
    tpr_bound,
)
from phisieve.cli import main
from phisieve.errors import ConfigError


def test_tpr_bound_is_the_dp_hypothesis_testing_region():
    e = math.e
    assert tpr_bound(1.0, 0.01, 0.1) == pytest.approx(e * 0.1 + 0.01)
    # At a large FPR the other side binds: 1 - e^-ε (1 - δ - FPR).
    assert tpr_bound(1.0, 0.01, 0.6) == pytest.approx(1 - (1 - 0.01 - 0.6) / e)
    assert tpr_bound(0.0, 0.0, 0.3) == pytest.approx(0.3)  # ε = 0: no better than chance
    assert tpr_bound(2.0, 1e-5, 0.0) == pytest.approx(1e-5)
    assert tpr_bound(10.0, 0.0, 0.5) == pytest.approx(1 - 0.5 * math.exp(-10))
    assert tpr_bound(math.inf, 0.0, 0.01) == 1.0 and tpr_bound(1.0, 0.5, 0.9) == 1.0
    with pytest.raises(ConfigError):
        tpr_bound(1.0, 0.0, 1.5)


def test_dp_check_on_hand_made_scores():
    members = np.array([9.0, 8.0, 7.0, 3.0, 2.0])
    non_members = np.arange(20, dtype=float) / 4  # 0 .. 4.75
    rows = dp_check(members, non_members, epsilon=0.5, delta=0.01, fprs=(0.01, 0.05, 0.25))
    # 20 negatives cannot measure a 1% FPR. Within 5%, the best point flags the 3 top
    # members and no non-member (threshold 7).
    assert [r["fpr_at_most"] for r in rows] == [0.05, 0.25]
    first = rows[0]
    assert first["fpr"] == 0.0 and first["tpr"] == pytest.approx(0.6)
    assert first["tpr_ci"] == pytest.approx(clopper_pearson(3, 5))
    assert first["fpr_ci"] == pytest.approx([0.0, 1 - 0.025 ** (1 / 20)])
    assert first["tpr_bound"] == pytest.approx(0.01)  # at FPR 0 the cap is δ
    # But 0 of 20 non-members does not show an FPR of 0: at its upper end (16.8%) the cap
    # is e^0.5 · 0.168 + 0.01 = 0.29, below which the TPR's interval reaches (0.147).
    assert first["exceeds"] is False
    # Within 25% (5 false positives) the threshold 3.75 still flags 3 members: the point
    # with the fewest false positives, 7, again.
    assert rows[1]["tpr"] == pytest.approx(0.6) and rows[1]["fpr"] == 0.0
    # Without a claim there is no cap; a claim of ε = 0 is contradicted by a clean split of
    # 200 members from 200 non-members.
    assert dp_check(members, non_members, None, None)[0]["tpr_bound"] is None
    clean = dp_check(np.arange(200.0) + 1000, np.arange(200.0), 0.0, 0.0, fprs=(0.05,))[0]
    assert clean["tpr"] == 1.0 and clean["fpr"] == 0.0 and clean["exceeds"] is True
    loose = dp_check(np.arange(200.0) + 1000, np.arange(200.0), 8.0, 1e-5, fprs=(0.05,))[0]
    assert loose["exceeds"] is False  # ε = 8 allows it


def reference_p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """Steinke et al.'s p-value written out with exact binomial sums (math.comb)."""
    q = math.exp(eps) / (1 + math.exp(eps))

    def pmf(j: int) -> float:
        return math.comb(r, j) * q**j * (1 - q) ** (r - j)

    tail = sum(pmf(j) for j in range(v, r + 1))
    alpha = 0.0
    for i in range(1, v + 1):
        alpha = max(alpha, sum(pmf(j) for j in range(v - i, v)) / i)
    return min(1.0, tail + 2 * m * delta * alpha)


@pytest.mark.parametrize(
    ("m", "r", "v", "eps", "delta"),
    [(100, 20, 15, 0.5, 0.0), (100, 20, 15, 0.5, 1e-4), (64, 38, 38, 2.0, 0.0),
     (1000, 200, 130, 1.0, 1e-5), (10, 4, 0, 0.3, 0.01), (50, 50, 30, 0.0, 1e-3)],
)  # fmt: skip
def test_one_run_p_value_matches_the_papers_formula(m, r, v, eps, delta):
    assert one_run_p_value(m, r, v, eps, delta) == pytest.approx(
        reference_p_value(m, r, v, eps, delta), rel=1e-9, abs=1e-15
    )


def test_one_run_lower_bound():
    # Every guess right, δ = 0: P[all r right] = q^r, so the bound solves q^r = β.
    assert one_run_lower_bound(100, 4, 4, 0.0, 0.05) == 0.0  # 0.5^4 > 0.05: chance can do it
    for r in (6, 20, 60):
        q = 0.05 ** (1 / r)
        assert one_run_lower_bound(100, r, r, 0.0, 0.05) == pytest.approx(
            math.log(q / (1 - q)), abs=1e-9
        )
    # Half right is chance: no bound; more right, a larger bound; δ only weakens it.
    assert one_run_lower_bound(100, 40, 20) == 0.0
    bounds = [one_run_lower_bound(200, 60, v) for v in (40, 45, 50, 55)]
    assert bounds == sorted(bounds) and bounds[0] > 0
    assert one_run_lower_bound(200, 60, 50, 1e-4) < one_run_lower_bound(200, 60, 50, 0.0)
    # The bound is exact at its level: just below it the p-value is under β, above it not.
    eps = one_run_lower_bound(200, 60, 50, 1e-4, 0.01)
    assert one_run_p_value(200, 60, 50, eps * 0.999, 1e-4) < 0.01
    assert one_run_p_value(200, 60, 50, eps * 1.001 + 1e-9, 1e-4) >= 0.01


def test_one_run_audit_guesses_each_end_and_corrects_for_the_tries():
    rng = np.random.default_rng(0)
    included = rng.random(100) < 0.5
    scores = included * 3.0 + rng.normal(size=100)  # planted canaries score higher
    out = one_run_audit(scores, included)
    assert out["canaries"] == 100 and out["planted"] == int(included.sum())
    assert out["beta_per_try"] == pytest.approx(0.05 / 6)
    order = np.argsort(-scores, kind="stable")
    for t in out["tries"]:
        k = t["guesses"] // 2
        assert t["correct"] == included[order[:k]].sum() + (~included[order[-k:]]).sum()
        bound = one_run_lower_bound(100, t["guesses"], t["correct"], 0.0, 0.05 / 6)
        assert t["epsilon"] == pytest.approx(bound, abs=1e-9)
    assert out["epsilon_lower"] == max(t["epsilon"] for t in out["tries"]) > 1
    # Scores that say nothing give no bound worth the name.
    noise = one_run_audit(rng.normal(size=100), included)
    assert noise["epsilon_lower"] < 0.5
    with pytest.raises(ConfigError):
        one_run_audit(np.array([1.0]), np.array([True]))


# -- a seeded run end to end -------------------------------------------------------------


def phisieve(*args: str) -> None:
    main([*args, "--quiet"])


@pytest.fixture(scope="module")
def canary_run(tmp_path_factory) -> Path:
    """12 synthetic patients split in half, 64 canary patients planted by a coin among the
    members (each canary sentence repeated 16 times), a WordPiece tokenizer learnt on the
    held-out half, a tiny BERT."""
    w = tmp_path_factory.mktemp("one_run")
    phisieve("synth", "--patients", "12", "--out", str(w / "notes"))
    (w / "key").write_text(hashlib.sha256(b"phisieve one-run test").hexdigest())
    phisieve("split", str(w / "notes"), "--by", "patient", "--fractions",
             "members=0.5,heldout=0.5", "--seed", "0", "--out", str(w / "split"))  # fmt: skip
    phisieve("canaries", str(w / "split/members"), "--n", "64", "--repeats", "16",
             "--new-patients", "--coin", "--secret-file", str(w / "key"),
             "--out", str(w / "can"))  # fmt: skip
    phisieve("tokenizer", str(w / "split/heldout"), "--kind", "wordpiece", "--vocab-size",
             "1000", "--out", str(w / "tok"))  # fmt: skip
    phisieve("index", str(w / "can"), "--k", "2", "--out", str(w / "terms"))
    for docs, out in ((w / "can", "enc_m"), (w / "split/heldout", "enc_h")):
        phisieve("encode", str(docs), "--tokenizer", str(w / "tok"), "--terms",
                 str(w / "terms"), "--max-len", "64", "--out", str(w / out))  # fmt: skip
    phisieve("init-model", "--tokenizer", str(w / "tok"), "--hidden-size", "64", "--layers",
             "2", "--heads", "2", "--out", str(w / "init"))  # fmt: skip
    return w


def audit_of(w: Path, model: str) -> dict:
    phisieve("audit", "--model", str(w / model), "--members", str(w / "enc_m"),
             "--non-members", str(w / "enc_h"), "--canaries", str(w / "can"),
             "--tokenizer", str(w / "tok"), "--n-boot", "50", "--max-identifiers", "200",
             "--utility-words", "100", "--out", str(w / f"report_{model}"))  # fmt: skip
    return json.loads((w / f"report_{model}" / "audit.json").read_text())


@pytest.mark.slow
def test_one_run_bound_sees_memorised_canaries_and_stays_under_a_dp_models_epsilon(canary_run):
    w = canary_run
    phisieve("train", str(w / "enc_m"), "--model", str(w / "init"), "--objective", "mlm",
             "--max-steps", "600", "--batch-size", "16", "--learning-rate", "3e-3",
             "--pad-to", "8", "--out", str(w / "plain"))  # fmt: skip
    plain = audit_of(w, "plain")
    one = plain["canaries"]["one_run"]
    assert one["canaries"] == 64 and one["delta"] == 0.0 and one["why"] is None
    assert one["epsilon_lower"] > 0.5, one  # memorised: clearly not private
    row = next(v for v in plain["verdict"] if v["measure"].startswith("Empirical lower"))
    assert row["value"] == one["epsilon_lower"] and row["level"] == "warn"
    assert plain["model"]["dp"] is None
    # Canary patients are the one-run audit's: not counted as members.
    real = pq.read_table(w / "split/members").column("patient_id").unique()
    assert plain["data"]["members"]["patients"] == len(real)

    phisieve("train", str(w / "enc_m"), "--model", str(w / "init"), "--objective", "mlm",
             "--dp", "--target-epsilon", "2", "--max-steps", "30", "--max-per-patient", "4",
             "--batch-size", "16",
             "--learning-rate", "3e-3", "--pad-to", "8", "--secret-file", str(w / "key"),
             "--out", str(w / "private"))  # fmt: skip
    private = audit_of(w, "private")
    dp = private["model"]["dp"]
    assert dp["unit"] == "patient" and 1.9 < dp["epsilon"] <= 2.0
    one = private["canaries"]["one_run"]
    assert one["delta"] == dp["delta"] and one["epsilon_lower"] <= dp["epsilon"]
    row = next(v for v in private["verdict"] if v["measure"].startswith("Empirical lower"))
    assert row["level"] == "ok"
    for check in private["membership"]["patient"]["loss"]["dp_check"]:
        assert check["tpr_bound"] == pytest.approx(tpr_bound(dp["epsilon"], dp["delta"],
                                                             check["fpr"]))  # fmt: skip
    page = (w / "report_private" / "index.html").read_text()
    assert "per patient at δ" in page and "A lower bound on ε from this training run" in page
    assert "TPR (ε, δ) allows" in page
