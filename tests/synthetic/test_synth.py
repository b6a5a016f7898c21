"""Tests of the synthetic MIMIC-III-style corpus (phisieve.synthetic)."""

from __future__ import annotations

import csv
import gzip
import io
import re
from collections import Counter, defaultdict

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.dataset as pads
import pytest

from phisieve.api import synth
from phisieve.errors import InputError
from phisieve.io.dataset import read_manifest
from phisieve.io.schema import DOCUMENTS
from phisieve.synthetic.generate import MIMIC_COLUMNS, SYNTH, _unique_word, synth_batches

PLACEHOLDER = re.compile(r"\[\*\*[^\[\]]*?\*\*\]")
WORD = re.compile(r"[^\W_]+")


def table(patients: int, seed: int = 0, **kw: object) -> pa.Table:
    return pa.Table.from_batches(list(synth_batches(patients, seed, **kw)), schema=SYNTH)


@pytest.fixture(scope="module")
def corpus() -> pa.Table:
    return table(120, seed=7)


def words_by_patient(t: pa.Table) -> dict[str, set[str]]:
    """word -> the patients using it (outside placeholders, as the index sees words)."""
    out: dict[str, set[str]] = defaultdict(set)
    for pid, text in zip(t["patient_id"].to_pylist(), t["text"].to_pylist(), strict=True):
        for w in WORD.findall(PLACEHOLDER.sub(" ", text).lower()):
            out[w].add(pid)
    return out


def test_schema_and_columns(corpus: pa.Table) -> None:
    assert corpus.schema == SYNTH
    assert SYNTH.names[:4] == DOCUMENTS.names
    assert [f.type for f in SYNTH][:4] == [f.type for f in DOCUMENTS]
    assert SYNTH.field("category").type == pa.string()
    assert SYNTH.field("chartdate").type == pa.string()
    for b in synth_batches(3):
        assert b.schema == SYNTH
    assert corpus.num_rows > 0
    assert corpus["doc_id"].null_count == 0 and corpus["text"].null_count == 0
    assert len(set(corpus["doc_id"].to_pylist())) == corpus.num_rows
    assert set(corpus["patient_id"].to_pylist()) == {str(10_000_000 + i) for i in range(120)}
    for day in corpus["chartdate"].to_pylist():
        assert re.fullmatch(r"2[12]\d\d-[01]\d-[0-3]\d", day)
        assert "2100-01-01" <= day <= "2200-12-31"
    cats = Counter(corpus["category"].to_pylist())
    assert {"Nursing/other", "Radiology", "Physician", "Discharge summary", "ECG"} <= set(cats)
    assert all("\n" in t for t in corpus["text"].to_pylist()[:50])


def test_admissions(corpus: pa.Table) -> None:
    adm: dict[str, set[str]] = defaultdict(set)
    for pid, gid in zip(
        corpus["patient_id"].to_pylist(), corpus["group_id"].to_pylist(), strict=True
    ):
        adm[pid].add(gid)
    assert all(1 <= len(g) <= 3 for g in adm.values())
    assert any(len(g) > 1 for g in adm.values())
    owners = [g for gs in adm.values() for g in gs]
    assert len(owners) == len(set(owners))  # an admission belongs to one patient


def test_same_seed_same_corpus(corpus: pa.Table) -> None:
    assert table(120, seed=7).equals(corpus)


def test_different_seed_differs(corpus: pa.Table) -> None:
    other = table(120, seed=8)
    assert not other.equals(corpus)
    assert other["text"].to_pylist()[:5] != corpus["text"].to_pylist()[:5]


def test_split_by_first_patient_equals_whole(corpus: pa.Table) -> None:
    parts = [
        table(50, seed=7),
        table(30, seed=7, first_patient=50),
        table(40, seed=7, first_patient=80),
    ]
    assert pa.concat_tables(parts).equals(corpus)
    tail = table(1, seed=7, first_patient=119)
    assert tail.equals(corpus.filter(pa.compute.equal(corpus["patient_id"], "10000119")))


@pytest.mark.parametrize("batch_rows", [1, 7, 100, 1 << 20])
def test_batch_rows_independence(batch_rows: int) -> None:
    whole = table(40, seed=3)
    batches = list(synth_batches(40, 3, batch_rows=batch_rows))
    assert all(b.num_rows == batch_rows for b in batches[:-1])
    assert 0 < batches[-1].num_rows <= batch_rows
    assert pa.Table.from_batches(batches).equals(whole)


def test_rows_grouped_by_patient(corpus: pa.Table) -> None:
    pids = [int(p) for p in corpus["patient_id"].to_pylist()]
    assert pids == sorted(pids)
    runs = [p for k, p in enumerate(pids) if k == 0 or pids[k - 1] != p]
    assert len(runs) == len(set(runs)) == 120
    t = table(5, first_patient=1000)
    assert t["patient_id"][0].as_py() == "10001000" and t["patient_id"][-1].as_py() == "10001004"


def test_notes_in_date_order(corpus: pa.Table) -> None:
    by_patient: dict[str, list[str]] = defaultdict(list)
    for pid, day in zip(
        corpus["patient_id"].to_pylist(), corpus["chartdate"].to_pylist(), strict=True
    ):
        by_patient[pid].append(day)
    assert all(days == sorted(days) for days in by_patient.values())


@pytest.mark.parametrize(
    ("npp", "wpn"), [((2, 8), (60, 400)), ((1, 3), (100, 120)), ((5, 5), (60, 60))]
)
def test_note_and_word_bounds(npp: tuple[int, int], wpn: tuple[int, int]) -> None:
    t = table(60, seed=1, notes_per_patient=npp, words_per_note=wpn)
    counts = Counter(t["patient_id"].to_pylist())
    assert len(counts) == 60
    assert all(npp[0] <= c <= npp[1] for c in counts.values())
    if npp[0] < npp[1]:
        assert len(set(counts.values())) > 1
    lengths = [len(s.split()) for s in t["text"].to_pylist()]
    assert all(wpn[0] <= n <= wpn[1] for n in lengths)
    if wpn == (60, 400):
        assert min(lengths) < 100 and max(lengths) > 300


def test_placeholders_well_formed(corpus: pa.Table) -> None:
    texts = corpus["text"].to_pylist()
    marks = []
    for text in texts:
        found = PLACEHOLDER.findall(text)
        assert text.count("[**") == len(found) == text.count("**]")
        marks += found
    joined = " ".join(marks)
    for kind in (
        "Known lastname",
        "Known firstname",
        "Hospital1",
        "Hospital",
        "Location (un)",
        "First Name (Titles)",
        "Last Name (NamePattern1)",
        "Doctor First Name",
        "Doctor Last Name",
        "First Name8 (NamePattern2)",
        "Telephone/Fax (1)",
        "Numeric Identifier",
        "Clip Number (Radiology)",
        "Medical Record Number",
        "Street Address(2)",
        "E-mail address",
        "Month (only)",
        "Year (4 digits)",
    ):
        assert re.search(rf"\[\*\*{re.escape(kind)} \d+\*\*\]", joined), kind
    for form in (
        r"\d{4}-\d{1,2}-\d{1,2}",
        r"\d{1,2}/\d{4}",
        r"\d{4}",
        r"\d{1,2}-\d{1,2}",
        " ",
        "Age over 90 ",
    ):
        assert any(re.fullmatch(rf"\[\*\*{form}\*\*\]", m) for m in marks), form
    assert sum(bool(PLACEHOLDER.search(t)) for t in texts) > len(texts) // 2


def test_placeholder_ids_consistent_per_patient(corpus: pa.Table) -> None:
    ids: dict[str, set[str]] = defaultdict(set)
    for pid, text in zip(corpus["patient_id"].to_pylist(), corpus["text"].to_pylist(), strict=True):
        ids[pid].update(re.findall(r"\[\*\*Known lastname (\d+)\*\*\]", text))
    assert all(len(v) <= 1 for v in ids.values())
    assert sum(len(v) for v in ids.values()) > 30
    assert len({next(iter(v)) for v in ids.values() if v}) > 20  # patients differ


def test_every_patient_has_a_word_of_their_own(corpus: pa.Table) -> None:
    owners = words_by_patient(corpus)
    own = Counter(next(iter(p)) for w, p in owners.items() if len(p) == 1 and w.isalpha())
    assert set(own) == set(corpus["patient_id"].to_pylist())
    assert sum(own.values()) > 2 * len(own)
    shared = [w for w, p in owners.items() if 2 <= len(p) <= 5 and w.isalpha()]
    assert len(shared) >= 10


def test_unique_words_are_unique() -> None:
    words = [_unique_word(0, i) for i in range(100_000)]
    assert len(set(words)) == len(words)
    assert _unique_word(0, 5) != _unique_word(1, 5)


def test_zipf_like_vocabulary(corpus: pa.Table) -> None:
    counts = Counter(w for t in corpus["text"].to_pylist() for w in WORD.findall(t.lower()))
    total = sum(counts.values())
    freqs = sorted(counts.values(), reverse=True)
    assert sum(freqs[:100]) > 0.35 * total  # common words dominate
    assert sum(1 for f in freqs if f == 1) > 0.3 * len(freqs)  # long tail
    assert freqs[0] > 5 * freqs[99] > 5 * freqs[999]


@pytest.mark.parametrize("name", ["NOTEEVENTS.csv", "NOTEEVENTS.csv.gz"])
def test_mimic_csv_round_trip(tmp_path, name: str) -> None:
    path = tmp_path / "sub" / name
    m = synth(path, patients=40, seed=5, fmt="mimic-csv")
    ref = table(40, seed=5)
    assert m["rows"] == ref.num_rows and m["patients"] == 40
    raw = gzip.decompress(path.read_bytes()) if name.endswith(".gz") else path.read_bytes()
    assert raw.startswith(b'"ROW_ID","SUBJECT_ID","HADM_ID","CHARTDATE"')
    # Written through the contract: no temporary file is left, the marker is beside it, and
    # the same seed gives the same bytes (no time in the gzip header).
    assert [p.name for p in tmp_path.glob("sub/.*")] == [".phisieve.lock"]
    assert read_manifest(path)["kind"] == "file"
    again = synth(tmp_path / "again" / name, patients=40, seed=5, fmt="mimic-csv")
    assert (tmp_path / "again" / name).read_bytes() == path.read_bytes()
    assert again["fingerprint"] == m["fingerprint"]

    t = pacsv.read_csv(path, parse_options=pacsv.ParseOptions(newlines_in_values=True))
    assert t.column_names == list(MIMIC_COLUMNS)
    for col in ("ROW_ID", "SUBJECT_ID", "HADM_ID"):
        assert pa.types.is_integer(t[col].type)
    assert t["TEXT"].to_pylist() == ref["text"].to_pylist()
    assert [str(x) for x in t["ROW_ID"].to_pylist()] == ref["doc_id"].to_pylist()
    assert [str(x) for x in t["SUBJECT_ID"].to_pylist()] == ref["patient_id"].to_pylist()
    assert [str(x) for x in t["HADM_ID"].to_pylist()] == ref["group_id"].to_pylist()
    assert t["CATEGORY"].to_pylist() == ref["category"].to_pylist()
    assert any('"' in s for s in ref["text"].to_pylist())  # quotes were doubled and read back

    rows = list(csv.DictReader(io.StringIO(raw.decode("utf-8"), newline="")))
    assert [r["TEXT"] for r in rows] == ref["text"].to_pylist()
    assert [r["CHARTDATE"] for r in rows] == ref["chartdate"].to_pylist()
    assert all(r["ISERROR"] == "" for r in rows)
    assert any(r["CHARTTIME"] for r in rows) and any(r["CGID"] for r in rows)
    assert m["tokens"] == sum(len(r["TEXT"].split()) for r in rows)


def test_synth_parquet(tmp_path) -> None:
    out = tmp_path / "notes"
    m = synth(out, patients=30, seed=2)
    ref = table(30, seed=2)
    got = pads.dataset(out, format="parquet", ignore_prefixes=[".", "_"]).to_table()
    assert got.schema == SYNTH and got.equals(ref)
    assert m["rows"] == ref.num_rows and m["patients"] == 30 and m["format"] == "parquet"
    assert m["tokens"] == sum(len(s.split()) for s in ref["text"].to_pylist())
    assert read_manifest(out)["tokens"] == m["tokens"]


def test_synth_progress(tmp_path, capsys) -> None:
    m = synth(tmp_path / "p", patients=5, progress=True)
    assert m["patients"] == 5
    assert "synth" not in capsys.readouterr().out  # the bar goes to stderr, if anywhere


def test_empty_corpus(tmp_path) -> None:
    assert list(synth_batches(0)) == []
    assert synth(tmp_path / "e", patients=0)["rows"] == 0


@pytest.mark.parametrize(
    "kw",
    [
        {"patients": -1},
        {"seed": -3},
        {"notes_per_patient": (0, 2)},
        {"notes_per_patient": (5, 2)},
        {"words_per_note": (0, 10)},
        {"words_per_note": (9, 3)},
        {"first_patient": -1},
        {"batch_rows": 0},
    ],
)
def test_bad_arguments(kw: dict) -> None:
    args = {"patients": 3, **kw}
    with pytest.raises(InputError):
        list(synth_batches(**args))


def test_bad_format(tmp_path) -> None:
    with pytest.raises(InputError, match="format"):
        synth(tmp_path / "x", patients=1, fmt="xml")
