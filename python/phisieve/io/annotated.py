"""Annotated notes: PhysioNet deid folders (``id.text`` and ``id-phi.phrase``), read in one
place: the notes as a ``documents`` table and the gold PHI annotations as a ``spans`` table
(the notes alone, for ``ingest``, are :mod:`phisieve.io.readers.physionet`'s)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..errors import InputError
from .readers import read_documents
from .schema import DOCUMENTS, SPANS

__all__ = ["PHYSIONET_LABELS", "read_physionet", "read_physionet_gold"]

PHYSIONET_LABELS = (
    "Age",
    "Date",
    "DateYear",
    "HCPName",
    "Location",
    "Other",
    "PTName",
    "PTNameInitial",
    "Phone",
    "RelativeProxyName",
)
"""The PHI categories of the PhysioNet deid gold standard."""


def read_physionet(folder: str | os.PathLike[str]) -> tuple[pa.Table, pa.Table]:
    """The notes (``doc_id``, ``patient_id``, ``text``...) and gold ``spans`` of a PhysioNet
    deid folder (``id.text``, ``id-phi.phrase``)."""
    folder = Path(folder)
    batches = [b for b, _ in read_documents(folder / "id.text", "physionet")]
    documents = pa.Table.from_batches(batches) if batches else DOCUMENTS.empty_table()
    return documents, read_physionet_gold(folder / "id-phi.phrase")


def is_physionet(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` is a PhysioNet deid folder (has ``id.text`` and ``id-phi.phrase``)."""
    folder = Path(folder)
    return (folder / "id.text").is_file() and (folder / "id-phi.phrase").is_file()


def read_physionet_gold(path: str | os.PathLike[str]) -> pa.Table:
    """PhysioNet's ``id-phi.phrase`` as a ``spans`` table (``doc_id`` = ``<patient>-<note>``
    as :func:`phisieve.read_documents` names PhysioNet notes; label = the gold category,
    source ``gold``). The phrases themselves are not kept.

    Raises
    ------
    InputError
        On a line that is not ``<patient> <note> <start> <end> <category> <phrase>``, with its
        line number (never its text).
    """
    path = Path(path)
    if path.is_dir():
        path = path / "id-phi.phrase"
    by_doc: dict[str, list[dict[str, Any]]] = {}
    try:
        lines = path.read_bytes().splitlines()
    except OSError as e:
        raise InputError(f"cannot read gold spans: {e.strerror}", path=path) from None
    for n, raw in enumerate(lines):
        if not raw.strip():
            continue
        fields = raw.split(b" ", 5)
        try:
            patient, note, start, end = (f.decode("ascii") for f in fields[:4])
            label = fields[4].decode("ascii").strip()
            s, e = int(start), int(end)
        except (IndexError, ValueError, UnicodeDecodeError):
            raise InputError("malformed gold span line", path=path, row=n) from None
        if not 0 <= s <= e or not label:
            raise InputError("malformed gold span offsets", path=path, row=n)
        by_doc.setdefault(f"{patient}-{note}", []).append(
            {"start": s, "end": e, "label": label, "source": "gold", "score": 1.0}
        )
    docs = list(by_doc)
    spans = [sorted(by_doc[d], key=lambda x: (x["start"], x["end"])) for d in docs]
    return pa.table({"doc_id": pa.array(docs, pa.string()), "spans": pa.array(spans, SPANS)})
