"""Hostile input for ``phisieve ingest``: malformed files of every kind never make phisieve
print, log, raise or record note text; damaged records are rejected, never attached to another
patient; ids, folders, JSON types, NUL characters and encodings are handled one way everywhere.

Reason strings are spelled out (not imported) so these tests also run against older readers.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import logging
import random
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phisieve.api import ingest
from phisieve.cli import main
from phisieve.errors import InputError
from phisieve.io.dataset import read_manifest, read_rejected
from phisieve.io.readers import REASONS, csv_repair, mimic, read_documents

MARKER = "ZZMARKERZZ"  # in every note (and other text-like field): must never come out
M = MARKER.encode()

HEADER = (
    b"ROW_ID,SUBJECT_ID,HADM_ID,CHARTDATE,CHARTTIME,STORETIME,CATEGORY,DESCRIPTION,CGID,"
    b"ISERROR,TEXT\n"
)


def row(i: int, text: str | bytes, *, subject: str | None = None, close: bool = True) -> bytes:
    """A MIMIC NOTEEVENTS record, quoted as MIMIC ships it (TEXT ends with a line break)."""
    body = text.encode() if isinstance(text, str) else text
    body = body.replace(b'"', b'""')
    subject = str(100 + i) if subject is None else subject
    end = b'"\n' if close else b"\n"
    return (
        f'{i},{subject},{200 + i},2101-01-01,,,"Nursing {MARKER}","Report {MARKER}",,,"'.encode()
        + body
        + end
    )


def note(i: int) -> str:
    """Note ``i``: multi-line, with quotes, and naming its patient."""
    return f'Note {i} of patient {100 + i} {MARKER}\nBP 120/80, "stable"\n\n'


def write_parquet(path: Path, data: dict, schema: pa.Schema | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(data, schema=schema), path)
    return path


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def cli(*args: str) -> int:
    """Run ``phisieve`` with ``args``; its exit status."""
    try:
        main(list(args))
    except SystemExit as exc:
        return 0 if exc.code is None else int(exc.code)
    return 0


def rejections(out: Path) -> list[tuple[str, int, str | None, str]]:
    t = read_rejected(out)
    cols = ("source", "row", "column", "reason")
    return sorted(zip(*(t[c].to_pylist() for c in cols), strict=True), key=lambda r: r[:2])


# --------------------------------------------------------------------------------------------
# 1. No patient text anywhere: every malformed input kind, through the CLI and the API


def _headerless(d: Path) -> tuple[Path, list[str]]:
    return write(d / "notes.csv", row(1, note(1)) + row(2, note(2))), []


def _headerless_full(d: Path) -> tuple[Path, list[str]]:
    # no empty field: the first row passes for a header of unique names
    data = f'1,101,201,2101-01-01,Nursing,"{MARKER} note text, and more"\n'.encode()
    return write(d / "notes.csv", data), []


def _headerless_words(d: Path) -> tuple[Path, list[str]]:
    # a first row whose fields all look like identifiers, the note a single word
    return write(d / "notes.csv", f"1,{MARKER},{MARKER}_x\n".encode()), []


def _jsonl_as_mimic(d: Path) -> tuple[Path, list[str]]:
    line = json.dumps({"patient_id": "p1", "text": f"{MARKER} note, with commas"})
    return write(d / "notes.jsonl", line.encode() + b"\n"), ["--format", "mimic"]


def _physionet_as_mimic(d: Path) -> tuple[Path, list[str]]:
    data = f"START_OF_RECORD=1||||1||||\n{MARKER}\n||||END_OF_RECORD\n".encode()
    return write(d / "id.text", data), ["--format", "mimic"]


def _parquet_as_mimic(d: Path) -> tuple[Path, list[str]]:
    src = write_parquet(d / "n.parquet", {"patient_id": ["1"], "text": [MARKER]})
    return src, ["--format", "mimic"]


def _csv_as_jsonl(d: Path) -> tuple[Path, list[str]]:
    return write(d / "notes.csv", HEADER + row(1, note(1))), ["--format", "jsonl"]


def _csv_as_physionet(d: Path) -> tuple[Path, list[str]]:
    return write(d / "notes.csv", HEADER + row(1, note(1))), ["--format", "physionet"]


def _csv_named_jsonl(d: Path) -> tuple[Path, list[str]]:
    return write(d / "notes.jsonl", HEADER + row(1, note(1))), []


def _jsonl_named_csv(d: Path) -> tuple[Path, list[str]]:
    line = json.dumps({"SUBJECT_ID": 1, "TEXT": f"{MARKER} a b"}).encode()
    return write(d / "notes.csv", line + b"\n"), []


def _unclosed_quote(d: Path) -> tuple[Path, list[str]]:
    rows = [row(i, note(i), close=i != 1) for i in range(4)]
    return write(d / "notes.csv", HEADER + b"".join(rows)), []


def _unclosed_quote_at_end(d: Path) -> tuple[Path, list[str]]:
    rows = [row(i, note(i), close=i != 2) for i in range(3)]
    return write(d / "notes.csv", HEADER + b"".join(rows)), []


def _wrong_column_count(d: Path) -> tuple[Path, list[str]]:
    short = f'2,102,,2101-01-01,,,c,"{MARKER} short"\n'.encode()
    return write(d / "notes.csv", HEADER + row(1, note(1)) + short + row(3, note(3))), []


def _duplicate_data_header(d: Path) -> tuple[Path, list[str]]:
    head = f"ROW_ID,SUBJECT_ID,TEXT,{MARKER} x,{MARKER} x\n".encode()
    return write(d / "notes.csv", head + b"1,2,t,a,b\n"), []


def _not_utf8(d: Path) -> tuple[Path, list[str]]:
    bad = row(1, MARKER.encode() + b" caf\xe9\n")
    return write(d / "notes.csv", HEADER + bad + row(2, note(2))), []


def _not_utf8_header(d: Path) -> tuple[Path, list[str]]:
    head = HEADER.replace(b"TEXT", b"T\xc9XT " + M)
    return write(d / "notes.csv", head + row(1, note(1))), []


def _bad_gzip_csv(d: Path) -> tuple[Path, list[str]]:
    data = gzip.compress(HEADER + b"".join(row(i, note(i) * 20) for i in range(50)))
    return write(d / "notes.csv.gz", data[:400]), []


def _bad_gzip_jsonl(d: Path) -> tuple[Path, list[str]]:
    lines = (json.dumps({"patient_id": "1", "text": note(i) * 20}) + "\n" for i in range(50))
    return write(d / "notes.jsonl.gz", gzip.compress("".join(lines).encode())[:300]), []


def _not_gzip(d: Path) -> tuple[Path, list[str]]:
    return write(d / "notes.jsonl.gz", b"\x1f\x8b" + M + b" not gzip at all"), []


def _json_wrong_types(d: Path) -> tuple[Path, list[str]]:
    records = [
        {"patient_id": "1", "text": [MARKER]},
        {"patient_id": "1", "text": {"t": MARKER}},
        {"patient_id": "1", "text": True},
        {"patient_id": "1", "text": 12.5},
        {"patient_id": [MARKER], "text": MARKER},
        {"patient_id": {"id": MARKER}, "text": MARKER},
        {"patient_id": 1.5, "text": MARKER},
        {"patient_id": "1", "doc_id": [MARKER], "text": MARKER},
        {"patient_id": "1", "group_id": {"g": MARKER}, "text": MARKER},
        {MARKER: MARKER},
        [MARKER],
        MARKER,
    ]
    lines = [json.dumps(r) for r in records]
    lines += [f'{{"patient_id": "1", "text": "{MARKER}"', "[" * 100_000 + MARKER, "NaN"]
    return write(d / "notes.jsonl", "\n".join(lines).encode()), []


def _subject_not_integer(d: Path) -> tuple[Path, list[str]]:
    rows = row(1, note(1), subject=MARKER) + row(2, note(2), subject="1.5")
    return write(d / "notes.csv", HEADER + rows), []


def _nul_in_text(d: Path) -> tuple[Path, list[str]]:
    return write(d / "notes.csv", HEADER + row(1, M + b"\x00" + M)), []


def _nul_in_jsonl(d: Path) -> tuple[Path, list[str]]:
    line = json.dumps({"patient_id": "1", "text": f"{MARKER}\x00{MARKER}"})
    return write(d / "notes.jsonl", line.encode()), []


def _empty_text(d: Path) -> tuple[Path, list[str]]:
    return write(d / "notes.csv", HEADER + row(1, b" \n ") + row(2, note(2))), []


def _physionet_broken(d: Path) -> tuple[Path, list[str]]:
    data = (
        f"START_OF_RECORD=1||||1|||\n{MARKER}\n||||END_OF_RECORD\n"
        f"START_OF_RECORD={MARKER}||||\n{MARKER}\n"
        f"stray {MARKER}\n"
        f"START_OF_RECORD=2||||2||||\n{MARKER}\x00\n||||END_OF_RECORD\n"
        f"START_OF_RECORD=3||||3||||\n{MARKER}"
    ).encode() + b"START_OF_RECORD=4||||\xff||||\nx\n||||END_OF_RECORD\n"
    return write(d / "id.text", data), []


def _parquet_text_int(d: Path) -> tuple[Path, list[str]]:
    return write_parquet(d / "n.parquet", {"patient_id": [MARKER], "text": [1]}), []


def _parquet_float_id(d: Path) -> tuple[Path, list[str]]:
    return write_parquet(d / "n.parquet", {"patient_id": [1.5], "text": [MARKER]}), []


def _parquet_struct_text(d: Path) -> tuple[Path, list[str]]:
    data = {"patient_id": ["1"], "text": [{"t": MARKER}]}
    return write_parquet(d / "n.parquet", data), []


def _parquet_data_column_names(d: Path) -> tuple[Path, list[str]]:
    data = {f"{MARKER} note text": ["a"], "patient_id": ["1"]}
    return write_parquet(d / "n.parquet", data), []


def _parquet_corrupt(d: Path) -> tuple[Path, list[str]]:
    return write(d / "n.parquet", b"PAR1" + M + b" not really parquet PAR1"), []


def _parquet_mixed_folder(d: Path) -> tuple[Path, list[str]]:
    write_parquet(d / "in" / "a.parquet", {"patient_id": [1], "text": [MARKER]})
    write_parquet(d / "in" / "b.parquet", {"patient_id": [2.0], "text": [MARKER]})
    return d / "in", []


def _parquet_extra_types(d: Path) -> tuple[Path, list[str]]:
    write_parquet(d / "in" / "a.parquet", {"patient_id": ["1"], "text": ["t"], "x": [1]})
    write_parquet(d / "in" / "b.parquet", {"patient_id": ["2"], "text": ["t"], "x": [MARKER]})
    return d / "in", []


def _txt_folder(d: Path) -> tuple[Path, list[str]]:
    files = {
        "p1/a.txt": M,
        "p1/nul.txt": M + b"\x00",
        "p1/latin.txt": M + b" caf\xe9",
        "p1/empty.txt": b" \n",
        "top.txt": M,
    }
    for rel, data in files.items():
        write(d / "notes" / rel, data)
    return d / "notes", ["--format", "txt"]


def _txt_bad_id_map(d: Path) -> tuple[Path, list[str]]:
    write(d / "notes" / "a.txt", M)
    idmap = write(d / "ids.csv", f"file,patient_id\na.txt,{MARKER}\n./a.txt,{MARKER}\n".encode())
    return d / "notes", ["--id-map", str(idmap)]


def _txt_id_map_data_header(d: Path) -> tuple[Path, list[str]]:
    write(d / "notes" / "a.txt", M)
    idmap = write(d / "ids.csv", f'"{MARKER} ""x",{MARKER}\na.txt,1\n'.encode())
    return d / "notes", ["--id-map", str(idmap)]


def _txt_on_file(d: Path) -> tuple[Path, list[str]]:
    return write(d / "a.txt", M), ["--format", "txt"]


def _empty_folder_as_mimic(d: Path) -> tuple[Path, list[str]]:
    write(d / "in" / "notes.txt", M)
    return d / "in", ["--format", "mimic"]


def _folder_with_headerless_csv(d: Path) -> tuple[Path, list[str]]:
    write(d / "in" / "a.csv", HEADER + row(1, note(1)))
    write(d / "in" / "sub" / "b.csv", row(2, note(2)))
    return d / "in", ["--format", "mimic"]


def _unknown_suffix(d: Path) -> tuple[Path, list[str]]:
    return write(d / "notes.xlsx", M + b" text, more text\n"), []


def _latin1_header_with_encoding(d: Path) -> tuple[Path, list[str]]:
    data = HEADER + row(1, M + b" caf\xe9") + row(2, b"\x00" + M)
    return write(d / "notes.csv", data), ["--encoding", "latin-1"]


def _long_header_field(d: Path) -> tuple[Path, list[str]]:
    # a first line with a field over the csv module's 131072-character limit
    return write(d / "notes.csv", b"1,2,3,4," + M * 20_000 + b"\n5,6,7,8,x\n"), []


def _idna_encoding(d: Path) -> tuple[Path, list[str]]:
    data = json.dumps({"patient_id": "1", "text": f"Seen by Dr.xn--{MARKER}-5qa.today"})
    return write(d / "notes.jsonl", data.encode() + b"\n"), ["--encoding", "idna"]


CASES: dict[str, Callable[[Path], tuple[Path, list[str]]]] = {
    f.__name__.lstrip("_"): f
    for f in (
        _headerless,
        _headerless_full,
        _headerless_words,
        _jsonl_as_mimic,
        _physionet_as_mimic,
        _parquet_as_mimic,
        _csv_as_jsonl,
        _csv_as_physionet,
        _csv_named_jsonl,
        _jsonl_named_csv,
        _unclosed_quote,
        _unclosed_quote_at_end,
        _wrong_column_count,
        _duplicate_data_header,
        _not_utf8,
        _not_utf8_header,
        _bad_gzip_csv,
        _bad_gzip_jsonl,
        _not_gzip,
        _json_wrong_types,
        _subject_not_integer,
        _nul_in_text,
        _nul_in_jsonl,
        _empty_text,
        _physionet_broken,
        _parquet_text_int,
        _parquet_float_id,
        _parquet_struct_text,
        _parquet_data_column_names,
        _parquet_corrupt,
        _parquet_mixed_folder,
        _parquet_extra_types,
        _txt_folder,
        _txt_bad_id_map,
        _txt_id_map_data_header,
        _txt_on_file,
        _empty_folder_as_mimic,
        _folder_with_headerless_csv,
        _unknown_suffix,
        _latin1_header_with_encoding,
        _long_header_field,
        _idna_encoding,
    )
}


def _api_kwargs(args: list[str]) -> dict:
    """The CLI options of a case as keyword arguments of :func:`ingest`."""
    names = {"--format": "fmt", "--id-map": "id_map", "--encoding": "encoding"}
    return {names[k]: v for k, v in zip(args[::2], args[1::2], strict=True)}


def _assert_no_marker_in_output(out: Path) -> None:
    try:
        manifest = read_manifest(out)
    except InputError:
        return  # nothing was written
    assert MARKER not in json.dumps(manifest)
    for r in rejections(out):
        assert all(MARKER not in str(v) for v in r), r
        assert r[3] in REASONS


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_patient_text_comes_out(
    case: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every kind of malformed input, through the CLI and the API: the marker in the notes
    never reaches stdout, stderr, a log record, a warning, an exception, the manifest or the
    rejected rows; the CLI ends with status 0 or 2, never a traceback."""
    src, args = CASES[case](tmp_path)
    caplog.set_level(logging.DEBUG)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli("ingest", str(src), "--out", str(tmp_path / "cli"), "-q", *args) in (0, 2)
        try:
            ingest(src, tmp_path / "api", **_api_kwargs(args))
        except InputError as exc:
            assert MARKER not in f"{exc} {exc!r} {exc.args}"
            assert MARKER not in f"{exc.path} {exc.column}"
    out, err = capsys.readouterr()
    assert MARKER not in out and MARKER not in err
    assert MARKER not in caplog.text
    assert all(MARKER not in str(w.message) for w in caught)
    _assert_no_marker_in_output(tmp_path / "cli")
    _assert_no_marker_in_output(tmp_path / "api")


def test_header_names_shown_only_when_they_look_like_a_header(tmp_path: Path) -> None:
    """A real header missing a column is listed; a first row of data is only counted."""
    real = write(tmp_path / "real.csv", b"ROW_ID,SUBJECT_ID,HADM_ID,NOTE\n1,2,3,x\n")
    with pytest.raises(InputError) as err:
        read_documents(real)
    assert "ROW_ID, SUBJECT_ID, HADM_ID, NOTE" in str(err.value)
    assert err.value.column == "TEXT" and err.value.path == str(real)
    data = write(tmp_path / "data.csv", row(1, note(1)))
    with pytest.raises(InputError) as err:
        read_documents(data)
    message = str(err.value).replace(str(data), "FILE")  # the path may hold any digits
    assert MARKER not in message and "Nursing" not in message and "101" not in message
    assert "11 column names" in message and "header" in message
    jsonl = write(tmp_path / "n.jsonl", json.dumps({"patient_id": 1, "text": MARKER}).encode())
    with pytest.raises(InputError, match="--format jsonl") as err:
        read_documents(jsonl, "mimic")
    assert MARKER not in str(err.value)


# --------------------------------------------------------------------------------------------
# 2. CSV quoting: an unclosed quote rejects its record and no other


def _ingest_rows(src: Path, out: Path, **kw) -> tuple[dict, list[dict], list[tuple]]:
    m = ingest(src, out, **kw)
    table = pq.read_table(out).select(["doc_id", "patient_id", "text"])
    return m, table.to_pylist(), [(r[1], r[3]) for r in rejections(out)]


@pytest.mark.parametrize("block", [256, 1 << 22])
@pytest.mark.parametrize(
    ("unclosed", "crlf", "gz"),
    [({3}, False, False), ({3}, True, True), ({0, 9}, False, False), ({4, 5}, False, True)],
)
def test_unclosed_quote_rejects_only_the_damaged_records(
    unclosed: set[int],
    crlf: bool,
    gz: bool,
    block: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A TEXT field without its closing quote used to swallow the records after it into one
    document (exit 0, nothing rejected): now the damaged record is rejected with its row
    number, every other record is read with its own patient, and later row numbers hold."""
    monkeypatch.setattr(mimic, "_CSV_BLOCK_BYTES", block)
    n = 10
    rows = [row(i, note(i), close=i not in unclosed) for i in range(n)]
    rows[7] = f"7,107,207,,,,c,d,,{MARKER}\n".encode()  # wrong column count, after the damage
    data = HEADER + b"".join(rows)
    if crlf:
        data = data.replace(b"\n", b"\r\n")
    src = write(
        tmp_path / ("notes.csv.gz" if gz else "notes.csv"), gzip.compress(data) if gz else data
    )
    for batch_rows in (2, 8192):
        m, docs, rej = _ingest_rows(src, tmp_path / f"out{batch_rows}", batch_rows=batch_rows)
        bad = sorted(unclosed - {7})
        assert rej == sorted([(i, "unclosed quote") for i in bad] + [(7, "wrong column count")])
        assert m["rows_in"] == n
        good = [i for i in range(n) if i not in unclosed and i != 7]
        expected = note if not crlf else (lambda i: note(i).replace("\n", "\r\n"))
        assert docs == [
            {"doc_id": str(i), "patient_id": str(100 + i), "text": expected(i)} for i in good
        ]


def test_quotes_that_are_not_damage(tmp_path: Path) -> None:
    """A stray quote inside an unquoted field (read literally, as before), and note lines that
    start like a record, are not mistaken for an unclosed quote."""
    stray = f"2,102,202,,,,c,d,,,He is 5'10\" tall {MARKER}\n".encode()
    table = row(3, "Results:\n12,34,56 mmol\n1,2,,a,b,c\n")
    rows = [row(1, note(1)), stray, table, row(4, note(4))]
    src = write(tmp_path / "notes.csv", HEADER + b"".join(rows))
    _, docs, rej = _ingest_rows(src, tmp_path / "out")
    assert rej == []
    assert [d["doc_id"] for d in docs] == ["1", "2", "3", "4"]
    assert docs[1]["text"] == f"He is 5'10\" tall {MARKER}"
    assert docs[2]["text"] == "Results:\n12,34,56 mmol\n1,2,,a,b,c\n"


@settings(max_examples=60, deadline=None)
@given(
    notes=st.lists(
        st.text(alphabet='ab ,\n"1234', min_size=1, max_size=30).filter(str.strip),
        min_size=1,
        max_size=10,
    ),
    unclosed=st.sets(st.integers(0, 9), max_size=3),
    block=st.sampled_from([256, 1 << 22]),
)
def test_unclosed_quotes_never_misattribute(
    notes: list[str], unclosed: set[int], block: int
) -> None:
    """Whatever the notes hold (digits, commas, quotes, line breaks) and whichever records
    lose their closing quote, an accepted document is one record's own text with its own
    patient, no damaged record is accepted, and an undamaged file is read exactly."""
    head = b"ROW_ID,SUBJECT_ID,HADM_ID,CATEGORY,TEXT\n"
    body = b"".join(
        f'{i},{100 + i},{200 + i},"c","{t.replace(chr(34), chr(34) * 2)}'.encode()
        + (b"\n" if i in unclosed else b'"\n')
        for i, t in enumerate(notes)
    )
    old = mimic._CSV_BLOCK_BYTES
    mimic._CSV_BLOCK_BYTES = block
    try:
        with tempfile.TemporaryDirectory() as tmp:
            src = write(Path(tmp) / "n.csv", head + body)
            chunks = list(read_documents(src, batch_rows=3))
    finally:
        mimic._CSV_BLOCK_BYTES = old
    table = pa.Table.from_batches([b for b, _ in chunks]).to_pylist()
    for doc in table:
        i = int(doc["doc_id"])
        assert doc["patient_id"] == str(100 + i) and doc["text"] == notes[i]
        assert i not in unclosed
    if not unclosed & set(range(len(notes))):
        # an undamaged file is read exactly, whatever lines its notes hold
        assert [r for _, rs in chunks for r in rs] == []
        assert [int(d["doc_id"]) for d in table] == list(range(len(notes)))


H11 = HEADER  # the 11 MIMIC columns
H5 = b"ROW_ID,SUBJECT_ID,HADM_ID,CATEGORY,TEXT\n"
# Patient 101's note holds lines shaped like records (well formed ones, too), then 102's.
R1_RECORD_LIKE_LINES = (
    b'1,101,201,"c","Note of patient 101: Jane Roe, MRN 55501\n'
    b'943,979,,"",Jane Roe lives at 12 Elm St\n'
    b'905,955,,x,"""""\n'
)
R2 = b'2,102,202,"c","Note of patient 102"\n'


def _csv_records(data: bytes) -> list[tuple[str, str, str]]:
    """(doc, patient, text) of each record as Python's csv module reads ``data``."""
    rows = list(csv.reader(io.StringIO(data.decode(), newline="")))[1:]
    return [(r[0], r[1], r[-1]) for r in rows]


def _read(src: Path, **kw) -> tuple[list[tuple[str, str, str]], list[tuple[int, str]]]:
    chunks = list(read_documents(src, **kw))
    docs = [(d["doc_id"], d["patient_id"], d["text"]) for b, _ in chunks for d in b.to_pylist()]
    return docs, [(r.row, r.reason) for _, rs in chunks for r in rs]


@pytest.mark.parametrize("block", [256, 1 << 22])
def test_valid_csv_with_record_like_note_lines_is_read_as_written(
    block: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A valid file whose note holds lines shaped like records (one with a doubled quote that
    closes nothing) was misread: a line of patient 101's note became a document of patient
    979 and rows_in counted 5 records for 3. It is read as Python's csv module reads it."""
    monkeypatch.setattr(mimic, "_CSV_BLOCK_BYTES", block)
    note101 = (
        b"Pt Jane Roe, MRN 55501, seen today.\n"
        b'943,979,,,,,,,,",Jane Roe 12 Elm St HIV positive\n'
        b'905,955,,,,,,,,x,""'
    )
    rows = [row(0, b"Note of patient 100\n"), row(1, note101), row(2, b"Note of patient 102\n")]
    src = write(tmp_path / "valid11.csv", H11 + b"".join(rows))
    expected = _csv_records(src.read_bytes())
    assert [r[:2] for r in expected] == [("0", "100"), ("1", "101"), ("2", "102")]
    assert _read(src) == (expected, [])
    m, _, rej = _ingest_rows(src, tmp_path / "out")
    assert (m["rows_in"], m["rows"], rej) == (3, 3, [])
    # the same with five columns, where a record-like note line is itself well formed
    r0 = b'0,100,200,"c","Note of patient 100"\n'
    src5 = write(tmp_path / "valid5.csv", H5 + r0 + R1_RECORD_LIKE_LINES + R2)
    assert _read(src5) == (_csv_records(src5.read_bytes()), [])


def test_damaged_record_before_record_like_note_lines(tmp_path: Path) -> None:
    """Record 0 lost its closing quote and record 1's note holds record-like lines: nothing
    is attributed to patients 979 or 955 (lines of a note), every row is counted once."""
    r0 = b'0,100,200,"c","Note of patient 100, its closing quote lost\n'
    src = write(tmp_path / "n.csv", H5 + r0 + R1_RECORD_LIKE_LINES + R2)
    m, docs, rej = _ingest_rows(src, tmp_path / "out")
    assert docs == [{"doc_id": "2", "patient_id": "102", "text": "Note of patient 102"}]
    assert rej == [(0, "unclosed quote"), (1, "unclosed quote")]
    assert m["rows_in"] == 3


def _fuzz_case(seed: int) -> tuple[list[str], set[int], bytes]:
    """Notes made of lines shaped like records (the reviewer's fuzzer), some left open."""
    r = random.Random(seed)

    def fake() -> str:
        k = r.randint(3, 6)
        fields = [str(r.randint(900, 999)), str(r.randint(900, 999)), r.choice(["", "7"])]
        for _ in range(k - 3):
            fields.append(r.choice(["x", '"', '""', 'y"', '"z', "", "c", '" ']))
        return ",".join(fields)

    def text() -> str:
        parts = [
            r.choice([fake(), fake(), "txt", 'say "hi"', '"', "a,b", ""])
            for _ in range(r.randint(1, 5))
        ]
        return "\n".join(parts) + r.choice(["", "\n", '"', ' "'])

    notes = [text() for _ in range(r.randint(2, 7))]
    unclosed = {i for i in range(len(notes)) if r.random() < 0.2}
    body = "".join(
        f'{i},{100 + i},{200 + i},"c","{t.replace(chr(34), chr(34) * 2)}'
        + ("\n" if i in unclosed else '"\n')
        for i, t in enumerate(notes)
    )
    return notes, unclosed, H5 + body.encode()


# the seeds (of 1500) where the fuzzer found a note line accepted as a record, and more
FUZZ_SEEDS = [64, 168, 290, 414, 550, 553, 610, 778, 864, 920, 923, 1184, *range(100)]


@pytest.mark.parametrize("block", [512, 1 << 22])
def test_record_like_note_lines_never_misattributed(
    block: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Across the fuzzer's damaged files, an accepted document is always a record's own note
    with its own patient, never a damaged record; undamaged files are read exactly."""
    monkeypatch.setattr(mimic, "_CSV_BLOCK_BYTES", block)
    for seed in FUZZ_SEEDS:
        notes, unclosed, data = _fuzz_case(seed)
        src = write(tmp_path / f"{seed}.csv", data)
        docs, rej = _read(src, batch_rows=3)
        for doc, patient, text in docs:
            i = int(doc)
            assert (patient, text) == (str(100 + i), notes[i]), seed
            assert i not in unclosed, seed
        if not unclosed:  # read as the csv module reads it (a blank note is rejected)
            records = _csv_records(data)
            assert docs == [r for r in records if r[2].strip()], seed
            assert rej == [(i, "empty text") for i, r in enumerate(records) if not r[2].strip()]


@pytest.mark.parametrize("k", [1, 3, 4, 6])
def test_consecutive_unclosed_quotes_are_each_counted(k: int, tmp_path: Path) -> None:
    """Four or more records in a row left open used to merge into fewer rejections (rows_in
    short of the records): each is rejected, and the others read with their own patients."""
    damaged = set(range(2, 2 + k))
    rows = [row(i, note(i), close=i not in damaged) for i in range(12)]
    src = write(tmp_path / "n.csv", HEADER + b"".join(rows))
    m, docs, rej = _ingest_rows(src, tmp_path / "out")
    assert rej == [(i, "unclosed quote") for i in sorted(damaged)]
    assert docs == [
        {"doc_id": str(i), "patient_id": str(100 + i), "text": note(i)}
        for i in range(12)
        if i not in damaged
    ]
    assert m["rows_in"] == 12 == m["rows"] + len(rej)


def _parsed(data: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """(records parsed by the quote repair, rows read) for a file of ``data``."""
    made: list[csv_repair._QuoteRepair] = []

    class Counting(csv_repair._QuoteRepair):
        def __init__(self, *args: object) -> None:
            super().__init__(*args)
            made.append(self)

    monkeypatch.setattr(mimic, "_QuoteRepair", Counting)
    src = write(tmp_path / f"w{len(data)}.csv", data)
    rows = sum(b.num_rows + len(rs) for b, rs in read_documents(src))
    return sum(r.parsed for r in made), rows


def test_quote_scan_work_is_linear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan for unclosed quotes parses each record about once: not once per record-like
    line of a note (a lab table of n lines took time in n squared), nor the whole file again
    per damaged record. Counted in records parsed, not timed."""
    table = b"12,34,56,7 mmol\n"
    for lines in (1000, 4000):
        note_rows = [row(1, table * lines), row(2, "x"), row(3, "y")]
        parsed, rows = _parsed(HEADER + b"".join(note_rows), tmp_path, monkeypatch)
        assert rows == 3 and parsed <= 3  # a valid file: one parse per record
        damaged = [row(1, table * lines, close=False), row(2, "x"), row(3, "y")]
        parsed, rows = _parsed(HEADER + b"".join(damaged), tmp_path, monkeypatch)
        assert rows == 3 and parsed <= 2 * lines + 10  # each note line once
    for n in (200, 800):
        every_other = [row(i, "Note text\nmore", close=i % 2 == 1) for i in range(n)]
        parsed, rows = _parsed(HEADER + b"".join(every_other), tmp_path, monkeypatch)
        assert rows == n and parsed <= 3 * n
        all_open = [row(i, "Note text\nmore", close=False) for i in range(n)]
        parsed, rows = _parsed(HEADER + b"".join(all_open), tmp_path, monkeypatch)
        assert rows == n and parsed <= 3 * n


@pytest.mark.parametrize(
    "encoding",
    ["idna", "punycode", "unicode-escape", "raw_unicode_escape", "utf-7", "hz", "iso2022_jp"],
)
def test_text_rewriting_codecs_are_refused(encoding: str, tmp_path: Path) -> None:
    """Codecs that rewrite text (or raise UnicodeError, which a decode of idna did, with the
    note in the traceback) are refused up front, naming no text."""
    data = json.dumps({"patient_id": "1", "text": f"Seen by Dr.xn--{MARKER}-5qa.today"})
    src = write(tmp_path / "n.jsonl", data.encode() + b"\n")
    with pytest.raises(InputError, match="not a plain text encoding") as err:
        ingest(src, tmp_path / "out", encoding=encoding)
    assert MARKER not in str(err.value)


def test_header_field_over_the_csv_limit(tmp_path: Path) -> None:
    """A first line with a field over the csv module's limit raised _csv.Error (a
    traceback) while sniffing or reading the header: now an InputError naming no text."""
    long = write(tmp_path / "long.csv", b"1,2,3,4," + M * 20_000 + b"\n5,6,7,8,x\n")
    with pytest.raises(InputError) as err:
        read_documents(long)
    assert MARKER not in str(err.value)
    bare = write(tmp_path / "long", long.read_bytes())
    with pytest.raises(InputError, match="unknown format"):
        read_documents(bare)


# --------------------------------------------------------------------------------------------
# 3. Types and shapes


def test_id_types_are_handled_alike_in_files_and_folders(tmp_path: Path) -> None:
    """Float ids are refused, naming the file and column, in one file as in a folder mixing
    them with string or integer files; string and integer files mix freely."""
    one = write_parquet(
        tmp_path / "one.parquet", {"patient_id": ["a"], "text": ["t"], "group_id": [1.0]}
    )
    with pytest.raises(InputError, match="strings or integers") as err:
        ingest(one, tmp_path / "o1")
    assert (err.value.path, err.value.column) == (str(one), "group_id")
    for other in ("x", 1):
        folder = tmp_path / f"mixed_{other}"
        write_parquet(folder / "a.parquet", {"patient_id": [other], "text": ["t"]})
        write_parquet(folder / "b.parquet", {"patient_id": [2.0], "text": ["t"]})
        with pytest.raises(InputError, match="strings or integers") as err:
            ingest(folder, tmp_path / f"o_{other}")
        assert (err.value.path, err.value.column) == (str(folder / "b.parquet"), "patient_id")
        assert not (tmp_path / f"o_{other}").exists()
    folder = tmp_path / "str_int"
    write_parquet(folder / "a.parquet", {"patient_id": ["p1"], "text": ["t1"], "group_id": [7]})
    write_parquet(folder / "b.parquet", {"patient_id": [2], "text": ["t2"], "group_id": ["g"]})
    ingest(folder, tmp_path / "o_ok")
    assert pq.read_table(tmp_path / "o_ok").select(["patient_id", "group_id"]).to_pydict() == {
        "patient_id": ["p1", "2"],
        "group_id": ["7", "g"],
    }
    jsonl = write(
        tmp_path / "n.jsonl",
        b'{"patient_id": 1.0, "text": "t"}\n{"patient_id": 1, "group_id": 2.5, "text": "t"}\n'
        b'{"patient_id": 3, "group_id": 4, "text": "t"}\n',
    )
    _, docs, rej = _ingest_rows(jsonl, tmp_path / "o_jsonl")
    assert rej == [(0, "wrong type"), (1, "wrong type")]
    assert docs == [{"doc_id": "n:2", "patient_id": "3", "text": "t"}]


@pytest.mark.parametrize(
    ("fmt", "make"),
    [
        ("mimic", lambda i: HEADER + row(i, note(i))),
        ("jsonl", lambda i: json.dumps({"patient_id": i, "text": note(i)}).encode() + b"\n"),
        (
            "physionet",
            lambda i: f"START_OF_RECORD={i}||||1||||\n{note(i)}||||END_OF_RECORD\n".encode(),
        ),
    ],
)
def test_folders_of_each_format(fmt: str, make: Callable[[int], bytes], tmp_path: Path) -> None:
    """A folder given with --format mimic|jsonl|physionet reads the matching files inside it,
    recursively and sorted, skipping hidden ones; a folder without any says what it expects."""
    suffix = {"mimic": ".csv", "jsonl": ".jsonl", "physionet": ".text"}[fmt]
    folder = tmp_path / "in"
    write(folder / f"b{suffix}", make(2))
    write(folder / "a" / f"x{suffix}.gz", gzip.compress(make(1)))
    write(folder / ".hidden" / f"h{suffix}", make(3))
    write(folder / f"_skip{suffix}", make(4))
    write(folder / "readme.md", M)
    m, docs, rej = _ingest_rows(folder, tmp_path / "out", fmt=fmt)
    assert rej == [] and m["rows"] == 2
    assert [d["text"] for d in docs] == [note(1), note(2)]
    if fmt == "jsonl":
        assert [d["doc_id"] for d in docs] == ["a/x:0", "b:0"]
    assert read_documents(folder).fmt == fmt  # auto-detected
    empty = tmp_path / "empty"
    write(empty / "notes.txt", b"x")
    with pytest.raises(InputError, match=f"no {suffix}"):
        read_documents(empty, fmt)


def test_folder_of_csv_files_with_different_columns(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    write(folder / "a.csv", b"ROW_ID,SUBJECT_ID,TEXT\n1,10,one\n")
    write(folder / "b.csv", b"ROW_ID,SUBJECT_ID,CATEGORY,TEXT\n2,11,Radiology,two\n")
    _, docs, _ = _ingest_rows(folder, tmp_path / "out")
    assert pq.read_table(tmp_path / "out")["category"].to_pylist() == [None, "Radiology"]
    assert [d["text"] for d in docs] == ["one", "two"]
    write(folder / "c.csv", b"ROW_ID,WHO,TEXT\n3,12,three\n")
    with pytest.raises(InputError) as err:
        read_documents(folder)
    assert (err.value.path, err.value.column) == (str(folder / "c.csv"), "SUBJECT_ID")


def test_json_fields_of_the_wrong_type(tmp_path: Path) -> None:
    lines = [
        {"patient_id": "1", "text": ["a"]},
        {"patient_id": "1", "text": {"a": 1}},
        {"patient_id": "1", "text": True},
        {"patient_id": "1", "text": 5},
        {"patient_id": True, "text": "t"},
        {"patient_id": "1", "doc_id": [1], "text": "t"},
        {"patient_id": "1", "group_id": {"g": 1}, "text": "t"},
        {"patient_id": "1", "text": "fine"},
    ]
    src = write(tmp_path / "n.jsonl", "\n".join(json.dumps(x) for x in lines).encode())
    _, docs, _ = _ingest_rows(src, tmp_path / "out")
    assert [d["text"] for d in docs] == ["fine"]
    assert [(r[1], r[2], r[3]) for r in rejections(tmp_path / "out")] == [
        (0, "text", "wrong type"),
        (1, "text", "wrong type"),
        (2, "text", "wrong type"),
        (3, "text", "wrong type"),
        (4, "patient_id", "wrong type"),
        (5, "doc_id", "wrong type"),
        (6, "group_id", "wrong type"),
    ]


def test_subject_id_must_be_an_integer(tmp_path: Path) -> None:
    rows = [row(1, note(1), subject="abc"), row(2, note(2), subject="1.5"), row(3, note(3))]
    src = write(tmp_path / "notes.csv", HEADER + b"".join(rows))
    _, docs, rej = _ingest_rows(src, tmp_path / "out")
    assert [d["doc_id"] for d in docs] == ["3"]
    assert rej == [(0, "patient id not an integer"), (1, "patient id not an integer")]
    assert {r[2] for r in rejections(tmp_path / "out")} == {"SUBJECT_ID"}
    # another patient column keeps any string id
    custom = write(tmp_path / "custom.csv", b"id,who,body\n1,p1,hello\n")
    _, docs, _ = _ingest_rows(
        custom, tmp_path / "out2", patient_col="who", text_col="body", doc_col="id"
    )
    assert docs[0]["patient_id"] == "p1"


def test_nul_characters_reject_their_row_in_every_format(tmp_path: Path) -> None:
    srcs = {
        "mimic": write(tmp_path / "n.csv", HEADER + row(1, "a\x00b") + row(2, note(2))),
        "jsonl": write(
            tmp_path / "n.jsonl",
            b'{"patient_id": "1", "text": "a\\u0000b"}\n{"patient_id": "2", "text": "ok"}\n',
        ),
        "physionet": write(
            tmp_path / "n.text",
            b"START_OF_RECORD=1||||1||||\na\x00b\n||||END_OF_RECORD\n"
            b"START_OF_RECORD=2||||1||||\nok\n||||END_OF_RECORD\n",
        ),
        "parquet": write_parquet(
            tmp_path / "n.parquet", {"patient_id": ["1", "2\x00"], "text": ["a\x00b", "ok"]}
        ),
    }
    write(tmp_path / "txt" / "p1" / "a.txt", b"a\x00b")
    write(tmp_path / "txt" / "p1" / "b.txt", b"ok")
    srcs["txt"] = tmp_path / "txt"
    for fmt, src in srcs.items():
        out = tmp_path / f"out_{fmt}"
        m, _, rej = _ingest_rows(src, out, fmt=fmt)
        assert rej[0] == (0, "nul character"), fmt
        assert m["rows"] == (0 if fmt == "parquet" else 1), fmt


def test_encoding_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Bytes that are not UTF-8 are rejected with a reason naming --encoding; --encoding
    latin-1 reads them; an unknown or unusable codec is refused before anything is read."""
    src = write(tmp_path / "notes.csv", HEADER + row(1, b"caf\xe9\n") + row(2, note(2)))
    _, docs, rej = _ingest_rows(src, tmp_path / "utf8")
    assert [d["doc_id"] for d in docs] == ["2"]
    assert len(rej) == 1 and "--encoding" in rej[0][1]
    assert (
        cli("ingest", str(src), "--out", str(tmp_path / "latin"), "-q", "--encoding", "latin-1")
        == 0
    )
    assert pq.read_table(tmp_path / "latin")["text"].to_pylist() == ["café\n", note(2)]
    assert read_manifest(tmp_path / "latin")["rejected"] == 0
    for bad, match in [
        ("no-such-codec", "unknown encoding"),
        ("utf-16", "ASCII"),
        ("base64", "text"),
    ]:
        with pytest.raises(InputError, match=match):
            read_documents(src, encoding=bad)
    capsys.readouterr()
    assert cli("ingest", str(src), "--out", str(tmp_path / "x"), "--encoding", "nope") == 2
    assert "unknown encoding" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    header = write(tmp_path / "h.csv", HEADER.replace(b"CGID", b"CG\xc9D") + row(1, "x"))
    with pytest.raises(InputError, match="--encoding"):
        read_documents(header)
    assert read_documents(header, encoding="cp1252").schema.names[:4] == [
        "doc_id",
        "patient_id",
        "group_id",
        "text",
    ]


@pytest.mark.parametrize("fmt", ["jsonl", "physionet", "txt", "parquet"])
def test_encoding_in_other_formats(fmt: str, tmp_path: Path) -> None:
    text = "Zoë café".encode("latin-1")
    if fmt == "jsonl":
        src = write(tmp_path / "n.jsonl", b'{"patient_id": "1", "text": "' + text + b'"}\n')
    elif fmt == "physionet":
        src = write(
            tmp_path / "n.text", b"START_OF_RECORD=1||||1||||\n" + text + b"||||END_OF_RECORD\n"
        )
    elif fmt == "txt":
        src = write(tmp_path / "in" / "p1" / "a.txt", text).parents[1]
    else:
        schema = pa.schema([("patient_id", pa.string()), ("text", pa.binary())])
        src = write_parquet(tmp_path / "n.parquet", {"patient_id": ["1"], "text": [text]}, schema)
    _, docs, rej = _ingest_rows(src, tmp_path / "utf8", fmt=fmt)
    assert docs == [] and len(rej) == 1 and "--encoding" in rej[0][1]
    _, docs, rej = _ingest_rows(src, tmp_path / "latin", fmt=fmt, encoding="latin-1")
    assert rej == [] and docs[0]["text"] == "Zoë café"


# --------------------------------------------------------------------------------------------
# 4. synth --format mimic-csv to a path without a suffix reads back with --format auto


def test_synth_mimic_csv_without_suffix_reads_back(tmp_path: Path) -> None:
    out = tmp_path / "notes"
    assert cli("synth", "--out", str(out), "--format", "mimic-csv", "--patients", "6", "-q") == 0
    written = sum(1 for _ in csv.DictReader(io.StringIO(out.read_text(), newline="")))
    assert cli("ingest", str(out), "--out", str(tmp_path / "docs"), "-q") == 0
    m = read_manifest(tmp_path / "docs")
    assert m["rows"] == written > 0 and m["rejected"] == 0
    gz = tmp_path / "notes_gz"
    gz.write_bytes(gzip.compress(out.read_bytes()))
    assert read_documents(gz).fmt == "mimic"
