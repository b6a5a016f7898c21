"""phisieve.detect.windows: notes cut into overlapping windows that cover every token, the same
with every transformers version (issue 42: 5.17's own cutting dropped the end of long notes)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phisieve.detect.train import aligned, read_annotated
from phisieve.detect.windows import specials, windows
from phisieve.errors import ConfigError


@pytest.fixture(scope="module")
def tok(minilm: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(minilm, local_files_only=True)


def check(tok, texts: list[str], max_length: int, stride: int) -> None:
    """Each note's windows, in order, hold its tokens: ``body`` at most each, every next one
    starting ``stride`` tokens before the last ended, the last ending at its last token."""
    win = windows(tok, texts, max_length, stride)
    before, after = specials(tok)
    body = max_length - len(before) - len(after)
    full = (
        tok(texts, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        if texts
        else {"input_ids": [], "offset_mapping": []}
    )
    assert len(win) >= len(texts)
    assert win.doc.tolist() == sorted(win.doc.tolist())
    assert win.tokens.tolist() == [len(ids) for ids in full["input_ids"]]
    for d, ids in enumerate(full["input_ids"]):
        mine = np.flatnonzero(win.doc == d)
        n = len(ids)
        assert len(mine) == 1 + max(0, math.ceil((n - body) / (body - stride)))
        end = 0
        for k, w in enumerate(mine):
            inside = np.flatnonzero(win.inside[w])
            got = win.input_ids[w, inside].tolist()
            start = k * (body - stride)
            assert got == ids[start : start + body]
            assert win.offsets[w, inside].tolist() == [
                list(o) for o in full["offset_mapping"][d][start : start + body]
            ]
            used = len(before) + len(got) + len(after)
            assert win.input_ids[w, : len(before)].tolist() == before
            assert win.input_ids[w, len(before) + len(got) : used].tolist() == after
            assert win.attention_mask[w].tolist() == [1] * used + [0] * (max_length - used)
            assert not win.offsets[w, ~win.inside[w]].any()
            end = start + len(got)
        assert end == n  # the last token is in a window


@settings(max_examples=40, deadline=None)
@given(
    texts=st.lists(
        st.text(alphabet=st.sampled_from(list("ab cdé\n.,0Z ")), max_size=120), max_size=4
    ),
    max_length=st.integers(3, 24),
    data=st.data(),
)
def test_windows_cover_every_token_in_order(tok, texts, max_length, data) -> None:
    stride = data.draw(st.integers(0, max_length - 3))
    check(tok, texts, max_length, stride)


def test_long_and_empty_notes(tok) -> None:
    check(tok, ["", "   ", "word " * 2_000, "x"], 128, 32)


def test_a_stride_as_long_as_the_window_is_refused(tok) -> None:
    with pytest.raises(ConfigError, match="stride"):
        windows(tok, ["a b c"], 10, 8)
    with pytest.raises(ConfigError, match="no room"):
        windows(tok, ["a b c"], 2, 0)


def test_the_physionet_windows_and_their_alignment_are_pinned(tok, physionet_dir: Path) -> None:
    """The dev notes at detect-train's defaults (128 tokens, 32 of overlap): 4,004 windows, as
    transformers 5.24 cuts them too (5.17 made 2,403 and dropped the end of long notes), and
    every gold span of a PHI category covers a token."""
    documents, gold = read_annotated(physionet_dir)
    texts = [t or "" for t in documents.column("text").to_pylist()]
    win = windows(tok, texts, 128, 32)
    assert len(win) == 4_004
    assert int(win.tokens.sum()) == 349_014
    by_doc = dict(zip(gold.column("doc_id").to_pylist(), gold.column("spans").to_pylist(),
                      strict=True))  # fmt: skip
    spans = [by_doc.get(d) or [] for d in documents.column("doc_id").cast("string").to_pylist()]
    counts = aligned(win, spans)
    assert counts["unaligned_spans"] == 0
    assert counts["aligned_spans"] == counts["gold_spans"] == 999


def test_the_windows_of_a_dataset_do_not_depend_on_batching(tok, physionet_docs: Path) -> None:
    table = ds.dataset(physionet_docs).to_table().slice(0, 40)
    texts = [t or "" for t in table.column("text").to_pylist()]
    whole = windows(tok, texts, 64, 16)
    parts = [windows(tok, texts[i : i + 7], 64, 16) for i in range(0, 40, 7)]
    assert np.array_equal(whole.input_ids, np.concatenate([p.input_ids for p in parts]))
    assert np.array_equal(whole.offsets, np.concatenate([p.offsets for p in parts]))
