"""A synthetic MIMIC-III-style corpus (``phisieve synth``, :func:`phisieve.api.synth`): a pure
function of its seed."""

from __future__ import annotations

from .._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {name: ".generate" for name in ("MIMIC_COLUMNS", "SYNTH", "synth_batches")},
)
