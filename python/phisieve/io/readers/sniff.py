"""Format and option checks, format detection, input file listing and column resolution."""

from __future__ import annotations

import codecs
import csv
import re
from collections import Counter
from pathlib import Path

from ...errors import InputError
from .common import _ROLES, FORMATS, _open_binary, _Options

_SUFFIXES = {
    "mimic": (".csv", ".csv.gz"),
    "physionet": (".text", ".text.gz"),
    "jsonl": (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz"),
    "parquet": (".parquet",),
    "txt": (".txt",),
}
_PHYSIONET_START = b"START_OF_RECORD="  # a PhysioNet record's first bytes
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}")
_ASCII_BYTES = bytes(range(128))
_TRANSFORMING = re.compile(
    r"(idna|punycode|unicode[-_]escape|raw[-_]unicode[-_]escape|utf[-_]7|hz|iso2022.*"
    r"|string[-_]escape|undefined)$"
)


def _check_format(fmt: str) -> str:
    if fmt != "auto" and fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}: expected 'auto' or one of {', '.join(FORMATS)}")
    return fmt


def _check_encoding(encoding: str) -> str:
    """The canonical name of a plain charset: a text codec that keeps every ASCII byte as it
    is and does not rewrite text (not idna, punycode, the escape codecs, utf-7, hz or the
    iso2022 family, which shift or decode escape sequences)."""
    shown = repr(encoding)[:60]
    if not isinstance(encoding, str):
        raise InputError(f"encoding must be a codec name such as 'utf-8', got {shown}")
    try:
        info = codecs.lookup(encoding)
    except LookupError:
        raise InputError(
            f"unknown encoding {shown}: pass a Python codec name such as 'latin-1' or 'cp1252'"
        ) from None
    name = info.name
    plain = getattr(info, "_is_text_encoding", True) and not _TRANSFORMING.match(name)
    if not plain:
        raise InputError(
            f"{shown} is not a plain text encoding (it rewrites text): pass a charset such as "
            "'latin-1' or 'cp1252'"
        )
    try:
        compatible = _ASCII_BYTES.decode(name) == _ASCII_BYTES.decode("ascii")
    except LookupError:
        raise InputError(f"{shown} is not a text encoding") from None
    except UnicodeError:
        compatible = False
    if not compatible:
        raise InputError(
            f"encoding {shown} is not ASCII-compatible (UTF-16 and UTF-32 are not): "
            "convert the input to UTF-8 first"
        )
    return name


def _detect_format(path: Path) -> str:
    if path.is_dir():
        for fmt in ("parquet", "txt", "mimic", "jsonl", "physionet"):
            if _has_files(path, _SUFFIXES[fmt]):
                return fmt
        raise InputError(
            "unknown format: the folder holds no .parquet, .txt, .csv, .jsonl or .text files; "
            f"pass one of {', '.join(FORMATS)}",
            path=path,
        )
    name = path.name.lower()
    for fmt in ("mimic", "physionet", "jsonl", "parquet"):
        if name.endswith(_SUFFIXES[fmt]):
            return fmt
    sniffed = _sniff_format(path)
    if sniffed is None:
        raise InputError(
            "unknown format: cannot tell it from the name or the first bytes; "
            f"pass one of {', '.join(FORMATS)}",
            path=path,
        )
    return sniffed


def _sniff_format(path: Path) -> str | None:
    """The format a file's first bytes suggest, or None."""
    with open(path, "rb") as f:
        if f.read(4) == b"PAR1":
            return "parquet"
    with _open_binary(path) as (data, _):
        head = data.read(1 << 16)
    return _format_of(head)


def _format_of(head: bytes) -> str | None:
    """The format of a file starting with ``head``: its first line is enough."""
    if head.startswith(b"PAR1"):
        return "parquet"
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if start.startswith(_PHYSIONET_START):
        return "physionet"
    if start.startswith(b"{"):
        return "jsonl"
    line = start.split(b"\n", 1)[0].decode("utf-8", "replace")
    try:
        names = {n.strip().casefold() for n in next(csv.reader([line]), [])}
    except csv.Error:  # a field over the csv module's limit: not a header
        return None
    return "mimic" if {"subject_id", "text"} <= names else None


def _format_hint(head: bytes, fmt: str) -> str:
    """A hint for a file read as ``fmt`` that looks like another format ('' if none)."""
    other = _format_of(head)
    if other is None or other == fmt:
        return ""
    return f" (it looks like {other}: pass --format {other})"


def _has_files(folder: Path, suffixes: tuple[str, ...]) -> bool:
    return any(
        p.name.lower().endswith(suffixes) and not _hidden(p.relative_to(folder)) and p.is_file()
        for p in folder.rglob("*")
    )


def _input_files(path: Path, fmt: str) -> list[Path]:
    """The files ``fmt`` reads at ``path``: the file itself, or the files in the folder with the
    format's suffixes (recursively, sorted by relative path, skipping hidden ones)."""
    if not path.is_dir():
        return [path]
    suffixes = _SUFFIXES[fmt]
    found = [
        p
        for p in path.rglob("*")
        if p.name.lower().endswith(suffixes) and not _hidden(p.relative_to(path)) and p.is_file()
    ]
    if not found:
        raise InputError(
            f"no {' or '.join(suffixes)} files in this folder: the {fmt!r} format reads such "
            "a file or a folder of them",
            path=path,
        )
    return sorted(found, key=lambda p: p.relative_to(path).as_posix())


def _hidden(rel: Path) -> bool:
    return any(part.startswith((".", "_")) for part in rel.parts)


def _file_stem(root: Path, file: Path) -> str:
    """The prefix of ``file``'s default document ids: its name (its path within ``root`` when
    that is a folder) without the format's suffix."""
    name = file.relative_to(root).as_posix() if root.is_dir() else file.name
    if name.lower().endswith(".gz"):
        name = name[:-3]
    head, dot, suffix = name.rpartition(".")
    return head if dot and head and not head.endswith("/") and "/" not in suffix else name


def _total_size(files: list[Path]) -> int:
    return sum(f.stat().st_size for f in files)


def _resolve_columns(
    available: list[str],
    opts: _Options,
    defaults: dict[str, str],
    required: set[str],
    path: Path,
    hint: str = "",
) -> dict[str, str | None]:
    """Map each role to an available column name, or None for an absent optional one."""
    wanted = {role: opts.columns[role] or defaults[role] for role in _ROLES}
    resolved = {role: _find_column(available, wanted[role]) for role in _ROLES}
    for role in _ROLES:
        if resolved[role] is None and (role in required or opts.columns[role] is not None):
            shown = _describe_columns(available, resolved)
            raise InputError(
                f"missing required column{shown}{hint}", path=path, column=wanted[role]
            )
    return resolved


def _describe_columns(available: list[str], resolved: dict[str, str | None]) -> str:
    """The available column names, or only their number when they may be data (no expected
    column was found, or a name does not look like an identifier)."""
    if any(v is not None for v in resolved.values()) and all(map(_looks_like_name, available)):
        more = ", ..." if len(available) > 50 else ""
        return f" (has: {', '.join(available[:50])}{more})"
    return (
        f": the {len(available)} column names are not shown, as they do not look like a "
        "header; is the header row missing, or the format another one?"
    )


def _looks_like_name(name: str) -> bool:
    """Whether ``name`` may be quoted in a message: short, an identifier, no spaces."""
    return _NAME.fullmatch(name) is not None


def _check_duplicates(names: list[str], path: Path) -> None:
    seen: Counter[str] = Counter(names)
    dupes = sorted(n for n, count in seen.items() if count > 1)
    if not dupes:
        return
    if all(map(_looks_like_name, dupes)):
        shown = ", ".join(dupes)
    else:
        shown = f"{len(dupes)} repeated names, not shown"
    raise InputError(f"duplicate column names ({shown})", path=path)


def _find_column(available: list[str], wanted: str) -> str | None:
    if wanted in available:
        return wanted
    folded = [name for name in available if name.casefold() == wanted.casefold()]
    return folded[0] if folded else None
