"""The patient x term index: exact against the plain-Python reference, whatever the batching,
threads, memory budget, input order or sharding; statistics; errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import phisieve
from phisieve import _core
from phisieve.cli import main
from phisieve.io.dataset import side_file
from phisieve.io.schema import SPANS, TERMS
from phisieve.io.sources import parquet_files
from phisieve.term_index import build as term_index
from phisieve.term_index.build import index
from tests import reference

# Assigned, non-surrogate characters (Python's Unicode tables may be older than Rust's).
# Three characters changed case properties after Python 3.11's Unicode 14.0, so Σ beside
# them lowercases to σ in the reference and ς in Rust ("ΑΣʕ"): not drawn.
CASE_SKEW = "\u0295\u02e4\U0001171e"
ANY_CHAR = st.characters(exclude_categories=("Cs", "Cn", "Co"), exclude_characters=CASE_SKEW)
WORDY = st.sampled_from(
    [
        "Dupont",
        "dupont",
        "DUPONT",
        "Zoë",
        "zoe\u0308",
        "ﬁbrosis",
        "ΟΔΟΣ",
        "οδος",
        "北京",
        "7/22",
        "chest pain",
        "s/p",
        "Müller",
        "½",
        "\u037a",
        "Ⅻ",
        "nsr",
        "NSR.",
        "  ",
        "\n",
        "Robin\u00adson",
        "\u200bDupont\u200b",
        "J\u200do",
        "\ufeff",
    ]
)
TEXT = st.lists(st.one_of(WORDY, st.text(ANY_CHAR, max_size=6)), max_size=12).map(" ".join)


def as_dict(table: pa.Table) -> dict:
    rows = table.to_pylist()
    out = {(r["n"], r["term"]): (r["patients"], r["docs"], r["count"], r["indirect"]) for r in rows}
    assert len(out) == len(rows), "duplicate (n, term) rows"
    return out


def docs_table(docs: list[tuple[str, str]]) -> pa.Table:
    return pa.table(
        {
            "doc_id": [str(i) for i in range(len(docs))],
            "patient_id": [p for p, _ in docs],
            "text": pa.array([t for _, t in docs], pa.large_string()),
        }
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(TEXT, max_size=5), st.sampled_from(["nfkc_lower", "nfc", "lower", "none"]))
def test_tokenize_matches_reference(texts: list[str], mode: str) -> None:
    batch = phisieve.tokenize(texts, normalize=mode)
    for i, text in enumerate(texts):
        spans = reference.word_spans(text)
        assert batch.column("starts")[i].as_py() == [s for s, _ in spans]
        assert batch.column("ends")[i].as_py() == [e for _, e in spans]
        assert batch.column("words")[i].as_py() == reference.words(text, mode)


def test_code_point_offsets_on_non_ascii() -> None:
    text = "Pt Zoë Müller (北京) DOB 7/22—cafe\u0301 🙂 end"
    batch = phisieve.tokenize([text])
    starts, ends = batch.column("starts")[0].as_py(), batch.column("ends")[0].as_py()
    assert [text[s:e] for s, e in zip(starts, ends, strict=True)] == [
        "Pt",
        "Zoë",
        "Müller",
        "北京",
        "DOB",
        "7",
        "22",
        "cafe\u0301",
        "end",
    ]
    assert batch.column("words")[0].as_py()[:3] == ["pt", "zoë", "müller"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    docs=st.lists(st.tuples(st.sampled_from("abcd"), TEXT), max_size=12),
    ngram=st.integers(1, 3),
    k=st.integers(1, 3),
    batch_size=st.integers(1, 5),
    threads=st.sampled_from([1, 2]),
)
def test_index_matches_reference(docs, ngram, k, batch_size, threads) -> None:
    got = index(docs_table(docs), ngram=ngram, k=k, batch_size=batch_size, threads=threads)
    assert as_dict(got) == reference.index(docs, ngram=ngram, k=k)
    # patient_ids: the k patients using the term that are smallest by (id hash, id).
    assert patient_ids(got) == reference.patient_ids(docs, ngram=ngram, k=k)
    assert got.schema.remove_metadata() == TERMS


def patient_ids(table: pa.Table) -> dict[tuple[int, str], list[str]]:
    return {(r["n"], r["term"]): r["patient_ids"] for r in table.to_pylist()}


def test_id_hashes_are_fixed() -> None:
    """The hash that orders the kept patient ids is pinned (indexes written by different
    versions must merge): the same values as the Rust unit test, and the plain-Python FNV-1a
    + SplitMix64 reference, for any string array type."""
    import polars as pl

    ids = ["", "a", "p1", "Zoë-17"]
    pinned = [0xF52A15E9A9B5E89B, 0x02C0BDBF481420F8, 0x5B050EF57E3B95BC, 0x88F7D8C4C0C118B4]
    assert [reference.id_hash(i) for i in ids] == pinned
    assert _core.id_hashes(pa.array(ids)).to_pylist() == pinned
    assert _core.id_hashes(pa.array(ids, pa.large_string())).to_pylist() == pinned
    assert _core.id_hashes(pl.Series(ids).to_arrow()).to_pylist() == pinned
    assert _core.id_hashes(pa.array(["x", None])).to_pylist() == [reference.id_hash("x"), None]
    many = [f"patient-{i}" for i in range(500)] + ["北京", "zoe\u0308"]
    assert _core.id_hashes(pa.array(many)).to_pylist() == [reference.id_hash(i) for i in many]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    docs=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "p1", "p2", "Zoë"]), TEXT), max_size=12
    ),
    ngram=st.integers(1, 2),
    k=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
)
def test_patient_ids_do_not_depend_on_document_order(docs, ngram, k, seed) -> None:
    """The kept patient ids are the k smallest by (id hash, id), in that order, whatever the
    order of the documents: patient groups in another order (counted as they come) or the
    documents shuffled (sorted by patient first)."""
    import random

    want = reference.patient_ids(docs, ngram=ngram, k=k)
    rng = random.Random(seed)
    patients = sorted({p for p, _ in docs})
    rng.shuffle(patients)
    grouped = [d for p in patients for d in docs if d[0] == p]
    shuffled = rng.sample(docs, len(docs))
    base = index(docs_table(docs), ngram=ngram, k=k)
    assert patient_ids(base) == want
    for order in (grouped, shuffled):
        got = index(docs_table(order), ngram=ngram, k=k, batch_size=3)
        assert patient_ids(got) == want
        assert got.equals(base)
    # The same when the shards are merged, in either order.
    half = set(patients[: len(patients) // 2])
    parts = [[d for d in grouped if d[0] in half], [d for d in grouped if d[0] not in half]]
    indexes = [index(docs_table(p), ngram=ngram, k=k) for p in parts]
    for tables in (indexes, indexes[::-1]):
        assert phisieve.merge_terms(tables, k=k).equals(base)


@settings(max_examples=60, deadline=None)
@given(
    docs=st.lists(st.tuples(st.sampled_from("abc"), TEXT), min_size=1, max_size=10),
    policy=st.sampled_from(["all", "minimal"]),
    ngram=st.integers(1, 3),
)
def test_marker_matches_reference(docs, policy, ngram) -> None:
    terms = index(docs_table(docs), ngram=ngram)
    blacklist = {(r["n"], r["term"]) for r in terms.to_pylist() if r["indirect"]}
    marks = term_index.marker(terms).mark(pa.array([t for _, t in docs]), policy=policy)
    for i, (_, text) in enumerate(docs):
        assert marks[i].as_py() == reference.protected(text, blacklist, ngram, policy)


def physionet_rows(docs_dir: Path) -> list[tuple[str, str]]:
    table = pa.concat_tables(pq.read_table(f) for f in parquet_files(docs_dir))
    pids, texts = table.column("patient_id").to_pylist(), table.column("text").to_pylist()
    return list(zip(pids, texts, strict=True))


@pytest.mark.parametrize("ngram", [1, 2])
def test_physionet_index_is_exact(physionet_docs: Path, ngram: int) -> None:
    got = index(physionet_docs, k=2, ngram=ngram)
    want = reference.index(physionet_rows(physionet_docs), ngram=ngram, k=2)
    assert as_dict(got) == want
    unigrams = got.filter(pc.equal(got.column("n"), 1))
    # README of the corpus: about half the distinct words are used by a single patient.
    share = pc.sum(unigrams.column("indirect")).as_py() / unigrams.num_rows
    assert 0.45 < share < 0.53


def test_results_do_not_depend_on_threads_batches_or_budget(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    phisieve.synth(docs, patients=60, seed=3)
    whole = term_index.IndexReport()
    base = index(docs, ngram=3, report=whole)
    for kwargs in (
        {"threads": 1, "batch_size": 7},
        {"threads": 2, "batch_size": 1000},
        {"threads": 3, "batch_size": 64},
    ):
        assert index(docs, ngram=3, **kwargs).equals(base)
    report = term_index.IndexReport()
    small = index(docs, ngram=3, memory_budget=whole.peak_index_bytes // 4, report=report)
    assert report.partitions > 1 and report.passes >= report.partitions
    assert small.equals(base)


def test_budget_too_small_for_the_vocabulary(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    phisieve.synth(docs, patients=5, seed=1)
    with pytest.raises(phisieve.MemoryBudgetExceeded):
        index(docs, memory_budget=1000)
    with pytest.raises(phisieve.MemoryBudgetExceeded, match="one-shot stream"):
        index(
            pa.RecordBatchReader.from_batches(*_reader_parts(phisieve.synth_batches(5, seed=1))),
            memory_budget=1000,
        )


def _reader_parts(batches):
    batches = list(batches)
    return batches[0].schema, batches


def test_ungrouped_input_is_sorted_or_refused(tmp_path: Path) -> None:
    docs = [("a", "Dupont visit"), ("b", "chest pain"), ("a", "chest Dupont"), ("c", "pain")]
    report = term_index.IndexReport()
    got = index(docs_table(docs), report=report)
    assert report.sorted_input
    assert as_dict(got) == reference.index(docs)
    path = tmp_path / "ungrouped.parquet"
    pq.write_table(docs_table(docs), path)
    assert as_dict(index(path, ngram=2)) == reference.index(docs, ngram=2)
    stream = pa.RecordBatchReader.from_batches(
        docs_table(docs).schema, docs_table(docs).to_batches(max_chunksize=1)
    )
    with pytest.raises(phisieve.NotGroupedError, match="not grouped"):
        index(stream)


def test_polars_and_stream_inputs() -> None:
    import polars as pl

    docs = [("p1", "alpha beta"), ("p1", "beta"), ("p2", "beta gamma")]
    want = reference.index(docs, ngram=2)
    table = docs_table(docs)
    assert as_dict(index(pl.from_arrow(table), ngram=2)) == want
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=1))
    assert as_dict(index(reader, ngram=2)) == want


def test_shards_merge_exactly(tmp_path: Path) -> None:
    docs = [
        (p, t)
        for p, t in [
            ("a", "rare1 common shared2"),
            ("a", "common"),
            ("b", "common shared2 rare2"),
            ("c", "common shared3"),
            ("c", "shared3 rare3"),
            ("d", "common shared3"),
        ]
    ]
    whole = index(docs_table(docs), ngram=2)
    by_patient = [docs_table(docs[:2]), docs_table(docs[2:3]), docs_table(docs[3:])]
    merged = phisieve.merge_terms([index(t, ngram=2) for t in by_patient])
    assert as_dict(merged) == as_dict(whole)
    # Shards that split patient c: indirect flags stay exact, counts below k exact.
    split = [docs_table(docs[:4]), docs_table(docs[4:])]
    merged = phisieve.merge_terms([index(t, ngram=2) for t in split], patients_disjoint=False)
    want = reference.index(docs, ngram=2)
    got = as_dict(merged)
    assert got.keys() == want.keys()
    for key, (patients, ndocs, count, indirect) in want.items():
        assert got[key][1:] == (ndocs, count, indirect), key
        assert got[key][0] == patients if patients < 2 else got[key][0] >= 2


@pytest.fixture(scope="module")
def synth_halves(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path], pa.Table]:
    """A synthetic corpus (documents dataset), its two patient-disjoint halves (every other
    patient) and rule spans of its direct identifiers."""
    from phisieve.detect.run import find_spans

    root = tmp_path_factory.mktemp("halves")
    docs = root / "docs"
    phisieve.synth(docs, patients=40, seed=5)
    table = pa.concat_tables(pq.read_table(f) for f in parquet_files(docs))
    patients = sorted(set(table.column("patient_id").to_pylist()))
    first = pc.is_in(table.column("patient_id"), value_set=pa.array(patients[::2]))
    halves = []
    for i, mask in enumerate([first, pc.invert(first)]):
        halves.append(root / f"half{i}.parquet")
        pq.write_table(table.filter(mask), halves[-1])
    return docs, halves, find_spans(docs, ["rules"])


@pytest.mark.parametrize("scope", ["span", "patient", "identifying", "corpus"])
@pytest.mark.parametrize("k", [2, 3])
def test_merged_halves_equal_the_whole_index_with_spans(synth_halves, scope, k) -> None:
    """Merging the indexes of two patient-disjoint halves gives the index of the whole corpus,
    every column (``in_span``, ``direct``, ``patient_ids``) and the recorded options included,
    under every direct scope. (OR-ing the halves' ``direct`` marks words that are inside spans
    in enough of one half's uses, but not of the whole corpus's.)"""
    docs, halves, spans = synth_halves
    kw = {"ngram": 2, "k": k, "spans": spans, "direct_scope": scope}
    whole = index(docs, **kw)
    parts = [index(h, **kw) for h in halves]
    for tables in (parts, parts[::-1]):
        merged = phisieve.merge_terms(tables, k=k)
        assert merged.equals(whole)
        assert merged.schema.remove_metadata() == TERMS
        assert term_index.terms_options(merged) == term_index.terms_options(whole)
    rows = whole.to_pylist()
    direct = {r["term"] for r in rows if r["direct"]}
    in_span = {r["term"]: r["in_span"] for r in rows if r["in_span"]}
    assert all(r["n"] == 1 for r in rows if r["in_span"])
    assert in_span == reference_in_span(docs, spans)
    count = {r["term"]: r["count"] for r in rows if r["n"] == 1}
    ored = set().union(*({r["term"] for r in p.to_pylist() if r["direct"]} for p in parts))
    if scope in ("span", "patient"):
        assert direct == ored == set()
    elif scope == "corpus":
        assert direct == ored == set(in_span)
    else:
        want = {
            w
            for w, c in in_span.items()
            if re.fullmatch(r"[^\W\d_]{2,}", w) and c >= 0.2 * count[w]
        }
        assert direct == want and direct
        # OR-ing the halves' flags marks more: words inside spans in >= 0.2 of one half's uses
        # but not of the whole corpus's.
        assert ored > direct


def reference_in_span(docs: Path, spans: pa.Table) -> dict[str, int]:
    """Per normalised word, its occurrences that overlap a span of their document."""
    by_doc = dict(zip(spans["doc_id"].to_pylist(), spans["spans"].to_pylist(), strict=True))
    table = pa.concat_tables(pq.read_table(f) for f in parquet_files(docs))
    out: dict[str, int] = {}
    for doc, text in zip(table["doc_id"].to_pylist(), table["text"].to_pylist(), strict=True):
        ranges = [(s["start"], s["end"]) for s in by_doc.get(doc) or []]
        for ws, we in reference.word_spans(text):
            if any(s < we and ws < e for s, e in ranges):
                word = reference.normalize(text[ws:we])
                out[word] = out.get(word, 0) + 1
    return out


def test_cli_merge_of_halves_with_spans_equals_cli_index(
    synth_halves, tmp_path: Path, capsys
) -> None:
    docs, halves, spans = synth_halves
    pq.write_table(spans, tmp_path / "spans.parquet")
    flags = ["--spans", str(tmp_path / "spans.parquet"), "--ngram", "2", "-q"]
    main(["index", str(docs), "--out", str(tmp_path / "whole"), *flags])
    for i, half in enumerate(halves):
        main(["index", str(half), "--out", str(tmp_path / f"t{i}"), *flags])
    main(["merge", str(tmp_path / "t1"), str(tmp_path / "t0"), "--out", str(tmp_path / "m")])
    capsys.readouterr()
    whole, merged = (phisieve.read_terms(tmp_path / name) for name in ("whole", "m"))
    assert merged.equals(whole)
    assert term_index.terms_options(merged) == term_index.terms_options(whole)
    assert pc.sum(merged.column("direct")).as_py() > 0


def test_merge_refuses_parts_made_differently() -> None:
    docs = docs_table([("a", "Zorblat x"), ("b", "y")])
    spans = pa.table({"doc_id": ["0"], "spans": pa.array([[{"start": 0, "end": 7}]], SPANS)})
    with_spans = index(docs, spans=spans)
    assert with_spans.column("in_span").to_pylist() == [0, 0, 1] and with_spans["direct"][2]
    for other in (
        index(docs),
        index(docs, spans=spans, min_share=0.5),
        index(docs, spans=spans, direct_scope="corpus"),
    ):
        with pytest.raises(phisieve.ConfigError, match="different"):
            phisieve.merge_terms([with_spans, other])
    # An index written before in_span existed merges when made without spans only.
    old = index(docs).drop_columns(["in_span"])
    assert phisieve.merge_terms([old, old.slice(0, 0)]).equals(index(docs))
    old = with_spans.drop_columns(["in_span"])
    with pytest.raises(phisieve.ConfigError, match="in_span"):
        phisieve.merge_terms([old])


def test_stats_and_protected_share() -> None:
    docs = [("a", "rare1 common"), ("a", "rare1 x"), ("b", "common y"), ("c", "common")]
    terms = index(docs_table(docs))
    stats = phisieve.term_stats(terms, k=2, patient_ids=["a", "b", "c"])
    s = stats["per_n"]["1"]
    # Terms: rare1 (a), common (a,b,c), x (a), y (b): 3 of 4 indirect, 4 of 7 occurrences.
    assert (s["distinct_terms"], s["indirect_terms"]) == (4, 3)
    assert s["share_distinct_indirect"] == pytest.approx(0.75)
    assert (s["occurrences"], s["indirect_occurrences"]) == (7, 4)
    q = s["identifiers_per_patient"]
    assert (q["q00"], q["q50"], q["q100"]) == (0.0, 1.0, 2.0)
    assert q["mean"] == pytest.approx(1.0)
    share = phisieve.protected_share(docs_table(docs), terms)
    assert share == {"words": 7, "all": pytest.approx(4 / 7), "minimal": pytest.approx(4 / 7)}


def test_empty_and_enormous_notes() -> None:
    big = "pain " * 600_000 + "Zoë"  # 3M characters
    docs = [("a", ""), ("a", big), ("b", "pain"), ("c", "")]
    got = as_dict(index(docs_table(docs), ngram=2))
    assert got[(1, "pain")] == (2, 2, 600_001, False)
    assert got[(2, "pain zoë")] == (1, 1, 1, True)
    assert as_dict(index(docs_table([]))) == {}


def test_bad_input_errors_say_where_without_text() -> None:
    secret = "Zebediah Quux"
    with pytest.raises(phisieve.InputError, match="'patient_id'") as e:
        index(pa.table({"text": [secret]}))
    assert secret not in str(e.value)
    table = pa.table({"patient_id": ["a", None], "text": [secret, secret]})
    with pytest.raises(phisieve.InputError, match="row 1") as e:
        index(pa.RecordBatchReader.from_batches(table.schema, table.to_batches()))
    assert secret not in str(e.value)
    with pytest.raises(phisieve.ConfigError, match="ngram"):
        index(docs_table([("a", secret)]), ngram=5)
    with pytest.raises(phisieve.ConfigError, match="k must"):
        index(docs_table([("a", secret)]), k=0)
    with pytest.raises(phisieve.ConfigError, match="normalisation"):
        index(docs_table([("a", secret)]), normalize="upper")
    with pytest.raises(phisieve.ConfigError, match="memory size"):
        index(docs_table([("a", secret)]), memory_budget="lots")
    with pytest.raises(phisieve.InputError, match="no such file"):
        index("/nonexistent/docs")


def test_numeric_and_dictionary_patient_ids() -> None:
    table = pa.table({"patient_id": pa.array([7, 7, 9]), "text": ["x y", "y", "y z"]})
    got = as_dict(index(table))
    assert got[(1, "y")] == (2, 3, 3, False)
    table = table.set_column(0, "patient_id", pa.array(["7", "7", "9"]).dictionary_encode())
    assert as_dict(index(table)) == got


def test_parse_size() -> None:
    assert term_index.parse_size("2GB") == 2_000_000_000
    assert term_index.parse_size("512MiB") == 512 * 2**20
    assert term_index.parse_size("1.5k") == 1500
    assert term_index.parse_size(123) == 123
    assert term_index.parse_size(None) is None


def test_cli_index_writes_terms_blacklist_and_stats(
    tmp_path: Path, physionet_docs: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "terms"
    main(["index", str(physionet_docs), "--k", "2", "--ngram", "2", "--out", str(out), "-q"])
    printed = capsys.readouterr().out
    assert "1,450 documents" in printed and "82 patients" in printed
    terms = phisieve.read_terms(out)
    assert terms.equals(index(physionet_docs, ngram=2))
    assert sorted(p.name for p in out.iterdir()) == ["part-00000.parquet"]
    blacklist = side_file(out, "blacklist.txt").read_text(encoding="utf-8").splitlines()
    assert blacklist == terms.filter(pc.field("indirect")).column("term").to_pylist()
    stats = json.loads(side_file(out, "stats.json").read_text())
    assert stats["patients"] == 82 and stats["documents"] == 1450
    assert 0.0 < stats["protected_share"]["minimal"] < stats["protected_share"]["all"] < 1.0
    assert set(stats["per_n"]) == {"1", "2"}


def test_cli_errors_exit_2_without_traceback(tmp_path: Path, capsys) -> None:
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"pid": ["a"], "text": ["Secretname"]}), path)
    with pytest.raises(SystemExit) as e:
        main(["index", str(path), "--out", str(tmp_path / "t"), "-q"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "patient_id" in err and "Secretname" not in err and "Traceback" not in err


def test_cli_merge_equals_whole_index(tmp_path: Path, capsys) -> None:
    docs = [("a", "x y rare1"), ("b", "x y"), ("c", "y z rare3")]
    paths = []
    for i, part in enumerate([docs[:1], docs[1:]]):
        path = tmp_path / f"docs{i}.parquet"
        pq.write_table(docs_table(part), path)
        main(["index", str(path), "--out", str(tmp_path / f"t{i}"), "--ngram", "2", "-q"])
        paths.append(str(tmp_path / f"t{i}"))
    main(["merge", *paths, "--out", str(tmp_path / "merged")])
    assert "indirect" in capsys.readouterr().out
    merged = phisieve.read_terms(tmp_path / "merged")
    assert as_dict(merged) == reference.index(docs, ngram=2)


def test_ungrouped_pyarrow_dataset_object(tmp_path: Path) -> None:
    import pyarrow.dataset as pads

    docs = [("a", "x"), ("b", "y"), ("a", "y z")]
    path = tmp_path / "d.parquet"
    pq.write_table(docs_table(docs), path)
    report = term_index.IndexReport()
    got = index(pads.dataset(path), report=report)
    assert report.sorted_input
    assert as_dict(got) == reference.index(docs)


def test_budget_is_checked_piece_by_piece(tmp_path: Path, monkeypatch) -> None:
    """Under a memory budget the index takes its text by small pieces and checks the budget
    after each: a pass is given up as soon as it is over, so the index never holds much more
    than the budget (it once checked only after whole batches of 16,384 rows, so that a
    corpus read in one batch was counted whole before the first check)."""
    docs = tmp_path / "docs"
    phisieve.synth(docs, patients=200, seed=4)
    whole = term_index.IndexReport()
    base = index(docs, ngram=2, report=whole)
    budget = whole.peak_index_bytes // 4
    fed: list[int] = []
    real = term_index._core.IndexBuilder

    class Spy:
        def __init__(self, **kwargs) -> None:
            self.inner = real(**kwargs)

        def add(self, patient_ids: pa.Array, texts: pa.Array) -> None:
            fed.append(pc.sum(pc.binary_length(texts)).as_py())
            self.inner.add(patient_ids, texts)

        def __getattr__(self, name: str):
            return getattr(self.inner, name)

    monkeypatch.setattr(term_index._core, "IndexBuilder", Spy)
    report = term_index.IndexReport()
    got = index(docs, ngram=2, memory_budget=budget, report=report)
    assert got.equals(base)
    assert report.partitions > 1
    assert len(fed) > 4 * report.passes  # pieces, not one batch per pass
    assert max(fed) <= budget // term_index.READ_SHARE
    assert whole.peak_index_bytes > 3 * budget  # what one unchecked batch would hold
    assert report.peak_index_bytes <= 1.25 * budget
