"""Words and terms as phisieve defines them (DESIGN.md section 2).

A word is a maximal run of characters whose Unicode general category is a Letter, a Mark or
a Number; offsets are code points (Python ``str`` indices). A term is a normalised word:
NFKC then lower-case by default, with any U+0020 the normal form introduces removed.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from .. import _core

NORMALIZATIONS = ("nfkc_lower", "nfkc", "nfc_lower", "nfc", "lower", "none")


def tokenize(texts: Any, normalize: str = "nfkc_lower") -> pa.RecordBatch:
    """Split texts into words.

    Parameters
    ----------
    texts
        An Arrow string array (pyarrow, polars, ...) or a list of ``str``.
    normalize
        One of :data:`NORMALIZATIONS`.

    Returns
    -------
    pyarrow.RecordBatch
        One row per text: ``starts`` and ``ends`` (code-point offsets, end exclusive) and the
        normalised ``words``.
    """
    if isinstance(texts, (list, tuple)):
        texts = pa.array(texts, pa.large_string())
    elif isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    return _core.tokenize(texts, normalize=normalize)


def normalize_word(word: str, normalize: str = "nfkc_lower") -> str:
    """The term a single word becomes."""
    return _core.normalize_word(word, normalize=normalize)
