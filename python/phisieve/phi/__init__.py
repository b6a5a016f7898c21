"""Dummy PHI (DESIGN.md §7): keys (:mod:`phisieve.phi.secret`), the MIMIC-III placeholder
grammar (:mod:`phisieve.phi.placeholders`), keyed surrogates with one date shift per patient
(:mod:`phisieve.phi.surrogate`), gold spans turned back into placeholders
(:mod:`phisieve.phi.gold`), canaries: secrets planted to measure memorisation
(:mod:`phisieve.phi.canaries`), annotated notes re-filled with fresh surrogates, training data
for detection (:mod:`phisieve.phi.augment`), and the US Census name frequencies
(:mod:`phisieve.phi.census`). The stages ``keygen``, ``surrogate``, ``placeholders`` and
``canaries`` are declared, light to import, in :mod:`phisieve.phi.stage`."""

from __future__ import annotations

from .._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        name: ".stage"
        for name in ("CanariesStage", "KeygenStage", "PlaceholdersStage", "SurrogateStage")
    },
)
