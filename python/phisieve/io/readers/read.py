"""The public entry point: :func:`read_documents`, dispatching over the format openers."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ...errors import InputError
from .common import DocumentStream, _Options
from .jsonl import _open_jsonl
from .mimic import _open_mimic
from .parquet import _open_parquet
from .physionet import _open_physionet
from .sniff import _check_encoding, _check_format, _detect_format
from .txt import _open_txt


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


_OPENERS: dict[str, Callable[[Path, _Options], DocumentStream]] = {
    "mimic": _open_mimic,
    "physionet": _open_physionet,
    "jsonl": _open_jsonl,
    "parquet": _open_parquet,
    "txt": _open_txt,
}
