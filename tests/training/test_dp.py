"""Patient-level DP-SGD (DESIGN.md §6): each patient's gradient clipped to C, noise of std σC,
Poisson sampling of patients, the accountant's ε for the patient, δ < 1/N, reproducible
with a key whatever the loader's workers."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from phisieve.cli import main
from phisieve.encode import ENCODED
from phisieve.errors import ConfigError
from phisieve.io.dataset import side_file
from phisieve.pipeline.runner import run_stage, write_dataset
from phisieve.training.dp import (
    DPConfig,
    PrivateGradient,
    default_delta,
    epsilon,
    epsilon_curve,
    freeze_for_dp,
    group_epsilon,
    noise_for_epsilon,
    sequence_losses,
)
from phisieve.training.loaders import PoissonSteps, PrivacyMaskingCollator
from phisieve.training.loop import TrainConfig
from phisieve.training.masking import MaskingConfig
from phisieve.training.stage import TrainStage

PAD, CLS, SEP, MASK = 0, 1, 2, 3
VOCAB = 40
KEY = bytes(range(32))
PATIENT_SEQUENCES = (1, 2, 3, 5, 1, 4, 2, 6, 3, 1, 2, 2, 5, 1, 3, 2)
"""Sequences of each of the 16 patients (some above the caps the tests use)."""


def _rows(seed: int, patients: tuple[int, ...]) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for p, count in enumerate(patients):
        for _ in range(count):
            n = rng.randint(4, 9)
            ids = [CLS, *[rng.randint(4, VOCAB - 1) for _ in range(n)], SEP]
            words = [-1, *range(n), -1]
            flags = [False] * len(ids)
            rows.append(
                {
                    "seq_id": len(rows),
                    "patient_id": f"p{p:02d}",
                    "doc_ids": [f"d{len(rows)}"],
                    "input_ids": ids,
                    "word_ids": words,
                    "protected": flags,
                    "direct": flags,
                    "indirect": flags,
                }
            )
    return rows


ENCODING = {
    "max_len": 12,
    "vocab_size": VOCAB,
    "pad_token_id": PAD,
    "mask_token_id": MASK,
    "pseudonymized": False,
    "with_terms": True,
    "with_spans": True,
}


@pytest.fixture(scope="module")
def dp_data(tmp_path_factory) -> Path:
    """16 patients of 1-6 random sequences each."""
    out = tmp_path_factory.mktemp("dp") / "encoded"
    table = pa.Table.from_pylist(_rows(0, PATIENT_SEQUENCES), schema=ENCODED)
    write_dataset(table, out, stage="encode", encoding=ENCODING)
    return out


def tiny_bert(seed: int = 0) -> torch.nn.Module:
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(seed)
    return BertForMaskedLM(
        BertConfig(
            vocab_size=VOCAB,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=16,
            pad_token_id=PAD,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
    )


def batch_of(rows: list[dict], units: list[int]) -> dict:
    collator = PrivacyMaskingCollator(ENCODING, "mlm", masking=MaskingConfig(probability=0.5))
    out = collator(pa.Table.from_pylist(rows, schema=ENCODED).to_batches()[0])
    out["units"] = torch.tensor(units)
    return out


def reference_clipped_sum(model, batch, clip: float) -> tuple[list[torch.Tensor], list[float]]:
    """Plain per-unit loop: each unit's gradient of the mean of its sequences' losses, by an
    ordinary backward pass, scaled to norm at most ``clip``, then summed."""
    params = [p for p in model.parameters() if p.requires_grad]
    total = [torch.zeros_like(p) for p in params]
    norms = []
    units = batch["units"]
    for u in units.unique().tolist():
        rows = (units == u).nonzero().flatten()
        model.zero_grad()
        logits = model(
            input_ids=batch["input_ids"][rows], attention_mask=batch["attention_mask"][rows]
        ).logits
        sequence_losses(logits, batch["labels"][rows], causal=False).mean().backward()
        grads = [p.grad.detach().clone() for p in params]
        norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))
        norms.append(norm)
        scale = min(1.0, clip / (norm + 1e-6))
        for t, g in zip(total, grads, strict=True):
            t += scale * g
    model.zero_grad()
    return total, norms


def flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.flatten() for t in tensors])


def test_clipped_sum_is_the_sum_of_clipped_patient_gradients_and_a_patient_moves_it_by_c():
    rows = _rows(1, (3, 1, 2, 4))
    units = [0, 0, 0, 1, 2, 2, 3, 3, 3, 3]
    batch = batch_of(rows, units)
    model = tiny_bert()
    freeze_for_dp(model)
    model.train()
    clip = 1e-3  # below every patient's gradient norm: each one is clipped
    expected, norms = reference_clipped_sum(model, batch, clip)
    assert min(norms) > 10 * clip
    # Chunks of 3 sequences: patient 0 fills one, patient 3 spans two.
    private = PrivateGradient(
        model, causal=False, max_grad_norm=clip, noise_multiplier=0.0, max_physical_batch=3
    )
    got, got_norms = private.clipped_sum(batch)
    assert torch.allclose(got_norms, torch.tensor(norms), rtol=1e-4)
    assert torch.allclose(flat(got), flat(expected), atol=1e-9, rtol=1e-4)
    # Removing patient 2 (the neighbouring dataset the accountant counts: add or remove one
    # patient) moves the sum by exactly that patient's clipped gradient: norm C.
    fewer, _ = private.clipped_sum(batch_of(rows[:4] + rows[6:], [0, 0, 0, 1, 2, 2, 2, 2]))
    removed = float((flat(fewer) - flat(got)).norm())
    assert removed == pytest.approx(clip, rel=1e-4) and removed <= clip * (1 + 1e-5)
    # Replacing patient 2's sequences by arbitrary other ones is a removal and an addition:
    # at most 2C, whatever they hold.
    for seed in range(5):
        other = _rows(99 + seed, (7,))[: 1 + seed % 3]
        changed = rows[:4] + other + rows[6:]
        units_changed = [0, 0, 0, 1] + [2] * len(other) + [3, 3, 3, 3]
        moved, _ = private.clipped_sum(batch_of(changed, units_changed))
        assert 0 < float((flat(moved) - flat(got)).norm()) <= 2 * clip * (1 + 1e-5)
    private.close()


def test_noise_has_standard_deviation_sigma_times_c():
    model = tiny_bert()
    freeze_for_dp(model)
    for secure in (False, True):
        private = PrivateGradient(
            model, causal=False, max_grad_norm=0.4, noise_multiplier=1.5, noise_seed=3,
            secure_mode=secure,
        )  # fmt: skip
        noise = private.noise(torch.zeros(400_000))
        assert float(noise.std()) == pytest.approx(0.6, rel=0.01)
        assert abs(float(noise.mean())) < 0.005
        private.close()
    a = PrivateGradient(model, causal=False, max_grad_norm=1, noise_multiplier=1, noise_seed=5)
    first = a.noise(torch.zeros(10))
    a.close()
    b = PrivateGradient(model, causal=False, max_grad_norm=1, noise_multiplier=1, noise_seed=5)
    assert torch.equal(first, b.noise(torch.zeros(10)))  # the same key, the same noise
    assert not torch.equal(b.noise(torch.zeros(10)), first)  # and fresh at each step
    b.close()


def test_poisson_steps_sample_patients_at_rate_q_and_cap_their_sequences(dp_data):
    steps = PoissonSteps(dp_data, "mlm", sample_rate=0.25, key=11, max_per_patient=2, steps=4)
    assert steps.units == steps.patients == 16 and steps.sequences == sum(PATIENT_SEQUENCES)
    counts = np.array([len(steps.sampled(s)) for s in range(4000)])
    assert abs(counts.mean() - 4.0) < 3 * math.sqrt(16 * 0.25 * 0.75 / 4000)
    for s in range(50):
        rows, units = steps.rows(s)
        patients = steps.table.column("patient_id").take(pa.array(rows)).to_pylist()
        assert np.all(np.diff(units) >= 0)  # grouped by unit
        for u in np.unique(units):
            mine = {patients[i] for i in np.flatnonzero(units == u)}
            assert len(mine) == 1 and (units == u).sum() <= 2
        assert torch.equal(steps.batch(s)["units"], torch.from_numpy(units))
    # A pure function of the key and the step.
    again = PoissonSteps(dp_data, "mlm", sample_rate=0.25, key=11, max_per_patient=2)
    assert all(np.array_equal(again.rows(s)[0], steps.rows(s)[0]) for s in range(20))
    other = PoissonSteps(dp_data, "mlm", sample_rate=0.25, key=12, max_per_patient=2)
    assert any(not np.array_equal(other.rows(s)[0], steps.rows(s)[0]) for s in range(20))
    # Sequence unit: at most m sequences of a patient in the training set, each a unit.
    seqs = PoissonSteps(dp_data, "mlm", unit="sequence", sample_rate=0.5, max_per_patient=2)
    per = {}
    for p in seqs.table.column("patient_id").to_pylist():
        per[p] = per.get(p, 0) + 1
    assert max(per.values()) == 2 and seqs.units == sum(min(2, n) for n in PATIENT_SEQUENCES)


def dp_config(**kw) -> TrainConfig:
    options = {
        "objective": "mlm",
        "batch_size": 4,
        "max_steps": 6,
        "learning_rate": 1e-2,
        "device": "cpu",
        "dp": DPConfig(max_per_patient=3, secret=KEY),
    }
    options.update(kw)
    return TrainConfig(**options)


def test_accountant_gives_opacus_epsilon_for_patients(dp_data, tmp_path):
    from opacus.accountants import PRVAccountant, RDPAccountant

    s = run_stage(TrainStage.of(dp_config(), tiny_bert()), {"encoded": dp_data}, tmp_path / "a")
    dp = s["dp"]
    assert dp["unit"] == "patient" and dp["patients"] == 16 and dp["steps"] == 6
    assert dp["sample_rate"] == pytest.approx(4 / 16)
    assert dp["delta"] == pytest.approx(16**-1.1) == default_delta(16)
    rdp = RDPAccountant()
    rdp.history = [(1.0, 4 / 16, 6)]
    assert dp["epsilon"] == pytest.approx(rdp.get_epsilon(16**-1.1), rel=1e-12)
    assert dp["noise_multiplier"] == 1.0 and dp["accountant_version"].startswith("opacus ")
    assert json.loads(side_file(tmp_path / "a", "train.json").read_text())["dp"] == dp
    # PRV, and a target ε: the noise is chosen so that the accountant gives at most it.
    cfg = dp_config(dp=DPConfig(max_per_patient=3, secret=KEY, accountant="prv"))
    prv = run_stage(TrainStage.of(cfg, tiny_bert()), {"encoded": dp_data}, tmp_path / "b")["dp"]
    acc = PRVAccountant()
    acc.history = [(1.0, 0.25, 6)]
    assert prv["epsilon"] == pytest.approx(acc.get_epsilon(16**-1.1), rel=1e-9)
    cfg = dp_config(dp=DPConfig(max_per_patient=3, secret=KEY, target_epsilon=2.0))
    hit = run_stage(TrainStage.of(cfg, tiny_bert()), {"encoded": dp_data}, tmp_path / "c")["dp"]
    assert 1.98 <= hit["epsilon"] <= 2.0 and hit["target_epsilon"] == 2.0
    assert hit["noise_multiplier"] == pytest.approx(noise_for_epsilon(2.0, 0.25, 6, 16**-1.1))


def test_the_same_key_and_seed_give_the_same_model_with_0_and_2_workers(dp_data, tmp_path):
    zero = run_stage(
        TrainStage.of(dp_config(num_workers=0), tiny_bert()), {"encoded": dp_data}, tmp_path / "w0"
    )
    two = run_stage(
        TrainStage.of(dp_config(num_workers=2), tiny_bert()), {"encoded": dp_data}, tmp_path / "w2"
    )
    a = (tmp_path / "w0" / "model.safetensors").read_bytes()
    assert a == (tmp_path / "w2" / "model.safetensors").read_bytes()
    assert zero["final_loss"] == two["final_loss"]
    # The model moved, and without a key the noise is fresh: another model.
    init = tmp_path / "init"
    tiny_bert().save_pretrained(init)
    assert a != (init / "model.safetensors").read_bytes()
    fresh = run_stage(
        TrainStage.of(dp_config(dp=DPConfig(max_per_patient=3)), tiny_bert()),
        {"encoded": dp_data},
        tmp_path / "f",
    )
    assert fresh["dp"]["randomness"] == "fresh"
    assert (tmp_path / "f" / "model.safetensors").read_bytes() != a


def test_sequence_unit_reports_the_patients_epsilon_by_group_privacy(dp_data, tmp_path):
    cfg = dp_config(dp=DPConfig(unit="sequence", max_per_patient=2, secret=KEY))
    dp = run_stage(TrainStage.of(cfg, tiny_bert()), {"encoded": dp_data}, tmp_path / "s")["dp"]
    assert dp["unit"] == "sequence" and dp["units"] == sum(min(2, n) for n in PATIENT_SEQUENCES)
    q = 4 / dp["units"]
    assert dp["sample_rate"] == pytest.approx(q)
    assert dp["sequence"]["epsilon"] == pytest.approx(epsilon(1.0, q, 6, 16**-1.1))

    assert (dp["epsilon"], dp["delta"]) == group_epsilon(epsilon_curve(1.0, q, 6), 2, 16**-1.1)
    assert dp["epsilon"] > 2 * dp["sequence"]["epsilon"] and dp["delta"] <= 16**-1.1
    assert "group privacy over at most 2" in dp["patient_epsilon_by"]


def test_group_epsilon_is_group_privacy_at_the_best_delta():
    # A Gaussian mechanism's (ε, δ) curve, σ = 4: group k gives (kε_u, k e^((k-1)ε_u) δ_u).
    def eps_at(d: float) -> float:
        return math.sqrt(2 * math.log(1.25 / d)) / 4

    eps, delta = group_epsilon(eps_at, 3, 1e-5)
    assert delta <= 1e-5
    # Brute force over a fine grid of δ_u: nothing feasible does better than the grid's best
    # by more than the grid's step.
    best = min(
        3 * eps_at(d)
        for d in np.exp(np.linspace(math.log(1e-5 / 3) - 100, math.log(1e-5 / 3), 20000))
        if 3 * math.exp(2 * eps_at(d)) * d <= 1e-5
    )
    assert best <= eps <= best * 1.01
    assert group_epsilon(eps_at, 1, 1e-5) == (eps_at(1e-5), 1e-5)


def test_dp_options_are_checked(dp_data, tmp_path):
    bad = [
        ({"unit": "visit"}, "patient or sequence"),
        ({"accountant": "gdp"}, "rdp or prv"),
        ({"max_grad_norm": 0}, "clipping norm"),
        ({"noise_multiplier": 1.0, "target_epsilon": 3.0}, "not both"),
        ({"unit": "sequence", "max_per_patient": None}, "cap"),
        ({"unit": "sequence", "target_epsilon": 3.0}, "group privacy"),
        ({"delta": 1 / 16}, "not below 1/N"),
    ]
    for options, message in bad:
        with pytest.raises(ConfigError, match=message):
            run_stage(
                TrainStage.of(dp_config(dp=DPConfig(**options)), tiny_bert()),
                {"encoded": dp_data},
                tmp_path / "x",
            )
        assert not (tmp_path / "x").exists()


def test_cli_refuses_delta_at_or_above_one_over_n(dp_data, tmp_path, capsys):
    model = tmp_path / "init"
    tiny_bert().save_pretrained(model)
    args = ["train", str(dp_data), "--model", str(model), "--objective", "mlm", "--dp"]
    with pytest.raises(SystemExit) as e:
        main([*args, "--delta", "0.07", "--out", str(tmp_path / "m")])
    assert e.value.code == 2
    text = " ".join(capsys.readouterr().err.split())
    assert "δ = 0.07" in text and "1/N = 0.0625" in text and "N = 16 patients" in text
    assert not (tmp_path / "m").exists()
    key = tmp_path / "key"
    key.write_text(KEY.hex())
    main([*args, "--max-steps", "2", "--secret-file", str(key), "--out", str(tmp_path / "m")])
    assert "per patient" in " ".join(capsys.readouterr().out.split())
    dp = json.loads(side_file(tmp_path / "m", "train.json").read_text())["dp"]
    assert dp["unit"] == "patient" and dp["delta"] < 1 / 16 and dp["randomness"] == "key"


def test_private_gradient_needs_the_output_layer_frozen():
    # It applies the (frozen) output layer at the labelled positions only; a trainable one
    # would get per-position, not per-sequence, gradients.
    with pytest.raises(ConfigError, match="output layer frozen"):
        PrivateGradient(tiny_bert(), causal=False, max_grad_norm=1.0, noise_multiplier=1.0)
    model = tiny_bert()
    frozen = freeze_for_dp(model)
    assert (
        "cls.predictions.decoder.weight" in frozen
        and "bert.embeddings.word_embeddings.weight" in frozen
    )
    assert not any("encoder" in n for n in frozen)
    PrivateGradient(model, causal=False, max_grad_norm=1.0, noise_multiplier=1.0).close()


def test_gpt2_trains_its_conv1d_layers_under_dp():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=16, n_layer=1,
                                       n_head=2))  # fmt: skip
    frozen = freeze_for_dp(model)
    assert frozen == ["transformer.wte.weight", "transformer.wpe.weight", "lm_head.weight"]
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert "transformer.h.0.attn.c_attn.weight" in trainable  # Conv1D, by Opacus' functorch
