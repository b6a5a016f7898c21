"""Engines: where a stage's batch function runs.

The runner (:mod:`phisieve.pipeline.runner`) does everything else the same way whatever the
engine: it checks and opens the inputs, runs the stage's reduce, writes the output through
the dataset contract (fixed-size parts, in the order the engine yields the rows) and commits
it. An engine only yields the stage's output batches, in a deterministic order:

* :class:`LocalEngine`: the stage's own :meth:`~phisieve.pipeline.stage.Stage.batches`, in
  this process.
* :class:`~phisieve.pipeline.ray_engine.RayEngine` (``--engine ray``): the batch function on
  a Ray cluster (``pip install 'phisieve[ray]'``), with the rows in the same order, so the
  outputs are the same files.
"""

from __future__ import annotations

from ..errors import ConfigError
from .engine import Engine, LocalEngine

__all__ = ["ENGINES", "Engine", "LocalEngine", "make_engine"]

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
        For ``ray``: how many partitions and parallel batch functions (default: the
        cluster's CPUs).
    object_store_memory
        For a local Ray instance: the object store's bytes (default: bounded, see
        :func:`phisieve.pipeline.ray_engine.connect`).
    """
    if name == "local":
        if address is not None:
            raise ConfigError("--address is for --engine ray")
        return LocalEngine()
    if name == "ray":
        try:
            from .ray_engine import RayEngine
        except ImportError as e:
            raise ConfigError(
                f"--engine ray needs Ray: pip install 'phisieve[ray]' ({e})"
            ) from None
        return RayEngine(address=address, workers=workers, object_store_memory=object_store_memory)
    raise ConfigError(f"unknown engine {name!r}; expected one of {', '.join(ENGINES)}")
