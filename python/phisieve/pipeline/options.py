"""Stage options: one typed definition that the command line and the pipeline file share.

A stage's options are a frozen dataclass whose fields are made with :func:`option`. Each field
has a type (``int``, ``float``, ``bool``, ``str``, ``Path`` or one of them ``| None``), a
default, a help text and a name on the command line (``--max-len``: the field ``max_len`` with
``_`` written ``-``, unless ``flag`` says otherwise). The pipeline file uses the same name
without the dashes (``max-len = 128``).

An option ``decides`` the output (the default) or is a setting that never changes it (threads,
batch sizes, memory budgets, progress): only deciding options are compared when the runner
asks whether an output is finished.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError

SCALARS = (bool, int, float, str, Path)
"""The types an option may have (or ``T | None``)."""


def option(
    default: Any,
    help: str,
    *,
    flag: str | None = None,
    short: str | None = None,
    decides: bool = True,
    negatable: bool = True,
    hidden: bool = False,
) -> Any:
    """A field of a stage's options dataclass.

    Parameters
    ----------
    default
        The default value (options are never required: inputs and ``out`` are).
    help
        One line for ``--help`` and the pipeline reference.
    flag
        The command-line name when it is not the field's name with dashes (``"--format"``).
    short
        A one-letter alias on the command line (``"-q"``).
    decides
        Whether the option changes the output (compared on resume); False for settings such
        as threads or memory budgets, which are recorded apart.
    negatable
        For a boolean: offer ``--no-NAME`` too (otherwise only ``--NAME``).
    hidden
        Leave the option out of ``--help`` (still accepted).
    """
    meta = {
        "help": help,
        "flag": flag,
        "short": short,
        "decides": decides,
        "negatable": negatable,
        "hidden": hidden,
    }
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Param:
    """One option of a stage, as the command line and the pipeline file see it."""

    attr: str
    """The dataclass field (``max_len``)."""
    key: str
    """The name in the pipeline file and, with ``--``, on the command line (``max-len``)."""
    type: type
    """The scalar type (``int``, ``float``, ``bool``, ``str`` or ``Path``)."""
    optional: bool
    """Whether ``None`` is allowed."""
    default: Any
    help: str
    short: str | None
    decides: bool
    negatable: bool
    hidden: bool

    @property
    def flag(self) -> str:
        return "--" + self.key


def _scalar(hint: Any, where: str) -> tuple[type, bool]:
    """(the scalar type, whether None is allowed) of a field's type hint."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) != 1 or args[0] not in SCALARS:
            raise TypeError(f"{where}: an option is a scalar or a scalar | None, not {hint}")
        return args[0], True
    if hint not in SCALARS:
        raise TypeError(f"{where}: an option is a scalar or a scalar | None, not {hint}")
    return hint, False


def params(options_type: type) -> list[Param]:
    """The options of a stage's options dataclass, in their order."""
    hints = typing.get_type_hints(options_type)
    out = []
    for f in dataclasses.fields(options_type):
        kind, optional = _scalar(hints[f.name], f"{options_type.__name__}.{f.name}")
        meta = f.metadata
        flag = meta.get("flag") or "--" + f.name.replace("_", "-")
        out.append(
            Param(
                attr=f.name,
                key=flag.removeprefix("--"),
                type=kind,
                optional=optional,
                default=f.default,
                help=meta.get("help", ""),
                short=meta.get("short"),
                decides=meta.get("decides", True),
                negatable=meta.get("negatable", True),
                hidden=meta.get("hidden", False),
            )
        )
    return out


def type_name(p: Param) -> str:
    """How a pipeline file writes a value of ``p``'s type."""
    name = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        p.type, "a path (string)"
    )
    return name + (" (or left out)" if p.optional else "")


def coerce(p: Param, value: Any, where: str) -> Any:
    """A value read from a pipeline file, checked against ``p``'s type (an integer is a
    number; a string is a path). Raises :class:`ConfigError` naming ``where`` and the key."""
    ok = (
        (p.type is bool and isinstance(value, bool))
        or (p.type is int and isinstance(value, int) and not isinstance(value, bool))
        or (p.type is float and isinstance(value, (int, float)) and not isinstance(value, bool))
        or (p.type in (str, Path) and isinstance(value, str))
    )
    if not ok:
        raise ConfigError(
            f"{where} {p.key}: must be {type_name(p)}, not {type(value).__name__} {value!r}"
        )
    if p.type is float:
        return float(value)
    if p.type is Path:
        return Path(value)
    return value


def deciding(options: Any) -> dict[str, Any]:
    """The options that decide the output, by their pipeline-file names (paths as strings)."""
    return {p.key: _plain(getattr(options, p.attr)) for p in params(type(options)) if p.decides}


def settings(options: Any) -> dict[str, Any]:
    """The options that never change the output (threads, budgets...)."""
    return {p.key: _plain(getattr(options, p.attr)) for p in params(type(options)) if not p.decides}


def _plain(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value
