"""The ``encode`` stage: documents -> model token sequences with per-token protection flags.

* :mod:`phisieve.encode.stage` tokenises and packs sequences (:func:`encode`);
* :mod:`phisieve.encode.protection` decides which words are protected, and why.

The stage's names are loaded on first use, so that the index can use
:mod:`phisieve.encode.protection` without importing the stage (and tokenizers).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "ENCODED",
    "SpecialTokens",
    "encode",
    "encode_batches",
    "load_tokenizer",
    "read_encoding",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module(".stage", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
