"""Every stage by name: what ``phisieve run`` and the command line know.

A stage is named by the module that defines it, always a sub-package's ``stage.py``, which
declares its options and inputs without importing what the stage needs to run (pyarrow,
polars, torch...): the command line's ``--help`` and option parsing import nothing heavier,
and a stage's algorithms are imported when it runs.

A pipeline file names stages by these names (``stage = "encode"``, or the table's name);
:func:`load_pipeline` and :func:`run_pipeline` are :mod:`phisieve.pipeline`'s, with this
catalog.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .pipeline import config, execute
    from .pipeline.stage import Stage

PATHS: dict[str, str] = {
    "keygen": "phisieve.phi.stage:KeygenStage",
    "synth": "phisieve.synthetic.stage:SynthStage",
    "ingest": "phisieve.corpus.stage:IngestStage",
    "surrogate": "phisieve.phi.stage:SurrogateStage",
    "placeholders": "phisieve.phi.stage:PlaceholdersStage",
    "canaries": "phisieve.phi.stage:CanariesStage",
    "detect": "phisieve.detect.stage:DetectStage",
    "detect-train": "phisieve.detect.stage:DetectTrainStage",
    "detect-train-crf": "phisieve.detect.stage:DetectTrainCrfStage",
    "detect-onnx": "phisieve.detect.stage:DetectOnnxStage",
    "learn-deny": "phisieve.detect.stage:LearnDenyStage",
    "index": "phisieve.term_index.stage:IndexStage",
    "merge": "phisieve.term_index.stage:MergeStage",
    "split": "phisieve.corpus.stage:SplitStage",
    "fragment": "phisieve.fragments.stage:FragmentStage",
    "tokenizer": "phisieve.training.stage:TokenizerStage",
    "encode": "phisieve.encode.stage:EncodeStage",
    "init-model": "phisieve.training.stage:InitModelStage",
    "train": "phisieve.training.stage:TrainStage",
    "audit": "phisieve.audit.stage:AuditStage",
    "audit-compare": "phisieve.audit.stage:AuditCompareStage",
}
"""Every stage: its name -> ``module:class``."""


class Catalog(Mapping[str, "type[Stage]"]):
    """Stage classes by name, each imported from its ``stage.py`` on first use."""

    def __init__(self, paths: Mapping[str, str]) -> None:
        self._paths = dict(paths)
        self._classes: dict[str, type[Stage]] = {}

    def __getitem__(self, name: str) -> type[Stage]:
        cls = self._classes.get(name)
        if cls is None:
            module, _, attr = self._paths[name].partition(":")
            cls = getattr(importlib.import_module(module), attr)
            if cls.name != name:  # pragma: no cover - a catalog typo
                raise TypeError(f"{self._paths[name]} is stage {cls.name!r}, not {name!r}")
            self._classes[name] = cls
        return cls

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


STAGES: Catalog = Catalog(PATHS)
"""Every stage, by the name its command and pipeline files use."""


def load_pipeline(path: str | Path, **kwargs: Any) -> config.Pipeline:
    """Read and check a pipeline file (:func:`phisieve.pipeline.config.load_pipeline` with
    every stage of phisieve)."""
    from .pipeline import config

    return config.load_pipeline(path, STAGES, **kwargs)


def run_pipeline(path: str | Path, **kwargs: Any) -> list[execute.Event]:
    """Run a pipeline file, finished stages skipped (:func:`phisieve.pipeline.execute.
    run_pipeline`); ``workdir`` and ``overrides`` go to :func:`load_pipeline`."""
    from .pipeline import execute

    load = {k: kwargs.pop(k) for k in ("workdir", "overrides") if k in kwargs}
    return execute.run_pipeline(load_pipeline(path, **load), **kwargs)
