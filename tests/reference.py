"""Plain-Python reference implementations the Rust core is checked against.

They follow DESIGN.md section 2 literally and favour clarity over speed.
"""

from __future__ import annotations

import unicodedata
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import regex

from phisieve.encode import ENCODED
from phisieve.encode.tokenizer import SpecialTokens
from phisieve.errors import ConfigError

IGNORABLE = regex.compile(r"\p{Default_Ignorable_Code_Point}")
"""Unicode's default-ignorable code points, from the ``regex`` module's own tables."""


def is_word_char(c: str) -> bool:
    return unicodedata.category(c)[0] in "LMN"


def is_ignorable(c: str) -> bool:
    return IGNORABLE.match(c) is not None


def word_spans(text: str) -> list[tuple[int, int]]:
    """Runs of word characters; a run goes on across default-ignorable code points but never
    starts or ends on one."""
    spans, start, last = [], None, None
    for i, c in enumerate(text):
        if is_word_char(c):
            if start is None:
                start = i
            last = i + 1
        elif is_ignorable(c):
            continue
        elif start is not None:
            spans.append((start, last))
            start = None
    if start is not None:
        spans.append((start, last))
    return spans


def normalize(word: str, mode: str = "nfkc_lower") -> str:
    word = IGNORABLE.sub("", word)
    form = {"nfkc_lower": "NFKC", "nfkc": "NFKC", "nfc_lower": "NFC", "nfc": "NFC"}.get(mode)
    if form:
        word = unicodedata.normalize(form, word)
    if mode.endswith("lower"):
        word = word.lower()
    return IGNORABLE.sub("", word.replace(" ", ""))


def words(text: str, mode: str = "nfkc_lower") -> list[str]:
    return [normalize(text[s:e], mode) for s, e in word_spans(text)]


def index(
    docs: Iterable[tuple[str, str]], ngram: int = 1, k: int = 2, mode: str = "nfkc_lower"
) -> dict[tuple[int, str], tuple[int, int, int, bool]]:
    """(n, term) -> (patients, docs, count, indirect) for (patient, text) documents."""
    patients: dict[tuple[int, str], set[str]] = defaultdict(set)
    ndocs: dict[tuple[int, str], int] = defaultdict(int)
    count: dict[tuple[int, str], int] = defaultdict(int)
    for patient, text in docs:
        ws = words(text, mode)
        seen = set()
        for i in range(len(ws)):
            for n in range(1, min(ngram, len(ws) - i) + 1):
                key = (n, " ".join(ws[i : i + n]))
                count[key] += 1
                patients[key].add(patient)
                if key not in seen:
                    seen.add(key)
                    ndocs[key] += 1
    return {
        key: (len(patients[key]), ndocs[key], count[key], len(patients[key]) < k) for key in count
    }


def id_hash(id_: str) -> int:
    """The index's fixed hash of a patient id: 64-bit FNV-1a over the UTF-8 bytes, finished
    with SplitMix64's output function (:func:`mix64`)."""
    h = 0xCBF29CE484222325
    for b in id_.encode("utf-8"):
        h = ((h ^ b) * 0x100000001B3) & MASK64
    return mix64(h)


def patient_ids(
    docs: Iterable[tuple[str, str]], ngram: int = 1, k: int = 2, mode: str = "nfkc_lower"
) -> dict[tuple[int, str], list[str]]:
    """(n, term) -> the k patients using the term that are smallest by (id_hash, id), in
    that order."""
    users: dict[tuple[int, str], set[str]] = defaultdict(set)
    for patient, text in docs:
        ws = words(text, mode)
        for i in range(len(ws)):
            for n in range(1, min(ngram, len(ws) - i) + 1):
                users[(n, " ".join(ws[i : i + n]))].add(patient)
    return {key: sorted(ps, key=lambda p: (id_hash(p), p))[:k] for key, ps in users.items()}


def protected(
    text: str, blacklist: set[tuple[int, str]], ngram: int, policy: str, mode: str = "nfkc_lower"
) -> list[bool]:
    """Per word of ``text``: protected under ``policy`` by the (n, term) ``blacklist``."""
    ws = words(text, mode)

    def bad(i: int, n: int) -> bool:
        return (n, " ".join(ws[i : i + n])) in blacklist

    out = [False] * len(ws)
    for i in range(len(ws)):
        for n in range(1, min(ngram, len(ws) - i) + 1):
            if not bad(i, n):
                continue
            if policy == "all":
                for j in range(i, i + n):
                    out[j] = True
            elif n == 1 or not any(bad(a, m) for m in range(1, n) for a in range(i, i + n - m + 1)):
                out[i + n - 1] = True
    return out


# --- Mask sampling (DESIGN.md §4-§5), as phisieve_core::masking documents it -------------

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


class SplitMix64:
    def __init__(self, seed: int, epoch: int, seq_id: int) -> None:
        s = mix64((seed + GOLDEN) & MASK64)
        s = mix64(s ^ ((epoch + GOLDEN) & MASK64))
        self.state = mix64(s ^ ((seq_id + GOLDEN) & MASK64))

    def next(self) -> int:
        self.state = (self.state + GOLDEN) & MASK64
        return mix64(self.state)

    def below(self, n: int) -> int:
        m = self.next() * n
        if (m & MASK64) < n:
            threshold = (-n % (1 << 64)) % n
            while (m & MASK64) < threshold:
                m = self.next() * n
        return m >> 64

    def unit(self) -> float:
        return (self.next() >> 11) * (1.0 / (1 << 53))


def sample_row(
    seq_id: int,
    input_ids: list[int],
    word_ids: list[int],
    blocked: list[bool],
    *,
    causal: bool,
    length: int,
    probability: float,
    replace_mask: float,
    replace_random: float,
    mask_id: int,
    pad_id: int,
    vocab_size: int,
    seed: int,
    epoch: int,
) -> tuple[list[int], list[int], list[int]]:
    """One training row: (input_ids, attention_mask, labels), ``blocked[i]`` meaning token i is
    protected under the objective."""
    n = len(input_ids)
    ids = list(input_ids) + [pad_id] * (length - n)
    attention = [1] * n + [0] * (length - n)
    labels = [-100] * length
    if causal:
        for i in range(n):
            if not blocked[i]:
                labels[i] = input_ids[i]
        return ids, attention, labels
    words = max(word_ids, default=-1) + 1
    word_blocked = [False] * words
    for w, b in zip(word_ids, blocked, strict=True):
        if w >= 0 and b:
            word_blocked[w] = True
    eligible = [w for w in range(words) if not word_blocked[w]]
    m = int(probability * len(eligible) + 0.5)
    rng = SplitMix64(seed, epoch, seq_id)
    for i in range(m):
        j = i + rng.below(len(eligible) - i)
        eligible[i], eligible[j] = eligible[j], eligible[i]
    chosen = set(eligible[:m])
    for i in range(n):
        if word_ids[i] < 0 or word_ids[i] not in chosen:
            continue
        labels[i] = input_ids[i]
        u = rng.unit()
        if u < replace_mask:
            ids[i] = mask_id
        elif u < replace_mask + replace_random:
            ids[i] = rng.below(vocab_size)
    return ids, attention, labels


# --------------------------------------------------------------------------------------------
# The packer of encode (phisieve_core::pack, _core.Packer), as it was written in Python.


@dataclass
class PySequence:
    patient: str
    doc_ids: list[str] = field(default_factory=list)
    parts: list[tuple[np.ndarray, ...]] = field(default_factory=list)
    length: int = 0
    has_word: bool = False


class PyPacker:
    """Packs one patient's documents into sequences of at most ``max_len`` tokens."""

    def __init__(self, max_len: int, special: SpecialTokens) -> None:
        self.special = special
        self.capacity = max_len - len(special.prefix) - len(special.suffix)
        if self.capacity < 2:
            raise ConfigError(f"max_len {max_len} leaves no room for tokens")
        self.current: PySequence | None = None
        self.done: list[PySequence] = []
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
                self.current = PySequence(patient)
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

    def take(self, seq_ids: np.ndarray) -> pa.RecordBatch | None:
        """The finished sequences as an ``encoded`` batch, with these ``seq_id`` (one per
        finished sequence)."""
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
                pa.array(np.asarray(seq_ids, dtype=np.uint64)),
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


def token_words(
    flat: np.ndarray,
    tok_counts: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    word_counts: np.ndarray,
    text_lengths: np.ndarray,
    flags: tuple[np.ndarray, ...],
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """encode's token -> word alignment as it was written with numpy (``_core.align_tokens``
    replaced it): each token's first overlapped word (text-local, -1: none), and the OR of the
    flags of every word it overlaps."""
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


def span_overlap(by_doc: dict, doc_ids: list[str], starts: np.ndarray, ends: np.ndarray,
                 counts: np.ndarray) -> np.ndarray:  # fmt: skip
    """``DocSpans.overlap`` as it was written with numpy (one sorted search over a number line
    that gives each document its own stretch)."""
    n = int(counts.sum())
    out = np.zeros(n, bool)
    if n == 0 or not by_doc:
        return out
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    width = int(max(ends.max(initial=0), 0)) + 1
    span_s, span_e = [], []
    for i, doc in enumerate(doc_ids):
        sp = by_doc.get(doc)
        if sp is None or bounds[i] == bounds[i + 1]:
            continue
        s, e = sp
        span_s.append(np.minimum(s, width) + i * width)
        span_e.append(np.minimum(e, width) + i * width)
    if not span_s:
        return out
    ss, se = np.concatenate(span_s), np.concatenate(span_e)
    shift = np.repeat(np.arange(len(doc_ids), dtype=np.int64) * width, counts)
    ws, we = starts.astype(np.int64) + shift, ends.astype(np.int64) + shift
    j = np.searchsorted(se, ws, side="right")
    ok = j < len(ss)
    out[ok] = ss[j[ok]] < we[ok]
    return out & (ends > starts)
