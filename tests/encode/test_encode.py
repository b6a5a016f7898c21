"""The encode stage: model tokens mapped to phisieve's words, flags, per-patient packing."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from phisieve import InputError, normalize_word, read_terms
from phisieve.api import encode
from phisieve.encode import ENCODED, load_tokenizer, read_encoding
from phisieve.io.schema import SPANS
from phisieve.pipeline.runner import write_dataset
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
    m = encode(
        docs, tmp_path / "enc", tokenizer=minilm, spans=tmp_path / "spans.parquet", max_len=64
    )
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
        tokenizer=minilm,
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
        from phisieve.encode import encode_batches
        from phisieve.io.sources import open_source

        tok = load_tokenizer(minilm)
        out = pa.Table.from_batches(list(encode_batches(open_source(docs, batch), tok, max_len=16)))
        if batch == 1:
            first = out
        assert out.equals(first)
    pats = out["patient_id"].to_pylist()
    assert pats == sorted(pats)  # grouped, never mixed
    # seq_id: the patient's offset (patients in the order of an 8-byte BLAKE2b of their
    # id, a prefix sum of their sequence counts) plus the sequence's number in the patient.
    order = sorted(set(pats), key=lambda p: hashlib.blake2b(p.encode(), digest_size=8).digest())
    offsets, total = {}, 0
    for p in order:
        offsets[p], total = total, total + pats.count(p)
    expected = [offsets[p] + pats[:i].count(p) for i, p in enumerate(pats)]
    assert out["seq_id"].to_pylist() == expected
    assert sorted(expected) == list(range(out.num_rows))
    # The same documents, patients in another order: the same sequences, the same ids.
    shuffled = pa.concat_tables([docs.slice(5, 2), docs.slice(0, 5)])
    again = pa.Table.from_batches(list(encode_batches(open_source(shuffled, 2), tok, max_len=16)))
    assert again.sort_by("seq_id").equals(out.sort_by("seq_id"))
    # A patient whose documents come back after another patient's is refused, by row.
    mixed = pa.concat_tables([docs.slice(0, 1), docs.slice(3, 1), docs.slice(1, 1)])
    with pytest.raises(InputError, match="not consecutive") as e:
        list(encode_batches(open_source(mixed, 1), tok, max_len=16))
    assert e.value.row == 2 and "alpha" not in str(e.value)
    for ids in out["input_ids"].to_pylist():
        assert ids[0] == 101 and ids[-1] == 102 and len(ids) <= 16
    assert out.filter(pc.equal(out["patient_id"], "c"))["doc_ids"].to_pylist() == [["d5", "d6"]]


def test_patient_span_words_reach_every_document_of_the_patient_whatever_the_batches(minilm):
    """A word inside a span of a patient's *last* document protects the same word in the
    patient's earlier documents, in other batches (they are held back until the patient
    ends), and nowhere in another patient's; every batch size gives the same output."""
    from phisieve.encode import encode_batches
    from phisieve.io.sources import open_source
    from phisieve.protection.scope import DocSpans

    docs = pa.table(
        {
            "doc_id": [f"d{i}" for i in range(6)],
            "patient_id": ["a", "a", "a", "b", "b", "c"],
            "text": ["Seen by Dupont today", "stable", "Dr Dupont called", "Dupont again",
                     "fine", "Dupont"],
        }
    )  # fmt: skip
    spans = DocSpans.from_dict({"d2": ([3], [9])})  # "Dupont" in a's last note
    tok = load_tokenizer(minilm)
    dupont = set(tok.encode("Dupont", add_special_tokens=False))
    outs = []
    for batch in (1, 2, 3, 4, 100):
        got = encode_batches(open_source(docs, batch), tok, spans=spans, patient_scope=True,
                             max_len=64)  # fmt: skip
        outs.append(pa.Table.from_batches(list(got)))
    assert all(o.equals(outs[0]) for o in outs)
    out = outs[0]
    for p, ids, direct in zip(*(out[c].to_pylist() for c in ("patient_id", "input_ids",
                                                              "direct")), strict=True):  # fmt: skip
        flagged = {i for i, d in zip(ids, direct, strict=True) if d}
        if p == "a":
            assert flagged == dupont and sum(direct) == 2 * len(dupont)
        else:
            assert not flagged
    alone = encode_batches(open_source(docs, 2), tok, spans=spans, max_len=64)
    a = pa.Table.from_batches(list(alone)).filter(pc.equal(pc.field("patient_id"), "a"))
    assert sum(map(sum, a["direct"].to_pylist())) == len(dupont)  # the span's own words


def test_bad_input_is_a_clear_error(minilm, tmp_path):
    docs = pa.table({"doc_id": ["d"], "patient_id": ["p"], "txt": ["secret words"]})
    with pytest.raises(InputError, match="text") as e:
        encode(docs, tmp_path / "o", tokenizer=minilm)
    assert "secret" not in str(e.value)
    with pytest.raises(InputError, match="tokenizer"):
        encode(docs, tmp_path / "o", tokenizer=tmp_path / "nothing")
    with pytest.raises(InputError, match="not a complete phisieve dataset"):
        read_encoding(tmp_path)
    write_dataset(
        pa.table({"doc_id": ["d"], "spans": pa.array([[]], SPANS)}), tmp_path / "sp", stage="detect"
    )
    with pytest.raises(InputError, match="not an encoded dataset"):
        read_encoding(tmp_path / "sp")


def test_no_sequence_without_a_word(minilm):
    """A document that fills a sequence exactly leaves its [SEP] out (the sequence's own end
    closes it) instead of opening a [CLS] [SEP] row; word-less pieces (punctuation only)
    make no sequence of their own and are counted as dropped tokens."""
    from phisieve.encode import encode_batches

    eta, delta, bang, cls, sep = 27859, 7160, 999, 101, 102
    docs = pa.table(
        {
            "doc_id": [f"d{i}" for i in range(7)],
            "patient_id": ["a", "a", "b", "c", "d", "d", "e"],
            "text": [
                "eta " * 14,  # exactly the 14 tokens a sequence of 16 holds
                "delta",
                "eta " * 14,
                "!!! ???",  # no word at all
                "!!!",
                "delta",
                "eta " * 13 + "!!!",  # its tail beyond the first sequence has no word
            ],
        }
    )
    stats: dict[str, int] = {}
    out = pa.Table.from_batches(
        list(encode_batches(docs, load_tokenizer(minilm), max_len=16, stats=stats))
    )
    assert out["input_ids"].to_pylist() == [
        [cls, *[eta] * 14, sep],
        [cls, delta, sep],
        [cls, *[eta] * 14, sep],
        [cls, bang, bang, bang, sep, delta, sep],
        [cls, *[eta] * 13, bang, sep],
    ]
    assert out["patient_id"].to_pylist() == ["a", "a", "b", "d", "e"]
    assert out["doc_ids"].to_pylist() == [["d0"], ["d1"], ["d2"], ["d4", "d5"], ["d6"]]
    assert out["word_ids"].to_pylist()[3] == [-1, -1, -1, -1, -1, 0, -1]
    assert stats["documents"] == 7 and stats["sequences"] == 5
    assert stats["dropped_tokens"] == 7 + 3  # "!!! ???" and its [SEP]; "!!" and [SEP]
    assert stats["tokens"] == 16 + 3 + 16 + 7 + 16


def test_tokenizer_read_without_transformers_matches_transformers(minilm, bpe_tokenizer):
    """encode reads a tokenizer folder or file with the tokenizers library alone; what it
    reads is what transformers reads."""
    from phisieve.encode.tokenizer import SpecialTokens
    from phisieve.encode.tokenizer import open_tokenizer as _open_tokenizer

    text = "Pt seen 12/03/2091 by Dr. Smith-Jones; BP 120/80 -- résumé naïve."
    for path in (minilm, minilm / "tokenizer.json", bpe_tokenizer):
        light, full = _open_tokenizer(path), load_tokenizer(path)
        assert type(light).__name__ == "_LightTokenizer"
        assert SpecialTokens.of(light) == SpecialTokens.of(full)
        assert light.name_or_path == full.name_or_path
        a = copy.deepcopy(light.backend_tokenizer)
        b = copy.deepcopy(full.backend_tokenizer)
        for t in (a, b):
            t.no_truncation()
            t.no_padding()
        ea, eb = (t.encode(text, add_special_tokens=False) for t in (a, b))
        assert ea.ids == eb.ids and ea.offsets == eb.offsets


def test_stages_never_import_torch(minilm, tmp_path):
    """ingest, detect (rules, lists), index --spans and encode run without importing torch
    (transformers imports it: ~800 MB before the first document)."""
    import subprocess
    import sys

    pq.write_table(
        pa.table(
            {
                "doc_id": ["d0", "d1", "d2"],
                "patient_id": ["a", "a", "b"],
                "text": [
                    "Seen by Dr. Smith on 12/03/2091.",
                    "Smith called back; BP stable.",
                    "John Doe, MRN 1234567.",
                ],
            }
        ),
        tmp_path / "in.parquet",
    )
    t = str(tmp_path)
    script = f"""
import sys
from phisieve.cli import main
for argv in (
    ["ingest", "{t}/in.parquet", "-o", "{t}/docs", "--format", "parquet", "-q"],
    ["detect", "{t}/docs", "-o", "{t}/spans", "-q"],
    ["index", "{t}/docs", "-o", "{t}/terms", "--spans", "{t}/spans", "-q"],
    ["encode", "{t}/docs", "-o", "{t}/enc", "--tokenizer", "{minilm}", "--terms", "{t}/terms",
     "--spans", "{t}/spans", "--max-len", "32", "-q"],
):
    try:
        main(argv)
    except SystemExit as e:
        assert not e.code, (argv[0], e.code)
    heavy = [m for m in ("torch", "transformers") if m in sys.modules]
    assert not heavy, (argv[0], heavy)
print("ok")
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-2000:]
    assert (tmp_path / "enc").is_dir()


def test_long_notes_are_tokenised_by_pieces_with_the_same_tokens(
    physionet_docs, minilm, bpe_tokenizer, monkeypatch
):
    """The model tokenizer gets a bounded number of characters at a time, a long note cut
    before spaces (a 3M-character note took ~1 GB as one call and its Python results), and
    the tokens, ids and offsets are those of the whole text."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import WordLevel

    from phisieve.encode import tokenizer as stage

    texts = read(physionet_docs)["text"].to_pylist()[:40]
    texts += ["  lead  and\n\ntrail  ", "", "x", "a" * 300 + " b", "été 中文 text   end "]
    texts.append(" ".join(texts))  # one long note
    monkeypatch.setattr(stage, "PIECE_CHARS", 97)
    for path in (minilm, bpe_tokenizer):
        backend = copy.deepcopy(stage.open_tokenizer(path).backend_tokenizer)
        backend.no_truncation()
        backend.no_padding()
        assert stage._splittable(backend)
        calls: list[int] = []

        class Spy:
            def __init__(self, inner, calls: list[int]) -> None:
                self.inner, self.calls = inner, calls

            def encode_batch(self, batch, **kwargs):
                self.calls.append(sum(len(t) for t in batch))
                return self.inner.encode_batch(batch, **kwargs)

        ids, offsets, counts = stage._encode_texts(Spy(backend, calls), texts, True)
        whole = backend.encode_batch(texts, add_special_tokens=False)
        assert ids.tolist() == [i for e in whole for i in e.ids]
        assert offsets.tolist() == [list(o) for e in whole for o in e.offsets]
        assert counts.tolist() == [len(e.ids) for e in whole]
        assert len(calls) > 100 and max(calls) <= 97 + 300 + 97  # a piece, a long word
    unsafe = Tokenizer(WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    unsafe.pre_tokenizer = pre_tokenizers.Whitespace()
    assert stage._splittable(unsafe)
    unsafe.normalizer = normalizers.Strip()  # strips each piece: not the whole text's tokens
    assert not stage._splittable(unsafe)
    unsafe.normalizer = None
    unsafe.pre_tokenizer = pre_tokenizers.Metaspace(split=False)
    assert not stage._splittable(unsafe)


@pytest.mark.parametrize("loader", ["phisieve", "transformers"])
def test_special_token_text_in_a_note_is_plain_text(minilm, loader):
    """A note that writes "[SEP]", "[CLS]" or "[MASK]" gets the word pieces of those
    characters: the only special ids in a sequence are the ones encode adds."""
    from phisieve.encode import encode_batches
    from phisieve.encode.tokenizer import open_tokenizer as _open_tokenizer

    tok = _open_tokenizer(minilm) if loader == "phisieve" else load_tokenizer(minilm)
    docs = pa.table(
        {
            "doc_id": ["d"],
            "patient_id": ["p"],
            "text": ["Pt said [SEP] then [MASK] and [CLS] x"],
        }
    )
    out = pa.Table.from_batches(list(encode_batches(docs, tok, max_len=64)))
    backend = copy.deepcopy(tok.backend_tokenizer)
    backend.no_padding()

    def plain(*words: str) -> list[int]:  # each word alone is no special token
        return [i for w in words for i in backend.encode(w, add_special_tokens=False).ids]

    words = ("Pt said", "[", "SEP", "]", "then", "[", "MASK", "]", "and", "[", "CLS", "]", "x")
    cls, sep = 101, 102
    assert out.column("input_ids").to_pylist() == [[cls, *plain(*words), sep]]
    assert plain("[", "SEP", "]") == [1031, 19802, 1033]
    # The caller's tokenizer is left as it was.
    assert backend.encode("[SEP]", add_special_tokens=False).ids == [sep]
