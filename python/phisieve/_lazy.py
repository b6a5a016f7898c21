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
