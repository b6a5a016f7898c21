"""The output layer applied at labelled positions only gives the full computation's loss and
gradients, for masked and causal LMs, in ``train`` too; a model it cannot serve falls back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from phisieve.io.dataset import side_file
from phisieve.pipeline.runner import run_stage
from phisieve.training.loaders import MaskedBatches
from phisieve.training.loop import TrainConfig, load_model
from phisieve.training.sparse_head import SparseHead
from phisieve.training.stage import TrainStage


def first_batch(encoded: Path, objective: str, size: int = 8) -> dict:
    batches = MaskedBatches(encoded, objective, batch_size=size, shuffle=False, seed=3, pad_to=8)
    batch = next(iter(batches))
    return {k: v for k, v in batch.items() if k != "seq_id"}


def loss_and_grads(model, batch: dict, sparse: bool, causal: bool):
    model.zero_grad(set_to_none=True)
    head = SparseHead(model, causal) if sparse else None
    loss = head.loss(batch) if head else model(**batch).loss
    loss.backward()
    if head:
        head.close()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


def assert_same(model, batch: dict, causal: bool) -> None:
    model.eval()  # no dropout: both passes see the same network
    dense, dense_grads = loss_and_grads(model, batch, False, causal)
    sparse, sparse_grads = loss_and_grads(model, batch, True, causal)
    assert torch.isfinite(dense)
    torch.testing.assert_close(sparse, dense, rtol=1e-5, atol=1e-6)
    assert sparse_grads.keys() == dense_grads.keys()
    for name, g in dense_grads.items():
        torch.testing.assert_close(sparse_grads[name], g, rtol=1e-4, atol=1e-6, msg=name)


def test_same_loss_and_gradients_masked(minilm, encoded_bert):
    batch = first_batch(encoded_bert, "ppmlm")
    labelled = int((batch["labels"] != -100).sum())
    assert 0 < labelled < batch["labels"].numel() // 4  # the sparse case: a few positions
    assert_same(load_model(minilm, causal=False), batch, causal=False)


@pytest.mark.parametrize("objective", ["ppclm", "clm"])
def test_same_loss_and_gradients_causal(encoded_gpt, bpe_tokenizer, objective):
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tok = AutoTokenizer.from_pretrained(bpe_tokenizer)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=len(tok), n_positions=128, n_embd=32, n_layer=1, n_head=2)
    )
    batch = first_batch(encoded_gpt, objective)
    assert_same(model, batch, causal=True)


@pytest.mark.parametrize("causal", [False, True])
def test_sequence_losses_are_each_rows_mean_over_its_labels(causal, encoded_bert, encoded_gpt):
    """DP-SGD's per-row losses: each row's own mean cross-entropy (0 for a row with no
    label), the same as the full projection's, and the sparse path is really taken."""
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    from phisieve.training.dp import sequence_losses

    torch.manual_seed(0)
    if causal:
        batch = first_batch(encoded_gpt, "ppclm")
        model = GPT2LMHeadModel(GPT2Config(vocab_size=2000, n_positions=128, n_embd=32,
                                           n_layer=1, n_head=2))  # fmt: skip
    else:
        batch = first_batch(encoded_bert, "ppmlm")
        model = BertForMaskedLM(BertConfig(vocab_size=30522, hidden_size=32,
                                           num_hidden_layers=1, num_attention_heads=2,
                                           intermediate_size=64))  # fmt: skip
    batch["labels"][1] = -100  # a row with nothing to predict
    model.eval()
    head = SparseHead(model, causal)
    seen = []
    head._handle.remove()
    head._handle = model.get_output_embeddings().register_forward_pre_hook(
        lambda m, a: seen.append(head._index is not None) or head._gather(m, a)
    )
    with torch.no_grad():
        got = head.sequence_losses(batch)
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        full = sequence_losses(model(**inputs).logits, batch["labels"], causal)
    assert seen == [True, False]  # gathered, then the full reference pass
    assert got.shape == (8,) and got[1] == 0.0
    torch.testing.assert_close(got, full, rtol=1e-5, atol=1e-6)
    head.close()


def test_no_target_gives_nan_as_the_full_loss_does(minilm, encoded_bert):
    model = load_model(minilm, causal=False).eval()
    batch = first_batch(encoded_bert, "ppmlm", size=2)
    batch["labels"] = torch.full_like(batch["labels"], -100)
    with torch.no_grad():
        assert torch.isnan(model(**batch).loss)
        assert torch.isnan(SparseHead(model, False).loss(batch))


def test_train_with_and_without_the_sparse_head(minilm, encoded_bert, tmp_path):
    def run(sparse: bool) -> tuple[list[float], dict]:
        torch.manual_seed(0)  # MiniLM's masked-LM head is new: initialised at load
        model = load_model(minilm, causal=False)
        cfg = TrainConfig(
            objective="ppmlm", batch_size=4, max_steps=3, learning_rate=1e-4, device="cpu",
            seed=1, sparse_output=sparse,
        )  # fmt: skip
        out = tmp_path / f"sparse-{sparse}"
        summary = run_stage(TrainStage.of(cfg, model), {"encoded": encoded_bert}, out)
        assert summary["sparse_output"] is sparse
        lines = side_file(out, "metrics.jsonl").read_text().splitlines()
        params = {n: p.detach() for n, p in model.named_parameters()}
        return [json.loads(x)["loss"] for x in lines], params

    sparse_losses, sparse_params = run(True)
    dense_losses, dense_params = run(False)
    assert len(sparse_losses) == 3
    # Dropout draws the same masks in both runs (same seed, same calls): only rounding differs.
    assert sparse_losses == pytest.approx(dense_losses, rel=1e-4)
    for name, p in dense_params.items():
        torch.testing.assert_close(sparse_params[name], p, rtol=1e-3, atol=1e-5, msg=name)


class Reshaping(torch.nn.Module):
    """A toy LM whose forward reshapes its logits to (batch, length, vocabulary)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(20, 8)
        self.out = torch.nn.Linear(8, 20)

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.out

    def forward(self, input_ids, attention_mask=None, labels=None):
        from types import SimpleNamespace

        b, t = input_ids.shape
        logits = self.out(self.embed(input_ids)).view(b, t, 20)
        loss = None
        if labels is not None:
            loss = torch.nn.functional.cross_entropy(logits.view(-1, 20), labels.view(-1))
        return SimpleNamespace(logits=logits, loss=loss)


def test_a_model_that_reshapes_its_logits_falls_back_to_the_full_projection():
    torch.manual_seed(0)
    model = Reshaping()
    ids = torch.randint(0, 20, (2, 6))
    labels = torch.full_like(ids, -100)
    labels[0, 1], labels[1, 4] = 3, 7
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    head = SparseHead(model, causal=False)
    assert head.active
    loss = head.loss(batch)
    assert not head.active  # fell back, for good
    torch.testing.assert_close(loss, model(**batch).loss)
    torch.testing.assert_close(head.loss(batch), model(**batch).loss)
