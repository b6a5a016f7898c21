"""Plain-Python reference implementations the Rust core is checked against.

They follow DESIGN.md section 2 literally and favour clarity over speed.
"""

from __future__ import annotations

import unicodedata
from collections import defaultdict
from collections.abc import Iterable


def is_word_char(c: str) -> bool:
    return unicodedata.category(c)[0] in "LMN"


def word_spans(text: str) -> list[tuple[int, int]]:
    spans, start = [], None
    for i, c in enumerate(text):
        if is_word_char(c):
            if start is None:
                start = i
        elif start is not None:
            spans.append((start, i))
            start = None
    if start is not None:
        spans.append((start, len(text)))
    return spans


def normalize(word: str, mode: str = "nfkc_lower") -> str:
    form = {"nfkc_lower": "NFKC", "nfkc": "NFKC", "nfc_lower": "NFC", "nfc": "NFC"}.get(mode)
    if form:
        word = unicodedata.normalize(form, word)
    if mode.endswith("lower"):
        word = word.lower()
    return word.replace(" ", "")


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
