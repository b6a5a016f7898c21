"""Readers that turn clinical note collections into phisieve's ``documents`` dataset.

Every reader streams its input in record batches, so memory stays bounded by the batch size
however large the input is. Rows that cannot be used are not errors: they are returned (and
written by :func:`ingest`) as :class:`Rejection` records that say where the row was and why it
was dropped, never what it contained.

Row numbers are 0-based: the data record's index within its file for ``mimic`` (the header and
blank lines are not records), the line's index for ``jsonl``, the record's index for
``physionet``, the row's index within its file for ``parquet`` and the file's index in sorted
path order for ``txt``.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import posixpath
import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.dataset as pads

from .dataset import DatasetWriter, parquet_files
from .errors import InputError
from .progress import progress_bar
from .schema import DOCUMENTS

__all__ = [
    "FORMATS",
    "REASONS",
    "DocumentStream",
    "Rejection",
    "ingest",
    "read_documents",
]

FORMATS = ("mimic", "physionet", "jsonl", "parquet", "txt")
"""The input formats :func:`read_documents` understands (plus ``"auto"``)."""

MISSING_PATIENT = "missing patient id"
EMPTY_TEXT = "empty text"
UNDECODABLE = "undecodable bytes"
WRONG_COLUMNS = "wrong column count"
INVALID_JSON = "invalid json"
NO_PATIENT = "no patient id"
MALFORMED = "malformed record"
REASONS = (
    MISSING_PATIENT,
    EMPTY_TEXT,
    UNDECODABLE,
    WRONG_COLUMNS,
    INVALID_JSON,
    NO_PATIENT,
    MALFORMED,
)
"""Every reason a reader gives for rejecting a row."""

_ROLES = ("doc", "patient", "group", "text")
_MIMIC_COLUMNS = {"doc": "ROW_ID", "patient": "SUBJECT_ID", "group": "HADM_ID", "text": "TEXT"}
_MIMIC_EXTRAS = ("CHARTDATE", "CATEGORY", "DESCRIPTION")
_TABLE_COLUMNS = {"doc": "doc_id", "patient": "patient_id", "group": "group_id", "text": "text"}
_CSV_BLOCK_BYTES = 1 << 22
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class Rejection:
    """A row a reader could not use.

    Parameters
    ----------
    source
        The file (or, for ``txt``, the folder) the row came from.
    row
        Its 0-based row number in ``source`` (see the module docstring); -1 when unknown.
    column
        The column that made it unusable, when one did.
    reason
        One of :data:`REASONS`.
    """

    source: str
    row: int
    column: str | None
    reason: str


@dataclass(frozen=True)
class _Options:
    columns: dict[str, str | None]
    id_map: Path | None
    batch_rows: int


_Chunk = tuple[pa.RecordBatch, list[Rejection]]


class DocumentStream(Iterator[_Chunk]):
    """The iterator :func:`read_documents` returns: ``(batch, rejections)`` pairs.

    Attributes
    ----------
    schema
        The schema of every batch: ``DOCUMENTS`` followed by the pass-through columns.
    fmt
        The input format (never ``"auto"``).
    path
        The input file or folder.
    total_bytes
        The input's size in bytes (compressed size for gzipped input).
    """

    def __init__(
        self,
        schema: pa.Schema,
        fmt: str,
        path: Path,
        chunks: Iterator[_Chunk],
        bytes_read: Callable[[], int],
        total_bytes: int,
    ) -> None:
        self.schema = schema
        self.fmt = fmt
        self.path = path
        self.total_bytes = total_bytes
        self._chunks = chunks
        self._bytes_read = bytes_read

    def bytes_read(self) -> int:
        """How many bytes of the input have been read so far."""
        return self._bytes_read()

    def __iter__(self) -> DocumentStream:
        return self

    def __next__(self) -> _Chunk:
        return next(self._chunks)

    def close(self) -> None:
        """Stop reading and close the input files."""
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> DocumentStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------------------------
# Public API


def read_documents(
    path: str | os.PathLike[str],
    fmt: str = "auto",
    *,
    patient_col: str | None = None,
    text_col: str | None = None,
    doc_col: str | None = None,
    group_col: str | None = None,
    id_map: str | os.PathLike[str] | None = None,
    batch_rows: int = 8192,
) -> DocumentStream:
    """Stream a note collection as ``documents`` record batches.

    The format, the options and the required columns are checked when this is called, before
    any row is read; rows are read lazily as the returned iterator is consumed.

    Parameters
    ----------
    path
        The input file or folder.
    fmt
        One of :data:`FORMATS`, or ``"auto"`` to choose by extension: ``.csv``/``.csv.gz`` is
        ``mimic``, ``.text`` is ``physionet``, ``.jsonl``/``.jsonl.gz`` is ``jsonl``,
        ``.parquet`` or a folder holding Parquet files is ``parquet`` and a folder holding
        ``.txt`` files is ``txt``.
    patient_col, text_col, doc_col, group_col
        Input column (or JSON key) holding the patient id, note text, document id and group
        (e.g. admission) id. Defaults are ``SUBJECT_ID``, ``TEXT``, ``ROW_ID``, ``HADM_ID``
        for ``mimic`` and ``patient_id``, ``text``, ``doc_id``, ``group_id`` for ``jsonl`` and
        ``parquet``. Column names are matched exactly, else case-insensitively. A column named
        explicitly must exist; the default document and group columns are optional (document
        ids then become ``"<file stem>:<row>"`` and groups null). Not used by ``physionet``
        and ``txt``.
    id_map
        ``txt`` only: a CSV with columns ``file,patient_id`` (and optionally ``group_id``)
        mapping each file, relative to the folder, to its patient. Without it, the patient id
        is the name of the file's top sub-folder (``notes/<patient>/<doc>.txt``).
    batch_rows
        The most rows (input records) one batch covers.

    Returns
    -------
    DocumentStream
        An iterator of ``(batch, rejections)``: the usable rows of one chunk of input as a
        record batch with schema ``DocumentStream.schema`` and the :class:`Rejection` of
        every other row of that chunk.

    Raises
    ------
    InputError
        For an unknown format, a missing input, an option the format does not take, or a
        missing required column.
    """
    src = Path(path)
    fmt = _check_format(fmt)
    if not src.exists():
        raise InputError("no such file or folder", path=src)
    if fmt == "auto":
        fmt = _detect_format(src)
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise InputError(f"batch_rows must be a positive integer, got {batch_rows!r}")
    columns = {"doc": doc_col, "patient": patient_col, "group": group_col, "text": text_col}
    if fmt in ("physionet", "txt") and any(v is not None for v in columns.values()):
        raise InputError(f"column options do not apply to the {fmt!r} format", path=src)
    if id_map is not None and fmt != "txt":
        raise InputError(f"id_map applies only to the 'txt' format, not {fmt!r}", path=src)
    opts = _Options(columns, None if id_map is None else Path(id_map), batch_rows)
    return _OPENERS[fmt](src, opts)


def ingest(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    fmt: str = "auto",
    *,
    patient_col: str | None = None,
    text_col: str | None = None,
    doc_col: str | None = None,
    group_col: str | None = None,
    id_map: str | os.PathLike[str] | None = None,
    batch_rows: int = 8192,
    progress: bool = False,
) -> dict[str, Any]:
    """Read a note collection and write it as a ``documents`` Parquet dataset.

    Usable rows go to part files in ``out``, rejected rows to ``out/_rejected`` with their
    reason. Nothing is written when the input is found unusable up front (unknown format,
    missing column).

    Parameters
    ----------
    path, fmt, patient_col, text_col, doc_col, group_col, id_map, batch_rows
        As for :func:`read_documents`.
    out
        The output folder.
    progress
        Show a progress bar (bytes of input read) on standard error.

    Returns
    -------
    dict
        The manifest also written to ``out/_SUCCESS.json``: ``rows`` (written), ``rejected``,
        ``rows_in`` (always ``rows + rejected``), ``rejected_by_reason`` (reason -> count),
        ``parts``, ``format`` and ``input``.

    Raises
    ------
    InputError
        As :func:`read_documents`, or when ``out`` is the input itself.
    """
    stream = read_documents(
        path,
        fmt,
        patient_col=patient_col,
        text_col=text_col,
        doc_col=doc_col,
        group_col=group_col,
        id_map=id_map,
        batch_rows=batch_rows,
    )
    out = Path(out)
    _check_output(stream.path, out)
    by_reason: Counter[str] = Counter()
    rows_in = 0
    with stream, _progress_bar(progress, stream) as tick:
        writer = DatasetWriter(out, stream.schema)
        for batch, rejections in stream:
            writer.write(batch)
            _write_rejections(writer, rejections)
            by_reason.update(r.reason for r in rejections)
            rows_in += batch.num_rows + len(rejections)
            tick()
    manifest = writer.close(
        rows_in=rows_in,
        rejected_by_reason=dict(sorted(by_reason.items())),
        format=stream.fmt,
        input=str(stream.path),
    )
    if manifest["rows"] + manifest["rejected"] != rows_in:  # pragma: no cover - a bug
        raise AssertionError("ingest lost rows: rows + rejected != rows_in")
    return manifest


# --------------------------------------------------------------------------------------------
# Format and option checks


def _check_format(fmt: str) -> str:
    if fmt != "auto" and fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}: expected 'auto' or one of {', '.join(FORMATS)}")
    return fmt


def _detect_format(path: Path) -> str:
    if path.is_dir():
        if _has_files(path, ".parquet"):
            return "parquet"
        if _has_files(path, ".txt"):
            return "txt"
    else:
        name = path.name.lower()
        for suffixes, fmt in (
            ((".csv", ".csv.gz"), "mimic"),
            ((".text", ".text.gz"), "physionet"),
            ((".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz"), "jsonl"),
            ((".parquet",), "parquet"),
        ):
            if name.endswith(suffixes):
                return fmt
    raise InputError(
        f"unknown format: cannot tell it from the name; pass one of {', '.join(FORMATS)}",
        path=path,
    )


def _has_files(folder: Path, suffix: str) -> bool:
    return any(not _hidden(p.relative_to(folder)) for p in folder.rglob(f"*{suffix}"))


def _hidden(rel: Path) -> bool:
    return any(part.startswith((".", "_")) for part in rel.parts)


def _check_output(src: Path, out: Path) -> None:
    src, dst = src.resolve(), out.resolve()
    if dst == src or dst in src.parents or src in dst.parents:
        raise InputError("the output folder must not be, contain or lie in the input", path=out)


def _resolve_columns(
    available: list[str], opts: _Options, defaults: dict[str, str], required: set[str], path: Path
) -> dict[str, str | None]:
    """Map each role to an available column name, or None for an absent optional one."""
    resolved: dict[str, str | None] = {}
    for role in _ROLES:
        wanted = opts.columns[role] or defaults[role]
        name = _find_column(available, wanted)
        if name is None and (role in required or opts.columns[role] is not None):
            shown = ", ".join(available[:50])
            raise InputError(f"missing required column (has: {shown})", path=path, column=wanted)
        resolved[role] = name
    return resolved


def _find_column(available: list[str], wanted: str) -> str | None:
    if wanted in available:
        return wanted
    folded = [name for name in available if name.casefold() == wanted.casefold()]
    return folded[0] if folded else None


# --------------------------------------------------------------------------------------------
# Shared row checks: every reader hands its raw columns to _finish


@dataclass
class _Raw:
    """One chunk of input rows, before decoding and checks.

    ``doc``/``patient``/``group``/``text`` hold strings or bytes (or are None when the input
    has no such column); ``extra`` holds pass-through columns. ``names`` gives each role's
    input column name for rejection records.
    """

    source: str
    stem: str
    rows: np.ndarray
    doc: pa.Array | None
    patient: pa.Array
    group: pa.Array | None
    text: pa.Array
    names: dict[str, str | None]
    extra: dict[str, pa.Array] = field(default_factory=dict)
    rejected: list[Rejection] = field(default_factory=list)


def _finish(raw: _Raw, schema: pa.Schema) -> _Chunk:
    """Decode, check and assemble one chunk: the usable rows as a batch and the rejections."""
    n = len(raw.rows)
    keep = np.ones(n, dtype=bool)
    rejected = list(raw.rejected)

    def reject(mask: np.ndarray, reason: str, column: str | None) -> None:
        hit = mask & keep
        rejected.extend(Rejection(raw.source, int(r), column, reason) for r in raw.rows[hit])
        keep[hit] = False

    decoded: dict[str, pa.Array | None] = {"doc": None, "group": None}
    for role, target in (
        ("doc", pa.string()),
        ("patient", pa.string()),
        ("group", pa.string()),
        ("text", pa.large_string()),
    ):
        arr = getattr(raw, role)
        if arr is not None:
            decoded[role], bad = _to_utf8(arr, target, raw.names.get(role), raw.source)
            reject(bad, UNDECODABLE, raw.names.get(role))
    extra = {}
    for name, arr in raw.extra.items():
        extra[name], bad = _to_utf8(arr, schema.field(name).type, name, raw.source)
        reject(bad, UNDECODABLE, name)

    patient = _trim(decoded["patient"])
    reject(_blank(patient), MISSING_PATIENT, raw.names["patient"])
    reject(_blank(decoded["text"]), EMPTY_TEXT, raw.names["text"])

    mask = pa.array(keep)
    doc = _doc_ids(decoded["doc"], raw.stem, raw.rows).filter(mask)
    group = decoded["group"]
    group = pa.nulls(n, pa.string()) if group is None else _trim(group)
    group = pc.if_else(pc.equal(pc.binary_length(group), 0), None, group).filter(mask)
    columns = [doc, patient.filter(mask), group, decoded["text"].filter(mask)]
    columns += [extra[f.name].filter(mask) for f in list(schema)[len(DOCUMENTS) :]]
    rejected.sort(key=lambda r: r.row)
    return pa.RecordBatch.from_arrays(columns, schema=schema), rejected


def _to_utf8(
    arr: pa.Array, target: pa.DataType, column: str | None, source: str
) -> tuple[pa.Array, np.ndarray]:
    """Cast to ``target``; binary input is UTF-8-checked and bad values reported in a mask."""
    bad = np.zeros(len(arr), dtype=bool)
    if arr.type == target:
        return arr, bad
    if pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type):
        try:
            return arr.cast(target), bad
        except pa.ArrowInvalid:
            bad = np.array([_undecodable(v) for v in arr.to_pylist()], dtype=bool)
            arr = pc.if_else(pa.array(bad), pa.scalar(None, arr.type), arr)
    try:
        return arr.cast(target), bad
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise InputError(
            f"cannot read column of type {arr.type} as text", path=source, column=column
        ) from None


def _undecodable(value: bytes | None) -> bool:
    if value is None:
        return False
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _trim(arr: pa.Array) -> pa.Array:
    return pc.utf8_trim_whitespace(arr)


def _blank(arr: pa.Array) -> np.ndarray:
    """True where a string is null, empty or only whitespace."""
    blank = pc.or_kleene(pc.equal(pc.binary_length(arr), 0), pc.utf8_is_space(arr))
    return np.asarray(blank.fill_null(True).to_numpy(zero_copy_only=False), dtype=bool)


def _doc_ids(doc: pa.Array | None, stem: str, rows: np.ndarray) -> pa.Array:
    """Trimmed document ids; missing or empty ones become ``"<stem>:<row>"``."""
    if doc is None:
        return pa.array([f"{stem}:{r}" for r in rows], pa.string())
    doc = _trim(doc)
    missing = _blank(doc)
    if not missing.any():
        return doc
    made = pa.array(
        [f"{stem}:{r}" if m else None for r, m in zip(rows, missing, strict=True)], pa.string()
    )
    return pc.if_else(pa.array(missing), made, doc)


def _stem(path: Path) -> str:
    name = path.name[:-3] if path.name.lower().endswith(".gz") else path.name
    return Path(name).stem


# --------------------------------------------------------------------------------------------
# Opening (possibly gzipped) files


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == _GZIP_MAGIC


@contextmanager
def _open_binary(path: Path) -> Iterator[tuple[IO[bytes], IO[bytes]]]:
    """Open ``path`` for reading, gunzipping it if needed: yields (data, raw file).

    A corrupt or truncated gzip stream becomes an :class:`InputError`.
    """
    raw = open(path, "rb")  # noqa: SIM115 - closed below
    try:
        if raw.read(2) == _GZIP_MAGIC:
            raw.seek(0)
            with gzip.GzipFile(fileobj=raw, mode="rb") as data:
                yield data, raw
        else:
            raw.seek(0)
            yield raw, raw
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise InputError(f"cannot decompress the file ({type(exc).__name__})", path=path) from None
    finally:
        raw.close()


def _tell(raw: IO[bytes] | pa.NativeFile) -> Callable[[], int]:
    def bytes_read() -> int:
        try:
            return raw.tell()
        except (ValueError, OSError):  # closed
            return 0

    return bytes_read


# --------------------------------------------------------------------------------------------
# mimic: NOTEEVENTS-style CSV


def _open_mimic(path: Path, opts: _Options) -> DocumentStream:
    header = _csv_header(path)
    cols = _resolve_columns(header, opts, _MIMIC_COLUMNS, {"doc", "patient", "text"}, path)
    extras = {
        name.lower(): found
        for name in _MIMIC_EXTRAS
        if (found := _find_column(header, name)) is not None and found not in cols.values()
    }
    schema = pa.schema([*DOCUMENTS, *(pa.field(name, pa.string()) for name in extras)])
    position: list[Callable[[], int]] = [lambda: 0]
    chunks = _mimic_chunks(path, header, cols, extras, schema, opts.batch_rows, position)
    return DocumentStream(schema, "mimic", path, chunks, lambda: position[0](), path.stat().st_size)


def _csv_header(path: Path) -> list[str]:
    with _open_binary(path) as (data, _):
        line = data.readline()
    if not line.strip():
        raise InputError("empty CSV file: expected a header row", path=path)
    try:
        text = line.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError("the CSV header is not valid UTF-8", path=path) from None
    names = next(csv.reader([text]))
    names = [n.strip() for n in names]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InputError(f"duplicate column names in the CSV header: {dupes}", path=path)
    return names


class _RowPlacer:
    """Give the good rows of each CSV batch their data-row index.

    pyarrow skips rows with the wrong column count (through ``invalid_row_handler``) and
    reports each one's record number before the batch that would have held it is returned, so
    the good rows' indices are the first indices not taken by a skipped row.
    """

    def __init__(self) -> None:
        self.bad: list[int] = []
        self._next = 0
        self._done = 0  # how many entries of self.bad have been placed

    def handler(self, row: Any) -> str:
        # row.number counts records from 1 and includes the header row.
        self.bad.append(-1 if row.number is None else row.number - 2)
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


def _mimic_chunks(
    path: Path,
    header: list[str],
    cols: dict[str, str | None],
    extras: dict[str, str],
    schema: pa.Schema,
    batch_rows: int,
    position: list[Callable[[], int]],
) -> Iterator[_Chunk]:
    source, stem = str(path), _stem(path)
    used = [c for c in cols.values() if c is not None] + list(extras.values())
    placer = _RowPlacer()
    compressed = _is_gzip(path)
    raw = pa.OSFile(str(path), "rb")
    position[0] = _tell(raw)
    try:
        data = pa.CompressedInputStream(raw, "gzip") if compressed else raw
        batches = _arrow_errors(
            lambda: _csv_reader(data, header, used, placer.handler), path, "CSV"
        )
        for batch in batches:
            rows, skipped = placer.place(batch.num_rows)
            wrong = [Rejection(source, r, None, WRONG_COLUMNS) for r in skipped]
            for start in range(0, batch.num_rows, batch_rows):
                part = batch.slice(start, batch_rows)
                raw_chunk = _Raw(
                    source=source,
                    stem=stem,
                    rows=rows[start : start + batch_rows],
                    doc=_column(part, cols["doc"]),
                    patient=part.column(cols["patient"]),
                    group=_column(part, cols["group"]),
                    text=part.column(cols["text"]),
                    names=cols,
                    extra={name: part.column(col) for name, col in extras.items()},
                    rejected=wrong if start == 0 else [],
                )
                yield _finish(raw_chunk, schema)
        rest = [Rejection(source, r, None, WRONG_COLUMNS) for r in placer.rest()]
        if rest:
            yield _empty(schema), rest
    finally:
        raw.close()


def _csv_reader(
    data: pa.NativeFile, header: list[str], used: list[str], handler: Callable[[Any], str]
) -> pcsv.CSVStreamingReader:
    """A streaming CSV reader of the ``used`` columns, as binary, skipping the header row."""
    return pcsv.open_csv(
        data,
        read_options=pcsv.ReadOptions(
            column_names=header,
            skip_rows=1,
            use_threads=False,  # row numbers of skipped rows are only known single-threaded
            block_size=_CSV_BLOCK_BYTES,
        ),
        parse_options=pcsv.ParseOptions(newlines_in_values=True, invalid_row_handler=handler),
        convert_options=pcsv.ConvertOptions(
            column_types={c: pa.large_binary() for c in used},
            include_columns=used,
            strings_can_be_null=False,
        ),
    )


def _arrow_errors(
    make: Callable[[], Iterable[pa.RecordBatch]], path: Path, what: str
) -> Iterator[pa.RecordBatch]:
    """The batches of ``make()``; pyarrow errors (which may quote input text) become a bare
    :class:`InputError`."""
    batches: Iterator[pa.RecordBatch] | None = None
    while True:
        try:
            if batches is None:
                batches = iter(make())
            batch = next(batches)
        except StopIteration:
            return
        except (pa.ArrowException, OSError) as exc:
            raise InputError(
                f"cannot read the {what} file ({type(exc).__name__})", path=path
            ) from None
        yield batch


def _column(batch: pa.RecordBatch, name: str | None) -> pa.Array | None:
    return None if name is None else batch.column(name)


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


# --------------------------------------------------------------------------------------------
# physionet: START_OF_RECORD=<patient>||||<note>|||| ... ||||END_OF_RECORD


_HEADER = re.compile(rb"START_OF_RECORD=([^|]*)\|\|\|\|([^|]*)\|\|\|\|[ \t]*\r?\n?")
_START = b"START_OF_RECORD="
_END = b"||||END_OF_RECORD"


@dataclass
class _Record:
    """A physionet record being read: its header fields (None when malformed) and text."""

    index: int
    patient: bytes | None
    note: bytes | None
    lines: list[bytes] = field(default_factory=list)
    ended: bool = False


def _open_physionet(path: Path, opts: _Options) -> DocumentStream:
    position: list[Callable[[], int]] = [lambda: 0]
    chunks = _physionet_chunks(path, opts.batch_rows, position)
    return DocumentStream(
        DOCUMENTS, "physionet", path, chunks, lambda: position[0](), path.stat().st_size
    )


def _physionet_chunks(
    path: Path, batch_rows: int, position: list[Callable[[], int]]
) -> Iterator[_Chunk]:
    source, stem = str(path), _stem(path)
    records: list[_Record] = []
    with _open_binary(path) as (data, raw):
        position[0] = _tell(raw)
        for record in _physionet_records(data):
            records.append(record)
            if len(records) == batch_rows:
                yield _physionet_chunk(records, source, stem)
                records = []
    if records:
        yield _physionet_chunk(records, source, stem)


def _physionet_records(lines: Iterable[bytes]) -> Iterator[_Record]:
    """Split the file into records. Stray lines between records form one malformed record."""
    current: _Record | None = None
    count = 0
    for line in lines:
        if line.startswith(_START):
            if current is not None:
                yield current  # no END_OF_RECORD: malformed
            match = _HEADER.fullmatch(line)
            current = _Record(count, *(match.groups() if match else (None, None)))
            count += 1
            continue
        if current is None:
            if not line.strip():
                continue
            current = _Record(count, None, None)  # stray text outside a record
            count += 1
        end = line.find(_END)
        if end < 0:
            current.lines.append(line)
            continue
        current.lines.append(line[:end])
        current.ended = True
        yield current
        current = None
    if current is not None:
        yield current


def _physionet_chunk(records: list[_Record], source: str, stem: str) -> _Chunk:
    rows, patients, docs, texts, rejected = [], [], [], [], []
    for rec in records:
        fields = _header_fields(rec)
        if fields is None or not rec.ended:
            rejected.append(Rejection(source, rec.index, None, MALFORMED))
            continue
        patient, note = fields
        rows.append(rec.index)
        patients.append(patient)
        docs.append(f"{patient}-{note}")
        texts.append(b"".join(rec.lines))
    raw = _Raw(
        source=source,
        stem=stem,
        rows=np.array(rows, dtype=np.int64),
        doc=pa.array(docs, pa.string()),
        patient=pa.array(patients, pa.string()),
        group=None,
        text=pa.array(texts, pa.large_binary()),
        names={"doc": None, "patient": None, "group": None, "text": None},
        rejected=rejected,
    )
    return _finish(raw, DOCUMENTS)


def _header_fields(rec: _Record) -> tuple[str, str] | None:
    """The record's (patient, note) ids, or None when its header is malformed."""
    if rec.patient is None or rec.note is None:
        return None
    try:
        patient, note = rec.patient.decode("utf-8").strip(), rec.note.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None
    return (patient, note) if note else None


# --------------------------------------------------------------------------------------------
# jsonl: one JSON object per line


def _open_jsonl(path: Path, opts: _Options) -> DocumentStream:
    defaults = dict(_TABLE_COLUMNS)
    cols = {role: opts.columns[role] or defaults[role] for role in _ROLES}
    position: list[Callable[[], int]] = [lambda: 0]
    chunks = _jsonl_chunks(path, cols, opts.batch_rows, position)
    return DocumentStream(
        DOCUMENTS, "jsonl", path, chunks, lambda: position[0](), path.stat().st_size
    )


class _BadValue(Exception):
    def __init__(self, column: str | None, reason: str) -> None:
        self.column, self.reason = column, reason


def _jsonl_chunks(
    path: Path, cols: dict[str, str], batch_rows: int, position: list[Callable[[], int]]
) -> Iterator[_Chunk]:
    source, stem = str(path), _stem(path)
    lines: list[tuple[int, bytes]] = []
    with _open_binary(path) as (data, raw):
        position[0] = _tell(raw)
        for index, line in enumerate(data):
            if not line.strip():
                continue
            lines.append((index, line))
            if len(lines) == batch_rows:
                yield _jsonl_chunk(lines, cols, source, stem)
                lines = []
    if lines:
        yield _jsonl_chunk(lines, cols, source, stem)


def _jsonl_chunk(
    lines: list[tuple[int, bytes]], cols: dict[str, str], source: str, stem: str
) -> _Chunk:
    values: dict[str, list[str | None]] = {role: [] for role in _ROLES}
    rows, rejected = [], []
    for index, line in lines:
        try:
            record = _jsonl_record(line, cols)
        except _BadValue as bad:
            rejected.append(Rejection(source, index, bad.column, bad.reason))
            continue
        rows.append(index)
        for role in _ROLES:
            values[role].append(record[role])
    raw = _Raw(
        source=source,
        stem=stem,
        rows=np.array(rows, dtype=np.int64),
        doc=pa.array(values["doc"], pa.string()),
        patient=pa.array(values["patient"], pa.string()),
        group=pa.array(values["group"], pa.string()),
        text=pa.array(values["text"], pa.large_string()),
        names=dict(cols),
        rejected=rejected,
    )
    return _finish(raw, DOCUMENTS)


def _jsonl_record(line: bytes, cols: dict[str, str]) -> dict[str, str | None]:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise _BadValue(None, UNDECODABLE) from None
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        raise _BadValue(None, INVALID_JSON) from None
    if not isinstance(obj, dict):
        raise _BadValue(None, INVALID_JSON)
    record = {}
    for role in _ROLES:
        value = obj.get(cols[role])
        record[role] = _json_string(value, cols[role], allow_numbers=role != "text")
    return record


def _json_string(value: object, column: str, *, allow_numbers: bool) -> str | None:
    """A JSON value as a string (ids may be integers); None for null or absent."""
    if value is None:
        return None
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate escape such as "\udc80"
                raise _BadValue(column, UNDECODABLE) from None
        return value
    if allow_numbers and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if allow_numbers and isinstance(value, float) and value.is_integer():
        return str(int(value))
    raise _BadValue(column, INVALID_JSON)


# --------------------------------------------------------------------------------------------
# parquet: a file or a folder of files


def _open_parquet(path: Path, opts: _Options) -> DocumentStream:
    files = [Path(f) for f in parquet_files(path)]
    try:
        ds = pads.dataset([str(f) for f in files], format="parquet")
    except (pa.ArrowException, OSError) as exc:
        raise InputError(
            f"cannot open the Parquet input ({type(exc).__name__})", path=path
        ) from None
    cols = _resolve_columns(ds.schema.names, opts, _TABLE_COLUMNS, {"patient", "text"}, path)
    for role, name in cols.items():
        if name is not None:
            _check_text_type(ds.schema.field(name).type, path, name, allow_numbers=role != "text")
    used = {c for c in cols.values() if c is not None}
    standard = set(DOCUMENTS.names)
    extras = [f for f in ds.schema if f.name not in used and f.name not in standard]
    schema = pa.schema([*DOCUMENTS, *extras])
    sizes = [f.stat().st_size for f in files]
    done = [0]
    chunks = _parquet_chunks(path, ds, sizes, cols, schema, opts.batch_rows, done)
    return DocumentStream(schema, "parquet", path, chunks, lambda: done[0], sum(sizes))


def _check_text_type(dtype: pa.DataType, path: Path, column: str, *, allow_numbers: bool) -> None:
    ok = (
        pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_binary(dtype)
        or pa.types.is_large_binary(dtype)
        or (pa.types.is_dictionary(dtype) and pa.types.is_string(dtype.value_type))
        or (allow_numbers and pa.types.is_integer(dtype))
        or pa.types.is_null(dtype)
    )
    if not ok:
        raise InputError(f"cannot read a column of type {dtype} as text", path=path, column=column)


def _parquet_chunks(
    path: Path,
    ds: pads.FileSystemDataset,
    sizes: list[int],
    cols: dict[str, str | None],
    schema: pa.Schema,
    batch_rows: int,
    done: list[int],
) -> Iterator[_Chunk]:
    wanted = [c for c in cols.values() if c is not None]
    wanted += [f.name for f in list(schema)[len(DOCUMENTS) :]]
    for fragment, size in zip(ds.get_fragments(), sizes, strict=True):
        frag_path = Path(fragment.path)
        batches = _arrow_errors(
            lambda f=fragment: f.to_batches(
                schema=ds.schema, columns=wanted, batch_size=batch_rows, use_threads=False
            ),
            frag_path,
            "Parquet",
        )
        start = 0
        for batch in batches:
            raw = _Raw(
                source=str(frag_path),
                stem=_fragment_stem(path, frag_path),
                rows=np.arange(start, start + batch.num_rows, dtype=np.int64),
                doc=_column(batch, cols["doc"]),
                patient=batch.column(cols["patient"]),
                group=_column(batch, cols["group"]),
                text=batch.column(cols["text"]),
                names=cols,
                extra={f.name: batch.column(f.name) for f in list(schema)[len(DOCUMENTS) :]},
            )
            start += batch.num_rows
            yield _finish(raw, schema)
        done[0] += size


def _fragment_stem(root: Path, frag: Path) -> str:
    if root.is_dir():
        rel = frag.relative_to(root).as_posix()
        return rel[: -len(".parquet")] if rel.endswith(".parquet") else rel
    return _stem(frag)


# --------------------------------------------------------------------------------------------
# txt: a folder of .txt files


def _open_txt(path: Path, opts: _Options) -> DocumentStream:
    if not path.is_dir():
        raise InputError("the 'txt' format reads a folder of .txt files", path=path)
    files = sorted(
        (p.relative_to(path).as_posix() for p in path.rglob("*.txt") if p.is_file()),
    )
    files = [f for f in files if not _hidden(Path(f))]
    mapping = None if opts.id_map is None else _read_id_map(opts.id_map)
    sizes = [(path / f).stat().st_size for f in files]
    done = [0]
    chunks = _txt_chunks(path, files, sizes, mapping, opts.batch_rows, done)
    return DocumentStream(DOCUMENTS, "txt", path, chunks, lambda: done[0], sum(sizes))


def _read_id_map(id_map: Path) -> dict[str, tuple[str, str | None]]:
    """The id map as {relative file: (patient id, group id)}."""
    if not id_map.is_file():
        raise InputError("no such id map file", path=id_map)
    try:
        with open(id_map, encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f)
            fields = [n.strip() for n in reader.fieldnames or []]
            for needed in ("file", "patient_id"):
                if needed not in fields:
                    raise InputError("missing required column", path=id_map, column=needed)
            reader.fieldnames = fields
            return _id_map_rows(reader, id_map)
    except UnicodeDecodeError:
        raise InputError("the id map is not valid UTF-8", path=id_map) from None


def _id_map_rows(reader: csv.DictReader, id_map: Path) -> dict[str, tuple[str, str | None]]:
    mapping: dict[str, tuple[str, str | None]] = {}
    for row_index, row in enumerate(reader):
        name = (row.get("file") or "").strip().replace("\\", "/")
        if not name:
            raise InputError("empty file name", path=id_map, row=row_index, column="file")
        key = posixpath.normpath(name)
        if key in mapping:
            raise InputError("file listed twice", path=id_map, row=row_index, column="file")
        patient = (row.get("patient_id") or "").strip()
        group = (row.get("group_id") or "").strip() or None
        mapping[key] = (patient, group)
    return mapping


def _txt_chunks(
    root: Path,
    files: list[str],
    sizes: list[int],
    mapping: dict[str, tuple[str, str | None]] | None,
    batch_rows: int,
    done: list[int],
) -> Iterator[_Chunk]:
    for start in range(0, len(files), batch_rows):
        names = files[start : start + batch_rows]
        yield _txt_chunk(root, names, start, mapping)
        done[0] += sum(sizes[start : start + batch_rows])


def _txt_patient(
    rel: str, mapping: dict[str, tuple[str, str | None]] | None
) -> tuple[str, str | None] | None:
    """(patient, group) of a file, or None when nothing maps it to a patient."""
    if mapping is None:
        parts = rel.split("/")
        return (parts[0], None) if len(parts) > 1 else None
    return mapping.get(rel) or mapping.get(rel[: -len(".txt")])


def _txt_chunk(
    root: Path, names: list[str], start: int, mapping: dict[str, tuple[str, str | None]] | None
) -> _Chunk:
    source = str(root)
    rows, docs, patients, groups, texts, rejected = [], [], [], [], [], []
    for index, rel in enumerate(names, start):
        ids = _txt_patient(rel, mapping)
        if ids is None:
            rejected.append(Rejection(source, index, None, NO_PATIENT))
            continue
        rows.append(index)
        docs.append(rel[: -len(".txt")])
        patients.append(ids[0])
        groups.append(ids[1])
        texts.append((root / rel).read_bytes())
    raw = _Raw(
        source=source,
        stem=root.name,
        rows=np.array(rows, dtype=np.int64),
        doc=pa.array(docs, pa.string()),
        patient=pa.array(patients, pa.string()),
        group=pa.array(groups, pa.string()),
        text=pa.array(texts, pa.large_binary()),
        names={
            "doc": None,
            "patient": None if mapping is None else "patient_id",
            "group": None,
            "text": None,
        },
        rejected=rejected,
    )
    return _finish(raw, DOCUMENTS)


_OPENERS: dict[str, Callable[[Path, _Options], DocumentStream]] = {
    "mimic": _open_mimic,
    "physionet": _open_physionet,
    "jsonl": _open_jsonl,
    "parquet": _open_parquet,
    "txt": _open_txt,
}


# --------------------------------------------------------------------------------------------
# ingest helpers


def _write_rejections(writer: DatasetWriter, rejections: list[Rejection]) -> None:
    groups: dict[tuple[str, str, str | None], list[int]] = {}
    for r in rejections:
        groups.setdefault((r.source, r.reason, r.column), []).append(r.row)
    for (source, reason, column), rows in groups.items():
        writer.reject(source, rows, reason, column)


@contextmanager
def _progress_bar(enabled: bool, stream: DocumentStream) -> Iterator[Callable[[], None]]:
    """Yield ``tick()``, which shows the bytes of input read so far (a no-op when disabled)."""
    label = f"ingest {stream.path.name}"
    with progress_bar(label, total=stream.total_bytes, unit="bytes", enabled=enabled) as advance:
        shown = 0

        def tick() -> None:
            nonlocal shown
            now = stream.bytes_read()
            if now > shown:
                advance(now - shown)
                shown = now

        yield tick
        if enabled and stream.total_bytes > shown:
            advance(stream.total_bytes - shown)
