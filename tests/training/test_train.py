"""Fine-tuning with every objective on the CPU: the loss goes down; DP-SGD reports ε."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from phisieve.api import encode
from phisieve.cli import main
from phisieve.io.dataset import read_manifest, side_file
from phisieve.pipeline.runner import run_stage
from phisieve.training.loaders import MaskedBatches
from phisieve.training.loop import DPConfig, TrainConfig, load_model
from phisieve.training.stage import TrainStage


@pytest.fixture(scope="module")
def pseudo_bert(physionet_docs, minilm, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("enc") / "pseudo"
    encode(physionet_docs, out, tokenizer=minilm, max_len=128, pseudonymize=True)
    return out


@pytest.fixture(scope="module")
def pseudo_gpt(physionet_docs, bpe_tokenizer, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("enc") / "pseudo_gpt"
    encode(physionet_docs, out, tokenizer=bpe_tokenizer, max_len=128, pseudonymize=True)
    return out


@pytest.fixture(scope="module")
def tiny_gpt2(bpe_tokenizer, tmp_path_factory) -> Path:
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tok = AutoTokenizer.from_pretrained(bpe_tokenizer)
    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=len(tok),
        n_positions=128,
        n_embd=64,
        n_layer=2,
        n_head=2,
        bos_token_id=tok.eos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    out = tmp_path_factory.mktemp("gpt2")
    GPT2LMHeadModel(cfg).save_pretrained(out)
    return out


def eval_loss(model, encoded: Path, objective: str) -> float:
    batch = next(
        iter(MaskedBatches(encoded, objective, batch_size=16, shuffle=False, seed=9, pad_to=8))
    )
    model.eval()
    with torch.no_grad():
        loss = float(model(**batch).loss)
    model.train()
    return loss


@pytest.mark.parametrize("objective", ["ppmlm", "mlm", "mlma", "dpp", "ipp"])
def test_minilm_loss_decreases(objective, minilm, encoded_bert, pseudo_bert, tmp_path):
    data = pseudo_bert if objective == "mlma" else encoded_bert
    model = load_model(minilm, causal=False)
    before = eval_loss(model, data, objective)
    out = tmp_path / "model"
    s = run_stage(
        TrainStage.of(
            TrainConfig(
                objective=objective, batch_size=8, max_steps=8, learning_rate=2e-4, pad_to=8
            ),
            model,
        ),
        {"encoded": data},
        out,
    )
    after = eval_loss(model, data, objective)
    assert s["steps"] == 8 and s["objective"] == objective
    assert after < before - 0.5, (before, after)
    # The model folder holds the model; the log and the summary are beside it.
    lines = side_file(out, "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == list(range(1, 9))
    assert (out / "model.safetensors").exists() and not (out / "metrics.jsonl").exists()
    assert read_manifest(out)["kind"] == "folder"


@pytest.mark.parametrize("objective", ["ppclm", "clm", "clma", "dpp", "ipp"])
def test_tiny_gpt2_loss_decreases(objective, tiny_gpt2, encoded_gpt, pseudo_gpt, tmp_path):
    data = pseudo_gpt if objective == "clma" else encoded_gpt
    model = load_model(tiny_gpt2, causal=True)
    name = {"dpp": "dpp-clm", "ipp": "ipp-clm"}.get(objective, objective)
    before = eval_loss(model, data, name)
    s = run_stage(
        TrainStage.of(
            TrainConfig(
                objective=objective,
                batch_size=8,
                max_steps=8,
                learning_rate=1e-2,
                pad_to=8,
                grad_accumulation=2,
            ),
            model,
        ),
        {"encoded": data},
        tmp_path / "model",
    )
    assert s["objective"] == name
    after = eval_loss(model, data, name)
    assert after < before - 0.5, (before, after)


def test_dp_sgd_on_minilm_reports_a_patients_epsilon(minilm, encoded_bert, tmp_path):
    """Patient-level DP-SGD on a real BERT: the patient is the unit, δ = 1/N^1.1, and more
    steps spend more privacy."""
    cfg = TrainConfig(
        objective="ppmlm",
        batch_size=4,
        max_steps=2,
        pad_to=8,
        dp=DPConfig(noise_multiplier=1.0, max_per_patient=3, secret=bytes(range(32))),
    )
    s = run_stage(
        TrainStage.of(cfg), {"encoded": encoded_bert, "model": minilm}, tmp_path / "model"
    )
    dp = s["dp"]
    assert dp["unit"] == "patient" and dp["patients"] == 82 and dp["units"] == 82
    assert dp["delta"] == pytest.approx(1 / 82**1.1) and dp["delta"] < 1 / 82
    assert dp["sample_rate"] == pytest.approx(4 / 82) and dp["steps"] == 2
    assert 0 < dp["epsilon"] < 10 and dp["max_per_patient"] == 3
    assert dp["randomness"] == "key" and dp["accountant"] == "rdp"
    assert "bert.embeddings.word_embeddings.weight" in dp["frozen"]
    cfg.max_steps = 4
    again = run_stage(
        TrainStage.of(cfg), {"encoded": encoded_bert, "model": minilm}, tmp_path / "more"
    )
    assert again["dp"]["epsilon"] > dp["epsilon"]  # more steps spend more privacy


def test_cli_encode_and_train(
    physionet_docs, physionet_terms, tiny_gpt2, bpe_tokenizer, tmp_path, capsys
):
    main(
        [
            "encode",
            str(physionet_docs),
            "--out",
            str(tmp_path / "enc"),
            "--tokenizer",
            str(bpe_tokenizer),
            "--terms",
            str(physionet_terms),
            "--max-len",
            "64",
            "--quiet",
        ]
    )
    assert "sequences" in capsys.readouterr().out
    main(
        [
            "train",
            str(tmp_path / "enc"),
            "--model",
            str(tiny_gpt2),
            "--out",
            str(tmp_path / "m"),
            "--objective",
            "ppclm",
            "--max-steps",
            "2",
        ]
    )
    out = capsys.readouterr().out
    assert "ppclm: 2 steps on cpu" in out
    assert json.loads(side_file(tmp_path / "m", "train.json").read_text())["steps"] == 2
