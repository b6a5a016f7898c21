"""phisieve's stacked CRF and its token classifier, trained on the PhysioNet deid notes.

The weights are a work based on those notes, which PhysioNet distributes under GPL-2.0, so
this distribution is GPL-2.0-only (its ``LICENSE``); phisieve itself is Apache-2.0 and does
not include them. ``phisieve detect --recognizers rules,lists,crf,model`` imports this
package and reads the folder :func:`stacked_path` gives; nothing here imports phisieve.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["__version__", "stacked_path"]

__version__ = "0.1.0"


def stacked_path() -> Path:
    """The folder of the stacked CRF trained on the PhysioNet deid dev notes.

    Returns
    -------
    pathlib.Path
        A folder of ``phisieve detect-train-crf --base``'s format: ``crf.crfsuite`` (the
        tagger, which also reads the model's probabilities), ``finder.crfsuite``,
        ``phisieve.json``, and ``model/``: the token classifier (MiniLM-L6, or its first layer
        only, fine-tuned on the same notes) as 8-bit ONNX (``model.int8.onnx``), its
        tokenizer and configuration.
    """
    return Path(__file__).resolve().parent / "stacked"
