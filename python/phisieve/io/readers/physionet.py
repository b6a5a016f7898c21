"""physionet: START_OF_RECORD=<patient>||||<note>|||| ... ||||END_OF_RECORD"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..schema import DOCUMENTS
from .common import (
    MALFORMED,
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
from .sniff import _PHYSIONET_START as _START
from .sniff import _file_stem, _input_files, _total_size

_HEADER = re.compile(rb"START_OF_RECORD=([^|]*)\|\|\|\|([^|]*)\|\|\|\|[ \t]*\r?\n?")
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
    position = _BytesRead()
    chunks = _over_files(
        files,
        position,
        lambda f: _physionet_chunks(f, _file_stem(path, f), opts, position),
    )
    return DocumentStream(DOCUMENTS, "physionet", path, chunks, position, _total_size(files))


def _physionet_chunks(
    path: Path, stem: str, opts: _Options, position: _BytesRead
) -> Iterator[_Chunk]:
    source = str(path)
    records: list[_Record] = []
    with _open_binary(path) as (data, raw):
        position.current = _tell(raw)
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
