"""phisieve: prepare clinical text corpora for language-model training without letting the
model memorise who the patients are.

The main entry points:

* :func:`phisieve.synth` — a deterministic synthetic MIMIC-III-style corpus;
* :func:`phisieve.ingest` — MIMIC-III NOTEEVENTS, PhysioNet deid, JSONL, Parquet or a folder
  of text files into the ``documents`` dataset;
* :func:`phisieve.index` — the patient x term index: terms used by fewer than k patients.
"""

from __future__ import annotations

from ._core import __version__
from .errors import (
    ConfigError,
    InputError,
    MemoryBudgetExceeded,
    MissingDependencyError,
    NotGroupedError,
    PhisieveError,
)
from .readers import ingest, read_documents
from .synthetic import synth, synth_batches
from .term_index import index, merge_terms, protected_share, read_terms, term_stats, write_index
from .tokenize import normalize_word, tokenize

__all__ = [
    "ConfigError",
    "InputError",
    "MemoryBudgetExceeded",
    "MissingDependencyError",
    "NotGroupedError",
    "PhisieveError",
    "__version__",
    "index",
    "ingest",
    "merge_terms",
    "normalize_word",
    "protected_share",
    "read_documents",
    "read_terms",
    "synth",
    "synth_batches",
    "term_stats",
    "tokenize",
    "write_index",
]
