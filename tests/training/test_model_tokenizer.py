"""The model tokenizer run from Rust (``_core.ModelTokenizer``) gives exactly the ids and
character offsets of the ``tokenizers`` Python library, for WordPiece and byte-level BPE, on
real notes and on any text; ``encode`` writes the same dataset either way."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

import phisieve.encode.batches as batches
from phisieve.api import encode
from phisieve.encode.tokenizer import _encode_texts, _splittable, rust_tokenizer
from phisieve.errors import ConfigError


def backend(path) -> Tokenizer:
    tok = Tokenizer.from_file(str(path / "tokenizer.json" if path.is_dir() else path))
    tok.no_truncation()
    tok.no_padding()
    tok.encode_special_tokens = True
    return tok


@pytest.fixture(scope="module")
def tokenizers(minilm, bpe_tokenizer):
    return {"wordpiece": backend(minilm), "bpe": backend(bpe_tokenizer)}


def same(tok: Tokenizer, texts: list[str]) -> None:
    split = _splittable(tok)
    rust = rust_tokenizer(tok)
    assert rust is not None
    want = _encode_texts(tok, texts, split)
    got = _encode_texts(tok, texts, split, rust)
    for w, g in zip(want, got, strict=True):
        assert w.dtype == g.dtype and np.array_equal(w, g)


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_same_tokens_on_the_notes(tokenizers, physionet_dir, kind):
    text = (physionet_dir / "id.text").read_text(encoding="utf-8", errors="replace")
    texts = [text[i : i + 4000] for i in range(0, len(text), 4000)]
    texts += ["", "[SEP] [MASK] [CLS] <|endoftext|>", "x" * 200_000, "word " * 40_000]
    same(tokenizers[kind], texts)


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(st.text(max_size=200), min_size=1, max_size=8))
def test_same_tokens_on_any_text(tokenizers, texts):
    for tok in tokenizers.values():
        same(tok, texts)


def test_encode_writes_the_same_dataset_either_way(physionet_docs, physionet_terms, minilm,
                                                   tmp_path, monkeypatch):  # fmt: skip
    encode(physionet_docs, tmp_path / "rust", tokenizer=minilm, terms=physionet_terms, max_len=128)
    monkeypatch.setattr(batches, "rust_tokenizer", lambda backend: None)
    encode(
        physionet_docs, tmp_path / "python", tokenizer=minilm, terms=physionet_terms, max_len=128
    )
    assert pq.read_table(tmp_path / "rust").equals(pq.read_table(tmp_path / "python"))


def test_a_tokenizer_json_it_cannot_read_falls_back():
    class Odd:
        def to_str(self) -> str:
            return '{"version": "1.0", "model": {"type": "NoSuchModel"}}'

    assert rust_tokenizer(Odd()) is None
    with pytest.raises(ConfigError, match=r"not a tokenizer\.json"):
        from phisieve import _core

        _core.ModelTokenizer("{")
