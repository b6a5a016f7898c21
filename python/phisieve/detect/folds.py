"""Patients cut into folds: the unit of patient-level cross-validation
(:mod:`phisieve.detect.cv`) and of stacking's out-of-fold scores (:mod:`phisieve.detect.
stacking`)."""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import ConfigError

__all__ = ["folds"]


def folds(patients: Iterable[str], k: int, seed: int = 0) -> dict[str, int]:
    """The fold (0 .. k-1) of every patient: ids ordered by a keyed hash of ``seed``, then cut
    into ``k`` parts whose sizes differ by at most one. A pure function of the set of ids."""
    from ..corpus.split import assign

    ids = sorted(set(patients))
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        raise ConfigError(f"--cv needs at least 2 folds, not {k!r}")
    if len(ids) < k:
        raise ConfigError(f"{k} folds need at least {k} patients; the notes have {len(ids)}")
    parts = assign(ids, {str(i): 1.0 / k for i in range(k)}, seed)
    return {p: int(f) for p, f in parts.items()}
