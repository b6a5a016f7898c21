"""Engines: where a stage's batch function runs.

The runner (:mod:`phisieve.pipeline.runner`) does everything else the same way whatever the
engine: it checks and opens the inputs, runs the stage's reduce, writes the output through
the dataset contract (fixed-size parts, in the order the engine yields the rows) and commits
it. An engine only yields the stage's output batches, in a deterministic order:

* :class:`LocalEngine`: the stage's own :meth:`~phisieve.pipeline.stage.Stage.batches`, in
  this process; with ``workers`` above 1, a map stage's batch function and the reduce steps
  in that many worker processes of this machine (:mod:`phisieve.pipeline.pool`), the rows
  in the same order.
* :class:`~phisieve.pipeline.ray_engine.RayEngine` (``--engine ray``): the batch function on
  a Ray cluster (``pip install 'phisieve[ray]'``), with the rows in the same order, so the
  outputs are the same files.

:func:`phisieve.pipeline.execute.make_engine` makes one by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..errors import ConfigError

__all__ = ["Engine", "LocalEngine"]


class Engine:
    """Yields a stage's output batches (see the module's documentation)."""

    name = "engine"

    def batches(self, stage: Any, ctx: Any, state: Any) -> Iterator[Any]:
        """Every output batch of ``stage`` (after its reduce), in a deterministic order."""
        raise NotImplementedError

    def scan(
        self,
        ctx: Any,
        name: str,
        fn: Callable[[Any], Any],
        columns: list[str] | None = None,
        *,
        by: str | None = None,
        label: str | None = None,
        rows: tuple[int, int] | None = None,
        threaded: bool = False,
    ) -> list[Any]:
        """A reduce step: ``fn`` applied to pieces of the dataset input ``name`` (with
        ``rows``, only its rows ``first <= row < end``) that together hold each of its rows
        once; the results, back in this process.

        A piece is a :class:`~phisieve.io.sources.BatchSource` or an Arrow table of
        ``columns`` (``fn`` reads it with :func:`~phisieve.io.sources.open_source`); with
        ``by``, every row with the same value of that column (a patient's documents) is in
        one piece. There is at least one piece (an empty table when the input has no row).
        How the input is cut, and the results' order, depend on the engine: the caller
        combines them so that its result does not (counts add, tables are sorted). ``fn``
        must be picklable (a module-level function or class), and so must its result. With
        ``label``, a progress bar counts the rows read (otherwise ``fn`` draws its own).
        ``threaded``: ``fn`` already uses every core it is given (Rust threads), so a local
        engine runs it here, in one piece, rather than in its worker processes.
        """
        raise NotImplementedError

    def close(self) -> None:
        """Release what the engine holds (a Ray instance it started)."""

    def describe(self) -> dict[str, Any]:
        """What the manifest records among the settings (never compared on resume)."""
        return {"engine": self.name}


class LocalEngine(Engine):
    """The stage's own batches, in this process, or in worker processes of this machine.

    Parameters
    ----------
    workers
        Worker processes for a map stage's batch function and for the reduce steps
        (:mod:`phisieve.pipeline.pool`); 1 (the default) runs everything in this process,
        and so does an input of one batch, which gains nothing from workers. The output is
        the same files whatever the number.
    """

    name = "local"

    def __init__(self, workers: int = 1) -> None:
        if workers < 1:
            raise ConfigError(f"workers must be at least 1, not {workers}")
        self.workers = workers
        self._pool: Any = None

    def pool(self) -> Any:
        """The worker processes (:class:`~phisieve.pipeline.pool.Workers`), made on first
        use."""
        if self._pool is None:
            from .pool import Workers

            self._pool = Workers(self.workers)
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def describe(self) -> dict[str, Any]:
        return {"engine": self.name, "workers": self.workers}

    def batches(self, stage: Any, ctx: Any, state: Any) -> Iterator[Any]:
        if self.workers > 1 and _pooled(stage, ctx) and _several(ctx.source(stage.main), stage):
            return self.pool().map(stage, ctx, state)
        return stage.batches(ctx, state)

    def scan(
        self,
        ctx: Any,
        name: str,
        fn: Callable[[Any], Any],
        columns: list[str] | None = None,
        *,
        by: str | None = None,
        label: str | None = None,
        rows: tuple[int, int] | None = None,
        threaded: bool = False,
    ) -> list[Any]:
        """One piece, the whole input streamed here; with workers and a dataset on disk of
        more than one batch, one piece per worker (see :meth:`Engine.scan`)."""
        src = ctx.source(name)
        if rows is not None and src.path is not None:
            from .pool import plan_pieces

            # Only the row groups that hold the rows are read (rather than every row before
            # them): a stage that reads a dataset block after block reads it once.
            part = plan_pieces(src, 1, None, ctx.stage.batch_rows, rows)[0].source()
        elif rows is not None:
            from ..io.sources import row_range

            part = row_range(src, *rows)
        else:
            part = src
        if self.workers > 1 and not threaded and src.path is not None and _several(part, ctx.stage):
            return self.pool().scan(ctx, src, fn, by, label or name, rows)
        src = part
        if label is not None:
            src = ctx.counted(src, label, ctx.stage.unit)
        return [fn(src)]


def _pooled(stage: Any, ctx: Any) -> bool:
    """Whether the worker processes run ``stage``'s batch function: a distributed map stage
    whose main input was given."""
    from .stage import MapStage

    return (
        isinstance(stage, MapStage)
        and stage.distributed
        and stage.main is not None
        and ctx.values.get(stage.main) is not None
    )


def _several(src: Any, stage: Any) -> bool:
    """Whether ``src`` holds more than one of ``stage``'s batches (or an unknown number):
    one batch runs in this process, where it needs no worker to start."""
    return src.num_rows is None or src.num_rows > stage.batch_rows
