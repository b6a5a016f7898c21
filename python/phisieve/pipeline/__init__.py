"""Stages and the one runner every stage goes through.

* :mod:`phisieve.pipeline.stage` — the :class:`Stage` base: options, inputs, output, a batch
  function and an explicit reduce (or a ``build`` for folders and files);
* :mod:`phisieve.pipeline.options` — typed options shared by the command line and the
  pipeline file;
* :mod:`phisieve.pipeline.runner` — :func:`run_stage`: checks, opens, resumes, draws progress,
  merges stats, commits;
* :mod:`phisieve.pipeline.config` and :mod:`phisieve.pipeline.execute` — pipeline files
  (TOML), checked before anything runs, run stage by stage with finished stages skipped;
* :mod:`phisieve.pipeline.summary` — what a stage's command prints, declared over its
  output's manifest;
* :mod:`phisieve.pipeline.stats` and :mod:`phisieve.pipeline.progress`.
"""

from __future__ import annotations

from .._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Context": ".stage",
        "Input": ".stage",
        "Output": ".stage",
        "Stage": ".stage",
        "Stats": ".stats",
        "option": ".options",
        "run_stage": ".runner",
        "load_pipeline": ".config",
        "run_pipeline": ".execute",
        "plan": ".execute",
    },
)
