"""A stage's statistics: counters that add up, so stats from batches or workers merge."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class Stats(dict[str, Any]):
    """What a stage counted while it worked: numbers add, nested counters merge.

    A stage's batch function adds to the ``Stats`` the runner hands it (``stats.add("filled",
    n)``); the runner merges the stats of every batch (and, on a cluster, of every worker)
    with :meth:`merge`, records them in the output's manifest and prints them.
    """

    def add(self, key: str, n: int | float = 1) -> None:
        """Add ``n`` to the counter ``key`` (created at 0)."""
        self[key] = self.get(key, 0) + n

    def count(self, key: str, counts: Mapping[str, int | float]) -> None:
        """Add every counter of ``counts`` to the nested counters ``key``."""
        inner = self.setdefault(key, {})
        for k, v in counts.items():
            inner[k] = inner.get(k, 0) + v

    def merge(self, other: Mapping[str, Any]) -> Stats:
        """Add ``other`` into these stats (in place; returned for chaining)."""
        _merge_into(self, other)
        return self


def _merge_into(into: dict[str, Any], other: Mapping[str, Any]) -> None:
    for key, value in other.items():
        if key not in into:
            into[key] = _copy(value)
            continue
        mine = into[key]
        if isinstance(mine, bool) or isinstance(value, bool):
            if mine != value:
                raise ValueError(f"stats {key!r}: cannot merge {mine!r} and {value!r}")
        elif isinstance(mine, (int, float)) and isinstance(value, (int, float)):
            into[key] = mine + value
        elif isinstance(mine, dict) and isinstance(value, Mapping):
            _merge_into(mine, value)
        elif mine != value:
            raise ValueError(f"stats {key!r}: cannot merge {mine!r} and {value!r}")


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    return value
