"""The ``phisieve`` command line: one command per stage, ``run`` for pipeline files."""

from __future__ import annotations

from .app import app, main

__all__ = ["app", "main"]
