"""The privacy audit: hand-made models with known answers, then real tiny models end to end."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
import torch

from phisieve import api
from phisieve.api import encode
from phisieve.audit.run import _canaries, _identifier_mia, _Side, _verdict, read_audit
from phisieve.audit.scoring import Scorer, Sequences, word_occurrences
from phisieve.cli import main
from phisieve.errors import ConfigError, OutputExistsError
from phisieve.phi import canaries as can

V = 50  # vocabulary of the hand-made models


class FakeLM(torch.nn.Module):
    """A "model" whose logits are fixed: ``favour[t]`` is the token it predicts at position t
    (masked) or after position t (causal); everything else scores 0."""

    def __init__(self, favour: dict[int, int], vocab: int = V, margin: float = 10.0) -> None:
        super().__init__()
        self.favour, self.vocab, self.margin = favour, vocab, margin
        self.config = SimpleNamespace(max_position_embeddings=512)
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> SimpleNamespace:
        b, n = input_ids.shape
        logits = torch.zeros(b, n, self.vocab)
        for t, tok in self.favour.items():
            if t < n:
                logits[:, t, tok] = self.margin
        return SimpleNamespace(logits=logits)


class ConstantLM(FakeLM):
    """Predicts token ``tok`` everywhere."""

    def __init__(self, tok: int) -> None:
        super().__init__({})
        self.tok = tok

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> SimpleNamespace:
        b, n = input_ids.shape
        logits = torch.zeros(b, n, self.vocab)
        logits[:, :, self.tok] = self.margin
        return SimpleNamespace(logits=logits)


def seqs(rows: list[dict]) -> Sequences:
    return Sequences.of(
        pa.table(
            {
                "seq_id": pa.array(range(len(rows)), pa.uint64()),
                "patient_id": [r["patient"] for r in rows],
                "input_ids": pa.array([r["ids"] for r in rows], pa.list_(pa.uint32())),
                "word_ids": pa.array([r["words"] for r in rows], pa.list_(pa.int32())),
                "direct": pa.array([r["direct"] for r in rows], pa.list_(pa.bool_())),
                "indirect": pa.array([r["indirect"] for r in rows], pa.list_(pa.bool_())),
            }
        )
    )


def scorer(model: torch.nn.Module, causal: bool = False) -> Scorer:
    return Scorer(model, causal=causal, mask_id=1, pad_id=0, device=torch.device("cpu"))


def test_a_model_that_always_predicts_an_identifier_recovers_exactly_its_occurrences():
    # Words: 7 (one token), 8 9 (two tokens), 7 again; token 7 is what the model predicts.
    s = seqs(
        [
            {
                "patient": "a",
                "ids": [2, 7, 8, 9, 7, 3],
                "words": [-1, 0, 1, 1, 2, -1],
                "direct": [False, True, False, False, False, False],
                "indirect": [False, False, True, True, True, False],
            }
        ]
    )
    occ = word_occurrences(s)
    assert [o.positions.tolist() for o in occ] == [[1], [2, 3], [4]]
    sc = scorer(ConstantLM(7)).word_scores(s, occ)
    assert sc["top1"].tolist() == [True, False, True]
    assert sc["top5"].tolist() == [True, False, True]
    # NLL of the favoured token: -log(e^10 / (e^10 + 49)); of another: -log(1 / (e^10 + 49)).
    hit = -math.log(math.exp(10) / (math.exp(10) + V - 1))
    miss = math.log(math.exp(10) + V - 1)
    np.testing.assert_allclose(sc["nll"], [hit, 2 * miss, hit], rtol=1e-5, atol=1e-6)
    # Ties count against the target: 8 and 9 tie with the 48 other tokens below 7.
    assert sc["rank"].tolist() == [1, V, 1]
    # The same through a causal LM: token t is predicted from position t - 1.
    sc = scorer(ConstantLM(7), causal=True).word_scores(s, occ)
    assert sc["top1"].tolist() == [True, False, True] and sc["scored"].all()


def test_identifier_mia_flags_exactly_the_patients_with_a_recovered_indirect_identifier():
    rows = []
    for p, tok, indirect in (("m1", 7, True), ("m2", 8, True), ("n1", 7, True), ("n2", 7, False)):
        rows.append(
            {
                "patient": p,
                "ids": [2, tok, 3],
                "words": [-1, 0, -1],
                "direct": [False, not indirect, False],
                "indirect": [False, indirect, False],
            }
        )
    sm, sn = seqs(rows[:2]), seqs(rows[2:])
    model = scorer(ConstantLM(7))
    sides = {}
    for name, s in (("members", sm), ("non_members", sn)):
        occ = word_occurrences(s)
        sides[name] = _Side(s, occ, np.ones(len(occ), bool), ["x"] * len(occ),
                            model.word_scores(s, occ))  # fmt: skip
    # m1 (member) and n1 (non-member) have a recovered indirect identifier; n2's is direct.
    assert _identifier_mia(sides, sm, sn) == {
        "precision": 0.5,
        "recall": 0.5,
        "f1": 0.5,
        "tp": 1,
        "fp": 1,
        "fn": 1,
        "tn": 1,
    }


def test_membership_masks_are_a_pure_function_of_seed_and_sequence():
    s = seqs(
        [
            {
                "patient": "a",
                "ids": list(range(2, 42)),
                "words": list(range(40)),
                "direct": [False] * 40,
                "indirect": [False] * 40,
            }
        ]
    )
    sc = scorer(ConstantLM(7))
    a = sc._masked_positions(s, 0, seed=0, rnd=0, rounds=1)
    assert len(a) == 6  # round(0.15 × 40)
    assert np.array_equal(a, sc._masked_positions(s, 0, seed=0, rnd=0, rounds=1))
    assert not np.array_equal(a, sc._masked_positions(s, 0, seed=1, rnd=0, rounds=1))
    rounds = [set(sc._masked_positions(s, 0, seed=0, rnd=r, rounds=3).tolist()) for r in range(3)]
    assert not (rounds[0] & rounds[1]) and not (rounds[1] & rounds[2])


@pytest.fixture(scope="module")
def canary_docs(tmp_path_factory, key_file) -> Path:
    root = tmp_path_factory.mktemp("canaries")
    api.synth(root / "docs", patients=12, seed=0)
    key = key_file(hashlib.sha256(b"audit test key").digest())
    api.canaries(root / "docs", root / "with", secret_file=key, n=3, repeats="1,4,16", kinds="mrn")
    return root / "with"


def test_a_canary_the_model_ranks_first_has_exposure_log2_of_its_space(canary_docs, minilm):
    from phisieve.encode.tokenizer import load_tokenizer

    tok = load_tokenizer(minilm)
    table = can.read_canaries(canary_docs).to_pylist()
    c = table[0]
    # A masked LM that puts the true secret's tokens at the masked positions.
    left = tok(c["prefix"].rstrip(), add_special_tokens=False)["input_ids"]
    lead = c["prefix"][len(c["prefix"].rstrip()) :]
    secret = tok(lead + c["secret"], add_special_tokens=False)["input_ids"]
    favour = {1 + len(left) + i: t for i, t in enumerate(secret)}
    model = FakeLM(favour, vocab=len(tok), margin=30.0)
    sc = Scorer(model, causal=False, mask_id=tok.mask_token_id, pad_id=0,
                device=torch.device("cpu"))  # fmt: skip
    result = _canaries(sc, tok, canary_docs, samples=200, seed=0)
    first = next(r for r in result["canaries"] if r["id"] == str(c["canary_id"]))
    assert first["rank"] == 1.0 and first["estimated"] and first["sample"] == 200
    assert first["exposure"] == pytest.approx(math.log2(10**7))
    # A model that knows nothing ranks it like any candidate: all tie, so every sampled
    # candidate counts as "at least as good" and the estimated rank is the whole space.
    flat = Scorer(FakeLM({}, vocab=len(tok)), causal=False, mask_id=tok.mask_token_id,
                  pad_id=0, device=torch.device("cpu"))  # fmt: skip
    result = _canaries(flat, tok, canary_docs, samples=200, seed=0)
    assert all(r["exposure"] == pytest.approx(0.0) for r in result["canaries"])
    assert [r["repeats"] for r in result["by_repeats"]] == [1, 4, 16]


def test_verdict_reads_the_numbers_it_is_given():
    data = {
        "identifiers": {"members": {"overall": {"privacy": 0.5}}},
        "memorisation": {
            "alpha": {"gain": 0.3, "gain_ci": [0.1, 0.5], "gap": 0.2, "gap_ci": [0.0, 0.4]},
            "numeric": {"gain": 0.0, "gain_ci": [-0.1, 0.1], "gap": 0.0, "gap_ci": None},
        },
        "membership": {"patient": {}},
        "identifier_mia": {"recall": None},
    }
    rows = {r["measure"].split(" (")[0]: r["level"] for r in _verdict(data, "mlm")}
    assert rows["Identifier privacy"] == "bad"
    assert rows["Calibrated memorisation gain, names, places"] == "bad"
    assert rows["Calibrated memorisation gain, dates, numbers"] == "ok"
    assert rows["Differential privacy"] == "info"  # no claim
    assert rows["Empirical lower bound on ε per patient"] == "info"  # no canary patients


def test_verdict_checks_a_dp_claim():
    check = {"fpr": 0.1, "tpr": 0.2, "tpr_ci": [0.1, 0.3], "tpr_bound": 0.4, "exceeds": False}
    data = {
        "model": {"dp": {"epsilon": 1.0, "delta": 1e-3, "patients": 50, "accountant": "rdp",
                         "patient_epsilon_by": "accountant"}},
        "identifiers": {"members": {"overall": {"privacy": None}}},
        "memorisation": {"alpha": {"gain": None, "gap": None},
                         "numeric": {"gain": None, "gap": None}},
        "membership": {"patient": {"loss": {"auc": 0.5, "auc_ci": [0.4, 0.6],
                                            "tpr_at_fpr": [{"fpr": 0.01, "tpr": None,
                                                            "negatives": 10,
                                                            "estimable": False}],
                                            "dp_check": [check]}}},
        "identifier_mia": {},
        "canaries": {"canaries": [], "one_run": {"epsilon_lower": 0.4, "canaries": 60,
                                                 "delta": 1e-3,
                                                 "best": {"correct": 20, "guesses": 24}}},
    }  # fmt: skip
    rows = {r["measure"]: r for r in _verdict(data, "ppmlm")}
    claim = rows["Differential privacy: ε per patient (DP-SGD)"]
    assert claim["value"] == 1.0 and "δ = 0.001" in claim["reading"]
    attacks = rows["Patient membership attacks vs the TPR (ε, δ) allows"]
    assert attacks["level"] == "ok" and attacks["value"] == 0.2
    one = rows["Empirical lower bound on ε per patient (one run, 95%)"]
    assert one["level"] == "ok" and one["value"] == 0.4
    assert "20 of 24 guesses right on 60 canary patients, at δ = 0.001" in one["reading"]
    # An attack above the cap, or a lower bound above ε: the claim does not hold.
    check["exceeds"] = True
    data["canaries"]["one_run"]["epsilon_lower"] = 1.5
    rows = {r["measure"]: r for r in _verdict(data, "ppmlm")}
    assert rows["Patient membership attacks vs the TPR (ε, δ) allows"]["level"] == "bad"
    assert rows["Empirical lower bound on ε per patient (one run, 95%)"]["level"] == "bad"


# ---------------------------------------------------------------- real tiny models, end to end


@pytest.fixture(scope="module")
def parts(physionet_docs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("audit") / "splits"
    api.split(physionet_docs, out, fractions="members=0.15,reference=0.7,heldout=0.15")
    return out


@pytest.fixture(scope="module")
def bert_setup(parts, physionet_terms, physionet_spans, minilm, tmp_path_factory):
    from transformers import BertConfig, BertForMaskedLM

    root = tmp_path_factory.mktemp("audit_bert")
    enc = {}
    for name in ("members", "heldout"):
        enc[name] = root / f"enc_{name}"
        encode(parts / name, enc[name], tokenizer=minilm, terms=physionet_terms,
               spans=physionet_spans, max_len=64)  # fmt: skip
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=64,
                     max_position_embeddings=64)  # fmt: skip
    BertForMaskedLM(cfg).save_pretrained(root / "init")
    api.train(enc["members"], root / "mlm", model=root / "init", objective="mlm", max_steps=6,
              batch_size=16, learning_rate=1e-3, pad_to="8")  # fmt: skip
    return SimpleNamespace(root=root, enc=enc, model=root / "mlm", ref=root / "init")


@pytest.mark.slow
def test_audit_of_a_masked_lm_end_to_end(bert_setup, parts, physionet_spans, minilm, tmp_path):
    b = bert_setup
    kw = dict(reference_model=b.ref, tokenizer=minilm, docs=parts / "members",
              spans=physionet_spans, max_identifiers=300, utility_words=200, n_boot=100,
              name_slots=10, name_candidates=300)  # fmt: skip
    m = api.audit(tmp_path / "rep", model=b.model, members=b.enc["members"],
                  non_members=b.enc["heldout"], **kw)  # fmt: skip
    d = read_audit(tmp_path / "rep")
    assert m["stage"] == "audit" and m["options"]["max-identifiers"] == 300
    assert (tmp_path / "rep" / "index.html").is_file()
    ids = d["identifiers"]["members"]
    assert ids["overall"]["n"] == 300
    assert ids["direct"]["n"] + ids["indirect"]["n"] >= 300
    assert ids["alpha"]["n"] + ids["numeric"]["n"] == 300
    assert ids["overall"]["privacy"] == pytest.approx(1 - ids["overall"]["top1"])
    assert 0 <= ids["overall"]["top1"] <= ids["overall"]["top5"] <= 1
    assert d["identifiers"]["utility"]["words"] == 200
    assert d["memorisation"]["alpha"]["gain"] is not None
    lo, hi = d["memorisation"]["alpha"]["gain_ci"]
    assert lo <= d["memorisation"]["alpha"]["gain"] <= hi
    for level in ("sample", "patient"):
        assert set(d["membership"][level]) == {"loss", "reference", "zlib", "min_k", "min_k_pp"}
    p = d["membership"]["patient"]["loss"]
    assert p["members"] == d["data"]["members"]["patients"]
    assert p["non_members"] == d["data"]["non_members"]["patients"]
    # With 12 held-out patients, 1% and 0.1% FPR are not estimable: said, not guessed.
    assert [t["estimable"] for t in p["tpr_at_fpr"]] == [False, False]
    assert all(t["tpr"] is None for t in p["tpr_at_fpr"])
    assert d["inversion"]["slots"] > 0 and set(d["inversion"]["model"]) == {
        "top1", "top10", "top100", "top1000"
    }  # fmt: skip
    assert d["generation"] is None and d["canaries"] is None
    assert d["model"]["objective"] == "mlm" and d["model"]["kind"] == "masked"
    assert len(d["model"]["fingerprint"]) == 64
    assert all("text" not in x for x in d["identifiers"]["top_recovered"])
    # The same seed gives the same numbers (inversion left out: checked above, and slow).
    api.audit(tmp_path / "again", model=b.model, members=b.enc["members"],
              non_members=b.enc["heldout"], **{**kw, "docs": None})  # fmt: skip
    again = read_audit(tmp_path / "again")
    for k in ("identifiers", "memorisation", "membership", "identifier_mia"):
        assert again[k] == d[k], k
    with pytest.raises(OutputExistsError):
        api.audit(tmp_path / "rep", model=b.model, members=b.enc["members"],
                  non_members=b.enc["heldout"], **kw)  # fmt: skip


def test_members_and_non_members_must_not_share_a_patient(bert_setup, minilm, tmp_path):
    b = bert_setup
    with pytest.raises(ConfigError, match="both members and non-members"):
        api.audit(tmp_path / "rep", model=b.model, members=b.enc["members"],
                  non_members=b.enc["members"], tokenizer=minilm)  # fmt: skip
    assert not (tmp_path / "rep").exists()


@pytest.mark.slow
def test_audit_cli_and_compare_open_in_chromium(bert_setup, minilm, tmp_path, capsys):
    from tests.audit.test_audit_report import browser_check

    b = bert_setup
    for name, model in (("mlm", b.model), ("init", b.ref)):
        main(["audit", "--model", str(model), "--members", str(b.enc["members"]),
              "--non-members", str(b.enc["heldout"]), "--tokenizer", str(minilm),
              "--max-identifiers", "100", "--utility-words", "100", "--n-boot", "50",
              "--label", name,
              "--out", str(tmp_path / name), "-q"])  # fmt: skip
        assert f"report: {tmp_path / name / 'index.html'}" in capsys.readouterr().out
    data = json.loads((tmp_path / "mlm" / "audit.json").read_text())
    assert data["model"]["label"] == "mlm" and data["reference_model"] is None
    assert data["memorisation"]["alpha"]["gain"] is None
    assert data["memorisation"]["alpha"]["why"] == "needs --reference-model"
    main(["audit", "--compare", str(tmp_path / "mlm"), str(tmp_path / "init"),
          "--out", str(tmp_path / "cmp")])  # fmt: skip
    assert json.loads((tmp_path / "cmp" / "compare.json").read_text())
    browser_check(tmp_path / "mlm" / "index.html", min_images=3)
    browser_check(tmp_path / "cmp" / "index.html", min_images=2)


def test_audit_of_a_causal_lm(parts, physionet_terms, physionet_spans, bpe_tokenizer, tmp_path):
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    enc = {}
    for name in ("members", "heldout"):
        enc[name] = tmp_path / name
        encode(parts / name, enc[name], tokenizer=bpe_tokenizer, terms=physionet_terms,
               spans=physionet_spans, max_len=64)  # fmt: skip
    tok = AutoTokenizer.from_pretrained(bpe_tokenizer)
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=1, n_head=2,
                     bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                     pad_token_id=tok.pad_token_id)  # fmt: skip
    GPT2LMHeadModel(cfg).save_pretrained(tmp_path / "init")
    api.train(enc["members"], tmp_path / "clm", model=tmp_path / "init", objective="ppclm",
              max_steps=4, batch_size=16, learning_rate=1e-3, pad_to="8")  # fmt: skip
    api.audit(tmp_path / "rep", model=tmp_path / "clm", members=enc["members"],
              non_members=enc["heldout"], tokenizer=bpe_tokenizer, docs=parts / "members",
              max_identifiers=200, utility_words=100, n_boot=50,
              generation_prompts=4)  # fmt: skip
    d = read_audit(tmp_path / "rep")
    assert d["model"]["kind"] == "causal" and d["model"]["objective"] == "ppclm"
    assert d["generation"]["prompts"] == 4 and d["generation"]["tokens"] == 4 * 32
    assert d["inversion"] == {"slots": 0, "why": "model inversion is defined here for masked LMs"}
    assert d["identifiers"]["members"]["overall"]["n"] <= 200
    assert d["identifiers"]["utility"]["perplexity_kind"] == "causal"


@pytest.mark.slow
def test_demo_ends_with_an_audit_report(tmp_path, capsys):
    main(["demo", "--out", str(tmp_path), "--patients", "30", "--steps", "10"])
    printed = capsys.readouterr().out
    page = tmp_path / "report" / "index.html"
    assert f"audit report: {page}" in printed and page.is_file()
    d = json.loads((tmp_path / "report" / "audit.json").read_text())
    assert d["model"]["objective"] == "ppmlm" and d["reference_model"] is not None
    assert d["membership"]["patient"]["loss"]["auc"] is not None
    assert d["memorisation"]["alpha"]["gain"] is not None
    assert d["identifiers"]["members"]["overall"]["privacy"] is not None
    assert d["identifiers"]["utility"]["top1"] is not None
    assert set(d["identifier_mia"]) >= {"precision", "recall", "f1"}
    assert d["inversion"]["slots"] > 0
    assert [r["repeats"] for r in d["canaries"]["by_repeats"]] == [1, 4, 16]
    assert all(r["exposure"] is not None for r in d["canaries"]["canaries"])


def test_inversion_ranks_break_ties_at_random_for_model_and_baseline():
    from phisieve.audit.inversion import _mid_rank, _pairs_at_least

    a, b = np.array([0.0, 1.0, 1.0], np.float32), np.array([0.0, 2.0], np.float32)
    # Pair sums: 0, 2, 1, 3, 1, 3.
    assert _pairs_at_least(a, b, 3.0) == 2 and _pairs_at_least(a, b, 1.0) == 5

    def count(t: float) -> int:
        return _pairs_at_least(a, b, t)

    assert _mid_rank(count, 3.0) == 1.5  # tied with one other pair
    assert _mid_rank(count, 2.0) == 3.0  # two above it, no tie
    assert _mid_rank(lambda t: 1000 if t <= 0 else 0, 0.0) == 500.5  # a flat model
    # float32 scores whose float64 sum is the threshold still count the true pair.
    x, y = np.float32(0.1), np.float32(0.7)
    assert _pairs_at_least(np.array([x]), np.array([y]), float(x) + float(y)) == 1
