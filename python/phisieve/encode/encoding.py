"""How an encoded dataset was made (:func:`read_encoding`): what the ``encode`` stage
(:func:`phisieve.api.encode`) records in its manifest beside the counts of sequences, tokens
and protected, direct and indirect tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import InputError
from ..io.dataset import read_manifest

__all__ = ["read_encoding"]


def read_encoding(path: str | Path) -> dict[str, Any]:
    """How the complete ``encoded`` dataset at ``path`` was made (its manifest's
    ``encoding``: tokenizer, ``max_len``, special token ids, protection report...)."""
    manifest = read_manifest(path)
    if "encoding" not in manifest:
        raise InputError(
            f"not an encoded dataset (written by {manifest.get('stage')!r})", path=path
        )
    return manifest["encoding"]
