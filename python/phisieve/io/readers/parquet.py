"""parquet: a file or a folder of files."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import InputError
from ..schema import DOCUMENTS
from ..sources import parquet_files
from .common import (
    _TABLE_COLUMNS,
    DocumentStream,
    _arrow_errors,
    _BytesRead,
    _Chunk,
    _column,
    _Options,
    _over_files,
)
from .rows import _finish, _Raw
from .sniff import _check_duplicates, _file_stem, _looks_like_name, _resolve_columns, _total_size


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
    position = _BytesRead()
    by_path = {lay.path: lay for lay in layouts}
    chunks = _over_files(files, position, lambda f: _parquet_chunks(by_path[f], schema, opts))
    return DocumentStream(schema, "parquet", path, chunks, position, _total_size(files))


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
