"""Audits: what a hospital measures before it trains on, or shares, a corpus or a model.

* :mod:`phisieve.audit.coverage` — how much of the gold PHI the protection covers, and what
  share of all tokens it costs, on annotated notes (``phisieve coverage``).
* :mod:`phisieve.audit.split` — documents split by patient into members, reference and
  held-out patients (``phisieve split``).
* :mod:`phisieve.audit.canaries` — secret-bearing canary sentences inserted into chosen
  patients' notes (``phisieve canaries``).
* :mod:`phisieve.audit.run` — the privacy audit of a trained model: identifier prediction,
  graded memorisation, membership inference, model inversion, canary exposure
  (``phisieve audit``), with :mod:`phisieve.audit.metrics` (the measures) and
  :mod:`phisieve.audit.report` (``audit.json`` → ``index.html``, ``--compare``).

The model-facing parts need the ``torch`` and ``audit`` extras; they are imported on use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .report import compare_reports
    from .run import AuditResult, audit, read_audit
    from .split import split

__all__ = ["AuditResult", "audit", "compare_reports", "read_audit", "split"]


def __getattr__(name: str) -> Any:
    if name in ("audit", "AuditResult", "read_audit"):
        from . import run

        return getattr(run, name)
    if name == "compare_reports":
        from .report import compare_reports

        return compare_reports
    if name == "split":
        from .split import split

        return split
    raise AttributeError(name)
