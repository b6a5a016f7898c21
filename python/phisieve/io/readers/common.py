"""What every reader shares: the reasons, :class:`Rejection`, the options, the stream,
and opening, bytes-read and error helpers."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pyarrow as pa

from ...errors import InputError

FORMATS = ("mimic", "physionet", "jsonl", "parquet", "txt")
"""The input formats :func:`read_documents` understands (plus ``"auto"``)."""

MISSING_PATIENT = "missing patient id"
EMPTY_TEXT = "empty text"
UNDECODABLE = "undecodable bytes"
NOT_UTF8 = "not utf-8 (see --encoding)"
WRONG_COLUMNS = "wrong column count"
UNCLOSED_QUOTE = "unclosed quote"
MALFORMED_QUOTING = "malformed quoting"
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
    MALFORMED_QUOTING,
)
"""Every reason a reader gives for rejecting a row."""

_ROLES = ("doc", "patient", "group", "text")
_TABLE_COLUMNS = {"doc": "doc_id", "patient": "patient_id", "group": "group_id", "text": "text"}
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class Rejection:
    """A row a reader could not use.

    Parameters
    ----------
    source
        The file (or, for ``txt``, the folder) the row came from.
    row
        Its 0-based row number in ``source`` (see :mod:`phisieve.io.readers`); -1 when
        unknown.
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


def _is_utf8(encoding: str) -> bool:
    return encoding in ("utf-8", "utf-8-sig")


def _undecodable_reason(encoding: str) -> str:
    """The rejection reason of bytes that ``encoding`` cannot decode."""
    return NOT_UTF8 if _is_utf8(encoding) else UNDECODABLE


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


class _BytesRead:
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
    files: list[Path], position: _BytesRead, read: Callable[[Path], Iterator[_Chunk]]
) -> Iterator[_Chunk]:
    """The chunks of ``read(file)`` for each file in turn."""
    for file in files:
        size = file.stat().st_size
        yield from read(file)
        position.finish(size)


def _arrow_errors(
    make: Callable[[], Iterable[pa.RecordBatch]],
    path: Path,
    what: str,
    block_bytes: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """The batches of ``make()``; pyarrow errors (which may quote input text) become a bare
    :class:`InputError`. ``block_bytes`` is the block size of a CSV reader, named when a
    record is longer than one block."""
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
            if block_bytes is not None and "straddl" in str(exc):  # not shown: may quote input
                why = f"a record longer than {block_bytes >> 20} MiB: an unclosed quote?"
            raise InputError(f"cannot read the {what} file ({why})", path=path) from None
        yield batch


def _column(batch: pa.RecordBatch, name: str | None) -> pa.Array | None:
    return None if name is None else batch.column(name)


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)
