"""The Stanza recognizer: Stanza's neural NER over models the user has downloaded.

Stanza's models are never downloaded here (``download_method=None``): when they are missing,
:class:`StanzaRecognizer` raises a :class:`~phisieve.errors.ConfigError` that names the
command to run once, on a machine with network access. Any English NER package works: the
default (OntoNotes, with PERSON, GPE, FAC, ORG, DATE...) or a clinical one such as the
``mimic`` package's ``i2b2`` model. Entity types that are not PHI (the i2b2 PROBLEM, TEST and
TREATMENT) are dropped. Notes go through ``bulk_process`` in batches, and long notes in
overlapping windows (as for Presidio).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...dependencies import require
from ...errors import ConfigError
from .presidio import windows

__all__ = ["LABELS", "StanzaRecognizer", "doc_spans", "download_command", "load_pipeline"]

LABELS = {
    "PERSON": "NAME",
    "PER": "NAME",
    "GPE": "LOCATION",
    "LOC": "LOCATION",
    "FAC": "LOCATION",
    "ORG": "ORGANIZATION",
    "DATE": "DATE",
    "NORP": "NRP",
}
"""Stanza entity type -> phisieve label; types not listed (TIME, CARDINAL, PROBLEM...) are
not identifiers and are dropped."""


def download_command(lang: str = "en", package: str | None = None, ner: str | None = None) -> str:
    """The one-off command that downloads the Stanza models :class:`StanzaRecognizer` needs."""
    args = [repr(lang)]
    if package:
        args.append(f"package={package!r}")
    processors = f"{{'ner': {ner!r}}}" if ner else "'tokenize,ner'"
    args.append(f"processors={processors}")
    return f'python -c "import stanza; stanza.download({", ".join(args)})"'


def doc_spans(doc: Any, offset: int = 0) -> list[tuple[int, int, str, float]]:
    """``(start, end, label, score)`` of a Stanza ``Document``'s PHI entities, in code points
    shifted by ``offset`` (Stanza's character offsets are Python string indices). Stanza gives
    no confidence: the score is 1."""
    out = []
    for ent in doc.ents:
        label = LABELS.get(ent.type)
        if label is None:
            continue
        out.append((offset + ent.start_char, offset + ent.end_char, label, 1.0))
    return out


def load_pipeline(
    lang: str,
    processors: str | dict[str, Any],
    command: str,
    *,
    package: str | None = None,
    model_dir: str | Path | None = None,
    use_gpu: bool = False,
) -> Any:
    """A Stanza pipeline over models on disk, never downloaded: when they are missing, a
    :class:`~phisieve.errors.ConfigError` names ``command``, the one-off download."""
    require("stanza")
    import stanza

    logging.getLogger("stanza").setLevel(logging.ERROR)
    kwargs: dict[str, Any] = {
        "processors": processors,
        "download_method": None,
        "use_gpu": use_gpu,
        "logging_level": "ERROR",
    }
    if package:
        kwargs["package"] = package
    if model_dir is not None:
        kwargs["dir"] = str(model_dir)
    try:
        return stanza.Pipeline(lang, **kwargs)
    except (OSError, ValueError, KeyError, stanza.pipeline.core.PipelineRequirementsException):
        raise ConfigError(
            "the Stanza models are not installed, and phisieve never downloads them: "
            f"run `{command}` once (it needs network access), or point the models folder "
            "(model_dir, --stanza-dir) or STANZA_RESOURCES_DIR at a copy"
        ) from None


class StanzaRecognizer:
    """Stanza NER (``tokenize,ner``) over locally installed models.

    Parameters
    ----------
    lang, package, ner
        Stanza language, package (e.g. ``mimic``) and NER model (e.g. ``i2b2``); ``None``
        uses Stanza's defaults.
    model_dir
        Stanza's resources folder (default: ``$STANZA_RESOURCES_DIR`` or ``~/stanza_resources``).
    use_gpu
        Run on the GPU when one is available.
    batch_size, window, overlap
        Notes per ``bulk_process`` call; notes longer than ``window`` characters are processed
        in windows overlapping by ``overlap``.
    """

    def __init__(
        self,
        lang: str = "en",
        *,
        package: str | None = None,
        ner: str | None = None,
        model_dir: str | Path | None = None,
        use_gpu: bool = False,
        batch_size: int = 32,
        window: int = 20_000,
        overlap: int = 500,
    ) -> None:
        processors = {"tokenize": package or "default", "ner": ner} if ner else "tokenize,ner"
        self.pipeline = load_pipeline(
            lang,
            processors,
            download_command(lang, package, ner),
            package=package,
            model_dir=model_dir,
            use_gpu=use_gpu,
        )
        self.batch_size = batch_size
        self.window, self.overlap = window, overlap

    def __call__(self, texts: Iterable[str | None]) -> list[list[tuple[int, int, str, float]]]:
        """Per text: ``(start, end, label, score)`` in code points, sorted, without the
        duplicates window overlaps make."""
        import stanza

        texts = list(texts)
        pieces = [
            (i, offset, piece)
            for i, text in enumerate(texts)
            for offset, piece in windows(text or "", self.window, self.overlap)
            if piece.strip()
        ]
        out: list[set[tuple[int, int, str, float]]] = [set() for _ in texts]
        for b in range(0, len(pieces), self.batch_size):
            chunk = pieces[b : b + self.batch_size]
            docs = self.pipeline.bulk_process([stanza.Document([], text=p) for _, _, p in chunk])
            for (i, offset, _), doc in zip(chunk, docs, strict=True):
                out[i].update(doc_spans(doc, offset))
        return [sorted(s) for s in out]
