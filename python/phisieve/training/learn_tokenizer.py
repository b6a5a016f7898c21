"""Tokenizers learnt from local text with the ``tokenizers`` library (nothing downloaded).

:func:`train_wordpiece` makes a BERT-style lower-casing WordPiece tokenizer and
:func:`train_bpe` a GPT-2-style byte-level BPE, both saved as ``PreTrainedTokenizerFast``
folders that the ``encode``, ``train`` and ``audit`` stages (:func:`phisieve.api.encode`,
:func:`phisieve.api.train`, :func:`phisieve.api.audit`) load. Learn them on text the audited
model is not judged on (e.g. the reference split), so that the vocabulary favours neither
members nor held-out patients.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..dependencies import require

WORDPIECE_SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def _wordpiece(lines: list[str], vocab_size: int) -> Any:
    """A lower-casing WordPiece tokenizer learnt on ``lines``, deterministically.

    ``tokenizers``' WordPiece trainer is not deterministic (huggingface/tokenizers#1794: its
    ``##`` pieces get ids in hash-map order, which breaks merge ties), so the pieces come from
    its BPE trainer (deterministic without a continuing-subword prefix) instead: every word
    is split by the learnt BPE, its first piece kept as is and the others prefixed ``##``;
    the most frequent pieces (ties by text), plus every single character in both forms so
    that no word becomes ``[UNK]``, make the vocabulary.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from tokenizers.trainers import BpeTrainer

    special = list(WORDPIECE_SPECIAL)
    normalizer = normalizers.BertNormalizer(lowercase=True)
    pre = pre_tokenizers.BertPreTokenizer()
    bpe = Tokenizer(models.BPE(unk_token="[UNK]"))
    bpe.normalizer, bpe.pre_tokenizer = normalizer, pre
    trainer = BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=special, show_progress=False
    )
    bpe.train_from_iterator(lines, trainer)
    words = Counter(
        w for line in lines for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(line))
    )
    pieces: Counter[str] = Counter()
    chars: set[str] = set()
    for word, count in words.items():
        chars.update(word)
        for i, token in enumerate(bpe.model.tokenize(word)):
            pieces[token.value if i == 0 else "##" + token.value] += count
    vocab = list(special)
    vocab += sorted(chars) + sorted("##" + c for c in chars)
    seen = set(vocab)
    for piece, _ in sorted(pieces.items(), key=lambda kv: (-kv[1], kv[0])):
        if len(vocab) >= vocab_size:
            break
        if piece not in seen:
            vocab.append(piece)
            seen.add(piece)
    tok = Tokenizer(models.WordPiece({p: i for i, p in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer = normalizer, pre
    tok.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    tok.decoder = decoders.WordPiece()
    return tok


def train_wordpiece(lines: Iterable[str], out: str | Path, *, vocab_size: int = 8000,
                    max_len: int = 512) -> Path:  # fmt: skip
    """Learn a BERT-style WordPiece tokenizer on ``lines`` and save it to ``out``.

    Deterministic: the same lines give the same vocabulary (see :func:`_wordpiece`).

    Returns
    -------
    Path
        ``out``, a folder ``AutoTokenizer.from_pretrained`` loads.
    """
    require("transformers")
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=_wordpiece([x for x in lines if x.strip()], vocab_size),
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=max_len,
    )
    tok.save_pretrained(str(out))
    return Path(out)


def train_bpe(lines: Iterable[str], out: str | Path, *, vocab_size: int = 8000,
              max_len: int = 1024) -> Path:  # fmt: skip
    """Learn a GPT-2-style byte-level BPE tokenizer on ``lines`` and save it to ``out``
    (end of text ``<|endoftext|>``, padding ``<pad>``)."""
    require("transformers")
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        [x for x in lines if x.strip()],
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=["<|endoftext|>", "<pad>"],
        show_progress=False,
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        eos_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        pad_token="<pad>",
        model_max_length=max_len,
    )
    tok.save_pretrained(str(out))
    return Path(out)
