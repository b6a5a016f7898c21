"""Mask sampling in Rust against the plain-Python reference, and its guarantees."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from phisieve import ConfigError
from phisieve.training.masking import OBJECTIVES, MaskingConfig, make_batch, objective
from tests.reference import sample_row

LONGEST = 90
"""The most tokens :func:`sequences` draws (30 words of 3 tokens): a batch this long fits any."""


@st.composite
def sequences(draw: st.DrawFn) -> dict:
    """A sequence: words of 1-3 tokens and stray non-word tokens, with random flags."""
    ids, words, prot, direct, indirect = [], [], [], [], []
    w = 0
    for _ in range(draw(st.integers(0, 30))):
        if draw(st.booleans()) and draw(st.booleans()):
            ids.append(draw(st.integers(0, 9)))
            words.append(-1)
            prot.append(False)
            direct.append(False)
            indirect.append(False)
            continue
        d, x = draw(st.booleans()) and draw(st.booleans()), draw(st.integers(0, 4)) == 0
        for _ in range(draw(st.integers(1, 3))):
            ids.append(draw(st.integers(10, 999)))
            words.append(w)
            direct.append(d)
            indirect.append(x)
            prot.append(d or x)
        w += 1
    return {
        "input_ids": ids,
        "word_ids": words,
        "protected": prot,
        "direct": direct,
        "indirect": indirect,
    }


def batch_of(rows: list[dict], seq_ids: list[int]) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "seq_id": pa.array(seq_ids, pa.uint64()),
            "input_ids": pa.array([r["input_ids"] for r in rows], pa.list_(pa.uint32())),
            "word_ids": pa.array([r["word_ids"] for r in rows], pa.list_(pa.int32())),
            "protected": pa.array([r["protected"] for r in rows], pa.list_(pa.bool_())),
            "direct": pa.array([r["direct"] for r in rows], pa.list_(pa.bool_())),
            "indirect": pa.array([r["indirect"] for r in rows], pa.list_(pa.bool_())),
        }
    )


KEY = {"all": "protected", "direct": "direct", "indirect": "indirect"}


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(sequences(), min_size=1, max_size=5),
    name=st.sampled_from(sorted(OBJECTIVES)),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 50),
    probability=st.sampled_from([0.0, 0.15, 0.5, 1.0]),
    mask_only=st.booleans(),
)
def test_rust_sampler_equals_reference(rows, name, seed, epoch, probability, mask_only):
    obj = OBJECTIVES[name]
    seq_ids = [seed % 1000 + 7 * i for i in range(len(rows))]
    m = MaskingConfig(probability=probability, mask_only=mask_only)
    out = make_batch(
        batch_of(rows, seq_ids),
        obj,
        length=100,
        pad_id=1,
        mask_id=5,
        vocab_size=1000,
        seed=seed,
        epoch=epoch,
        masking=m,
    )
    for r, row in enumerate(rows):
        blocked = (
            row[KEY[obj.protect]] if obj.protect != "nothing" else [False] * len(row["input_ids"])
        )
        ids, att, lab = sample_row(
            seq_ids[r],
            row["input_ids"],
            row["word_ids"],
            blocked,
            causal=obj.causal,
            length=100,
            probability=probability,
            replace_mask=1.0 if mask_only else 0.8,
            replace_random=0.0 if mask_only else 0.1,
            mask_id=5,
            pad_id=1,
            vocab_size=1000,
            seed=seed,
            epoch=epoch,
        )
        assert out["input_ids"][r].tolist() == ids
        assert out["attention_mask"][r].tolist() == att
        assert out["labels"][r].tolist() == lab


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(sequences(), min_size=1, max_size=6), seed=st.integers(0, 2**32))
def test_ppmlm_never_targets_protected_exact_budget_whole_words(rows, seed):
    out = make_batch(
        batch_of(rows, list(range(len(rows)))),
        objective("ppmlm"),
        length=100,
        pad_id=0,
        mask_id=5,
        vocab_size=1000,
        seed=seed,
        epoch=0,
    )
    for r, row in enumerate(rows):
        labels = out["labels"][r]
        n = len(row["input_ids"])
        targets = labels[:n] != -100
        assert not (targets & np.array(row["protected"], bool)).any()
        assert (labels[n:] == -100).all()
        words = np.array(row["word_ids"])
        blocked = {w for w, p in zip(row["word_ids"], row["protected"], strict=True) if p}
        eligible = {w for w in row["word_ids"] if w >= 0} - blocked
        chosen = set(words[targets].tolist())
        assert len(chosen) == int(0.15 * len(eligible) + 0.5)
        for w in chosen:  # whole words
            assert targets[words == w].all()
        assert (labels[:n][targets] == np.array(row["input_ids"])[targets]).all()


def longest_row() -> dict:
    """The longest row :func:`sequences` can draw, every word protected but none direct."""
    words = [w for w in range(LONGEST // 3) for _ in range(3)]
    flags = [True] * LONGEST
    return {"input_ids": [10 + w for w in words], "word_ids": words, "protected": flags,
            "direct": [False] * LONGEST, "indirect": flags}  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(sequences(), min_size=1, max_size=6), seed=st.integers(0, 2**32))
@example(rows=[longest_row()], seed=0)  # a full-length batch (CI once drew 65 tokens for 64)
def test_causal_labels_are_inputs_except_protected_and_padding(rows, seed):
    b = batch_of(rows, list(range(len(rows))))
    for name, key in (("ppclm", "protected"), ("clm", None), ("dpp-clm", "direct")):
        out = make_batch(
            b,
            objective(name),
            length=LONGEST,
            pad_id=0,
            mask_id=None,
            vocab_size=1000,
            seed=seed,
            epoch=0,
        )
        for r, row in enumerate(rows):
            n = len(row["input_ids"])
            expect = [-100 if key and row[key][i] else row["input_ids"][i] for i in range(n)] + [
                -100
            ] * (LONGEST - n)
            assert out["labels"][r].tolist() == expect
            assert out["input_ids"][r][:n].tolist() == row["input_ids"]


def plain_row(n: int, start: int = 1) -> dict:
    """n one-token words, nothing protected."""
    return {
        "input_ids": list(range(start, start + n)),
        "word_ids": list(range(n)),
        "protected": [False] * n,
        "direct": [False] * n,
        "indirect": [False] * n,
    }


def sample(b: pa.RecordBatch, name: str = "mlm", **options) -> dict:
    """make_batch with small defaults (mask id 5, 9 tokens, seed 0, epoch 0)."""
    defaults = {"pad_id": 0, "mask_id": 5, "vocab_size": 9, "seed": 0, "epoch": 0}
    return make_batch(b, objective(name), **{**defaults, **options})


def test_draws_depend_on_seq_id_not_on_batch():
    rows = [plain_row(40, start=10)] * 4
    options = {"length": 40, "vocab_size": 99, "seed": 1}
    together = sample(batch_of(rows, [3, 4, 5, 6]), epoch=2, **options)
    alone = sample(batch_of(rows[:1], [5]), epoch=2, **options)
    assert (together["labels"][2] == alone["labels"][0]).all()
    assert not (together["labels"][0] == together["labels"][1]).all()
    other_epoch = sample(batch_of(rows[:1], [5]), epoch=3, **options)
    assert not (other_epoch["labels"][0] == alone["labels"][0]).all()


def test_bad_batches_are_clear_errors():
    row = plain_row(3)
    b = batch_of([row], [0])
    with pytest.raises(ConfigError, match="more than the batch length"):
        sample(b, length=2)
    bad = batch_of([{**row, "word_ids": [0, 2, 2]}], [0])
    with pytest.raises(ConfigError, match="row 0"):
        sample(bad, length=4)
    short = b.set_column(2, "word_ids", pa.array([[0, 1]], pa.list_(pa.int32())))
    with pytest.raises(ConfigError, match="word_ids"):
        sample(short, length=4)
    with pytest.raises(ConfigError, match="mask token"):
        sample(b, length=4, mask_id=None)
    with pytest.raises(ConfigError, match="probability"):
        sample(b, length=4, masking=MaskingConfig(probability=1.5))
    with pytest.raises(ConfigError, match="unknown objective"):
        objective("bert")
    assert objective("dpp", causal=True).name == "dpp-clm"
    with pytest.raises(ConfigError, match="masked LM"):
        objective("ppmlm", causal=True)


def test_columns_with_different_offsets_give_the_same_rows():
    row = plain_row(6, start=20)
    b = batch_of([row], [4])
    # word_ids and protected sliced out of larger arrays: same rows, different offsets.
    words = pa.array([[0, 0, 0], row["word_ids"]], pa.list_(pa.int32())).slice(1)
    flags = pa.array([[True], row["protected"]], pa.list_(pa.bool_())).slice(1)
    shifted = b.set_column(2, "word_ids", words).set_column(3, "protected", flags)
    for name in ("mlm", "ppmlm", "ppclm"):
        a, c = sample(b, name, length=8, seed=3), sample(shifted, name, length=8, seed=3)
        for k in a:
            assert (a[k] == c[k]).all(), (name, k)
