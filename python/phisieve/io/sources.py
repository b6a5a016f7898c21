"""Sources of rows: anything that holds a table, as re-iterable streams of record batches.

:func:`open_source` opens a phisieve dataset (checked against its marker), a Parquet file, a
pyarrow ``Table``/``RecordBatch``/``RecordBatchReader``/``Dataset``, a polars frame or any
object with ``__arrow_c_stream__`` as a :class:`BatchSource`; stages read their inputs
through it, lean (file by file, without read-ahead).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from ..errors import InputError
from .dataset import MANIFEST, dataset_files, meta_dir


def parquet_files(path: Path) -> list[str]:
    """The Parquet files under a folder of Parquet files from anywhere (unchecked: for
    ``ingest``; phisieve's own datasets are read with :func:`dataset_files`), sorted,
    skipping hidden and ``_``-prefixed paths. A single ``.parquet`` file is returned as is.
    """
    path = Path(path)
    if path.is_file():
        return [str(path)]
    files = sorted(
        p
        for p in path.rglob("*.parquet")
        if not any(part.startswith(("_", ".")) for part in p.relative_to(path).parts)
    )
    if not files:
        raise InputError("no Parquet files in this folder", path=path)
    return [str(p) for p in files]


def _is_parquet_path(path: Path) -> bool:
    return path.is_dir() or path.suffix == ".parquet"


@dataclass
class BatchSource:
    """A re-iterable source of record batches (a dataset on disk or a table in memory).

    ``batches(columns)`` may be called several times; each call streams the source anew.
    ``reiterable`` is False for one-shot streams (a RecordBatchReader), which can be read once.
    """

    batches: Callable[[list[str] | None], Iterator[pa.RecordBatch]]
    schema: pa.Schema
    reiterable: bool
    name: str
    num_rows: int | None = None
    path: Path | None = None
    """The Parquet file or folder, when the source is one."""

    def table(self, columns: list[str] | None = None) -> pa.Table:
        """The whole source (only ``columns``) as one table in memory, with the source's
        schema metadata (a terms table's options)."""
        fields = self.schema if columns is None else [self.schema.field(c) for c in columns]
        schema = pa.schema(fields, metadata=self.schema.metadata)
        return pa.Table.from_batches(list(self.batches(columns)), schema)


def open_source(source: Any, batch_size: int = 16_384) -> BatchSource:
    """Open anything that holds documents as a :class:`BatchSource`.

    Accepts a path to a Parquet dataset folder or file, a ``pyarrow.Table``,
    ``RecordBatch``, ``RecordBatchReader`` or ``pyarrow.dataset.Dataset``, a polars
    ``DataFrame`` or ``LazyFrame``, or any object implementing ``__arrow_c_stream__``.
    """
    if isinstance(source, BatchSource):
        return source
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.exists():
            raise InputError("no such file or folder", path=path)
        if not _is_parquet_path(path):
            raise InputError(
                "expected a Parquet dataset folder or .parquet file (run `phisieve ingest` first)",
                path=path,
            )
        src = _files_source(dataset_files(path), batch_size, path)
        if path.is_dir():
            src.batches = _unchanged(path, src.batches)
        return src
    if isinstance(source, pads.Dataset):
        return _dataset_source(source, batch_size, "dataset")
    if isinstance(source, pa.RecordBatch):
        source = pa.Table.from_batches([source])
    if isinstance(source, pa.Table):
        table = source

        def table_batches(columns: list[str] | None) -> Iterator[pa.RecordBatch]:
            t = table.select(columns) if columns is not None else table
            yield from t.to_batches(max_chunksize=batch_size)

        return BatchSource(table_batches, table.schema, True, "table", table.num_rows)
    try:
        import polars as pl
    except ImportError:  # pragma: no cover - polars is a dependency
        pl = None
    if pl is not None and isinstance(source, pl.LazyFrame):
        source = source.collect()
    if pl is not None and isinstance(source, pl.DataFrame):
        return open_source(source.to_arrow(), batch_size)
    if isinstance(source, pa.RecordBatchReader) or hasattr(source, "__arrow_c_stream__"):
        reader = pa.RecordBatchReader.from_stream(source)
        used = False

        def stream_batches(columns: list[str] | None) -> Iterator[pa.RecordBatch]:
            nonlocal used
            if used:
                raise InputError("this stream of record batches was already read")
            used = True
            for b in reader:
                yield b.select(columns) if columns is not None else b

        return BatchSource(stream_batches, reader.schema, False, "stream")
    raise InputError(f"cannot read documents from a {type(source).__name__}")


def _marker_digest(path: Path) -> str | None:
    try:
        return hashlib.sha256((meta_dir(path) / MANIFEST).read_bytes()).hexdigest()
    except OSError:
        return None


def _unchanged(
    path: Path, batches: Callable[[list[str] | None], Iterator[pa.RecordBatch]]
) -> Callable[[list[str] | None], Iterator[pa.RecordBatch]]:
    """``batches``, checking before and after every pass that the dataset was not rewritten
    since it was opened (a stage reading it twice must see one version)."""
    digest = _marker_digest(path)

    def check() -> None:
        if _marker_digest(path) != digest:
            raise InputError(
                "the dataset was rewritten while it was being read; run again", path=path
            )

    def checked(columns: list[str] | None) -> Iterator[pa.RecordBatch]:
        check()
        yield from batches(columns)
        check()

    return checked


def _files_source(files: list[str], batch_size: int, path: Path) -> BatchSource:
    """Parquet files read one after the other in batches of ``batch_size`` rows, without
    read-ahead or pre-buffering: a stage's memory is its own work, not buffered input (the
    dataset scanner decodes whole row groups ahead: 150 MB for a 50 MB corpus)."""
    schema = pq.read_schema(files[0])
    rows = sum(pq.read_metadata(f).num_rows for f in files)

    def file_batches(columns: list[str] | None) -> Iterator[pa.RecordBatch]:
        for f in files:
            with pq.ParquetFile(f, buffer_size=1 << 20, pre_buffer=False) as pf:
                yield from pf.iter_batches(
                    batch_size=batch_size, columns=columns, use_threads=False
                )

    return BatchSource(file_batches, schema, True, str(path), rows, path)


def _dataset_source(ds: pads.Dataset, batch_size: int, name: str) -> BatchSource:
    def ds_batches(columns: list[str] | None) -> Iterator[pa.RecordBatch]:
        yield from ds.to_batches(columns=columns, batch_size=batch_size)

    return BatchSource(ds_batches, ds.schema, True, name, ds.count_rows())


def row_range(src: BatchSource, first: int, end: int) -> BatchSource:
    """The rows ``first <= row < end`` of ``src``, streamed (a view: it has no ``path``)."""
    first = max(0, first)
    end = max(first, end if src.num_rows is None else min(end, src.num_rows))

    def batches(columns: list[str] | None) -> Iterator[pa.RecordBatch]:
        seen = 0
        for batch in src.batches(columns):
            lo, hi = max(first - seen, 0), min(end - seen, batch.num_rows)
            seen += batch.num_rows
            if lo < hi:
                yield batch.slice(lo, hi - lo)
            if seen >= end:
                break

    name = f"{src.name} rows {first}:{end}"
    return BatchSource(batches, src.schema, src.reiterable, name, end - first)


def require_columns(schema: pa.Schema, columns: Iterable[str], where: str) -> None:
    """Raise :class:`InputError` naming the first required column ``schema`` lacks."""
    for col in columns:
        if col not in schema.names:
            raise InputError(
                f"missing required column (has: {', '.join(schema.names)})",
                path=where,
                column=col,
            )


def read_spans(path: str | os.PathLike[str]) -> pa.Table:
    """A ``spans`` dataset (``doc_id``, ``spans``) from a folder or Parquet file."""
    table = pa.concat_tables([pq.read_table(f) for f in dataset_files(path)])
    require_columns(table.schema, ["doc_id", "spans"], str(path))
    return table.select(["doc_id", "spans"])


def string_array(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A column as one Arrow string array (dictionaries decoded, other types cast)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    if not (
        pa.types.is_string(col.type)
        or pa.types.is_large_string(col.type)
        or pa.types.is_string_view(col.type)
    ):
        col = col.cast(pa.string())
    return col
