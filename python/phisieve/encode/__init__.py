"""The ``encode`` stage: documents -> model token sequences with per-token protection flags.

* :mod:`phisieve.encode.stage` — the stage (:func:`phisieve.api.encode` runs it);
  :mod:`phisieve.encode.encoding` — :func:`read_encoding`, how an encoded dataset was made;
* :mod:`phisieve.encode.batches` — its batch function: words flagged by
  :mod:`phisieve.protection.scope` and the terms, model tokens mapped to them by offsets;
* :mod:`phisieve.encode.tokenizer` — local fast tokenizers, their special tokens;
* :mod:`phisieve.encode.pack` — a patient's documents packed into sequences;
* :mod:`phisieve.encode.coverage` scores that protection against gold PHI on annotated
  notes (``phisieve coverage``).
"""

from __future__ import annotations

from .._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ENCODED": ".pack",
        "EncodeStage": ".stage",
        "SpecialTokens": ".tokenizer",
        "encode_batches": ".batches",
        "load_tokenizer": ".tokenizer",
        "read_encoding": ".encoding",
    },
)
