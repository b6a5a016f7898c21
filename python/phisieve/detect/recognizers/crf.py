"""The ``crf`` recognizer: a linear-chain CRF over words that tags PHI and vets the other
recognizers' spans (DESIGN.md §3).

The classic de-identification recipe (word shape, affixes, dictionaries, context words),
plus what the other recognizers found: each word carries the sources of the ``rules`` and
``lists`` spans that cover it, so the CRF learns how far to trust each rule in its context.
Two uses of its per-word probabilities:

* **tagging**: words whose most likely tag (Viterbi) is a PHI category become spans
  (source ``crf:LABEL``), which finds PHI that no rule or list knows;
* **finding**: a second CRF, the *finder*, sees the words without the other recognizers'
  spans, and tags the words it gives a PHI probability of at least ``find`` (:data:`FIND`,
  source ``crf:find:LABEL``): what it finds does not hang on a rule having fired; it is
  trained on surrogate-filled copies of the notes too, so it knows where PHI goes more than
  which PHI the training patients had;
* **vetting**: a ``rules``/``lists`` span of a category the CRF learnt is dropped when the
  CRF gives every word it covers a PHI probability below ``verify`` (:data:`VERIFY`):
  single-source false alarms, where the precision of the hand-written recognizers goes.

The bare ``crf`` recognizer runs the model trained on the PhysioNet deid notes
(:func:`physionet_crf`, 409 kB). It is distributed apart from phisieve, in
``phisieve-models-physionet`` (:data:`MODELS`; ``models/physionet/`` in the repository,
which ``make build`` installs): the notes are GPL-2.0, and so are weights learnt from them,
while phisieve is Apache-2.0. Without it, ``crf`` raises
:class:`~phisieve.errors.MissingModelError`, which says how to install it or to run
``rules,lists``. ``make crf-model`` makes it again with
``phisieve detect-train-crf ../shared/data/physionet-deid --out DIR``
(:func:`phisieve.detect.crf_train.train_crf`); CRFsuite's L-BFGS training is deterministic.
"""

from __future__ import annotations

import importlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from ...errors import ConfigError, MissingModelError
from ..labels import category
from . import SPAN_ROWS

__all__ = [
    "BUCKETS",
    "FORMAT",
    "MODELS",
    "STACKED_MODELS",
    "VERIFY",
    "CrfRecognizer",
    "crf_features",
    "feature_columns",
    "physionet_crf",
    "physionet_stacked",
    "token_table",
    "word_evidence",
]

FORMAT = "phisieve-crf-2"
"""The version of the feature set a model was trained with; a model of another format is
refused (its features would not match)."""

MODELS = "phisieve-models-physionet"
"""The distribution of the CRF trained on the PhysioNet deid notes (GPL-2.0, installed apart
from phisieve): the bare ``crf`` recognizer's model (:func:`physionet_crf`)."""

MODELS_PACKAGE = "phisieve_models_physionet"
"""The import package of :data:`MODELS`; its ``crf_path()`` gives the model folder."""

WITHOUT_MODELS = (
    "--recognizers rules,lists (recognizers=['rules', 'lists'] in Python), or crf:DIR with a "
    "CRF of your own from detect-train-crf"
)
"""How to detect without :data:`MODELS` (the hint of :class:`~phisieve.errors.
MissingModelError`)."""

VERIFY = 0.005
"""A ``rules``/``lists`` span is kept when the CRF gives at least one of its words this PHI
probability (1 - P(O)). See ``benches/RESULTS.md`` for how it was chosen (patient-level CV)."""

FIND = 0.5
"""The finder's PHI probability from which it tags a word (:class:`CrfRecognizer`); see
``benches/RESULTS.md`` (patient-level CV)."""

CHUNK_WORDS = 250_000
"""About how many words the CRF tags at once (:meth:`CrfRecognizer.tag`): bounds the memory
of its word columns and tables (:func:`crf_words`, about 100 bytes a word)."""

MODEL_FILE = "crf.crfsuite"
FINDER_FILE = "finder.crfsuite"
INFO_FILE = "phisieve.json"


def physionet_crf() -> Path:
    """The folder of the CRF trained on the PhysioNet deid notes: the bare ``crf``
    recognizer's model, from the installed distribution :data:`MODELS`.

    Returns
    -------
    pathlib.Path
        The model folder (``crf.crfsuite``, ``finder.crfsuite``, ``phisieve.json``).

    Raises
    ------
    phisieve.errors.MissingModelError
        When :data:`MODELS` is not installed; the message says how to install it, or to
        detect without it (:data:`WITHOUT_MODELS`).
    """
    try:
        models = importlib.import_module(MODELS_PACKAGE)
    except ModuleNotFoundError as e:
        if e.name != MODELS_PACKAGE:
            raise  # installed, but something it imports is missing: not ours to explain
        raise MissingModelError(MODELS, "the recognizer `crf`", WITHOUT_MODELS) from None
    return Path(models.crf_path())


STACKED_MODELS = "phisieve-models-physionet-stacked"
"""The optional distribution of the stacked CRF trained on the PhysioNet deid notes (GPL-2.0):
the CRF and its token classifier (MiniLM-L6, or its first layer only; 8-bit ONNX), run by
``--recognizers rules,lists,crf,model`` (:func:`physionet_stacked`)."""

STACKED_PACKAGE = "phisieve_models_physionet_stacked"
"""The import package of :data:`STACKED_MODELS`; its ``stacked_path()`` gives the folder."""


def physionet_stacked() -> Path:
    """The folder of the stacked CRF trained on the PhysioNet deid notes (``detect-train-crf
    --base``), from the installed distribution :data:`STACKED_MODELS`: what a bare ``model``
    in ``detect --recognizers`` runs.

    Raises
    ------
    phisieve.errors.MissingModelError
        When :data:`STACKED_MODELS` is not installed.
    phisieve.errors.ConfigError
        When it is installed without its weights (made by ``make stacked-model``).
    """
    try:
        models = importlib.import_module(STACKED_PACKAGE)
    except ModuleNotFoundError as e:
        if e.name != STACKED_PACKAGE:
            raise
        raise MissingModelError(
            STACKED_MODELS,
            "the recognizer `model`",
            "--recognizers rules,lists,crf, or model:DIR with a model of your own from "
            "detect-train",
        ) from None
    folder = Path(models.stacked_path())
    if not (folder / INFO_FILE).is_file():
        raise ConfigError(
            f"{STACKED_MODELS} is installed without its weights ({folder}): they are made, not "
            "downloaded (`make stacked-model` in phisieve's repository, or detect-train-crf "
            "--base and detect-onnx into that folder)"
        )
    return folder


def _char_class(cp: np.ndarray) -> np.ndarray:
    """A code point as a feature: ``d`` digit, ``a`` letter, ``_`` space, ``N`` line break,
    ``^`` none (start or end of the note), else the character itself."""
    out = np.array([chr(c) if c else "^" for c in cp.tolist()], dtype=object)
    text = out.astype(str)
    out[np.char.isdigit(text)] = "d"
    out[np.char.isalpha(text)] = "a"
    out[(text == " ") | (text == "\t") | (text == "\r")] = "_"
    out[text == "\n"] = "N"
    out[cp == 0] = "^"
    return out


_ASCII_CLASSES = _char_class(np.arange(128, dtype=np.uint32))


def _char_classes(cp: np.ndarray) -> pl.Series:
    """:func:`_char_class` of every code point of ``cp``, as strings: a table for ASCII, the
    class of each distinct other code point worked out once."""
    codes = cp.astype(np.int64)
    table = _ASCII_CLASSES
    wide = codes >= len(table)
    if wide.any():
        distinct, at = np.unique(codes[wide], return_inverse=True)
        table = np.concatenate([table, _char_class(distinct)])
        codes[wide] = len(_ASCII_CLASSES) + at
    return pl.Series(table, dtype=pl.String).gather(codes)


def sorted_words(tok: pl.DataFrame) -> pl.DataFrame:
    """``tok`` sorted by ``row``, ``i`` (itself when it already is: a sort of every column
    costs)."""
    if tok.height > 1:
        row, i = (np.diff(tok.get_column(c).to_numpy()) for c in ("row", "i"))
        if not np.all((row > 0) | ((row == 0) & (i > 0))):
            return tok.sort("row", "i")
    return tok


def token_table(texts: pa.Array, words: pl.DataFrame) -> pl.DataFrame:
    """``words`` (the dictionaries' word table of ``texts``: ``row``, ``i``, ``s``, ``e``,
    ``w``, ``raw`` and the lexicon columns, :func:`~phisieve.detect.recognizers.dictionaries.
    features`) with the characters just before (``cb``) and after (``ca``) each word."""
    tok = sorted_words(words)
    notes = [t or "" for t in texts.to_pylist()]
    # Code points of all notes back to back, a 0 between notes (start and end markers).
    cps = np.frombuffer("\0".join(["", *notes, ""]).encode("utf-32-le"), dtype=np.uint32)
    base = np.cumsum([1] + [len(t) + 1 for t in notes])[:-1]
    rows = tok.get_column("row").to_numpy()
    s = tok.get_column("s").to_numpy() + base[rows]
    e = tok.get_column("e").to_numpy() + base[rows]
    return tok.with_columns(cb=_char_classes(cps[s - 1]), ca=_char_classes(cps[e]))


def _shape(col: pl.Expr) -> pl.Expr:
    """``Xxxx`` -> ``Xx``, ``12/03`` -> ``d/d``: letter case and digits, runs collapsed."""
    return (
        col.str.replace_all(r"\p{Lu}+", "X")
        .str.replace_all(r"\p{Ll}+", "x")
        .str.replace_all(r"\p{N}+", "d")
        .str.replace_all(r"[^Xxd]+", "o")
    )


def note_runs(rows: pl.Series, words: int) -> list[tuple[int, int]]:
    """Runs of whole notes, ``(first_row, last_row)`` inclusive, of about ``words`` words
    each (a run ends at the first note that takes it to ``words`` or more), from the sorted
    ``row`` of every word."""
    if words < 1:
        raise ValueError("words must be >= 1")
    counts = rows.value_counts(sort=False).sort(rows.name)
    note, n = counts.get_column(rows.name).to_list(), counts.get_column("count").to_list()
    out: list[tuple[int, int]] = []
    first, total = None, 0
    for row, k in zip(note, n, strict=True):
        first = row if first is None else first
        total += k
        if total >= words:
            out.append((first, row))
            first, total = None, 0
    if first is not None:
        out.append((first, note[-1]))
    return out


def overlaps(words: pl.DataFrame, spans: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Every (span, word) pair that overlaps, as two index arrays (rows of ``spans`` and of
    ``words``). ``words`` (``row``, ``s``, ``e``) are sorted and do not overlap, as words do;
    ``spans`` (``row``, ``start``, ``end``) may be in any order and overlap. Linear in the
    words, spans and pairs (binary searches), never a join of every span with every word."""
    if words.height == 0 or spans.height == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)

    def keys(frame: pl.DataFrame, row: str, at: str) -> np.ndarray:
        return (frame.get_column(row).to_numpy().astype(np.int64) << 32) + frame.get_column(
            at
        ).to_numpy().astype(np.int64)

    word_s, word_e = keys(words, "row", "s"), keys(words, "row", "e")
    # A span [a, b) overlaps the words with e > a and s < b: a run, as words are sorted.
    lo = np.searchsorted(word_e, keys(spans, "row", "start"), side="right")
    hi = np.searchsorted(word_s, keys(spans, "row", "end"), side="left")
    counts = np.maximum(hi - lo, 0)
    span_index = np.repeat(np.arange(spans.height), counts)
    first = np.repeat(lo - np.cumsum(counts) + counts, counts)
    return span_index, first + np.arange(int(counts.sum()))


def _covering(tok: pl.DataFrame, spans: pl.DataFrame) -> pl.Series:
    """Per word of ``tok`` (sorted by ``row``, ``i``): the sorted, ``|``-joined
    ``recognizer:LABEL`` of the spans that cover it (``""`` for none)."""
    out = pl.repeat("", tok.height, dtype=pl.String, eager=True).alias("srcs")
    span_index, word_index = overlaps(tok, spans)
    if not len(span_index):
        return out
    named = spans.select(src=pl.col("source").str.split("+"), label=pl.col("label")).with_columns(
        src=pl.col("src").list.eval(pl.element().str.replace(r":.*", "")),
    )
    pairs = pl.DataFrame({"_span": span_index, "_word": word_index})
    found = (
        pairs.join(named.with_row_index("_span").cast({"_span": pl.Int64}), on="_span")
        .explode("src")
        .with_columns(src=pl.col("src") + ":" + pl.col("label"))
        .group_by("_word")
        .agg(pl.col("src").unique().sort().str.join("|").alias("srcs"))
    )
    return out.scatter(found.get_column("_word"), found.get_column("srcs"))


def _word_values(tok: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """The words of :func:`token_table`, sorted, with the values their features are made of
    that are not in that table: ``srcs`` (:func:`_covering`), ``zb`` (Zipf frequency in half
    steps) and ``pb`` (patients who use the word, in buckets)."""
    tok = sorted_words(tok)
    patients = pl.col("patients")
    return tok.with_columns(
        srcs=_covering(tok, spans),
        zb=(pl.col("zipf") * 2).round().cast(pl.Int32),
        pb=pl.when(patients.is_null())
        .then(pl.lit("na"))
        .when(patients <= 1)
        .then(pl.lit("1"))
        .when(patients <= 2)
        .then(pl.lit("2"))
        .when(patients <= 5)
        .then(pl.lit("5"))
        .otherwise(pl.lit("many")),
    )


def crf_features(tok: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """Each word's CRF features (``row``, ``i``, ``s``, ``e``, then one string column per
    feature, :func:`feature_columns`) from
    :func:`token_table` and the other recognizers' merged ``spans`` (``row``, ``start``,
    ``end``, ``label``, ``source``). Features of format :data:`FORMAT`.

    The reference of the features, as strings (what training reads);
    :meth:`CrfRecognizer.tag` builds the same attributes in Rust from :data:`TEMPLATE`."""
    tok = _word_values(tok, spans).with_columns(
        shp=_shape(pl.col("raw").fill_null("")),
        p3=pl.col("w").str.slice(0, 3),
        s3=pl.col("w").str.slice(-3),
        zb=pl.col("zb").cast(pl.String),
        ln=pl.col("w").str.len_chars().clip(0, 10).cast(pl.String),
    )

    def at(col: str, k: int) -> pl.Expr:
        # The word k places away in the same note ("#" past its ends); words are sorted.
        same = pl.col("row").shift(-k) == pl.col("row")
        return pl.when(same).then(pl.col(col).shift(-k)).otherwise(pl.lit("#"))

    def flag(col: str) -> pl.Expr:
        return pl.col(col).cast(pl.String).fill_null("na")

    lexical: list[pl.Expr] = [
        pl.lit("bias"),
        "w=" + pl.col("w"),
        "shp=" + pl.col("shp"),
        "p3=" + pl.col("p3"),
        "s3=" + pl.col("s3"),
        "zb=" + pl.col("zb"),
        "pb=" + pl.col("pb"),
        "ln=" + pl.col("ln"),
        "cb=" + pl.col("cb"),
        "ca=" + pl.col("ca"),
        *(f"{c}=" + flag(c) for c in ("first", "last", "vocab", "noun", "unit", "cap", "upper")),
        "brk=" + flag("brk"),
        "w-1|w=" + at("w", -1) + "|" + pl.col("w"),
        "w|w+1=" + pl.col("w") + "|" + at("w", 1),
    ]
    found: list[pl.Expr] = ["src=" + pl.col("srcs")]
    for k in (-2, -1, 1, 2):
        lexical += [f"w{k:+d}=" + at("w", k), f"shp{k:+d}=" + at("shp", k)]
        found.append(f"src{k:+d}=" + at("srcs", k))
    stacked: list[pl.Expr] = []
    if "mp" in tok.columns:
        stacked = ["mp=" + pl.col("mp"), "ml=" + pl.col("ml")]
        for k in (-1, 1):
            stacked += [f"mp{k:+d}=" + at("mp", k), f"ml{k:+d}=" + at("ml", k)]
    return tok.select(
        "row",
        "i",
        "s",
        "e",
        *(f.alias(f"f{k:02d}") for k, f in enumerate(lexical)),
        *(f.alias(f"g{k:02d}") for k, f in enumerate(found)),
        *(f.alias(f"h{k:02d}") for k, f in enumerate(stacked)),
    )


def feature_columns(features: pl.DataFrame, spans: bool = True) -> list[str]:
    """The feature columns of :func:`crf_features`' table, in order: the word's own
    (``f00``...), then, when ``spans``, those of the other recognizers' spans (``g00``...)
    and of a stacked model's evidence (``h00``..., when the table has them)."""
    kinds = ("f", "g", "h") if spans else ("f",)
    return [c for c in features.columns if c[:1] in kinds and c[1:].isdigit()]


BUCKETS = (0.01, 0.1, 0.3, 0.5, 0.7, 0.9)
"""The edges of the model's PHI probability as a feature: ``mp=0`` below 0.01, ``mp=1``
from 0.01 to 0.1, ... ``mp=6`` from 0.9."""

LABELLED = 0.5
"""The PHI probability from which a word's ``ml`` feature names the model's category."""

NO_TOKEN = "na"
"""``mp`` and ``ml`` of a word no token of the model covers."""


def word_evidence(words: pl.DataFrame, tokens: pl.DataFrame) -> pl.DataFrame:
    """``words`` (``row``, ``s``, ``e``, sorted, not overlapping) with the model's evidence:
    ``mp`` (the bucket, :data:`BUCKETS`, of the highest PHI probability of the ``tokens``
    that overlap the word) and ``ml`` (that token's ``label`` when its probability is at
    least :data:`LABELLED`, else ``O``); both :data:`NO_TOKEN` where no token overlaps.

    ``tokens``: ``row``, ``start``, ``end``, ``p``, ``label``
    (:meth:`~phisieve.detect.recognizers.model.ModelRecognizer.token_scores`), any order.
    Among tokens of equal probability, the one first in ``tokens`` gives the label."""
    n = words.height
    if tokens.height == 0:
        none = pl.repeat(NO_TOKEN, n, dtype=pl.String, eager=True)
        return words.with_columns(mp=none, ml=none)
    token_index, word_index = overlaps(words, tokens)
    p = tokens.get_column("p").to_numpy().astype(np.float64)
    # For each word, its tokens by falling probability, then by their order in `tokens`.
    order = np.lexsort((token_index, -p[token_index], word_index))
    word_sorted, token_sorted = word_index[order], token_index[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = np.diff(word_sorted) != 0
    best = np.full(n, -1, dtype=np.int64)
    best[word_sorted[first]] = token_sorted[first]
    covered = best >= 0
    best_p = np.where(covered, p[np.maximum(best, 0)], np.nan)
    bucket = np.searchsorted(np.asarray(BUCKETS), np.nan_to_num(best_p), side="right")
    mp = np.where(covered, bucket.astype(str), NO_TOKEN)
    labels = tokens.get_column("label").to_numpy()
    ml = np.full(n, NO_TOKEN, dtype=object)
    if n:
        ml[covered] = np.where(
            best_p[covered] >= LABELLED, labels[best[covered]].astype(object), "O"
        )
    return words.with_columns(
        mp=pl.Series(mp.astype(object), dtype=pl.String), ml=pl.Series(ml, dtype=pl.String)
    )


Part = tuple[str, str, int]
"""A part of a feature in :data:`TEMPLATE`: a column of :data:`WORD_COLUMNS`, a transform
(``""``, ``first:N``, ``last:N``, ``len:N``, ``shape``) and the offset of the word it reads
(in the same note; ``#`` past its ends)."""

FLAGS = ("first", "last", "vocab", "noun", "unit", "cap", "upper")

WORD_COLUMNS: tuple[tuple[str, str | None], ...] = (
    ("w", None),
    ("raw", ""),
    ("zb", None),
    ("pb", None),
    ("cb", None),
    ("ca", None),
    *((c, "na") for c in (*FLAGS, "brk")),
    ("srcs", ""),
)
"""The word columns :data:`TEMPLATE` reads (:func:`_word_values`), with what stands for
their nulls (``None``: a null stays null, and makes no attribute)."""


NEIGHBOURS = (-2, -1, 1, 2)
"""The other words of the window a word's features read."""

LEXICAL: list[tuple[str, list[Part]]] = [
    ("bias", []),
    ("w=", [("w", "", 0)]),
    ("shp=", [("raw", "shape", 0)]),
    ("p3=", [("w", "first:3", 0)]),
    ("s3=", [("w", "last:3", 0)]),
    ("zb=", [("zb", "", 0)]),
    ("pb=", [("pb", "", 0)]),
    ("ln=", [("w", "len:10", 0)]),
    ("cb=", [("cb", "", 0)]),
    ("ca=", [("ca", "", 0)]),
    *((f"{c}=", [(c, "", 0)]) for c in (*FLAGS, "brk")),
    ("w-1|w=", [("w", "", -1), ("w", "", 0)]),
    ("w|w+1=", [("w", "", 0), ("w", "", 1)]),
    *(
        feature
        for k in NEIGHBOURS
        for feature in ((f"w{k:+d}=", [("w", "", k)]), (f"shp{k:+d}=", [("raw", "shape", k)]))
    ),
]
"""The word's own features (``f00``... of :func:`crf_features`), in order, as the Rust
tagger builds them (:meth:`phisieve._core.CrfTagger.tag_words`): a prefix, then the values
of the parts joined by ``|``."""

FOUND: list[tuple[str, list[Part]]] = [
    ("src=", [("srcs", "", 0)]),
    *((f"src{k:+d}=", [("srcs", "", k)]) for k in NEIGHBOURS),
]
"""The features of the other recognizers' spans (``g00``...), in order."""

TEMPLATE = LEXICAL + FOUND
"""Every feature of format :data:`FORMAT`, in the order of :func:`feature_columns`."""

STACKED: list[tuple[str, list[Part]]] = [
    ("mp=", [("mp", "", 0)]),
    ("ml=", [("ml", "", 0)]),
    *(
        feature
        for k in (-1, 1)
        for feature in ((f"mp{k:+d}=", [("mp", "", k)]), (f"ml{k:+d}=", [("ml", "", k)]))
    ),
]
"""The features of a stacked model's evidence (``h00``..., :mod:`phisieve.detect.stacking`):
the tagger of a stacked CRF reads them after :data:`TEMPLATE`."""

EVIDENCE_COLUMNS: tuple[tuple[str, str | None], ...] = (("mp", None), ("ml", None))
"""The word columns :data:`STACKED` reads (:func:`word_evidence`)."""


def crf_words(values: pl.DataFrame) -> Any:
    """The words of :func:`_word_values` (sorted by ``row``, ``i``) as the Rust tagger takes
    them (:class:`phisieve._core.CrfWords`: the :data:`WORD_COLUMNS`, and the
    :data:`EVIDENCE_COLUMNS` when ``values`` has them; one sequence a note)."""
    from ... import _core

    per_note = values.group_by("row", maintain_order=True).len().get_column("len")
    # polars' own string views, as they are (the default copies them into large strings).
    view = pl.CompatLevel.newest()
    columns = WORD_COLUMNS + (EVIDENCE_COLUMNS if "mp" in values.columns else ())
    return _core.CrfWords(
        [(c, values.get_column(c).to_arrow(compat_level=view), null) for c, null in columns],
        per_note.cast(pl.Int64).to_arrow(),
    )


def sequences(values: pl.DataFrame, rows: int) -> list[list[Any]]:
    """The ``f`` values of each note ``0 .. rows-1`` (``values``: ``row``, ``i``, ``f``; an
    empty list for a note with no word), words in order: what CRFsuite's trainer takes."""
    out: list[list[Any]] = [[] for _ in range(rows)]
    for (row,), group in values.sort("row", "i").group_by(["row"], maintain_order=True):
        out[int(row)] = group.get_column("f").to_list()
    return out


def load_tagger(path: Path) -> Any:
    """The CRFsuite model at ``path`` as phisieve's Rust tagger (:class:`phisieve._core.
    CrfTagger`): its weights as CRFsuite's own dump gives them (to 6 decimals)."""
    import pycrfsuite

    from ... import _core

    reader = pycrfsuite.Tagger()
    reader.open(str(path))
    dump = reader.info()
    labels = sorted(dump.labels, key=lambda name: int(dump.labels[name]))
    at = {name: i for i, name in enumerate(labels)}
    attributes = sorted({attr for attr, _ in dump.state_features})
    row = {attr: i for i, attr in enumerate(attributes)}
    weights = np.zeros((len(attributes), len(labels)))
    for (attr, label), w in dump.state_features.items():
        weights[row[attr], at[label]] = w
    transitions = np.zeros((len(labels), len(labels)))
    for (a, b), w in dump.transitions.items():
        transitions[at[a], at[b]] = w
    reader.close()
    return _core.CrfTagger(
        labels, attributes, weights.ravel().tolist(), transitions.ravel().tolist()
    )


def read_info(folder: Path) -> dict[str, Any]:
    """A CRF model folder's ``phisieve.json``, checked."""
    info_path = folder / INFO_FILE
    if not (folder / MODEL_FILE).is_file() or not info_path.is_file():
        raise ConfigError(f"{folder} is not a CRF model folder (no {MODEL_FILE} and {INFO_FILE})")
    info = json.loads(info_path.read_text(encoding="utf-8"))
    if info.get("format") != FORMAT:
        raise ConfigError(
            f"{folder} holds a CRF of format {info.get('format')!r}; this phisieve reads "
            f"{FORMAT!r} (train it again with detect-train-crf)"
        )
    stacked = info.get("stacked")
    if stacked and not (folder / stacked["model"] / "phisieve.json").is_file():
        raise ConfigError(
            f"{folder} holds a stacked CRF without its model ({stacked['model']}/, from "
            "detect-train-crf --base)"
        )
    return info


def _tagged(
    tagger: Any,
    words: Any,
    template: list[tuple[str, list[Part]]],
    thresholds: list[float],
    scored_from: float = math.inf,
    path: bool = True,
) -> tuple[pl.Series | None, np.ndarray, pl.Series]:
    """One CRF over the ``template`` features of ``words`` (:func:`crf_words`): each word's
    Viterbi label (when ``path``), PHI probability (the sum over the PHI labels' marginals)
    and most likely PHI label. The comparisons with ``thresholds``, and the ``float32``
    scores and labels of the words that become spans (a PHI Viterbi label, or a PHI
    probability of ``scored_from`` or more) are those of forward-backward in log space
    (:meth:`phisieve._core.CrfTagger.tag_words`)."""
    labels, p_phi, best = tagger.tag_words(
        words, template, background="O", path=path, exact=(scored_from, thresholds)
    )
    names = pl.Series(list(tagger.labels), dtype=pl.String)
    tags = names.gather(np.asarray(labels)) if path else None
    return tags, np.asarray(p_phi), names.gather(np.asarray(best))


@dataclass
class Tagged:
    """What the CRF made of a batch: its spans (:data:`~phisieve.detect.recognizers.
    SPAN_ROWS`) and each word's PHI probability (``row``, ``s``, ``e``, ``p``)."""

    spans: pl.DataFrame
    words: pl.DataFrame


class CrfRecognizer:
    """A trained CRF (a folder from ``detect-train-crf``; default :func:`physionet_crf`).

    Two CRFs over the same words: the *tagger* sees the other recognizers' spans (it tags and
    vets), the *finder* only the words (it tags what the rules and lists miss, and does not
    lean on them, so it holds where they fall short).

    Parameters
    ----------
    folder
        The model folder (``crf.crfsuite``, ``finder.crfsuite`` and ``phisieve.json``);
        ``None``: the one trained on the PhysioNet deid notes (:func:`physionet_crf`, which
        raises :class:`~phisieve.errors.MissingModelError` when it is not installed).
    verify
        The PHI probability (the tagger's) at least one word of a ``rules``/``lists`` span
        needs for the span to be kept (0 keeps every span).
    find
        The PHI probability (the finder's) from which a word is tagged with the finder's most
        likely PHI category (1 turns the finder off).
    """

    def __init__(
        self,
        folder: str | Path | None = None,
        verify: float = VERIFY,
        find: float = FIND,
        model_options: dict[str, Any] | None = None,
    ) -> None:
        self.folder = Path(folder) if folder is not None else physionet_crf()
        self.info = read_info(self.folder)
        for name, value in (("verify", verify), ("find", find)):
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"the CRF's {name} threshold must be in [0, 1], not {value}")
        self.verify = verify
        self.find = find
        self.model_options = dict(model_options or {})
        self._template = TEMPLATE + STACKED if self.stacked else TEMPLATE
        self._load()
        self._labels = list(self._tagger.labels)

    @property
    def stacked(self) -> bool:
        """Whether the tagger reads a model's evidence (:mod:`phisieve.detect.stacking`)."""
        return bool(self.info.get("stacked"))

    def _load(self) -> None:
        self._tagger = load_tagger(self.folder / MODEL_FILE)
        self._finder = load_tagger(self.folder / FINDER_FILE)
        self.model = None
        if self.stacked:
            from .model import ModelRecognizer

            folder = self.folder / self.info["stacked"]["model"]
            self.model = ModelRecognizer(folder, **self.model_options)

    def __getstate__(self) -> dict[str, Any]:
        # The Rust taggers and the model are not pickled: a worker process loads them again
        # from the folder.
        state = dict(self.__dict__)
        state["_tagger"] = state["_finder"] = state["model"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._load()

    def tag(self, tok: pl.DataFrame, spans: pl.DataFrame, texts: pa.Array | None = None) -> Tagged:
        """Tag the words of notes (:func:`token_table`), given the other recognizers'
        merged ``spans``. The notes are tagged in runs of about :data:`CHUNK_WORDS` words,
        so the tagger's tables of a large batch are never all held at once; the result does
        not depend on where the runs end (each note is tagged whole, on its own). A stacked
        CRF runs its model over the notes' ``texts`` first (:func:`word_evidence`)."""
        tok = sorted_words(tok)
        if self.model is not None:
            if texts is None:
                raise ConfigError("a stacked CRF tags the notes' texts: pass them")
            tok = word_evidence(tok, self.model.token_scores(texts.to_pylist()))
        parts = [
            self._tag(tok.filter(pl.col("row").is_between(lo, hi)), spans)
            for lo, hi in note_runs(tok.get_column("row"), CHUNK_WORDS)
        ]
        if not parts:
            return self._tag(tok, spans)
        return Tagged(pl.concat([p.spans for p in parts]), pl.concat([p.words for p in parts]))

    def _tag(self, tok: pl.DataFrame, spans: pl.DataFrame) -> Tagged:
        if tok.height:
            rows = tok.get_column("row")
            spans = spans.filter(pl.col("row").is_between(rows.min(), rows.max()))
        feats = _word_values(tok, spans)
        interned = crf_words(feats)
        tags, p_phi, _ = _tagged(self._tagger, interned, self._template, [self.verify])
        none = pl.repeat("O", feats.height, dtype=pl.String, eager=True)
        found, p_find = none, np.zeros(feats.height)
        if self.find < 1.0:
            _, p_find, best = _tagged(
                self._finder, interned, LEXICAL, [self.find], scored_from=self.find, path=False
            )
            found = best.zip_with(pl.Series(p_find >= self.find), none)
        words = feats.select("row", "s", "e").with_columns(
            tag=tags,
            p=pl.Series(p_phi, dtype=pl.Float64),
            found=found,
            pf=pl.Series(p_find, dtype=pl.Float64),
        )

        def spans_of(tag: str, p: str, source: str) -> pl.DataFrame:
            return words.filter(pl.col(tag) != "O").select(
                "row",
                pl.col("s").alias("start"),
                pl.col("e").alias("end"),
                pl.col(tag).alias("label"),
                (source + pl.col(tag)).alias("source"),
                pl.col(p).alias("score"),
            )

        found = pl.concat([spans_of("tag", "p", "crf:"), spans_of("found", "pf", "crf:find:")])
        return Tagged(found.cast(SPAN_ROWS), words.select("row", "s", "e", "p"))

    def vet(self, spans: pl.DataFrame, words: pl.DataFrame) -> pl.DataFrame:
        """``spans`` without those whose words all have a PHI probability below
        :attr:`verify`. The CRF vets only what it learnt: spans over no word, and spans of a
        category it was never trained on (e-mail addresses and identifiers, absent from the
        PhysioNet notes), are kept."""
        if spans.height == 0 or self.verify <= 0:
            return spans
        learnt = [c for c in self._labels if c != "O"]
        kinds = {label: category(label) for label in spans.get_column("label").unique()}
        vetted = spans.get_column("label").replace_strict(kinds, return_dtype=pl.String)
        span_index, word_index = overlaps(words, spans)
        best = np.full(spans.height, np.nan)
        p = words.get_column("p").to_numpy()
        np.fmax.at(best, span_index, p[word_index])
        keep = ~vetted.is_in(learnt).to_numpy() | np.isnan(best) | (best >= self.verify)
        return spans.filter(pl.Series(keep))
