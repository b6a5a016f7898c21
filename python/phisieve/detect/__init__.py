"""Direct identifiers: find names, dates, phone numbers... in notes (DESIGN.md §3).

* :mod:`phisieve.detect.run` — :func:`detect` (the recognizers combined, spans merged) and
  the ``detect`` stage;
* :mod:`phisieve.detect.recognizers` — rules, lists (deny lists and the built-in
  dictionaries), Presidio, Stanza and a trained model;
* :mod:`phisieve.detect.labels` — one map of gold, detect and surrogate labels to categories;
* :mod:`phisieve.detect.evaluate` — scores against gold spans;
* :mod:`phisieve.detect.cv` — patient-level cross-validation;
* :mod:`phisieve.detect.learnt` — deny lists grown from gold;
* :mod:`phisieve.detect.train` — ``detect-train``, a token-classification recognizer.
"""

from __future__ import annotations

from .._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        name: ".run"
        for name in (
            "RECOGNIZERS",
            "detect",
            "evaluate",
            "evaluate_corpus",
            "merge_spans",
            "read_word_list",
            "write_spans",
        )
    },
)
