"""phisieve's output contract: every stage writes its output, and reads its inputs, through it.

An output is a **dataset** (a folder of Parquet files), a **folder** of other files (a model,
a tokenizer, a report) or a **file** (a key, a word list). The output holds only its data,
so polars, pyarrow, duckdb and Hugging Face ``datasets`` read a dataset by path and count
exactly its rows, and ``from_pretrained`` reads a model folder. Everything else lives in a
sibling folder named after it with ``.meta`` (``enc/`` → ``enc.meta/``):

- ``manifest.json``, the completion marker, written last: the stage, its statistics, every
  data file with its size and SHA-256 (and rows), the content ``fingerprint`` those make, the
  inputs' identity (their path and fingerprint), the options that decide the output and the
  settings that do not, the phisieve version;
- ``rejected/``, a Parquet dataset of the rows the stage could not process (source, row,
  column, reason; never their text);
- the stage's side files (``blacklist.txt`` and ``stats.json`` of the index, ``metrics.jsonl``
  of training).

Writing is atomic: a writer (:class:`DatasetWriter`, :class:`FolderWriter`,
:class:`FileWriter`) writes the data and the metadata into hidden temporary paths beside the
target (``.enc.tmp-…``, ``.enc.meta.tmp-…``) and, once the marker is written, moves them into
place. A run killed before that point leaves the previous output untouched; one killed while
moving is finished by the next phisieve command that opens the output (its marker is
complete, so the new output is). A reader therefore sees the previous complete output or the
new complete output, never a mix. A ``.meta`` folder whose output was deleted (``rm -rf
OUT``) is a leftover, not an output: the next write replaces it.

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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .._core import __version__
from ..errors import InputError, OutputExistsError
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


ROW_GROUP_ROWS = 16_384
"""Rows per row group of a dataset's part files: the unit readers (a cluster's tasks, the
training loader's shuffle) split a part by."""


def _atomic_write_table(table: pa.Table, path: Path, row_group_rows: int | None = None) -> None:
    _step("write", path)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp, compression="zstd", row_group_size=row_group_rows)
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
# Checking outputs

DATASET, FOLDER, FILE = "dataset", "folder", "file"
"""The kinds of output: a folder of Parquet files, a folder of any files, one file."""

_HASH_BLOCK = 1 << 20


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's content (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_HASH_BLOCK):
            h.update(block)
    return h.hexdigest()


def _data_files(folder: Path) -> dict[str, int]:
    """Every non-hidden file under ``folder`` (relative POSIX path -> size); a file: itself."""
    if folder.is_file():
        return {folder.name: folder.stat().st_size}
    files = {}
    for p in folder.rglob("*"):
        rel = p.relative_to(folder)
        if p.is_file() and not any(part.startswith(".") for part in rel.parts):
            files[rel.as_posix()] = p.stat().st_size
    return files


def _incomplete(path: Path, why: str) -> InputError:
    what = "output file" if path.is_file() else "dataset"
    return InputError(
        f"not a complete phisieve {what}: {why}. Was the stage that writes it interrupted? "
        "Run it again (a folder of Parquet files from elsewhere: `phisieve ingest` it first)",
        path=path,
    )


def check_complete(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of the complete output (of any kind) at ``path``, or an
    :class:`InputError` that says why it is not one.

    The output must have a completion marker (``<path>.meta/manifest.json``) that lists
    exactly the files found in it (a file output: itself), with their sizes. An interrupted
    commit is finished first (:func:`recover`).
    """
    path = Path(path)
    recover(path)
    if not path.exists():
        raise InputError("no such file or folder", path=path)
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
    kind = manifest.get("kind", DATASET)
    if (kind == FILE) != path.is_file():
        raise _incomplete(path, f"the marker describes a {kind}, this is not one")
    found = _data_files(path)
    if missing := sorted(set(expected) - set(found)):
        raise _incomplete(path, f"{len(missing)} data file(s) missing, e.g. {missing[0]}")
    if extra := sorted(set(found) - set(expected)):
        raise _incomplete(path, f"{len(extra)} file(s) the marker does not list, e.g. {extra[0]}")
    if changed := sorted(n for n in expected if expected[n] != found[n]):
        raise _incomplete(path, f"{len(changed)} data file(s) changed size, e.g. {changed[0]}")
    return manifest


def check_dataset(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of the complete dataset (or folder output) at ``path``, or an
    :class:`InputError` that says why it is not one (:func:`check_complete`)."""
    path = Path(path)
    if path.is_file():
        raise InputError("expected a dataset folder", path=path)
    if not path.exists() and not _pending_writes(path):
        raise InputError("no such dataset folder", path=path)
    return check_complete(path)


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The completion marker (manifest) of the complete output at ``path``.

    The stage's own statistics are at the top level, beside ``rows``, ``rejected``,
    ``files``, ``fingerprint``, ``stage``, ``inputs`` and ``options``.
    """
    return check_complete(path)


def output_manifest(
    out: str | os.PathLike[str], kind: str, parts: list[str] | None = None
) -> dict[str, Any] | None:
    """The manifest of the output at ``out`` when there is one (``None`` when nothing is
    there, a lone leftover ``.meta`` included); an :class:`InputError` when it is damaged.
    With ``parts`` (a folder of datasets), every part must be there: the manifests' common
    fields, and every part's under ``outputs``."""
    out = Path(out)
    if parts is None:
        recover(out)
        if not (out.exists() or out.is_symlink()):
            return None
        manifest = check_complete(out)
        if manifest.get("kind", DATASET) != kind:
            raise InputError(f"expected a {kind} output, found a {manifest.get('kind')}", path=out)
        return manifest
    found = {p: output_manifest(out / p, DATASET) for p in parts}
    if any(m is None for m in found.values()):
        return None
    first = next(iter(found.values()))
    assert first is not None
    common = {k: first.get(k) for k in ("stage", "inputs", "phisieve_version")}
    options = {k: v for k, v in (first.get("options") or {}).items() if k != "part"}
    for p, m in found.items():
        assert m is not None
        mine = {k: v for k, v in (m.get("options") or {}).items() if k != "part"}
        if mine != options or any(m.get(k) != v for k, v in common.items()):
            raise InputError("the parts were written by different runs", path=out / p)
    return {**common, "options": options, "outputs": found}


def fingerprint(manifest: dict[str, Any]) -> str:
    """The content fingerprint of an output: a SHA-256 over its kind and every data and side
    file's name and SHA-256, logs aside (so the same content gives the same fingerprint,
    whenever and wherever it was written). Manifests from before files were hashed fall back to the
    marker's own digest."""
    if "fingerprint" in manifest:
        return str(manifest["fingerprint"])
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


def _fingerprint_of(kind: str, files: dict[str, Any], sides: dict[str, Any]) -> str:
    content = {
        "kind": kind,
        "files": {name: f["sha256"] for name, f in sorted(files.items())},
        "side_files": {n: f["sha256"] for n, f in sorted(sides.items()) if not f.get("log")},
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def dataset_identity(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What an output records about a dataset input: its path and content fingerprint (a
    dataset folder, checked), or its path, size and SHA-256 (a single Parquet file)."""
    path = Path(path)
    if path.is_dir():
        manifest = check_dataset(path)
        if manifest.get("kind", DATASET) != DATASET:
            raise InputError(f"expected a dataset, found a {manifest.get('kind')}", path=path)
        return {"path": str(path.absolute()), "fingerprint": fingerprint(manifest)}
    if not path.exists():
        raise InputError("no such file or folder", path=path)
    return _file_identity(path)


def _file_identity(path: Path) -> dict[str, Any]:
    return {
        "path": str(path.absolute()),
        "bytes": path.stat().st_size,
        "sha256": file_sha256(path),
    }


_KEY_ID = b"phisieve key id\x00"


def key_digest(content: bytes) -> str:
    """A digest that tells keys apart without being the plain hash of one (domain-separated
    SHA-256, truncated to 128 bits)."""
    return hashlib.sha256(_KEY_ID + content).hexdigest()[:32]


def path_identity(path: str | os.PathLike[str], *, secret: bool = False) -> dict[str, Any]:
    """What an output records about a file or folder input (a tokenizer, a model, a word
    list, a key): its path and fingerprint. An output phisieve wrote is checked through its
    marker; a folder from elsewhere is fingerprinted by its files' names, sizes and
    modification times, a file by its SHA-256. A key file (``secret``) gets a keyed digest
    of its content, never the content or its plain hash."""
    path = Path(path)
    if not path.exists():
        raise InputError("no such file or folder", path=path)
    if (meta_dir(path) / MANIFEST).exists() or _pending_writes(path):
        manifest = check_complete(path)
        return {"path": str(path.absolute()), "fingerprint": fingerprint(manifest)}
    if secret:
        return {"path": str(path.absolute()), "key_id": key_digest(path.read_bytes())}
    if path.is_file():
        return _file_identity(path)
    listing = sorted(
        (p.relative_to(path).as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
        for p in path.rglob("*")
        if p.is_file()
    )
    digest = hashlib.sha256(json.dumps(listing).encode()).hexdigest()
    return {"path": str(path.absolute()), "files": len(listing), "listing_sha256": digest}


def source_identity(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The identity of raw input (a file, or a folder of files, from outside phisieve): its
    path, number of files and bytes, and a digest of their names, sizes and modification
    times."""
    path = Path(path)
    if not path.exists():
        raise InputError("no such file or folder", path=path)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    listing = [
        (p.name if p == path else p.relative_to(path).as_posix(), st.st_size, st.st_mtime_ns)
        for p in files
        for st in [p.stat()]
    ]
    return {
        "path": str(path.absolute()),
        "files": len(files),
        "bytes": sum(size for _, size, _ in listing),
        "listing_sha256": hashlib.sha256(json.dumps(listing).encode()).hexdigest(),
    }


def check_output(
    out: str | os.PathLike[str],
    overwrite: bool = False,
    inputs: dict[str, Any] | None = None,
    kind: str = DATASET,
) -> Path:
    """Check that a stage may write its output at ``out``, before its work starts.

    A ``.meta`` folder without its output (the output was deleted) is a leftover, not an
    output: it does not make ``out`` exist (a commit in flight is finished first, by
    :func:`recover`).

    Raises
    ------
    OutputExistsError
        When ``out`` exists and ``overwrite`` is False.
    InputError
        When ``out`` is one of the inputs or lies inside one, contains one, or is named like
        a ``.meta`` folder; or exists and is not what a ``kind`` output is.
    """
    out = Path(out)
    if out.name.endswith(META_SUFFIX) or not out.name or out.name in (".", ".."):
        raise InputError(f"an output needs a plain name (not ending in {META_SUFFIX})", path=out)
    recover(out)
    dst = out.resolve()
    for ident in _identities(inputs or {}):
        if "path" in ident:
            src = Path(ident["path"]).resolve()
            if dst == src or src in dst.parents or dst in src.parents:
                raise InputError("the output must not be, contain or lie in an input", path=out)
    if not overwrite and (out.exists() or out.is_symlink()):
        raise OutputExistsError(out)
    want_dir = kind != FILE
    for path, is_dir in ((out, want_dir), (meta_dir(out), True)):
        if path.is_symlink() or (path.exists() and path.is_dir() != is_dir):
            what = "folder" if is_dir else "file"
            raise InputError(f"the output exists and is not a plain {what}", path=path)
    return out


def _identities(inputs: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for ident in inputs.values():
        if isinstance(ident, list):
            yield from (i for i in ident if isinstance(i, dict))
        elif isinstance(ident, dict):
            yield ident


# --------------------------------------------------------------------------------------------
# Writing


@dataclass
class OutputWriter:
    """Write an output atomically: nothing appears at ``out`` until :meth:`close`, which
    writes the completion marker last and moves the new output into place; an exception (or
    :meth:`abort`) discards it and leaves the previous output as it was.

    Subclasses decide what the output holds (:class:`DatasetWriter`: Parquet parts;
    :class:`FolderWriter`: any files, in :attr:`target`; :class:`FileWriter`: one file).

    Parameters
    ----------
    out
        The output path (its metadata goes to ``out.meta``, :func:`meta_dir`).
    stage
        The stage's name, recorded in the marker.
    inputs
        The inputs' identities, recorded in the marker.
    options
        The options that decide the output, recorded in the marker (compared on resume).
    settings
        Options that never change the output (threads, budgets), recorded apart.
    overwrite
        Replace an existing output (atomically). Without it an existing ``out`` is refused.
    """

    out: Path
    stage: str = "dataset"
    inputs: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    overwrite: bool = False
    secret: bool = False
    """The output holds a key: the manifest records keyed digests of its files, never their
    plain SHA-256."""
    kind: str = field(default=DATASET, init=False)
    rows_rejected: int = field(default=0, init=False)
    _rejected: list[pa.RecordBatch] = field(default_factory=list, init=False)
    _sides: dict[str, dict[str, Any]] = field(default_factory=dict, init=False)
    _closed: bool = field(default=False, init=False)
    _committing: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.out = check_output(self.out, self.overwrite, self.inputs, self.kind)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = _Pending(self.out, f"{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        # Liveness: the lock on .OUT.live-T is held until this writer is done, so no other
        # process takes this write for a dead one (PIDs are no proof across containers).
        self._live = contextlib.ExitStack()
        if not self._live.enter_context(_locked(self._tmp.live)):  # pragma: no cover
            raise RuntimeError("a fresh write token is already locked")
        _step("create", self._tmp.data)
        if self.kind != FILE:
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
        self._sides[name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    def log_path(self, name: str) -> Path:
        """A log the stage appends to as it works (a training run's metrics): committed with
        the output as a side file, but not part of its content fingerprint (it records how
        the output was made, timings included, not what it holds)."""
        if name in (MANIFEST, REJECTED_DIR) or Path(name).name != name or name.startswith("."):
            raise ValueError(f"not a usable side file name: {name!r}")
        self._sides[name] = {"log": True}
        return self._tmp.meta / name

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

    def _files(self) -> dict[str, dict[str, Any]]:
        """Every data file written: its size and SHA-256 (and rows, for Parquet parts)."""
        data = self._tmp.data
        out = {}
        for name, size in sorted(_data_files(data).items()):
            path = data if data.is_file() else data / name
            digest = key_digest(path.read_bytes()) if self.secret else file_sha256(path)
            out[self.out.name if data.is_file() else name] = {"bytes": size, "sha256": digest}
        return out

    def _extra(self) -> dict[str, Any]:
        """Fields of the manifest that depend on the kind of output."""
        return {}

    def close(self, **stats: Any) -> dict[str, Any]:
        """Write the rejected rows and the marker; move the output into place.

        Returns the manifest (the marker's content): the stage's ``stats`` beside
        ``files``, ``fingerprint``, ``stage``, ``inputs``, ``options``...
        """
        if self._closed:
            raise RuntimeError("this writer is already closed")
        if self.kind == FILE and not self._tmp.data.is_file():
            raise RuntimeError("the stage did not write its output file")
        extra = self._extra()
        if self._rejected:
            rej = self._tmp.meta / REJECTED_DIR
            rej.mkdir()
            _atomic_write_table(
                pa.Table.from_batches(self._rejected, schema=REJECTED), rej / "part-00000.parquet"
            )
        for name, side in self._sides.items():
            if "sha256" not in side:  # a log the stage wrote itself: hash it now
                path = self._tmp.meta / name
                if not path.is_file():
                    raise RuntimeError(f"the side file {name} was never written")
                side.update(bytes=path.stat().st_size, sha256=file_sha256(path))
        files = self._files()
        for name, f in extra.pop("_rows", {}).items():
            files[name]["rows"] = f
        manifest = {
            **stats,
            **extra,
            "marker": MARKER_VERSION,
            "kind": self.kind,
            "stage": self.stage,
            "rejected": self.rows_rejected,
            "files": files,
            "side_files": dict(sorted(self._sides.items())),
            "fingerprint": _fingerprint_of(self.kind, files, self._sides),
            "inputs": self.inputs,
            "options": self.options,
            "settings": self.settings,
            "phisieve_version": __version__,
            "write_id": self._tmp.token,
        }
        text = json.dumps(manifest, indent=2, sort_keys=True, default=str)
        if self._tmp.data.is_dir():
            _fsync_dir(self._tmp.data)
        else:
            _fsync(self._tmp.data)
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

    def __enter__(self) -> OutputWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            if not self._closed:
                self.close()
        else:
            self.abort()


@dataclass
class FolderWriter(OutputWriter):
    """An output folder of any files (a model, a tokenizer, a report): the stage fills
    :attr:`target`, a hidden folder beside ``out`` that becomes ``out`` on :meth:`close`."""

    kind: str = field(default=FOLDER, init=False)

    @property
    def target(self) -> Path:
        """The folder to fill."""
        return self._tmp.data


@dataclass
class FileWriter(OutputWriter):
    """An output of one file: the stage writes :attr:`target`, a hidden file beside ``out``
    that becomes ``out`` on :meth:`close`."""

    kind: str = field(default=FILE, init=False)

    @property
    def target(self) -> Path:
        """The file to write."""
        return self._tmp.data


def row_sizes(batch: pa.RecordBatch) -> np.ndarray:
    """Each row's size in bytes, as far as part files are concerned: the bytes of its
    strings and binaries, 4 per element of its lists, and 8 per other value. A function of
    the row alone (a batch's ``nbytes`` depends on how the rows were batched)."""
    sizes = np.zeros(batch.num_rows, dtype=np.int64)
    for col in batch.columns:
        t = col.type
        if pa.types.is_dictionary(t):
            col, t = col.dictionary_decode(), t.value_type
        if (
            pa.types.is_string(t)
            or pa.types.is_large_string(t)
            or pa.types.is_binary(t)
            or (pa.types.is_large_binary(t))
        ):
            lengths = pc.binary_length(col)
            sizes += lengths.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            lengths = pc.list_value_length(col).fill_null(0)
            sizes += 4 * lengths.to_numpy(zero_copy_only=False).astype(np.int64)
        else:
            sizes += 8
    return sizes


@dataclass
class DatasetWriter(OutputWriter):
    """Write record batches as a dataset, atomically, one part file per ``rows_per_part`` rows.

    Parameters
    ----------
    out, stage, inputs, options, settings, overwrite
        As :class:`OutputWriter`.
    schema
        The schema every written batch is cast to.
    rows_per_part, bytes_per_part
        A part file is written when this many rows or bytes are waiting.
    row_group_rows
        Rows per row group of a part file (:data:`ROW_GROUP_ROWS`).
    """

    schema: pa.Schema = field(default_factory=pa.schema)
    rows_per_part: int = 100_000
    bytes_per_part: int = 64 * 2**20
    row_group_rows: int = ROW_GROUP_ROWS
    rows_written: int = field(default=0, init=False)
    _pending: list[pa.RecordBatch] = field(default_factory=list, init=False)
    _pending_rows: int = field(default=0, init=False)
    _pending_bytes: int = field(default=0, init=False)
    _parts: dict[str, int] = field(default_factory=dict, init=False)

    def __init__(
        self,
        out: str | os.PathLike[str],
        schema: pa.Schema,
        stage: str = "dataset",
        inputs: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None,
        overwrite: bool = False,
        rows_per_part: int = 100_000,
        bytes_per_part: int = 64 * 2**20,
        settings: dict[str, Any] | None = None,
        row_group_rows: int = ROW_GROUP_ROWS,
    ) -> None:
        self.schema = schema
        self.rows_per_part = rows_per_part
        self.bytes_per_part = bytes_per_part
        self.row_group_rows = row_group_rows
        self.rows_written = 0
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0
        self._parts = {}
        OutputWriter.__init__(
            self,
            Path(out),
            stage,
            dict(inputs or {}),
            dict(options or {}),
            dict(settings or {}),
            overwrite,
        )

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Queue rows; a part file is written whenever ``rows_per_part`` rows (or
        ``bytes_per_part`` bytes) are waiting.

        Where a part ends is a function of the rows alone, never of how they were batched:
        a part closes after exactly ``rows_per_part`` rows, or after the row at which the
        rows' sizes (:func:`row_sizes`) first reach ``bytes_per_part``. The same rows in the
        same order make the same part files, whatever batches they came in.
        """
        if isinstance(batch, pa.Table):
            for b in batch.to_batches():
                self.write(b)
            return
        if batch.num_rows == 0:
            return
        batch = batch.cast(self.schema) if batch.schema != self.schema else batch
        sizes = np.cumsum(row_sizes(batch))
        start = 0
        while start < batch.num_rows:
            room = self.rows_per_part - self._pending_rows
            base = int(sizes[start - 1]) if start else 0
            # The first row at which the part's bytes reach the budget closes it.
            full = int(np.searchsorted(sizes, base + self.bytes_per_part - self._pending_bytes))
            end = min(batch.num_rows, start + room, max(full + 1, start + 1))
            piece = batch.slice(start, end - start)
            self._pending.append(piece)
            self._pending_rows += piece.num_rows
            self._pending_bytes += int(sizes[end - 1]) - base
            if self._pending_rows >= self.rows_per_part or self._pending_bytes >= (
                self.bytes_per_part
            ):
                self._flush()
            start = end

    def _write_part(self, table: pa.Table) -> None:
        name = f"part-{len(self._parts):05d}.parquet"
        _atomic_write_table(table, self._tmp.data / name, self.row_group_rows)
        self._parts[name] = table.num_rows
        self.rows_written += table.num_rows

    def _flush(self) -> None:
        if not self._pending:
            return
        # One chunk per column: Parquet's pages are cut as the chunks arrive, so a part
        # written from other batches would get other bytes.
        self._write_part(pa.Table.from_batches(self._pending, schema=self.schema).combine_chunks())
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0

    def _extra(self) -> dict[str, Any]:
        self._flush()
        if not self._parts:
            # An empty dataset still has a part file, so its schema is known to readers.
            self._write_part(self.schema.empty_table())
        return {"rows": self.rows_written, "parts": len(self._parts), "_rows": self._parts}

    def __enter__(self) -> DatasetWriter:
        return self


def dataset_files(path: str | os.PathLike[str]) -> list[str]:
    """The data files of the complete dataset at ``path`` (checked, :func:`check_dataset`),
    in order. A path to a single ``.parquet`` file is returned as is."""
    path = Path(path)
    if path.is_file():
        return [str(path)]
    return [str(path / name) for name in sorted(check_dataset(path)["files"])]


def read_rejected(path: str | os.PathLike[str]) -> pa.Table:
    """The rows a stage rejected while writing the dataset at ``path`` (empty when none)."""
    check_dataset(path)
    folder = meta_dir(path) / REJECTED_DIR
    files = sorted(folder.glob("*.parquet")) if folder.exists() else []
    if not files:
        return REJECTED.empty_table()
    return pa.concat_tables([pq.read_table(f) for f in files])


def write_json(
    out: str | os.PathLike[str],
    data: Any,
    *,
    stage: str,
    inputs: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write ``data`` as a JSON file output (atomically, with its marker in ``out.meta/``);
    returns the manifest."""
    with FileWriter(
        Path(out), stage=stage, inputs=inputs or {}, options=options or {}, overwrite=overwrite
    ) as writer:
        text = json.dumps(data, indent=1, sort_keys=True, default=str) + "\n"
        writer.target.write_text(text, encoding="utf-8")
        return writer.close()
