"""The CRF weights of phisieve's ``crf`` recognizer, trained on the PhysioNet deid notes.

The weights are a work based on those notes, which PhysioNet distributes under GPL-2.0, so
this distribution is GPL-2.0-only (its ``LICENSE``); phisieve itself is Apache-2.0 and does
not include them. phisieve's ``crf`` recognizer (``phisieve detect``'s default) imports this
package and reads the folder :func:`crf_path` gives; nothing here imports phisieve.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["__version__", "crf_path"]

__version__ = "0.1.0"


def crf_path() -> Path:
    """The folder of the CRF trained on the PhysioNet deid dev notes.

    Returns
    -------
    pathlib.Path
        A folder of ``phisieve detect-train-crf``'s format: ``crf.crfsuite`` (the tagger,
        which sees the ``rules`` and ``lists`` spans), ``finder.crfsuite`` (the finder, over
        the words alone) and ``phisieve.json`` (the feature format, the training options and
        counts). phisieve refuses a folder whose format it does not read.
    """
    return Path(__file__).resolve().parent / "crf"
