"""The privacy audit: what a hospital measures before it shares a model.

The data an audit needs is made by data stages elsewhere: ``phisieve split``
(:mod:`phisieve.corpus.split`) and ``phisieve canaries`` (:mod:`phisieve.phi.canaries`).

* :mod:`phisieve.audit.stage` — the ``audit`` and ``audit-compare`` stages (``phisieve
  audit``, ``--compare``): their options, declared without importing what they run;
* :mod:`phisieve.audit.run` — the privacy audit of a trained model: identifier prediction,
  graded memorisation, membership inference, model inversion, canary exposure, with
  :mod:`phisieve.audit.metrics` (the measures) and :mod:`phisieve.audit.report`
  (``audit.json`` → ``index.html``, ``--compare``);
* :mod:`phisieve.audit.epsilon` — a DP claim checked: the TPR (ε, δ) allows at each FPR, and
  the one-run lower bound on ε from canary patients planted by a coin.

The model-facing parts need the ``torch`` and ``audit`` extras; they are imported on use.
"""

from __future__ import annotations

from .._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AuditStage": ".stage",
        "AuditCompareStage": ".stage",
        "read_audit": ".run",
        "compare_reports": ".report",
    },
)
