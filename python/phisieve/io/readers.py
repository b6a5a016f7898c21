"""Readers that turn clinical note collections into phisieve's ``documents`` dataset.

Every reader streams its input in record batches, so memory stays bounded by the batch size
however large the input is. Rows that cannot be used are not errors: they are returned (and
written by :func:`ingest`) as :class:`Rejection` records that say where the row was and why it
was dropped, never what it contained. Error messages name the file, row and column but never
quote a value; a header row is quoted only when it looks like column names, since a file
without one has note text where the names should be.

Row numbers are 0-based: the data record's index within its file for ``mimic`` (the header and
blank lines are not records), the line's index for ``jsonl``, the record's index for
``physionet``, the row's index within its file for ``parquet`` and the file's index in sorted
path order for ``txt``.

Hostile input is met as follows.

* Ids (patient, document, group) are strings or integers. A Parquet id column of any other
  type, floats included (``1e16`` and ``1e16 + 1`` are the same float, so two patients would
  merge), is refused with an :class:`~phisieve.errors.InputError` naming the file and column,
  in a single file as in any file of a folder; string and integer files may be mixed in a
  folder (integers become their decimal strings). A JSON id that is not a string or an integer
  (``3.0`` included) rejects its row as ``wrong type``.
* A ``mimic`` patient column named ``SUBJECT_ID`` must hold integers; other values reject their
  row. NUL characters in an id or the text reject the row in every format.
* A quoted CSV field left open would swallow the records after it. Where a file of five
  columns or more has records that start with integer ids (MIMIC's
  ``ROW_ID,SUBJECT_ID,HADM_ID,...``), a well-formed file is read exactly as written, whatever
  its notes hold. A record that is not well formed (or not of the file's column count) and
  holds lines that start like a record is damaged: it is rejected (``unclosed quote``) with
  every record after it up to the first record start that every reading of the damage
  agrees on, so no text is given to a patient it may not belong to; records after that are
  read as usual. A record the file ends in while a quoted field is open is rejected the same
  way. (How many rows a damaged stretch held is ambiguous: see :class:`_QuoteRepair`.)
* Bytes are decoded with ``encoding`` (UTF-8 by default, any plain ASCII-compatible Python
  charset; codecs that rewrite text, such as idna or utf-7, are refused);
  a value that does not decode rejects its row (under UTF-8 the reason names ``--encoding``).
"""

from __future__ import annotations

import bisect
import codecs
import csv
import gzip
import heapq
import itertools
import json
import os
import posixpath
import re
import zlib
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from ..errors import InputError
from .schema import DOCUMENTS
from .sources import parquet_files

__all__ = [
    "FORMATS",
    "REASONS",
    "DocumentStream",
    "Rejection",
    "read_documents",
]

FORMATS = ("mimic", "physionet", "jsonl", "parquet", "txt")
"""The input formats :func:`read_documents` understands (plus ``"auto"``)."""

MISSING_PATIENT = "missing patient id"
EMPTY_TEXT = "empty text"
UNDECODABLE = "undecodable bytes"
NOT_UTF8 = "not utf-8 (see --encoding)"
WRONG_COLUMNS = "wrong column count"
UNCLOSED_QUOTE = "unclosed quote"
INVALID_JSON = "invalid json"
WRONG_TYPE = "wrong type"
NOT_INTEGER = "patient id not an integer"
NUL_CHARACTER = "nul character"
NO_PATIENT = "no patient id"
MALFORMED = "malformed record"
UNREADABLE = "unreadable file"
REASONS = (
    MISSING_PATIENT,
    EMPTY_TEXT,
    UNDECODABLE,
    NOT_UTF8,
    WRONG_COLUMNS,
    UNCLOSED_QUOTE,
    INVALID_JSON,
    WRONG_TYPE,
    NOT_INTEGER,
    NUL_CHARACTER,
    NO_PATIENT,
    MALFORMED,
    UNREADABLE,
)
"""Every reason a reader gives for rejecting a row."""

_ROLES = ("doc", "patient", "group", "text")
_MIMIC_COLUMNS = {"doc": "ROW_ID", "patient": "SUBJECT_ID", "group": "HADM_ID", "text": "TEXT"}
_MIMIC_EXTRAS = ("CHARTDATE", "CATEGORY", "DESCRIPTION")
_TABLE_COLUMNS = {"doc": "doc_id", "patient": "patient_id", "group": "group_id", "text": "text"}
_SUFFIXES = {
    "mimic": (".csv", ".csv.gz"),
    "physionet": (".text", ".text.gz"),
    "jsonl": (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz"),
    "parquet": (".parquet",),
    "txt": (".txt",),
}
_CSV_BLOCK_BYTES = 1 << 22
_GZIP_MAGIC = b"\x1f\x8b"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}")
_ASCII_BYTES = bytes(range(128))
_TRANSFORMING = re.compile(
    r"(idna|punycode|unicode[-_]escape|raw[-_]unicode[-_]escape|utf[-_]7|hz|iso2022.*"
    r"|string[-_]escape|undefined)$"
)


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
    encoding: str = "utf-8"


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
    encoding
        The canonical name of the codec the input's bytes are decoded with.
    """

    encoding: str = "utf-8"

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
        try:
            return next(self._chunks)
        except (pa.ArrowException, OSError) as exc:
            # pyarrow's messages may quote input values: keep only the kind of error.
            raise InputError(
                f"cannot read the input ({type(exc).__name__})", path=self.path
            ) from None

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
    encoding: str = "utf-8",
) -> DocumentStream:
    """Stream a note collection as ``documents`` record batches.

    The format, the options and the required columns are checked when this is called, before
    any row is read; rows are read lazily as the returned iterator is consumed.

    Parameters
    ----------
    path
        The input file or folder. A folder given with ``fmt`` ``mimic``, ``physionet`` or
        ``jsonl`` is read file by file: every file with that format's suffixes inside it,
        recursively and in sorted path order, skipping paths with a part that starts with
        ``.`` or ``_``.
    fmt
        One of :data:`FORMATS`, or ``"auto"`` to choose by extension: ``.csv``/``.csv.gz`` is
        ``mimic``, ``.text`` is ``physionet``, ``.jsonl``/``.jsonl.gz`` is ``jsonl``,
        ``.parquet`` is ``parquet``; a folder is ``parquet``, ``txt``, ``mimic``, ``jsonl``
        or ``physionet``, the first whose files it holds. A file with another name is
        recognised by its first bytes (a Parquet file, a PhysioNet record, a JSON object or a
        CSV header naming ``SUBJECT_ID`` and ``TEXT``).
    patient_col, text_col, doc_col, group_col
        Input column (or JSON key) holding the patient id, note text, document id and group
        (e.g. admission) id. Defaults are ``SUBJECT_ID``, ``TEXT``, ``ROW_ID``, ``HADM_ID``
        for ``mimic`` and ``patient_id``, ``text``, ``doc_id``, ``group_id`` for ``jsonl`` and
        ``parquet``. Column names are matched exactly, else case-insensitively. A column named
        explicitly must exist; the default document and group columns are optional (document
        ids then become ``"<file stem>:<row>"`` and groups null). Not used by ``physionet``
        and ``txt``.
    id_map
        ``txt`` only: a UTF-8 CSV with columns ``file,patient_id`` (and optionally
        ``group_id``) mapping each file, relative to the folder, to its patient. Without it,
        the patient id is the name of the file's top sub-folder (``notes/<patient>/<doc>.txt``).
    batch_rows
        The most rows (input records) one batch covers.
    encoding
        The codec of the input's text (any ASCII-compatible Python codec name, e.g.
        ``"latin-1"`` or ``"cp1252"``). Parquet string columns are UTF-8 by definition; the
        codec applies to Parquet binary columns and to every other format.

    Returns
    -------
    DocumentStream
        An iterator of ``(batch, rejections)``: the usable rows of one chunk of input as a
        record batch with schema ``DocumentStream.schema`` and the :class:`Rejection` of
        every other row of that chunk.

    Raises
    ------
    InputError
        For an unknown format or encoding, a missing input, an option the format does not
        take, a missing required column, a header that does not look like one, or a Parquet
        column of a type that cannot hold ids or text.
    """
    src = Path(path)
    fmt = _check_format(fmt)
    encoding = _check_encoding(encoding)
    if not src.exists():
        raise InputError("no such file or folder", path=src)
    if fmt == "auto":
        try:
            fmt = _detect_format(src)
        except OSError as exc:
            raise InputError(f"cannot read the input ({type(exc).__name__})", path=src) from None
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise InputError(f"batch_rows must be a positive integer, got {batch_rows!r}")
    columns = {"doc": doc_col, "patient": patient_col, "group": group_col, "text": text_col}
    if fmt in ("physionet", "txt") and any(v is not None for v in columns.values()):
        raise InputError(f"column options do not apply to the {fmt!r} format", path=src)
    if id_map is not None and fmt != "txt":
        raise InputError(f"id_map applies only to the 'txt' format, not {fmt!r}", path=src)
    opts = _Options(columns, None if id_map is None else Path(id_map), batch_rows, encoding)
    try:
        stream = _OPENERS[fmt](src, opts)
    except OSError as exc:  # unreadable: say so without the system's message
        raise InputError(f"cannot read the input ({type(exc).__name__})", path=src) from None
    stream.encoding = encoding
    return stream


# --------------------------------------------------------------------------------------------
# Format and option checks


def _check_format(fmt: str) -> str:
    if fmt != "auto" and fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}: expected 'auto' or one of {', '.join(FORMATS)}")
    return fmt


def _check_encoding(encoding: str) -> str:
    """The canonical name of a plain charset: a text codec that keeps every ASCII byte as it
    is and does not rewrite text (not idna, punycode, the escape codecs, utf-7, hz or the
    iso2022 family, which shift or decode escape sequences)."""
    shown = repr(encoding)[:60]
    if not isinstance(encoding, str):
        raise InputError(f"encoding must be a codec name such as 'utf-8', got {shown}")
    try:
        info = codecs.lookup(encoding)
    except LookupError:
        raise InputError(
            f"unknown encoding {shown}: pass a Python codec name such as 'latin-1' or 'cp1252'"
        ) from None
    name = info.name
    plain = getattr(info, "_is_text_encoding", True) and not _TRANSFORMING.match(name)
    if not plain:
        raise InputError(
            f"{shown} is not a plain text encoding (it rewrites text): pass a charset such as "
            "'latin-1' or 'cp1252'"
        )
    try:
        compatible = _ASCII_BYTES.decode(name) == _ASCII_BYTES.decode("ascii")
    except LookupError:
        raise InputError(f"{shown} is not a text encoding") from None
    except UnicodeError:
        compatible = False
    if not compatible:
        raise InputError(
            f"encoding {shown} is not ASCII-compatible (UTF-16 and UTF-32 are not): "
            "convert the input to UTF-8 first"
        )
    return name


def _is_utf8(encoding: str) -> bool:
    return encoding in ("utf-8", "utf-8-sig")


def _undecodable_reason(encoding: str) -> str:
    """The rejection reason of bytes that ``encoding`` cannot decode."""
    return NOT_UTF8 if _is_utf8(encoding) else UNDECODABLE


def _detect_format(path: Path) -> str:
    if path.is_dir():
        for fmt in ("parquet", "txt", "mimic", "jsonl", "physionet"):
            if _has_files(path, _SUFFIXES[fmt]):
                return fmt
        raise InputError(
            "unknown format: the folder holds no .parquet, .txt, .csv, .jsonl or .text files; "
            f"pass one of {', '.join(FORMATS)}",
            path=path,
        )
    name = path.name.lower()
    for fmt in ("mimic", "physionet", "jsonl", "parquet"):
        if name.endswith(_SUFFIXES[fmt]):
            return fmt
    sniffed = _sniff_format(path)
    if sniffed is None:
        raise InputError(
            "unknown format: cannot tell it from the name or the first bytes; "
            f"pass one of {', '.join(FORMATS)}",
            path=path,
        )
    return sniffed


def _sniff_format(path: Path) -> str | None:
    """The format a file's first bytes suggest, or None."""
    with open(path, "rb") as f:
        if f.read(4) == b"PAR1":
            return "parquet"
    with _open_binary(path) as (data, _):
        head = data.read(1 << 16)
    return _format_of(head)


def _format_of(head: bytes) -> str | None:
    """The format of a file starting with ``head``: its first line is enough."""
    if head.startswith(b"PAR1"):
        return "parquet"
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if start.startswith(_START):
        return "physionet"
    if start.startswith(b"{"):
        return "jsonl"
    line = start.split(b"\n", 1)[0].decode("utf-8", "replace")
    try:
        names = {n.strip().casefold() for n in next(csv.reader([line]), [])}
    except csv.Error:  # a field over the csv module's limit: not a header
        return None
    return "mimic" if {"subject_id", "text"} <= names else None


def _format_hint(head: bytes, fmt: str) -> str:
    """A hint for a file read as ``fmt`` that looks like another format ('' if none)."""
    other = _format_of(head)
    if other is None or other == fmt:
        return ""
    return f" (it looks like {other}: pass --format {other})"


def _has_files(folder: Path, suffixes: tuple[str, ...]) -> bool:
    return any(
        p.name.lower().endswith(suffixes) and not _hidden(p.relative_to(folder)) and p.is_file()
        for p in folder.rglob("*")
    )


def _input_files(path: Path, fmt: str) -> list[Path]:
    """The files ``fmt`` reads at ``path``: the file itself, or the files in the folder with the
    format's suffixes (recursively, sorted by relative path, skipping hidden ones)."""
    if not path.is_dir():
        return [path]
    suffixes = _SUFFIXES[fmt]
    found = [
        p
        for p in path.rglob("*")
        if p.name.lower().endswith(suffixes) and not _hidden(p.relative_to(path)) and p.is_file()
    ]
    if not found:
        raise InputError(
            f"no {' or '.join(suffixes)} files in this folder: the {fmt!r} format reads such "
            "a file or a folder of them",
            path=path,
        )
    return sorted(found, key=lambda p: p.relative_to(path).as_posix())


def _hidden(rel: Path) -> bool:
    return any(part.startswith((".", "_")) for part in rel.parts)


def _file_stem(root: Path, file: Path) -> str:
    """The prefix of ``file``'s default document ids: its name (its path within ``root`` when
    that is a folder) without the format's suffix."""
    name = file.relative_to(root).as_posix() if root.is_dir() else file.name
    if name.lower().endswith(".gz"):
        name = name[:-3]
    head, dot, suffix = name.rpartition(".")
    return head if dot and head and not head.endswith("/") and "/" not in suffix else name


def _total_size(files: list[Path]) -> int:
    return sum(f.stat().st_size for f in files)


def _resolve_columns(
    available: list[str],
    opts: _Options,
    defaults: dict[str, str],
    required: set[str],
    path: Path,
    hint: str = "",
) -> dict[str, str | None]:
    """Map each role to an available column name, or None for an absent optional one."""
    wanted = {role: opts.columns[role] or defaults[role] for role in _ROLES}
    resolved = {role: _find_column(available, wanted[role]) for role in _ROLES}
    for role in _ROLES:
        if resolved[role] is None and (role in required or opts.columns[role] is not None):
            shown = _describe_columns(available, resolved)
            raise InputError(
                f"missing required column{shown}{hint}", path=path, column=wanted[role]
            )
    return resolved


def _describe_columns(available: list[str], resolved: dict[str, str | None]) -> str:
    """The available column names, or only their number when they may be data (no expected
    column was found, or a name does not look like an identifier)."""
    if any(v is not None for v in resolved.values()) and all(map(_looks_like_name, available)):
        more = ", ..." if len(available) > 50 else ""
        return f" (has: {', '.join(available[:50])}{more})"
    return (
        f": the {len(available)} column names are not shown, as they do not look like a "
        "header; is the header row missing, or the format another one?"
    )


def _looks_like_name(name: str) -> bool:
    """Whether ``name`` may be quoted in a message: short, an identifier, no spaces."""
    return _NAME.fullmatch(name) is not None


def _check_duplicates(names: list[str], path: Path) -> None:
    seen: Counter[str] = Counter(names)
    dupes = sorted(n for n, count in seen.items() if count > 1)
    if not dupes:
        return
    if all(map(_looks_like_name, dupes)):
        shown = ", ".join(dupes)
    else:
        shown = f"{len(dupes)} repeated names, not shown"
    raise InputError(f"duplicate column names ({shown})", path=path)


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
    input column name for rejection records. ``flags`` are rows a reader already found
    unusable: (mask, reason, column), applied first. ``integer_patient`` rejects patient ids
    that are not integers.
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
    encoding: str = "utf-8"
    integer_patient: bool = False
    flags: list[tuple[np.ndarray, str, str | None]] = field(default_factory=list)


_TARGETS = (
    ("doc", pa.string()),
    ("patient", pa.string()),
    ("group", pa.string()),
    ("text", pa.large_string()),
)


def _finish(raw: _Raw, schema: pa.Schema) -> _Chunk:
    """Decode, check and assemble one chunk: the usable rows as a batch and the rejections."""
    n = len(raw.rows)
    keep = np.ones(n, dtype=bool)
    rejected = list(raw.rejected)

    def reject(mask: np.ndarray, reason: str, column: str | None) -> None:
        hit = mask & keep
        rejected.extend(Rejection(raw.source, int(r), column, reason) for r in raw.rows[hit])
        keep[hit] = False

    for mask, reason, column in raw.flags:
        reject(mask, reason, column)
    decoded, extra = _decode_columns(raw, schema, reject)
    for role, _ in _TARGETS:
        if decoded[role] is not None:
            reject(_contains(decoded[role], "\\x00"), NUL_CHARACTER, raw.names.get(role))
    patient = _trim(decoded["patient"])
    reject(_blank(patient), MISSING_PATIENT, raw.names["patient"])
    if raw.integer_patient:
        reject(~_contains(patient, "^[0-9]+$"), NOT_INTEGER, raw.names["patient"])
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


def _decode_columns(
    raw: _Raw, schema: pa.Schema, reject: Callable[[np.ndarray, str, str | None], None]
) -> tuple[dict[str, pa.Array | None], dict[str, pa.Array]]:
    """The role and pass-through columns as strings; undecodable values are rejected."""
    reason = _undecodable_reason(raw.encoding)
    decoded: dict[str, pa.Array | None] = {"doc": None, "group": None}
    for role, target in _TARGETS:
        arr = getattr(raw, role)
        if arr is not None:
            column = raw.names.get(role)
            decoded[role], bad = _to_utf8(arr, target, column, raw.source, raw.encoding)
            reject(bad, reason, column)
    extra = {}
    for name, arr in raw.extra.items():
        target = schema.field(name).type
        extra[name], bad = _to_utf8(arr, target, name, raw.source, raw.encoding)
        reject(bad, reason, name)
    return decoded, extra


def _to_utf8(
    arr: pa.Array, target: pa.DataType, column: str | None, source: str, encoding: str = "utf-8"
) -> tuple[pa.Array, np.ndarray]:
    """Cast to ``target``; binary input is decoded with ``encoding`` and values that do not
    decode are reported in a mask (and become null)."""
    bad = np.zeros(len(arr), dtype=bool)
    if arr.type == target:
        return arr, bad
    if pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type):
        if not _is_utf8(encoding):
            return _decode_values(arr, target, encoding)
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


def _decode_values(
    arr: pa.Array, target: pa.DataType, encoding: str
) -> tuple[pa.Array, np.ndarray]:
    """Decode binary values with a codec other than UTF-8 (value by value)."""
    values: list[str | None] = []
    bad = np.zeros(len(arr), dtype=bool)
    for i, value in enumerate(arr.to_pylist()):
        text = None
        if value is not None:
            try:
                text = value.decode(encoding)
                text.encode("utf-8")  # a codec such as utf-7 may yield lone surrogates
            except UnicodeError:
                text, bad[i] = None, True
        values.append(text)
    return pa.array(values, target), bad


def _undecodable(value: bytes | None) -> bool:
    if value is None:
        return False
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _contains(arr: pa.Array, pattern: str) -> np.ndarray:
    """True where a value matches the RE2 ``pattern`` (false for nulls)."""
    hit = pc.match_substring_regex(arr, pattern)
    return np.asarray(hit.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


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


# --------------------------------------------------------------------------------------------
# Opening (possibly gzipped) files, and reading several


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


class _Progress:
    """Bytes of input read so far: the sizes of the files done plus the current file's
    position (``current``, set by the file's reader)."""

    def __init__(self) -> None:
        self.done = 0
        self.current: Callable[[], int] = lambda: 0

    def __call__(self) -> int:
        return self.done + self.current()

    def finish(self, size: int) -> None:
        self.done += size
        self.current = lambda: 0


def _over_files(
    files: list[Path], progress: _Progress, read: Callable[[Path], Iterator[_Chunk]]
) -> Iterator[_Chunk]:
    """The chunks of ``read(file)`` for each file in turn."""
    for file in files:
        size = file.stat().st_size
        yield from read(file)
        progress.finish(size)


# --------------------------------------------------------------------------------------------
# mimic: NOTEEVENTS-style CSV


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
    progress = _Progress()
    by_path = {lay.path: lay for lay in layouts}
    chunks = _over_files(
        files, progress, lambda f: _mimic_chunks(by_path[f], schema, opts, progress)
    )
    return DocumentStream(schema, "mimic", path, chunks, progress, _total_size(files))


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
    holding the mark of a rejected record (:class:`_QuoteRepair`) is an unclosed quote.
    """

    def __init__(self) -> None:
        self.bad: list[int] = []
        self.unclosed: set[int] = set()
        self._next = 0
        self._done = 0  # how many entries of self.bad have been placed

    def handler(self, row: Any) -> str:
        # row.number counts records from 1 and includes the header row.
        number = -1 if row.number is None else row.number - 2
        self.bad.append(number)
        if _SENTINEL_TEXT in (row.text or ""):
            self.unclosed.add(number)
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
        return [
            Rejection(source, r, None, UNCLOSED_QUOTE if r in self.unclosed else WRONG_COLUMNS)
            for r in rows
        ]


def _mimic_chunks(
    layout: _CsvLayout, schema: pa.Schema, opts: _Options, progress: _Progress
) -> Iterator[_Chunk]:
    source = str(layout.path)
    used = [c for c in layout.cols.values() if c is not None] + list(layout.extras.values())
    used = list(dict.fromkeys(used))
    placer = _RowPlacer()
    check = _quote_check(layout)
    raw = pa.OSFile(source, "rb")
    progress.current = _tell(raw)
    try:
        data = pa.CompressedInputStream(raw, "gzip") if _is_gzip(layout.path) else raw
        repair = (
            None if check is None else _QuoteRepair(data, check, len(layout.header), layout.path)
        )
        batches = _arrow_errors(
            lambda: _csv_reader(repair or data, layout.header, used, placer.handler),
            layout.path,
            "CSV",
        )
        for batch in batches:
            rows, skipped = placer.place(batch.num_rows)
            for start in range(0, batch.num_rows, opts.batch_rows):
                part = batch.slice(start, opts.batch_rows)
                raw_chunk = _mimic_raw(
                    layout, part, rows[start : start + opts.batch_rows], schema, opts
                )
                raw_chunk.rejected = placer.rejections(source, skipped) if start == 0 else []
                raw_chunk.flags = _unclosed_flags(part, repair)
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
    data: Any, header: list[str], used: list[str], handler: Callable[[Any], str]
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
            why = type(exc).__name__
            if "straddl" in str(exc):  # the message is not shown: it may quote the input
                why = f"a record longer than {_CSV_BLOCK_BYTES >> 20} MiB: an unclosed quote?"
            raise InputError(f"cannot read the {what} file ({why})", path=path) from None
        yield batch


def _column(batch: pa.RecordBatch, name: str | None) -> pa.Array | None:
    return None if name is None else batch.column(name)


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


# --------------------------------------------------------------------------------------------
# mimic: unclosed quotes


_SENTINEL_TEXT = "\x1a<phisieve: unclosed quote>\x1a"
_SENTINEL = _SENTINEL_TEXT.encode("ascii")
_SENTINEL_RE2 = "\\x1a<phisieve: unclosed quote>\\x1a"
_REJECTED_LINE = _SENTINEL + b"\n"  # one record of one field: rejected, as an unclosed quote
_START_SPAN = 128  # a record start's pattern never spans more bytes than this
_MIN_COLUMNS = 5  # files of fewer columns are not checked for unclosed quotes
_MAX_HELD = 64 << 20  # bytes held back from pyarrow while a damaged stretch is resolved
_QUOTED = re.compile(rb'[^"]*(?:""[^"]*)*')
_UNQUOTED = re.compile(rb"[^,\r\n]*")
_FIELD = rb'(?:"[^"]*(?:""[^"]*)*"|[^",\r\n]*)'  # a well-formed field (RFC 4180)


@dataclass(frozen=True)
class _QuoteCheck:
    """How a file's records start: ``start`` finds the line break before a line that starts
    like a record."""

    start: re.Pattern[bytes]


def _quote_check(layout: _CsvLayout) -> _QuoteCheck | None:
    """The record-start pattern of a file whose first columns (at least two, including the
    patient's) are id columns, read as integers; None for any other layout."""
    roles = {layout.cols[r]: r for r in ("doc", "patient", "group") if layout.cols[r] is not None}
    lead = [roles[name] for name in itertools.takewhile(roles.__contains__, layout.header)]
    if len(lead) < 2 or "patient" not in lead or len(layout.header) < _MIN_COLUMNS:
        return None  # a line of a note could too easily look like such a record
    fields = ['"?[0-9]{0,20}"?' if r == "group" else '"?[0-9]{1,20}"?' for r in lead]
    prefix = ",".join(fields) + ","
    return _QuoteCheck(re.compile(b"\\n(?=" + prefix.encode("ascii") + b")"))


def _unclosed_flags(
    part: pa.RecordBatch, repair: _QuoteRepair | None
) -> list[tuple[np.ndarray, str, str | None]]:
    """Rows with a field holding the mark of a rejected record (only a file holding the mark
    itself can have one: :class:`_QuoteRepair` replaces rejected records whole)."""
    if repair is None or not repair.repaired:
        return []
    flags = [
        (_contains(arr, _SENTINEL_RE2), UNCLOSED_QUOTE, name)
        for name, arr in zip(part.schema.names, part.columns, strict=True)
    ]
    return [flag for flag in flags if flag[0].any()]


class _QuoteRepair:
    """The bytes of a CSV file, with each stretch damaged by quotes left open replaced by one
    rejected record (the line ``_SENTINEL``) per record it held.

    The records are parsed one by one from the header on. A record that is well formed
    (RFC 4180: a quoted field is closed and followed by a delimiter or a line break) with the
    file's column count is passed on as it is, whatever its quoted fields hold: a valid file
    is read exactly as pyarrow reads it. So is a record without a line inside it that starts
    like a record (:class:`_QuoteCheck`): it holds nothing of another record (pyarrow rejects
    it if its column count is wrong).

    Any other record is damaged: a quote in it was left open, and the next record really
    starts at one of the record-like lines inside it (a quoted text's own quotes are doubled,
    so the field left open runs on over all of its text), but which one cannot be told (a
    note may hold such lines). Each is taken as a hypothesis and parsed on from, a damaged
    record met on the way branching again (in a file that ends inside a quote, its end is a
    hypothesis too), until every hypothesis reaches the same record start: from there on
    all of them, the true parse among them, read the same records. Everything before it is
    rejected, so no text is given to a record it may not belong to.

    How many records a damaged stretch held is ambiguous; it is counted as the hypothesis
    that ends each damaged record at the first line inside it that starts a record of the
    file's shape (well formed with its column count, or damaged itself) counts them: right
    when the damaged notes hold no such lines. Either way, rows in equals rows written plus
    rows rejected.

    Parsing resumes at the record after the last one passed on, so each byte is parsed about
    once (more often only inside damaged stretches), and reads grow with the bytes held, so
    a long record is not reparsed per block. A damaged stretch that does not resolve within
    :data:`_MAX_HELD` bytes makes the file unreadable (:class:`InputError`).
    """

    def __init__(self, data: Any, check: _QuoteCheck, columns: int, path: Path) -> None:
        self.closed = False
        self.repaired = 0  # records rejected
        self.parsed = 0  # records parsed (a measure of work, for tests)
        self._data = data
        self._start = check.start
        self._columns = columns
        self._path = path
        body = _FIELD + rb"(?:," + _FIELD + rb"){" + str(columns - 1).encode() + rb"}"
        self._record = re.compile(body + rb"(?:\r\n|\n|\r)")
        self._last = re.compile(body + rb"(?:\r\n|\n|\r)?\Z")
        self._buf = b""
        self._ready: deque[bytes | memoryview] = deque()  # bytes passed on, not yet read
        self._rec = -1  # where the next undecided record starts in _buf (-1: the header)
        self._eof = False

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes | memoryview:
        """Up to ``size`` bytes (pyarrow takes short reads and memoryviews)."""
        if size is None or size < 0:
            while not self._eof:
                self._fill()
            rest = b"".join(self._ready)
            self._ready.clear()
            return rest
        while not self._ready and not self._eof:
            self._fill()
        if not self._ready:
            return b""
        piece = self._ready[0]
        if len(piece) <= size:
            return self._ready.popleft()
        self._ready[0] = piece[size:]
        return piece[:size]

    def close(self) -> None:
        self.closed = True

    def _fill(self) -> None:
        held = len(self._buf)
        if held > _MAX_HELD:
            raise InputError(
                "cannot read the CSV file (a quote left open: no record start after it "
                f"within {_MAX_HELD >> 20} MiB)",
                path=self._path,
            )
        chunk = self._data.read(max(_CSV_BLOCK_BYTES, held))  # grows with a long record
        self._eof = not chunk
        self._buf = self._buf + chunk if self._buf else bytes(chunk)
        self._advance()

    def _advance(self) -> None:
        """Decide the records that can be decided and pass them on, in one piece (pyarrow
        makes a batch of each piece it reads)."""
        buf, done, out = self._buf, 0, []
        memo: _Memo = {}
        if self._rec < 0:
            line = buf.find(b"\n")
            if line < 0 and not self._eof:
                return
            self._rec = len(buf) if line < 0 else line + 1  # pyarrow skips one line
        while self._rec < len(buf):
            rec = self._rec
            step = self._step(rec, memo)
            if step is None:
                break
            if not step.damaged:
                self._rec = step.end
                continue
            cache = {rec: step}
            to = self._converge(rec, step, memo, cache)
            if to is None:
                break
            count = self._count(rec, to, cache)
            out += [memoryview(buf)[done:rec], _REJECTED_LINE * count]
            self.repaired += count
            done = self._rec = to
        if self._eof:
            self._rec = len(buf)
        out.append(memoryview(buf)[done : self._rec])
        piece = out[0] if len(out) == 1 else b"".join(out)
        if len(piece):
            self._ready.append(piece)
        self._buf = buf[self._rec :]
        self._rec = 0

    def _step(self, pos: int, memo: _Memo) -> _Step | None:
        """The record at ``pos``: where it ends, the first record-like line inside it, and
        whether it is damaged (then the next record may start at any record-like line inside
        it, or at its end if the file ends inside its quote); None until more bytes are
        read."""
        buf, size = self._buf, len(self._buf)
        self.parsed += 1
        whole = self._record.match(buf, pos) or (self._eof and self._last.match(buf, pos))
        if whole:
            return _Step(whole.end(), 0, False, False, True)
        fields, end, inside, clean = self._parse(pos, memo)
        if not self._eof and (inside or end + _START_SPAN > size):
            return None
        if not inside and clean and fields == self._columns:
            return _Step(end, 0, False, False, True)
        m = self._start.search(buf, pos, end + _START_SPAN)
        first = m.start() + 1 if m is not None and m.start() + 1 < end else 0
        return _Step(end, first, inside or first > 0, inside, False)

    def _parse(self, pos: int, memo: _Memo) -> tuple[int, int, bool, bool]:
        """Parse the record at ``pos`` as pyarrow does: its field count, end (the file's end
        for one left inside a quote), whether it is left inside a quote and is well formed.
        What follows each field start is kept in ``memo``: hypotheses meet at field starts,
        so a damaged stretch is parsed about once however many of them cross it."""
        buf, end = self._buf, len(self._buf)
        starts: list[int] = []
        cleans: list[bool] = []
        while True:
            if pos in memo:
                rest_fields, stop, inside, rest_clean = memo[pos]
                break
            starts.append(pos)
            after_quote = pos < end and buf[pos] == 0x22
            if after_quote:
                pos = _QUOTED.match(buf, pos + 1, end).end()  # type: ignore[union-attr]
                if pos >= end:
                    cleans.append(True)
                    rest_fields, stop, inside, rest_clean = 0, end, True, True
                    break
                pos += 1  # pyarrow keeps what follows up to the delimiter
            stop = _UNQUOTED.match(buf, pos, end).end()  # type: ignore[union-attr]
            cleans.append(not ((after_quote and stop > pos) or buf.find(b'"', pos, stop) >= 0))
            if stop < end and buf[stop] == 0x2C:
                pos = stop + 1
                continue
            if stop < end:
                stop += 2 if buf.startswith(b"\r\n", stop) else 1
            rest_fields, inside, rest_clean = 0, False, True
            break
        for start, clean in zip(reversed(starts), reversed(cleans), strict=True):
            rest_fields += 1
            rest_clean = rest_clean and clean
            memo[start] = (rest_fields, stop, inside, rest_clean)
        return rest_fields, stop, inside, rest_clean

    def _converge(self, rec: int, step: _Step, memo: _Memo, cache: dict[int, _Step]) -> int | None:
        """The first record start after the damaged record at ``rec`` that every hypothesis
        reaches (None until more bytes are read). Hypotheses are taken in file order: those
        from clean records in a heap, the record-like lines inside damaged records as one
        stretch (all of them up to ``reach``)."""
        buf = self._buf
        starts = (m.start() + 1 for m in self._start.finditer(buf, rec))
        heap: list[int] = []
        queued: set[int] = set()
        reach, cur, cand = 0, rec, next(starts, None)
        while True:
            if step.damaged:
                reach = max(reach, step.end)
            if (not step.damaged or step.to_end) and step.end not in queued:
                queued.add(step.end)
                heapq.heappush(heap, step.end)
            while cand is not None and cand <= cur:
                cand = next(starts, None)
            implicit = cand if cand is not None and cand < reach else None
            if implicit is not None and (not heap or implicit < heap[0]):
                cur = implicit
            else:
                cur = heapq.heappop(heap)
                queued.discard(cur)
                if cur == implicit:
                    cand = next(starts, None)
            while cand is not None and cand <= cur:
                cand = next(starts, None)
            if (not heap and (cand is None or cand >= reach)) or cur >= len(buf):
                return cur
            found = self._step(cur, memo)
            if found is None:
                return None
            step = cache[cur] = found

    def _count(self, pos: int, to: int, cache: dict[int, _Step]) -> int:
        """The records from ``pos`` to ``to``: a damaged record is taken to end at the first
        line inside it that starts a record of the file's shape (well formed with its column
        count, or damaged itself), else at its first record-like line. Blank lines are not
        records. (Which lines of a damaged stretch were records cannot always be told.)"""
        starts = sorted({*cache, to})  # every hypothesis reaches ``to``: a record start
        count = 0
        while pos < to and pos in cache:
            count += self._buf[pos] not in b"\r\n"
            step = cache[pos]
            if not step.damaged:
                pos = step.end
                continue
            nxt = step.first or step.end
            for at in itertools.islice(starts, bisect.bisect_right(starts, pos), None):
                if at >= step.end:
                    break
                if at == to or cache[at].damaged or cache[at].whole:
                    nxt = at
                    break
            pos = nxt
        return max(count, 1)


class _Step(NamedTuple):
    """A record as :meth:`_QuoteRepair._step` finds it."""

    end: int
    first: int  # the first record-like line inside it (0: none)
    damaged: bool
    to_end: bool  # damaged, and the file ends inside its quote
    whole: bool  # well formed, of the file's column count


_Memo = dict[int, tuple[int, int, bool, bool]]


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
    files = _input_files(path, "physionet")
    progress = _Progress()
    chunks = _over_files(
        files,
        progress,
        lambda f: _physionet_chunks(f, _file_stem(path, f), opts, progress),
    )
    return DocumentStream(DOCUMENTS, "physionet", path, chunks, progress, _total_size(files))


def _physionet_chunks(
    path: Path, stem: str, opts: _Options, progress: _Progress
) -> Iterator[_Chunk]:
    source = str(path)
    records: list[_Record] = []
    with _open_binary(path) as (data, raw):
        progress.current = _tell(raw)
        for record in _physionet_records(data):
            records.append(record)
            if len(records) == opts.batch_rows:
                yield _physionet_chunk(records, source, stem, opts.encoding)
                records = []
    if records:
        yield _physionet_chunk(records, source, stem, opts.encoding)


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


def _physionet_chunk(records: list[_Record], source: str, stem: str, encoding: str) -> _Chunk:
    rows, patients, docs, texts, rejected = [], [], [], [], []
    for rec in records:
        fields = _header_fields(rec, encoding)
        if isinstance(fields, str):
            rejected.append(Rejection(source, rec.index, None, fields))
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
        encoding=encoding,
    )
    return _finish(raw, DOCUMENTS)


def _header_fields(rec: _Record, encoding: str) -> tuple[str, str] | str:
    """The record's (patient, note) ids, or the reason it is rejected."""
    if not rec.ended or rec.patient is None or rec.note is None:
        return MALFORMED
    try:
        patient, note = rec.patient.decode(encoding).strip(), rec.note.decode(encoding).strip()
        (patient + note).encode("utf-8")
    except UnicodeError:
        return _undecodable_reason(encoding)
    return (patient, note) if note else MALFORMED


# --------------------------------------------------------------------------------------------
# jsonl: one JSON object per line


def _open_jsonl(path: Path, opts: _Options) -> DocumentStream:
    files = _input_files(path, "jsonl")
    cols = {role: opts.columns[role] or _TABLE_COLUMNS[role] for role in _ROLES}
    progress = _Progress()
    chunks = _over_files(
        files,
        progress,
        lambda f: _jsonl_chunks(f, _file_stem(path, f), cols, opts, progress),
    )
    return DocumentStream(DOCUMENTS, "jsonl", path, chunks, progress, _total_size(files))


class _BadValue(Exception):
    def __init__(self, column: str | None, reason: str) -> None:
        self.column, self.reason = column, reason


def _jsonl_chunks(
    path: Path, stem: str, cols: dict[str, str], opts: _Options, progress: _Progress
) -> Iterator[_Chunk]:
    source = str(path)
    lines: list[tuple[int, bytes]] = []
    with _open_binary(path) as (data, raw):
        progress.current = _tell(raw)
        for index, line in enumerate(data):
            if not line.strip():
                continue
            lines.append((index, line))
            if len(lines) == opts.batch_rows:
                yield _jsonl_chunk(lines, cols, source, stem, opts.encoding)
                lines = []
    if lines:
        yield _jsonl_chunk(lines, cols, source, stem, opts.encoding)


def _jsonl_chunk(
    lines: list[tuple[int, bytes]], cols: dict[str, str], source: str, stem: str, encoding: str
) -> _Chunk:
    values: dict[str, list[str | None]] = {role: [] for role in _ROLES}
    rows, rejected = [], []
    for index, line in lines:
        try:
            record = _jsonl_record(line, cols, encoding)
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
        encoding=encoding,
    )
    return _finish(raw, DOCUMENTS)


def _jsonl_record(line: bytes, cols: dict[str, str], encoding: str) -> dict[str, str | None]:
    try:
        text = line.decode(encoding).lstrip("\ufeff")
    except UnicodeError:
        raise _BadValue(None, _undecodable_reason(encoding)) from None
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        raise _BadValue(None, INVALID_JSON) from None
    if not isinstance(obj, dict):
        raise _BadValue(None, INVALID_JSON)
    return {
        role: _json_value(obj.get(cols[role]), cols[role], is_id=role != "text") for role in _ROLES
    }


def _json_value(value: object, column: str, *, is_id: bool) -> str | None:
    """A JSON value as a string, None for null or absent. Text must be a string; an id a
    string or an integer (not a float, not even ``3.0``)."""
    if value is None:
        return None
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate escape such as "\udc80"
                raise _BadValue(column, UNDECODABLE) from None
        return value
    if is_id and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise _BadValue(column, WRONG_TYPE)


# --------------------------------------------------------------------------------------------
# parquet: a file or a folder of files


@dataclass(frozen=True)
class _ParquetLayout:
    """One Parquet file of the input: the columns read from it."""

    path: Path
    stem: str
    cols: dict[str, str | None]
    extras: tuple[str, ...]  # its pass-through columns


def _open_parquet(path: Path, opts: _Options) -> DocumentStream:
    files = [Path(f) for f in parquet_files(path)]
    schemas = [_parquet_schema(f) for f in files]
    layouts = [_parquet_layout(path, f, s, opts) for f, s in zip(files, schemas, strict=True)]
    schema = pa.schema([*DOCUMENTS, *_extra_fields(layouts, schemas)])
    progress = _Progress()
    by_path = {lay.path: lay for lay in layouts}
    chunks = _over_files(files, progress, lambda f: _parquet_chunks(by_path[f], schema, opts))
    return DocumentStream(schema, "parquet", path, chunks, progress, _total_size(files))


def _parquet_schema(path: Path) -> pa.Schema:
    try:
        return pq.read_schema(path)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(
            f"cannot open the Parquet file ({type(exc).__name__})", path=path
        ) from None


def _parquet_layout(root: Path, path: Path, schema: pa.Schema, opts: _Options) -> _ParquetLayout:
    cols = _resolve_columns(schema.names, opts, _TABLE_COLUMNS, {"patient", "text"}, path)
    _check_duplicates(schema.names, path)
    for role, name in cols.items():
        if name is not None:
            _check_column_type(schema.field(name).type, path, name, role)
    used = {c for c in cols.values() if c is not None}
    extras = tuple(n for n in schema.names if n not in used and n not in DOCUMENTS.names)
    return _ParquetLayout(path, _file_stem(root, path), cols, extras)


def _check_column_type(dtype: pa.DataType, path: Path, column: str, role: str) -> None:
    """Refuse a column that cannot hold ``role``: ids are strings or integers, text strings."""
    if pa.types.is_dictionary(dtype):
        dtype = dtype.value_type
    text = (
        pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_binary(dtype)
        or pa.types.is_large_binary(dtype)
        or pa.types.is_null(dtype)
    )
    if text or (role != "text" and pa.types.is_integer(dtype)):
        return
    if role == "text":
        why = "the text must be strings"
    else:
        why = "ids must be strings or integers"
        if pa.types.is_floating(dtype) or pa.types.is_decimal(dtype):
            why += " (floats may merge distinct ids: cast the column to integers)"
    raise InputError(f"cannot read a column of type {dtype}: {why}", path=path, column=column)


def _extra_fields(layouts: list[_ParquetLayout], schemas: list[pa.Schema]) -> list[pa.Field]:
    """The pass-through columns of all files, each with a type every file's values fit."""
    types: dict[str, pa.DataType] = {}
    for layout, schema in zip(layouts, schemas, strict=True):
        for name in layout.extras:
            dtype = schema.field(name).type
            if name not in types or types[name] == dtype:
                types[name] = dtype
                continue
            try:
                merged = pa.unify_schemas(
                    [pa.schema([(name, types[name])]), pa.schema([(name, dtype)])],
                    promote_options="permissive",
                )
            except (pa.ArrowException, TypeError):
                raise InputError(
                    f"a pass-through column has type {dtype} here but {types[name]} in the "
                    "files before",
                    path=layout.path,
                    column=name if _looks_like_name(name) else None,
                ) from None
            types[name] = merged.field(name).type
    return [pa.field(name, dtype) for name, dtype in types.items()]


def _parquet_chunks(layout: _ParquetLayout, schema: pa.Schema, opts: _Options) -> Iterator[_Chunk]:
    cols = layout.cols
    extras = list(schema)[len(DOCUMENTS) :]
    wanted = [c for c in cols.values() if c is not None]
    wanted = list(dict.fromkeys([*wanted, *(f.name for f in extras if f.name in layout.extras)]))

    def batches() -> Iterator[pa.RecordBatch]:
        with pq.ParquetFile(layout.path) as f:
            yield from f.iter_batches(batch_size=opts.batch_rows, columns=wanted, use_threads=False)

    start = 0
    for batch in _arrow_errors(batches, layout.path, "Parquet"):
        raw = _Raw(
            source=str(layout.path),
            stem=layout.stem,
            rows=np.arange(start, start + batch.num_rows, dtype=np.int64),
            doc=_column(batch, cols["doc"]),
            patient=batch.column(cols["patient"]),
            group=_column(batch, cols["group"]),
            text=batch.column(cols["text"]),
            names=cols,
            extra={f.name: _extra_column(batch, f, layout.path) for f in extras},
            encoding=opts.encoding,
        )
        start += batch.num_rows
        yield _finish(raw, schema)


def _extra_column(batch: pa.RecordBatch, f: pa.Field, path: Path) -> pa.Array:
    """A pass-through column as ``f``'s type; nulls in a file without it."""
    if f.name not in batch.schema.names:
        return pa.nulls(batch.num_rows, f.type)
    arr = batch.column(f.name)
    if arr.type == f.type:
        return arr
    try:
        return arr.cast(f.type)
    except pa.ArrowException:
        raise InputError(
            f"cannot convert a pass-through column to {f.type}",
            path=path,
            column=f.name if _looks_like_name(f.name) else None,
        ) from None


# --------------------------------------------------------------------------------------------
# txt: a folder of .txt files


def _open_txt(path: Path, opts: _Options) -> DocumentStream:
    if not path.is_dir():
        raise InputError("the 'txt' format reads a folder of .txt files", path=path)
    files = [p.relative_to(path).as_posix() for p in _input_files(path, "txt")]
    mapping = None if opts.id_map is None else _read_id_map(opts.id_map)
    sizes = [(path / f).stat().st_size for f in files]
    progress = _Progress()
    chunks = _txt_chunks(path, files, sizes, mapping, opts, progress)
    return DocumentStream(DOCUMENTS, "txt", path, chunks, progress, sum(sizes))


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
    except csv.Error:  # its message may quote the file
        raise InputError("the id map is not a valid CSV file", path=id_map) from None


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
    opts: _Options,
    progress: _Progress,
) -> Iterator[_Chunk]:
    step = opts.batch_rows
    for start in range(0, len(files), step):
        yield _txt_chunk(root, files[start : start + step], start, mapping, opts.encoding)
        progress.finish(sum(sizes[start : start + step]))


def _txt_patient(
    rel: str, mapping: dict[str, tuple[str, str | None]] | None
) -> tuple[str, str | None] | None:
    """(patient, group) of a file, or None when nothing maps it to a patient."""
    if mapping is None:
        parts = rel.split("/")
        return (parts[0], None) if len(parts) > 1 else None
    return mapping.get(rel) or mapping.get(rel[: -len(".txt")])


def _txt_chunk(
    root: Path,
    names: list[str],
    start: int,
    mapping: dict[str, tuple[str, str | None]] | None,
    encoding: str,
) -> _Chunk:
    source = str(root)
    rows, docs, patients, groups, texts, rejected = [], [], [], [], [], []
    for index, rel in enumerate(names, start):
        ids = _txt_patient(rel, mapping)
        if ids is None:
            rejected.append(Rejection(source, index, None, NO_PATIENT))
            continue
        try:
            text = (root / rel).read_bytes()
        except OSError:
            rejected.append(Rejection(source, index, None, UNREADABLE))
            continue
        rows.append(index)
        docs.append(rel[: -len(".txt")])
        patients.append(ids[0])
        groups.append(ids[1])
        texts.append(text)
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
        encoding=encoding,
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
