"""Model tokenizers for ``encode``: loaded from local folders (never downloaded), read
without transformers where possible, their special tokens, and text tokenised in bounded
pieces with character offsets."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import _core
from ..dependencies import require
from ..errors import ConfigError, InputError

__all__ = ["SpecialTokens", "load_tokenizer", "open_tokenizer"]


def load_tokenizer(path: str | Path) -> Any:
    """Load a Hugging Face fast tokenizer from a local folder or a ``tokenizer.json`` file.

    Nothing is downloaded: the path must exist locally.
    """
    require("transformers")
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    path = Path(path)
    if not path.exists():
        raise InputError("no such tokenizer file or folder", path=path)
    if path.is_file():
        tok = PreTrainedTokenizerFast(tokenizer_file=str(path))
    else:
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    if not getattr(tok, "is_fast", False):
        raise ConfigError(
            f"the tokenizer at {path} is not a fast tokenizer; encode needs character offsets"
        )
    return tok


_BERT = {"cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]", "mask": "[MASK]"}
_ROBERTA = {"cls": "<s>", "sep": "</s>", "eos": "</s>", "pad": "<pad>", "mask": "<mask>"}
_CLASS_DEFAULTS: dict[str, dict[str, str]] = {
    "PreTrainedTokenizerFast": {},
    "TokenizersBackend": {},
    **{f"{n}Tokenizer{f}": _BERT for n in ("Bert", "DistilBert", "Electra") for f in ("", "Fast")},
    **{f"GPT2Tokenizer{f}": {"eos": "<|endoftext|>"} for f in ("", "Fast")},
    **{f"RobertaTokenizer{f}": _ROBERTA for f in ("", "Fast")},
}
"""The special tokens that transformers' tokenizer classes assume when their files name none
(only the classes :func:`_light_tokenizer` knows; for others it defers to transformers)."""


@dataclass
class _LightTokenizer:
    """The parts of a fast tokenizer that encoding needs, read with the ``tokenizers`` library
    alone: importing transformers imports torch (~800 MB), which tokenising never uses."""

    backend_tokenizer: Any
    name_or_path: str
    cls_token_id: int | None = None
    sep_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    mask_token_id: int | None = None
    is_fast: bool = True

    def __len__(self) -> int:
        return int(self.backend_tokenizer.get_vocab_size(with_added_tokens=True))


def _light_tokenizer(path: str | Path) -> _LightTokenizer | None:
    """The tokenizer at ``path`` without transformers, or ``None`` when its files need
    transformers to be read as transformers would (no ``tokenizer.json``, an unknown class).
    Special tokens are resolved as transformers does: the class defaults, then
    ``tokenizer_config.json``, then ``special_tokens_map.json``."""
    import json

    from tokenizers import Tokenizer

    path = Path(path)
    file = path if path.is_file() else path / "tokenizer.json"
    if not file.is_file():
        return None
    backend = Tokenizer.from_file(str(file))
    names: dict[str, Any] = {}
    config = path / "tokenizer_config.json"
    conf = json.loads(config.read_text(encoding="utf-8")) if config.is_file() else {}
    defaults = _CLASS_DEFAULTS.get(conf.get("tokenizer_class") or "PreTrainedTokenizerFast")
    if defaults is None:
        return None
    names.update(defaults)
    if backend.padding:  # the padding token that tokenizer.json configures
        names["pad"] = backend.padding.get("pad_token")
    smap = path / "special_tokens_map.json"
    given = json.loads(smap.read_text(encoding="utf-8")) if smap.is_file() else {}
    for source in (conf, given):
        for role in ("cls", "sep", "eos", "pad", "mask"):
            if f"{role}_token" in source:
                names[role] = source[f"{role}_token"]
    ids: dict[str, int | None] = {}
    for role, name in names.items():
        if isinstance(name, dict):
            name = name.get("content")
        if name is not None and backend.token_to_id(str(name)) is None:
            return None  # transformers would add the token to the vocabulary
        ids[f"{role}_token_id"] = None if name is None else backend.token_to_id(str(name))
    # transformers' PreTrainedTokenizerFast(tokenizer_file=...) has no name.
    return _LightTokenizer(backend, "" if path.is_file() else str(path), **ids)


def open_tokenizer(path: str | Path) -> Any:
    """The tokenizer at ``path`` for encoding: read without transformers where possible."""
    path = Path(path)
    if not path.exists():
        raise InputError("no such tokenizer file or folder", path=path)
    light = _light_tokenizer(path)
    return light if light is not None else load_tokenizer(path)


@dataclass
class SpecialTokens:
    """The token ids encode and the batch builders rely on."""

    vocab_size: int
    pad_id: int
    mask_id: int | None
    prefix: list[int]
    suffix: list[int]
    doc_end: int | None

    @classmethod
    def of(cls, tok: Any) -> SpecialTokens:
        """BERT-like: ``[CLS] doc [SEP] doc [SEP]``; GPT-like: ``doc <eos> doc <eos>``."""
        cls_id, sep_id, eos_id = tok.cls_token_id, tok.sep_token_id, tok.eos_token_id
        pad = tok.pad_token_id
        if pad is None:
            pad = eos_id if eos_id is not None else 0
        if cls_id is not None and sep_id is not None:
            prefix, suffix, doc_end = [cls_id], [sep_id], sep_id
        else:
            prefix, suffix, doc_end = [], [], eos_id
        return cls(len(tok), int(pad), tok.mask_token_id, prefix, suffix, doc_end)


PIECE_CHARS = 1 << 17
"""Characters handed to the model tokenizer at a time (several documents, or a piece of a long
one): the tokenizer holds ~160 bytes per character while it works, and its results as Python
objects until they are converted."""

_SAFE_NORMALIZERS = {"BertNormalizer", "NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents"}
_SAFE_PRE_TOKENIZERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit", "Punctuation"}


def _splittable(backend: Any) -> bool:
    """Whether a text cut before a space that follows a non-space, each piece tokenised
    alone, gives the tokens of the whole: the normaliser works character by character and
    the pre-tokenizer always splits there (BERT's, whitespace, byte-level with its regex,
    metaspace with splitting), and no added token holds a space."""
    import json

    spec = json.loads(backend.to_str())

    def safe(node: dict[str, Any] | None, names: set[str], key: str) -> bool:
        if node is None:
            return True
        kind = node.get("type")
        if kind == "Sequence":
            return all(safe(n, names, key) for n in node.get(key, []))
        if kind == "ByteLevel":
            return bool(node.get("use_regex", True))
        if kind == "Metaspace":
            return bool(node.get("split", True))
        if kind == "Digits":
            return True
        return kind in names

    pre = spec.get("pre_tokenizer")
    return (
        pre is not None
        and safe(spec.get("normalizer"), _SAFE_NORMALIZERS, "normalizers")
        and safe(pre, _SAFE_PRE_TOKENIZERS, "pretokenizers")
        and not any(any(c.isspace() for c in t["content"]) for t in spec.get("added_tokens", []))
    )


def _cut(text: str, limit: int | None) -> Iterator[tuple[int, str]]:
    """``text`` in pieces of about ``limit`` characters or more, each (but the first)
    starting at a space that follows a non-space; with its character offset."""
    start = 0
    while limit is not None and len(text) - start > limit:
        p = text.find(" ", start + limit)
        while p > 0 and text[p - 1].isspace():
            p = text.find(" ", p + 1)
        if p <= start:
            break
        yield start, text[start:p]
        start = p
    yield start, text[start:] if start else text


def rust_tokenizer(backend: Any) -> Any | None:
    """The same tokenizer run from Rust (:class:`phisieve._core.ModelTokenizer`: ids and
    offsets straight into arrays), or None when its ``tokenizer.json`` is not one this build's
    ``tokenizers`` reads (encode then uses ``backend`` itself)."""
    try:
        return _core.ModelTokenizer(backend.to_str())
    except ConfigError:
        return None


def _encode_texts(
    backend: Any, texts: list[str], splittable: bool, rust: Any | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The model tokens of ``texts``: their ids, their (start, end) character offsets as one
    (tokens x 2) array, and the token count of each text. ``rust`` (:func:`rust_tokenizer`),
    when given, encodes instead of ``backend``, with the same results and no Python object per
    token.

    The tokenizer gets :data:`PIECE_CHARS` characters at a time, a long text cut into
    pieces when ``splittable`` (:func:`_splittable`), and each call's results become arrays at
    once: memory stays bounded whatever the batch and the notes' lengths (a 3M-character note
    took 480 MB inside the tokenizer, and as many again as Python tuples)."""
    counts = np.zeros(len(texts), np.int64)
    ids: list[np.ndarray] = []
    offsets: list[np.ndarray] = []
    group: list[tuple[int, int, str]] = []
    size = 0

    def flush() -> None:
        if rust is not None:
            found_ids, starts, ends, per_piece = (
                a.to_numpy(zero_copy_only=False) for a in rust.encode([t for _, _, t in group])
            )
            shift = np.repeat(
                np.fromiter((s for _, s, _ in group), np.int64, len(group)), per_piece
            )
            ids.append(found_ids)
            offsets.append(np.stack([starts + shift, ends + shift], axis=1))
            docs = np.fromiter((d for d, _, _ in group), np.int64, len(group))
            np.add.at(counts, docs, per_piece)
            group.clear()
            return
        found = backend.encode_batch([t for _, _, t in group], add_special_tokens=False)
        for (doc, shift, _), e in zip(group, found, strict=True):
            ids.append(np.asarray(e.ids, np.uint32))
            offsets.append(np.asarray(e.offsets, np.int64).reshape(-1, 2) + shift)
            counts[doc] += len(ids[-1])
        group.clear()

    for doc, text in enumerate(texts):
        for shift, piece in _cut(text, PIECE_CHARS if splittable else None):
            group.append((doc, shift, piece))
            size += len(piece)
            if size >= PIECE_CHARS:
                flush()
                size = 0
    if group:
        flush()
    if not ids:
        return np.zeros(0, np.uint32), np.zeros((0, 2), np.int64), counts
    return np.concatenate(ids), np.concatenate(offsets), counts
