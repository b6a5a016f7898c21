"""Model inversion of masked name slots (after KART, Nakamura et al. 2020).

For every name slot of the members' notes (a gold or surrogate span labelled as a name, of one
or two words), the slot's words are replaced by mask tokens and full-name candidates are
ranked by ``log P(first) + log P(last)``: each word's probability is the product of its
tokens' probabilities at the masked positions (one forward pass per layout of token counts,
the positions scored independently). One-word slots are ranked over first and last names
alike. The baseline ranks the same candidates by US Census frequency (the ``names``
package's 1990 lists), i.e. an attacker who guesses popular names. A slot whose true name is
not among the candidates counts as a miss for both. Model and baseline rank the same
candidates (at most :data:`MAX_TOKENS` tokens a word), ties broken at random (the expected
rank: the census frequencies have three decimals, so many names tie).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError
from .scoring import Scorer, key

NAME_LABELS = frozenset(
    {
        "NAME",
        "PERSON",
        "PTName",
        "HCPName",
        "RelativeProxyName",
        "first_name",
        "last_name",
        "full_name",
        "doctor_first_name",
        "doctor_last_name",
        "doctor_name",
    }
)
"""Span labels taken as name slots: ``detect``'s (and Presidio's), PhysioNet's gold
categories, and the surrogate kinds."""

_WORD = re.compile(r"[A-Za-z]+(?:['-][A-Za-z]+)*")
CONTEXT_CHARS = 400
"""Characters of note text kept on each side of a slot (then cut to the model's length)."""


@dataclass
class NameList:
    """Census names, most frequent first, with their frequency (per cent)."""

    names: list[str]
    freq: np.ndarray


def census_names(kind: str, limit: int) -> NameList:
    """The ``limit`` most frequent US Census ``first`` or ``last`` names (upper case)."""
    from ..phi.census import census_frequencies

    files = ("dist.male.first", "dist.female.first") if kind == "first" else ("dist.all.last",)
    freq: dict[str, float] = {}
    for fname in files:
        for name, f in census_frequencies(fname).items():
            freq[name] = max(freq.get(name, 0.0), f)
    ranked = sorted(freq.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    return NameList([n for n, _ in ranked], np.array([f for _, f in ranked]))


def _cased(name: str, like: str) -> str:
    """``name`` written in the case of the slot's word (upper, lower or title)."""
    if like.isupper() and len(like) > 1:
        return name.upper()
    if like.islower():
        return name.lower()
    return name.title()


def _pairs_at_least(a: np.ndarray, b: np.ndarray, threshold: float) -> int:
    """How many pairs (i, j) have ``a[i] + b[j] >= threshold`` (float64)."""
    if not len(a) or not len(b):
        return 0
    b = np.sort(np.asarray(b, dtype=np.float64))
    a = np.asarray(a, dtype=np.float64)
    return int((len(b) - np.searchsorted(b, threshold - a, side="left")).sum())


def _mid_rank(count: Any, true_score: float) -> float:
    """The expected rank of the true candidate when ties are broken at random: 1 + those
    scored higher + half the others scored the same. ``count(t)`` counts candidates (the true
    one included) scored at least ``t``; scores within a relative 1e-9 are the same."""
    eps = 1e-9 * max(1.0, abs(true_score))
    at_least, above = count(true_score - eps), count(true_score + eps)
    return 1.0 + above + max(0, at_least - above - 1) / 2.0


MAX_TOKENS = 6
"""Candidates with more tokens than this per word are left out (for the model and the
baseline alike)."""


class Inverter:
    """Ranks census name candidates for masked slots with a masked LM."""

    def __init__(self, scorer: Scorer, tokenizer: Any, max_len: int, candidates: int) -> None:
        if scorer.causal:
            raise ConfigError("model inversion is defined here for masked LMs")
        self.scorer, self.tok, self.max_len = scorer, tokenizer, max_len
        self.first = census_names("first", candidates)
        self.last = census_names("last", candidates)
        self.cls = [tokenizer.cls_token_id] if tokenizer.cls_token_id is not None else []
        self.sep = [tokenizer.sep_token_id] if tokenizer.sep_token_id is not None else []
        self._cache: dict[tuple[int, str, str], list[list[int]]] = {}
        merged: dict[str, float] = {}
        for lst in (self.first, self.last):
            for n, f in zip(lst.names, lst.freq, strict=True):
                merged[n] = max(merged.get(n, 0.0), float(f))
        pool = sorted(merged.items(), key=lambda kv: (-kv[1], kv[0]))
        self.either = NameList([n for n, _ in pool], np.array([f for _, f in pool]))
        """One-word slots: first and last names in one list (a name in both, once)."""

    def _ids(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False, verbose=False)["input_ids"])

    def _token_lists(self, names: list[str], like: str, lead: str) -> list[list[int]]:
        case = (
            "upper" if like.isupper() and len(like) > 1 else "lower" if like.islower() else "title"
        )
        cache_key = (id(names), case, lead)
        if cache_key not in self._cache:
            texts = [lead + _cased(n, like) for n in names]
            self._cache[cache_key] = [
                list(x)
                for x in self.tok(texts, add_special_tokens=False, verbose=False)["input_ids"]
            ]
        return self._cache[cache_key]

    def _layout_scores(
        self, left: list[int], right: list[int], cands: list[list[list[int]]]
    ) -> dict[tuple[int, ...], list[tuple[np.ndarray, np.ndarray]]]:
        """For each layout of token counts (one count per slot word), one forward pass:
        per slot word, the candidates with that many tokens (indices) and their summed
        token log-probabilities at the masked positions."""
        counts = [sorted({len(t) for t in cand if 0 < len(t) <= MAX_TOKENS}) for cand in cands]
        layouts: list[tuple[int, ...]] = [()]
        for c in counts:
            layouts = [(*lay, n) for lay in layouts for n in c]
        out = {}
        rows = []
        for layout in layouts:
            room = self.max_len - len(self.cls) - len(self.sep) - sum(layout)
            keep_right = min(len(right), max(room // 2, room - len(left)))
            keep_left = max(0, min(len(left), room - keep_right))
            rows.append((self.cls + left[len(left) - keep_left :], right[:keep_right] + self.sep))
        # Layouts that share their context are scored in one batch.
        groups: dict[tuple[tuple[int, ...], tuple[int, ...]], list[tuple[int, ...]]] = {}
        for layout, (lctx, rctx) in zip(layouts, rows, strict=True):
            groups.setdefault((tuple(lctx), tuple(rctx)), []).append(layout)
        for (lctx, rctx), group in groups.items():
            scored = self.scorer.masked_slot_logprobs(
                list(lctx), list(rctx), [list(g) for g in group]
            )
            for layout, logp in zip(group, scored, strict=True):
                per_word = []
                for w, n in enumerate(layout):
                    idx = np.array(
                        [i for i, t in enumerate(cands[w]) if len(t) == n], dtype=np.int64
                    )
                    toks = np.array([cands[w][i] for i in idx], dtype=np.int64).reshape(len(idx), n)
                    scores = logp[w][np.arange(n), toks].astype(np.float64).sum(axis=1)
                    per_word.append((idx, scores))
                out[layout] = per_word
        return out

    def rank(self, text: str, start: int, end: int) -> dict[str, Any] | None:
        """Model and baseline rank of the true name of the slot ``text[start:end]``
        (``None`` when the slot is not one or two name words)."""
        slot = text[start:end].strip()
        words = _WORD.findall(slot)
        if len(words) not in (1, 2) or " ".join(words) != slot:
            return None
        left_text = text[max(0, start - CONTEXT_CHARS) : start]
        right_text = text[end : end + CONTEXT_CHARS]
        left = self._ids(left_text.rstrip())
        lead = " " if left_text[-1:].isspace() else ""
        right = self._ids(right_text)
        lists = [self.either] if len(words) == 1 else [self.first, self.last]
        true_idx = []
        for lst, w in zip(lists, words, strict=True):
            hits = [i for i, n in enumerate(lst.names) if n == w.upper()]
            true_idx.append(hits[0] if hits else None)
        if any(i is None for i in true_idx):
            return {"in_candidates": False, "model": np.inf, "baseline": np.inf}
        cands = [
            self._token_lists(lst.names, w, lead if i == 0 else " ")
            for i, (lst, w) in enumerate(zip(lists, words, strict=True))
        ]
        true_layout = tuple(len(cands[w][i]) for w, i in enumerate(true_idx))
        by_layout = self._layout_scores(left, right, cands)
        if true_layout not in by_layout:
            return {"in_candidates": True, "model": np.inf, "baseline": np.inf}
        true_score = 0.0
        for (idx, sc), i in zip(by_layout[true_layout], true_idx, strict=True):
            true_score += float(sc[np.flatnonzero(idx == i)[0]])

        # Model and baseline rank the same candidates (at most MAX_TOKENS tokens a word), with
        # ties broken at random (the census frequencies have 3 decimals: many names tie).
        def model_count(t: float) -> int:
            n = 0
            for per_word in by_layout.values():
                if len(per_word) == 1:
                    n += int((per_word[0][1] >= t).sum())
                else:
                    n += _pairs_at_least(per_word[0][1], per_word[1][1], t)
            return n

        usable = [np.array([0 < len(t) <= MAX_TOKENS for t in cand], dtype=bool) for cand in cands]
        pop = [np.log(lst.freq)[ok] for lst, ok in zip(lists, usable, strict=True)]
        true_pop = float(sum(np.log(lst.freq[i]) for lst, i in zip(lists, true_idx, strict=True)))

        def base_count(t: float) -> int:
            if len(pop) == 1:
                return int((pop[0] >= t).sum())
            return _pairs_at_least(pop[0], pop[1], t)

        return {
            "in_candidates": True,
            "model": _mid_rank(model_count, true_score),
            "baseline": _mid_rank(base_count, true_pop),
        }


def slot_sample(slots: list[tuple[int, int, int]], limit: int, seed: int) -> list[int]:
    """Indices of at most ``limit`` slots ``(doc, start, end)``, chosen by keyed hash."""
    keys = [key(seed, "slot", *s) for s in slots]
    return sorted(np.argsort(np.array(keys, dtype=np.uint64), kind="stable")[:limit].tolist())
