"""The Rust packer of ``encode`` (``_core.Packer``) against the plain Python packer it replaced
(``tests/reference.py``): the same sequences, in the same order, from any documents, however
they are split into batches."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phisieve import _core
from phisieve.encode.tokenizer import SpecialTokens
from phisieve.errors import ConfigError
from phisieve.protection.scope import DocSpans, merged_spans
from tests.reference import PyPacker

BERT = SpecialTokens(vocab_size=50, pad_id=0, mask_id=3, prefix=[1], suffix=[2], doc_end=2)
GPT = SpecialTokens(vocab_size=50, pad_id=0, mask_id=None, prefix=[], suffix=[], doc_end=9)
BARE = SpecialTokens(vocab_size=50, pad_id=0, mask_id=None, prefix=[], suffix=[], doc_end=None)


@st.composite
def documents(draw) -> list[tuple[str, str, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    docs = []
    for p in range(draw(st.integers(1, 4))):
        for d in range(draw(st.integers(1, 4))):
            ids, words = [], []
            w = 0
            for _ in range(draw(st.integers(0, 12))):
                if draw(st.integers(0, 4)) == 0:
                    ids.append(draw(st.integers(3, 40)))
                    words.append(-1)
                    continue
                for _ in range(draw(st.integers(1, 4))):  # a word of 1-4 tokens
                    ids.append(draw(st.integers(3, 40)))
                    words.append(w)
                w += 1
            n = len(ids)
            direct = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)
            indirect = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)
            docs.append((f"p{p}", f"d{p}.{d}", np.array(ids, np.uint32),
                         np.array(words, np.int64), direct, indirect))  # fmt: skip
    return docs


def python_packed(docs, max_len: int, sp: SpecialTokens) -> tuple[pa.Table | None, int]:
    packer, batches = PyPacker(max_len, sp), []
    for patient, doc, ids, words, direct, indirect in docs:
        packer.add(patient, doc, ids, words, direct, indirect)
    packer.finish_patient()
    if packer.done:
        batches.append(packer.take(np.arange(len(packer.done), dtype=np.uint64)))
    table = pa.Table.from_batches(batches) if batches else None
    return table, packer.dropped_tokens


def column(part: list, i: int, dtype) -> np.ndarray:
    return np.concatenate([d[i] for d in part]).astype(dtype)


def rust_packed(docs, max_len: int, sp: SpecialTokens, cuts: list[int]):
    packer = _core.Packer(max_len, sp.prefix, sp.suffix, sp.doc_end)
    batches = []
    bounds = sorted({0, len(docs), *[c % (len(docs) + 1) for c in cuts]})
    for a, b in itertools.pairwise(bounds):
        part = docs[a:b]
        counts = [len(d[2]) for d in part]
        packer.add_batch(
            [d[0] for d in part],
            [d[1] for d in part],
            pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)),
            pa.array(column(part, 2, np.uint32)),
            pa.array(column(part, 3, np.int64)),
            pa.array(column(part, 4, bool)),
            pa.array(column(part, 5, bool)),
        )
        out = packer.take()
        if out is not None:
            batches.append(out)
    packer.finish_patient()
    out = packer.take()
    if out is not None:
        batches.append(out)
    table = pa.Table.from_batches(batches) if batches else None
    return table, packer.dropped_tokens


@settings(max_examples=300, deadline=None)
@given(
    docs=documents(),
    max_len=st.integers(4, 14),
    sp=st.sampled_from([BERT, GPT, BARE]),
    cuts=st.lists(st.integers(0, 20), max_size=3),
)
def test_rust_packer_equals_the_python_reference(docs, max_len, sp, cuts):
    want, want_dropped = python_packed(docs, max_len, sp)
    got, got_dropped = rust_packed(docs, max_len, sp, cuts)
    assert got_dropped == want_dropped
    if want is None:
        assert got is None
        return
    assert got is not None
    for name in got.column_names:
        assert got.column(name).to_pylist() == want.column(name).to_pylist(), name


def test_settings_and_input_are_checked():
    with pytest.raises(ConfigError, match="no room"):
        _core.Packer(3, [1], [2], 2)
    packer = _core.Packer(8, [1], [2], 2)
    with pytest.raises(ConfigError, match="one entry per token"):
        packer.add_batch(["p"], ["d"], pa.array([0, 2]), pa.array([5, 6], pa.uint32()),
                         pa.array([0], pa.int64()), pa.array([False, False]),
                         pa.array([False, False]))  # fmt: skip
    with pytest.raises(ConfigError, match="bounds"):
        packer.add_batch(["p"], ["d"], pa.array([0, 3]), pa.array([5, 6], pa.uint32()),
                         pa.array([0, 1], pa.int64()), pa.array([False, False]),
                         pa.array([False, False]))  # fmt: skip
    fresh = packer.fresh()
    assert fresh.is_empty() and fresh.take() is None


@st.composite
def aligned_texts(draw):
    """Texts as words (sorted, disjoint ranges) and tokens (ranges in order of start, some
    straddling words, some empty, some out of order as a byte-level tokenizer can give)."""
    tok_s, tok_e, tok_n, word_s, word_e, word_n, lengths = [], [], [], [], [], [], []
    for _ in range(draw(st.integers(1, 4))):
        pos, nw = 0, 0
        for _ in range(draw(st.integers(0, 6))):
            pos += draw(st.integers(0, 3))
            end = pos + draw(st.integers(1, 5))
            word_s.append(pos)
            word_e.append(end)
            pos, nw = end, nw + 1
        length = pos + draw(st.integers(0, 3))
        nt = 0
        for _ in range(draw(st.integers(0, 10))):
            a = draw(st.integers(0, max(length, 1)))
            b = draw(st.integers(a, a + 4))
            tok_s.append(a)
            tok_e.append(b)
            nt += 1
        tok_n.append(nt)
        word_n.append(nw)
        lengths.append(max(length, max(tok_e[len(tok_e) - nt :], default=0)))
    flags = tuple(
        np.array(draw(st.lists(st.booleans(), min_size=len(word_s), max_size=len(word_s))), bool)
        for _ in range(2)
    )
    flat = np.stack([np.array(tok_s, np.int64), np.array(tok_e, np.int64)], axis=1).reshape(-1, 2)
    return (flat, np.array(tok_n), np.array(word_s, np.int64), np.array(word_e, np.int64),
            np.array(word_n), np.array(lengths), flags)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(case=aligned_texts())
def test_token_alignment_equals_the_numpy_reference(case):
    from phisieve.encode.batches import _token_words
    from tests.reference import token_words

    want_words, want_flags = token_words(*case)
    got_words, got_flags = _token_words(*case)
    assert got_words.tolist() == want_words.tolist()
    for g, w in zip(got_flags, want_flags, strict=True):
        assert g.tolist() == w.tolist()


@st.composite
def spans_and_words(draw):
    docs, by_doc, starts, ends, counts = [], {}, [], [], []
    for d in range(draw(st.integers(1, 5))):
        doc = f"d{d % 3}" if draw(st.booleans()) else f"d{d}"  # some ids repeat
        docs.append(doc)
        if doc not in by_doc and draw(st.booleans()):
            spans = [{"start": a, "end": a + draw(st.integers(0, 6))}
                     for a in draw(st.lists(st.integers(0, 40), max_size=4))]  # fmt: skip
            s, e = merged_spans(spans)
            if len(s):
                by_doc[doc] = (s, e)
        pos, n = 0, 0
        for _ in range(draw(st.integers(0, 8))):
            pos += draw(st.integers(0, 4))
            end = pos + draw(st.integers(0, 5))
            starts.append(pos)
            ends.append(end)
            pos, n = end, n + 1
        counts.append(n)
    return by_doc, docs, np.array(starts, np.int64), np.array(ends, np.int64), np.array(counts)


@settings(max_examples=400, deadline=None)
@given(case=spans_and_words())
def test_span_overlap_equals_the_numpy_reference(case):
    from tests.reference import span_overlap

    by_doc, docs, starts, ends, counts = case
    got = DocSpans.from_dict(by_doc).overlap(docs, starts, ends, counts)
    assert got.tolist() == span_overlap(by_doc, docs, starts, ends, counts).tolist()


@st.composite
def span_rows(draw):
    """Rows of (doc id, spans): ids repeat, spans overlap, touch, nest or are empty."""
    rows = []
    for _ in range(draw(st.integers(0, 8))):
        doc = f"d{draw(st.integers(0, 4))}"
        spans = [
            (a, a + draw(st.integers(-1, 7)))
            for a in draw(st.lists(st.integers(0, 30), max_size=5))
        ]
        rows.append((doc, spans))
    return rows


@settings(max_examples=300, deadline=None)
@given(rows=span_rows())
def test_doc_spans_merge_each_documents_spans_as_merged_spans_does(rows):
    """The vectorised merge (one running maximum over all documents) equals the per-document
    reference, rows of the same document united, empty spans dropped."""
    table = pa.table(
        {
            "doc_id": [d for d, _ in rows],
            "spans": [[{"start": a, "end": b} for a, b in sp] for _, sp in rows],
        },
        schema=pa.schema([("doc_id", pa.string()),
                          ("spans", pa.list_(pa.struct([("start", pa.int64()),
                                                        ("end", pa.int64())])))]),
    )  # fmt: skip
    union: dict[str, list[dict]] = {}
    for d, sp in rows:
        union.setdefault(d, []).extend({"start": a, "end": b} for a, b in sp)
    want = {d: merged_spans(sp) for d, sp in union.items()}
    want = {d: (s.tolist(), e.tolist()) for d, (s, e) in want.items() if len(s)}
    got = {d: (s.tolist(), e.tolist()) for d, (s, e) in DocSpans.read(table).items()}
    assert got == want
    ids = [f"d{i}" for i in range(6)]
    rows_of = DocSpans.read(table).find(ids)
    assert [r >= 0 for r in rows_of.tolist()] == [d in want for d in ids]


def test_doc_spans_find_checks_the_id_when_hashes_collide(monkeypatch):
    """Every id hashing alike: a lookup still returns the row of the very id, or -1."""
    from phisieve.io import lookup

    spans = DocSpans.from_dict({"a": ([0], [2]), "b": ([1], [3]), "c": ([5], [9])})
    monkeypatch.setattr(lookup, "string_hashes", lambda ids: np.zeros(len(ids), np.uint64))
    collided = DocSpans(spans.docs, spans.offsets, spans.starts, spans.ends)
    rows = collided.find(["c", "x", "a", "b", None])
    assert [collided.docs[int(r)].as_py() if r >= 0 else None for r in rows] == [
        "c", None, "a", "b", None
    ]  # fmt: skip
    got = collided.overlap(["b", "x", "c"], np.array([0, 2, 0, 8]), np.array([1, 3, 1, 9]),
                           np.array([2, 1, 1]))  # fmt: skip
    assert got.tolist() == [False, True, False, True]
