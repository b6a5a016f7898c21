"""The encode stage: model tokens mapped to phisieve's words, flags, per-patient packing."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from phisieve import InputError, normalize_word, read_terms
from phisieve.encode import ENCODED, encode, load_tokenizer, read_encoding
from tests import reference as ref


def read(path: Path) -> pa.Table:
    return pq.read_table(path)


@pytest.mark.parametrize("which", ["encoded_bert", "encoded_gpt"])
def test_encoded_flags_match_the_blacklist(which, request, physionet_docs, physionet_terms):
    enc_path = request.getfixturevalue(which)
    enc = read(enc_path)
    assert enc.schema.equals(ENCODED)
    info = read_encoding(enc_path)
    assert info["max_len"] == 128
    docs = read(physionet_docs)
    texts = dict(zip(docs["doc_id"].to_pylist(), docs["text"].to_pylist(), strict=True))
    owner = dict(zip(docs["doc_id"].to_pylist(), docs["patient_id"].to_pylist(), strict=True))
    terms = read_terms(physionet_terms)
    indirect = set(terms.filter(pc.field("indirect"))["term"].to_pylist())
    tok = load_tokenizer(info["tokenizer"])
    backend = copy.deepcopy(tok.backend_tokenizer)
    backend.no_truncation()
    backend.no_padding()
    # Every sequence: one patient, <= max_len tokens, word ids 0.. in order.
    lengths = pc.list_value_length(enc["input_ids"]).to_numpy()
    assert lengths.max() <= 128 and lengths.min() > 0
    for patient, doc_ids in zip(
        enc["patient_id"].to_pylist(), enc["doc_ids"].to_pylist(), strict=True
    ):
        assert {owner[d] for d in doc_ids} == {patient}
    # Concatenating a document's tokens across sequences gives exactly its tokenisation, and a
    # token is indirect iff a word it overlaps is a blacklisted term.
    first = enc["doc_ids"].to_pylist()
    ids = enc["input_ids"].to_pylist()
    flags = enc["indirect"].to_pylist()
    checked = 0
    for doc in list(texts)[:40]:
        rows = [i for i, d in enumerate(first) if doc in d]
        text = texts[doc]
        e = backend.encode(text, add_special_tokens=False)
        spans = ref.word_spans(text)
        expect_flags = []
        for s, t in e.offsets:
            over = [text[a:b] for a, b in spans if a < t and b > s] if t > s else []
            expect_flags.append(any(ref.normalize(w) in indirect for w in over))
        got_ids, got_flags = [], []
        specials = set(tok.all_special_ids)
        for r in rows:
            for i, f in zip(ids[r], flags[r], strict=True):
                got_ids.append(i)
                got_flags.append(f)
        # Drop the special tokens and the other documents' tokens in shared sequences.
        pos = 0
        matched_ids, matched_flags = [], []
        for i, f in zip(got_ids, got_flags, strict=True):
            if pos < len(e.ids) and i == e.ids[pos] and i not in specials:
                matched_ids.append(i)
                matched_flags.append(f)
                pos += 1
        assert matched_ids == e.ids
        assert matched_flags == expect_flags
        checked += 1
    assert checked == 40
    assert pc.sum(pc.list_flatten(enc["indirect"])).as_py() > 0


def test_whole_words_and_sequences_never_mix_patients(encoded_bert):
    enc = read(encoded_bert)
    for words in enc["word_ids"].to_pylist()[:300]:
        seen = [w for w in words if w >= 0]
        # consecutive numbering, each word's tokens adjacent
        runs = [w for i, w in enumerate(words) if w >= 0 and (i == 0 or words[i - 1] != w)]
        assert runs == sorted(set(seen)) == list(range(len(set(seen))))


def test_direct_spans_mark_the_patient_words_and_pseudonymize(physionet_docs, minilm, tmp_path):
    docs = read(physionet_docs).slice(0, 30)
    text = docs["text"][0].as_py()
    start, end = ref.word_spans(text)[3]
    word = text[start:end]
    spans = pa.table(
        {
            "doc_id": [docs["doc_id"][0].as_py()],
            "spans": pa.array(
                [[{"start": start, "end": end, "label": "NAME", "source": "gold", "score": 1.0}]]
            ),
        }
    )
    pq.write_table(spans, tmp_path / "spans.parquet")
    m = encode(docs, tmp_path / "enc", minilm, spans=tmp_path / "spans.parquet", max_len=64)
    enc = read(tmp_path / "enc")
    assert m["direct"] > 0 and m["protected"] == m["direct"]
    tok = load_tokenizer(minilm)
    word_tokens = set(tok.backend_tokenizer.encode(word, add_special_tokens=False).ids)
    patient = docs["patient_id"][0].as_py()
    for p, ids, d in zip(
        enc["patient_id"].to_pylist(),
        enc["input_ids"].to_pylist(),
        enc["direct"].to_pylist(),
        strict=True,
    ):
        if p != patient:
            assert not any(d)
        else:
            assert all(i in word_tokens for i, f in zip(ids, d, strict=True) if f)
    p = encode(
        docs,
        tmp_path / "pseudo",
        minilm,
        spans=tmp_path / "spans.parquet",
        max_len=64,
        pseudonymize=True,
    )
    assert p["direct"] == 0 and read_encoding(tmp_path / "pseudo")["pseudonymized"]
    assert p["documents"] == m["documents"]
    norm = normalize_word(word)
    x_id = tok.convert_tokens_to_ids("x")
    seq = read(tmp_path / "pseudo")["input_ids"].to_pylist()
    assert any(x_id in s for s in seq)
    assert norm != "x"


def test_packing_carries_patients_across_batches_and_keeps_the_short_tail(minilm, tmp_path):
    docs = pa.table(
        {
            "doc_id": [f"d{i}" for i in range(7)],
            "patient_id": ["a", "a", "a", "b", "b", "c", "c"],
            "text": [
                "alpha beta gamma " * 10,
                "delta",
                "",
                "epsilon zeta",
                "eta " * 40,
                "theta",
                "iota kappa",
            ],
        }
    )
    for batch in (1, 3, 100):
        from phisieve.dataset import open_source
        from phisieve.encode import encode_batches

        tok = load_tokenizer(minilm)
        out = pa.Table.from_batches(list(encode_batches(open_source(docs, batch), tok, max_len=16)))
        if batch == 1:
            first = out
        assert out.equals(first)
    pats = out["patient_id"].to_pylist()
    assert pats == sorted(pats)  # grouped, never mixed
    assert out["seq_id"].to_pylist() == list(range(out.num_rows))
    for ids in out["input_ids"].to_pylist():
        assert ids[0] == 101 and ids[-1] == 102 and len(ids) <= 16
    assert out.filter(pc.equal(out["patient_id"], "c"))["doc_ids"].to_pylist() == [["d5", "d6"]]


def test_bad_input_is_a_clear_error(minilm, tmp_path):
    docs = pa.table({"doc_id": ["d"], "patient_id": ["p"], "txt": ["secret words"]})
    with pytest.raises(InputError, match="text") as e:
        encode(docs, tmp_path / "o", minilm)
    assert "secret" not in str(e.value)
    with pytest.raises(InputError, match="tokenizer"):
        encode(docs, tmp_path / "o", tmp_path / "nothing")
    with pytest.raises(InputError, match="encoded dataset"):
        read_encoding(tmp_path)
    arr = np.zeros(1)
    assert arr.size == 1
