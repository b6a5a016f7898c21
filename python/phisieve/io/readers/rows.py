"""Shared row checks: every reader hands its raw columns to :func:`_finish`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import InputError
from ..schema import DOCUMENTS
from .common import (
    EMPTY_TEXT,
    MISSING_PATIENT,
    NOT_INTEGER,
    NUL_CHARACTER,
    Rejection,
    _Chunk,
    _is_utf8,
    _undecodable_reason,
)


@dataclass
class _Raw:
    """One chunk of input rows, before decoding and checks.

    ``doc``/``patient``/``group``/``text`` hold strings or bytes (or are None when the input
    has no such column); ``extra`` holds pass-through columns. ``names`` gives each role's
    input column name for rejection records. ``flags`` are rows a reader already found
    unusable: (mask, reason, column), applied first. ``integer_patient`` rejects patient ids
    that are not integers.
    """

    source: str
    stem: str
    rows: np.ndarray
    doc: pa.Array | None
    patient: pa.Array
    group: pa.Array | None
    text: pa.Array
    names: dict[str, str | None]
    extra: dict[str, pa.Array] = field(default_factory=dict)
    rejected: list[Rejection] = field(default_factory=list)
    encoding: str = "utf-8"
    integer_patient: bool = False
    flags: list[tuple[np.ndarray, str, str | None]] = field(default_factory=list)


_TARGETS = (
    ("doc", pa.string()),
    ("patient", pa.string()),
    ("group", pa.string()),
    ("text", pa.large_string()),
)


def _finish(raw: _Raw, schema: pa.Schema) -> _Chunk:
    """Decode, check and assemble one chunk: the usable rows as a batch and the rejections."""
    n = len(raw.rows)
    keep = np.ones(n, dtype=bool)
    rejected = list(raw.rejected)

    def reject(mask: np.ndarray, reason: str, column: str | None) -> None:
        hit = mask & keep
        rejected.extend(Rejection(raw.source, int(r), column, reason) for r in raw.rows[hit])
        keep[hit] = False

    for mask, reason, column in raw.flags:
        reject(mask, reason, column)
    decoded, extra = _decode_columns(raw, schema, reject)
    for role, _ in _TARGETS:
        if decoded[role] is not None:
            reject(_contains(decoded[role], "\\x00"), NUL_CHARACTER, raw.names.get(role))
    patient = _trim(decoded["patient"])
    reject(_blank(patient), MISSING_PATIENT, raw.names["patient"])
    if raw.integer_patient:
        reject(~_contains(patient, "^[0-9]+$"), NOT_INTEGER, raw.names["patient"])
    reject(_blank(decoded["text"]), EMPTY_TEXT, raw.names["text"])

    mask = pa.array(keep)
    doc = _doc_ids(decoded["doc"], raw.stem, raw.rows).filter(mask)
    group = decoded["group"]
    group = pa.nulls(n, pa.string()) if group is None else _trim(group)
    group = pc.if_else(pc.equal(pc.binary_length(group), 0), None, group).filter(mask)
    columns = [doc, patient.filter(mask), group, decoded["text"].filter(mask)]
    columns += [extra[f.name].filter(mask) for f in list(schema)[len(DOCUMENTS) :]]
    rejected.sort(key=lambda r: r.row)
    return pa.RecordBatch.from_arrays(columns, schema=schema), rejected


def _decode_columns(
    raw: _Raw, schema: pa.Schema, reject: Callable[[np.ndarray, str, str | None], None]
) -> tuple[dict[str, pa.Array | None], dict[str, pa.Array]]:
    """The role and pass-through columns as strings; undecodable values are rejected."""
    reason = _undecodable_reason(raw.encoding)
    decoded: dict[str, pa.Array | None] = {"doc": None, "group": None}
    for role, target in _TARGETS:
        arr = getattr(raw, role)
        if arr is not None:
            column = raw.names.get(role)
            decoded[role], bad = _to_utf8(arr, target, column, raw.source, raw.encoding)
            reject(bad, reason, column)
    extra = {}
    for name, arr in raw.extra.items():
        target = schema.field(name).type
        extra[name], bad = _to_utf8(arr, target, name, raw.source, raw.encoding)
        reject(bad, reason, name)
    return decoded, extra


def _to_utf8(
    arr: pa.Array, target: pa.DataType, column: str | None, source: str, encoding: str = "utf-8"
) -> tuple[pa.Array, np.ndarray]:
    """Cast to ``target``; binary input is decoded with ``encoding`` and values that do not
    decode are reported in a mask (and become null)."""
    bad = np.zeros(len(arr), dtype=bool)
    if arr.type == target:
        return arr, bad
    if pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type):
        if not _is_utf8(encoding):
            return _decode_values(arr, target, encoding)
        try:
            return arr.cast(target), bad
        except pa.ArrowInvalid:
            bad = np.array([_undecodable(v) for v in arr.to_pylist()], dtype=bool)
            arr = pc.if_else(pa.array(bad), pa.scalar(None, arr.type), arr)
    try:
        return arr.cast(target), bad
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise InputError(
            f"cannot read column of type {arr.type} as text", path=source, column=column
        ) from None


def _decode_values(
    arr: pa.Array, target: pa.DataType, encoding: str
) -> tuple[pa.Array, np.ndarray]:
    """Decode binary values with a codec other than UTF-8 (value by value)."""
    values: list[str | None] = []
    bad = np.zeros(len(arr), dtype=bool)
    for i, value in enumerate(arr.to_pylist()):
        text = None
        if value is not None:
            try:
                text = value.decode(encoding)
                text.encode("utf-8")  # a codec such as utf-7 may yield lone surrogates
            except UnicodeError:
                text, bad[i] = None, True
        values.append(text)
    return pa.array(values, target), bad


def _undecodable(value: bytes | None) -> bool:
    if value is None:
        return False
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _contains(arr: pa.Array, pattern: str) -> np.ndarray:
    """True where a value matches the RE2 ``pattern`` (false for nulls)."""
    hit = pc.match_substring_regex(arr, pattern)
    return np.asarray(hit.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def _trim(arr: pa.Array) -> pa.Array:
    return pc.utf8_trim_whitespace(arr)


def _blank(arr: pa.Array) -> np.ndarray:
    """True where a string is null, empty or only whitespace."""
    blank = pc.or_kleene(pc.equal(pc.binary_length(arr), 0), pc.utf8_is_space(arr))
    return np.asarray(blank.fill_null(True).to_numpy(zero_copy_only=False), dtype=bool)


def _doc_ids(doc: pa.Array | None, stem: str, rows: np.ndarray) -> pa.Array:
    """Trimmed document ids; missing or empty ones become ``"<stem>:<row>"``."""
    if doc is None:
        return pa.array([f"{stem}:{r}" for r in rows], pa.string())
    doc = _trim(doc)
    missing = _blank(doc)
    if not missing.any():
        return doc
    made = pa.array(
        [f"{stem}:{r}" if m else None for r, m in zip(rows, missing, strict=True)], pa.string()
    )
    return pc.if_else(pa.array(missing), made, doc)
