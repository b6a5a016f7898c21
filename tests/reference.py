"""Plain-Python reference implementations the Rust core is checked against.

They follow DESIGN.md section 2 literally and favour clarity over speed.
"""

from __future__ import annotations

import unicodedata
from collections import defaultdict
from collections.abc import Iterable

import regex

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
