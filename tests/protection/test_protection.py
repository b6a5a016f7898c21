"""Protection you can trust: the five ways an identifier became a training label (each a
regression test), the direct scope policy, and protection coverage on annotated notes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import phisieve
from phisieve import ConfigError, PhisieveError
from phisieve.api import encode
from phisieve.cli import app
from phisieve.encode import load_tokenizer
from phisieve.io.schema import SPANS
from phisieve.pipeline.runner import write_dataset
from phisieve.protection.policy import SCOPES
from phisieve.protection.scope import DocSpans
from phisieve.term_index.build import index, terms_options
from phisieve.text.words import tokenize
from phisieve.training.masking import make_batch, objective

SHY, ZWSP = "\u00ad", "\u200b"


def docs_table(rows: list[tuple[str, str, str]]) -> pa.Table:
    doc, patient, text = zip(*rows, strict=True)
    return pa.table(
        {
            "doc_id": pa.array(doc, pa.string()),
            "patient_id": pa.array(patient, pa.string()),
            "text": pa.array(text, pa.large_string()),
        }
    )


def spans_table(spans: dict[str, list[tuple[int, int]]]) -> pa.Table:
    return pa.table(
        {
            "doc_id": pa.array(list(spans), pa.string()),
            "spans": pa.array(
                [
                    [
                        {"start": s, "end": e, "label": "NAME", "source": "test", "score": 1.0}
                        for s, e in sp
                    ]
                    for sp in spans.values()
                ],
                SPANS,
            ),
        }
    )


def span_of(text: str, word: str) -> tuple[int, int]:
    start = text.index(word)
    return start, start + len(word)


def write_docs(table: pa.Table, path: Path) -> Path:
    write_dataset(table, path)
    return path


def flagged_words(enc_dir: Path, tokenizer: object, column: str = "protected") -> set[str]:
    """The decoded words whose tokens carry ``column``."""
    enc = pq.read_table(enc_dir)
    out = set()
    for ids, words, flags in zip(
        enc["input_ids"].to_pylist(),
        enc["word_ids"].to_pylist(),
        enc[column].to_pylist(),
        strict=True,
    ):
        by_word: dict[int, list[int]] = {}
        for i, w, f in zip(ids, words, flags, strict=True):
            if f and w >= 0:
                by_word.setdefault(w, []).append(i)
        out |= {tokenizer.decode(v).replace(" ", "").replace("##", "") for v in by_word.values()}
    return out


# -- leak 1: normalisation mismatch ----------------------------------------------------------

CASE_DOCS = docs_table(
    [
        ("a1", "A", "Mr Dupont was seen today."),
        ("b1", "B", "a dupont valve was seen today."),
        ("c1", "C", "a dupont valve was seen today."),
    ]
)


def test_encode_uses_the_normalisation_of_the_terms(tmp_path, minilm):
    docs = write_docs(CASE_DOCS, tmp_path / "docs")
    phisieve.api.index(docs, tmp_path / "terms", k=2, normalize="nfc", policy_stats=False)
    assert terms_options(phisieve.read_terms(tmp_path / "terms"))["normalize"] == "nfc"
    # "Dupont" (case kept) is patient A's alone; "dupont" is used by B and C.
    m = encode(docs, tmp_path / "enc", tokenizer=minilm, terms=tmp_path / "terms", max_len=64)
    assert m["encoding"]["normalize"] == "nfc"
    tok = load_tokenizer(minilm)
    assert "dupont" in flagged_words(tmp_path / "enc", tok, "indirect")  # A's, lower-cased by BERT
    enc = pq.read_table(tmp_path / "enc")
    by_patient = dict(zip(enc["patient_id"].to_pylist(), enc["indirect"].to_pylist(), strict=True))
    assert any(by_patient["A"]) and not any(by_patient["B"]) and not any(by_patient["C"])
    # And the PPCLM labels never hold A's surname.
    rows = enc.filter(pc.equal(enc["patient_id"], "A")).to_batches()[0]
    batch = make_batch(
        rows,
        objective("ppclm"),
        length=64,
        pad_id=0,
        mask_id=103,
        vocab_size=30522,
        seed=0,
        epoch=0,
    )
    dupont = set(tok("Dupont", add_special_tokens=False)["input_ids"])
    assert not dupont & set(batch["labels"][batch["labels"] >= 0].tolist())


def test_encode_refuses_a_normalisation_the_terms_were_not_made_with(tmp_path, minilm):
    docs = write_docs(CASE_DOCS, tmp_path / "docs")
    phisieve.api.index(docs, tmp_path / "terms", k=2, normalize="nfc", policy_stats=False)
    with pytest.raises(ConfigError, match="--normalize nfc"):
        encode(
            docs,
            tmp_path / "enc",
            tokenizer=minilm,
            terms=tmp_path / "terms",
            normalize="nfkc_lower",
        )
    r = CliRunner().invoke(
        app,
        [
            "encode",
            str(docs),
            "--tokenizer",
            str(minilm),
            "--terms",
            str(tmp_path / "terms"),
            "--normalize",
            "lower",
            "--out",
            str(tmp_path / "enc"),
            "-q",
        ],
    )
    assert r.exit_code != 0 and isinstance(r.exception, ConfigError)


# -- leak 2: default-ignorable code points split words ---------------------------------------

IGNORABLE_DOCS = docs_table(
    [
        ("a1", "A", f"Seen by Dr. Robin{SHY}son today; call {ZWSP}Zorblat{ZWSP} back."),
        ("b1", "B", "The robin sang to her son today; call back."),
        ("c1", "C", "A robin and a son today; call back."),
    ]
)


def test_ignorable_code_points_never_split_a_word():
    text = IGNORABLE_DOCS["text"][0].as_py()
    t = tokenize([text])
    words = t["words"][0].as_py()
    assert "robinson" in words and "robin" not in words and "son" not in words
    s = words.index("robinson")
    assert text[t["starts"][0].as_py()[s] : t["ends"][0].as_py()[s]] == f"Robin{SHY}son"
    z = words.index("zorblat")
    assert text[t["starts"][0].as_py()[z] : t["ends"][0].as_py()[z]] == "Zorblat"
    assert phisieve.normalize_word(f"Ro{ZWSP}bin{SHY}SON") == "robinson"


def test_the_index_marker_and_encode_see_one_surname(tmp_path, minilm):
    terms = index(IGNORABLE_DOCS, k=2)
    table = {r["term"]: r for r in terms.to_pylist()}
    assert table["robinson"]["indirect"] and table["robinson"]["patients"] == 1
    assert not table["robin"]["indirect"]  # B and C only: A's surname is not two words
    assert table["robin"]["patients"] == 2 and table["son"]["patients"] == 2
    marker = phisieve.term_index.marker(terms)
    flags = marker.mark(IGNORABLE_DOCS["text"].combine_chunks(), policy="all")[0].as_py()
    words = tokenize(IGNORABLE_DOCS["text"])["words"][0].as_py()
    assert flags[words.index("robinson")]
    docs = write_docs(IGNORABLE_DOCS, tmp_path / "docs")
    encode(docs, tmp_path / "enc", tokenizer=minilm, terms=terms, max_len=64)
    tok = load_tokenizer(minilm)
    protected = flagged_words(tmp_path / "enc", tok)
    assert {"robinson", "zorblat"} <= protected


def test_detection_rules_see_through_ignorable_code_points():
    from phisieve._core import detect_rules

    text = f"Seen by Dr. Robin{SHY}son on 7/{ZWSP}22/97."
    found = detect_rules(pa.array([text]))
    got = {
        (text[s:e], lab)
        for s, e, lab in zip(
            found["start"].to_pylist(),
            found["end"].to_pylist(),
            found["label"].to_pylist(),
            strict=True,
        )
    }
    assert (f"Robin{SHY}son", "NAME") in got
    assert (f"7/{ZWSP}22/97", "DATE") in got


# -- leak 3: spans ignored for streams -------------------------------------------------------

STREAM_DOCS = docs_table(
    [
        ("a1", "A", "Dr Zorblat saw the patient with care."),
        ("a2", "A", "Zorblat again, and Vantiller too."),
        ("b1", "B", "Zorblat called. Good care given."),
        ("c1", "C", "Care given, the patient slept well."),
    ]
)
STREAM_SPANS = {
    "a1": [span_of("Dr Zorblat saw the patient with care.", "Zorblat")],
    "a2": [span_of("Zorblat again, and Vantiller too.", "Vantiller")],
    "b1": [span_of("Zorblat called. Good care given.", "care")],
}


def test_every_input_kind_gives_the_same_direct_terms(tmp_path):
    spans = spans_table(STREAM_SPANS)
    pq.write_table(spans, tmp_path / "spans.parquet")
    docs = write_docs(STREAM_DOCS, tmp_path / "docs")
    want = index(STREAM_DOCS, k=2, spans=spans)
    direct = set(want.filter(pc.field("direct"))["term"].to_pylist())
    # Inside a span in at least 0.2 of their uses: "zorblat" 1 of 3, "vantiller" 1 of 1,
    # "care" 1 of 3.
    assert direct == {"zorblat", "vantiller", "care"}
    for source in (
        STREAM_DOCS.to_reader(max_chunksize=1),
        pl.from_arrow(STREAM_DOCS),
        docs,
        STREAM_DOCS,
    ):
        got = index(source, k=2, spans=tmp_path / "spans.parquet")
        assert got.equals(want), type(source)
        assert got.to_pylist() == want.to_pylist()


def test_direct_terms_do_not_depend_on_the_memory_budget(tmp_path):
    from phisieve.detect.run import find_spans
    from phisieve.term_index.build import IndexReport

    docs = tmp_path / "docs"
    phisieve.synth(docs, patients=40, seed=5)
    spans = find_spans(docs, ["rules"])
    whole = IndexReport()
    base = index(docs, ngram=2, spans=spans, report=whole)
    assert pc.sum(base["direct"]).as_py() > 0
    report = IndexReport()
    small = index(
        docs,
        ngram=2,
        spans=spans,
        memory_budget=whole.peak_index_bytes // 4,
        report=report,
        batch_size=50,
    )
    assert report.partitions > 1 and report.passes > report.partitions  # a first pass cut short
    assert small.to_pylist() == base.to_pylist()


# -- leak 4: nothing protected, no complaint -------------------------------------------------


@pytest.fixture(scope="module")
def unprotected(physionet_docs, minilm, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("unprotected") / "enc"
    encode(physionet_docs, out, tokenizer=minilm, max_len=64)
    return out


@pytest.mark.parametrize("name", ["ppmlm", "ppclm", "dpp", "ipp"])
def test_a_privacy_objective_refuses_a_dataset_that_protects_nothing(unprotected, name):
    from phisieve.training.loaders import MaskedBatches, PoissonSteps, PrivacyMaskingCollator

    causal = True if name == "ppclm" else None
    for make in (MaskedBatches, PrivacyMaskingCollator, PoissonSteps):
        with pytest.raises(ConfigError, match=r"--terms|--spans") as e:
            make(unprotected, name, causal=causal)
        assert isinstance(e.value, PhisieveError) and "allow_unprotected" in str(e.value)
    # The explicit opt-out, and the plain objectives, still work.
    MaskedBatches(unprotected, name, causal=causal, allow_unprotected=True)
    MaskedBatches(unprotected, "mlm")


def test_train_refuses_a_dataset_that_protects_nothing(unprotected, minilm, tmp_path):
    r = CliRunner().invoke(
        app, ["train", str(unprotected), "--model", str(minilm), "--out", str(tmp_path / "m")]
    )
    assert r.exit_code != 0 and isinstance(r.exception, ConfigError)
    assert not (tmp_path / "m").exists()


def test_ipp_needs_terms_and_dpp_needs_spans(tmp_path, minilm):
    from phisieve.training.loaders import MaskedBatches

    docs = write_docs(STREAM_DOCS, tmp_path / "docs")
    spans = spans_table(STREAM_SPANS)
    encode(docs, tmp_path / "spans_only", tokenizer=minilm, spans=spans, max_len=64)
    MaskedBatches(tmp_path / "spans_only", "dpp")
    MaskedBatches(tmp_path / "spans_only", "ppmlm")
    with pytest.raises(ConfigError, match="--terms"):
        MaskedBatches(tmp_path / "spans_only", "ipp")
    terms = index(STREAM_DOCS, k=2)  # no spans: no direct terms
    encode(docs, tmp_path / "terms_only", tokenizer=minilm, terms=terms, max_len=64)
    MaskedBatches(tmp_path / "terms_only", "ipp")
    with pytest.raises(ConfigError, match="--spans"):
        MaskedBatches(tmp_path / "terms_only", "dpp")


# -- leak 5: a null flag read as "not protected" ---------------------------------------------


def encoded_rows(protected: list, ids: list | None = None) -> pa.RecordBatch:
    n = len(protected)
    lst = pa.list_(pa.bool_())
    return pa.record_batch(
        {
            "seq_id": pa.array([0], pa.uint64()),
            "input_ids": pa.array([ids or list(range(10, 10 + n))], pa.list_(pa.uint32())),
            "word_ids": pa.array([list(range(n))], pa.list_(pa.int32())),
            "protected": pa.array([protected], lst),
            "direct": pa.array([protected], lst),
            "indirect": pa.array([[False] * n], lst),
        }
    )


@pytest.mark.parametrize("name", ["ppclm", "ppmlm", "dpp"])
def test_a_null_flag_is_refused_not_read_as_false(name):
    kw = {"length": 8, "pad_id": 0, "mask_id": 1, "vocab_size": 100, "seed": 0, "epoch": 0}
    ok = make_batch(encoded_rows([True, False, True]), objective(name), **kw)
    assert (ok["labels"][0, [0, 2]] == -100).all()
    with pytest.raises(PhisieveError, match="protected holds a null value in row 0"):
        make_batch(encoded_rows([None, False, True]), objective(name), **kw)
    with pytest.raises(PhisieveError, match="input_ids holds a null"):
        make_batch(encoded_rows([True, False, True], [10, None, 12]), objective(name), **kw)


def test_a_null_in_a_sliced_batch_is_found_in_its_own_row():
    two = pa.Table.from_batches([encoded_rows([True, False]), encoded_rows([False, None])])
    rows = two.combine_chunks().to_batches()[0]
    kw = {"length": 8, "pad_id": 0, "mask_id": 1, "vocab_size": 100, "seed": 0, "epoch": 0}
    with pytest.raises(PhisieveError, match="null value in row 1"):
        make_batch(rows, objective("ppclm"), **kw)
    make_batch(rows.slice(0, 1), objective("ppclm"), **kw)  # the null lies outside the slice


# -- the direct scope ------------------------------------------------------------------------

SCOPE_DOCS = docs_table(
    [
        ("a1", "A", "Seen by Zorblat on 12/7. Foley care given."),
        ("a2", "A", "Zorblat called back; 12 mg given at 7. Foley care."),
        ("b1", "B", "Zorblat visited. Foley care given, 12 mg."),
        ("c1", "C", "Foley care given, 12 mg at 7."),
        ("d1", "D", "Foley care given; care plan reviewed, care goes on."),
    ]
)
SCOPE_SPANS = {
    "a1": [
        span_of("Seen by Zorblat on 12/7. Foley care given.", "Zorblat"),
        span_of("Seen by Zorblat on 12/7. Foley care given.", "12/7"),
        span_of("Seen by Zorblat on 12/7. Foley care given.", "care"),  # a false positive
    ]
}


@pytest.mark.parametrize(
    ("scope", "corpus_direct", "a_words", "b_words"),
    [
        ("span", set(), {"zorblat", "12", "7", "care"}, set()),
        ("patient", set(), {"zorblat", "12", "7", "care"}, set()),
        ("identifying", {"zorblat"}, {"zorblat", "12", "7", "care"}, {"zorblat"}),
        (
            "corpus",
            {"zorblat", "12", "7", "care"},
            {"zorblat", "12", "7", "care"},
            {"zorblat", "12", "care"},
        ),
    ],
)
def test_scopes(tmp_path, minilm, scope, corpus_direct, a_words, b_words):
    spans = spans_table(SCOPE_SPANS)
    terms = index(SCOPE_DOCS, k=1, spans=spans, direct_scope=scope)
    assert set(terms.filter(pc.field("direct"))["term"].to_pylist()) == corpus_direct
    assert terms_options(terms)["direct_scope"] == scope
    docs = write_docs(SCOPE_DOCS, tmp_path / "docs")
    m = encode(docs, tmp_path / "enc", tokenizer=minilm, terms=terms, spans=spans, max_len=64)
    tok = load_tokenizer(minilm)
    enc = pq.read_table(tmp_path / "enc")
    for patient, want in (("A", a_words), ("B", b_words)):
        sub = tmp_path / f"enc_{patient}"
        write_dataset(enc.filter(pc.equal(enc["patient_id"], patient)), sub)
        assert flagged_words(sub, tok, "direct") == want, patient
    # a1's spans hold Zorblat, 12, 7 and care; a2 repeats each once. Under "span" a2's stay
    # unprotected; under the other scopes they are the same patient's words.
    report = m["encoding"]["protection"]
    n = sum(
        len(tok(w, add_special_tokens=False)["input_ids"]) for w in ("Zorblat", "12", "7", "care")
    )
    assert report["by_reason"]["span"]["tokens"] == n
    assert report["by_reason"]["patient"]["tokens"] == (0 if scope == "span" else n)
    assert report["protected"] == m["protected"]


def test_encode_refuses_a_scope_the_terms_were_not_made_with(tmp_path, minilm):
    spans = spans_table(SCOPE_SPANS)
    terms = index(SCOPE_DOCS, k=1, spans=spans, direct_scope="corpus")
    with pytest.raises(ConfigError, match="--direct-scope corpus"):
        encode(
            SCOPE_DOCS,
            tmp_path / "e",
            tokenizer=minilm,
            terms=terms,
            spans=spans,
            direct_scope="span",
        )
    with pytest.raises(ConfigError, match="direct scope"):
        index(SCOPE_DOCS, spans=spans, direct_scope="everything")
    assert SCOPES == ("span", "patient", "identifying", "corpus")


def test_doc_spans_overlap_matches_a_plain_loop():
    rng = np.random.default_rng(0)
    docs = [f"d{i}" for i in range(30)]
    spans = {
        d: sorted((int(s), int(s + rng.integers(0, 6))) for s in rng.integers(0, 60, 4))
        for d in docs[::2]
    }
    ds = DocSpans.read(spans_table(spans))
    counts = rng.integers(0, 12, len(docs))
    starts = rng.integers(0, 70, counts.sum())
    ends = starts + rng.integers(0, 5, counts.sum())
    got = ds.overlap(docs, starts, ends, counts)
    owner = np.repeat(docs, counts)
    want = [
        e > s and any(a < e and b > s and b > a for a, b in spans.get(d, []))
        for d, s, e in zip(owner, starts, ends, strict=True)
    ]
    assert got.tolist() == want


# -- coverage on the PhysioNet dev notes -----------------------------------------------------


def test_protection_meets_the_budget_on_the_physionet_notes(physionet_dir, minilm, tmp_path):
    out = tmp_path / "coverage.json"
    r = CliRunner().invoke(
        app,
        [
            "coverage",
            "--corpus",
            str(physionet_dir),
            "--tokenizer",
            str(minilm),
            "--json",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    report = json.loads(out.read_text())
    assert report["coverage"] >= 0.98
    assert report["protected_share"] <= 0.10
    p = report["protection"]
    assert p["gold"]["tokens"] > 1500
    assert p["protected"] <= sum(v["tokens"] for v in p["by_reason"].values())
    assert p["protected"] >= max(v["tokens"] for v in p["by_reason"].values())
    assert "gold PHI token coverage" in r.output
