"""The ``encode`` stage: documents -> model token sequences with per-token protection flags.

* :mod:`phisieve.encode.stage` tokenises and packs sequences (:func:`encode`), flagging
  tokens by :mod:`phisieve.protection.scope`;
* :mod:`phisieve.encode.coverage` scores that protection against gold PHI on annotated
  notes (``phisieve coverage``).
"""

from __future__ import annotations

from .._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        name: ".stage"
        for name in (
            "ENCODED",
            "SpecialTokens",
            "encode",
            "encode_batches",
            "load_tokenizer",
            "read_encoding",
        )
    },
)
