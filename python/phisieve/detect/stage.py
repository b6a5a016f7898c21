"""The detection stages, declared: ``detect``, ``detect-train``, ``detect-train-crf`` and
``learn-deny``, their options and inputs.

This module imports nothing heavier than the standard library, so that the command line's
``--help`` and option parsing stay instant; a stage reaches its algorithms
(:mod:`phisieve.detect.run`, :mod:`~phisieve.detect.train`, :mod:`~phisieve.detect.crf_train`,
:mod:`~phisieve.detect.learnt`) when it runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._lazy import LazyModule
from ..errors import ConfigError
from ..pipeline.options import option
from ..pipeline.stage import (
    FILE,
    FOLDER,
    PATH,
    SOURCE,
    BuildStage,
    Context,
    Input,
    MapStage,
    Output,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from ..pipeline.stats import Stats

run = LazyModule(".run", __package__)
train = LazyModule(".train", __package__)
crf_train = LazyModule(".crf_train", __package__)
learnt = LazyModule(".learnt", __package__)
stacking = LazyModule(".stacking", __package__)

__all__ = [
    "DEFAULT_RECOGNIZERS",
    "RECOGNIZERS",
    "RECOGNIZERS_HELP",
    "STACKING_OPTIONS",
    "STANZA_HELP",
    "CrfTrainOptions",
    "DetectOnnxOptions",
    "DetectOnnxStage",
    "DetectOptions",
    "DetectStage",
    "DetectTrainCrfStage",
    "DetectTrainOptions",
    "DetectTrainStage",
    "LearnDenyOptions",
    "LearnDenyStage",
    "check_crf_options",
    "check_options",
    "check_recognizers",
    "parse_recognizers",
    "parse_thresholds",
    "stanza_options",
]

# --------------------------------------------------------------------------------------------
# detect

RECOGNIZERS = ("rules", "lists", "crf", "presidio", "stanza", "model")
"""Recognizer names: ``presidio`` and ``stanza`` need the ``ner`` extra and installed models;
``model:DIR`` is a folder from ``phisieve detect-train`` and needs the ``torch`` extra;
``crf`` is the CRF trained on the PhysioNet deid notes (the distribution
``phisieve-models-physionet``), ``crf:DIR`` one from ``detect-train-crf``. A bare ``model``
is the stacked CRF trained on those notes (the optional distribution
``phisieve-models-physionet-stacked``): with ``crf``, that CRF, which runs its model itself;
alone, its model's spans."""

DEFAULT_RECOGNIZERS = ("rules", "lists", "crf")
"""What ``phisieve detect`` runs unless told otherwise. ``crf`` needs the distribution
``phisieve-models-physionet`` (:func:`phisieve.detect.run.require_models`); ``rules,lists``
needs nothing more than phisieve."""


def _kind(name: str) -> str:
    """The recognizer a name selects: ``model:DIR`` -> ``model``, ``crf:DIR`` -> ``crf``."""
    return name.split(":", 1)[0] if name.startswith(("model:", "crf:")) else name


def check_recognizers(
    recognizers: Iterable[str], min_score: float | dict[str, float]
) -> dict[str, float]:
    """The per-recognizer thresholds; unknown recognizers (or thresholds naming one) refused."""
    recognizers = list(recognizers)
    thresholds = dict(min_score) if isinstance(min_score, dict) else {"*": float(min_score)}
    if bad := [k for k in thresholds if k != "*" and k not in RECOGNIZERS]:
        raise ConfigError(f"min_score names an unknown recognizer {bad[0]!r}")
    if "model" in recognizers and any(r.startswith("crf:") for r in recognizers):
        raise ConfigError(
            "the bare `model` is the stacked CRF's (phisieve-models-physionet-stacked): give it "
            "with `crf`, or a model of your own as model:DIR"
        )
    if unknown := [r for r in recognizers if _kind(r) not in RECOGNIZERS]:
        raise ConfigError(f"unknown recognizer {unknown[0]!r}; expected one of {RECOGNIZERS}")
    if sum(_kind(r) == "crf" for r in recognizers) > 1:
        raise ConfigError("give the crf recognizer once (crf, or crf:DIR)")
    return thresholds


def parse_thresholds(text: str) -> float | dict[str, float]:
    """``0.5`` or ``presidio=0.85,rules=0`` (``*=`` sets the others)."""
    try:
        if "=" not in text:
            return float(text)
        pairs = (item.split("=", 1) for item in text.split(",") if item.strip())
        return {name.strip(): float(value) for name, value in pairs}
    except ValueError:
        raise ConfigError(
            f"--min-score must be a number or name=number,..., not {text!r}"
        ) from None


def parse_recognizers(text: str) -> list[str]:
    """``rules,lists,model:DIR`` as a list of names."""
    return [r.strip() for r in text.split(",") if r.strip()]


def stanza_options(stanza_model: str | None) -> dict[str, Any]:
    """``package[:ner]`` (``--stanza-model``) as the stanza recognizer's options."""
    package, _, ner = (stanza_model or "").partition(":")
    return {"package": package or None, "ner": ner or None}


RECOGNIZERS_HELP = (
    "Comma-separated recognizers: rules, lists, crf (the CRF trained on the PhysioNet deid "
    "notes; needs pip install phisieve-models-physionet) or crf:DIR (from detect-train-crf), "
    "presidio, stanza, model:DIR (from detect-train); crf,model: the stacked CRF with its "
    "transformer (pip install phisieve-models-physionet-stacked); in detect-eval --cv, a bare "
    "`crf` or `model` is trained per fold (both: the stacked CRF)."
)
STANZA_HELP = (
    "Stanza package[:NER model] of the stanza recognizer, e.g. mimic:i2b2 (downloaded "
    "beforehand; STANZA_RESOURCES_DIR says where)."
)


@dataclass(frozen=True)
class DetectOptions:
    """Options of ``phisieve detect``."""

    recognizers: str = option(",".join(DEFAULT_RECOGNIZERS), RECOGNIZERS_HELP)
    min_score: str = option(
        "0", "Drop detections scored below this: 0.5, or presidio=0.85,rules=0."
    )
    presidio_model: str | None = option(None, "spaCy model of the presidio recognizer (installed).")
    stanza_model: str | None = option(None, STANZA_HELP)


class DetectStage(MapStage):
    """``phisieve detect``: direct-identifier spans of every document.

    Reduce: the recognizers loaded and, for ``lists``, the dictionaries' statistics of the
    whole corpus (:func:`phisieve.detect.run.detector`). Map:
    :meth:`phisieve.detect.run.Detector.spans` on each batch.
    """

    name = "detect"
    help = (
        "Find direct identifiers; write the `spans` dataset (doc_id, spans). The default "
        "recognizers, rules,lists,crf, need the CRF weights trained on the PhysioNet deid notes, "
        "a separate GPL-2.0 distribution: pip install phisieve-models-physionet (make build in "
        "phisieve's repository). Without it, detect stops before reading a note and says so; "
        "--recognizers rules,lists runs without it."
    )
    Options = DetectOptions
    inputs = (
        Input("docs", "The documents dataset.", positional=True, columns=("doc_id", "text")),
        Input("deny", "Deny list: word[TAB LABEL] per line, always direct.", kind=PATH,
              required=False),
        Input("allow", "Allow list: words never direct.", kind=PATH, required=False),
    )  # fmt: skip
    main = "docs"
    distributed = True
    columns = ("doc_id", "text")
    # A batch of 4,096 notes holds ~200 MB of word tables while it is detected; every worker
    # holds one.
    task_rows = 1024
    summary = ("{rows:,} documents, {spans_found:,} spans written to {out}",)

    def check(self) -> None:
        names = parse_recognizers(self.options.recognizers)
        check_recognizers(names, parse_thresholds(self.options.min_score))
        run.require_models(names)

    def recorded(self) -> dict[str, Any]:
        return {
            "recognizers": self.options.recognizers,
            "min_score": parse_thresholds(self.options.min_score),
            "presidio_model": self.options.presidio_model,
            "stanza_model": self.options.stanza_model,
        }

    def schema(self, ctx: Context, state: run.Detector) -> pa.Schema:
        return run.SPANS_TABLE

    def reduce(self, ctx: Context) -> run.Detector:
        o = self.options
        names = parse_recognizers(o.recognizers)
        src = ctx.hold("docs") if "lists" in names else ctx.source("docs")
        deny, allow = ctx.path("deny"), ctx.path("allow")
        return run.detector(
            src,
            names,
            deny=run.read_word_list(deny) if deny else None,
            allow=run.read_word_list(allow) if allow else None,
            min_score=parse_thresholds(o.min_score),
            presidio_model=o.presidio_model,
            stanza=stanza_options(o.stanza_model),
            pieces=partial(ctx.pieces, "docs"),
            ctx=ctx,
        )

    def map(self, batch: pa.RecordBatch, state: run.Detector, stats: Stats) -> pa.RecordBatch:
        out = state.spans(batch)
        stats.add("spans_found", len(out.column("spans").flatten()))
        return out

    def finish(self, ctx: Context, state: run.Detector) -> None:
        ctx.stats.setdefault("spans_found", 0)
        ctx.stats["recognizers"] = self.options.recognizers


# --------------------------------------------------------------------------------------------
# detect-train


ANNOTATED = Input(
    "annotated",
    "PhysioNet deid folder, documents with a gold `spans` column (surrogate output), "
    "or a spans dataset (with --docs).",
    kind=PATH,
    positional=True,
)
"""The annotated notes detect-train and detect-train-crf learn from."""
ANNOTATED_DOCS = Input(
    "docs", "The documents of a spans dataset given as ANNOTATED.", required=False
)
"""The documents of ANNOTATED when it is a spans dataset."""


@dataclass(frozen=True)
class DetectTrainOptions:
    """Options of ``phisieve detect-train``."""

    epochs: int = option(3, "Training epochs.")
    batch_size: int = option(16, "Windows per step.")
    max_length: int = option(128, "Window length in tokens.")
    stride: int = option(32, "Overlap of windows in tokens.")
    learning_rate: float = option(1e-4, "AdamW learning rate.")
    o_weight: float = option(0.1, "Loss weight of non-PHI tokens.")
    negative_share: float = option(0.3, "Share of windows without PHI kept (keyed by the seed).")
    augment: int = option(
        0,
        "Copies of each note with its gold PHI re-filled by fresh surrogates, trained on too: "
        "the model learns where PHI goes, not these patients' PHI.",
    )
    layers: int | None = option(
        None,
        "Keep only the base model's first N transformer layers (default: all of them): a "
        "shallower model trains and detects faster, each layer dropped saving its share.",
    )
    seed: int = option(0, "Seed of initialisation, order, sampling and the copies.")
    device: str | None = option(None, "cuda, cpu...; default CUDA when available.")


def check_options(o: DetectTrainOptions) -> None:
    """Refuse options :func:`~phisieve.detect.train.train_recognizer` cannot train with
    (:class:`ConfigError`)."""
    for name, value in (("epochs", o.epochs), ("batch_size", o.batch_size)):
        if value < 1:
            raise ConfigError(f"{name} must be at least 1, not {value}")
    if not 0 < o.o_weight <= 1 or not 0 <= o.negative_share <= 1:
        raise ConfigError("o_weight must be in (0, 1] and negative_share in [0, 1]")
    if o.augment < 0:
        raise ConfigError(f"augment must be >= 0, not {o.augment}")
    if o.layers is not None and o.layers < 1:
        raise ConfigError(f"layers must be at least 1, not {o.layers}")


class DetectTrainStage(BuildStage):
    """``phisieve detect-train``: a BIO token-classification recognizer fine-tuned on
    annotated notes (:func:`phisieve.detect.train.train_recognizer`); its output folder is a
    model, for ``detect --recognizers rules,lists,model:OUT``."""

    name = "detect-train"
    help = (
        "Fine-tune a BIO token-classification model on annotated notes, for "
        "`detect --recognizers rules,lists,model:OUT`."
    )
    Options = DetectTrainOptions
    inputs = (
        ANNOTATED,
        Input("base", "A local BERT-style model folder (fast tokenizer).", kind=PATH),
        ANNOTATED_DOCS,
    )
    output = Output(FOLDER, "The model folder to write.")
    summary = (
        "trained on {notes:,} notes ({windows:,} windows, {steps:,} steps, final loss "
        "{final_loss:.4f}) in {seconds:.0f} s on {device}: {out}",
        "{tokens:,} tokens cut into {windows_made:,} windows ({positive_windows:,} with PHI); "
        "{gold_spans:,} gold spans, {unaligned_spans:,} covering no token",
    )

    def check(self) -> None:
        check_options(self.options)

    def build(self, ctx: Context, target: Path) -> None:
        docs = ctx.values.get("docs")
        documents, gold = train.read_annotated(ctx.path("annotated"), docs)
        ctx.stats.update(
            train.train_recognizer(documents, gold, ctx.path("base"), target, self.options, ctx)
        )


# --------------------------------------------------------------------------------------------
# detect-train-crf


@dataclass(frozen=True)
class CrfTrainOptions:
    """Options of ``phisieve detect-train-crf``."""

    c1: float = option(0.05, "L1 regularisation (sparser model).")
    c2: float = option(0.01, "L2 regularisation.")
    max_iterations: int = option(150, "L-BFGS iterations.")
    drop_spans: float = option(
        0.15,
        "Share of the rules/lists spans hidden from the features of the training notes (at "
        "random, keyed by the seed): the CRF learns to find PHI the rules miss.",
    )
    augment: int = option(
        2,
        "Copies of each training note with its gold PHI re-filled by fresh surrogates, which "
        "the finder also learns from: it learns where PHI goes, not these patients' PHI.",
    )
    seed: int = option(0, "Seed of the hidden spans and of the copies' surrogates.")
    folds: int = option(
        5,
        "With --base: patient folds of the model's out-of-fold scores the tagger learns from.",
    )
    model_epochs: int = option(3, "With --base: the model's training epochs (see detect-train).")
    model_layers: int | None = option(
        None, "With --base: keep the base model's first N layers (see detect-train)."
    )
    device: str | None = option(None, "With --base: cuda, cpu...; default CUDA when available.")


STACKING_OPTIONS = ("folds", "model_epochs", "model_layers", "device")
"""The options of :class:`CrfTrainOptions` that only the stacked CRF (``--base``) reads."""


def check_crf_options(o: CrfTrainOptions) -> None:
    """Refuse options :func:`~phisieve.detect.crf_train.train_crf` cannot train with
    (:class:`ConfigError`)."""
    if o.c1 < 0 or o.c2 < 0 or o.max_iterations < 1 or o.augment < 0:
        raise ConfigError("c1, c2 and augment must be >= 0 and max_iterations >= 1")
    if o.folds < 2 or o.model_epochs < 1:
        raise ConfigError(
            f"folds must be >= 2 and model_epochs >= 1, not {o.folds} and {o.model_epochs}"
        )
    if o.model_layers is not None:
        check_options(DetectTrainOptions(layers=o.model_layers))
    if not 0 <= o.drop_spans < 1:
        raise ConfigError(f"drop_spans must be in [0, 1), not {o.drop_spans}")


class DetectTrainCrfStage(BuildStage):
    """``phisieve detect-train-crf``: the ``crf`` recognizer trained on annotated notes
    (:func:`phisieve.detect.crf_train.train_crf`); its output folder is used as ``detect
    --recognizers rules,lists,crf:OUT``."""

    name = "detect-train-crf"
    help = (
        "Train the CRF recognizer on annotated notes, for "
        "`detect --recognizers rules,lists,crf:OUT`; with --base, stacked: a token classifier "
        "fine-tuned from BASE whose out-of-fold scores the CRF's tagger learns from, and which "
        "runs inside it."
    )
    Options = CrfTrainOptions
    inputs = (
        ANNOTATED,
        ANNOTATED_DOCS,
        Input(
            "base",
            "A local BERT-style model folder: train the stacked CRF (the model in OUT/model).",
            kind=PATH,
            required=False,
        ),
    )
    output = Output(FOLDER, "The model folder to write.")
    summary = (
        "CRF trained on {notes:,} notes ({words:,} words, {phi_words:,} of them PHI) in "
        "{seconds:.0f} s: {out}",
    )

    def check(self) -> None:
        check_crf_options(self.options)

    def build(self, ctx: Context, target: Path) -> None:
        documents, gold = train.read_annotated(ctx.path("annotated"), ctx.values.get("docs"))
        o = self.options
        base = ctx.path("base")
        if base is None:
            ctx.stats.update(crf_train.train_crf(documents, gold, target, o, ctx=ctx))
            return
        model = DetectTrainOptions(
            epochs=o.model_epochs, layers=o.model_layers, seed=o.seed, device=o.device
        )
        ctx.stats.update(
            stacking.train_stacked(
                documents,
                gold,
                base,
                target,
                o,
                model,
                folds=o.folds,
                model_options={"device": o.device},
                ctx=ctx,
            )
        )


# --------------------------------------------------------------------------------------------
# detect-onnx


@dataclass(frozen=True)
class DetectOnnxOptions:
    """Options of ``phisieve detect-onnx``."""

    int8: bool = option(
        True, "Also write the model with 8-bit weights (onnxruntime's dynamic quantisation)."
    )
    torch_weights: bool = option(
        True,
        "Keep the PyTorch weights (CUDA runs them); without them the folder detects with "
        "onnxruntime only, at a quarter of the size.",
    )


class DetectOnnxStage(BuildStage):
    """``phisieve detect-onnx``: a recognizer folder (``detect-train``), or a stacked CRF
    folder (``detect-train-crf --base``), with its model exported to ONNX
    (:func:`phisieve.detect.onnx.export_onnx`), for onnxruntime on CPU."""

    name = "detect-onnx"
    help = (
        "Export a recognizer (detect-train) or the model of a stacked CRF (detect-train-crf "
        "--base) to ONNX: a copy of the folder with model.onnx and model.int8.onnx, which "
        "detect runs with onnxruntime on CPU (pip install 'phisieve[onnx]')."
    )
    Options = DetectOnnxOptions
    inputs = (
        Input(
            "model",
            "A recognizer folder (detect-train) or a stacked CRF folder (detect-train-crf --base).",
            kind=PATH,
            positional=True,
        ),
    )
    output = Output(FOLDER, "The folder to write: MODEL with the ONNX files.")
    summary = (
        "exported in {seconds:.0f} s: {onnx_bytes:,} bytes of ONNX, {int8_bytes:,} with 8-bit "
        "weights (most likely label changed on {int8_argmax_differs:.2%} of checked tokens): "
        "{out}",
    )

    def build(self, ctx: Context, target: Path) -> None:
        import json
        import shutil

        from . import onnx

        source = ctx.path("model")
        info_path = source / "phisieve.json"
        if not info_path.is_file():
            raise ConfigError(f"{source} is not a phisieve model folder (no phisieve.json)")
        shutil.copytree(source, target, dirs_exist_ok=True)
        stacked = json.loads(info_path.read_text()).get("stacked")
        folder = target / stacked["model"] if stacked else target
        o = self.options
        info = onnx.export_onnx(folder, int8=o.int8)
        if not o.torch_weights:
            for weights in folder.glob("*.safetensors"):
                weights.unlink()
        files = info["files"]
        int8 = files.get(onnx.INT8_FILE, {})
        ctx.stats.update(
            seconds=info["seconds"],
            onnx_bytes=files[onnx.ONNX_FILE]["bytes"],
            int8_bytes=int8.get("bytes", 0),
            int8_argmax_differs=int8.get("argmax_differs", 0.0),
        )


# --------------------------------------------------------------------------------------------
# learn-deny


@dataclass(frozen=True)
class LearnDenyOptions:
    """Options of ``phisieve learn-deny``."""

    min_rate: float = option(0.5, "Share of a word's occurrences annotated as PHI.")
    min_patients: int = option(1, "Patients whose notes annotate it.")


class LearnDenyStage(BuildStage):
    """``phisieve learn-deny``: a deny list (``word TAB LABEL``) grown from annotated notes
    (:func:`phisieve.detect.learnt.learn_deny_list`), for ``detect --deny`` on the site's
    other notes."""

    name = "learn-deny"
    help = (
        "Grow a deny list (word TAB LABEL) from annotated notes: the words annotated as PHI "
        "in most of their uses (clinicians, hospitals), for `detect --deny` on the site's "
        "other notes."
    )
    Options = LearnDenyOptions
    inputs = (
        Input("corpus", "PhysioNet deid folder (id.text, id-phi.phrase).", kind=SOURCE,
              positional=True),
    )  # fmt: skip
    output = Output(FILE, "The deny list file to write.")
    summary = ("{words:,} words learnt from {notes:,} notes: {out}",)

    def build(self, ctx: Context, target: Path) -> None:
        from ..io.annotated import read_physionet

        documents, gold = read_physionet(ctx.path("corpus"))
        o = self.options
        words = learnt.learn_deny_list(
            documents, gold, min_rate=o.min_rate, min_patients=o.min_patients
        )
        learnt.write_word_list(words, target)
        ctx.stats.update(words=len(words), notes=documents.num_rows)
