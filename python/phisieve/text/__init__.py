"""phisieve's words and terms (DESIGN.md §2): maximal runs of letters, marks and digits,
normalised (NFKC + lower-case by default); counted by the index, masked by encode."""

from __future__ import annotations

from .._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__, {"NORMALIZATIONS": ".words", "normalize_word": ".words", "tokenize": ".words"}
)
