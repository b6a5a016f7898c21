"""txt: a folder of .txt files."""

from __future__ import annotations

import csv
import posixpath
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from ...errors import InputError
from ..schema import DOCUMENTS
from .common import NO_PATIENT, UNREADABLE, DocumentStream, Rejection, _BytesRead, _Chunk, _Options
from .rows import _finish, _Raw
from .sniff import _input_files


def _open_txt(path: Path, opts: _Options) -> DocumentStream:
    if not path.is_dir():
        raise InputError("the 'txt' format reads a folder of .txt files", path=path)
    files = [p.relative_to(path).as_posix() for p in _input_files(path, "txt")]
    mapping = None if opts.id_map is None else _read_id_map(opts.id_map)
    sizes = [(path / f).stat().st_size for f in files]
    position = _BytesRead()
    chunks = _txt_chunks(path, files, sizes, mapping, opts, position)
    return DocumentStream(DOCUMENTS, "txt", path, chunks, position, sum(sizes))


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
    position: _BytesRead,
) -> Iterator[_Chunk]:
    step = opts.batch_rows
    for start in range(0, len(files), step):
        yield _txt_chunk(root, files[start : start + step], start, mapping, opts.encoding)
        position.finish(sum(sizes[start : start + step]))


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
