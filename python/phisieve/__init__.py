"""phisieve: prepare clinical text corpora for language-model training without letting the
model memorise who the patients are.

The main entry points (imported on first use):

* :mod:`phisieve.api` — every stage as a function, ``phisieve.api.NAME(inputs..., out,
  **options)``, offered here too (but for ``detect``, ``encode`` and ``audit``, which name
  sub-packages here): :func:`phisieve.synth` (a deterministic synthetic MIMIC-III-style
  corpus), :func:`phisieve.ingest` (MIMIC-III NOTEEVENTS, PhysioNet deid, JSONL, Parquet or a
  folder of text files into the ``documents`` dataset), :func:`phisieve.index` (the patient x
  term index: terms used by fewer than k patients)...;
* :func:`phisieve.run_pipeline` — a pipeline file (TOML) run stage by stage, finished stages
  skipped.

The package is organised in sub-packages by concern (README, *Layout*): ``io`` (the dataset
contract, readers), ``pipeline`` (stages and the runner), ``text``, ``protection``,
``term_index``, ``synthetic``, ``corpus``, ``detect``, ``phi``, ``encode``, ``training``,
``audit`` and ``cli``. No module inside the package imports this one.
"""

from __future__ import annotations

import importlib
import os

from ._core import __version__
from ._lazy import lazy_exports
from .catalog import PATHS

_EXPORTS = {
    "ConfigError": ".errors",
    "InputError": ".errors",
    "MemoryBudgetExceeded": ".errors",
    "MissingDependencyError": ".errors",
    "MissingModelError": ".errors",
    "NotGroupedError": ".errors",
    "OutputExistsError": ".errors",
    "PhisieveError": ".errors",
    "read_documents": ".io.readers",
    "synth_batches": ".synthetic",
    "merge_terms": ".term_index",
    "protected_share": ".term_index",
    "read_terms": ".term_index",
    "term_stats": ".term_index",
    "normalize_word": ".text",
    "tokenize": ".text",
    "load_pipeline": ".catalog",
    "run_pipeline": ".catalog",
    "run_stage": ".pipeline.runner",
    **{
        fn: ".api"
        for fn in (name.replace("-", "_") for name in PATHS)
        if not os.path.isdir(os.path.join(__path__[0], fn))  # detect, encode, audit
    },
}

__all__ = ["__version__", "api", *_EXPORTS]

_getattr, _dir = lazy_exports(__name__, _EXPORTS)


def __getattr__(name: str) -> object:
    if name == "api":
        return importlib.import_module(".api", __name__)
    return _getattr(name)


def __dir__() -> list[str]:
    return sorted({*globals(), "api", *_dir()})
