"""Every stage by name: what ``phisieve run`` and the command line know.

A pipeline file names stages by these names (``stage = "encode"``, or the table's name);
:func:`load_pipeline` and :func:`run_pipeline` are :mod:`phisieve.pipeline`'s, with this
catalog.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .audit.run import AuditCompareStage, AuditStage
from .corpus.ingest import IngestStage
from .corpus.split import SplitStage
from .detect.crf_train import DetectTrainCrfStage
from .detect.learnt import LearnDenyStage
from .detect.run import DetectStage
from .detect.train import DetectTrainStage
from .encode.stage import EncodeStage
from .fragments.stage import FragmentStage
from .phi.canaries import CanariesStage
from .phi.gold import PlaceholdersStage
from .phi.secret import KeygenStage
from .phi.surrogate import SurrogateStage
from .pipeline import config, execute
from .pipeline.stage import Stage
from .synthetic.generate import SynthStage
from .term_index.stage import IndexStage, MergeStage
from .training.loop import TrainStage
from .training.model_init import InitModelStage
from .training.tokenizers import TokenizerStage

STAGES: dict[str, type[Stage]] = {
    cls.name: cls
    for cls in (
        KeygenStage,
        SynthStage,
        IngestStage,
        SurrogateStage,
        PlaceholdersStage,
        CanariesStage,
        DetectStage,
        DetectTrainStage,
        DetectTrainCrfStage,
        LearnDenyStage,
        IndexStage,
        MergeStage,
        SplitStage,
        FragmentStage,
        TokenizerStage,
        EncodeStage,
        InitModelStage,
        TrainStage,
        AuditStage,
        AuditCompareStage,
    )
}
"""Every stage, by the name its command and pipeline files use."""


def load_pipeline(path: str | Path, **kwargs: Any) -> config.Pipeline:
    """Read and check a pipeline file (:func:`phisieve.pipeline.config.load_pipeline` with
    every stage of phisieve)."""
    return config.load_pipeline(path, STAGES, **kwargs)


def run_pipeline(path: str | Path, **kwargs: Any) -> list[execute.Event]:
    """Run a pipeline file, finished stages skipped (:func:`phisieve.pipeline.execute.
    run_pipeline`); ``workdir`` and ``overrides`` go to :func:`load_pipeline`."""
    load = {k: kwargs.pop(k) for k in ("workdir", "overrides") if k in kwargs}
    return execute.run_pipeline(load_pipeline(path, **load), **kwargs)
