"""Notes cut into overlapping windows of model tokens, the same with every transformers
version: what ``detect-train`` trains on and the ``model`` recognizer tags.

Each note is tokenised once, whole, without special tokens (the tokenizer's offsets, in
characters). Its tokens are then cut here into windows of ``max_length`` minus the special
tokens, each window starting ``stride`` tokens before the previous one ended, until the last
token is in one; each window gets the tokenizer's special tokens around it and padding after.
transformers' own cutting (``return_overflowing_tokens`` with ``stride``) changed between
versions: 5.17 gave 2,403 windows for the 1,450 PhysioNet dev notes at 128/32 and never showed
the model a note's tokens after its second window, 5.24 gives 4,004 that cover every token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError

__all__ = ["Windows", "specials", "windows"]


def specials(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after one sequence's tokens (BERT: ``[CLS]`` and
    ``[SEP]``), found by encoding a word with and without them."""
    bare = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    for i in range(len(full) - len(bare) + 1):
        if full[i : i + len(bare)] == bare:
            return list(full[:i]), list(full[i + len(bare) :])
    raise ConfigError("the tokenizer's special tokens wrap a word in a way this cannot cut")


@dataclass
class Windows:
    """Windows of notes, padded to ``max_length``: ``input_ids`` and ``attention_mask``
    (windows × max_length), ``offsets`` (windows × max_length × 2, characters of the note;
    ``(0, 0)`` for special and padding tokens), ``inside`` (the token is one of the note's,
    not special or padding) and ``doc`` (each window's note)."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    offsets: np.ndarray
    inside: np.ndarray
    doc: np.ndarray
    tokens: np.ndarray = field(repr=False)
    """Each note's count of tokens."""

    def __len__(self) -> int:
        return len(self.doc)


def windows(tokenizer: Any, texts: list[str], max_length: int, stride: int) -> Windows:
    """Every note of ``texts`` cut into windows (module docstring). A note without tokens
    gets one window of special tokens alone."""
    before, after = specials(tokenizer)
    body = max_length - len(before) - len(after)
    if body < 1:
        raise ConfigError(f"max_length {max_length} leaves no room for a note's tokens")
    if not 0 <= stride < body:
        raise ConfigError(
            f"the stride ({stride}) must be in [0, {body}) at max_length {max_length}"
        )
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    step = body - stride
    # verbose=False: a note longer than the model takes is the point here, not a mistake.
    enc = (
        tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        if texts
        else {"input_ids": [], "offset_mapping": []}
    )
    rows: list[tuple[int, int, int]] = []  # (note, first token, end token)
    counts = np.zeros(len(texts), np.int64)
    for d, ids in enumerate(enc["input_ids"]):
        n = len(ids)
        counts[d] = n
        start = 0
        while True:
            end = min(start + body, n)
            rows.append((d, start, end))
            if end >= n:
                break
            start += step
    w = len(rows)
    input_ids = np.full((w, max_length), pad, np.int64)
    mask = np.zeros((w, max_length), np.int64)
    offsets = np.zeros((w, max_length, 2), np.int64)
    inside = np.zeros((w, max_length), bool)
    doc = np.zeros(w, np.int64)
    k = len(before)
    for i, (d, a, b) in enumerate(rows):
        ids = enc["input_ids"][d][a:b]
        n = len(ids)
        filled = [*before, *ids, *after]
        input_ids[i, : len(filled)] = filled
        mask[i, : len(filled)] = 1
        if n:
            offsets[i, k : k + n] = enc["offset_mapping"][d][a:b]
            inside[i, k : k + n] = True
        doc[i] = d
    return Windows(input_ids, mask, offsets, inside, doc, counts)
