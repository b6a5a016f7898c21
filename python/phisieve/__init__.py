"""phisieve: prepare clinical text corpora for language-model training without letting the
model memorise who the patients are.

The main entry points (imported on first use):

* :func:`phisieve.synth` — a deterministic synthetic MIMIC-III-style corpus;
* :func:`phisieve.ingest` — MIMIC-III NOTEEVENTS, PhysioNet deid, JSONL, Parquet or a folder
  of text files into the ``documents`` dataset;
* :func:`phisieve.index` — the patient x term index: terms used by fewer than k patients;
* :func:`phisieve.run_pipeline` — a pipeline file (TOML) run stage by stage, finished stages
  skipped.

The package is organised in sub-packages by concern (README, *Layout*): ``io`` (the dataset
contract, readers), ``pipeline`` (stages and the runner), ``text``, ``protection``,
``term_index``, ``synthetic``, ``corpus``, ``detect``, ``phi``, ``encode``, ``training``,
``audit`` and ``cli``. No module inside the package imports this one.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any

from ._core import __version__
from ._lazy import lazy_exports

_EXPORTS = {
    "ConfigError": ".errors",
    "InputError": ".errors",
    "MemoryBudgetExceeded": ".errors",
    "MissingDependencyError": ".errors",
    "MissingModelError": ".errors",
    "NotGroupedError": ".errors",
    "OutputExistsError": ".errors",
    "PhisieveError": ".errors",
    "ingest": ".corpus.ingest",
    "read_documents": ".io.readers",
    "synth": ".synthetic",
    "synth_batches": ".synthetic",
    "index": ".term_index",
    "merge_terms": ".term_index",
    "protected_share": ".term_index",
    "read_terms": ".term_index",
    "term_stats": ".term_index",
    "write_index": ".term_index",
    "normalize_word": ".text",
    "tokenize": ".text",
    "load_pipeline": ".catalog",
    "run_pipeline": ".catalog",
    "run_stage": ".pipeline.runner",
}

__all__ = ["__version__", *_EXPORTS]

__getattr__, _dir = lazy_exports(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return sorted({*globals(), *_dir()})


# Modules that moved when the package was split into sub-packages: the old import paths keep
# working (with a DeprecationWarning) and give the module, or a view of the modules, that now
# holds their names.
MOVED: dict[str, tuple[str, ...]] = {
    "dataset": ("io.dataset", "io.sources"),
    "schema": ("io.schema",),
    "readers": ("io.readers", "corpus.ingest"),
    "progress": ("pipeline.progress",),
    "tokenize": ("text.words",),
    "dictionaries": ("detect.recognizers.dictionaries",),
    "presidio": ("detect.recognizers.presidio",),
    "stanza_ner": ("detect.recognizers.stanza",),
    "placeholders": ("phi.placeholders",),
    "surrogate": ("phi.surrogate", "phi.secret"),
    "gold": ("phi.gold", "io.physionet"),
    "masking": ("training.masking",),
    "torch": ("training.loaders",),
    "train": ("training.loop",),
    "encode.protection": ("protection.scope",),
    "encode.stage": ("encode.stage",),
    "detect.model": ("detect.recognizers.model", "detect.train", "detect.labels"),
    "audit.split": ("corpus.split",),
    "audit.canaries": ("phi.canaries",),
    "audit.coverage": ("encode.coverage",),
}


class _Moved(types.ModuleType):
    """An old module path: its names are looked up in the modules that now hold them."""

    def __init__(self, name: str, targets: tuple[str, ...]) -> None:
        super().__init__(name)
        self.__targets = targets

    def __getattr__(self, name: str) -> Any:
        for target in self.__targets:
            module = importlib.import_module(f"{__name__}.{target}")
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        old = fullname.removeprefix(__name__ + ".")
        if fullname.startswith(__name__ + ".") and old in MOVED:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        old = spec.name.removeprefix(__name__ + ".")
        targets = MOVED[old]
        warnings.warn(
            f"{spec.name} moved to {', '.join(f'{__name__}.{t}' for t in targets)}",
            DeprecationWarning,
            stacklevel=2,
        )
        return _Moved(spec.name, targets)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
    sys.meta_path.append(_MovedFinder())
