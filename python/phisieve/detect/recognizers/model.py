"""The trained recognizer of ``detect --recognizers ...,model:DIR``: a BIO token classifier
(``phisieve detect-train``, :mod:`phisieve.detect.train`) run over notes in overlapping
windows, batched, on CUDA when available; its spans are merged with the other recognizers'.

Training weighs the ``O`` class by ``o_weight`` (0.1); inference adds ``log(1 / o_weight)``
back to the ``O`` logit, undoing that weight. Windows without PHI were also kept only at
``negative_share``, which that correction does not undo: the model still leans towards PHI,
and its scores rank spans but are not calibrated probabilities.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ConfigError
from ...pipeline.progress import quiet_transformers as _quiet_loading
from ..labels import LABELS
from ..windows import Windows, windows

__all__ = ["FORMAT", "ModelRecognizer"]

FORMAT = "phisieve-recognizer/1"
"""The ``format`` of a recognizer folder's ``phisieve.json``."""


def _device(device: str | None) -> Any:
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


# --- inference --------------------------------------------------------------------------------

_WORD = re.compile(r"\w")


class ModelRecognizer:
    """A model trained by :func:`train_recognizer`, as a recognizer of ``detect``.

    Parameters
    ----------
    path
        The model folder (read locally only).
    device
        Default CUDA when available (bf16 autocast there).
    batch_size
        Windows per forward pass.
    max_length, stride
        Window length and overlap in tokens (:mod:`phisieve.detect.windows`); default those
        of training (``phisieve.json``).
    """

    CHUNK_CHARS = 1 << 20
    """Texts are tokenised and decoded in groups of about this many characters, so that a
    call over thousands of long notes holds one group's windows at a time."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        device: str | None = None,
        batch_size: int = 64,
        max_length: int | None = None,
        stride: int | None = None,
    ) -> None:
        from transformers import AutoModelForTokenClassification, AutoTokenizer

        path = Path(path)
        meta = path / "phisieve.json"
        if not meta.exists():
            raise ConfigError(
                f"{path} is not a phisieve recognizer (no phisieve.json; "
                "train one with `phisieve detect-train`)"
            )
        self.meta = json.loads(meta.read_text())
        if self.meta.get("format") != FORMAT:
            raise ConfigError(f"{path} holds a recognizer of another format")
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        with _quiet_loading():
            self.model = AutoModelForTokenClassification.from_pretrained(
                path, local_files_only=True
            )
        self.device = _device(device)
        self.model.to(self.device).eval()
        self.batch_size = batch_size
        self.max_length = int(max_length or self.meta["max_length"])
        self.stride = int(self.meta["stride"] if stride is None else stride)
        self.labels = [self.model.config.id2label[i] for i in range(len(LABELS))]
        self.o_bias = -math.log(float(self.meta.get("o_weight", 1.0)))

    def _probabilities(self, win: Windows) -> np.ndarray:
        import torch

        ids = torch.from_numpy(win.input_ids)
        mask = torch.from_numpy(win.attention_mask)
        out = []
        amp = self.device.type == "cuda"
        with torch.inference_mode():
            for i in range(0, len(ids), self.batch_size):
                with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=amp):
                    logits = self.model(
                        input_ids=ids[i : i + self.batch_size].to(self.device),
                        attention_mask=mask[i : i + self.batch_size].to(self.device),
                    ).logits.float()
                logits[..., 0] += self.o_bias
                out.append(logits.softmax(-1).cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 0, len(LABELS)), np.float32)

    def __call__(self, texts: list[str | None]) -> list[list[tuple[int, int, str, float]]]:
        """Spans of each text: (start, end, category, score) in code points; the score is the
        mean probability of the predicted labels of its tokens."""
        clean = [t or "" for t in texts]
        result: list[list[tuple[int, int, str, float]]] = []
        group: list[str] = []
        size = 0
        for text in clean:
            if group and size + len(text) > self.CHUNK_CHARS:
                result.extend(self._group(group))
                group, size = [], 0
            group.append(text)
            size += len(text)
        if group:
            result.extend(self._group(group))
        return result

    def _group(self, clean: list[str]) -> list[list[tuple[int, int, str, float]]]:
        result: list[list[tuple[int, int, str, float]]] = [[] for _ in clean]
        if not any(clean):
            return result
        win = windows(self.tokenizer, clean, self.max_length, self.stride)
        probs = self._probabilities(win)
        # Each token of a note takes the prediction of the window where it lies farthest
        # from the window's edges (windows overlap by `stride` tokens).
        best: list[dict[tuple[int, int], tuple[int, int, float]]] = [{} for _ in clean]
        for w, doc in enumerate(win.doc.tolist()):
            inside = np.flatnonzero(win.inside[w]).tolist()
            if not inside:
                continue
            first, last = inside[0], inside[-1]
            p = probs[w]
            arg = p.argmax(-1)
            spans = win.offsets[w].tolist()
            for i in inside:
                start, end = spans[i]
                if end <= start:
                    continue
                margin = min(i - first, last - i)
                key = (start, end)
                kept = best[doc].get(key)
                if kept is None or margin > kept[0]:
                    best[doc][key] = (margin, int(arg[i]), float(p[i, arg[i]]))
        for doc, tokens in enumerate(best):
            result[doc] = self._spans(clean[doc], sorted(tokens.items()))
        return result

    def _spans(
        self, text: str, tokens: list[tuple[tuple[int, int], tuple[int, int, float]]]
    ) -> list[tuple[int, int, str, float]]:
        spans: list[tuple[int, int, str, float]] = []
        current: list[Any] | None = None
        for (start, end), (_, label_id, prob) in tokens:
            label = self.labels[label_id]
            if label == "O":
                current = self._close(text, spans, current)
                continue
            tag, cat = label.split("-", 1)
            joined = (
                current is not None
                and current[2] == cat
                and (tag == "I" or start <= current[1] + 1)
            )
            if joined and current is not None:
                current[1] = end
                current[3].append(prob)
            else:
                self._close(text, spans, current)
                current = [start, end, cat, [prob]]
        self._close(text, spans, current)
        return spans

    @staticmethod
    def _close(text: str, spans: list[Any], current: list[Any] | None) -> None:
        if current is None:
            return None
        start, end, cat, probs = current
        # Whole words: a hit on "##son" covers "Johnson".
        while start > 0 and _WORD.match(text[start - 1]):
            start -= 1
        while end < len(text) and _WORD.match(text[end]):
            end += 1
        spans.append((start, end, cat, float(np.mean(probs))))
        return None
