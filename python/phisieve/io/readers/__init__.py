"""Readers that turn clinical note collections into phisieve's ``documents`` dataset.

Every reader streams its input in record batches, so memory stays bounded by the batch size
however large the input is. Rows that cannot be used are not errors: they are returned (and
written by the ``ingest`` stage, :func:`phisieve.api.ingest`) as :class:`Rejection` records
that say where the row was and why it was dropped, never what it contained. Error messages
name the file, row and column but never quote a value; a header row is quoted only when it
looks like column names, since a file without one has note text where the names should be.

Row numbers are 0-based: the data record's index within its file for ``mimic`` (the header and
blank lines are not records), the line's index for ``jsonl``, the record's index for
``physionet``, the row's index within its file for ``parquet`` and the file's index in sorted
path order for ``txt``.

Hostile input is met as follows.

* Ids (patient, document, group) are strings or integers. A Parquet id column of any other
  type, floats included (``1e16`` and ``1e16 + 1`` are the same float, so two patients would
  merge), is refused with an :class:`~phisieve.errors.InputError` naming the file and column,
  in a single file as in any file of a folder; string and integer files may be mixed in a
  folder (integers become their decimal strings). A JSON id that is not a string or an integer
  (``3.0`` included) rejects its row as ``wrong type``.
* A ``mimic`` patient column named ``SUBJECT_ID`` must hold integers; other values reject their
  row. NUL characters in an id or the text reject the row in every format.
* Damaged CSV quoting (a quote left open, or one that breaks RFC 4180) is damage, never read
  as text, in every CSV layout (four columns ``ROW_ID,SUBJECT_ID,HADM_ID,TEXT``, the full
  NOTEEVENTS header or any other): see :mod:`phisieve.io.readers.mimic` and
  :mod:`phisieve.io.readers.csv_repair`.
* Bytes are decoded with ``encoding`` (UTF-8 by default, any plain ASCII-compatible Python
  charset; codecs that rewrite text, such as idna or utf-7, are refused);
  a value that does not decode rejects its row (under UTF-8 the reason names ``--encoding``).

Layout: :mod:`.common` (reasons, :class:`Rejection`, options, :class:`DocumentStream`, file
and error helpers), :mod:`.rows` (the row checks every reader ends with), :mod:`.sniff`
(format and encoding checks, format detection, input files, column resolution), one module
per format (:mod:`.mimic` with :mod:`.csv_repair`, :mod:`.physionet`, :mod:`.jsonl`,
:mod:`.parquet`, :mod:`.txt`) and :mod:`.read` (:func:`read_documents`). Modules import only
siblings below them, never this package's ``__init__``.
"""

from __future__ import annotations

from .common import (
    EMPTY_TEXT,
    FORMATS,
    INVALID_JSON,
    MALFORMED,
    MISSING_PATIENT,
    NO_PATIENT,
    NOT_INTEGER,
    NOT_UTF8,
    NUL_CHARACTER,
    REASONS,
    UNCLOSED_QUOTE,
    UNDECODABLE,
    UNREADABLE,
    WRONG_COLUMNS,
    WRONG_TYPE,
    DocumentStream,
    Rejection,
)
from .read import read_documents

__all__ = [
    "EMPTY_TEXT",
    "FORMATS",
    "INVALID_JSON",
    "MALFORMED",
    "MISSING_PATIENT",
    "NOT_INTEGER",
    "NOT_UTF8",
    "NO_PATIENT",
    "NUL_CHARACTER",
    "REASONS",
    "UNCLOSED_QUOTE",
    "UNDECODABLE",
    "UNREADABLE",
    "WRONG_COLUMNS",
    "WRONG_TYPE",
    "DocumentStream",
    "Rejection",
    "read_documents",
]
