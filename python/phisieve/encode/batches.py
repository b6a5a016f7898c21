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
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import _core
from ..errors import ConfigError, InputError, PhisieveError, not_consecutive
from ..io.lookup import StringIndex
from ..io.sources import open_source, require_columns, string_array
from ..protection.scope import (
    DEFAULT_SCOPE,
    REASONS,
    DocSpans,
    align_ranges,
    check_scope,
)
from ..term_index.build import terms_options
from .numbering import SequenceOffsets, count_sequences
from .pack import ENCODED
from .tokenizer import SpecialTokens, _encode_texts, _splittable, rust_tokenizer

__all__ = ["Encoder", "encode_batches", "protection_report", "resolve_options"]


def _flat(list_array: pa.Array) -> np.ndarray:
    return list_array.flatten().to_numpy(zero_copy_only=False)


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
    overlaps (doc-local number, -1 for none) and OR the flags of every word it overlaps
    (:func:`~phisieve.protection.scope.align_ranges`; ``text_lengths`` is not needed there,
    offsets being per text)."""
    return align_ranges(flat[:, 0], flat[:, 1], tok_counts, starts, ends, word_counts, list(flags))


def _word_flags(
    texts: pa.Array,
    doc_ids: pa.Array,
    patients: pa.Array,
    normalize: str,
    marker: Any,
    policy: str,
    direct_terms: StringIndex,
    patient_scope: bool,
    spans: DocSpans | None,
) -> tuple[pa.RecordBatch, np.ndarray, dict[str, np.ndarray]]:
    """phisieve's words of each text, their count per text, and per word (flat) each reason
    of :data:`~phisieve.protection.scope.REASONS` that protects it. With ``patient_scope``,
    the words inside a patient's spans protect the same words in all the patient's texts:
    every document of each patient must be in ``texts`` (:class:`Encoder` holds a patient's
    documents back until the next patient starts)."""
    toks = _core.tokenize(texts, normalize=normalize)
    words = toks.column("words")
    counts = pc.list_value_length(words).to_numpy(zero_copy_only=False)
    flat = words.flatten()
    if marker is not None and len(marker):
        indirect = _flat(marker.mark(texts, policy=policy)).astype(bool)
    else:
        indirect = np.zeros(len(flat), bool)
    corpus = direct_terms.contains(flat)
    span = np.zeros(len(flat), bool)
    if spans is not None:
        span = spans.overlap(
            doc_ids, _flat(toks.column("starts")), _flat(toks.column("ends")), counts
        )
    patient = np.zeros(len(flat), bool)
    if patient_scope and span.any():
        patient = _same_patient_words(patients, counts, flat, span)
    # Propagation counts beyond the spans: a word inside a span is protected in place.
    flags = {
        "span": span,
        "patient": patient & ~span,
        "corpus": corpus & ~span,
        "indirect": indirect,
    }
    return toks, counts, flags


def _same_patient_words(
    patients: pa.Array, counts: np.ndarray, words: pa.Array, inside: np.ndarray
) -> np.ndarray:
    """Per word (flat, ``counts[i]`` of them in text ``i`` of patient ``patients[i]``,
    patients consecutive), whether the same patient has the same word inside a span
    (``inside``): keys (patient number, word number) looked up in the set of the inside
    ones."""
    new = np.ones(len(patients), bool)
    new[1:] = pc.not_equal(patients[1:], patients[:-1]).to_numpy(zero_copy_only=False)
    owner = np.repeat(np.cumsum(new) - 1, counts).astype(np.int64)
    codes = pc.dictionary_encode(words).indices.to_numpy(zero_copy_only=False)
    keys = owner * (int(codes.max(initial=0)) + 1) + codes
    found = pa.array(np.unique(keys[inside]))
    return pc.is_in(pa.array(keys), value_set=found).to_numpy(zero_copy_only=False)


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


class Encoder:
    """The batch function of ``encode``: documents -> ``encoded`` rows, with per-token
    protection flags, packed per patient (see :func:`phisieve.api.encode`).

    ``spans`` protects the words of direct spans in place and, with ``patient_scope``, the
    same (normalised) words in all the patient's documents: a patient's documents are then
    held back until the next patient starts (or :meth:`flush`), so that all its span words
    are known before any of its documents is encoded. With ``gold`` spans,
    :attr:`stats` also counts the word tokens inside them (``gold_tokens``) and how many are
    protected, in all and by reason (``gold_protected``, ``gold_<reason>``).

    Documents must come grouped by patient: a patient's last sequence is finished when the
    next patient starts (or at :meth:`flush`); a patient whose documents come back after
    another patient's is refused. Each sequence's ``seq_id`` is its number among its
    patient's sequences (0, 1, 2...); :func:`number_sequences` makes them corpus-wide.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        terms: pa.Table | None = None,
        spans: DocSpans | None = None,
        patient_scope: bool = False,
        max_len: int = 512,
        ngram: int = 1,
        policy: str = "all",
        normalize: str | None = None,
        pseudonymize: bool = False,
        gold: DocSpans | None = None,
        where: str = "documents",
    ) -> None:
        if gold is not None and pseudonymize:
            raise ConfigError("gold spans cannot be scored on pseudonymised text")
        self.normalize = resolve_options(terms, normalize, None)[0]
        self.spans, self.gold, self.where = spans, gold, where
        self.policy, self.pseudonymize = policy, pseudonymize
        sp = SpecialTokens.of(tokenizer)
        self._packer_args = (max_len, sp.prefix, sp.suffix, sp.doc_end)
        self.packer = _core.Packer(*self._packer_args)
        # A copy of the Rust tokenizer behind the fast tokenizer, with truncation and padding
        # off (documents are split into sequences here) and no length warnings.
        self.backend = copy.deepcopy(tokenizer.backend_tokenizer)
        self.backend.no_truncation()
        self.backend.no_padding()
        # Note text is text: a note that says "[SEP]" or "[MASK]" gets the tokens of those
        # characters, never the special ids (which would end a sequence early, or plant a
        # mask the model is trained to fill).
        self.backend.encode_special_tokens = True
        self.splittable = _splittable(self.backend)
        self.rust = rust_tokenizer(self.backend)
        self.marker = None
        self._marker_terms: pa.Array | None = None
        self.direct_terms = StringIndex(pa.array([], pa.string()))
        if terms is not None:
            require_columns(terms.schema, ["term", "n", "indirect", "direct"], "terms")
            usable = terms.filter(pc.less_equal(terms.column("n"), ngram))
            self._marker_terms = string_array(usable.filter(pc.field("indirect")).column("term"))
            self.marker = _core.Marker(self._marker_terms, normalize=self.normalize)
            self.direct_terms = StringIndex(terms.filter(pc.field("direct")).column("term"))
        self.patient_scope = patient_scope and spans is not None
        self._held: list[pa.RecordBatch] = []
        self._held_patient: str | None = None
        keys = ["documents", "sequences", "tokens", "protected", "direct", "indirect", "words"]
        keys += ["dropped_tokens"]  # tokens of word-less pieces, which make no sequence
        keys += [f"{p}_{r}" for p in ("by", "only") for r in REASONS]
        if gold is not None:
            keys += ["gold_tokens", "gold_protected", *(f"gold_{r}" for r in REASONS)]
        self.stats: dict[str, int] = dict.fromkeys(keys, 0)
        self.last_patient: str | None = None
        self.finished: set[str] = set()
        self.row = 0
        self._seq_patient: str | None = None
        self._seq_next = 0

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        """The sequences a batch of documents (``doc_id``, ``patient_id``, ``text``, in this
        order) completes."""
        if batch.num_rows == 0:
            return None
        doc_ids = string_array(batch.column(0))
        patients = string_array(batch.column(1))
        texts = batch.column(2)
        for col, name in zip((doc_ids, patients, texts), batch.schema.names, strict=True):
            if col.null_count:
                row = self.row + int(pc.index(pc.is_null(col), True).as_py())
                raise InputError(f"{name} is null", path=self.where, row=row, column=name)
        patient_list = patients.to_pylist()
        self._check_grouped(patient_list, batch.schema.names[1])
        self.row += batch.num_rows
        if not self.patient_scope:
            self._encode(batch)
            return self._take()
        # Hold back the last patient's documents: the next batch may carry more of them.
        last, cut = patient_list[-1], len(patient_list)
        while cut and patient_list[cut - 1] == last:
            cut -= 1
        if not cut and self._held and self._held_patient == last:
            self._held.append(batch)
            return None
        ready = [*self._held, batch.slice(0, cut)] if cut else self._held
        self._held, self._held_patient = [batch.slice(cut)], last
        if ready:
            self._encode(_concat(ready))
        return self._take()

    def _encode(self, batch: pa.RecordBatch) -> None:
        """Encode documents (every document of their patients, except perhaps the last
        patient's when patients are not in scope) into the packer."""
        stats = self.stats
        doc_ids = string_array(batch.column(0))
        patients = string_array(batch.column(1))
        texts = batch.column(2)
        patient_list = patients.to_pylist()
        doc_list = doc_ids.to_pylist()
        flags = functools.partial(
            _word_flags,
            doc_ids=doc_ids,
            patients=patients,
            normalize=self.normalize,
            marker=self.marker,
            policy=self.policy,
            direct_terms=self.direct_terms,
            patient_scope=self.patient_scope,
        )
        toks, counts, reasons = flags(texts, spans=self.spans)
        if self.pseudonymize:
            direct = reasons["span"] | reasons["patient"] | reasons["corpus"]
            per_doc = np.split(direct, np.cumsum(counts)[:-1])
            new = _pseudonymize(
                texts.to_pylist(),
                toks.column("starts").to_pylist(),
                toks.column("ends").to_pylist(),
                per_doc,
            )
            texts = pa.array(new, pa.large_string())
            # The spans' offsets point into the old text; no word is direct any more.
            toks, counts, reasons = flags(texts, spans=None)
            for r in ("span", "patient", "corpus"):
                reasons[r] = np.zeros_like(reasons[r])
        ids, tok_offsets, tok_counts = _encode_texts(
            self.backend, texts.to_pylist(), self.splittable, self.rust
        )
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
        if self.gold is not None:
            _count_gold(stats, self.gold, doc_ids, tok_offsets, tok_counts, words, by_reason)
        bounds = np.concatenate([[0], np.cumsum(tok_counts)]).astype(np.int64)
        self.packer.add_batch(
            patient_list,
            doc_list,
            pa.array(bounds),
            pa.array(ids, pa.uint32()),
            pa.array(words.astype(np.int64, copy=False)),
            pa.array(tok_direct),
            pa.array(tok_indirect),
        )
        stats["documents"] += batch.num_rows
        stats["words"] += int(counts.sum())

    def __getstate__(self) -> dict[str, Any]:
        # The Rust marker does not pickle: it is made again from its terms (an encoder is
        # sent to each worker of a cluster).
        if not self.packer.is_empty() or self._held:
            raise PhisieveError("an encoder holding unfinished sequences cannot be pickled")
        state = dict(self.__dict__)
        state["marker"] = None
        state["rust"] = None
        state["packer"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if getattr(self, "_marker_terms", None) is not None:
            self.marker = _core.Marker(self._marker_terms, normalize=self.normalize)
        self.rust = rust_tokenizer(self.backend)
        self.packer = _core.Packer(*self._packer_args)

    def drain(self) -> dict[str, int]:
        """The counts since the last call (:attr:`stats` starts again from zero)."""
        counts, self.stats = self.stats, dict.fromkeys(self.stats, 0)
        return counts

    def fork(self, row: int = 0) -> Encoder:
        """A fresh encoder with the same tokenizer, terms and spans, that has seen no
        document (for one partition of the corpus, whose first row is ``row``)."""
        new = copy.copy(self)
        new.packer = self.packer.fresh()
        new._held, new._held_patient = [], None
        new.stats = dict.fromkeys(self.stats, 0)
        new.last_patient, new.finished, new.row = None, set(), row
        new._seq_patient, new._seq_next = None, 0
        return new

    def _check_grouped(self, patients: list[str], column: str) -> None:
        """Refuse a patient whose documents come back after another patient's (its first
        sequences would already be packed and numbered)."""
        last = self.last_patient
        for r, patient in enumerate(patients):
            if patient == last:
                continue
            if patient in self.finished:
                raise not_consecutive(self.where, self.row + r, column)
            if last is not None:
                self.finished.add(last)
            last = patient
        self.last_patient = last

    def _take(self) -> pa.RecordBatch | None:
        """The finished sequences, each numbered within its patient."""
        done = self.packer.take()
        if done is None:
            return None
        patients = done.column("patient_id").to_pylist()
        seq_ids = np.empty(len(patients), dtype=np.uint64)
        for i, patient in enumerate(patients):
            if patient != self._seq_patient:
                self._seq_patient, self._seq_next = patient, 0
            seq_ids[i] = self._seq_next
            self._seq_next += 1
        out = pa.record_batch([pa.array(seq_ids), *done.columns], schema=ENCODED)
        return _count(out, self.stats)

    def flush(self) -> pa.RecordBatch | None:
        """The last patient's last sequence."""
        if self._held:
            self._encode(_concat(self._held))
            self._held = []
        self.packer.finish_patient()
        self.stats["dropped_tokens"] += self.packer.dropped_tokens
        self.packer.dropped_tokens = 0
        return self._take()


def encode_batches(
    docs: Any,
    tokenizer: Any,
    *,
    terms: pa.Table | None = None,
    spans: DocSpans | None = None,
    patient_scope: bool = False,
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
    """Encode documents into ``encoded`` record batches (:class:`Encoder` over ``docs``,
    held in memory until every sequence is counted, then numbered corpus-wide:
    :mod:`phisieve.encode.numbering`); ``stats``, when given, receives the counts."""
    src = docs if hasattr(docs, "batches") else open_source(docs, batch_size)
    require_columns(src.schema, [doc_col, patient_col, text_col], src.name)
    encoder = Encoder(
        tokenizer,
        terms=terms,
        spans=spans,
        patient_scope=patient_scope,
        max_len=max_len,
        ngram=ngram,
        policy=policy,
        normalize=normalize,
        pseudonymize=pseudonymize,
        gold=gold,
        where=src.name,
    )
    done: list[pa.RecordBatch] = []
    for batch in src.batches([doc_col, patient_col, text_col]):
        out = encoder(batch)
        if out is not None:
            done.append(out)
        if advance is not None:
            advance(batch.num_rows)
    out = encoder.flush()
    if out is not None:
        done.append(out)
    if stats is not None:
        stats.update(encoder.stats)
    counts: dict[str, int] = {}
    count_sequences(done, counts)
    offsets = SequenceOffsets(counts)
    for b in done:
        yield offsets.number(b)


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    schema = batches[0].schema
    return pa.concat_batches([b if b.schema == schema else b.cast(schema) for b in batches])


def _count_reasons(stats: dict[str, int], by_reason: dict[str, np.ndarray]) -> None:
    stacked = np.stack([by_reason[r] for r in REASONS])
    alone = stacked.sum(axis=0) == 1
    for i, r in enumerate(REASONS):
        stats[f"by_{r}"] += int(stacked[i].sum())
        stats[f"only_{r}"] += int((stacked[i] & alone).sum())


def _count_gold(
    stats: dict[str, int],
    gold: DocSpans,
    doc_ids: pa.Array,
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
