"""Direct identifiers: find names, dates, phone numbers... in notes (DESIGN.md §3).

* :mod:`phisieve.detect.stage` — the stages ``detect``, ``detect-train``,
  ``detect-train-crf`` and ``learn-deny``: their options and inputs, light to import;
* :mod:`phisieve.detect.run` — :func:`find_spans` (the recognizers combined, spans merged:
  the ``detect`` stage's work, in memory) and :func:`evaluate`, scores against gold spans;
* :mod:`phisieve.detect.recognizers` — rules, lists (deny lists and the built-in
  dictionaries), Presidio, Stanza, the CRF and a trained model;
* :mod:`phisieve.detect.labels` — one map of gold, detect and surrogate labels to categories;
* :mod:`phisieve.detect.cv` — patient-level cross-validation;
* :mod:`phisieve.detect.learnt` — deny lists grown from gold;
* :mod:`phisieve.detect.train` — ``detect-train``, a token-classification recognizer;
* :mod:`phisieve.detect.crf_train` — ``detect-train-crf``, the CRF recognizer.
"""

from __future__ import annotations

from .._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        **{
            name: ".run"
            for name in (
                "evaluate",
                "evaluate_corpus",
                "find_spans",
                "merge_spans",
                "read_word_list",
            )
        },
        **{
            name: ".stage"
            for name in (
                "RECOGNIZERS",
                "DetectStage",
                "DetectTrainStage",
                "DetectTrainCrfStage",
                "DetectOnnxStage",
                "LearnDenyStage",
            )
        },
    },
)
