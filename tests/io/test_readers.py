"""Tests of phisieve.io.readers (phisieve.ingest): every input format, its rejections, and the
real PhysioNet corpus."""

from __future__ import annotations

import csv
import gzip
import json
import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phisieve.api import ingest
from phisieve.errors import InputError
from phisieve.io.dataset import read_manifest, read_rejected
from phisieve.io.readers import FORMATS, NOT_UTF8, REASONS, Rejection, mimic, read_documents
from phisieve.io.schema import DOCUMENTS

REPO = Path(__file__).resolve().parents[2]
SECRET = "SECRET"  # put in every note that must never reach an error message or rejection


# --------------------------------------------------------------------------------------------
# helpers


def read_out(out: Path) -> pa.Table:
    return pq.read_table(out)


def rejected(out: Path) -> list[tuple[str, int, str | None, str]]:
    """The rejected rows as sorted (source, row, column, reason) tuples."""
    t = read_rejected(out)
    rows = zip(*(t[c].to_pylist() for c in ("source", "row", "column", "reason")), strict=True)
    return sorted(rows, key=lambda r: (r[0], r[1]))


def check_manifest(m: dict, rows: int, by_reason: dict[str, int]) -> None:
    assert m["rows"] == rows
    assert m["rejected_by_reason"] == by_reason
    assert m["rejected"] == sum(by_reason.values())
    assert m["rows_in"] == m["rows"] + m["rejected"]
    assert set(by_reason) <= set(REASONS)


def assert_no_secret(out: Path) -> None:
    assert SECRET not in json.dumps(read_manifest(out))
    for row in rejected(out):
        assert all(SECRET not in str(v) for v in row)


def run_ingest(src: Path, out: Path, **kw) -> tuple[dict, pa.Table]:
    m = ingest(src, out, **kw)
    assert read_manifest(out) == m
    assert_no_secret(out)
    return m, read_out(out)


def assert_batch_independent(src: Path, tmp_path: Path, **kw) -> None:
    """Ingesting with tiny and large batches gives the same tables and rejections."""
    results = []
    for n in (1, 7, 8192):
        out = tmp_path / f"batch{n}"
        m = ingest(src, out, batch_rows=n, **kw)
        # options and settings record batch_rows itself; write_id names each write
        for key in ("parts", "files", "options", "settings", "write_id"):
            m.pop(key, None)
        results.append((m, read_out(out), rejected(out)))
    for m, table, rej in results[1:]:
        assert m == results[0][0]
        assert table.equals(results[0][1])
        assert rej == results[0][2]


# --------------------------------------------------------------------------------------------
# mimic

MIMIC_HEADER = (
    b"ROW_ID,SUBJECT_ID,HADM_ID,CHARTDATE,CHARTTIME,STORETIME,CATEGORY,DESCRIPTION,CGID,"
    b"ISERROR,TEXT\n"
)
MIMIC_ROWS = [
    # 0: multi-line text with doubled quotes
    b'1,10,100,2101-01-01,,,Nursing,Report,,,"Line one\nline ""two"" here\n"\n',
    # 1: non-ASCII text, empty HADM_ID
    b'2,11,,2101-01-02,,,Radiology,CHEST (PA & LAT),,,"Caf\xc3\xa9 na\xc3\xafve '
    b'\xe6\x82\xa3\xe8\x80\x85, ok"\n',
    # 2: missing SUBJECT_ID
    b'3,,101,2101-01-03,,,Nursing,Report,,,"no subject SECRET"\n',
    # 3: whitespace-only text
    b'4,12,102,2101-01-04,,,Nursing,Report,,,"   \n  "\n',
    # 4: wrong column count (no ISERROR field), with a multi-line value
    b'5,12,102,2101-01-05,,,Nursing,Report,,"SECRET wrong\ncount"\n',
    # 5: invalid UTF-8 in TEXT
    b'6,13,103,2101-01-06,,,Nursing,Report,,,"bad \xff bytes SECRET"\n',
    # 6: good, quoted
    b'7,13,103,2101-01-07,,,Discharge summary,Report,,,"final ""quoted"" note"\n',
]
MIMIC_DOCS = {
    "doc_id": ["1", "2", "7"],
    "patient_id": ["10", "11", "13"],
    "group_id": ["100", None, "103"],
    "text": ['Line one\nline "two" here\n', "Café naïve 患者, ok", 'final "quoted" note'],
    "chartdate": ["2101-01-01", "2101-01-02", "2101-01-07"],
    "category": ["Nursing", "Radiology", "Discharge summary"],
    "description": ["Report", "CHEST (PA & LAT)", "Report"],
}
MIMIC_REJECTED = [
    (2, "SUBJECT_ID", "missing patient id"),
    (3, "TEXT", "empty text"),
    (4, None, "wrong column count"),
    (5, "TEXT", NOT_UTF8),
]
MIMIC_BY_REASON = {
    "missing patient id": 1,
    "empty text": 1,
    "wrong column count": 1,
    NOT_UTF8: 1,
}


@pytest.fixture
def mimic_csv(tmp_path: Path) -> Path:
    path = tmp_path / "NOTEEVENTS.csv"
    path.write_bytes(MIMIC_HEADER + b"".join(MIMIC_ROWS))
    return path


@pytest.fixture
def mimic_gz(tmp_path: Path) -> Path:
    path = tmp_path / "NOTEEVENTS.csv.gz"
    path.write_bytes(gzip.compress(MIMIC_HEADER + b"".join(MIMIC_ROWS)))
    return path


@pytest.mark.parametrize("which", ["mimic_csv", "mimic_gz"])
def test_mimic(which: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    src = request.getfixturevalue(which)
    m, table = run_ingest(src, tmp_path / "out")
    assert m["format"] == "mimic"
    check_manifest(m, 3, MIMIC_BY_REASON)
    assert table.schema.names == [*DOCUMENTS.names, "chartdate", "category", "description"]
    assert table.schema.field("text").type == pa.large_string()
    assert table.to_pydict() == MIMIC_DOCS
    assert rejected(tmp_path / "out") == [(str(src), *r) for r in MIMIC_REJECTED]


def test_mimic_explicit_format_and_lower_case_header(tmp_path: Path) -> None:
    src = tmp_path / "notes.data"
    src.write_bytes(MIMIC_HEADER.lower() + b"".join(MIMIC_ROWS))
    m, table = run_ingest(src, tmp_path / "out", fmt="mimic")
    check_manifest(m, 3, MIMIC_BY_REASON)
    assert table.to_pydict() == MIMIC_DOCS
    reasons = [(r[1], r[2], r[3]) for r in rejected(tmp_path / "out")]
    assert reasons == [(row, col and col.lower(), why) for row, col, why in MIMIC_REJECTED]


def test_mimic_custom_columns_and_missing_doc_ids(tmp_path: Path) -> None:
    src = tmp_path / "notes.csv"
    src.write_text('id,who,body\n,p1,"hello"\nn2, p2 ,"world"\n', encoding="utf-8")
    m, table = run_ingest(src, tmp_path / "out", doc_col="id", patient_col="WHO", text_col="body")
    check_manifest(m, 2, {})
    assert table.to_pydict() == {
        "doc_id": ["notes:0", "n2"],
        "patient_id": ["p1", "p2"],
        "group_id": [None, None],
        "text": ["hello", "world"],
    }


def test_mimic_batch_independent(mimic_csv: Path, mimic_gz: Path, tmp_path: Path) -> None:
    assert_batch_independent(mimic_csv, tmp_path / "plain")
    assert_batch_independent(mimic_gz, tmp_path / "gz")


def test_mimic_row_numbers_across_many_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Skipped rows (wrong column count) keep every later row's number right, block after block."""
    monkeypatch.setattr(mimic, "_CSV_BLOCK_BYTES", 512)
    lines, bad, empty = [MIMIC_HEADER], [], []
    for i in range(2000):
        text = f'note {i}\nwith ""quotes"" and, commas'
        if i % 97 == 5:
            lines.append(f'{i},{i % 13},,,,,c,d,,"{text}"\n'.encode())  # one column short
            bad.append(i)
        elif i % 89 == 3:
            lines.append(f'{i},{i % 13},,,,,c,d,,,""\n'.encode())
            empty.append(i)
        else:
            lines.append(f'{i},{i % 13},,,,,c,d,,,"{text}"\n'.encode())
    src = tmp_path / "big.csv.gz"
    src.write_bytes(gzip.compress(b"".join(lines)))
    for batch_rows in (7, 8192):
        out = tmp_path / f"out{batch_rows}"
        m, table = run_ingest(src, out, batch_rows=batch_rows)
        good = [i for i in range(2000) if i not in bad and i not in empty]
        check_manifest(m, len(good), {"wrong column count": len(bad), "empty text": len(empty)})
        assert table["doc_id"].to_pylist() == [str(i) for i in good]
        assert table["text"].to_pylist()[:1] == ['note 0\nwith "quotes" and, commas']
        assert [r[1] for r in rejected(out) if r[3] == "wrong column count"] == bad
        assert [r[1] for r in rejected(out) if r[3] == "empty text"] == empty


def test_mimic_read_documents_batches(mimic_csv: Path) -> None:
    stream = read_documents(mimic_csv, batch_rows=2)
    chunks = list(stream)
    assert all(b.num_rows <= 2 and b.schema == stream.schema for b, _ in chunks)
    rejections = [r for _, rs in chunks for r in rs]
    assert all(isinstance(r, Rejection) for r in rejections)
    assert sorted((r.row, r.column, r.reason) for r in rejections) == MIMIC_REJECTED
    assert sum(b.num_rows for b, _ in chunks) == 3


@pytest.mark.parametrize("column", ["SUBJECT_ID", "TEXT", "ROW_ID"])
def test_mimic_missing_required_column(column: str, tmp_path: Path) -> None:
    names = MIMIC_HEADER.decode().strip().split(",")
    keep = [i for i, n in enumerate(names) if n != column]
    row = ["1", "10", "100", "2101-01-01", "", "", "c", "d", "", "", f"{SECRET} text"]
    src = tmp_path / "notes.csv"
    src.write_text(",".join(names[i] for i in keep) + "\n" + ",".join(row[i] for i in keep) + "\n")
    out = tmp_path / "out"
    with pytest.raises(InputError) as err:
        ingest(src, out)
    assert err.value.column == column
    assert err.value.path == str(src)
    assert column in str(err.value) and str(src) in str(err.value)
    assert SECRET not in str(err.value)
    assert not out.exists()


def test_mimic_empty_file(tmp_path: Path) -> None:
    src = tmp_path / "empty.csv"
    src.write_bytes(b"")
    with pytest.raises(InputError, match="empty"):
        ingest(src, tmp_path / "out")


def test_mimic_header_only(tmp_path: Path) -> None:
    src = tmp_path / "header.csv"
    src.write_bytes(MIMIC_HEADER)
    m, table = run_ingest(src, tmp_path / "out")
    check_manifest(m, 0, {})
    assert table.num_rows == 0
    assert table.schema.names[:4] == DOCUMENTS.names


# --------------------------------------------------------------------------------------------
# physionet

PHYSIONET = (
    b"START_OF_RECORD=1||||1||||\n"  # 0: good
    b'Hello "world"\nline 2 \xc3\xbc\n'
    b"||||END_OF_RECORD\n"
    b"\n"
    b"START_OF_RECORD=1||||2|||\n"  # 1: bad header
    b"text SECRET\n"
    b"||||END_OF_RECORD\n"
    b"START_OF_RECORD=2||||1||||\n"  # 2: no END_OF_RECORD
    b"unterminated SECRET\n"
    b"START_OF_RECORD=2||||2||||\n"  # 3: whitespace-only text
    b"   \n"
    b"||||END_OF_RECORD\n"
    b"START_OF_RECORD=3||||1||||\n"  # 4: invalid UTF-8
    b"bad \xfe SECRET\n"
    b"||||END_OF_RECORD\n"
    b"stray line SECRET\n"  # 5: text outside a record
    b"START_OF_RECORD=3||||2||||\n"  # 6: good, END on the text's last line
    b"  inline text||||END_OF_RECORD\n"
    b"START_OF_RECORD=||||3||||\n"  # 7: no patient
    b"x SECRET\n"
    b"||||END_OF_RECORD\n"
    b"START_OF_RECORD=4||||1||||\n"  # 8: file ends inside the record
    b"tail SECRET"
)


@pytest.fixture
def physionet_text(tmp_path: Path) -> Path:
    path = tmp_path / "id.text"
    path.write_bytes(PHYSIONET)
    return path


def test_physionet(physionet_text: Path, tmp_path: Path) -> None:
    m, table = run_ingest(physionet_text, tmp_path / "out")
    assert m["format"] == "physionet"
    check_manifest(
        m,
        2,
        {"malformed record": 4, "empty text": 1, NOT_UTF8: 1, "missing patient id": 1},
    )
    assert table.to_pydict() == {
        "doc_id": ["1-1", "3-2"],
        "patient_id": ["1", "3"],
        "group_id": [None, None],
        "text": ['Hello "world"\nline 2 ü\n', "  inline text"],
    }
    src = str(physionet_text)
    assert rejected(tmp_path / "out") == [
        (src, 1, None, "malformed record"),
        (src, 2, None, "malformed record"),
        (src, 3, None, "empty text"),
        (src, 4, None, NOT_UTF8),
        (src, 5, None, "malformed record"),
        (src, 7, None, "missing patient id"),
        (src, 8, None, "malformed record"),
    ]


def test_physionet_keeps_crlf_and_batch_independent(physionet_text: Path, tmp_path: Path) -> None:
    src = tmp_path / "crlf.text"
    src.write_bytes(b"START_OF_RECORD=5||||9||||\r\nline\r\nnext\r\n||||END_OF_RECORD\r\n")
    _, table = run_ingest(src, tmp_path / "out", fmt="physionet")
    assert table["text"].to_pylist() == ["line\r\nnext\r\n"]
    assert table["doc_id"].to_pylist() == ["5-9"]
    assert_batch_independent(physionet_text, tmp_path / "batches")


def test_physionet_rejects_column_options(physionet_text: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="do not apply"):
        read_documents(physionet_text, patient_col="x")
    with pytest.raises(InputError, match="id_map"):
        read_documents(physionet_text, id_map=tmp_path / "map.csv")


def corpus_dir() -> Path:
    corpus = Path(os.environ.get("PHISIEVE_TEST_CORPUS", "../shared/data/physionet-deid"))
    return corpus if corpus.is_absolute() else (REPO / corpus).resolve()


@pytest.fixture(scope="module")
def corpus_docs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, pa.Table]:
    corpus = corpus_dir()
    assert (corpus / "id.text").is_file(), f"PhysioNet corpus not found at {corpus}"
    out = tmp_path_factory.mktemp("corpus") / "out"
    return run_ingest(corpus / "id.text", out)


def test_real_corpus_counts(corpus_docs: tuple[dict, pa.Table]) -> None:
    m, table = corpus_docs
    check_manifest(m, 1450, {})
    assert table.num_rows == 1450
    assert len(set(table["patient_id"].to_pylist())) == 82
    assert len(set(table["doc_id"].to_pylist())) == 1450
    assert table["group_id"].null_count == 1450


def test_real_corpus_phi_offsets(corpus_docs: tuple[dict, pa.Table]) -> None:
    """Every gold PHI span of id-phi.phrase is exactly where it says in the ingested text."""
    _, table = corpus_docs
    texts = dict(zip(table["doc_id"].to_pylist(), table["text"].to_pylist(), strict=True))
    lines = (corpus_dir() / "id-phi.phrase").read_text(encoding="utf-8").splitlines()
    assert len(lines) > 900
    for line in lines:
        # <patient> <note> <start> <end> <category> <phrase>; some phrases hold a space
        patient, note, start, end, _category, phrase = line.split(" ", 5)
        text = texts[f"{patient}-{note}"]
        assert text[int(start) : int(end)] == phrase, line


def test_real_corpus_batch_independent(tmp_path: Path) -> None:
    src = corpus_dir() / "id.text"
    outs = [ingest(src, tmp_path / str(n), batch_rows=n) for n in (7, 8192)]
    assert outs[0]["rows"] == outs[1]["rows"] == 1450
    assert read_out(tmp_path / "7").equals(read_out(tmp_path / "8192"))


# --------------------------------------------------------------------------------------------
# jsonl

JSONL = [
    b'{"patient_id": "p1", "doc_id": "d1", "text": "h\\u00e9llo\\nworld", "group_id": "g1"}',
    '{"patient_id": 7, "text": "no doc id ✓"}'.encode(),
    b"   ",  # 2: blank, not a row
    b"{not json SECRET",  # 3
    b"[1, 2]",  # 4: not an object
    b'{"text": "no patient SECRET"}',  # 5
    b'{"patient_id": "p2", "text": " \\t "}',  # 6: whitespace-only
    b'{"patient_id": "p3", "text": "\xff SECRET"}',  # 7: invalid UTF-8
    b'{"patient_id": "p4", "text": "\\udc80 SECRET"}',  # 8: lone surrogate escape
    b'{"patient_id": "p5", "text": 5}',  # 9: text not a string
    b'{"patient_id": "p6", "doc_id": 66, "text": "last", "other": [1]}',  # 10: no newline at end
]


@pytest.fixture
def jsonl_file(tmp_path: Path) -> Path:
    path = tmp_path / "notes.jsonl"
    path.write_bytes(b"\n".join(JSONL))
    return path


JSONL_DOCS = {
    "doc_id": ["d1", "notes:1", "66"],
    "patient_id": ["p1", "7", "p6"],
    "group_id": ["g1", None, None],
    "text": ["héllo\nworld", "no doc id ✓", "last"],
}
JSONL_REJECTED = [
    (3, None, "invalid json"),
    (4, None, "invalid json"),
    (5, "patient_id", "missing patient id"),
    (6, "text", "empty text"),
    (7, None, NOT_UTF8),
    (8, "text", "undecodable bytes"),  # a lone surrogate escape: no bytes are at fault
    (9, "text", "wrong type"),
]


@pytest.mark.parametrize("gz", [False, True])
def test_jsonl(gz: bool, jsonl_file: Path, tmp_path: Path) -> None:
    src = jsonl_file
    if gz:
        src = tmp_path / "notes.jsonl.gz"
        src.write_bytes(gzip.compress(jsonl_file.read_bytes()))
    m, table = run_ingest(src, tmp_path / "out")
    assert m["format"] == "jsonl"
    check_manifest(
        m,
        3,
        {
            "invalid json": 2,
            "wrong type": 1,
            "missing patient id": 1,
            "empty text": 1,
            NOT_UTF8: 1,
            "undecodable bytes": 1,
        },
    )
    assert table.schema == DOCUMENTS
    assert table.to_pydict() == JSONL_DOCS
    assert rejected(tmp_path / "out") == [(str(src), *r) for r in JSONL_REJECTED]
    assert_batch_independent(src, tmp_path / "batches")


def test_jsonl_custom_columns(tmp_path: Path) -> None:
    src = tmp_path / "x.ndjson"
    rows = [
        {"pid": "a", "body": "one", "nid": "n1", "visit": 3},
        {"pid": "b", "body": "two", "patient_id": "ignored"},
    ]
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    kw = {"patient_col": "pid", "text_col": "body", "doc_col": "nid", "group_col": "visit"}
    m, table = run_ingest(src, tmp_path / "out", fmt="jsonl", **kw)
    check_manifest(m, 2, {})
    assert table.to_pydict() == {
        "doc_id": ["n1", "x:1"],
        "patient_id": ["a", "b"],
        "group_id": ["3", None],
        "text": ["one", "two"],
    }


# --------------------------------------------------------------------------------------------
# parquet


def write_parquet(path: Path, data: dict, schema: pa.Schema | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(data, schema=schema), path)
    return path


def test_parquet_file(tmp_path: Path) -> None:
    src = write_parquet(
        tmp_path / "notes.parquet",
        {
            "doc_id": [1, 2, 3, 4],
            "patient_id": ["a", None, " ", "b"],
            "text": ["first ü", "no patient SECRET", "blank patient SECRET", ""],
            "category": ["x", "y", "z", "w"],
            "score": [1.5, 2.5, 3.5, 4.5],
        },
    )
    m, table = run_ingest(src, tmp_path / "out")
    assert m["format"] == "parquet"
    check_manifest(m, 1, {"missing patient id": 2, "empty text": 1})
    assert table.schema.names == [*DOCUMENTS.names, "category", "score"]
    assert table.to_pydict() == {
        "doc_id": ["1"],
        "patient_id": ["a"],
        "group_id": [None],
        "text": ["first ü"],
        "category": ["x"],
        "score": [1.5],
    }
    assert rejected(tmp_path / "out") == [
        (str(src), 1, "patient_id", "missing patient id"),
        (str(src), 2, "patient_id", "missing patient id"),
        (str(src), 3, "text", "empty text"),
    ]


def test_parquet_folder_binary_text_and_custom_columns(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    schema = pa.schema([("pid", pa.int64()), ("Body", pa.binary()), ("visit", pa.string())])
    write_parquet(
        folder / "b" / "part-0.parquet",
        {"pid": [3, 4], "Body": [b"b0", b"b1 \xc3\xa9"], "visit": ["v3", ""]},
        schema,
    )
    write_parquet(
        folder / "a.parquet",
        {"pid": [1, 2, 5], "Body": [b"a0", b"bad \xff SECRET", b"a2"], "visit": ["v1", "v2", None]},
        schema,
    )
    write_parquet(folder / "_rejected" / "part-0.parquet", {"junk": [1]})
    kw = {"patient_col": "pid", "text_col": "body", "group_col": "visit"}
    m, table = run_ingest(folder, tmp_path / "out", **kw)
    check_manifest(m, 4, {NOT_UTF8: 1})
    assert table.to_pydict() == {
        "doc_id": ["a:0", "a:2", "b/part-0:0", "b/part-0:1"],
        "patient_id": ["1", "5", "3", "4"],
        "group_id": ["v1", None, "v3", None],
        "text": ["a0", "a2", "b0", "b1 é"],
    }
    assert rejected(tmp_path / "out") == [(str(folder / "a.parquet"), 1, "Body", NOT_UTF8)]
    assert_batch_independent(folder, tmp_path / "batches", **kw)


def test_parquet_roundtrip_of_ingest_output(mimic_csv: Path, tmp_path: Path) -> None:
    ingest(mimic_csv, tmp_path / "docs")
    m, table = run_ingest(tmp_path / "docs", tmp_path / "again")
    check_manifest(m, 3, {})
    assert table.equals(read_out(tmp_path / "docs"))


@pytest.mark.parametrize(
    ("kw", "column"),
    [({}, "text"), ({"text_col": "body"}, "body"), ({"group_col": "visit"}, "visit")],
)
def test_parquet_missing_column(kw: dict, column: str, tmp_path: Path) -> None:
    src = write_parquet(tmp_path / "n.parquet", {"patient_id": ["a"], "note": [SECRET]})
    if column != "text":
        src = write_parquet(
            tmp_path / "n.parquet", {"patient_id": ["a"], "text": [SECRET], "note": ["x"]}
        )
    with pytest.raises(InputError) as err:
        ingest(src, tmp_path / "out", **kw)
    assert err.value.column == column
    assert SECRET not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_parquet_bad_text_type_and_corrupt_file(tmp_path: Path) -> None:
    src = write_parquet(tmp_path / "n.parquet", {"patient_id": ["a"], "text": [1]})
    with pytest.raises(InputError, match="type") as err:
        ingest(src, tmp_path / "out")
    assert err.value.column == "text"
    bad = tmp_path / "corrupt.parquet"
    bad.write_bytes(f"PAR1 {SECRET} not really parquet".encode())
    with pytest.raises(InputError) as err:
        ingest(bad, tmp_path / "out")
    assert SECRET not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_output_must_not_be_input(tmp_path: Path) -> None:
    src = write_parquet(
        tmp_path / "in" / "part-00000.parquet", {"patient_id": ["a"], "text": ["t"]}
    )
    with pytest.raises(InputError, match="output"):
        ingest(src.parent, src.parent)
    with pytest.raises(InputError, match="output"):
        ingest(src.parent, tmp_path)
    with pytest.raises(InputError, match="output"):
        ingest(src.parent, src.parent / "sub")
    assert src.exists()


@pytest.mark.parametrize("name", ["n.jsonl.gz", "n.csv.gz", "n.text.gz"])
def test_truncated_gzip(name: str, tmp_path: Path) -> None:
    row = {"patient_id": "p", "text": f"{SECRET} " * 50}
    data = (MIMIC_HEADER if name.endswith("csv.gz") else b"") + json.dumps(row).encode() * 500
    src = tmp_path / name
    src.write_bytes(gzip.compress(data)[:300])
    with pytest.raises(InputError) as err:
        ingest(src, tmp_path / "out")
    assert SECRET not in str(err.value)


# --------------------------------------------------------------------------------------------
# txt


@pytest.fixture
def notes_dir(tmp_path: Path) -> Path:
    root = tmp_path / "notes"
    files = {
        "p1/a.txt": b"first\r\nnote\n",
        "p1/sub/b.txt": b"second",
        "p2/c.txt": "Zo\u00eb \u60a3\u8005".encode(),
        "p2/empty.txt": b" \n\t",
        "p3/bad.txt": b"bad \xff SECRET",
        "top.txt": b"nobody SECRET",
        "p4/readme.md": b"not a note",
        ".hidden/x.txt": b"hidden",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def test_txt_patient_from_folder(notes_dir: Path, tmp_path: Path) -> None:
    m, table = run_ingest(notes_dir, tmp_path / "out")
    assert m["format"] == "txt"
    check_manifest(m, 3, {"empty text": 1, NOT_UTF8: 1, "no patient id": 1})
    assert table.to_pydict() == {
        "doc_id": ["p1/a", "p1/sub/b", "p2/c"],
        "patient_id": ["p1", "p1", "p2"],
        "group_id": [None, None, None],
        "text": ["first\r\nnote\n", "second", "Zoë 患者"],
    }
    src = str(notes_dir)
    assert rejected(tmp_path / "out") == [
        (src, 3, None, "empty text"),
        (src, 4, None, NOT_UTF8),
        (src, 5, None, "no patient id"),
    ]
    assert_batch_independent(notes_dir, tmp_path / "batches")


def test_txt_id_map(notes_dir: Path, tmp_path: Path) -> None:
    id_map = tmp_path / "ids.csv"
    id_map.write_text(
        "file,patient_id,group_id\n"
        "p1/a.txt,P-9,G1\n"
        "top.txt,P-7,\n"
        "p2/c,P-8,G2\n"  # without the .txt suffix
        "p1/sub/b.txt,,\n",  # mapped, but to no patient
        encoding="utf-8",
    )
    m, table = run_ingest(notes_dir, tmp_path / "out", fmt="txt", id_map=id_map)
    check_manifest(m, 3, {"missing patient id": 1, "no patient id": 2})
    assert table.to_pydict() == {
        "doc_id": ["p1/a", "p2/c", "top"],
        "patient_id": ["P-9", "P-8", "P-7"],
        "group_id": ["G1", "G2", None],
        "text": ["first\r\nnote\n", "Zoë 患者", "nobody SECRET"],
    }
    src = str(notes_dir)
    assert rejected(tmp_path / "out") == [
        (src, 1, "patient_id", "missing patient id"),
        (src, 3, None, "no patient id"),
        (src, 4, None, "no patient id"),
    ]


def test_txt_bad_id_map(notes_dir: Path, tmp_path: Path) -> None:
    id_map = tmp_path / "ids.csv"
    id_map.write_text("path,patient_id\na.txt,1\n")
    with pytest.raises(InputError) as err:
        ingest(notes_dir, tmp_path / "out", id_map=id_map)
    assert err.value.column == "file"
    assert not (tmp_path / "out").exists()
    id_map.write_text("file,patient_id\na.txt,1\n./a.txt,2\n")
    with pytest.raises(InputError, match="twice"):
        ingest(notes_dir, tmp_path / "out", id_map=id_map)


# --------------------------------------------------------------------------------------------
# format choice, errors, progress


def test_auto_detection(
    mimic_gz: Path, physionet_text: Path, jsonl_file: Path, notes_dir: Path, tmp_path: Path
) -> None:
    pq_dir = tmp_path / "pq"
    write_parquet(pq_dir / "x.parquet", {"patient_id": ["a"], "text": ["t"]})
    for src, fmt in [
        (mimic_gz, "mimic"),
        (physionet_text, "physionet"),
        (jsonl_file, "jsonl"),
        (notes_dir, "txt"),
        (pq_dir, "parquet"),
        (pq_dir / "x.parquet", "parquet"),
    ]:
        assert read_documents(src).fmt == fmt


def test_unknown_format(mimic_csv: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        read_documents(mimic_csv, "csv")  # raised on the call, not on iteration
    assert all(f in str(err.value) for f in FORMATS)
    odd = tmp_path / "notes.xlsx"
    odd.write_text(SECRET)
    with pytest.raises(InputError, match="unknown format") as err:
        ingest(odd, tmp_path / "out")
    assert SECRET not in str(err.value)
    empty = tmp_path / "empty_dir"
    empty.mkdir()
    with pytest.raises(InputError, match="unknown format"):
        ingest(empty, tmp_path / "out")
    with pytest.raises(InputError, match="no such"):
        ingest(tmp_path / "missing.csv", tmp_path / "out")
    with pytest.raises(InputError, match="batch_rows"):
        read_documents(mimic_csv, batch_rows=0)
    assert not (tmp_path / "out").exists()


def test_progress_bar_without_tty(
    mimic_gz: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m = ingest(mimic_gz, tmp_path / "out", progress=True)
    check_manifest(m, 3, MIMIC_BY_REASON)
    err = capsys.readouterr().err
    assert SECRET not in err
    assert read_out(tmp_path / "out").to_pydict() == MIMIC_DOCS


@settings(max_examples=40, deadline=None)
@given(
    texts=st.lists(
        # NUL characters now reject their row: see test_hostile_input.py
        st.text(min_size=1, max_size=40).filter(lambda t: not t.isspace() and "\x00" not in t),
        min_size=1,
        max_size=8,
    ),
    short_rows=st.sets(st.integers(0, 7)),
)
def test_mimic_csv_roundtrip(texts: list[str], short_rows: set[int]) -> None:
    """Any text (quotes, commas, line breaks, non-ASCII) written as CSV is read back exactly."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "notes.csv"
        with open(src, "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f, quoting=csv.QUOTE_ALL, lineterminator="\n")
            writer.writerow(["ROW_ID", "SUBJECT_ID", "TEXT"])
            for i, text in enumerate(texts):
                writer.writerow([i, 100 + i, text][: 2 if i in short_rows else 3])
        chunks = list(read_documents(src, batch_rows=3))
        good = [i for i in range(len(texts)) if i not in short_rows]
        table = pa.Table.from_batches([b for b, _ in chunks])
        assert table["text"].to_pylist() == [texts[i] for i in good]
        assert table["doc_id"].to_pylist() == [str(i) for i in good]
        wrong = sorted(r.row for _, rs in chunks for r in rs)
        assert wrong == sorted(i for i in short_rows if i < len(texts))
