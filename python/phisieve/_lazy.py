"""Lazy re-exports for package ``__init__`` modules (PEP 562).

A package lists the names it offers and the module (relative to the package) that defines
each; a name is imported on first use, so importing a package costs nothing until one of its
names is used, and a package never imports its own submodules eagerly (no import cycles
through ``__init__``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str, exports: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` offering ``exports`` (name -> the
    defining module, relative to ``package``, e.g. ``".run"``)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module, package), name)

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__


class LazyModule:
    """A module imported on first attribute access.

    A stage module (``*/stage.py``) declares its options and inputs with nothing heavier than
    the standard library, so that the command line's ``--help`` and option parsing stay
    instant; its methods reach the algorithms (and, through them, pyarrow, polars, torch...)
    through a ``LazyModule``, imported when the stage runs::

        algo = LazyModule(".build", __package__)
        ...
        algo.index_piece(...)   # imported here, once
    """

    __slots__ = ("_name", "_package")

    def __init__(self, name: str, package: str | None = None) -> None:
        self._name = name
        self._package = package

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name, self._package), attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r} of {self._package!r}>"
