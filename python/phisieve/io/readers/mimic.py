"""mimic: NOTEEVENTS-style CSV (MIMIC-III ``NOTEEVENTS.csv``, plain or gzipped).

A file is read in blocks by pyarrow's streaming CSV reader, as bytes; rows are numbered by
their data record (the header and blank lines are not records). A row of the wrong column
count is rejected (``wrong column count``).

Damaged quoting. pyarrow's CSV parser is lenient, so the bytes of every file, whatever its
layout, go through :class:`~.csv_repair._QuoteRepair` first. A well-formed file is read
exactly as written, whatever its notes hold. A record that breaks RFC 4180 is damage, never
read as text: a quoted field left open over the records after it (``unclosed quote``), a
closing quote followed by anything but a delimiter or a line end, a quote inside a quoted
field that is not doubled, or what is left of a quoted field that lost its opening quote
(``malformed quoting``), or lines after a record that neither start one nor are a record of
the file's column count (a record cut by a stray line break: ``wrong column count``). The
damaged record is rejected with every record after it up to the first record start that
every reading of the damage agrees on, so no text is given to a patient it may not belong
to and no note is read cut short; records after that are read as usual. Lines before the
file's first record start belong to that record.

Where a record starts. Where the file's first columns are MIMIC's integer ids (``ROW_ID``,
``SUBJECT_ID``, ``HADM_ID``, as many of them as lead the header, not ``HADM_ID`` alone: the
four columns ``ROW_ID,SUBJECT_ID,HADM_ID,TEXT`` as the full NOTEEVENTS header), a record
starts with them, or with them and a stray delimiter or quote or two among them, or with a
line that a stray line break cut inside them. Any other layout (TEXT first, string ids) has
no such start: there a record starts where a well-formed record of the column count does.

Records in. Every record of the file is accepted or rejected once: rows in (``rows_in`` in
the ingest manifest) = accepted + rejected. Where the file is well formed, the records are
those an RFC 4180 reader counts. A damaged stretch counts the records it held before the
damage: each line in it that starts a record of one reading of the damage (see
:class:`~.csv_repair._QuoteRepair`); lines that do not (fragments of a record cut by the
damage) are never records of their own, and a record whose first line a line break cut
inside its ids is one record. With integer ids this is exact unless the damaged notes
themselves hold lines that start like a record, or a fragment happens to be a well-formed
record of the column count, which no reader can tell from a record cut in two. Without
them, a record damaged on its first line cannot be told from a fragment of the record
before it, and the two are counted as one.
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from ...errors import InputError
from ..schema import DOCUMENTS
from .common import (
    WRONG_COLUMNS,
    DocumentStream,
    Rejection,
    _arrow_errors,
    _BytesRead,
    _Chunk,
    _column,
    _empty,
    _is_gzip,
    _is_utf8,
    _open_binary,
    _Options,
    _over_files,
    _tell,
)
from .csv_repair import _MARK_PREFIX, _MARKS, _QuoteCheck, _QuoteRepair
from .rows import _finish, _Raw
from .sniff import (
    _check_duplicates,
    _file_stem,
    _find_column,
    _format_hint,
    _input_files,
    _resolve_columns,
    _total_size,
)

_MIMIC_COLUMNS = {"doc": "ROW_ID", "patient": "SUBJECT_ID", "group": "HADM_ID", "text": "TEXT"}
_MIMIC_EXTRAS = ("CHARTDATE", "CATEGORY", "DESCRIPTION")
# MIMIC's integer ids, by role: a file whose first columns are these starts each record with them
_INTEGER_IDS = {"doc": "row_id", "patient": "subject_id", "group": "hadm_id"}
_CSV_BLOCK_BYTES = 1 << 22


@dataclass(frozen=True)
class _CsvLayout:
    """One CSV file of a ``mimic`` input: its header and the columns read from it."""

    path: Path
    stem: str
    header: list[str]
    cols: dict[str, str | None]
    extras: dict[str, str]  # output column -> input column
    integer_patient: bool


def _open_mimic(path: Path, opts: _Options) -> DocumentStream:
    files = _input_files(path, "mimic")
    layouts = [_csv_layout(path, f, opts) for f in files]
    extras = [n.lower() for n in _MIMIC_EXTRAS if any(n.lower() in lay.extras for lay in layouts)]
    schema = pa.schema([*DOCUMENTS, *(pa.field(name, pa.string()) for name in extras)])
    position = _BytesRead()
    by_path = {lay.path: lay for lay in layouts}
    chunks = _over_files(
        files, position, lambda f: _mimic_chunks(by_path[f], schema, opts, position)
    )
    return DocumentStream(schema, "mimic", path, chunks, position, _total_size(files))


def _csv_layout(root: Path, path: Path, opts: _Options) -> _CsvLayout:
    header, hint = _csv_header(path, opts.encoding)
    required = {"doc", "patient", "text"}
    cols = _resolve_columns(header, opts, _MIMIC_COLUMNS, required, path, hint)
    _check_duplicates(header, path)
    extras = {
        name.lower(): found
        for name in _MIMIC_EXTRAS
        if (found := _find_column(header, name)) is not None and found not in cols.values()
    }
    integer = (cols["patient"] or "").casefold() == "subject_id"
    return _CsvLayout(path, _file_stem(root, path), header, cols, extras, integer)


def _csv_header(path: Path, encoding: str) -> tuple[list[str], str]:
    """The header's column names and a hint when the file looks like another format."""
    with _open_binary(path) as (data, _):
        line = data.readline(1 << 20)
    if not line.strip():
        raise InputError("empty CSV file: expected a header row", path=path)
    hint = _format_hint(line, "mimic")
    if len(line) >= 1 << 20 and not line.endswith(b"\n"):
        raise InputError(f"the CSV header row is longer than 1 MiB{hint}", path=path)
    try:
        text = line.decode("utf-8-sig" if _is_utf8(encoding) else encoding).lstrip("\ufeff")
    except UnicodeError:
        why = " (pass --encoding if the file is not UTF-8)" if _is_utf8(encoding) else ""
        raise InputError(
            f"the CSV header does not decode as {encoding}{why}{hint}", path=path
        ) from None
    try:
        names = next(csv.reader([text]), [])
    except csv.Error:  # a field over the csv module's limit; its message may quote the file
        raise InputError(f"the CSV header row cannot be read{hint}", path=path) from None
    return [n.strip() for n in names], hint


class _RowPlacer:
    """Give the good rows of each CSV batch their data-row index.

    pyarrow skips rows with the wrong column count (through ``invalid_row_handler``) and
    reports each one's record number before the batch that would have held it is returned, so
    the good rows' indices are the first indices not taken by a skipped row. A skipped row
    holding the mark of a rejected record (:class:`_QuoteRepair`) is rejected with the mark's
    reason, any other as a wrong column count.
    """

    def __init__(self) -> None:
        self.bad: list[int] = []
        self.marked: dict[int, str] = {}  # skipped row -> the reason of its mark
        self._next = 0
        self._done = 0  # how many entries of self.bad have been placed

    def handler(self, row: Any) -> str:
        # row.number counts records from 1 and includes the header row.
        number = -1 if row.number is None else row.number - 2
        self.bad.append(number)
        text = row.text or ""
        if "\x1a" in text:
            for reason, mark in _MARKS.items():
                if mark in text:
                    self.marked[number] = reason
                    break
        return "skip"

    def place(self, n: int) -> tuple[np.ndarray, list[int]]:
        """Indices of the next ``n`` good rows and the skipped rows they passed."""
        pending = np.array(self.bad[self._done :], dtype=np.int64)
        candidates = np.arange(self._next, self._next + n + len(pending), dtype=np.int64)
        rows = candidates[~np.isin(candidates, pending)][:n]
        end = int(rows[-1]) + 1 if n else self._next
        passed = pending[pending < end]
        self._done += len(passed)
        self._next = end
        return rows, passed.tolist()

    def rest(self) -> list[int]:
        """Skipped rows not yet passed (after the last good row)."""
        rest = self.bad[self._done :]
        self._done = len(self.bad)
        return rest

    def rejections(self, source: str, rows: list[int]) -> list[Rejection]:
        """The rejections of skipped rows."""
        return [Rejection(source, r, None, self.marked.get(r, WRONG_COLUMNS)) for r in rows]


def _mimic_chunks(
    layout: _CsvLayout, schema: pa.Schema, opts: _Options, position: _BytesRead
) -> Iterator[_Chunk]:
    source = str(layout.path)
    used = [c for c in layout.cols.values() if c is not None] + list(layout.extras.values())
    used = list(dict.fromkeys(used))
    placer = _RowPlacer()
    check = _quote_check(layout)
    block = _CSV_BLOCK_BYTES
    raw = pa.OSFile(source, "rb")
    position.current = _tell(raw)
    try:
        data = pa.CompressedInputStream(raw, "gzip") if _is_gzip(layout.path) else raw
        repair = _QuoteRepair(data, check, len(layout.header), layout.path, block)
        batches = _arrow_errors(
            lambda: _csv_reader(repair, layout.header, used, placer.handler, block),
            layout.path,
            "CSV",
            block,
        )
        for batch in batches:
            rows, skipped = placer.place(batch.num_rows)
            for start in range(0, batch.num_rows, opts.batch_rows):
                part = batch.slice(start, opts.batch_rows)
                raw_chunk = _mimic_raw(
                    layout, part, rows[start : start + opts.batch_rows], schema, opts
                )
                raw_chunk.rejected = placer.rejections(source, skipped) if start == 0 else []
                raw_chunk.flags = _mark_flags(part, repair)
                yield _finish(raw_chunk, schema)
        rest = placer.rejections(source, placer.rest())
        if rest:
            yield _empty(schema), rest
    finally:
        raw.close()


def _mimic_raw(
    layout: _CsvLayout, part: pa.RecordBatch, rows: np.ndarray, schema: pa.Schema, opts: _Options
) -> _Raw:
    cols = layout.cols
    extra = {}
    for f in list(schema)[len(DOCUMENTS) :]:  # null where this file lacks the column
        found = layout.extras.get(f.name)
        extra[f.name] = pa.nulls(len(part), f.type) if found is None else part.column(found)
    return _Raw(
        source=str(layout.path),
        stem=layout.stem,
        rows=rows,
        doc=_column(part, cols["doc"]),
        patient=part.column(cols["patient"]),
        group=_column(part, cols["group"]),
        text=part.column(cols["text"]),
        names=cols,
        extra=extra,
        encoding=opts.encoding,
        integer_patient=layout.integer_patient,
    )


def _csv_reader(
    data: Any,
    header: list[str],
    used: list[str],
    handler: Callable[[Any], str],
    block_bytes: int,
) -> pcsv.CSVStreamingReader:
    """A streaming CSV reader of the ``used`` columns, as binary, skipping the header row."""
    return pcsv.open_csv(
        data,
        read_options=pcsv.ReadOptions(
            column_names=header,
            skip_rows=1,
            use_threads=False,  # row numbers of skipped rows are only known single-threaded
            block_size=block_bytes,
        ),
        parse_options=pcsv.ParseOptions(newlines_in_values=True, invalid_row_handler=handler),
        convert_options=pcsv.ConvertOptions(
            column_types={c: pa.large_binary() for c in used},
            include_columns=used,
            strings_can_be_null=False,
        ),
    )


def _quote_check(layout: _CsvLayout) -> _QuoteCheck:
    """How the file's records start: with its leading integer id columns (MIMIC's
    ``ROW_ID``, ``SUBJECT_ID`` and ``HADM_ID`` as the document, patient and group ids; the
    reader rejects a ``SUBJECT_ID`` that is not an integer), where its first columns are
    such and not only the group's (which may be empty); else with none, and a record start
    is a well-formed record of the column count."""
    roles = {layout.cols[r]: r for r in _INTEGER_IDS if layout.cols[r] is not None}

    def integer(name: str) -> bool:
        role = roles.get(name)
        return role is not None and name.casefold() == _INTEGER_IDS[role]

    lead = [roles[name] for name in itertools.takewhile(integer, layout.header)]
    if set(lead) <= {"group"}:
        return _QuoteCheck([])
    return _QuoteCheck([b'"?[0-9]{0,20}"?' if r == "group" else b'"?[0-9]{1,20}"?' for r in lead])


def _mark_flags(
    part: pa.RecordBatch, repair: _QuoteRepair
) -> list[tuple[np.ndarray, str, str | None]]:
    """Rows with a field holding the mark of a rejected record, rejected with its reason
    (only a file holding the mark itself can have one: :class:`_QuoteRepair` replaces
    rejected records whole)."""
    if not repair.repaired:
        return []
    flags = []
    for name, arr in zip(part.schema.names, part.columns, strict=True):
        if not _has(arr, _MARK_PREFIX).any():  # a plain substring search: fast
            continue
        for reason, mark in _MARKS.items():
            hit = _has(arr, mark)
            if hit.any():
                flags.append((hit, reason, name))
    return flags


def _has(arr: pa.Array, text: str) -> np.ndarray:
    """True where a value holds ``text`` (false for nulls)."""
    hit = pc.match_substring(arr, text).fill_null(False)
    return np.asarray(hit.to_numpy(zero_copy_only=False), dtype=bool)
