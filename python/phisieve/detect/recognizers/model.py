"""The trained recognizer of ``detect --recognizers ...,model:DIR``: a BIO token classifier
(``phisieve detect-train``, :mod:`phisieve.detect.train`) run over notes in overlapping
windows, batched, on CUDA when available; its spans are merged with the other recognizers'.

Training weighs the ``O`` class by ``o_weight`` (0.1); inference adds ``log(1 / o_weight)``
back to the ``O`` logit, undoing that weight. Windows without PHI were also kept only at
``negative_share``, which that correction does not undo: the model still leans towards PHI,
and its scores rank spans but are not calibrated probabilities.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ...errors import ConfigError, MissingDependencyError
from ...pipeline.progress import quiet_transformers as _quiet_loading
from ..labels import CATEGORIES, LABELS
from ..onnx import INT8_FILE, ONNX_FILE, OnnxLogits, available
from ..windows import Windows, windows

__all__ = ["BACKENDS", "BATCH_SIZES", "FORMAT", "TOKEN_SCORES", "ModelRecognizer"]

FORMAT = "phisieve-recognizer/1"
"""The ``format`` of a recognizer folder's ``phisieve.json``."""


def _device(device: str | None) -> Any:
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


TOKEN_SCORES = {
    "row": pl.Int64,
    "start": pl.Int64,
    "end": pl.Int64,
    "p": pl.Float64,
    "label": pl.String,
}
"""The table of :meth:`ModelRecognizer.token_scores`."""


@dataclass
class Tokens:
    """The tokens of a group of notes, sorted by note and offsets, each with the label
    probabilities of the window chosen for it (``probs``: tokens x :data:`LABELS`)."""

    doc: np.ndarray
    start: np.ndarray
    end: np.ndarray
    probs: np.ndarray

    @classmethod
    def empty(cls, labels: int) -> Tokens:
        none = np.zeros(0, np.int64)
        return cls(none, none, none, np.zeros((0, labels), np.float32))


# --- inference --------------------------------------------------------------------------------

_WORD = re.compile(r"\w")


BACKENDS = ("auto", "torch", "onnx", "onnx-int8")
"""How :class:`ModelRecognizer` runs its model: PyTorch, or onnxruntime over the folder's
float32 or 8-bit ONNX model (:mod:`phisieve.detect.onnx`); ``auto``: PyTorch on CUDA, else the
8-bit model when the folder has it and onnxruntime is installed, else the float32 ONNX model
likewise, else PyTorch."""

ONNX_FILES = {"onnx-int8": INT8_FILE, "onnx": ONNX_FILE}
"""The file of each onnxruntime backend (:mod:`phisieve.detect.onnx`), in the order ``auto``
prefers them."""


@dataclass
class _Runtime:
    """What a :class:`ModelRecognizer` loads on first use."""

    tokenizer: Any
    backend: str
    model: Any
    session: Any
    device: Any
    batch_size: int


BATCH_SIZES = {"torch": 64, "onnx": 8, "onnx-int8": 1}
"""Windows per forward pass by backend, unless given.

* ``onnx-int8``: one window. onnxruntime's dynamic quantisation gives the activations of a
  whole batch one 8-bit scale, so in a batch of several windows a note's scores depend on the
  windows of other notes beside it (measured: labels changed), and with them on how notes are
  partitioned among calls and workers. One window a batch makes a note's scores a function of
  the note alone, at about 8% of the speed of batches of 8 (``benches/RESULTS.md``).
* ``onnx`` (float32): 8 windows, about a fifth faster than 64 on one CPU core, likely because
  8 windows' hidden states (8 x 128 x 384 floats for MiniLM, 1.5 MiB) stay in a core's L2
  cache between operators and 64 windows' (12 MiB) do not.
* ``torch``: 64, for CUDA."""


class ModelRecognizer:
    """A model trained by :func:`train_recognizer`, as a recognizer of ``detect``.

    Parameters
    ----------
    path
        The model folder (read locally only).
    device
        Default CUDA when available (bf16 autocast there).
    batch_size
        Windows per forward pass (default by backend, :data:`BATCH_SIZES`). The windows are
        batched by length, longest first, and each batch is cut to its longest window (the
        last window of a note is often short).
    max_length, stride
        Window length and overlap in tokens (:mod:`phisieve.detect.windows`); default those
        of training (``phisieve.json``).
    backend
        One of :data:`BACKENDS`.
    threads
        onnxruntime's threads (0: every core); PyTorch keeps its own setting.

    The folder and what its backend needs are checked here; the tokenizer and the model are
    loaded on first use, and never pickled: ``detect --workers N`` loads them in each worker
    only, not in the process that hands out the notes (on a GPU machine that saved 14 s, a
    CUDA context and PyTorch's imports, in a run of 43,500 notes: ``benches/RESULTS.md``).
    """

    CHUNK_CHARS = 1 << 20
    """Texts are tokenised and decoded in groups of about this many characters, so that a
    call over thousands of long notes holds one group's windows at a time."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        device: str | None = None,
        batch_size: int | None = None,
        max_length: int | None = None,
        stride: int | None = None,
        backend: str = "auto",
        threads: int = 0,
    ) -> None:
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
        if backend not in BACKENDS:
            raise ConfigError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
        self.path = path
        config = json.loads((path / "config.json").read_text())
        id2label = {int(k): v for k, v in config["id2label"].items()}
        self.labels = [id2label[i] for i in range(len(LABELS))]
        self.max_length = int(max_length or self.meta["max_length"])
        self.stride = int(self.meta["stride"] if stride is None else stride)
        self.o_bias = -math.log(float(self.meta.get("o_weight", 1.0)))
        self._check(backend)
        self._options = {
            "backend": backend,
            "device": device,
            "threads": threads,
            "batch_size": batch_size,
        }
        self._runtime: _Runtime | None = None

    def _check(self, backend: str) -> None:
        """What the backend needs, checked without importing or loading anything: the
        packages and the model file."""
        if importlib.util.find_spec("transformers") is None:
            raise MissingDependencyError("transformers", "torch")
        if backend == "torch" and importlib.util.find_spec("torch") is None:
            raise MissingDependencyError("torch", "torch")
        if backend in ONNX_FILES:
            if not (self.path / ONNX_FILES[backend]).is_file():
                raise ConfigError(
                    f"{self.path} has no {ONNX_FILES[backend]} "
                    "(export it with `phisieve detect-onnx`)"
                )
            if not available():
                raise ConfigError(
                    f"the backend {backend} needs onnxruntime: pip install 'phisieve[onnx]'"
                )

    def _load(self) -> _Runtime:
        """The tokenizer and the model, loaded on first use (in the process that runs them:
        ``detect --workers N`` loads them in each worker, never in the process that hands
        out the notes)."""
        if self._runtime is None:
            self._runtime = self._open(**self._options)
        return self._runtime

    def __getstate__(self) -> dict[str, Any]:
        # A worker process loads the tokenizer and the model again, from the folder.
        state = dict(self.__dict__)
        state["_runtime"] = None
        return state

    def _open(
        self, backend: str, device: str | None, threads: int, batch_size: int | None
    ) -> _Runtime:
        """The backend chosen (:data:`BACKENDS`) with its PyTorch model or onnxruntime
        session, and the tokenizer."""
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
        if backend == "auto":
            has_torch = importlib.util.find_spec("torch") is not None
            cuda = has_torch and _device(device).type == "cuda"
            backend = "torch"
            if not cuda and available():
                present = [b for b in ONNX_FILES if (self.path / ONNX_FILES[b]).is_file()]
                backend = present[0] if present else "torch"
            self._check(backend)
        model = session = run_on = None
        if backend == "torch":
            from transformers import AutoModelForTokenClassification

            with _quiet_loading():
                model = AutoModelForTokenClassification.from_pretrained(
                    self.path, local_files_only=True
                )
            run_on = _device(device)
            model.to(run_on).eval()
        else:
            session = OnnxLogits(self.path / ONNX_FILES[backend], threads)
        return _Runtime(
            tokenizer, backend, model, session, run_on, int(batch_size or BATCH_SIZES[backend])
        )

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer (loaded on first use)."""
        return self._load().tokenizer

    @property
    def backend(self) -> str:
        """The backend the model runs on (:data:`BACKENDS`, ``auto`` resolved)."""
        return self._load().backend

    @property
    def model(self) -> Any:
        """The PyTorch model (``None`` on an onnxruntime backend)."""
        return self._load().model

    @property
    def session(self) -> Any:
        """The onnxruntime session (``None`` on PyTorch)."""
        return self._load().session

    @property
    def device(self) -> Any:
        """The PyTorch device the model runs on (``None`` on an onnxruntime backend)."""
        return self._load().device

    @property
    def batch_size(self) -> int:
        """Windows per forward pass."""
        return self._load().batch_size

    def _logits(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        run = self._load()
        if run.session is not None:
            return run.session(ids, mask)
        import torch

        amp = run.device.type == "cuda"
        with torch.inference_mode():
            with torch.autocast(run.device.type, dtype=torch.bfloat16, enabled=amp):
                logits = run.model(
                    input_ids=torch.from_numpy(ids).to(run.device),
                    attention_mask=torch.from_numpy(mask).to(run.device),
                ).logits
            return logits.float().cpu().numpy()

    def _probabilities(self, win: Windows) -> np.ndarray:
        """Label probabilities of every window's tokens (zero on padding), the ``O`` logit
        raised by :attr:`o_bias`."""
        n, width = win.input_ids.shape if len(win) else (0, 0)
        out = np.zeros((n, width, len(LABELS)), np.float32)
        lengths = win.attention_mask.sum(1) if n else np.zeros(0, np.int64)
        order = np.argsort(-lengths, kind="stable")
        for i in range(0, n, self.batch_size):
            batch = np.sort(order[i : i + self.batch_size])
            cut = max(1, int(lengths[batch].max()))
            logits = self._logits(win.input_ids[batch, :cut], win.attention_mask[batch, :cut])
            logits[..., 0] += self.o_bias
            logits -= logits.max(-1, keepdims=True)
            e = np.exp(logits)
            out[batch, :cut] = e / e.sum(-1, keepdims=True)
        return out

    def _groups(self, texts: list[str | None]) -> Iterator[list[str]]:
        """``texts`` (``None`` as ``""``) in groups of about :attr:`CHUNK_CHARS`
        characters."""
        group: list[str] = []
        size = 0
        for text in texts:
            text = text or ""
            if group and size + len(text) > self.CHUNK_CHARS:
                yield group
                group, size = [], 0
            group.append(text)
            size += len(text)
        if group:
            yield group

    def _tokens(self, clean: list[str]) -> Tokens:
        """Every token of the notes ``clean`` with the probabilities of the window where it
        lies farthest from the window's edges (windows overlap by ``stride`` tokens; among
        equals, the first window)."""
        if not any(clean):
            return Tokens.empty(len(LABELS))
        win = windows(self.tokenizer, clean, self.max_length, self.stride)
        probs = self._probabilities(win)
        w, t = np.nonzero(win.inside)
        first = np.argmax(win.inside, axis=1)
        last = win.inside.shape[1] - 1 - np.argmax(win.inside[:, ::-1], axis=1)
        margin = np.minimum(t - first[w], last[w] - t)
        start, end = win.offsets[w, t, 0], win.offsets[w, t, 1]
        doc = win.doc[w]
        keep = end > start
        w, t, margin, start, end, doc = (a[keep] for a in (w, t, margin, start, end, doc))
        order = np.lexsort((w, -margin, end, start, doc))
        doc, start, end = doc[order], start[order], end[order]
        new = np.ones(len(order), dtype=bool)
        new[1:] = (np.diff(doc) != 0) | (np.diff(start) != 0) | (np.diff(end) != 0)
        chosen = order[new]
        return Tokens(
            doc[new].astype(np.int64),
            start[new].astype(np.int64),
            end[new].astype(np.int64),
            probs[w[chosen], t[chosen]].astype(np.float32),
        )

    def __call__(self, texts: list[str | None]) -> list[list[tuple[int, int, str, float]]]:
        """Spans of each text: (start, end, category, score) in code points; the score is the
        mean probability of the predicted labels of its tokens."""
        result: list[list[tuple[int, int, str, float]]] = []
        for group in self._groups(texts):
            tokens = self._tokens(group)
            bounds = np.searchsorted(tokens.doc, np.arange(len(group) + 1))
            label = tokens.probs.argmax(-1) if len(tokens.doc) else np.zeros(0, np.int64)
            best = (
                np.take_along_axis(tokens.probs, label[:, None], -1)[:, 0] if len(label) else label
            )
            for d, text in enumerate(group):
                a, b = bounds[d], bounds[d + 1]
                result.append(
                    self._spans(
                        text,
                        tokens.start[a:b].tolist(),
                        tokens.end[a:b].tolist(),
                        label[a:b].tolist(),
                        best[a:b].tolist(),
                    )
                )
        return result

    def token_scores(self, texts: list[str | None]) -> pl.DataFrame:
        """Each token of ``texts``, with what the model makes of it: ``row`` (the text's
        index), ``start``, ``end`` (code points), ``p`` (its PHI probability, 1 - P(O)) and
        ``label`` (the category of highest probability, B- and I- summed). What the stacked
        CRF reads (:mod:`phisieve.detect.stacking`)."""
        parts = []
        offset = 0
        n_cat = len(CATEGORIES)
        for group in self._groups(texts):
            tokens = self._tokens(group)
            per_cat = tokens.probs[:, 1:].reshape(-1, n_cat, 2).sum(-1)
            parts.append(
                pl.DataFrame(
                    {
                        "row": tokens.doc + offset,
                        "start": tokens.start,
                        "end": tokens.end,
                        "p": 1.0 - tokens.probs[:, 0].astype(np.float64),
                        "label": pl.Series(CATEGORIES, dtype=pl.String).gather(
                            per_cat.argmax(-1) if len(per_cat) else np.zeros(0, np.int64)
                        ),
                    },
                    schema=TOKEN_SCORES,
                )
            )
            offset += len(group)
        return pl.concat(parts) if parts else pl.DataFrame(schema=TOKEN_SCORES)

    def _spans(
        self,
        text: str,
        starts: list[int],
        ends: list[int],
        label_ids: list[int],
        probs: list[float],
    ) -> list[tuple[int, int, str, float]]:
        spans: list[tuple[int, int, str, float]] = []
        current: list[Any] | None = None
        for start, end, label_id, prob in zip(starts, ends, label_ids, probs, strict=True):
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
