"""Dummy PHI (DESIGN.md §7): keys (:mod:`phisieve.phi.secret`), the MIMIC-III placeholder
grammar (:mod:`phisieve.phi.placeholders`), keyed surrogates with one date shift per patient
(:mod:`phisieve.phi.surrogate`), gold spans turned back into placeholders
(:mod:`phisieve.phi.gold`), and canaries: secrets planted to measure memorisation
(:mod:`phisieve.phi.canaries`)."""
