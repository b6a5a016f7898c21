"""phisieve's dataset contract: every stage writes and reads Parquet datasets through it.

A dataset is a folder that holds **only** its data ``.parquet`` files, so polars, pyarrow,
duckdb and Hugging Face ``datasets`` read it by path and count exactly its rows. Everything
else lives in a sibling folder named after it with ``.meta`` (``enc/`` → ``enc.meta/``):

- ``manifest.json``, the completion marker, written last: the stage, the row counts, every
  data file with its rows and size, the inputs' identity (path and the SHA-256 of their own
  marker) and the options;
- ``rejected/``, a Parquet dataset of the rows the stage could not process (source, row,
  column, reason; never their text);
- the stage's side files (``blacklist.txt`` and ``stats.json`` of the index).

Writing is atomic: :class:`DatasetWriter` writes the data and the metadata into hidden
temporary folders beside the target (``.enc.tmp-…``, ``.enc.meta.tmp-…``) and, once the marker
is written, moves them into place. A run killed before that point leaves the previous output
untouched; one killed while moving is finished by the next phisieve command that opens the
output (its marker is complete, so the new output is). A reader therefore sees the previous
complete output or the new complete output, never a mix.

Reading is checked: :func:`check_dataset` refuses a folder without a valid marker, or whose
files differ from the ones the marker lists, naming the folder and what is wrong.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from .errors import InputError, OutputExistsError
from .schema import REJECTED

META_SUFFIX = ".meta"
MANIFEST = "manifest.json"
REJECTED_DIR = "rejected"
MARKER_VERSION = "phisieve-dataset/1"
"""The ``marker`` every completion marker carries (bumped if the contract changes)."""

_HOST = re.sub(r"[^A-Za-z0-9]", "", socket.gethostname()) or "host"


def meta_dir(path: str | os.PathLike[str]) -> Path:
    """The folder beside the dataset ``path`` that holds its marker, rejected rows and side
    files (``path`` + ``.meta``)."""
    path = Path(path)
    return path.with_name(path.name + META_SUFFIX)


def side_file(path: str | os.PathLike[str], name: str) -> Path:
    """The side file ``name`` of the dataset at ``path`` (e.g. the index's ``blacklist.txt``)."""
    return meta_dir(path) / name


def _step(event: str, path: Path) -> None:
    """Called before every file-system step of a write (a seam for fault-injection tests)."""


def _fsync(path: Path) -> None:
    with contextlib.suppress(OSError), open(path, "rb") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    if os.name != "posix":  # pragma: no cover - directories cannot be opened on Windows
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write_table(table: pa.Table, path: Path) -> None:
    _step("write", path)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    _fsync(tmp)
    os.replace(tmp, path)


def _atomic_write_bytes(data: bytes, path: Path) -> None:
    _step("write", path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# --------------------------------------------------------------------------------------------
# Temporary folders, commit and recovery


@contextlib.contextmanager
def _locked(path: Path, blocking: bool = True) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on ``path`` (created if needed); yields False when
    ``blocking`` is False and another process holds it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield True  # cannot lock here (read-only folder): nothing can be recovered either
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


LOCK_FILE = ".phisieve.lock"
"""The lock file, one per folder of outputs: commits and recoveries there take turns."""


def _lock_path(out: Path) -> Path:
    """The lock every commit and recovery of ``out`` holds (one at a time per folder)."""
    return out.with_name(LOCK_FILE)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


@dataclass(frozen=True)
class _Pending:
    """The hidden files and folders of one write of ``out`` (token = host-pid-random):

    - ``.OUT.live-T``: locked by the writing process for its whole life (liveness);
    - ``.OUT.tmp-T`` and ``.OUT.meta.tmp-T``: the new data and metadata;
    - ``.OUT.commit-T``: the commit journal, created before the first move;
    - ``.OUT.old-T`` and ``.OUT.meta.old-T``: the previous output, while it is replaced.
    """

    out: Path
    token: str

    def _sibling(self, infix: str) -> Path:
        return self.out.with_name(f".{self.out.name}{infix}-{self.token}")

    @property
    def live(self) -> Path:
        return self._sibling(".live")

    @property
    def journal(self) -> Path:
        return self._sibling(".commit")

    @property
    def data(self) -> Path:
        return self._sibling(".tmp")

    @property
    def meta(self) -> Path:
        return self._sibling(f"{META_SUFFIX}.tmp")

    @property
    def old_data(self) -> Path:
        return self._sibling(".old")

    @property
    def old_meta(self) -> Path:
        return self._sibling(f"{META_SUFFIX}.old")

    def owner_alive(self) -> bool:
        """Whether the writing process still holds its liveness lock (on any machine that
        shares the file system's locks, in any PID namespace)."""
        if not self.live.exists():
            return False
        with _locked(self.live, blocking=False) as free:
            return not free

    def commit(self) -> None:
        """Move the complete temporary folders into place (also finishes a killed commit).

        Called with the output's lock held. The journal is written first: from then on the
        write is finished by :func:`recover` if this process dies. Order: retire the old
        marker (the old output is no longer accepted), then the old data; move the new data
        in, then the new metadata (the marker: accepted again); remove the old output, then
        the journal. Every move is a rename in the same folder.
        """
        if not self.journal.exists():
            _step("journal", self.journal)
            _atomic_write_bytes(b"", self.journal)
            _fsync_dir(self.out.parent)
        meta = meta_dir(self.out)
        if self.meta.exists() and (meta.exists() or meta.is_symlink()):
            _step("retire-meta", meta)
            os.replace(meta, self.old_meta)
        if self.data.exists():
            if self.out.exists() or self.out.is_symlink():
                _step("retire-data", self.out)
                os.replace(self.out, self.old_data)
            _step("place-data", self.out)
            os.replace(self.data, self.out)
        if self.meta.exists():
            _step("place-meta", meta)
            os.replace(self.meta, meta)
        _fsync_dir(self.out.parent)
        self.discard_old()
        self.journal.unlink(missing_ok=True)

    def discard_old(self) -> None:
        for old in (self.old_data, self.old_meta):
            if old.exists() or old.is_symlink():
                _step("remove-old", old)
                _remove(old)

    def discard(self) -> None:
        """Remove an unfinished write (its commit never started)."""
        for tmp in (self.data, self.meta):
            _remove(tmp)
        self.discard_old()


_INFIXES = (".live", ".commit", ".tmp", f"{META_SUFFIX}.tmp", ".old", f"{META_SUFFIX}.old")


def _pending_writes(out: Path) -> list[_Pending]:
    prefixes = [f".{out.name}{infix}-" for infix in _INFIXES]
    tokens = set()
    if out.parent.is_dir():
        for entry in out.parent.iterdir():
            for prefix in prefixes:
                token = entry.name[len(prefix) :]
                if entry.name.startswith(prefix) and re.fullmatch(r"\w+-\d+-[0-9a-f]{8}", token):
                    tokens.add(token)
    return [_Pending(out, t) for t in sorted(tokens)]


def recover(out: str | os.PathLike[str]) -> None:
    """Finish or clean up the writes of ``out`` whose process died.

    A write whose commit had started (its journal exists: the output was complete, only
    its moves into place were cut short) is finished; any other is discarded, leaving the
    previous output. Writes of live processes are left alone. Runs under the output's lock,
    so concurrent readers and writers recover once, in turn.
    """
    out = Path(out)
    if not out.parent.is_dir() or not _pending_writes(out):
        return
    with _locked(_lock_path(out)):
        for pending in _pending_writes(out):
            if pending.owner_alive():
                continue
            try:
                if pending.journal.exists():
                    pending.commit()
                else:
                    pending.discard()
                pending.live.unlink(missing_ok=True)
            except PermissionError:  # a reader without write access: leave it as it is
                return


# --------------------------------------------------------------------------------------------
# Checking datasets and outputs


def _data_files(folder: Path) -> dict[str, int]:
    """Every non-hidden file under ``folder`` (relative POSIX path -> size)."""
    files = {}
    for p in folder.rglob("*"):
        rel = p.relative_to(folder)
        if p.is_file() and not any(part.startswith(".") for part in rel.parts):
            files[rel.as_posix()] = p.stat().st_size
    return files


def _incomplete(path: Path, why: str) -> InputError:
    return InputError(
        f"not a complete phisieve dataset: {why}. Was the stage that writes it interrupted? "
        "Run it again (a folder of Parquet files from elsewhere: `phisieve ingest` it first)",
        path=path,
    )


def check_dataset(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of the complete dataset at ``path``, or an :class:`InputError` that says
    why it is not one.

    The folder must have a completion marker (``<path>.meta/manifest.json``) that lists
    exactly the Parquet files found in it, with their sizes. An interrupted commit is
    finished first (:func:`recover`).
    """
    path = Path(path)
    recover(path)
    if not path.exists():
        raise InputError("no such dataset folder", path=path)
    if not path.is_dir():
        raise InputError("expected a dataset folder", path=path)
    marker = meta_dir(path) / MANIFEST
    if not marker.exists():
        raise _incomplete(path, f"no completion marker ({marker.name} in {marker.parent.name}/)")
    try:
        manifest = json.loads(marker.read_text(encoding="utf-8"))
        expected = {name: int(f["bytes"]) for name, f in manifest["files"].items()}
        if manifest.get("marker") != MARKER_VERSION:
            raise ValueError
    except (ValueError, KeyError, TypeError, AttributeError):
        raise _incomplete(path, "its completion marker is damaged") from None
    found = _data_files(path)
    if missing := sorted(set(expected) - set(found)):
        raise _incomplete(path, f"{len(missing)} data file(s) missing, e.g. {missing[0]}")
    if extra := sorted(set(found) - set(expected)):
        raise _incomplete(path, f"{len(extra)} file(s) the marker does not list, e.g. {extra[0]}")
    if changed := sorted(n for n in expected if expected[n] != found[n]):
        raise _incomplete(path, f"{len(changed)} data file(s) changed size, e.g. {changed[0]}")
    return manifest


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The completion marker (manifest) of the complete dataset at ``path``.

    The stage's own statistics are at the top level, beside ``rows``, ``rejected``,
    ``files``, ``stage``, ``inputs`` and ``options``.
    """
    return check_dataset(path)


def dataset_identity(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What an output records about an input: its path and the SHA-256 of its marker (a
    dataset folder) or its size (a single file)."""
    path = Path(path)
    if path.is_dir():
        check_dataset(path)
        digest = hashlib.sha256((meta_dir(path) / MANIFEST).read_bytes()).hexdigest()
        return {"path": str(path.absolute()), "marker_sha256": digest}
    if not path.exists():
        raise InputError("no such file or folder", path=path)
    return {"path": str(path.absolute()), "bytes": path.stat().st_size}


def source_identity(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The identity of raw input (a file, or a folder of files, from outside phisieve): its
    path, number of files and bytes."""
    path = Path(path)
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return {
        "path": str(path.absolute()),
        "files": len(files),
        "bytes": sum(p.stat().st_size for p in files),
    }


def check_inputs(**inputs: Any) -> dict[str, dict[str, Any]]:
    """Check every input of a stage before its work starts; return their identities.

    Paths must be complete datasets (or single files); ``None`` inputs are skipped and
    in-memory tables are recorded by type.
    """
    ids = {}
    for name, value in inputs.items():
        if value is None:
            continue
        if isinstance(value, (str, os.PathLike)):
            ids[name] = dataset_identity(value)
        else:
            ids[name] = {"kind": type(value).__name__}
    return ids


def check_output(
    out: str | os.PathLike[str],
    overwrite: bool = False,
    inputs: dict[str, dict[str, Any]] | None = None,
) -> Path:
    """Check that a stage may write its dataset at ``out``, before its work starts.

    Raises
    ------
    OutputExistsError
        When ``out`` (or its ``.meta`` folder) exists and ``overwrite`` is False.
    InputError
        When ``out`` is one of the inputs or lies inside one, or is named like a
        ``.meta`` folder.
    """
    out = Path(out)
    if out.name.endswith(META_SUFFIX) or not out.name or out.name in (".", ".."):
        raise InputError(
            f"an output folder needs a plain name (not ending in {META_SUFFIX})", path=out
        )
    recover(out)
    dst = out.resolve()
    for ident in (inputs or {}).values():
        if "path" in ident:
            src = Path(ident["path"]).resolve()
            if dst == src or src in dst.parents or dst in src.parents:
                raise InputError("the output must not be, contain or lie in an input", path=out)
    if not overwrite and (out.exists() or meta_dir(out).exists()):
        raise OutputExistsError(out)
    for path in (out, meta_dir(out)):
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            raise InputError("the output exists and is not a plain folder", path=path)
    return out


# --------------------------------------------------------------------------------------------
# Writing


@dataclass
class DatasetWriter:
    """Write record batches as a dataset, atomically, one part file per ``rows_per_part`` rows.

    Nothing appears at ``out`` until :meth:`close`, which writes the completion marker last
    and moves the new output into place; an exception (or :meth:`abort`) discards it and
    leaves the previous output as it was.

    Parameters
    ----------
    out
        The output folder (its metadata goes to ``out.meta``, :func:`meta_dir`).
    schema
        The schema every written batch is cast to.
    stage
        The stage's name, recorded in the marker.
    inputs
        The inputs' identities (:func:`check_inputs`), recorded in the marker.
    options
        The options that decide the output, recorded in the marker.
    overwrite
        Replace an existing output (atomically). Without it an existing ``out`` is refused.
    rows_per_part, bytes_per_part
        A part file is written when this many rows or bytes are waiting.
    """

    out: Path
    schema: pa.Schema
    stage: str = "dataset"
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    overwrite: bool = False
    rows_per_part: int = 100_000
    bytes_per_part: int = 64 * 2**20
    rows_written: int = 0
    rows_rejected: int = 0
    _pending: list[pa.RecordBatch] = field(default_factory=list)
    _pending_rows: int = 0
    _pending_bytes: int = 0
    _files: dict[str, dict[str, int]] = field(default_factory=dict)
    _rejected: list[pa.RecordBatch] = field(default_factory=list)
    _closed: bool = False
    _committing: bool = False

    def __post_init__(self) -> None:
        self.out = check_output(self.out, self.overwrite, self.inputs)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = _Pending(self.out, f"{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        # Liveness: the lock on .OUT.live-T is held until this writer is done, so no other
        # process takes this write for a dead one (PIDs are no proof across containers).
        self._live = contextlib.ExitStack()
        if not self._live.enter_context(_locked(self._tmp.live)):  # pragma: no cover
            raise RuntimeError("a fresh write token is already locked")
        _step("create", self._tmp.data)
        self._tmp.data.mkdir()
        self._tmp.meta.mkdir()

    @property
    def side_dir(self) -> Path:
        """Where the stage writes its side files before :meth:`close` (they land in
        ``out.meta``)."""
        return self._tmp.meta

    def write_side(self, name: str, content: str | bytes) -> None:
        """A side file of the output (e.g. ``blacklist.txt``), committed with it."""
        if name in (MANIFEST, REJECTED_DIR) or Path(name).name != name or name.startswith("."):
            raise ValueError(f"not a usable side file name: {name!r}")
        data = content.encode("utf-8") if isinstance(content, str) else content
        _atomic_write_bytes(data, self._tmp.meta / name)

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

    def _write_part(self, table: pa.Table) -> None:
        name = f"part-{len(self._files):05d}.parquet"
        path = self._tmp.data / name
        _atomic_write_table(table, path)
        self._files[name] = {"rows": table.num_rows, "bytes": path.stat().st_size}
        self.rows_written += table.num_rows

    def _flush(self) -> None:
        if not self._pending:
            return
        self._write_part(pa.Table.from_batches(self._pending, schema=self.schema))
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0

    def close(self, **stats: Any) -> dict[str, Any]:
        """Write what is left, the rejected rows and the marker; move the output into place.

        Returns the manifest (the marker's content): ``rows``, ``rejected``, ``parts``,
        ``files``, ``stage``, ``inputs``, ``options`` and the stage's ``stats``.
        """
        if self._closed:
            raise RuntimeError("this DatasetWriter is already closed")
        self._flush()
        if not self._files:
            # An empty dataset still has a part file, so its schema is known to readers.
            self._write_part(self.schema.empty_table())
        if self._rejected:
            rej = self._tmp.meta / REJECTED_DIR
            rej.mkdir()
            _atomic_write_table(
                pa.Table.from_batches(self._rejected, schema=REJECTED), rej / "part-00000.parquet"
            )
        manifest = {
            **stats,
            "marker": MARKER_VERSION,
            "stage": self.stage,
            "rows": self.rows_written,
            "rejected": self.rows_rejected,
            "parts": len(self._files),
            "files": self._files,
            "inputs": self.inputs,
            "options": self.options,
            "write_id": self._tmp.token,
        }
        text = json.dumps(manifest, indent=2, sort_keys=True, default=str)
        _fsync_dir(self._tmp.data)
        _atomic_write_bytes(text.encode("utf-8"), self._tmp.meta / MANIFEST)
        _fsync_dir(self._tmp.meta)
        with _locked(_lock_path(self.out)):
            self._committing = True
            try:
                self._tmp.commit()
            except BaseException:
                # Interrupted while moving (Ctrl-C, a signal): the new output is complete, so
                # finish the moves rather than leave neither output in place.
                with contextlib.suppress(Exception):
                    self._tmp.commit()
                raise
            finally:
                self._release()
        return json.loads(text)

    def _release(self) -> None:
        self._closed = True
        self._live.close()
        self._tmp.live.unlink(missing_ok=True)

    def abort(self) -> None:
        """Discard everything written so far; the previous output stays. (Once the commit
        has started, the new output is complete and stays; nothing is discarded.)"""
        if self._closed or self._committing:
            return
        self._tmp.discard()
        self._release()

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            if not self._closed:
                self.close()
        else:
            self.abort()


def write_dataset(
    data: Any,
    out: str | os.PathLike[str],
    *,
    stage: str = "table",
    overwrite: bool = False,
    **stats: Any,
) -> dict[str, Any]:
    """Write an Arrow table (or anything :func:`open_source` reads: a polars frame, a
    stream) as a complete phisieve dataset, e.g. documents prepared outside ``ingest``.

    Returns the manifest; ``stats`` are recorded in it.
    """
    src = open_source(data)
    with DatasetWriter(Path(out), src.schema, stage=stage, overwrite=overwrite) as writer:
        for batch in src.batches(None):
            writer.write(batch)
        return writer.close(**stats)


def dataset_files(path: str | os.PathLike[str]) -> list[str]:
    """The data files of the complete dataset at ``path`` (checked, :func:`check_dataset`),
    in order. A path to a single ``.parquet`` file is returned as is."""
    path = Path(path)
    if path.is_file():
        return [str(path)]
    return [str(path / name) for name in sorted(check_dataset(path)["files"])]


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


def read_rejected(path: str | os.PathLike[str]) -> pa.Table:
    """The rows a stage rejected while writing the dataset at ``path`` (empty when none)."""
    check_dataset(path)
    folder = meta_dir(path) / REJECTED_DIR
    files = sorted(folder.glob("*.parquet")) if folder.exists() else []
    if not files:
        return REJECTED.empty_table()
    return pa.concat_tables([pq.read_table(f) for f in files])
