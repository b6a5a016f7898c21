"""A token classifier as ONNX, run with onnxruntime (``phisieve detect-onnx``).

:func:`export_onnx` writes a recognizer folder's model (from ``detect-train``) as ONNX
(:data:`ONNX_FILE`, float32) and, dynamically quantised to 8-bit integer weights by
onnxruntime, :data:`INT8_FILE`: a quarter of the size, and faster on CPU. It checks both
against the PyTorch model on windows of the notes it is given and records the largest
difference of probabilities and the share of tokens whose most likely label changed, in the
folder's ``phisieve.json`` (``onnx``).

:class:`OnnxLogits` runs one of them; the recognizer
(:class:`~phisieve.detect.recognizers.model.ModelRecognizer`) uses the 8-bit model on CPU when
the folder has it and onnxruntime is installed (the ``onnx`` extra), and PyTorch on CUDA. A
folder with the ONNX files needs no PyTorch weights to detect.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError

__all__ = ["ATTENTION", "INT8_FILE", "ONNX_FILE", "OPSET", "OnnxLogits", "available", "export_onnx"]

ONNX_FILE = "model.onnx"
"""The float32 ONNX model of a recognizer folder."""

INT8_FILE = "model.int8.onnx"
"""The same with 8-bit integer weights (onnxruntime's dynamic quantisation)."""

OPSET = 17
"""The ONNX opset the models are exported with."""

ATTENTION = "eager"
"""The transformers attention implementation the models are traced with."""


def available() -> bool:
    """Whether onnxruntime is installed."""
    import importlib.util

    return importlib.util.find_spec("onnxruntime") is not None


class OnnxLogits:
    """An ONNX token classifier in an onnxruntime session: logits of windows.

    Parameters
    ----------
    path
        The ``.onnx`` file.
    threads
        onnxruntime's threads within an operator (0: ``OMP_NUM_THREADS`` when set, as the
        ``--workers`` processes have it, else onnxruntime's default, every core).
    """

    def __init__(self, path: str | Path, threads: int = 0) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if not threads and os.environ.get("OMP_NUM_THREADS", "").isdigit():
            threads = int(os.environ["OMP_NUM_THREADS"])
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.path = Path(path)
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """Logits (windows x tokens x labels, float32)."""
        (logits,) = self.session.run(
            ["logits"],
            {
                "input_ids": input_ids.astype(np.int64),
                "attention_mask": attention_mask.astype(np.int64),
            },
        )
        return np.asarray(logits, dtype=np.float32)


def _export(model: Any, path: Path) -> None:
    import torch

    ids = torch.ones((2, 16), dtype=torch.long)
    axes = {0: "windows", 1: "tokens"}
    with warnings.catch_warnings():
        # The tracer's notes on shape-dependent Python branches of the attention code; the
        # export is checked against the model on other shapes below.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (ids, torch.ones_like(ids)),
            str(path),
            input_names=["input_ids", "attention_mask"],
            output_names=["logits"],
            dynamic_axes={"input_ids": axes, "attention_mask": axes, "logits": axes},
            opset_version=OPSET,
            dynamo=False,
        )


def _quantise(source: Path, target: Path) -> None:
    """``source`` with 8-bit integer weights, one scale per output channel, after
    onnxruntime's pre-processing (shapes inferred, graph optimised)."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    quiet = logging.getLogger()
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # its advice to pre-process, which this does
    # Beside the target, in the folder being written (a stage's output, committed whole).
    prepared = target.with_name(target.stem + ".prepared.onnx")
    try:
        quant_pre_process(source, prepared, skip_symbolic_shape=True)
        quantize_dynamic(prepared, target, per_channel=True, weight_type=QuantType.QInt8)
    finally:
        quiet.setLevel(level)
        prepared.unlink(missing_ok=True)


def export_onnx(
    folder: str | Path, texts: list[str] | None = None, *, int8: bool = True
) -> dict[str, Any]:
    """Write a recognizer folder's model as ONNX (:data:`ONNX_FILE`, and :data:`INT8_FILE`
    when ``int8``), checked against the PyTorch model.

    Parameters
    ----------
    folder
        A recognizer folder from ``detect-train`` (PyTorch weights and tokenizer); the ONNX
        files are written into it, and ``phisieve.json`` records them.
    texts
        Notes whose windows the check runs on (default: a few sentences of no patient).
    int8
        Also write the 8-bit model.

    Returns
    -------
    dict
        What ``phisieve.json`` records under ``onnx``: the opset, the attention
        implementation traced (:data:`ATTENTION`), the files and their bytes,
        and per file the largest difference of label probabilities and the share of tokens
        whose most likely label differs from PyTorch's, over ``windows`` windows.
    """
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from ..pipeline.progress import quiet_transformers
    from .windows import windows

    folder = Path(folder)
    meta_path = folder / "phisieve.json"
    if not meta_path.is_file():
        raise ConfigError(f"{folder} is not a phisieve recognizer (no phisieve.json)")
    meta = json.loads(meta_path.read_text())
    started = time.perf_counter()
    with quiet_transformers():
        # Traced, the default attention (PyTorch's scaled_dot_product_attention) keeps its
        # handling of fully masked rows (IsNaN and Where in every layer): about 15% of a
        # six-layer model's time on one core under onnxruntime. The eager implementation is
        # the same attention, masked by addition, and traces to the plain graph.
        model = AutoModelForTokenClassification.from_pretrained(
            folder, local_files_only=True, attn_implementation=ATTENTION
        )
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    _export(model, folder / ONNX_FILE)
    files = [ONNX_FILE]
    if int8:
        _quantise(folder / ONNX_FILE, folder / INT8_FILE)
        files.append(INT8_FILE)
    sample = texts or [
        "Seen by Dr. Smith on 3/4/2101; call 617-555-0100. Lives in Springfield.",
        "Pt is a 72 yo man. Family meeting with his daughter Anne. Plan unchanged. " * 8,
    ]
    win = windows(tokenizer, sample, int(meta["max_length"]), int(meta["stride"]))
    with torch.inference_mode():
        ref = (
            model(
                input_ids=torch.from_numpy(win.input_ids),
                attention_mask=torch.from_numpy(win.attention_mask),
            )
            .logits.softmax(-1)
            .numpy()
        )
    checked: dict[str, Any] = {}
    inside = win.inside
    for name in files:
        probs = _softmax(OnnxLogits(folder / name)(win.input_ids, win.attention_mask))
        checked[name] = {
            "bytes": (folder / name).stat().st_size,
            "max_abs_diff": float(np.abs(probs - ref)[inside].max()) if inside.any() else 0.0,
            "argmax_differs": float(
                (probs.argmax(-1) != ref.argmax(-1))[inside].mean() if inside.any() else 0.0
            ),
        }
    info = {"opset": OPSET, "attention": ATTENTION, "windows": len(win), "files": checked}
    meta["onnx"] = info
    meta_path.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return {**info, "seconds": time.perf_counter() - started}


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)
