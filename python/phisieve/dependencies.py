"""Optional dependencies, in one place: which extra installs each, and one way to import them.

phisieve's core (ingest, index, detect with rules, lists and the CRF, surrogates, encode)
needs only its required dependencies. The rest is optional, by extra:

=================  =====================================================
extra              packages
=================  =====================================================
``torch``          torch, transformers, tokenizers, opacus, accelerate
``ner``            presidio-analyzer, spacy, stanza
``audit``          torch, transformers, scikit-learn, matplotlib
``ray``            ray[data]
=================  =====================================================

A feature imports what it needs with :func:`require` when it runs (never at module import,
so that the command line stays instant); a missing package raises
:class:`~phisieve.errors.MissingDependencyError` naming the package and the extra that
installs it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingDependencyError

__all__ = ["OPTIONAL", "require"]

OPTIONAL: dict[str, tuple[str, str]] = {
    "torch": ("torch", "torch"),
    "transformers": ("transformers", "torch"),
    "tokenizers": ("tokenizers", "torch"),
    "opacus": ("opacus", "torch"),
    "accelerate": ("accelerate", "torch"),
    "presidio_analyzer": ("presidio-analyzer", "ner"),
    "spacy": ("spacy", "ner"),
    "stanza": ("stanza", "ner"),
    "sklearn": ("scikit-learn", "audit"),
    "matplotlib": ("matplotlib", "audit"),
    "ray": ("ray[data]", "ray"),
}
"""Top-level module -> (the package to install, the phisieve extra that installs it)."""


def require(module: str) -> ModuleType:
    """Import ``module`` (``"torch"``, ``"transformers"``, ``"opacus.accountants"``...), an
    optional dependency.

    Raises
    ------
    MissingDependencyError
        When the package is not installed, naming it and the extra that installs it.
    KeyError
        When ``module`` is not an optional dependency (a programming error: required
        dependencies are imported directly).
    """
    package, extra = OPTIONAL[module.partition(".")[0]]
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if e.name is not None and e.name.partition(".")[0] != module.partition(".")[0]:
            raise  # the package is there; something it imports is broken: say so as it is
        raise MissingDependencyError(package, extra) from e
