"""Two guards against the tied-embedding leak of privacy objectives (DESIGN.md §4): protected
words hidden from the input (``hide_protected_input``) and an untied output layer
(``untie_output``)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from phisieve.encode import ENCODED, read_encoding
from phisieve.errors import ConfigError
from phisieve.io.dataset import dataset_files
from phisieve.pipeline.runner import run_stage, write_dataset
from phisieve.training.loaders import MaskedBatches
from phisieve.training.loop import DPConfig, TrainConfig, load_model, untie_output_embeddings
from phisieve.training.masking import MaskingConfig, make_batch, objective
from phisieve.training.stage import TrainStage

PAD, CLS, SEP, MASK = 0, 1, 2, 3
SECRET = 39
"""A token that occurs only inside protected words: never a target."""
VOCAB = 40


def rows_batch(rows: list[dict], seq_ids: list[int]) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "seq_id": pa.array(seq_ids, pa.uint64()),
            **{
                name: pa.array([r[name] for r in rows], ENCODED.field(name).type)
                for name in ("input_ids", "word_ids", "protected", "direct", "indirect")
            },
        }
    )


def row(ids, words, direct, indirect) -> dict:
    return {
        "input_ids": ids,
        "word_ids": words,
        "direct": direct,
        "indirect": indirect,
        "protected": [d or x for d, x in zip(direct, indirect, strict=True)],
    }


F, T = False, True
# Row A: word 0 = tokens 1-2, its 2nd token direct; word 1 = token 3, indirect; word 2 = 4-5.
ROW_A = row(
    [CLS, 10, 11, 12, 13, 14, SEP],
    [-1, 0, 0, 1, 2, 2, -1],
    [F, F, T, F, F, F, F],
    [F, F, F, T, F, F, F],
)
ROW_B = row([CLS, 20, 21, SEP], [-1, 0, 1, -1], [F, F, F, F], [F, F, T, F])
DUMMY = row([CLS, 30, SEP], [-1, 0, -1], [F, T, F], [F, T, F])
# The hidden (row, position) of each protection: every token of a word with a flagged token.
HIDDEN = {
    "ppmlm": {(0, 1), (0, 2), (0, 3), (1, 2)},
    "dpp": {(0, 1), (0, 2)},
    "ipp": {(0, 3), (1, 2)},
    "ppclm": {(0, 1), (0, 2), (0, 3), (1, 2)},
}


@pytest.mark.parametrize("name", ["ppmlm", "dpp", "ipp", "ppclm"])
def test_hidden_positions_hand_made(name):
    # A sliced batch (offsets not starting at 0), rows of different lengths, padded to 9.
    batch = rows_batch([DUMMY, ROW_A, ROW_B], [5, 6, 7]).slice(1)
    obj = objective(name)
    mask_id = None if obj.causal else MASK  # causal without a mask token: the padding token
    common = {"length": 9, "pad_id": PAD, "mask_id": mask_id, "vocab_size": VOCAB, "epoch": 1}
    m = MaskingConfig(probability=0.5)
    off = make_batch(batch, obj, seed=4, masking=m, **common)
    on = make_batch(
        batch,
        obj,
        seed=4,
        masking=MaskingConfig(probability=0.5, hide_protected_input=True),
        **common,
    )
    hidden = np.zeros((2, 9), bool)
    for r, p in HIDDEN[name]:
        hidden[r, p] = True
    assert (on["input_ids"][hidden] == (PAD if obj.causal else MASK)).all()
    assert (on["input_ids"][~hidden] == off["input_ids"][~hidden]).all()
    assert (off["input_ids"][hidden] != on["input_ids"][hidden]).all()  # they were visible
    assert (on["labels"] == off["labels"]).all()
    assert (on["attention_mask"] == off["attention_mask"]).all()
    assert on["attention_mask"][hidden].all()  # hidden, not padding


def test_hide_protected_input_needs_a_privacy_objective(encoded_bert):
    m = MaskingConfig(hide_protected_input=True)
    batch = rows_batch([ROW_A], [0])
    with pytest.raises(ConfigError, match="protects nothing"):
        make_batch(
            batch,
            objective("mlm"),
            length=8,
            pad_id=0,
            mask_id=3,
            vocab_size=40,
            seed=0,
            epoch=0,
            masking=m,
        )
    with pytest.raises(ConfigError, match="protects nothing"):
        MaskedBatches(encoded_bert, "mlm", masking=m)


def reference_hidden(rows: pa.Table, flag: str, length: int) -> np.ndarray:
    """Plain-Python reference: every token whose flag is set or whose word has a flagged
    token."""
    out = np.zeros((rows.num_rows, length), bool)
    for r, (words, flags) in enumerate(
        zip(rows.column("word_ids").to_pylist(), rows.column(flag).to_pylist(), strict=True)
    ):
        flagged = {w for w, f in zip(words, flags, strict=True) if f and w >= 0}
        for i, (w, f) in enumerate(zip(words, flags, strict=True)):
            out[r, i] = f or (w >= 0 and w in flagged)
    return out


def first_rows(path: Path, n: int) -> pa.Table:
    return pq.read_table(dataset_files(path)[0]).slice(0, n)


@pytest.mark.parametrize(
    ("name", "flag"), [("ppmlm", "protected"), ("dpp", "direct"), ("ipp", "indirect")]
)
def test_real_batches_hide_every_protected_word(encoded_bert, name, flag):
    def batch(hide: bool) -> dict:
        m = MaskingConfig(hide_protected_input=hide)
        loader = MaskedBatches(
            encoded_bert, name, batch_size=32, shuffle=False, seed=3, pad_to=8, masking=m
        )
        return next(iter(loader))

    on, off = batch(True), batch(False)
    rows = first_rows(encoded_bert, 32)  # shuffle=False: the first batch is the first rows
    hidden = reference_hidden(rows, flag, on["input_ids"].shape[1])
    assert hidden.sum() > 20
    assert (on["input_ids"][torch.from_numpy(hidden)] == mask_of(encoded_bert)).all()
    visible = torch.from_numpy(~hidden)
    assert torch.equal(on["input_ids"][visible], off["input_ids"][visible])
    assert torch.equal(on["labels"], off["labels"])
    assert torch.equal(on["attention_mask"], off["attention_mask"])


def mask_of(path: Path) -> int:
    return read_encoding(path)["mask_token_id"]


def test_real_causal_batches_hide_with_the_padding_token(encoded_gpt):
    enc = read_encoding(encoded_gpt)
    assert enc["mask_token_id"] is None
    m = MaskingConfig(hide_protected_input=True)
    on = next(iter(MaskedBatches(encoded_gpt, "ppclm", batch_size=16, shuffle=False, masking=m)))
    off = next(iter(MaskedBatches(encoded_gpt, "ppclm", batch_size=16, shuffle=False)))
    hidden = torch.from_numpy(reference_hidden(first_rows(encoded_gpt, 16), "protected", 128))
    assert int(hidden.sum()) > 20
    assert (on["input_ids"][hidden] == enc["pad_token_id"]).all()
    assert torch.equal(on["input_ids"][~hidden], off["input_ids"][~hidden])
    assert torch.equal(on["labels"], off["labels"])


# --------------------------------------------------------------------------------------------
# untie_output


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory) -> Path:
    """24 sequences of random words (ids 4-30, one or two tokens), each holding SECRET as an
    indirect identifier (protected) and a direct identifier (ids 31-34)."""
    rng = random.Random(0)
    rows = []
    for s in range(24):
        ids, words, direct, indirect = [CLS], [-1], [F], [F]
        n = rng.randint(5, 8)
        where = rng.sample(range(n), 2)
        for w in range(n):
            if w == where[0]:
                toks, d, x = [SECRET], F, T
            elif w == where[1]:
                toks, d, x = [rng.randint(31, 34)], T, F
            else:
                toks, d, x = [rng.randint(4, 30) for _ in range(rng.randint(1, 2))], F, F
            ids += toks
            words += [w] * len(toks)
            direct += [d] * len(toks)
            indirect += [x] * len(toks)
        ids.append(SEP)
        words.append(-1)
        direct.append(F)
        indirect.append(F)
        r = row(ids, words, direct, indirect)
        rows.append({"seq_id": s, "patient_id": f"p{s % 6}", "doc_ids": [f"d{s}"], **r})
    table = pa.Table.from_pylist(rows, schema=ENCODED)
    encoding = {
        "max_len": 20,
        "vocab_size": VOCAB,
        "pad_token_id": PAD,
        "mask_token_id": MASK,
        "pseudonymized": False,
        "with_terms": True,
        "with_spans": True,
        "direct_terms": 1,
    }
    out = tmp_path_factory.mktemp("tiny") / "encoded"
    write_dataset(table, out, stage="encode", encoding=encoding)
    return out


def tiny_bert() -> torch.nn.Module:
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    model = BertForMaskedLM(
        BertConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=32,
            pad_token_id=PAD,
        )
    )
    # Softmax moves every output row a little (p_j · h), targets or not. A bias of -1e4 makes
    # SECRET's probability exactly 0 in float32, so its output row gets no gradient from the
    # output side: whatever moves it comes through the input.
    with torch.no_grad():
        model.get_output_embeddings().bias[SECRET] = -1e4
    return model


def tiny_config(masking: dict | None = None, **kw) -> TrainConfig:
    options = {
        "objective": "ppmlm",
        "batch_size": 8,
        "max_steps": 4,
        "learning_rate": 1e-2,
        "weight_decay": 0.0,
        "device": "cpu",
        **kw,
    }
    return TrainConfig(masking=MaskingConfig(mask_only=True, **(masking or {})), **options)


def embeddings(model) -> tuple[torch.Tensor, torch.Tensor]:
    return (
        model.get_input_embeddings().weight.detach().clone(),
        model.get_output_embeddings().weight.detach().clone(),
    )


def test_untie_output_stops_the_leak_through_tied_embeddings(tiny_data, tmp_path):
    initial, _ = embeddings(tiny_bert())
    word = 10  # a word that is a target

    tied = tiny_bert()
    s = run_stage(
        TrainStage.of(tiny_config(untie_output=False), tied),
        {"encoded": tiny_data},
        tmp_path / "tied",
    )
    inp, out = embeddings(tied)
    assert s["output_untied"] is False and torch.equal(inp, out)
    assert not torch.equal(out[SECRET], initial[SECRET])  # the leak: it moved

    untied = tiny_bert()
    s = run_stage(
        TrainStage.of(tiny_config(untie_output=True), untied),
        {"encoded": tiny_data},
        tmp_path / "untied",
    )
    assert s["output_untied"] is True and s["config"]["untie_output"] is True
    inp, out = embeddings(untied)
    assert not torch.equal(inp, out)
    assert not torch.equal(inp[SECRET], initial[SECRET])  # trained as context
    assert torch.equal(out[SECRET], initial[SECRET])  # never a target: exactly as it was
    assert not torch.equal(out[word], initial[word])  # the targets did train

    # Reloaded from disk: still untied, the trained weights and output bias.
    again = load_model(tmp_path / "untied", causal=False)
    assert again.config.tie_word_embeddings is False
    assert again.get_output_embeddings().weight is not again.get_input_embeddings().weight
    assert torch.equal(again.get_output_embeddings().weight, out)
    assert torch.equal(again.get_input_embeddings().weight, inp)
    assert torch.equal(
        again.get_output_embeddings().bias, untied.get_output_embeddings().bias.detach()
    )

    # Hiding protected words from the input also keeps SECRET's (tied) row unchanged.
    hidden = tiny_bert()
    config = tiny_config(masking={"hide_protected_input": True}, untie_output=False)
    s = run_stage(TrainStage.of(config, hidden), {"encoded": tiny_data}, tmp_path / "hidden")
    assert s["masking"]["hide_protected_input"] is True
    inp, out = embeddings(hidden)
    assert torch.equal(out[SECRET], initial[SECRET]) and torch.equal(inp, out)


@pytest.mark.parametrize(
    ("objective", "dp", "untied"),
    [
        ("ppmlm", False, True),
        ("dpp", False, True),
        ("ipp", False, True),
        ("mlm", False, False),  # protects nothing: nothing to untie for
        ("ppmlm", True, False),  # DP-SGD freezes both embeddings
    ],
)
def test_untie_output_by_default_for_protecting_masked_objectives(
    tiny_data, tmp_path, objective, dp, untied
):
    model = tiny_bert()
    config = tiny_config(objective=objective, max_steps=1, dp=DPConfig() if dp else None)
    s = run_stage(TrainStage.of(config, model), {"encoded": tiny_data}, tmp_path / "m")
    assert s["config"]["untie_output"] is None
    assert s["untie_output"] is untied and s["output_untied"] is untied
    inp, out = embeddings(model)
    assert torch.equal(inp, out) is not untied
    assert load_model(tmp_path / "m", causal=False).config.tie_word_embeddings is not untied


def tiny_gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(
        GPT2Config(
            vocab_size=VOCAB,
            n_positions=32,
            n_embd=32,
            n_layer=1,
            n_head=2,
            bos_token_id=SEP,
            eos_token_id=SEP,
            pad_token_id=PAD,
        )
    )


def test_untie_output_gpt2(tiny_data, tmp_path):
    model = tiny_gpt2()
    batch = {"input_ids": torch.tensor([[CLS, 5, 6, 7, SEP]])}
    model.eval()
    before = model(**batch).logits
    s = run_stage(
        TrainStage.of(tiny_config(objective="ppclm", untie_output=True), model),
        {"encoded": tiny_data},
        tmp_path / "m",
    )
    assert s["objective"] == "ppclm" and s["output_untied"] is True
    inp, out = embeddings(model)
    assert not torch.equal(inp, out)
    again = load_model(tmp_path / "m", causal=True)
    assert again.get_output_embeddings().weight is not again.get_input_embeddings().weight
    assert torch.equal(again.get_output_embeddings().weight, out)
    assert torch.equal(again.get_input_embeddings().weight, inp)
    again.eval()
    assert not torch.allclose(again(**batch).logits, before)

    # Causal objectives keep the tie by default (untying did not help them: RESULTS.md).
    model = tiny_gpt2()
    s = run_stage(
        TrainStage.of(tiny_config(objective="ppclm", max_steps=1), model),
        {"encoded": tiny_data},
        tmp_path / "d",
    )
    assert s["untie_output"] is False and s["output_untied"] is False
    assert torch.equal(*embeddings(model))


def test_untie_output_is_refused_under_dp(tiny_data, tmp_path):
    with pytest.raises(ConfigError, match="DP-SGD"):
        run_stage(
            TrainStage.of(tiny_config(untie_output=True, dp=DPConfig()), tiny_bert()),
            {"encoded": tiny_data},
            tmp_path / "a",
        )
    with pytest.raises(ConfigError, match="protects nothing"):
        config = tiny_config(objective="mlm", masking={"hide_protected_input": True})
        run_stage(TrainStage.of(config, tiny_bert()), {"encoded": tiny_data}, tmp_path / "b")


def test_untying_changes_no_output_and_is_idempotent():
    model = tiny_bert().eval()
    batch = {"input_ids": torch.tensor([[CLS, 5, 6, SECRET, SEP]])}
    before = model(**batch).logits
    untied = untie_output_embeddings(model)
    assert untied is not None and len(untied.aliases) == 1  # BERT's doubled output bias
    assert model.get_output_embeddings().weight is not model.get_input_embeddings().weight
    assert torch.equal(model(**batch).logits, before)
    assert untie_output_embeddings(model) is None  # nothing tied any more
