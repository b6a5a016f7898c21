"""The ``encode`` stage: documents -> model token sequences with per-token protection flags.

Documents are tokenised by any Hugging Face *fast* tokenizer (WordPiece, byte-level BPE,
SentencePiece...). Each model token is mapped to phisieve's words (DESIGN.md §2) by character
offsets, so whole-word masking and protection work the same with every tokenizer. A token is

* ``indirect`` when a word it overlaps is an indirect identifier (a term used by fewer than k
  patients, or a word the n-gram policy protects when n-gram terms are used);
* ``direct`` when a word it overlaps lies in a direct span of its document, has the same
  normalised form as a word in a direct span of the same patient, or is a ``direct`` term;
* ``protected`` when either holds.

Each patient's consecutive documents are packed into sequences of at most ``max_len`` tokens
(sequences never mix patients; the last one of a patient is kept, shorter). Padding happens
when batches are built (:mod:`phisieve.training.masking`). With ``pseudonymize=True`` the words of
direct identifiers are replaced by ``X`` in the text first (the MLMA/CLMA baselines): those
tokens are then ordinary training targets and no token is ``direct``.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import _core
from ..errors import ConfigError, InputError, MissingDependencyError
from ..io.dataset import DatasetWriter, check_inputs, check_output, read_manifest
from ..io.sources import open_source, require_columns, string_array
from ..pipeline.progress import progress_bar
from ..protection.scope import DEFAULT_SCOPE, REASONS, DocSpans, SpanWords, check_scope
from ..term_index.build import read_terms, terms_options

ENCODED = pa.schema(
    [
        pa.field("seq_id", pa.uint64(), nullable=False),
        pa.field("patient_id", pa.string(), nullable=False),
        pa.field("doc_ids", pa.list_(pa.string()), nullable=False),
        pa.field("input_ids", pa.list_(pa.uint32()), nullable=False),
        pa.field("word_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("protected", pa.list_(pa.bool_()), nullable=False),
        pa.field("direct", pa.list_(pa.bool_()), nullable=False),
        pa.field("indirect", pa.list_(pa.bool_()), nullable=False),
    ]
)
"""The ``encoded`` table (DESIGN.md §1, plus the ``indirect`` flags the IPP baseline needs).
``word_ids`` number the words of a sequence 0, 1, 2...; -1 marks tokens outside any word
(special tokens, punctuation)."""


def load_tokenizer(path: str | Path) -> Any:
    """Load a Hugging Face fast tokenizer from a local folder or a ``tokenizer.json`` file.

    Nothing is downloaded: the path must exist locally.
    """
    try:
        from transformers import AutoTokenizer, PreTrainedTokenizerFast
    except ImportError as e:
        raise MissingDependencyError("transformers", "torch") from e
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


def _open_tokenizer(path: str | Path) -> Any:
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


@dataclass
class _Sequence:
    patient: str
    doc_ids: list[str] = field(default_factory=list)
    parts: list[tuple[np.ndarray, ...]] = field(default_factory=list)
    length: int = 0
    has_word: bool = False


class _Packer:
    """Packs one patient's documents into sequences of at most ``max_len`` tokens."""

    def __init__(self, max_len: int, special: SpecialTokens) -> None:
        self.special = special
        self.capacity = max_len - len(special.prefix) - len(special.suffix)
        if self.capacity < 2:
            raise ConfigError(f"max_len {max_len} leaves no room for tokens")
        self.current: _Sequence | None = None
        self.done: list[_Sequence] = []
        self.patient: str | None = None
        self.next_word = 0
        self.dropped_tokens = 0
        """Tokens left out because the sequence they would have formed holds no word."""

    def _emit(self) -> None:
        # A sequence without a word (only separators or punctuation) would be a training
        # row with nothing to learn or mask: it is left out, and its tokens counted.
        if self.current is not None and self.current.length > 0:
            if self.current.has_word:
                self.done.append(self.current)
            else:
                self.dropped_tokens += self.current.length
        self.current = None

    def add(
        self,
        patient: str,
        doc_id: str,
        ids: np.ndarray,
        words: np.ndarray,
        direct: np.ndarray,
        indirect: np.ndarray,
    ) -> None:
        """Append one document; ``words`` are the document's word numbers (-1: none)."""
        if patient != self.patient:
            self._emit()
            self.patient, self.next_word = patient, 0
        if len(ids) == 0:
            return  # a document without tokens adds nothing, not even a separator
        # Patient-wide word numbers, so two documents in one sequence never share a number.
        n_words = int(words.max(initial=-1)) + 1
        words = np.where(words >= 0, words + self.next_word, -1)
        self.next_word += n_words
        n_tokens = len(ids)
        if self.special.doc_end is not None:
            ids = np.append(ids, self.special.doc_end)
            words = np.append(words, -1)
            direct = np.append(direct, False)
            indirect = np.append(indirect, False)
        start = 0
        while start < len(ids):
            if self.current is None:
                self.current = _Sequence(patient)
            room = self.capacity - self.current.length
            end = min(len(ids), start + room)
            # Do not cut inside a word when the word can start the next sequence instead.
            if end < len(ids) and words[end] >= 0 and words[end] == words[end - 1]:
                first = end - 1
                while first > start and words[first - 1] == words[end]:
                    first -= 1
                if first > start or self.current.length > 0:
                    end = first
            if end > start:
                part = (ids[start:end], words[start:end], direct[start:end], indirect[start:end])
                self.current.parts.append(part)
                self.current.has_word = self.current.has_word or bool((part[1] >= 0).any())
                if not self.current.doc_ids or self.current.doc_ids[-1] != doc_id:
                    self.current.doc_ids.append(doc_id)
                self.current.length += end - start
                start = end
            if start >= n_tokens:
                # Only the separator is left and the sequence is full: the end of the
                # sequence ends the document (the separator would otherwise open a sequence
                # of its own, [CLS] [SEP], or one that starts with [SEP]).
                break
            if start < len(ids):
                self._emit()

    def finish_patient(self) -> None:
        """The patient's last sequence is complete (kept even when short)."""
        self._emit()

    def take(self, first_seq_id: int) -> pa.RecordBatch | None:
        """The finished sequences as an ``encoded`` batch, numbered from ``first_seq_id``."""
        if not self.done:
            return None
        sp = self.special
        ids, words, direct, indirect, lengths = [], [], [], [], []
        for s in self.done:
            i = np.concatenate([p[0] for p in s.parts])
            w = np.concatenate([p[1] for p in s.parts])
            # Number the sequence's words 0, 1, 2... in order.
            valid = w >= 0
            new = valid & np.concatenate([[True], w[1:] != w[:-1]])
            local = np.where(valid, np.cumsum(new) - 1, -1)
            d = np.concatenate([p[2] for p in s.parts])
            x = np.concatenate([p[3] for p in s.parts])
            pre, suf = len(sp.prefix), len(sp.suffix)
            if suf and len(i) and i[-1] == sp.suffix[-1]:
                suf = 0  # the last document already ends with [SEP]
            ids.append(np.concatenate([sp.prefix, i, sp.suffix[:suf]]).astype(np.uint32))
            words.append(np.concatenate([[-1] * pre, local, [-1] * suf]).astype(np.int32))
            falses = np.zeros(pre, bool), np.zeros(suf, bool)
            direct.append(np.concatenate([falses[0], d, falses[1]]))
            indirect.append(np.concatenate([falses[0], x, falses[1]]))
            lengths.append(len(ids[-1]))
        offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
        d_all, x_all = np.concatenate(direct), np.concatenate(indirect)

        def lst(values: np.ndarray, t: pa.DataType) -> pa.Array:
            return pa.ListArray.from_arrays(offsets, pa.array(values, t))

        doc_counts = [len(s.doc_ids) for s in self.done]
        doc_offsets = pa.array(np.concatenate([[0], np.cumsum(doc_counts)]).astype(np.int32))
        batch = pa.record_batch(
            [
                pa.array(np.arange(first_seq_id, first_seq_id + len(self.done), dtype=np.uint64)),
                pa.array([s.patient for s in self.done], pa.string()),
                pa.ListArray.from_arrays(
                    doc_offsets, pa.array([d for s in self.done for d in s.doc_ids], pa.string())
                ),
                lst(np.concatenate(ids), pa.uint32()),
                lst(np.concatenate(words), pa.int32()),
                lst(d_all | x_all, pa.bool_()),
                lst(d_all, pa.bool_()),
                lst(x_all, pa.bool_()),
            ],
            schema=ENCODED,
        )
        self.done = []
        return batch


def _flat(list_array: pa.Array) -> np.ndarray:
    return list_array.flatten().to_numpy(zero_copy_only=False)


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


def _encode_texts(
    backend: Any, texts: list[str], splittable: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The model tokens of ``texts``: their ids, their (start, end) character offsets as one
    (tokens x 2) array, and the token count of each text.

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


def _token_words(
    flat: np.ndarray,
    tok_counts: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    word_counts: np.ndarray,
    text_lengths: np.ndarray,
    flags: tuple[np.ndarray, ...],
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Map every model token of a batch (:func:`_encode_texts`) to the first word it
    overlaps (doc-local number, -1 for none) and OR the flags of every word it overlaps."""
    base = np.concatenate([[0], np.cumsum(text_lengths)[:-1]]).astype(np.int64)
    tok_base = np.repeat(base, tok_counts)
    ts, te = flat[:, 0] + tok_base, flat[:, 1] + tok_base
    word_base = np.repeat(base, word_counts)
    ws, we = starts + word_base, ends + word_base
    first = np.searchsorted(we, ts, side="right")
    last = np.searchsorted(ws, te, side="left") - 1
    hit = (te > ts) & (first < len(ws)) & (last >= first)
    word_first = np.concatenate([[0], np.cumsum(word_counts)[:-1]])
    doc_of_token = np.repeat(np.arange(len(tok_counts)), tok_counts)
    words = np.where(hit, first - word_first[doc_of_token], -1).astype(np.int64)
    out = []
    for f in flags:
        cum = np.concatenate([[0], np.cumsum(f, dtype=np.int64)])
        lo, hi = np.where(hit, first, 0), np.where(hit, last + 1, 0)
        out.append((cum[hi] - cum[lo]) > 0)
    return words, tuple(out)


def _word_flags(
    texts: pa.Array,
    doc_ids: list[str],
    patients: list[str],
    normalize: str,
    marker: Any,
    policy: str,
    direct_terms: pa.Array,
    direct_keys: pa.Array,
    spans: DocSpans | None,
) -> tuple[pa.RecordBatch, np.ndarray, dict[str, np.ndarray]]:
    """phisieve's words of each text, their count per text, and per word (flat) each reason
    of :data:`~phisieve.protection.scope.REASONS` that protects it."""
    toks = _core.tokenize(texts, normalize=normalize)
    words = toks.column("words")
    counts = pc.list_value_length(words).to_numpy(zero_copy_only=False)
    flat = words.flatten()
    if marker is not None and len(marker):
        indirect = _flat(marker.mark(texts, policy=policy)).astype(bool)
    else:
        indirect = np.zeros(len(flat), bool)
    corpus = pc.is_in(flat, value_set=direct_terms).to_numpy(zero_copy_only=False)
    patient = np.zeros(len(flat), bool)
    if len(direct_keys):
        owners = np.repeat(np.array(patients, dtype=object), counts)
        keys = pc.binary_join_element_wise(pa.array(owners, pa.string()), flat, "\x00")
        patient = pc.is_in(keys, value_set=direct_keys).to_numpy(zero_copy_only=False)
    span = np.zeros(len(flat), bool)
    if spans is not None:
        span = spans.overlap(
            doc_ids, _flat(toks.column("starts")), _flat(toks.column("ends")), counts
        )
    # Propagation counts beyond the spans: a word inside a span is protected in place.
    flags = {
        "span": span,
        "patient": patient & ~span,
        "corpus": corpus & ~span,
        "indirect": indirect,
    }
    return toks, counts, flags


def collect_span_words(
    src: Any, spans: DocSpans, doc_col: str, patient_col: str, text_col: str, normalize: str
) -> SpanWords:
    """The words of the direct spans of ``src``'s documents, per patient (a pass that
    tokenises only the documents that have spans)."""
    found = SpanWords(spans)
    wanted = pa.array(list(spans.by_doc), pa.string())
    if not len(wanted):
        return found
    for batch in src.batches([doc_col, patient_col, text_col]):
        keep = pc.is_in(string_array(batch.column(0)), value_set=wanted)
        if not pc.any(keep).as_py():
            continue
        b = batch.filter(keep)
        found.add(*(string_array(c) for c in b.columns), normalize)
    return found


def resolve_options(
    terms: pa.Table | None, normalize: str | None, direct_scope: str | None
) -> tuple[str, str]:
    """The normalisation and direct scope to encode with: the ones given, else those the
    terms were made with, else the defaults. A term table made otherwise than asked is
    refused: its words would not match the encoded ones (a case-kept "Dupont" is no
    "dupont")."""
    recorded = terms_options(terms) if terms is not None else {}
    out = []
    for name, given, default in (
        ("normalize", normalize, "nfkc_lower"),
        ("direct_scope", direct_scope, DEFAULT_SCOPE),
    ):
        made = recorded.get(name)
        if given is not None and made is not None and given != made:
            flag = "--" + name.replace("_", "-")
            raise ConfigError(
                f"the terms were made with {flag} {made}, not {given}: encode with {flag} "
                f"{made} (or leave {flag} out to use the terms' own), or index again"
            )
        out.append(given if given is not None else made if made is not None else default)
    check_scope(out[1])
    return out[0], out[1]


def _pseudonymize(
    texts: list[str], starts: list[list[int]], ends: list[list[int]], direct: list
) -> list[str]:
    out = []
    for text, st, en, d in zip(texts, starts, ends, direct, strict=True):
        pieces, pos = [], 0
        for s, e, flag in zip(st, en, d, strict=True):
            if flag:
                pieces.append(text[pos:s])
                pieces.append("X")
                pos = e
        pieces.append(text[pos:])
        out.append("".join(pieces))
    return out


def encode_batches(
    docs: Any,
    tokenizer: Any,
    *,
    terms: pa.Table | None = None,
    spans: DocSpans | None = None,
    direct_words: dict[str, set[str]] | None = None,
    max_len: int = 512,
    ngram: int = 1,
    policy: str = "all",
    normalize: str | None = None,
    pseudonymize: bool = False,
    doc_col: str = "doc_id",
    patient_col: str = "patient_id",
    text_col: str = "text",
    batch_size: int = 1024,
    stats: dict[str, int] | None = None,
    advance: Any = None,
    gold: DocSpans | None = None,
) -> Iterator[pa.RecordBatch]:
    """Encode documents into ``encoded`` record batches (see :func:`encode`).

    ``spans`` protects the words of direct spans in place, ``direct_words`` (patient ->
    normalised words) the same words in all the patient's documents. With ``gold`` spans,
    ``stats`` also counts the word tokens inside them (``gold_tokens``) and how many are
    protected, in all and by reason (``gold_protected``, ``gold_<reason>``)."""
    if gold is not None and pseudonymize:
        raise ConfigError("gold spans cannot be scored on pseudonymised text")
    normalize = resolve_options(terms, normalize, None)[0]
    src = docs if hasattr(docs, "batches") else open_source(docs, batch_size)
    require_columns(src.schema, [doc_col, patient_col, text_col], src.name)
    special = SpecialTokens.of(tokenizer)
    packer = _Packer(max_len, special)
    # A copy of the Rust tokenizer behind the fast tokenizer, with truncation and padding
    # off (documents are split into sequences here) and no length warnings.
    backend = copy.deepcopy(tokenizer.backend_tokenizer)
    backend.no_truncation()
    backend.no_padding()
    # Note text is text: a note that says "[SEP]" or "[MASK]" gets the tokens of those
    # characters, never the special ids (which would end a sequence early, or plant a mask
    # the model is trained to fill).
    backend.encode_special_tokens = True
    splittable = _splittable(backend)
    marker = None
    direct_terms = pa.array([], pa.string())
    if terms is not None:
        require_columns(terms.schema, ["term", "n", "indirect", "direct"], "terms")
        usable = terms.filter(pc.less_equal(terms.column("n"), ngram))
        marker = _core.Marker(
            string_array(usable.filter(pc.field("indirect")).column("term")), normalize=normalize
        )
        direct_terms = string_array(terms.filter(pc.field("direct")).column("term"))
    direct_words = direct_words or {}
    direct_keys = pa.array(
        [f"{p}\x00{w}" for p, ws in direct_words.items() for w in ws], pa.string()
    )
    stats = stats if stats is not None else {}
    keys = ["documents", "sequences", "tokens", "protected", "direct", "indirect", "words"]
    keys += ["dropped_tokens"]  # tokens of word-less pieces, which make no sequence
    keys += [f"{p}_{r}" for p in ("by", "only") for r in REASONS]
    if gold is not None:
        keys += ["gold_tokens", "gold_protected", *(f"gold_{r}" for r in REASONS)]
    for key in keys:
        stats.setdefault(key, 0)
    last_patient = None
    for batch in src.batches([doc_col, patient_col, text_col]):
        if batch.num_rows == 0:
            continue
        doc_ids = string_array(batch.column(0))
        patients = string_array(batch.column(1))
        texts = batch.column(2)
        for col, name in ((doc_ids, doc_col), (patients, patient_col), (texts, text_col)):
            if col.null_count:
                row = int(pc.index(pc.is_null(col), True).as_py())
                raise InputError(f"{name} is null", path=src.name, row=row, column=name)
        patient_list = patients.to_pylist()
        doc_list = doc_ids.to_pylist()
        flags = functools.partial(
            _word_flags,
            doc_ids=doc_list,
            patients=patient_list,
            normalize=normalize,
            marker=marker,
            policy=policy,
            direct_terms=direct_terms,
            direct_keys=direct_keys,
        )
        toks, counts, reasons = flags(texts, spans=spans)
        if pseudonymize:
            direct = reasons["span"] | reasons["patient"] | reasons["corpus"]
            per_doc = np.split(direct, np.cumsum(counts)[:-1])
            new = _pseudonymize(
                texts.to_pylist(),
                toks.column("starts").to_pylist(),
                toks.column("ends").to_pylist(),
                per_doc,
            )
            texts = pa.array(new, pa.largestring_array())
            # The spans' offsets point into the old text; no word is direct any more.
            toks, counts, reasons = flags(texts, spans=None)
            for r in ("span", "patient", "corpus"):
                reasons[r] = np.zeros_like(reasons[r])
        ids, tok_offsets, tok_counts = _encode_texts(backend, texts.to_pylist(), splittable)
        lengths = pc.utf8_length(texts).to_numpy(zero_copy_only=False)
        words, tok_flags = _token_words(
            tok_offsets,
            tok_counts,
            _flat(toks.column("starts")).astype(np.int64),
            _flat(toks.column("ends")).astype(np.int64),
            counts,
            lengths,
            tuple(reasons[r] for r in REASONS),
        )
        by_reason = dict(zip(REASONS, tok_flags, strict=True))
        tok_direct = by_reason["span"] | by_reason["patient"] | by_reason["corpus"]
        tok_indirect = by_reason["indirect"]
        _count_reasons(stats, by_reason)
        if gold is not None:
            _count_gold(stats, gold, doc_list, tok_offsets, tok_counts, words, by_reason)
        bounds = np.concatenate([[0], np.cumsum(tok_counts)])
        for r, doc in enumerate(doc_list):
            patient = patient_list[r]
            if last_patient is not None and patient != last_patient:
                packer.finish_patient()
            last_patient = patient
            a, b = bounds[r], bounds[r + 1]
            packer.add(patient, doc, ids[a:b], words[a:b], tok_direct[a:b], tok_indirect[a:b])
        stats["documents"] += batch.num_rows
        stats["words"] += int(counts.sum())
        out = packer.take(stats["sequences"])
        if out is not None:
            yield _count(out, stats)
        if advance is not None:
            advance(batch.num_rows)
    packer.finish_patient()
    stats["dropped_tokens"] += packer.dropped_tokens
    out = packer.take(stats["sequences"])
    if out is not None:
        yield _count(out, stats)


def _count_reasons(stats: dict[str, int], by_reason: dict[str, np.ndarray]) -> None:
    stacked = np.stack([by_reason[r] for r in REASONS])
    alone = stacked.sum(axis=0) == 1
    for i, r in enumerate(REASONS):
        stats[f"by_{r}"] += int(stacked[i].sum())
        stats[f"only_{r}"] += int((stacked[i] & alone).sum())


def _count_gold(
    stats: dict[str, int],
    gold: DocSpans,
    doc_ids: list[str],
    flat: np.ndarray,
    tok_counts: np.ndarray,
    words: np.ndarray,
    by_reason: dict[str, np.ndarray],
) -> None:
    """Count the word tokens (tokens inside one of our words) that overlap a gold span."""
    inside = gold.overlap(doc_ids, flat[:, 0], flat[:, 1], tok_counts) & (words >= 0)
    protected = np.zeros(len(inside), bool)
    for r in REASONS:
        stats[f"gold_{r}"] += int((inside & by_reason[r]).sum())
        protected |= by_reason[r]
    stats["gold_tokens"] += int(inside.sum())
    stats["gold_protected"] += int((inside & protected).sum())


def protection_report(stats: dict[str, Any]) -> dict[str, Any]:
    """The protected share of tokens, in all and by reason (``by``: every token a reason
    protects; ``only``: those no other reason protects, i.e. what dropping it would free),
    and, when gold spans were scored, the coverage of gold PHI tokens."""
    tokens = stats.get("tokens", 0)

    def share(n: int) -> float:
        return n / tokens if tokens else 0.0

    report: dict[str, Any] = {
        "tokens": tokens,
        "protected": stats.get("protected", 0),
        "protected_share": share(stats.get("protected", 0)),
        "by_reason": {
            r: {
                "tokens": stats.get(f"by_{r}", 0),
                "share": share(stats.get(f"by_{r}", 0)),
                "only": stats.get(f"only_{r}", 0),
                "only_share": share(stats.get(f"only_{r}", 0)),
            }
            for r in REASONS
        },
    }
    if "gold_tokens" in stats:
        g = stats["gold_tokens"]
        report["gold"] = {
            "tokens": g,
            "protected": stats["gold_protected"],
            "coverage": stats["gold_protected"] / g if g else 1.0,
            "by_reason": {r: stats[f"gold_{r}"] for r in REASONS},
        }
    return report


def _count(batch: pa.RecordBatch, stats: dict[str, int]) -> pa.RecordBatch:
    stats["sequences"] += batch.num_rows
    stats["tokens"] += len(batch.column("input_ids").flatten())
    for name in ("protected", "direct", "indirect"):
        stats[name] += int(pc.sum(batch.column(name).flatten()).as_py() or 0)
    return batch


def encode(
    docs: Any,
    out: str | Path,
    tokenizer: str | Path | Any,
    *,
    terms: str | Path | pa.Table | None = None,
    spans: str | Path | pa.Table | None = None,
    max_len: int = 512,
    ngram: int = 1,
    policy: str = "all",
    normalize: str | None = None,
    direct_scope: str | None = None,
    pseudonymize: bool = False,
    doc_col: str = "doc_id",
    patient_col: str = "patient_id",
    text_col: str = "text",
    progress: bool = False,
    gold: str | Path | pa.Table | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Tokenise documents for a model and write the ``encoded`` dataset.

    Parameters
    ----------
    docs
        The documents (a dataset folder, or any Arrow table or stream), each patient's
        documents consecutive and in order.
    out
        Output folder (Parquet parts only; the manifest, with the ``encoding`` that
        :func:`read_encoding` returns, is in ``out.meta/``). An existing one is replaced
        (atomically) only with ``overwrite``.
    tokenizer
        A Hugging Face fast tokenizer, or the local path of one (folder or ``tokenizer.json``).
    terms
        The ``terms`` of :func:`phisieve.index`: its indirect terms (``n <= ngram``) and
        ``direct`` terms mark tokens. Without it, no token is indirect.
    spans
        A ``spans`` dataset (``doc_id``, ``spans``) of direct identifiers: their words are
        protected in place and, unless ``direct_scope`` is ``span``, in every document of
        the same patient (:mod:`phisieve.protection.scope`).
    max_len
        Largest sequence length in model tokens, special tokens included.
    ngram, policy
        Use indirect n-grams up to ``ngram`` words, protecting their words under ``policy``
        (``all`` or ``minimal``, see :class:`phisieve._core.Marker`).
    normalize, direct_scope
        Word normalisation and direct scope. ``None``: the ones the terms were made with
        (recorded in their metadata), else ``nfkc_lower`` and ``identifying``. Values that
        differ from the terms' are refused.
    pseudonymize
        Replace the words of direct identifiers by ``X`` (the MLMA/CLMA baselines).
    gold
        Gold PHI spans to score the protection against (coverage of gold PHI tokens, in the
        manifest's ``protection`` report); they protect nothing.

    Returns
    -------
    dict
        The manifest: sequences, tokens and how many tokens are protected, direct, indirect,
        and ``protection``: the protected share by reason (and the gold coverage).
    """
    if max_len < 4:
        raise ConfigError(f"max_len must be at least 4, not {max_len}")
    if policy not in ("all", "minimal"):
        raise ConfigError(f"unknown n-gram policy {policy!r}; expected all or minimal")
    inputs = check_inputs(docs=docs, terms=terms, spans=spans, gold=gold)
    check_output(out, overwrite, inputs)
    tok = tokenizer if not isinstance(tokenizer, (str, Path)) else _open_tokenizer(tokenizer)
    src = open_source(docs, 1024)
    require_columns(src.schema, [doc_col, patient_col, text_col], src.name)
    term_table = read_terms(terms) if isinstance(terms, (str, Path)) else terms
    normalize, direct_scope = resolve_options(term_table, normalize, direct_scope)
    doc_spans = DocSpans.read(spans) if spans is not None else None
    gold_spans = DocSpans.read(gold) if gold is not None else None
    direct_words = None
    if doc_spans is not None and direct_scope != "span":
        if not src.reiterable:
            # The patients' span words are needed before their documents are encoded: a
            # one-shot stream is held in memory to be read twice.
            src = open_source(pa.Table.from_batches(list(src.batches(None)), src.schema))
        direct_words = collect_span_words(
            src, doc_spans, doc_col, patient_col, text_col, normalize
        ).patient_words()
    special = SpecialTokens.of(tok)
    stats: dict[str, int] = {}
    options = {
        "tokenizer": str(getattr(tok, "name_or_path", "")),
        "max_len": max_len,
        "ngram": ngram,
        "policy": policy,
        "normalize": normalize,
        "direct_scope": direct_scope,
        "pseudonymize": pseudonymize,
    }
    with (
        DatasetWriter(
            Path(out),
            ENCODED,
            stage="encode",
            inputs=inputs,
            options=options,
            overwrite=overwrite,
            rows_per_part=50_000,
        ) as writer,
        progress_bar("encode", total=src.num_rows, unit="documents", enabled=progress) as adv,
    ):
        for b in encode_batches(
            src,
            tok,
            terms=term_table,
            spans=doc_spans,
            direct_words=direct_words,
            max_len=max_len,
            ngram=ngram,
            policy=policy,
            normalize=normalize,
            pseudonymize=pseudonymize,
            doc_col=doc_col,
            patient_col=patient_col,
            text_col=text_col,
            stats=stats,
            advance=adv,
            gold=gold_spans,
        ):
            writer.write(b)
        direct_terms = 0
        if term_table is not None and "direct" in term_table.column_names:
            direct_terms = int(pc.sum(term_table.column("direct")).as_py() or 0)
        encoding = {
            "tokenizer": options["tokenizer"],
            "max_len": max_len,
            "vocab_size": special.vocab_size,
            "pad_token_id": special.pad_id,
            "mask_token_id": special.mask_id,
            "pseudonymized": pseudonymize,
            "ngram": ngram,
            "policy": policy,
            "normalize": normalize,
            "direct_scope": direct_scope,
            "with_terms": term_table is not None,
            "with_spans": spans is not None,
            "direct_terms": direct_terms,
            "protection": protection_report(stats),
        }
        return writer.close(**stats, encoding=encoding)


def read_encoding(path: str | Path) -> dict[str, Any]:
    """How the complete ``encoded`` dataset at ``path`` was made (its manifest's
    ``encoding``: tokenizer, ``max_len``, special token ids, protection report...)."""
    manifest = read_manifest(path)
    if "encoding" not in manifest:
        raise InputError(
            f"not an encoded dataset (written by {manifest.get('stage')!r})", path=path
        )
    return manifest["encoding"]
