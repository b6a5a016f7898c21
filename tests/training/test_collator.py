"""PrivacyMaskingCollator on the rows a ``transformers.Trainer`` hands it: Python lists (read
in Rust, straight into the sampler), numpy arrays or tensors, each giving exactly the batch
that the Arrow path gives; bad rows are refused with where; a real ``Trainer`` trains with it
and never targets a protected token."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from phisieve.encode import ENCODED
from phisieve.errors import InputError, PhisieveError
from phisieve.training.loaders import PrivacyMaskingCollator
from phisieve.training.masking import OBJECTIVES

ENCODING = {
    "max_len": 24,
    "vocab_size": 50,
    "pad_token_id": 0,
    "mask_token_id": 3,
    "pseudonymized": True,
    "with_terms": True,
    "with_spans": True,
    "direct_terms": 1,
}


@st.composite
def encoded_rows(draw) -> list[dict]:
    rows = []
    for s in range(draw(st.integers(1, 6))):
        ids, words, flags = [], [], {"protected": [], "direct": [], "indirect": []}
        w = 0
        for _ in range(draw(st.integers(0, 8))):
            if draw(st.booleans()):  # a token outside any word
                pieces, word = 1, -1
            else:
                pieces, word = draw(st.integers(1, 3)), w
                w += 1
            d, i = draw(st.booleans()), draw(st.booleans())
            for _ in range(pieces):
                ids.append(draw(st.integers(4, 49)))
                words.append(word)
                flags["direct"].append(d and word >= 0)
                flags["indirect"].append(i and word >= 0)
                flags["protected"].append((d or i) and word >= 0)
        seq_id = draw(st.integers(0, 2**63))
        rows.append(
            {"seq_id": seq_id, "patient_id": f"p{s}", "doc_ids": [f"d{s}"], "input_ids": ids,
             "word_ids": words, **flags}
        )  # fmt: skip
    return rows


def as_arrays(rows: list[dict], kind: str) -> list[dict]:
    conv = {"numpy": np.asarray, "torch": torch.tensor}[kind]
    out = []
    for r in rows:
        r = dict(r)
        for name in ("input_ids", "word_ids", "protected", "direct", "indirect"):
            r[name] = conv(r[name]) if r[name] else conv(np.zeros(0, np.int64))
        out.append(r)
    return out


@settings(max_examples=150, deadline=None)
@given(
    rows=encoded_rows(),
    name=st.sampled_from(sorted(OBJECTIVES)),
    pad_to=st.sampled_from(["max_len", 8]),
    seed=st.integers(0, 2**32),
)
def test_lists_arrays_and_arrow_give_the_same_batch(rows, name, pad_to, seed):
    coll = PrivacyMaskingCollator(ENCODING, name, seed=seed, pad_to=pad_to, return_seq_ids=True)
    arrow = pa.Table.from_pylist(rows, schema=ENCODED).combine_chunks().to_batches()[0]
    expected = coll(arrow)  # the Arrow path: make_batch over all three flag columns
    for given_rows in (rows, as_arrays(rows, "numpy"), as_arrays(rows, "torch")):
        got = coll(given_rows)
        assert got.keys() == expected.keys()
        for k in expected:
            assert torch.equal(got[k], expected[k]), k


def test_bad_rows_are_refused_with_where_and_without_their_values():
    coll = PrivacyMaskingCollator(ENCODING, "ppmlm")
    good = {"seq_id": 1, "input_ids": [5, 6], "word_ids": [0, 1], "protected": [False, True],
            "direct": [False, False], "indirect": [False, True]}  # fmt: skip
    with pytest.raises(PhisieveError, match="remove_unused_columns=False"):
        coll([{k: v for k, v in good.items() if k != "word_ids"}])
    with pytest.raises(InputError, match=r"row 1, column 'word_ids'"):
        coll([good, {k: v for k, v in good.items() if k != "word_ids"}])
    for column, value in [
        ("input_ids", [5, -7]),
        ("input_ids", [5, 2**40]),
        ("input_ids", [5, "SECRETNAME"]),
        ("word_ids", [0, None]),
        ("protected", [False, 1]),
        ("input_ids", "SECRETNAME"),
    ]:
        with pytest.raises(InputError) as e:
            coll([good, {**good, column: value}])
        assert "SECRETNAME" not in str(e.value) and "-7" not in str(e.value)
    with pytest.raises(PhisieveError, match="word_ids must number words"):
        coll([{**good, "word_ids": [1, 0]}])
    with pytest.raises(PhisieveError, match="differ in length"):
        coll([{**good, "protected": [False]}])


def test_the_torch_extra_installs_what_trainer_needs():
    from importlib import metadata

    from packaging.requirements import Requirement

    requires = [Requirement(r) for r in metadata.requires("phisieve") or []]
    torch_extra = {r.name for r in requires if r.marker and r.marker.evaluate({"extra": "torch"})}
    assert {"torch", "transformers", "accelerate"} <= torch_extra
    from transformers.utils import is_accelerate_available

    assert is_accelerate_available()


def test_a_real_trainer(encoded_bert, minilm, tmp_path):
    """``transformers.Trainer`` over ``datasets.load_dataset("parquet", ...)``, as the
    collator's docstring says: it trains, and no protected token is ever a label."""
    import datasets
    from transformers import BertForMaskedLM, Trainer, TrainingArguments

    from phisieve.io.dataset import dataset_files

    files = [str(f) for f in dataset_files(encoded_bert)]
    ds = datasets.load_dataset("parquet", data_files=files, split="train")
    protected = {s: np.asarray(p, bool) for s, p in zip(ds["seq_id"], ds["protected"], strict=True)}
    assert sum(int(p.sum()) for p in protected.values()) > 100

    collator = PrivacyMaskingCollator(encoded_bert, "ppmlm", seed=0, return_seq_ids=True)
    seen = {"batches": 0, "labels": 0}

    def checked(rows):
        batch = collator(rows)
        for row, s in enumerate(batch.pop("seq_id").tolist()):
            flags = torch.from_numpy(protected[s])
            labels = batch["labels"][row, : len(flags)]
            assert (labels[flags] == -100).all()
            seen["labels"] += int((labels != -100).sum())
        seen["batches"] += 1
        return batch

    torch.manual_seed(0)
    model = BertForMaskedLM.from_pretrained(minilm)
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        max_steps=3,
        learning_rate=1e-4,
        remove_unused_columns=False,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_steps=1,
        dataloader_num_workers=0,
        seed=0,
    )
    result = Trainer(model=model, args=args, train_dataset=ds, data_collator=checked).train()
    assert result.global_step == 3 and np.isfinite(result.training_loss)
    assert seen["batches"] >= 3 and seen["labels"] > 0


def test_trainer_rows_are_python_lists(encoded_bert):
    """The fast path is the one Trainer takes: ``datasets`` rows hold Python lists."""
    import datasets

    from phisieve.io.dataset import dataset_files

    files = [str(f) for f in dataset_files(encoded_bert)]
    ds = datasets.load_dataset("parquet", data_files=files, split="train")
    rows = ds.__getitems__([0, 1]) if hasattr(ds, "__getitems__") else [ds[0], ds[1]]
    assert type(rows[0]["input_ids"]) is list
    coll = PrivacyMaskingCollator(encoded_bert, "ppmlm", seed=2, return_seq_ids=True)
    table = pq.read_table(encoded_bert).slice(0, 2).combine_chunks().to_batches()[0]
    for k, v in coll(table).items():
        assert torch.equal(coll(rows)[k], v)
