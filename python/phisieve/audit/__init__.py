"""Audits: what a hospital measures before it trains on, or shares, a corpus or a model.

* :mod:`phisieve.audit.coverage` — how much of the gold PHI the protection covers, and what
  share of all tokens it costs, on annotated notes (``phisieve coverage``).
"""
