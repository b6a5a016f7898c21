"""The output layer applied only where a token is predicted.

A masked LM predicts about 15% of its positions, yet Hugging Face models apply their output
layer (hidden × vocabulary, the largest matrix product of a small model) at every position and
then discard the rest in the loss. :class:`SparseHead` gathers the positions that carry a
label before the output layer runs, so the model computes logits for those rows only, and
takes the same cross-entropy over them: the same loss and gradients (to floating-point
rounding), a fraction of the work. For a causal LM the positions are those whose *next* token
is a target (Hugging Face shifts the labels the same way), which pays where the objective
hides many targets (``ppclm``, or padding).

It works through a forward pre-hook on the model's output embeddings (an ``nn.Linear``), so it
needs no model-specific code; a model whose forward does not return the gathered logits
unchanged (a shape it did not expect) falls back to the full projection for good.
"""

from __future__ import annotations

from typing import Any

IGNORE = -100
"""The label of a position with nothing to predict (Hugging Face's convention)."""


class SparseHead:
    """Computes a model's LM loss with the output layer applied at labelled positions only.

    Parameters
    ----------
    model
        A Hugging Face masked- or causal-LM model whose ``get_output_embeddings()`` is an
        ``nn.Linear`` (BERT, RoBERTa, DistilBERT, GPT-2 and most others).
    causal
        Whether the model is causal (labels shifted by one, as Hugging Face does).

    Attributes
    ----------
    active : bool
        Whether the sparse path is in use (False when the model has no linear output layer,
        or after a fallback).
    """

    def __init__(self, model: Any, causal: bool) -> None:
        import torch

        self.model = model
        self.causal = causal
        self._index: Any = None
        self._handle: Any = None
        layer = model.get_output_embeddings()
        self.active = isinstance(layer, torch.nn.Linear)
        if self.active:
            self._handle = layer.register_forward_pre_hook(self._gather)

    def _gather(self, _module: Any, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        if self._index is None:
            return None
        hidden = args[0]
        return (hidden.reshape(-1, hidden.shape[-1]).index_select(0, self._index), *args[1:])

    def loss(self, batch: dict[str, Any]) -> Any:
        """The mean cross-entropy over the labelled positions of ``batch`` (which holds
        ``labels``); NaN when no position has a label, as the full computation gives."""
        import torch
        import torch.nn.functional as F

        if not self.active or self._handle is None:
            return self.model(**batch).loss
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        labels = batch["labels"]
        if self.causal:
            targets_at = torch.zeros_like(labels, dtype=torch.bool)
            targets_at[:, :-1] = labels[:, 1:] != IGNORE
            targets = labels[:, 1:][labels[:, 1:] != IGNORE]
        else:
            targets_at = labels != IGNORE
            targets = labels[targets_at]
        self._index = targets_at.flatten().nonzero().squeeze(1)
        try:
            logits = self.model(**inputs).logits
        except torch.OutOfMemoryError:
            raise
        except RuntimeError:
            logits = None  # the model reshapes its logits (a view of the full grid)
        finally:
            self._index = None
        if logits is None or logits.dim() != 2 or logits.shape[0] != targets.shape[0]:
            self.close()  # the full projection from now on
            self.active = False
            return self.model(**batch).loss
        return F.cross_entropy(logits.float(), targets)

    def sequence_losses(self, batch: dict[str, Any]) -> Any:
        """Each row's mean cross-entropy over its labelled positions (0 for a row with none),
        the output layer applied at those positions only: what DP-SGD needs to weigh and
        clip each sequence's (and patient's) gradient. ``batch`` holds ``input_ids``,
        ``attention_mask`` and ``labels``."""
        import torch
        import torch.nn.functional as F

        labels = batch["labels"]
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        if self.causal:
            targets_at = torch.zeros_like(labels, dtype=torch.bool)
            targets_at[:, :-1] = labels[:, 1:] != IGNORE
            targets = labels[:, 1:][labels[:, 1:] != IGNORE]
            counts = (labels[:, 1:] != IGNORE).sum(1)
        else:
            targets_at = labels != IGNORE
            targets = labels[targets_at]
            counts = targets_at.sum(1)
        logits = None
        if self.active and self._handle is not None:
            self._index = targets_at.flatten().nonzero().squeeze(1)
            try:
                logits = self.model(**inputs).logits
            finally:
                self._index = None
            if logits.dim() != 2 or logits.shape[0] != targets.shape[0]:
                self.close()  # the model reshapes its logits: the full projection from now on
                self.active = False
                logits = None
        if logits is None:
            full = self.model(**inputs).logits
            logits = (full[:, :-1] if self.causal else full)[
                targets_at[:, :-1] if self.causal else targets_at
            ]
        ce = F.cross_entropy(logits.float(), targets, reduction="none")
        rows = targets_at.nonzero()[:, 0]
        total = torch.zeros(labels.shape[0], device=ce.device, dtype=ce.dtype)
        return total.index_add(0, rows, ce) / counts.clamp(min=1)

    def close(self) -> None:
        """Remove the hook: the model computes every position again (``active`` still says
        whether the sparse path was used)."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
