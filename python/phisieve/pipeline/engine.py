"""The engine a stage's batch function runs on (:mod:`phisieve.pipeline.engines` chooses
one): the base class, and the local engine."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["Engine", "LocalEngine"]


class Engine:
    """Yields a stage's output batches (see the module's documentation)."""

    name = "engine"

    def batches(self, stage: Any, ctx: Any, state: Any) -> Iterator[Any]:
        """Every output batch of ``stage`` (after its reduce), in a deterministic order."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the engine holds (a Ray instance it started)."""

    def describe(self) -> dict[str, Any]:
        """What the manifest records among the settings (never compared on resume)."""
        return {"engine": self.name}


class LocalEngine(Engine):
    """The stage's own batches, in this process."""

    name = "local"

    def batches(self, stage: Any, ctx: Any, state: Any) -> Iterator[Any]:
        return stage.batches(ctx, state)
