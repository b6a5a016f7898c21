"""Reading and writing phisieve's Parquet datasets (a folder of part files).

Every stage writes through :class:`DatasetWriter`: part files are written under a temporary
name and renamed when complete, so a reader never sees half a file, and rejected rows go to a
``_rejected`` dataset beside the output with a reason. A ``_SUCCESS.json`` manifest records the
counts when the stage finishes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from .errors import InputError
from .schema import REJECTED

MANIFEST = "_SUCCESS.json"
REJECTED_DIR = "_rejected"


def _atomic_write_table(table: pa.Table, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


@dataclass
class DatasetWriter:
    """Write record batches as a Parquet dataset, one part file per ``rows_per_part`` rows.

    Parameters
    ----------
    out
        The output folder. Existing ``part-*.parquet`` files in it are removed first.
    schema
        The schema every written batch is cast to.
    rows_per_part, bytes_per_part
        A part file is written when this many rows or bytes are waiting.
    """

    out: Path
    schema: pa.Schema
    rows_per_part: int = 100_000
    bytes_per_part: int = 64 * 2**20
    rows_written: int = 0
    rows_rejected: int = 0
    _pending: list[pa.RecordBatch] = field(default_factory=list)
    _pending_rows: int = 0
    _pending_bytes: int = 0
    _parts: int = 0
    _rejected: list[pa.RecordBatch] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        self.out.mkdir(parents=True, exist_ok=True)
        for old in self.out.glob("part-*.parquet"):
            old.unlink()
        old_manifest = self.out / MANIFEST
        if old_manifest.exists():
            old_manifest.unlink()
        rejected = self.out / REJECTED_DIR
        if rejected.exists():
            for old in rejected.glob("*.parquet"):
                old.unlink()

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Queue rows; a part file is written whenever ``rows_per_part`` rows are waiting."""
        if isinstance(batch, pa.Table):
            for b in batch.to_batches():
                self.write(b)
            return
        if batch.num_rows == 0:
            return
        self._pending.append(batch.cast(self.schema) if batch.schema != self.schema else batch)
        self._pending_rows += batch.num_rows
        self._pending_bytes += batch.nbytes
        if self._pending_rows >= self.rows_per_part or self._pending_bytes >= self.bytes_per_part:
            self._flush()

    def reject(
        self, source: str, rows: Iterable[int], reason: str, column: str | None = None
    ) -> None:
        """Record rejected rows (by their row number in ``source``) with a reason."""
        rows = list(rows)
        if not rows:
            return
        self._rejected.append(
            pa.record_batch(
                [
                    pa.array([source] * len(rows), pa.string()),
                    pa.array(rows, pa.int64()),
                    pa.array([column] * len(rows), pa.string()),
                    pa.array([reason] * len(rows), pa.string()),
                ],
                schema=REJECTED,
            )
        )
        self.rows_rejected += len(rows)

    def _flush(self) -> None:
        if not self._pending:
            return
        table = pa.Table.from_batches(self._pending, schema=self.schema)
        _atomic_write_table(table, self.out / f"part-{self._parts:05d}.parquet")
        self._parts += 1
        self.rows_written += table.num_rows
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0

    def close(self, **stats: Any) -> dict[str, Any]:
        """Write what is left, the rejected rows and the manifest; return the manifest."""
        self._flush()
        if self._parts == 0:
            # An empty dataset still has a part file, so its schema is known to readers.
            _atomic_write_table(self.schema.empty_table(), self.out / "part-00000.parquet")
            self._parts = 1
        if self._rejected:
            rej_dir = self.out / REJECTED_DIR
            rej_dir.mkdir(exist_ok=True)
            _atomic_write_table(
                pa.Table.from_batches(self._rejected, schema=REJECTED),
                rej_dir / "part-00000.parquet",
            )
        manifest = {
            "rows": self.rows_written,
            "rejected": self.rows_rejected,
            "parts": self._parts,
            **stats,
        }
        tmp = self.out / f".{MANIFEST}.tmp"
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True))
        os.replace(tmp, self.out / MANIFEST)
        return manifest

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()


def parquet_files(path: Path) -> list[str]:
    """The Parquet files of a dataset folder (skipping ``_rejected`` and hidden files), sorted.

    A path to a single ``.parquet`` file is returned as is.
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
        src = _dataset_source(
            pads.dataset(parquet_files(path), format="parquet"), batch_size, str(path)
        )
        src.path = path
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


def _dataset_source(ds: pads.Dataset, batch_size: int, name: str) -> BatchSource:
    def ds_batches(columns: list[str] | None) -> Iterator[pa.RecordBatch]:
        yield from ds.to_batches(columns=columns, batch_size=batch_size)

    return BatchSource(ds_batches, ds.schema, True, name, ds.count_rows())


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
    table = pa.concat_tables([pq.read_table(f) for f in parquet_files(Path(path))])
    require_columns(table.schema, ["doc_id", "spans"], str(path))
    return table.select(["doc_id", "spans"])


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The completion marker (manifest) of a dataset written by a phisieve stage."""
    f = Path(path) / MANIFEST
    if not f.exists():
        raise InputError("no completion marker for this dataset", path=path)
    return json.loads(f.read_text())


def read_rejected(path: str | os.PathLike[str]) -> pa.Table:
    """The rows a stage rejected while writing the dataset at ``path`` (empty when none)."""
    folder = Path(path) / REJECTED_DIR
    files = sorted(folder.glob("*.parquet")) if folder.exists() else []
    if not files:
        return REJECTED.empty_table()
    return pa.concat_tables([pq.read_table(f) for f in files])
