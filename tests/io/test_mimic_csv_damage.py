"""Damaged MIMIC-III CSV: quoting that breaks RFC 4180 is damage, never glued, in every layout.

pyarrow reads CSV leniently: a closing quote followed by more text, or a quote in a quoted field
that is not doubled, is read as text, so one patient's note could be glued to another's, a
record could vanish uncounted or a note be read cut short. Here files of the four columns
``ROW_ID,SUBJECT_ID,HADM_ID,TEXT`` and of the full NOTEEVENTS header (and, further down, of
other layouts) are damaged at one or two places (a quote dropped or added, a stray line break
or comma, inside TEXT, among the ids and elsewhere) and read back; see
:mod:`phisieve.io.readers.csv_repair` for what is damage and how the records of a damaged
stretch are counted.
"""

from __future__ import annotations

import gzip
import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phisieve.api import ingest
from phisieve.io.dataset import read_manifest, read_rejected
from phisieve.io.readers import REASONS, mimic, read_documents


@dataclass(frozen=True)
class Layout:
    """A CSV layout the reader accepts: its columns, those MIMIC quotes, and those that hold
    a record's marker (TEXT, and CATEGORY and DESCRIPTION where there are)."""

    name: str
    columns: tuple[str, ...]
    quoted: frozenset[int]
    marked: tuple[str, ...]

    @property
    def header(self) -> bytes:
        return (",".join(self.columns) + "\n").encode()

    def fields(self, i: int, text: str, hadm: str = "") -> list[str]:
        """Record ``i``'s fields (values, unquoted), its TEXT ``text``."""
        values = {
            "ROW_ID": str(10 + i),  # two digits, so a damage can fall inside it
            "SUBJECT_ID": str(100 + i),
            "HADM_ID": hadm,
            "CHARTDATE": "2101-01-01",
            "CATEGORY": f"Nursing {marker(i)}",
            "DESCRIPTION": f"Report {marker(i)}",
            "TEXT": text,
        }
        return [values.get(name, "") for name in self.columns]

    def line(self, fields: list[str]) -> bytes:
        """A record as MIMIC writes it: text fields quoted, their quotes doubled."""
        out = [
            '"' + v.replace('"', '""') + '"' if k in self.quoted else v
            for k, v in enumerate(fields)
        ]
        return (",".join(out) + "\n").encode()

    def doc(self, values: list[str]) -> tuple[str, ...]:
        """(ROW_ID, SUBJECT_ID, TEXT, marked fields other than TEXT) of a record's values."""
        names = ("ROW_ID", "SUBJECT_ID", "TEXT", *self.marked[1:])
        return tuple(values[self.columns.index(n)] for n in names)


NOTEEVENTS = Layout(
    "NOTEEVENTS",
    (
        "ROW_ID",
        "SUBJECT_ID",
        "HADM_ID",
        "CHARTDATE",
        "CHARTTIME",
        "STORETIME",
        "CATEGORY",
        "DESCRIPTION",
        "CGID",
        "ISERROR",
        "TEXT",
    ),
    frozenset({6, 7, 10}),  # CATEGORY, DESCRIPTION and TEXT are quoted, as MIMIC ships them
    ("TEXT", "CATEGORY", "DESCRIPTION"),
)
FOUR = Layout(
    "four columns", ("ROW_ID", "SUBJECT_ID", "HADM_ID", "TEXT"), frozenset({3}), ("TEXT",)
)
LAYOUTS = [NOTEEVENTS, FOUR]
HEADER = NOTEEVENTS.header
# The pattern every record's first line matches (the reader's record start): integer ids.
RECORD_START = re.compile(rb'"?[0-9]{1,20}"?,"?[0-9]{1,20}"?,"?[0-9]{0,20}"?,')
MARK = re.compile(r"#r([0-9]+)#")  # a record's marker: in its TEXT, CATEGORY and DESCRIPTION


def marker(i: int) -> str:
    return f"#r{i}#"


def fields(i: int, text: str, hadm: str = "") -> list[str]:
    """Record ``i``'s NOTEEVENTS fields (values, unquoted), its TEXT ``text``."""
    return NOTEEVENTS.fields(i, text, hadm)


def csv_line(fields: list[str]) -> bytes:
    """A NOTEEVENTS record as MIMIC writes it: text fields quoted, their quotes doubled."""
    return NOTEEVENTS.line(fields)


# --------------------------------------------------------------------------------------------
# A reference reading: RFC 4180, whole file, with the reader's rules for what is well formed


@dataclass
class Parsed:
    """A record as the reference parser reads it."""

    start: int  # offset in the body
    values: list[str]
    clean: bool  # every quoted field closed, then a delimiter or line end; see reference()
    open_at_end: bool = False
    end: int = 0  # offset after it


def reference(body: bytes, *, first: bool = False) -> list[Parsed]:
    """Strict RFC 4180 records of ``body``; a quoted field left open runs to the end. A field
    is not clean if its closing quote is followed by anything but a delimiter or a line end,
    or if it is unquoted and holds ``""`` or ends in a quote (the rest of a quoted field that
    lost its opening quote; a quote inside an unquoted field is read literally). ``first``:
    the first record only."""
    records: list[Parsed] = []
    pos, n = 0, len(body)
    while pos < n:
        if body[pos] in b"\r\n":  # blank line
            pos += 1
            continue
        rec = Parsed(pos, [], True)
        while True:
            if pos < n and body[pos] == 0x22:
                value, pos = bytearray(), pos + 1
                while True:
                    q = body.find(b'"', pos)
                    if q < 0:
                        value += body[pos:]
                        pos, rec.open_at_end = n, True
                        break
                    value += body[pos:q]
                    if body[q + 1 : q + 2] == b'"':
                        value += b'"'
                        pos = q + 2
                        continue
                    pos = q + 1
                    break
                if rec.open_at_end:
                    rec.values.append(value.decode())
                    break
                stop = pos
                while stop < n and body[stop] not in b",\r\n":
                    stop += 1
                rec.clean &= stop == pos
                value += body[pos:stop]
            else:
                stop = pos
                while stop < n and body[stop] not in b",\r\n":
                    stop += 1
                value = bytearray(body[pos:stop])
                rec.clean &= b'""' not in value and not value.endswith(b'"')
            rec.values.append(value.decode())
            pos = stop
            if pos < n and body[pos] == 0x2C:
                pos += 1
                continue
            pos += 2 if body[pos : pos + 2] == b"\r\n" else 1
            break
        rec.end = min(pos, n)
        records.append(rec)
        if first:
            break
    return records


def whole(layout: Layout, rec: Parsed) -> bool:
    """Whether ``rec`` is a well-formed record of the column count."""
    return rec.clean and not rec.open_at_end and len(rec.values) == len(layout.columns)


def well_formed(layout: Layout, body: bytes, records: list[Parsed]) -> bool:
    """The reader's rule: every record clean, none open at the end, and each one starts like
    a record or has the column count (else it is a fragment of another);
    one of another column count holds no line that starts like a record (a quote left open
    over the next record)."""
    for rec in records:
        if not rec.clean or rec.open_at_end:
            return False
        if len(rec.values) == len(layout.columns):
            continue
        if not RECORD_START.match(body, rec.start):
            return False
        lines = re.finditer(rb"\n", body[rec.start : rec.end - 1])
        if any(RECORD_START.match(body, rec.start + m.end()) for m in lines):
            return False
    return True


def expected_reading(
    layout: Layout, records: list[Parsed]
) -> tuple[list[tuple], list[tuple[int, str]]]:
    """What the reader must give a well-formed file: :meth:`Layout.doc` of each good record
    (its ids trimmed, a blank ROW_ID made up) and (row, reason) of each rejected one, with the
    reader's row checks."""
    docs, rejected = [], []
    for row, rec in enumerate(records):
        if len(rec.values) != len(layout.columns):
            rejected.append((row, "wrong column count"))
            continue
        _, patient, text, *rest = layout.doc(rec.values)
        patient = patient.strip()
        if not patient:
            rejected.append((row, "missing patient id"))
        elif not patient.isdigit() or not patient.isascii():
            rejected.append((row, "patient id not an integer"))
        elif not text.strip():
            rejected.append((row, "empty text"))
        else:
            doc = rec.values[0].strip() or f"notes:{row}"
            docs.append((doc, patient, text, *rest))
    return docs, rejected


# --------------------------------------------------------------------------------------------
# Damage


@dataclass(frozen=True)
class Damage:
    """One damage to a file's records."""

    kind: str  # "drop" (a quote), "quote", "newline" or "comma" (inserted)
    at: int  # offset in the body: the quote dropped, or where the byte goes


BYTES = {"quote": b'"', "newline": b"\n", "comma": b","}


@dataclass
class Damaged:
    """A file damaged: its bytes, ``where`` (each original offset's new one) and the bytes
    put in, as (the original offset before it, the one after it, the byte)."""

    data: bytes
    where: list[int]
    inserted: list[tuple[int, int, int]]


def damage(body: bytes, damages: list[Damage]) -> Damaged:
    """``body`` damaged in order."""
    cells = list(enumerate(body))  # (original offset or -1, byte)
    for d in damages:
        if d.kind == "drop":
            assert cells[d.at][1] == 0x22
            del cells[d.at]
        else:
            cells.insert(d.at, (-1, BYTES[d.kind][0]))
    at = {origin: k for k, (origin, _) in enumerate(cells) if origin >= 0}
    where, nxt = [len(cells)] * (len(body) + 1), len(cells)
    for o in range(len(body) - 1, -1, -1):  # a dropped byte's offset is the next one's
        nxt = where[o] = at.get(o, nxt)
    inserted, before = [], -1
    for k, (origin, byte) in enumerate(cells):
        if origin >= 0:
            before = origin
            continue
        after = next((c[0] for c in cells[k + 1 :] if c[0] >= 0), len(body))
        inserted.append((before, after, byte))
    return Damaged(bytes(b for _, b in cells), where, inserted)


def quote_states(body: bytes) -> list[str]:
    """Each byte of a well-formed ``body``: ``open`` or ``close`` (a quoted field's quotes),
    ``in`` (inside one; ``pair`` for the first quote of a doubled one) or ``out``."""
    states, inside, k = ["out"] * len(body), False, 0
    while k < len(body):
        if not inside and body[k] == 0x22:
            states[k], inside = "open", True
        elif inside and body[k : k + 2] == b'""':
            states[k], states[k + 1] = "pair", "in"
            k += 1
        elif inside and body[k] == 0x22:
            states[k], inside = "close", False
        elif inside:
            states[k] = "in"
        k += 1
    return states


def as_written(layout: Layout, body: bytes, damaged: Damaged) -> list[tuple[str, ...]]:
    """Each record of ``body`` as its damaged file holds it where the damage is no damage to
    its quoting: with the commas and line breaks put inside its quoted fields (a quote out
    of place makes it damaged: it must not be read)."""
    states = quote_states(body)
    put: dict[int, bytes] = {}
    for before, after, byte in damaged.inserted:
        if byte == 0x22:  # a quote put in is damage to the quoting
            continue
        inside = before >= 0 and after == before + 1 and after < len(body)
        if inside and states[before] in ("open", "in") and states[after] != "out":
            put[before] = put.get(before, b"") + bytes([byte])
    out = []
    for rec in reference(body):
        raw = b"".join(body[o : o + 1] + put.get(o, b"") for o in range(rec.start, rec.end))
        (alone,) = reference(raw)
        out.append(layout.doc(alone.values))
    return out


def line_starts(layout: Layout, body: bytes) -> tuple[set[int], set[int]]:
    """Offsets of the lines of ``body`` that start like a record, and of those that do not
    but begin a well-formed record of the column count (which the reader may take for a
    record with a broken id)."""
    starts = [0] + [m.end() for m in re.finditer(rb"\n", body)]
    like = {s for s in starts if RECORD_START.match(body, s)}
    return like, {s for s in starts if s not in like and shaped(layout, body[s:])}


def shaped(layout: Layout, rest: bytes) -> bool:
    """Whether ``rest`` begins with a well-formed record of the column count."""
    records = reference(rest, first=True)
    return bool(records) and records[0].start == 0 and whole(layout, records[0])


# --------------------------------------------------------------------------------------------
# Reading


def read(
    data: bytes, block: int = 1 << 22, batch_rows: int = 3, layout: Layout = NOTEEVENTS
) -> tuple[list[tuple], list]:
    """:meth:`Layout.doc` of the documents read and the rejections, with the CSV block size
    set to ``block`` (pyarrow's and the quote repair's reads)."""
    old = mimic._CSV_BLOCK_BYTES
    mimic._CSV_BLOCK_BYTES = block
    try:
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "notes.csv"
            src.write_bytes(data)
            chunks = list(read_documents(src, "mimic", batch_rows=batch_rows))
    finally:
        mimic._CSV_BLOCK_BYTES = old
    names = ["doc_id", "patient_id", "text", *(n.lower() for n in layout.marked[1:])]
    docs = [tuple(d[n] for n in names) for batch, _ in chunks for d in batch.to_pylist()]
    return docs, [r for _, rs in chunks for r in rs]


def assert_no_note_text(rejections: list, layout: Layout = NOTEEVENTS) -> None:
    for r in rejections:
        assert r.reason in REASONS
        assert r.column is None or r.column in layout.columns
        assert "#r" not in f"{r}"


# --------------------------------------------------------------------------------------------
# Strategies

WORDS = ["pt", "stable", "BP ok", "no acute distress", "Dr. Roe", "f/u", "Hx of CHF", "seen"]
PIECES = st.sampled_from([*WORDS, ", ", ",", '"', '"noted" ', "\n", "\n\n", " "])


@st.composite
def notes(draw: st.DrawFn, i: int, layout: Layout = NOTEEVENTS) -> str:
    """A note: words, commas, quotes and line breaks (no digits, so no line of it starts like
    a record), with the record's marker somewhere in it. No line of it holds as many commas
    as a record of ``layout`` holds delimiters: once the note's quotes are lost, such a line
    is a well-formed record of the column count, which no reader can tell from a record (the
    layouts' notes differ in this only: a note of eight pieces holds at most eight commas,
    NOTEEVENTS records ten delimiters)."""
    most = len(layout.columns) - 2
    parts = draw(st.lists(PIECES, max_size=8))
    parts.insert(draw(st.integers(0, len(parts))), marker(i))
    text = "".join(parts) + draw(st.sampled_from(["", "\n", "\n\n"]))
    lines = text.split("\n")
    return "\n".join(line if line.count(",") <= most else line.replace(",", ";") for line in lines)


@st.composite
def files(draw: st.DrawFn, layout: Layout) -> bytes:
    """The records of a small file of ``layout`` (without its header)."""
    n = draw(st.integers(1, 6))
    hadm = st.sampled_from(["", "200"])
    return b"".join(
        layout.line(layout.fields(i, draw(notes(i, layout)), draw(hadm))) for i in range(n)
    )


@st.composite
def damaged_files(draw: st.DrawFn, layout: Layout) -> tuple[bytes, list[Damage]]:
    """A file's records and one or two damages to them, anywhere after the header."""
    body = draw(files(layout))
    damages: list[Damage] = []
    for _ in range(draw(st.integers(1, 2))):
        kind = draw(st.sampled_from(["drop", "quote", "newline", "comma"]))
        cur = damage(body, damages).data
        if kind == "drop":
            quotes = [k for k, b in enumerate(cur) if b == 0x22]
            if not quotes:
                continue
            at = draw(st.sampled_from(quotes))
        else:
            at = draw(st.integers(0, len(cur)))
        damages.append(Damage(kind, at))
    return body, damages


# --------------------------------------------------------------------------------------------
# The properties


def check_damaged(layout: Layout, body: bytes, damages: list[Damage], block: int) -> str:
    """Read the records ``body`` of ``layout`` damaged by ``damages`` and check the
    properties (see test_damaged_quoting_is_never_glued); the case: ``well formed`` (no
    quoting out of place), ``merged`` (well formed, two records made one), ``damaged``
    (every record's first line intact) or ``record starts changed``."""
    n = len(reference(body))
    damaged = damage(body, damages)
    bad, where = damaged.data, damaged.where
    docs, rejected = read(layout.header + bad, block, layout=layout)
    assert_no_note_text(rejected, layout)
    parsed = reference(bad)
    if well_formed(layout, bad, parsed):
        # No quoting is out of place: read exactly as written (text a stray comma or line
        # break went into included), whatever the damage did.
        want_docs, want_rejected = expected_reading(layout, parsed)
        assert docs == want_docs
        assert [(r.row, r.reason) for r in rejected] == want_rejected
        # A record is lost only where two records became one well-formed record: both quotes
        # between them lost (FOUR, whose only quoted field is its last), which an RFC 4180
        # reader reads as one record, holding the other's text.
        merged = [rec for rec in parsed if len(set(MARK.findall(" ".join(rec.values)))) > 1]
        assert len(parsed) == n - len(merged)
        assert not merged or (len(damages) == 2 and layout is FOUR)
        return "merged" if merged else "well formed"
    # A document read must be its record as written: its text exactly (a comma or line break
    # put into a quoted field is part of it), nothing of another record's, nothing cut off.
    records = as_written(layout, body, damaged)
    # the lines the records as written start, after the damage
    starts = {bad.rfind(b"\n", 0, where[r.start]) + 1 for r in reference(body)}
    like, shaped_lines = line_starts(layout, bad)
    exact = like == starts and not shaped_lines
    accepted = []
    for doc in docs:
        marks = set(MARK.findall("".join(doc[2:])))
        assert len(marks) <= 1, "an accepted document holds the text of another record"
        # its record: by its marker, or where the damage broke that, by its patient
        k = int(marks.pop()) if marks else int(doc[1]) - 100
        assert 0 <= k < n, "an accepted document is no record's"
        if exact:
            assert doc == records[k], "an accepted document is not its record as written"
        else:  # its ROW_ID may be broken, or made up for a blank one
            assert doc[1:] == records[k][1:], "an accepted document is not as written"
        accepted.append(k)
    assert len(set(accepted)) == len(accepted)
    # Every record is read whole or rejected, once, in its own row: records in = accepted +
    # rejected = records written, whether or not the damage broke a record's first line.
    assert len(docs) + len(rejected) == n
    assert sorted(r.row for r in rejected) == sorted(set(range(n)) - set(accepted))
    return "damaged" if exact else "record starts changed"


# --------------------------------------------------------------------------------------------
# Randomised: one or two damages anywhere


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: layout.name)
@settings(max_examples=700, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), block=st.sampled_from([512, 1 << 22]))
def test_damaged_quoting_is_never_glued(layout: Layout, data: st.DataObject, block: int) -> None:
    """A MIMIC file, of the four columns ``ROW_ID,SUBJECT_ID,HADM_ID,TEXT`` or the full
    NOTEEVENTS header, damaged at one or two places (a quote dropped or added, a stray line
    break or comma, inside TEXT, among the ids or elsewhere, in files of up to six records
    whose notes hold line breaks, commas and doubled quotes) is read so that, for every file:

    * no document holds text of another record: each record's marker is in its own TEXT
      (and CATEGORY and DESCRIPTION) only, and a document holds one record's marker;
    * none is read cut short or changed: a document is its record as written, every field
      (a comma or line break put inside a quoted field, no damage to the quoting, is part of
      its text), its ROW_ID aside where the damage broke a record's first line;
    * no record is lost uncounted: each is read or rejected, once, in its own row, and
      accepted + rejected = the records written, a line break or stray delimiter or quote
      among a record's ids included;
    * no rejection holds note text (file, row, column and reason only).

    Damage that breaks no quoting (every quoted field closed and followed by a delimiter or
    a line end, no unquoted field holding ``""`` or ending in a quote, every line starting a
    record: a comma or line break inside a quoted field, a comma between fields, a field's
    quotes both dropped) is no damage an RFC 4180 reader can see: the file is read exactly
    as such a reader reads it, a record of the wrong column count rejected as such
    (:func:`expected_reading`). The one such damage that loses a record is two records made
    one: both quotes between them dropped, in the four-column layout, whose only quoted
    field is its last (in NOTEEVENTS the next record's CATEGORY opens a quote that breaks
    the merge). That record is what an RFC 4180 reader reads, and the test says so.
    """
    body, damages = data.draw(damaged_files(layout))
    check_damaged(layout, body, damages, block)


# --------------------------------------------------------------------------------------------
# One damage in row i of n: which rows are rejected, and why


def note(i: int) -> str:
    """Note ``i`` as MIMIC notes go: lines, commas, quotes, a blank line, a final line break."""
    return f'Admission {marker(i)}, pt seen.\nBP ok, "stable"\n\nPlan: f/u, rest\n'


def mimic_rows(n: int) -> list[bytes]:
    return [csv_line(fields(i, note(i), hadm=str(200 + i))) for i in range(n)]


VARIANTS = ["plain", "crlf", "gzip, small blocks"]


def read_variant(rows: list[bytes], variant: str) -> tuple[list[tuple], list[tuple[int, str]]]:
    """Read the file of ``rows`` (as plain CSV, with CRLF line breaks, or gzipped and read in
    small blocks) in batches of 2 and of 8192 rows, which must agree; (doc, patient, text)
    of each document (line breaks as LF) and (row, reason) of each rejection."""
    data = HEADER + b"".join(rows)
    if variant == "crlf":
        data = data.replace(b"\n", b"\r\n")
    results = []
    for batch_rows in (2, 8192):
        old = mimic._CSV_BLOCK_BYTES
        mimic._CSV_BLOCK_BYTES = 512 if variant.startswith("gzip") else old
        try:
            with tempfile.TemporaryDirectory() as tmp:
                src = Path(tmp) / ("notes.csv.gz" if variant.startswith("gzip") else "notes.csv")
                src.write_bytes(gzip.compress(data) if variant.startswith("gzip") else data)
                chunks = list(read_documents(src, batch_rows=batch_rows))
        finally:
            mimic._CSV_BLOCK_BYTES = old
        rejected = [r for _, rs in chunks for r in rs]
        assert_no_note_text(rejected)
        docs = [
            (d["doc_id"], d["patient_id"], d["text"].replace("\r\n", "\n"))
            for batch, _ in chunks
            for d in batch.to_pylist()
        ]
        results.append((docs, [(r.row, r.reason) for r in rejected]))
    assert results[0] == results[1]
    return results[0]


def good_docs(n: int, rejected: set[int]) -> list[tuple]:
    return [(str(10 + i), str(100 + i), note(i)) for i in range(n) if i not in rejected]


N = 6


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("i", [0, 2, N - 1])
def test_unclosed_quote_in_row_i(i: int, variant: str) -> None:
    """Row i's TEXT lost its closing quote: it runs on over row i+1's first line and breaks at
    its CATEGORY's quote. Row i+1's first line is the only line inside it that starts like a
    record, and from there every record is well formed, so row i alone is rejected; in the
    last row the quote is still open at the end of the file, which ends row i. Nothing of row
    i is given to row i+1, and accepted + rejected = n."""
    rows = mimic_rows(N)
    assert rows[i].endswith(b'"\n')
    rows[i] = rows[i][:-2] + b"\n"
    docs, rejected = read_variant(rows, variant)
    assert rejected == [(i, "unclosed quote")]
    assert docs == good_docs(N, {i})


STRAY_QUOTES = {
    # a quote that is not doubled inside the quoted TEXT: it closes the field early
    "stray quote in the text": lambda row: row.replace(b"pt seen", b'pt" seen'),
    # one quote of a doubled pair lost: the field closes at the other one
    "doubled quote halved": lambda row: row.replace(b'""stable""', b'""stable"'),
    # more text after the closing quote
    "text after the closing quote": lambda row: row[:-2] + b'" x\n',
    # TEXT's opening quote lost: its first line would be the whole text
    "opening quote lost": lambda row: row.replace(b',"Admission', b",Admission"),
}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("damage_kind", sorted(STRAY_QUOTES))
@pytest.mark.parametrize("i", [0, 2, N - 1])
def test_stray_quote_in_row_i(i: int, damage_kind: str, variant: str) -> None:
    """A quote out of place in row i's TEXT (not doubled inside it, a doubled one halved, text
    after the closing quote, the opening one lost) broke RFC 4180, and pyarrow read it
    anyway: the text cut short or glued to row i+1's. Row i alone is rejected as malformed
    quoting: the rest of its note is read as fragments (lines that do not start like a
    record), up to row i+1's first line, or its closing quote, now an opening one, runs on
    over row i+1's first line, the only line inside it that starts like a record; from there
    every record is well formed. accepted + rejected = n."""
    rows = mimic_rows(N)
    damaged = STRAY_QUOTES[damage_kind](rows[i])
    assert damaged != rows[i]
    rows[i] = damaged
    docs, rejected = read_variant(rows, variant)
    assert rejected == [(i, "malformed quoting")]
    assert docs == good_docs(N, {i})


LINE_DAMAGE = {
    # a line break between fields: a record-like line, then a line that starts no record
    "line break after CHARTDATE": lambda row: row.replace(b"2101-01-01,", b"2101-01-01\n,"),
    # a comma between fields: one field too many
    "comma after CHARTDATE": lambda row: row.replace(b"2101-01-01,", b"2101-01-01,,"),
    # a line break before TEXT: a record with an empty TEXT, then the text on its own
    "line break before TEXT": lambda row: row.replace(b',"Admission', b',\n"Admission'),
}


@pytest.mark.parametrize("damage_kind", sorted(LINE_DAMAGE))
@pytest.mark.parametrize("i", [0, 2, N - 1])
def test_stray_line_break_or_comma_in_row_i(i: int, damage_kind: str) -> None:
    """A line break or comma between row i's fields: row i is rejected (wrong column count),
    with the line cut off it (it does not start like a record, so it is no record of its
    own: accepted + rejected = n); nothing else changes."""
    rows = mimic_rows(N)
    rows[i] = LINE_DAMAGE[damage_kind](rows[i])
    docs, rejected = read_variant(rows, "plain")
    assert rejected == [(i, "wrong column count")]
    assert docs == good_docs(N, {i})


@pytest.mark.parametrize(
    ("start", "reason"),
    [(b"1\n0,", "wrong column count"), (b'"\n10,', "malformed quoting"), (b",\n10,", None)],
)
def test_lines_before_the_first_record(start: bytes, reason: str | None) -> None:
    """Lines before the first line that starts a record (a line break inside the first
    ROW_ID, a stray quote or comma and a line break) belong to the first record: it is
    rejected with them, as one row, so accepted + rejected = n."""
    rows = mimic_rows(N)
    assert rows[0].startswith(b"10,")
    rows[0] = start + rows[0][3:]
    docs, rejected = read_variant(rows, "plain")
    assert rejected == [(0, reason or "wrong column count")]
    assert docs == good_docs(N, {0})


def test_manifest_counts_every_record_once(tmp_path: Path) -> None:
    """Through ``phisieve ingest``: four rows damaged four ways in a file of ten; the manifest's
    rows_in is the ten records the file holds, rows the six good ones, and each damaged row
    is rejected once, with its reason and row number, never its text."""
    rows = mimic_rows(10)
    rows[1] = rows[1][:-2] + b"\n"  # closing quote lost
    rows[3] = STRAY_QUOTES["stray quote in the text"](rows[3])
    rows[5] = STRAY_QUOTES["opening quote lost"](rows[5])
    rows[7] = LINE_DAMAGE["line break after CHARTDATE"](rows[7])
    src = tmp_path / "NOTEEVENTS.csv"
    src.write_bytes(HEADER + b"".join(rows))
    m = ingest(src, tmp_path / "out")
    assert (m["rows_in"], m["rows"], m["rejected"]) == (10, 6, 4)
    assert m["rejected_by_reason"] == {
        "malformed quoting": 2,
        "unclosed quote": 1,
        "wrong column count": 1,
    }
    table = read_rejected(tmp_path / "out")
    assert sorted(zip(table["row"].to_pylist(), table["reason"].to_pylist(), strict=True)) == [
        (1, "unclosed quote"),
        (3, "malformed quoting"),
        (5, "malformed quoting"),
        (7, "wrong column count"),
    ]
    assert "#r" not in json.dumps(read_manifest(tmp_path / "out"))
    assert "#r" not in json.dumps(table.to_pylist())
    docs = pq.read_table(tmp_path / "out").select(["doc_id", "text"]).to_pylist()
    assert docs == [{"doc_id": str(10 + i), "text": note(i)} for i in (0, 2, 4, 6, 8, 9)]


def test_a_note_holding_the_mark_of_a_rejected_record() -> None:
    """The reader stands for each rejected record by a line holding a mark; a note holding the
    mark itself is rejected (with the mark's reason), never read as a document."""
    rows = mimic_rows(4)
    rows[1] = csv_line(fields(1, "x\x1a<phisieve: unclosed quote>\x1a y", "201"))
    rows[2] = rows[2][:-2] + b"\n"  # closing quote lost: the repair is at work
    docs, rejected = read_variant(rows, "plain")
    assert rejected == [(1, "unclosed quote"), (2, "unclosed quote")]
    assert docs == good_docs(4, {1, 2})


@pytest.mark.parametrize(
    "cut",
    [b"12,10\n2,", b"12,10\n,2,", b"12\n,102,", b"1\n2,102,"],
    ids=["line break", "line break and comma", "before the delimiter", "inside ROW_ID"],
)
def test_line_break_inside_the_ids(cut: bytes) -> None:
    """A line break inside row 2's ids (with a comma, in one case): its first line no longer
    starts like a record, and what follows may (``,2,202,...`` is a well-formed record whose
    patient id ``2`` is what is left of ``102``; ``2,102,...`` starts like one). Joined, the
    lines start like a record and the line before them ends a record: row 2 is rejected, in
    its own row, and counted once (it was counted one short, with row 1 rejected with it);
    nothing of it is given to patient 2. accepted + rejected = n."""
    rows = mimic_rows(N)
    assert rows[2].startswith(b"12,102,")
    rows[2] = cut + rows[2][len(b"12,102,") :]
    docs, rejected = read_variant(rows, "plain")
    assert rejected == [(2, "wrong column count")]
    assert docs == good_docs(N, {2})


def test_four_columns_unclosed_quote_in_row_2_of_5(tmp_path: Path) -> None:
    """``ROW_ID,SUBJECT_ID,HADM_ID,TEXT``, five records, the second's TEXT without its closing
    quote. It was read leniently, as pyarrow reads it: row 3's note glued into row 2's
    document, "4 rows, 0 rejected". Row 2 is rejected as an unclosed quote, row 3's note is
    in no document but its own, and rows in = accepted + rejected = 5."""
    rows = [FOUR.line(FOUR.fields(i, f"Seen today {marker(i)}")) for i in range(5)]
    assert rows[1] == b'11,101,,"Seen today #r1#"\n'
    rows[1] = rows[1][:-2] + b"\n"
    src = tmp_path / "notes.csv"
    src.write_bytes(FOUR.header + b"".join(rows))
    docs, rejected = read(src.read_bytes(), layout=FOUR)
    assert [doc[:2] for doc in docs if marker(2) in doc[2]] == [("12", "102")]
    assert [len(MARK.findall(doc[2])) for doc in docs] == [1, 1, 1, 1]
    assert docs == [(str(10 + i), str(100 + i), f"Seen today {marker(i)}") for i in (0, 2, 3, 4)]
    assert [(r.row, r.column, r.reason) for r in rejected] == [(1, None, "unclosed quote")]
    assert_no_note_text(rejected, FOUR)
    m = ingest(src, tmp_path / "out")
    assert (m["rows_in"], m["rows"], m["rejected"]) == (5, 4, 1)
    assert m["rejected_by_reason"] == {"unclosed quote": 1}


# --------------------------------------------------------------------------------------------
# Any other layout the reader accepts: strict too

OTHER_LAYOUTS = {
    "ROW_ID,SUBJECT_ID,TEXT": lambda i: f'{10 + i},{100 + i},"{other_note(i)}"\n',
    "SUBJECT_ID,ROW_ID,TEXT": lambda i: f'{100 + i},{10 + i},"{other_note(i)}"\n',
    "HADM_ID,SUBJECT_ID,ROW_ID,TEXT": lambda i: f'{200 + i},{100 + i},{10 + i},"{other_note(i)}"\n',
    "TEXT,SUBJECT_ID,ROW_ID": lambda i: f'"{other_note(i)}",{100 + i},{10 + i}\n',
    "id,who,body": lambda i: f'{10 + i},p{100 + i},"{other_note(i)}"\n',
}
OTHER_DAMAGE = {
    # (damage to row 1, its reason)
    "unclosed quote": (lambda row: row[: row.rindex('"')] + row[row.rindex('"') + 1 :]),
    "stray quote": (lambda row: row.replace("seen.", 'se"en.')),
    "opening quote lost": (lambda row: row.replace('"Note', "Note")),
    "line break between fields": (lambda row: row.replace("101,", "101,\n", 1)),
}


def other_note(i: int) -> str:
    return f"Note {marker(i)}, seen.\nPlan: rest"


def read_other(header: str, damage_kind: str) -> tuple[list[tuple[str, str, str]], list[tuple]]:
    """Five records of the layout ``header``, row 1 damaged: (doc, patient, text) of each
    document and (row, reason) of each rejection."""
    row = OTHER_LAYOUTS[header]
    rows = [row(i) for i in range(5)]
    rows[1] = OTHER_DAMAGE[damage_kind](rows[1])
    kw = {"doc_col": "id", "patient_col": "who", "text_col": "body"} if "who" in header else {}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "notes.csv"
        src.write_bytes(f"{header}\n{''.join(rows)}".encode())
        chunks = list(read_documents(src, "mimic", batch_rows=2, **kw))
    docs = [(d["doc_id"], d["patient_id"], d["text"]) for b, _ in chunks for d in b.to_pylist()]
    rejected = [r for _, rs in chunks for r in rs]
    for r in rejected:
        assert r.reason in REASONS and "#r" not in f"{r}"
    return docs, [(r.row, r.reason) for r in rejected]


def other_docs(header: str, rows: list[int]) -> list[tuple[str, str, str]]:
    patient = "p{}" if "who" in header else "{}"
    return [(str(10 + i), patient.format(100 + i), other_note(i)) for i in rows]


REASON = {
    "unclosed quote": "unclosed quote",
    "stray quote": "malformed quoting",
    "opening quote lost": "malformed quoting",
    "line break between fields": "wrong column count",
}


@pytest.mark.parametrize("damage_kind", sorted(OTHER_DAMAGE))
@pytest.mark.parametrize(
    "header", ["ROW_ID,SUBJECT_ID,TEXT", "SUBJECT_ID,ROW_ID,TEXT", "HADM_ID,SUBJECT_ID,ROW_ID,TEXT"]
)
def test_other_layouts_with_integer_ids(header: str, damage_kind: str) -> None:
    """Files whose first columns are MIMIC's integer ids, in any number and order (not
    HADM_ID alone), were read leniently below five columns: row 1 of 5 with a stray quote
    was a document of garbled text and counted twice, one that lost a quote took row 2 down
    with it. Row 1 damaged (its closing quote lost, a stray quote, its opening quote lost, a
    line break between its fields) is rejected alone, with its reason, and the other four
    are read as written: accepted + rejected = 5."""
    docs, rejected = read_other(header, damage_kind)
    assert rejected == [(1, REASON[damage_kind])]
    assert docs == other_docs(header, [0, 2, 3, 4])


@pytest.mark.parametrize(
    ("header", "damage_kind", "accepted", "rejected"),
    [
        (
            "TEXT,SUBJECT_ID,ROW_ID",
            "unclosed quote",
            [2, 3, 4],
            [(0, "malformed quoting"), (1, "malformed quoting")],
        ),
        ("TEXT,SUBJECT_ID,ROW_ID", "stray quote", [2, 3, 4], [(0, "malformed quoting")]),
        ("TEXT,SUBJECT_ID,ROW_ID", "opening quote lost", [2, 3, 4], [(0, "malformed quoting")]),
        (
            "id,who,body",
            "unclosed quote",
            [3, 4],
            [(0, "malformed quoting"), (1, "wrong column count")],
        ),
        ("id,who,body", "stray quote", [2, 3, 4], [(0, "malformed quoting")]),
        ("id,who,body", "opening quote lost", [2, 3, 4], [(0, "malformed quoting")]),
        ("id,who,body", "line break between fields", [0, 2, 3, 4], [(1, "wrong column count")]),
    ],
)
def test_layouts_without_integer_ids(
    header: str, damage_kind: str, accepted: list[int], rejected: list[tuple[int, str]]
) -> None:
    """Files whose first column is not an integer id (TEXT first, or string ids) were read
    leniently too: row 1 damaged was a document of garbled text, or counted twice. Damaged
    quoting is rejected there too, and every document is its record as written. Without
    ids, though, nothing tells a record whose first line is damaged from a piece of the
    record before it: that record (row 0) is rejected with it, as one row, and where the
    last line of the damaged note and the next record read as one record whose first line
    a line break cut, the next record (row 2) with them, so string ids lose one record of
    five to the count when row 1 loses its closing quote."""
    docs, got = read_other(header, damage_kind)
    assert got == rejected
    assert docs == other_docs(header, accepted)
