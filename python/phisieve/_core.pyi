"""Type stubs of phisieve's Rust extension (rust/py/src, one file per concept).

Kept by hand for its types; tests/test_stub.py checks every name and every parameter list
(names, order, kinds, defaults) against the compiled module's ``__text_signature__``s.
"""

from typing import Any

import pyarrow as pa

__version__: str

class IndexBuilder:
    """Builds the patient x term index from batches of documents grouped by patient.

    Parameters
    ----------
    ngram
        Count word n-grams for n = 1..ngram (1 to 4).
    k
        A term used by fewer than k patients is indirect; up to k patient ids are kept.
    normalize
        ``nfkc_lower``, ``nfkc``, ``nfc_lower``, ``nfc``, ``lower`` or ``none``.
    modulus, residue
        Count only the terms whose hash is ``residue`` modulo ``modulus``.
    threads
        Worker threads; 0 uses all cores.
    hold
        Keep freed memory while the index lives (faster: batch after batch reuses it);
        False gives it back to the OS as usual (a lower peak, under a memory budget).
    """

    def __init__(
        self,
        ngram: int = 1,
        k: int = 2,
        normalize: str = "nfkc_lower",
        modulus: int = 1,
        residue: int = 0,
        threads: int = 0,
        hold: bool = True,
    ) -> None: ...
    def add(self, patient_ids: Any, texts: Any) -> None:
        """Add one batch: Arrow string arrays, ``patient_ids[i]`` wrote ``texts[i]``."""
    def memory_bytes(self) -> int:
        """Approximate bytes the index holds."""
    def peak_bytes(self) -> int:
        """Approximate bytes at the index's peak: what it holds plus what ``finish`` adds."""
    def fixed_bytes(self) -> int:
        """The part of ``peak_bytes`` every partition pass holds whole (the vocabularies)."""
    def totals(self) -> dict[str, int]:
        """``documents``, ``tokens`` and ``patients`` seen so far."""
    def patient_ids(self) -> list[str]:
        """Every patient id seen, in order of first appearance."""
    def finish(self) -> pa.Table:
        """The ``terms`` table, sorted by (n, term); the builder cannot be used after."""

class Marker:
    """A blacklist of n-grams (normalised words joined by spaces) that marks protected words."""

    def __init__(self, terms: Any, normalize: str = "nfkc_lower") -> None: ...
    def __len__(self) -> int: ...
    def mark(self, texts: Any, policy: str = "all") -> pa.Array:
        """Per text, one flag per word: protected under ``all`` or ``minimal``."""
    def counts(self, texts: Any) -> dict[str, int]:
        """``words`` in the texts and how many the ``all`` and ``minimal`` policies protect."""

def tokenize(texts: Any, normalize: str = "nfkc_lower") -> pa.RecordBatch:
    """Words of each text: code-point ``starts``/``ends`` and normalised ``words``."""

def normalize_word(word: str, normalize: str = "nfkc_lower") -> str:
    """The term a single word becomes."""

def mask_batch(
    seq_ids: Any,
    input_ids: Any,
    word_ids: Any,
    protected: Any,
    direct: Any,
    indirect: Any,
    length: int,
    settings: dict[str, Any],
) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Training rows of an encoded batch padded to ``length``: flat int64 ``input_ids``,
    ``attention_mask`` and ``labels`` (rows x length values). ``settings``: the sampler's
    ``causal``, ``protect`` (``nothing``, ``all``, ``direct`` or ``indirect``),
    ``probability``, ``replace_mask``, ``replace_random``, ``mask_id``, ``pad_id``,
    ``vocab_size``, ``seed`` and ``epoch`` (``phisieve.training.masking`` builds them);
    draws depend on (seed, epoch, seq_id) only."""

def py_lists(rows: list[list[Any]], kind: str) -> pa.ListArray:
    """Python lists of values, one per row (``kind`` ``uint32``, ``int32`` or ``bool``), as one
    Arrow list array, converted in one pass in Rust. ``TypeError`` or ``OverflowError`` for a
    row that is not a list or a value that does not convert."""

def mask_rows(
    seq_ids: list[int],
    input_ids: list[list[int]],
    word_ids: list[list[int]],
    flags: list[list[bool]] | None,
    length: int,
    settings: dict[str, Any],
) -> tuple[bytearray, bytearray, bytearray]:
    """:func:`mask_batch` for rows given as Python lists (``flags``: the one flag column that
    ``protect`` reads, None for ``nothing``): ``input_ids``, ``attention_mask`` and ``labels``
    as bytearrays of rows x length native int64 values, with the same draws."""

class ModelTokenizer:
    """A Hugging Face tokenizer (its ``tokenizer.json``) run from Rust for ``encode``:
    truncation and padding off, special tokens written in a text encoded as text."""

    def __init__(self, json: str) -> None: ...
    def encode(self, texts: list[str]) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
        """Token ids (uint32), start and end character offsets (int64) of every text's
        tokens, no special tokens added, and each text's token count (int64)."""

class CrfTagger:
    """A trained linear-chain CRF (the ``crf`` recognizer), tagging from Arrow attribute
    strings (``phisieve_core::crf``): Viterbi labels and forward-backward marginals."""

    def __init__(
        self,
        labels: list[str],
        attributes: list[str],
        weights: list[float],
        transitions: list[float],
    ) -> None: ...
    @property
    def labels(self) -> list[str]:
        """The labels, in the order of label numbers and marginals."""
    def tag(self, columns: list[Any], per_sequence: Any) -> tuple[pa.Array, pa.Array]:
        """Label numbers of the best labelling (uint32, one per position) and the label
        marginals (float64, positions x labels, row-major) of sequences laid back to back:
        position ``t``'s attributes are the values at row ``t`` of ``columns`` (string arrays
        of one length; a null is no attribute), ``per_sequence`` (int64) how many positions
        each sequence has."""
    def tag_words(
        self,
        words: CrfWords,
        template: list[tuple[str, list[tuple[str, str, int]]]],
        background: str | None = None,
        path: bool = True,
        exact: tuple[float, list[float]] | None = None,
    ) -> tuple[pa.Array, pa.Array, pa.Array]:
        """:meth:`tag` over the attributes of ``template`` built from ``words``
        (``(prefix, [(column, transform, offset), ...])`` per feature, in the order of
        :meth:`tag`'s columns; :meth:`CrfWords.attributes` gives them as strings), each
        distinct attribute looked up once, without a string per word. Returns the best
        labelling's label numbers (uint32; empty unless ``path``), and per position the
        probability of a label other than ``background`` (float64, the sum of their marginals,
        in label order) and the most likely of them (uint32; ``background`` when none).

        The forward-backward runs over scaled probabilities, which differ from log space by
        about 1e-12 (relative). ``exact``, ``(scored_from, thresholds)``, names what must
        come out as in log space: whether a probability reaches each threshold, and for the
        positions whose probability becomes a score (a label other than ``background`` in
        the best labelling, or a probability of ``scored_from`` or more) its ``float32``
        rounding and most likely label; a note where the scaled pass might not give them so
        is done again in log space."""

class CrfWords:
    """The words of sequences as interned columns, for :meth:`CrfTagger.tag_words`
    (``phisieve_core::crf_words``)."""

    def __init__(self, columns: list[tuple[str, Any, str | None]], per_sequence: Any) -> None: ...
    def __len__(self) -> int: ...
    def attributes(self, template: list[tuple[str, list[tuple[str, str, int]]]]) -> list[pa.Array]:
        """Each feature's attribute at every position (a string array per feature; a null is
        no attribute): its prefix, then its parts' values joined by ``|``, each part the
        value of a column ``offset`` positions away in the same sequence (``#`` past its
        ends; a null makes no attribute), transformed (``""``, ``first:N``, ``last:N``,
        ``len:N``, ``shape``). ``columns``: ``(name, array, null)``, strings, booleans
        (``true``/``false``) or integers (decimal), ``null`` standing for the nulls (``None``
        keeps them null); ``per_sequence`` (int64) how many positions each sequence has."""

class Packer:
    """Packs documents into model sequences for ``encode`` (``phisieve_core::pack``)."""

    def __init__(
        self, max_len: int, prefix: list[int], suffix: list[int], doc_end: int | None
    ) -> None: ...
    @property
    def dropped_tokens(self) -> int:
        """Tokens left out so far because their sequence held no word."""
    @dropped_tokens.setter
    def dropped_tokens(self, value: int) -> None: ...
    def fresh(self) -> Packer:
        """A packer with the same settings that has seen nothing."""
    def is_empty(self) -> bool:
        """Whether no sequence is being packed or waiting to be taken."""
    def finish_patient(self) -> None:
        """The current patient's last sequence is complete."""
    def add_batch(
        self,
        patients: list[str],
        doc_ids: list[str],
        bounds: Any,
        ids: Any,
        words: Any,
        direct: Any,
        indirect: Any,
    ) -> None:
        """Append a batch's documents in order (tokens ``bounds[r]:bounds[r + 1]``)."""
    def take(self) -> pa.RecordBatch | None:
        """The finished sequences (``patient_id``, ``doc_ids``, ``input_ids``, ``word_ids``,
        ``protected``, ``direct``, ``indirect``), or None."""

def align_tokens(
    tok_starts: Any,
    tok_ends: Any,
    tok_counts: Any,
    word_starts: Any,
    word_ends: Any,
    word_counts: Any,
    flags: list[Any],
) -> tuple[pa.Array, tuple[pa.Array, ...]]:
    """Per model token (int64 arrays; offsets per text) the text-local number of the first
    word it overlaps (-1: none), and per flag (bool, one per word) whether any word it overlaps
    has it."""

def find_placeholders(texts: Any) -> pa.RecordBatch:
    """Every MIMIC-III ``[** ... **]`` placeholder of each text, one row each: ``text`` (input
    row), code-point ``start``/``end``, ``form``, ``category``/``qualifier``/``id`` and
    ``year``/``month``/``day``/``shape``."""

def keyed_draws(secret: bytes, parts: list[Any]) -> pa.UInt64Array:
    """One ``uint64`` per row: the first 8 bytes (big-endian) of HMAC-SHA256 under ``secret``
    of the row's values in ``parts`` (string arrays of one length), each framed by its length
    as 8 little-endian bytes (a null as ``2**64 - 1`` with no bytes)."""

def id_hashes(ids: Any) -> pa.UInt64Array:
    """The fixed hash of each id of a string array (null for null): 64-bit FNV-1a over the
    UTF-8 bytes, finished with SplitMix64's output function. Stable across versions; the
    index keeps per term the ``k`` patients smallest by (hash, id)."""

def splice(
    texts: Any, rows: Any, starts: Any, ends: Any, with_: Any
) -> tuple[pa.LargeStringArray, pa.Int32Array, pa.Int32Array]:
    """Replace code-point ranges: edit ``i`` puts ``with_[i]`` in place of
    ``starts[i]:ends[i]`` of ``texts[rows[i]]`` (``rows`` uint64, not decreasing; a row's edits
    sorted and disjoint). Returns the new texts and each replacement's code-point range in
    its new text."""

def detect_rules(texts: Any) -> pa.RecordBatch:
    """Rule detections of direct identifiers, one row each: ``text`` (input row), code-point
    ``start``/``end``, ``label`` (DATE, PHONE, EMAIL, URL, IP, SSN, ZIP, AGE, ID, LOCATION, NAME),
    ``rule`` and ``score``. Overlapping detections are all kept."""
