"""What the audit asks of a model: token log-probabilities, ranks and top-k hits.

Everything here runs a Hugging Face masked LM (``...ForMaskedLM``) or causal LM
(``...ForCausalLM`` / ``...LMHeadModel``) in evaluation mode, in batches, on ``encoded``
sequences (DESIGN.md §1). Which tokens are masked is a pure function of the seed and the
sequence id, so two models audited with the same seed see the same masks.

* :func:`sequence_scores`: per sequence, the log-probability of the scored tokens (masked LM:
  the tokens of ``round(0.15 × words)`` whole words masked per round; causal LM: every token
  after the first, given its true prefix), with the mean and standard deviation of the
  model's own log-probabilities at those positions (for Min-K%++).
* :func:`word_scores`: per word occurrence, whole word masked (masked LM) or predicted from
  its true prefix (causal LM): NLL of all its tokens, the worst token rank, and whether every
  token is the model's top-1 / in its top-5.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import ConfigError

MASK_SHARE = 0.15
"""Share of words masked per round when a masked LM's membership scores are computed."""


@dataclass
class Sequences:
    """The audited rows of an ``encoded`` dataset, as numpy arrays."""

    seq_ids: np.ndarray
    patients: np.ndarray
    ids: list[np.ndarray]
    words: list[np.ndarray]
    direct: list[np.ndarray]
    indirect: list[np.ndarray]

    @classmethod
    def of(cls, table: pa.Table) -> Sequences:
        def lists(name: str, dtype: Any) -> list[np.ndarray]:
            col = table.column(name).combine_chunks()
            flat = col.values.to_numpy(zero_copy_only=False).astype(dtype)
            offsets = col.offsets.to_numpy()
            return [flat[offsets[i] : offsets[i + 1]] for i in range(len(col))]

        return cls(
            seq_ids=table.column("seq_id").to_numpy().astype(np.uint64),
            patients=np.asarray(table.column("patient_id").to_pylist(), dtype=object),
            ids=lists("input_ids", np.int64),
            words=lists("word_ids", np.int64),
            direct=lists("direct", bool),
            indirect=lists("indirect", bool),
        )

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class Occurrence:
    """One word occurrence: sequence row, token positions, flags."""

    row: int
    positions: np.ndarray
    direct: bool
    indirect: bool


def key(seed: int, *parts: object) -> int:
    """A 64-bit key, a pure function of the seed and the parts (masks, samples)."""
    h = hashlib.blake2b(digest_size=8, key=str(seed).encode())
    for p in parts:
        h.update(str(p).encode())
        h.update(b"\x00")
    return int.from_bytes(h.digest(), "little")


def word_occurrences(seqs: Sequences) -> list[Occurrence]:
    """Every word occurrence of the sequences, in order."""
    out = []
    for r in range(len(seqs)):
        w = seqs.words[r]
        valid = np.flatnonzero(w >= 0)
        if not len(valid):
            continue
        cuts = np.flatnonzero(np.diff(w[valid]) != 0) + 1
        for group in np.split(valid, cuts):
            out.append(
                Occurrence(
                    r,
                    group,
                    bool(seqs.direct[r][group].any()),
                    bool(seqs.indirect[r][group].any()),
                )
            )
    return out


def sample(items: list[Any], limit: int | None, seed: int, salt: str, ident: Any) -> list[Any]:
    """At most ``limit`` of ``items``, chosen by keyed hash (order kept)."""
    if limit is None or len(items) <= limit:
        return items
    keys = np.array([key(seed, salt, ident(x)) for x in items], dtype=np.uint64)
    keep = np.sort(np.argsort(keys, kind="stable")[:limit])
    return [items[i] for i in keep]


class Scorer:
    """A model in evaluation mode, with the batching the audit needs."""

    def __init__(
        self,
        model: Any,
        *,
        causal: bool,
        mask_id: int | None,
        pad_id: int,
        device: Any,
        batch_size: int = 32,
    ) -> None:
        import torch

        if not causal and mask_id is None:
            raise ConfigError("a masked LM is audited with a tokenizer that has a mask token")
        self.torch = torch
        self.model = model.to(device).eval()
        self.causal = causal
        self.mask_id = mask_id
        self.pad_id = pad_id
        self.device = device
        self.batch_size = batch_size
        limit = getattr(model.config, "max_position_embeddings", None) or getattr(
            model.config, "n_positions", None
        )
        self.max_len = int(limit) if limit else None

    def _batches(self, rows: list[np.ndarray]) -> Iterator[tuple[int, Any, Any]]:
        torch = self.torch
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start : start + self.batch_size]
            width = max(len(r) for r in chunk)
            ids = np.full((len(chunk), width), self.pad_id, dtype=np.int64)
            att = np.zeros((len(chunk), width), dtype=np.int64)
            for i, r in enumerate(chunk):
                ids[i, : len(r)] = r
                att[i, : len(r)] = 1
            yield (
                start,
                torch.from_numpy(ids).to(self.device),
                torch.from_numpy(att).to(self.device),
            )

    def _head(self) -> Any:
        """The base model and the LM head apart, so that the head (a vocabulary-sized
        projection, most of a small model's cost) runs only where a score is needed;
        ``None`` for an architecture this does not know (the whole model then runs)."""
        m = self.model
        base = getattr(m, getattr(m, "base_model_prefix", ""), None)
        head = getattr(m, "cls", None) if hasattr(m, "cls") else getattr(m, "lm_head", None)
        if base is None or head is None or not callable(head):
            return None
        return base, head

    def _logits_cat(
        self, rows: list[np.ndarray], positions: list[np.ndarray] | None
    ) -> Iterator[tuple[int, Any, list[int]]]:
        torch = self.torch
        if self.max_len is not None and any(len(r) > self.max_len for r in rows):
            raise ConfigError(
                f"sequences longer than the model's {self.max_len} positions: encode with a "
                "smaller --max-len"
            )
        split = self._head()
        for start, ids, att in self._batches(rows):
            n = ids.shape[0]
            want = [
                torch.from_numpy(
                    np.arange(len(rows[start + i])) if positions is None else positions[start + i]
                ).to(self.device)
                for i in range(n)
            ]
            sizes = [len(w) for w in want]
            with torch.no_grad():
                if split is None:
                    full = self.model(input_ids=ids, attention_mask=att).logits
                    logits = torch.cat([full[i, want[i]] for i in range(n)])
                else:
                    base, head = split
                    hidden = base(input_ids=ids, attention_mask=att)[0]
                    logits = head(torch.cat([hidden[i, want[i]] for i in range(n)]))
            yield start, logits.float(), sizes

    def logits(
        self, rows: list[np.ndarray], positions: list[np.ndarray] | None = None
    ) -> Iterator[tuple[int, list[Any]]]:
        """Float32 logits of batches of rows (right-padded): with the first row's index, a
        [k, vocab] tensor per row at its ``positions`` (default: every position)."""
        for start, logits, sizes in self._logits_cat(rows, positions):
            yield start, list(self.torch.split(logits, sizes))

    def stats(
        self, rows: list[np.ndarray], positions: list[np.ndarray], targets: list[np.ndarray]
    ) -> Iterator[tuple[int, tuple[np.ndarray, ...]]]:
        """For each row: at its ``positions``, the log-probability of its ``targets``, their
        rank (1 = the model's top-1), and the mean and standard deviation of the model's own
        log-probabilities there (one vectorised pass per batch)."""
        for start, logits, sizes in self._logits_cat(rows, positions):
            tgt = np.concatenate([targets[start + i] for i in range(len(sizes))])
            cols = self._position_stats(logits, self.torch.from_numpy(tgt).to(self.device))
            cuts = np.cumsum(sizes)[:-1]
            parts = [np.split(c, cuts) for c in cols]
            for i in range(len(sizes)):
                yield start + i, tuple(p[i] for p in parts)

    def _position_stats(self, logits: Any, targets: Any) -> tuple[np.ndarray, ...]:
        """log p(target), rank of the target (1 = the only top-1), mean and sd of log p(z)."""
        torch = self.torch
        logp = torch.log_softmax(logits, dim=-1)
        true = logp.gather(-1, targets[:, None])[:, 0]
        # Ties count against the target (a flat distribution ranks it last, not first).
        rank = (logp >= true[:, None]).sum(-1)
        # Flush the tiny probabilities to 0 (denormal floats make this 100x slower).
        p = torch.where(logp > -80.0, logp.exp(), 0.0)
        mu = (p * logp).sum(-1)
        sd = (p * (logp - mu[:, None]) ** 2).sum(-1).clamp_min(0).sqrt()
        return tuple(t.cpu().numpy().astype(np.float64) for t in (true, rank, mu, sd))

    def sequence_scores(
        self, seqs: Sequences, *, seed: int, rounds: int = 1
    ) -> list[dict[str, np.ndarray]]:
        """Per sequence: ``logp``, ``mu``, ``sigma`` of its scored tokens (see module doc)."""
        out: list[dict[str, list[np.ndarray]]] = [
            {"logp": [], "mu": [], "sigma": []} for _ in range(len(seqs))
        ]
        if self.causal:
            keep = [r for r in range(len(seqs)) if len(seqs.ids[r]) >= 2]
            rows = [seqs.ids[r] for r in keep]
            where = [np.arange(len(x) - 1) for x in rows]
            tgts = [x[1:] for x in rows]
            for i, (lp, _, mu, sd) in self.stats(rows, where, tgts):
                for k, v in zip(("logp", "mu", "sigma"), (lp, mu, sd), strict=True):
                    out[keep[i]][k].append(v)
        else:
            for rnd in range(rounds):
                rows, where, keep = [], [], []
                for r in range(len(seqs)):
                    positions = self._masked_positions(seqs, r, seed, rnd, rounds)
                    if not len(positions):
                        continue
                    masked = seqs.ids[r].copy()
                    masked[positions] = self.mask_id
                    rows.append(masked)
                    where.append(positions)
                    keep.append(r)
                tgts = [seqs.ids[r][p] for r, p in zip(keep, where, strict=True)]
                for i, (lp, _, mu, sd) in self.stats(rows, where, tgts):
                    for k, v in zip(("logp", "mu", "sigma"), (lp, mu, sd), strict=True):
                        out[keep[i]][k].append(v)
        return [{k: np.concatenate(v) if v else np.zeros(0) for k, v in o.items()} for o in out]

    def _masked_positions(
        self, seqs: Sequences, r: int, seed: int, rnd: int, rounds: int
    ) -> np.ndarray:
        """The token positions of the words masked in round ``rnd``: words are ordered by a
        keyed hash of (seed, seq_id, word); round j masks the j-th block of
        ``max(1, round(0.15 × words))`` of them, so rounds never repeat a word."""
        w = seqs.words[r]
        word_list = np.unique(w[w >= 0])
        if not len(word_list):
            return np.zeros(0, np.int64)
        per = max(1, round(MASK_SHARE * len(word_list)))
        sid = int(seqs.seq_ids[r])
        keys = np.array([key(seed, "mlm", sid, int(x)) for x in word_list], dtype=np.uint64)
        order = word_list[np.argsort(keys, kind="stable")]
        chosen = order[(rnd * per) % len(order) :][:per] if rounds > 1 else order[:per]
        return np.flatnonzero(np.isin(w, chosen))

    def word_scores(self, seqs: Sequences, occurrences: list[Occurrence]) -> dict[str, np.ndarray]:
        """Per occurrence: ``nll`` (sum over its tokens, nats), ``rank`` (its worst token's),
        ``top1`` (every token top-1), ``top5`` (every token in the top 5), ``scored`` (False
        for a causal LM's word at position 0, which has no prefix)."""
        n = len(occurrences)
        nll, rank = np.full(n, np.nan), np.full(n, np.nan)
        top1, top5, scored = np.zeros(n, bool), np.zeros(n, bool), np.zeros(n, bool)

        def record(j: int, lp: np.ndarray, rk: np.ndarray) -> None:
            nll[j], rank[j] = -lp.sum(), rk.max()
            top1[j], top5[j], scored[j] = bool((rk == 1).all()), bool((rk <= 5).all()), True

        if self.causal:
            by_row: dict[int, list[int]] = {}
            for j, o in enumerate(occurrences):
                if o.positions[0] > 0:
                    by_row.setdefault(o.row, []).append(j)
            rows_needed = sorted(by_row)
            rows = [seqs.ids[r] for r in rows_needed]
            # The logits at the position before each token of the row's scored words.
            where = [
                np.concatenate([occurrences[j].positions - 1 for j in by_row[r]])
                for r in rows_needed
            ]
            tgts = [
                np.concatenate([seqs.ids[r][occurrences[j].positions] for j in by_row[r]])
                for r in rows_needed
            ]
            for i, (lp, rk, _, _) in self.stats(rows, where, tgts):
                k = 0
                for j in by_row[rows_needed[i]]:
                    size = len(occurrences[j].positions)
                    record(j, lp[k : k + size], rk[k : k + size])
                    k += size
        else:
            rows = []
            for o in occurrences:
                masked = seqs.ids[o.row].copy()
                masked[o.positions] = self.mask_id
                rows.append(masked)
            where = [o.positions for o in occurrences]
            tgts = [seqs.ids[o.row][o.positions] for o in occurrences]
            for j, (lp, rk, _, _) in self.stats(rows, where, tgts):
                record(j, lp, rk)
        return {"nll": nll, "rank": rank, "top1": top1, "top5": top5, "scored": scored}

    def masked_slot_logprobs(
        self, left: list[int], right: list[int], layouts: list[list[int]]
    ) -> list[list[np.ndarray]]:
        """Masked LM: for each layout, the row ``left`` + masks + ``right``, where the layout
        gives the mask count of each slot word (the candidates' own tokens carry the word
        boundaries). Returns, per layout and slot word, a [count, vocab] array of
        log-probabilities; the layouts are scored in batches."""
        torch = self.torch
        rows = []
        for layout in layouts:
            masks = [int(self.mask_id)] * sum(layout)  # type: ignore[arg-type]
            rows.append(np.array([*left, *masks, *right], dtype=np.int64))
        out: list[list[np.ndarray]] = []
        where = [np.arange(len(left), len(left) + sum(lay)) for lay in layouts]
        for start, logits in self.logits(rows, where):
            for i, lg in enumerate(logits):
                layout = layouts[start + i]
                logp = torch.log_softmax(lg, -1).cpu().numpy()
                parts, k = [], 0
                for count in layout:
                    parts.append(logp[k : k + count])
                    k += count
                out.append(parts)
        return out

    def sentence_logprob(self, rows: list[np.ndarray], starts: list[int]) -> np.ndarray:
        """Causal LM: the log-probability of each row's tokens from ``starts[i]`` on, given
        the tokens before them."""
        torch = self.torch
        out = np.zeros(len(rows))
        firsts = [max(1, s) for s in starts]
        where = [np.arange(f - 1, len(r) - 1) for f, r in zip(firsts, rows, strict=True)]
        for start, logits in self.logits(rows, where):
            for i, lg in enumerate(logits):
                r = start + i
                tgt = torch.from_numpy(rows[r][firsts[r] :]).to(self.device)
                logp = torch.log_softmax(lg, -1)
                out[r] = float(logp.gather(-1, tgt[:, None]).sum())
        return out
