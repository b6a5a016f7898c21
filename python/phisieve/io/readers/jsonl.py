"""jsonl: one JSON object per line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..schema import DOCUMENTS
from .common import (
    _ROLES,
    _TABLE_COLUMNS,
    INVALID_JSON,
    UNDECODABLE,
    WRONG_TYPE,
    DocumentStream,
    Rejection,
    _BytesRead,
    _Chunk,
    _open_binary,
    _Options,
    _over_files,
    _tell,
    _undecodable_reason,
)
from .rows import _finish, _Raw
from .sniff import _file_stem, _input_files, _total_size


def _open_jsonl(path: Path, opts: _Options) -> DocumentStream:
    files = _input_files(path, "jsonl")
    cols = {role: opts.columns[role] or _TABLE_COLUMNS[role] for role in _ROLES}
    position = _BytesRead()
    chunks = _over_files(
        files,
        position,
        lambda f: _jsonl_chunks(f, _file_stem(path, f), cols, opts, position),
    )
    return DocumentStream(DOCUMENTS, "jsonl", path, chunks, position, _total_size(files))


class _BadValue(Exception):
    def __init__(self, column: str | None, reason: str) -> None:
        self.column, self.reason = column, reason


def _jsonl_chunks(
    path: Path, stem: str, cols: dict[str, str], opts: _Options, position: _BytesRead
) -> Iterator[_Chunk]:
    source = str(path)
    lines: list[tuple[int, bytes]] = []
    with _open_binary(path) as (data, raw):
        position.current = _tell(raw)
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
