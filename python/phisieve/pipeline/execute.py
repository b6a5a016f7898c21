"""Running a pipeline: every step through the runner, finished steps skipped.

A step is **finished** when its output's manifest records the same stage, options, inputs
(their content fingerprints) and phisieve version (:func:`phisieve.pipeline.runner.
finished`); :func:`run_pipeline` skips it and says so. A step killed in the middle left no
output (or its previous one, which is then stale), so a re-run redoes that step and what
follows from it only. ``--from`` re-runs the named steps and everything downstream of them
whatever their state; ``--to`` stops after the named steps (and runs only what they need).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, OutputExistsError
from .config import Pipeline, Step
from .engine import Engine, LocalEngine
from .runner import reject_unless_owned, run_stage, stale_reason

__all__ = ["ENGINES", "Event", "make_engine", "plan", "run_pipeline"]


@dataclass
class Event:
    """What happened to one step (or will happen, in a dry run)."""

    step: Step
    index: int
    total: int
    action: str
    """``skip`` (finished), ``run`` (will run or is running), ``done`` (ran) or ``wait``
    (a dry run: runs when an earlier step changes its output)."""
    reason: str = ""
    manifest: dict[str, Any] | None = None


def _identities(step: Step) -> dict[str, Any] | None:
    """The identities of ``step``'s inputs now, or ``None`` when one is not complete yet."""
    from ..errors import InputError
    from .runner import input_identity

    ids = {}
    ports = {p.name: p for p in step.stage.inputs}
    try:
        for name, value in step.inputs.items():
            ids[name] = input_identity(ports[name], value)
    except InputError:
        return None
    return ids


def plan(
    pipeline: Pipeline, *, start: list[str] | None = None, stop: list[str] | None = None
) -> list[Event]:
    """What a run would do, step by step, without running anything: ``skip`` (finished),
    ``run`` with the reason, or ``wait`` (it reads the output of a step that runs first,
    and runs unless that output comes out the same)."""
    selected = _selected(pipeline, stop)
    forced = pipeline.downstream(s.name for s in _steps(pipeline, start)) if start else set()
    events = []
    changing: set[str] = set()
    steps = [s for s in pipeline.steps if s.name in selected]
    for i, step in enumerate(steps, 1):
        waits = [n for n in step.needs if n in changing]
        if step.name in forced:
            action, reason = "run", "--from"
        elif waits:
            action, reason = "wait", f"after {', '.join(waits)}"
        else:
            ids = _identities(step)
            why = (
                "an input is not complete"
                if ids is None
                else stale_reason(step.stage, step.out, ids)
            )
            action, reason = ("skip", "finished") if why is None else ("run", why)
        if action != "skip":
            changing.add(step.name)
        events.append(Event(step, i, len(steps), action, reason))
    return events


def _steps(pipeline: Pipeline, names: list[str]) -> list[Step]:
    return [s for n in names for s in pipeline.select(n)]


def _selected(pipeline: Pipeline, stop: list[str] | None) -> set[str]:
    if not stop:
        return {s.name for s in pipeline.steps}
    return pipeline.upstream(s.name for s in _steps(pipeline, stop))


def run_pipeline(
    pipeline: Pipeline,
    *,
    start: list[str] | None = None,
    stop: list[str] | None = None,
    overwrite: bool = False,
    progress: bool = True,
    report: Callable[[Event], None] | None = None,
    engine: Engine | None = None,
) -> list[Event]:
    """Run the pipeline's steps in order, skipping finished ones.

    Parameters
    ----------
    start
        ``--from``: these steps (names, or stage names) and everything downstream of them run
        whatever their state.
    stop
        ``--to``: run only these steps and what they need.
    overwrite
        Replace outputs that no step of this stage wrote (by default a pipeline replaces
        only its own stale outputs, and refuses to write over anything else).
    progress
        Progress bars.
    report
        Called before each step (``run`` or ``skip``) and after each run (``done``).
    engine
        Where batch functions run (:func:`make_engine`; default:
        in this process). The outputs are the same files whatever the engine.
    """
    selected = _selected(pipeline, stop)
    forced = pipeline.downstream(s.name for s in _steps(pipeline, start)) if start else set()
    steps = [s for s in pipeline.steps if s.name in selected]
    events = []
    for i, step in enumerate(steps, 1):
        ids = _identities(step)
        if ids is None:
            raise ConfigError(f"[{step.name}] an input is not complete; run the steps before it")
        why = stale_reason(step.stage, step.out, ids)
        if step.name not in forced and why is None:
            event = Event(step, i, len(steps), "skip", "finished")
            events.append(event)
            if report:
                report(event)
            continue
        if report:
            report(
                Event(step, i, len(steps), "run", "--from" if step.name in forced else why or "")
            )
        if not overwrite:
            try:
                reject_unless_owned(step.stage, step.out)
            except OutputExistsError as e:
                raise OutputExistsError(step.out) from e
        manifest = run_stage(
            step.stage, step.inputs, step.out, overwrite=True, progress=progress, engine=engine
        )
        event = Event(step, i, len(steps), "done", "", manifest)
        events.append(event)
        if report:
            report(event)
    return events


ENGINES = ("local", "ray")


def make_engine(
    name: str = "local",
    *,
    address: str | None = None,
    workers: int | None = None,
    object_store_memory: int | None = None,
) -> Engine:
    """The engine called ``name`` (``local`` or ``ray``); Ray is imported only for ``ray``.

    Parameters
    ----------
    address
        For ``ray``: the cluster to join (``auto``, ``ray://HOST:10001``); without it a
        local Ray instance is started with this machine's CPUs (or ``workers``).
    workers
        For ``local``: worker processes of this machine (default 1: this process; see
        :class:`~phisieve.pipeline.engine.LocalEngine`). For ``ray``: how many partitions
        and parallel batch functions (default: the cluster's CPUs).
    object_store_memory
        For a local Ray instance: the object store's bytes (default: bounded, see
        :func:`phisieve.pipeline.ray_engine.connect`).
    """
    if name == "local":
        if address is not None:
            raise ConfigError("--address is for --engine ray")
        return LocalEngine(workers or 1)
    if name == "ray":
        try:
            from .ray_engine import RayEngine
        except ImportError as e:
            raise ConfigError(
                f"--engine ray needs Ray: pip install 'phisieve[ray]' ({e})"
            ) from None
        return RayEngine(address=address, workers=workers, object_store_memory=object_store_memory)
    raise ConfigError(f"unknown engine {name!r}; expected one of {', '.join(ENGINES)}")
