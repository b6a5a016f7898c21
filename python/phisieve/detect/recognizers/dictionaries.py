"""Built-in dictionaries of the ``lists`` recognizer: person names and places (DESIGN.md §3).

* **Names**: the US Census 1990 first-name (male and female) and surname lists, as shipped by
  the ``names`` package (94k entries).
* **Places**: US city and town names from the ``zipcodes`` package (19k, multi-word ones
  included) and the US states.
* **English**: word frequencies from ``wordfreq`` decide which dictionary entries are also
  everyday words ("white", "hope", "will").

Dictionary hits are noisy on clinical text: the census lists hold "foley", "bolus" and "levo",
and many towns are named after words. A hit is kept only when the word is neither common
English (Zipf frequency below ``max_zipf``) nor common in the corpus being processed (used by
at most ``rare_share`` of its patients, and never by more than ``rare_max`` patients when the
corpus is small): site vocabulary recurs across patients, a patient's or relative's name does
not. Everyday words that are names ("Mary", "Bill") are found next to another name instead
(:func:`extend_names`).

Places are also found by context: a word that is not vocabulary after "transferred to",
"admitted from", "lives in"... is a place, and every later use of that word in the corpus is
flagged too (hospital names such as "GH" recur in many patients' notes).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import ConfigError
from ...io.lookup import StringIndex
from ...phi import census as census_module
from ...phi.census import census_frequencies
from ...text.words import tokenize

__all__ = ["MAX_ZIPF", "RARE_SHARE", "CorpusStats", "Lexicon", "extend_names", "find", "lexicon"]

MAX_ZIPF = 3.5
"""Words at least this frequent in English (Zipf scale: 3.5 is about 3 per million words) are
vocabulary, not dictionary names or places."""

UNKNOWN_ZIPF = 2.5
"""Words rarer than this in English and in no dictionary are unknown: names next to a name."""

PLACE_MAX_ZIPF = 5.0
"""Place names at least this frequent in English are never flagged ("Washington" is 4.9, and
flagged only after a preposition, with a capital)."""

RARE_SHARE = 0.03
"""Words used by more than this share of the corpus's patients (and by more than 2) are site
vocabulary, not names."""


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


STATES = [
    *sorted(
        _words(
            """
        alabama alaska arizona arkansas california colorado connecticut delaware florida georgia
        hawaii idaho illinois indiana iowa kansas kentucky louisiana maine maryland
        massachusetts michigan minnesota mississippi missouri montana nebraska nevada ohio
        oklahoma oregon pennsylvania tennessee texas utah vermont virginia washington wisconsin
        wyoming
        """
        )
    ),
    "new hampshire",
    "new jersey",
    "new mexico",
    "new york",
    "north carolina",
    "north dakota",
    "rhode island",
    "south carolina",
    "south dakota",
    "west virginia",
    "puerto rico",
]

# Words a hospital writes after "transferred to" that are not places: its units, services and
# the destinations every site has. Lower-case, as normalised terms.
UNITS = _words(
    """
    micu sicu ccu csru ctic cvicu icu nicu picu tsicu msicu ctsicu neuro neuroicu nsicu pacu or
    ed er ew eu cath ep ir ct cta mri mr mra us ultrasound xray cxr echo tee lab labs
    floor floors unit units ward wards rehab snf ltac ltach hospice home house nursing facility
    vna osh ems ambulance medflight helicopter radiology dialysis hd cvvh cvvhd pt ot slp
    telemetry tele stepdown step down vicu bed room rm team service attending resident fellow
    md rn np pa dr micu7 icu7 the a an his her their our this that same other another outside
    chair commode bathroom bedside stretcher wheelchair morgue surgery medicine cardiology
    oncology psych psychiatry ortho gi gu onc vascular transplant trauma
    """
)

# Census names that are clinical words: eponyms (signs, syndromes, devices) and brands.
EPONYMS = _words(
    """
    foley swan ganz hickman quinton passy passey muir greenfield mallory weiss cheyne stokes
    parkinson parkinsons alzheimer alzheimers lewy babinski doppler coombs gram levine zoll
    allegra kussmaul trendelenburg fowler fowlers sims valsalva heimlich miller macintosh
    salem groshong broviac tenckhoff mahurkar shiley portex jackson pratt penrose blake
    hemovac baxter abbott medtronic boston kerlix xeroform mepilex duoderm tegaderm kling
    ace jobst ted venodyne kendall bair hugger stryker hill rom roho posey dobhoff keofeed
    corpak levin ewald bard davol lasix colace allen homans homan murphy rovsing mcburney
    cullen turner grey chvostek trousseau tinel phalen romberg brudzinski kernig hoffman
    wernicke korsakoff guillain barre bell graves hashimoto addison cushing crohn hodgkin
    kaposi wilms ewing burkitt barrett zenker meckel hirschsprung raynaud wegener kawasaki
    marfan down turner klinefelter tourette huntington bundle purkinje wenckebach mobitz
    brugada holter starling frank fick poiseuille laplace glasgow apgar ranson child pugh
    """
) - {"murphy", "frank", "turner", "allen", "cullen", "jackson", "miller", "baxter", "child"}

# Census names that are words written next to names ("wife Mary", "Dr Smith to see").
NOT_NEIGHBOURS = _words(
    """
    to in on at by of from with and or but for the a an is was be will may can has had have
    he she his her him they them we you me my our your this that who called aware here there
    husband wife son sons daughter daughters brother brothers sister sisters mother father
    friend friends family niece nephew aunt uncle cousin grandson granddaughter grandaughter
    patient pt md rn np pa dr doctor nurse team max eve ok flo dia ma asa peg aline numbers
    po ho iv cipro page mon tue wed thu fri sat sun
    """
)

# Words around a name, however common a word the name is (:func:`context_names`): verbs
# people do in notes after it ("bill called"), "per", "spoke with" and the like before it.
_NAME_BEFORE = _words(
    """
    called calls phoned phones visited visits spoke speaks aware notified said says stated
    states updated
    """
)
# Weaker: only after a first name ("DAVID IS SPEAKING").
_NAME_BEFORE_WEAK = _words("is was will has does here came left brought")
_CONTACT_WORDS = _words("cell phone home work pager beeper tel mobile")
_NAME_AFTER = _words("per contacted contacts paged notified informed told asked")
_NAME_AFTER_WITH = _words(
    """
    spoke speak speaking talked talk met meeting consult consulted work working discussed
    made conference
    """
)

_PLACE_PREPOSITIONS = _words("from to in at near of")

# "<verb> to X", "<verb> from X", "lives in X": X is a place unless it is vocabulary.
_PLACE_TRIGGERS = {
    ("transferred", "to"),
    ("transfered", "to"),
    ("transferred", "from"),
    ("transfered", "from"),
    ("transfer", "to"),
    ("trans", "to"),
    ("tx", "to"),
    ("admitted", "to"),
    ("admitted", "from"),
    ("adm", "to"),
    ("adm", "from"),
    ("sent", "to"),
    ("go", "to"),
    ("went", "to"),
    ("taken", "to"),
    ("d", "to"),
    ("transport", "to"),
    ("brought", "to"),
    ("came", "to"),
    ("arrived", "to"),
    ("arrived", "from"),
    ("presented", "to"),
    ("presenting", "to"),
    ("referred", "to"),
    ("accepted", "at"),
    ("accepted", "by"),
    ("discharged", "to"),
    ("return", "to"),
    ("returned", "to"),
    ("lives", "in"),
    ("living", "in"),
    ("resides", "in"),
    ("followed", "at"),
    ("seen", "at"),
    ("treated", "at"),
    ("transplant", "at"),
}


def _census() -> dict[str, tuple[bool, bool]]:
    out: dict[str, tuple[bool, bool]] = {}
    for fname, is_first in (
        ("dist.male.first", True),
        ("dist.female.first", True),
        ("dist.all.last", False),
    ):
        # Not through its cache: the lexicon keeps what it needs, once per process.
        for name in census_frequencies.__wrapped__(fname):
            word = name.lower()
            first, last = out.get(word, (False, False))
            out[word] = (first or is_first, last or not is_first)
    return out


def _places() -> set[str]:
    try:
        import zipcodes
    except ImportError:  # pragma: no cover - a dependency
        raise ConfigError(
            "the place dictionaries need the `zipcodes` package: pip install zipcodes"
        ) from None
    # zipcodes.list_all() keeps its 42k records (~140 MB) for the life of the process; the
    # extension's own function gives a list that is freed once the cities are read.
    records = getattr(zipcodes, "_zipcodes", zipcodes).list_all()
    cities = {z["city"].lower() for z in records}
    del records
    return {c.replace(".", "").replace("-", " ") for c in cities} | set(STATES)


def _english() -> pl.DataFrame:
    """Webster's Second (web2) lower-case entries: ``w`` and ``proper`` (the word is also an
    entry with a capital: "bill", "laurel"). Without ``proper`` it is a common word ("taper",
    "amber"), a name only with evidence."""
    try:
        from english_words import get_english_words_set
    except ImportError:  # pragma: no cover - a dependency
        raise ConfigError(
            "the dictionaries need the `english-words` package: pip install english-words"
        ) from None
    web2 = get_english_words_set(["web2"], lower=False, alpha=True)
    proper = {w.lower() for w in web2 if not w.islower()}
    lower = sorted(w for w in web2 if w.islower())
    return pl.DataFrame({"w": lower, "proper": [w in proper for w in lower]})


def _zipf() -> pl.DataFrame:
    try:
        import wordfreq
    except ImportError:  # pragma: no cover - a dependency
        raise ConfigError(
            "the dictionaries need the `wordfreq` package: pip install wordfreq"
        ) from None
    freq = wordfreq.get_frequency_dict("en")
    table = pl.DataFrame(
        {"w": list(freq), "zipf": [math.log10(f) + 9.0 for f in freq.values()]},
        schema={"w": pl.String, "zipf": pl.Float32},
    )
    # The lexicon keeps the table (cached once per process); wordfreq's caches of the same
    # lists, ~60 MB of Python objects, would stay for the life of a worker.
    for cached in (wordfreq.get_frequency_dict, wordfreq.get_frequency_list):
        cache_clear = getattr(cached, "cache_clear", None)
        if cache_clear is not None:
            cache_clear()
    return table


@dataclass(frozen=True)
class Lexicon:
    """The built-in dictionaries as polars tables keyed by normalised word ``w``."""

    names: pl.DataFrame
    """``w``, ``first``, ``last`` (bool): census names of at least two letters."""
    places: pl.DataFrame
    """``w`` (one to four words joined by spaces), ``words`` (how many)."""
    zipf: pl.DataFrame
    """``w``, ``zipf``: English word frequency on the Zipf scale (absent: rare)."""
    english: pl.DataFrame
    """``w``, ``proper``: dictionary words (:func:`_english`)."""

    @functools.cached_property
    def words(self) -> pl.DataFrame:
        """:attr:`names`, :attr:`zipf` and :attr:`english` in one table (``w``, ``first``,
        ``last``, ``zipf``, ``proper``, ``word``: in :attr:`english`), so that a token table
        takes them in one join."""
        every = pl.concat([t.select("w") for t in (self.names, self.zipf, self.english)])
        english = self.english.with_columns(word=pl.lit(True))
        return (
            every.unique()
            .sort("w")  # one order whatever the threads (the table is cached)
            .join(self.names, on="w", how="left")
            .join(self.zipf, on="w", how="left")
            .join(english, on="w", how="left")
        )

    @functools.cached_property
    def index(self) -> StringIndex:
        """The rows of :attr:`words` by word, for :func:`look_up`."""
        return StringIndex(self.words.get_column("w").to_arrow())


LEXICON_SOURCES = ("names", "zipcodes", "wordfreq", "english-words", "polars")
"""The packages the built-in :class:`Lexicon` is built from (and the one that stores it)."""


@functools.cache
def lexicon() -> Lexicon:
    """The built-in :class:`Lexicon`, loaded once per process: from phisieve's cache
    (:mod:`phisieve.io.cache`) when an earlier process built it with the same packages and the
    same code, else built (seconds) and cached."""
    from ...io import cache

    key = cache.cache_key(LEXICON_SOURCES, [__file__, census_module.__file__])
    tables = cache.tables("lexicon", key, _lexicon_tables)
    lex = Lexicon(**{k: tables[k] for k in ("names", "places", "zipf", "english")})
    lex.__dict__["words"] = tables["words"]  # the cached_property, already worked out
    return lex


def _lexicon_tables() -> dict[str, pl.DataFrame]:
    """The tables of the built-in :class:`Lexicon`, built from the packages, and its
    :attr:`Lexicon.words`."""
    census = _census()
    names = pl.DataFrame(
        {
            "w": list(census),
            "first": [f for f, _ in census.values()],
            "last": [la for _, la in census.values()],
        }
    )
    places = pl.DataFrame({"w": sorted(_places())}).with_columns(
        words=pl.col("w").str.count_matches(" ").cast(pl.Int32) + 1
    )
    places = places.filter(pl.col("words") <= 4)
    lex = Lexicon(names=names, places=places, zipf=_zipf(), english=_english())
    return {
        "names": lex.names,
        "places": lex.places,
        "zipf": lex.zipf,
        "english": lex.english,
        "words": lex.words,
    }


@dataclass
class CorpusStats:
    """How many patients use each normalised word in the corpus being processed."""

    patients: int
    words: pl.DataFrame = field(repr=False)
    """``w``, ``patients`` (how many use it) and ``uses`` (its occurrences)."""

    @functools.cached_property
    def index(self) -> StringIndex:
        """The rows of :attr:`words` by word, for :func:`look_up` (worked out in each process
        that looks words up, never pickled)."""
        return StringIndex(self.words.get_column("w").to_arrow())

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state.pop("index", None)
        return state

    def rare_limit(self, share: float) -> int:
        """Words used by at most this many patients count as rare (at least 2)."""
        return max(2, math.floor(share * self.patients))

    @classmethod
    def of(
        cls, source: object, patient_col: str = "patient_id", normalize: str = "nfkc_lower"
    ) -> CorpusStats:
        """Count the patients of every word of ``source`` (documents with ``text`` and
        ``patient_col``; without it, each document counts as its own patient), words cut
        under ``normalize``. A null note or patient has no word."""
        from ...io.sources import BatchSource, open_source
        from ...term_index.build import IndexReport, index

        src = open_source(source)
        col = patient_col if patient_col in src.schema.names else "doc_id"

        def filled(columns: list[str] | None) -> Iterator[pa.RecordBatch]:
            # Null notes and patients have no words to count; the index refuses nulls.
            for b in src.batches([col, "text"]):
                yield pa.RecordBatch.from_arrays(
                    [
                        pc.fill_null(b.column(0).cast(pa.string()), ""),
                        pc.fill_null(b.column(1), ""),
                    ],
                    [col, "text"],
                )

        counted = BatchSource(
            filled,
            pa.schema([(col, pa.string()), src.schema.field("text")]),
            src.reiterable,
            src.name,
            src.num_rows,
        )
        report = IndexReport()
        terms = pl.from_arrow(
            index(counted, k=1, ngram=1, normalize=normalize, patient_col=col, report=report)
        )
        assert isinstance(terms, pl.DataFrame)
        words = terms.select(
            pl.col("term").alias("w"),
            pl.col("patients").cast(pl.Int64),
            pl.col("count").cast(pl.Int64).alias("uses"),
        )
        return cls(patients=report.patients, words=words)

    @classmethod
    def combine(cls, parts: Iterable[CorpusStats]) -> CorpusStats:
        """The statistics of a corpus from those of pieces that split it by patient (no
        patient in two pieces): the counts add; the words are sorted."""
        parts = list(parts)
        words = (
            pl.concat([p.words for p in parts])
            .group_by("w")
            .agg(pl.col("patients").sum(), pl.col("uses").sum())
            .sort("w")
        )
        return cls(patients=sum(p.patients for p in parts), words=words)


_BREAKS = np.array([ord(c) for c in ".!?:;\n"], dtype=np.uint32)


def _shifted(column: str, n: int) -> pl.Expr:
    """``column`` of the word ``n`` places earlier (``n < 0``: later) in the same note, null
    past the note's ends: ``shift(n).over("row")`` for a table whose notes' words are
    consecutive (every token table here), without grouping (~50x faster)."""
    same = pl.col("row").shift(n) == pl.col("row")
    return pl.when(same).then(pl.col(column).shift(n))


def _row_starts() -> pl.Expr:
    """Whether each word is its note's first, in a table whose notes' words are
    consecutive."""
    return (pl.col("row") != pl.col("row").shift(1)).fill_null(True)


def tokens(texts: pa.Array) -> pl.DataFrame:
    """One row per word: ``row``, ``i`` (word index), ``s``/``e`` (code points), ``w``
    (normalised), ``cap`` (written in title case in a note that uses capitals as prose does;
    null in all-capitals and all-lower-case notes), ``upper`` (all capitals in such a note),
    ``gap`` (characters between the previous word and this one), ``dot`` (the first of them is
    a period), ``brk`` (a sentence or line starts with this word) and ``raw`` (the word as
    written). Linear in the text length."""
    starts, ends, words = tokenize(texts)
    raw = tokenize(texts, normalize="none").column(2)
    tok = pl.from_arrow(
        pa.RecordBatch.from_arrays([starts, ends, words, raw], ["s", "e", "w", "raw"])
    )
    assert isinstance(tok, pl.DataFrame)
    text = pl.from_arrow(texts.cast(pa.large_string()))
    assert isinstance(text, pl.Series)
    # Capitals tell names from words only in notes that use them as prose does: some words
    # capitalised, most not (neither all-capitals nor all-lower-case notes).
    words_n = text.str.count_matches(r"\b\p{L}")
    caps = text.str.count_matches(r"\b\p{Lu}")
    mixed = ((caps >= 0.05 * words_n) & (caps <= 0.6 * words_n)).fill_null(False)
    tok = (
        tok.with_columns(mixed=mixed)
        .with_row_index("row")
        .explode(["s", "e", "w", "raw"])
        .drop_nulls("w")
        .with_columns(pl.col("s").cast(pl.Int64), pl.col("e").cast(pl.Int64))
    )
    prev_end = _shifted("e", 1)
    first = pl.col("raw").str.slice(0, 1)
    raw_word = pl.col("raw")
    tok = tok.with_columns(
        # The word's place in its note: its place in the table less its note's first's.
        i=pl.int_range(pl.len())
        - pl.when(_row_starts()).then(pl.int_range(pl.len())).forward_fill(),
        # Title case only: "MAE", "PEG" in a mixed-case note are acronyms, not names.
        cap=pl.when(pl.col("mixed")).then(
            (first != first.str.to_lowercase())
            & ((raw_word.str.len_chars() == 1) | (raw_word != raw_word.str.to_uppercase()))
        ),
        # All capitals in such a note: an acronym ("MA", "ASA").
        upper=pl.when(pl.col("mixed")).then(
            (raw_word.str.len_chars() > 1) & (raw_word == raw_word.str.to_uppercase())
        ),
        gap=(pl.col("s") - prev_end),
    )
    # The character after the previous word, read from the notes' code points (a string
    # slice by character offset would cost the offset each time).
    notes = [t or "" for t in text.to_list()]
    cps = np.frombuffer("".join(notes).encode("utf-32-le"), dtype=np.uint32)
    base = np.concatenate([[0], np.cumsum([len(t) for t in notes])])[:-1]
    rows = tok.get_column("row").to_numpy()
    after = (tok.get_column("e").shift(1).fill_null(0).to_numpy() + base[rows]).astype(np.int64)
    after = np.minimum(after, max(len(cps) - 1, 0))
    if len(cps):
        first_sep = cps[after]
        before = np.maximum(tok.get_column("s").to_numpy() + base[rows] - 1, 0).astype(np.int64)
        dot = first_sep == ord(".")
        # A sentence or line starts here: a capital says nothing about the word.
        brk = np.isin(first_sep, _BREAKS) | (cps[before] == ord("\n"))
    else:
        dot = brk = np.zeros(len(after), dtype=bool)
    tok = tok.with_columns(
        dot=(pl.col("gap") > 0) & pl.Series(dot),
        brk=(pl.col("i") == 0) | ((pl.col("gap") > 0) & pl.Series(brk)),
    )
    return tok.drop("mixed").with_columns(pl.col("row").cast(pl.Int64))


def _ngrams(tok: pl.DataFrame, n: int, heads: pl.Series | None = None) -> pl.DataFrame:
    """``row``, ``i`` (first word), ``last`` (word index of the last word), ``s``, ``e``,
    ``w`` (n words joined by spaces): consecutive words separated by one space or ". ".
    With ``heads``, only the n-grams whose first word it holds (the words are joined only
    for those)."""
    parts = [pl.col("w")]
    ok = pl.lit(True)
    for k in range(1, n):
        nxt = _shifted("w", -k)
        gap = _shifted("gap", -k)
        dot = _shifted("dot", -k)
        ok = ok & nxt.is_not_null() & ((gap == 1) | ((gap == 2) & dot))
        parts.append(nxt.alias(f"w{k}"))
    if heads is not None:
        ok = ok & pl.col("w").is_in(heads.implode())
    grams = tok.select(
        "row",
        "i",
        (pl.col("i") + n - 1).alias("last"),
        "s",
        _shifted("e", -(n - 1)).alias("e"),
        *parts,
        ok.alias("ok"),
    ).filter("ok")
    words = [pl.col("w"), *(pl.col(f"w{k}") for k in range(1, n))]
    return grams.select(
        "row", "i", "last", "s", "e", pl.concat_str(words, separator=" ").alias("w")
    )


def _phrases(tok: pl.DataFrame, phrases: pl.DataFrame) -> Iterator[tuple[int, pl.DataFrame]]:
    """For n = 1..4, ``n`` and the n-grams of ``tok`` (:func:`_ngrams`) that are ``phrases``
    (``w``, words joined by single spaces)."""
    split = phrases.select("w", pl.col("w").str.split(" ").alias("parts"))
    for n in range(1, 5):
        these = split.filter(pl.col("parts").list.len() == n)
        if these.height == 0:
            continue
        heads = these.get_column("parts").list.first().unique()
        grams = _ngrams(tok, n, heads)
        yield n, grams.join(these.select("w"), on="w", how="semi")


def look_up(
    tok: pl.DataFrame, table: pl.DataFrame, index: StringIndex, columns: Iterable[str]
) -> pl.DataFrame:
    """``tok`` with ``columns`` of the row of ``table`` (unique words ``w``, rows found by
    ``index``) of each of its words: null where ``table`` has no such word. The same as a left
    join on ``w`` that keeps ``tok``'s order, but ``table`` is hashed once (``index``), not
    again at every batch: a lexicon of 800k words, or a corpus's vocabulary."""
    at = index.find(tok.get_column("w").to_arrow())
    rows = pl.Series(at, dtype=pl.Int64)
    rows = rows.set(rows < 0, None).cast(pl.UInt32)  # type: ignore[arg-type]
    return pl.concat([tok, table.select(pl.col(list(columns)).gather(rows))], how="horizontal")


def features(
    tok: pl.DataFrame,
    lex: Lexicon,
    stats: CorpusStats | None,
    max_zipf: float,
    rare_share: float,
) -> pl.DataFrame:
    """Add ``first``, ``last``, ``zipf``, ``patients``, ``word`` (a dictionary word), ``noun``
    (a dictionary word that is never a proper noun) and ``vocab`` (an everyday English word, a
    word common in this corpus, a hospital unit, or not alphabetic; ``unit`` alone: a unit,
    an eponym or not alphabetic) to ``tokens``."""
    # The context rules shift over neighbouring words: the joins keep the words' order.
    tok = look_up(tok, lex.words, lex.index, [c for c in lex.words.columns if c != "w"])
    if stats is not None:
        tok = look_up(tok, stats.words, stats.index, ["patients"])
        common = pl.col("patients").fill_null(0) > stats.rare_limit(rare_share)
    else:
        tok = tok.with_columns(patients=pl.lit(None, pl.Int64))
        common = pl.lit(False)
    return (
        tok.with_columns(
            pl.lit(max_zipf, pl.Float32).alias("max_zipf"),
            pl.col("first").fill_null(False),
            pl.col("last").fill_null(False),
            pl.col("word").fill_null(False),
            (pl.col("word").fill_null(False) & ~pl.col("proper").fill_null(False)).alias("noun"),
            pl.col("zipf").fill_null(0.0),
        )
        .with_columns(
            unit=pl.col("w").is_in(list(UNITS))
            | pl.col("w").is_in(list(EPONYMS))
            | ~pl.col("w").str.contains(r"^\p{L}+$")
        )
        .with_columns(vocab=(pl.col("zipf") >= max_zipf) | common | pl.col("unit"))
        .drop("proper")
    )


def _hits(frame: pl.DataFrame, label: str, source: str, score: float) -> pl.DataFrame:
    return frame.select(
        "row",
        pl.col("s").cast(pl.Int32).alias("start"),
        pl.col("e").cast(pl.Int32).alias("end"),
        pl.lit(label).alias("label"),
        pl.lit(source).alias("source"),
        pl.lit(score, pl.Float32).alias("score"),
    )


def _unknown() -> pl.Expr:
    """A word in no dictionary, rare in English and in the corpus: a name next to a name."""
    return (
        pl.col("w").str.contains(r"^\p{L}{3,}$")
        & ~pl.col("word")
        & (pl.col("zipf") < UNKNOWN_ZIPF)
        & ~pl.col("vocab")
    )


def context_names(tok: pl.DataFrame) -> pl.DataFrame:
    """Names however common a word they are, where the words around them say a person, as
    ``row``, ``s``, ``e``:

    * a name before a verb of calling or visiting ("bill called", "Sullivan phoned"); a
      first name before "is", "was"... ("DAVID IS SPEAKING");
      a first name, or a surname written with a capital, after "per" or "spoke with";
    * a name or unknown word before "cell", "phone", "home"... (a contact list);
    * a name before "family" ("KEEP MARTINEZ FAMILY AWARE");
    * two names in a row, one of them a first name ("mary theresa"); an unknown word joined
      to a first name by "and" ("suzette and ank");
    * an initial with its period before a capitalised word that is not vocabulary ("D. Phyl");
    * the last line of a note when it is one to three names (a signature: "... SUSAN").
    """
    nxt = _shifted("w", -1)
    prv = _shifted("w", 1)
    prv2 = _shifted("w", 2)
    near = (_shifted("gap", -1).fill_null(0) <= 2) & (pl.col("gap") <= 2)
    capital = pl.col("cap").fill_null(False)
    usable = (
        (pl.col("zipf") < 5.3)
        & ~pl.col("noun")
        & ~pl.col("w").is_in(list(NOT_NEIGHBOURS | UNITS | EPONYMS))
        # An acronym in a note that uses capitals is not a name ("MA", "ASA").
        & ~pl.col("upper").fill_null(False)
    )
    tok = tok.with_columns(usable=usable, unknown=_unknown()).with_columns(
        person=(pl.col("first") | (pl.col("last") & capital)) & pl.col("usable"),
        named=(pl.col("first") | pl.col("last")) & pl.col("usable"),
    )
    not_lower = pl.col("cap").fill_null(True)
    context = (
        (pl.col("named") & not_lower & nxt.is_in(list(_NAME_BEFORE)))
        | (pl.col("first") & pl.col("usable") & nxt.is_in(list(_NAME_BEFORE_WEAK)))
        | (
            pl.col("person")
            & (
                prv.is_in(list(_NAME_AFTER))
                | ((prv == "with") & prv2.is_in(list(_NAME_AFTER_WITH)))
            )
        )
    )
    family = (nxt == "family") & pl.col("named")
    # "suzette and ank": an unknown word joined to a first name by "and".
    joined = pl.col("unknown") & (prv == "and") & _shifted("first", 2) & _shifted("usable", 2)
    # A contact list: "Lopie Certusi cell# ...", "Hank Przybylo (son) home 555-...".
    contact = (
        nxt.is_in(list(_CONTACT_WORDS))
        & (pl.col("named") | (pl.col("unknown") & pl.col("usable")))
        & not_lower
    )
    next_named = _shifted("named", -1) & (_shifted("gap", -1) == 1)
    prev_named = _shifted("named", 1) & (pl.col("gap") == 1)
    either_first = pl.col("first") | _shifted("first", -1)
    pair = pl.col("named") & ((next_named & either_first) | prev_named)
    spans = [
        tok.filter(((context | family | contact | joined) & near).fill_null(False)),
        tok.filter(pair.fill_null(False)),
    ]
    # "D. Phyl": the initial and the word.
    initial = pl.col("w").str.contains(r"^\p{L}$") & capital
    after_dot = (_shifted("gap", -1) == 2) & _shifted("dot", -1)
    word_after = (
        _shifted("cap", -1).fill_null(False) & ~_shifted("vocab", -1) & ~_shifted("noun", -1)
    )
    spans.append(
        tok.filter((initial & after_dot & word_after).fill_null(False))
        .select("row", "s", "i")
        .join(tok.select("row", (pl.col("i") - 1).alias("i"), "e"), on=["row", "i"])
    )
    # A signature: the note's last line holds one to three names.
    # Every note's first word starts a line, so lines counted over the table are numbered
    # apart; a note's last line is its last word's.
    line = pl.col("brk").cast(pl.Int64).cum_sum()
    ends = _row_starts().shift(-1).fill_null(True)
    sig = tok.filter(line == pl.when(ends).then(line).backward_fill())
    sig = sig.filter(
        (pl.len().over("row") <= 3)
        & pl.col("named").all().over("row")
        & (pl.col("i") > 0).all().over("row")
    )
    spans.append(sig)
    return pl.concat([f.select("row", "s", "e") for f in spans])


def context_places(tok: pl.DataFrame, max_words: int = 3) -> pl.DataFrame:
    """Places named after a trigger ("transferred to X", "lives in X"): up to ``max_words``
    words that are not vocabulary (or are capitalised in a mixed-case note), as ``row``,
    ``s``, ``e``, ``w`` (the words joined by spaces)."""
    tok = tok.with_row_index("k")
    starts, near = _after_triggers(tok, max_words)
    # Site names recur across patients, so only English and the unit words rule a word out.
    placeish = (
        ((pl.col("zipf") < pl.col("max_zipf")) | pl.col("cap").fill_null(False))
        & ~pl.col("w").is_in(list(UNITS))
        & pl.col("w").str.contains(r"^\p{L}")
    )
    return _place_runs(near.with_columns(placeish=placeish), starts, max_words)


def _after_triggers(tok: pl.DataFrame, max_words: int) -> tuple[pl.Series, pl.DataFrame]:
    """The words right after a trigger, within two characters of it (positions ``k`` in
    ``tok``, a token table numbered by ``k``), and the rows of ``tok`` a place named there
    may span: each such word and the ``max_words - 1`` after it."""
    seconds = sorted({b for _, b in _PLACE_TRIGGERS})
    pairs = [f"{a} {b}" for a, b in _PLACE_TRIGGERS]
    starts = (
        tok.select("k", "gap", _shifted("w", 1).alias("w1"), _shifted("w", 2).alias("w2"))
        .filter(pl.col("w1").is_in(seconds))
        .filter(pl.concat_str(["w2", "w1"], separator=" ").is_in(pairs) & (pl.col("gap") <= 2))
        .get_column("k")
    )
    ks = pl.DataFrame({"k": pl.concat([starts + j for j in range(max_words)]).unique()})
    return starts, tok.join(ks, on="k", how="semi", maintain_order="left")


def _place_runs(near: pl.DataFrame, starts: pl.Series, max_words: int) -> pl.DataFrame:
    """The longest run of up to ``max_words`` ``placeish`` words, one space apart, from each
    of ``starts`` (``near``: :func:`_after_triggers`' rows), as ``row``, ``s``, ``e``,
    ``w``."""
    out = []
    run = near.filter(pl.col("k").is_in(starts.implode()) & pl.col("placeish")).select(
        "row", "k", "s", "e", "w"
    )
    for j in range(max_words):
        if j:
            nxt = near.select(
                "row",
                (pl.col("k") - j).alias("k"),
                pl.col("e").alias("e2"),
                pl.col("w").alias("w2"),
                "placeish",
                "gap",
            )
            run = (
                run.join(nxt, on=["row", "k"])
                .filter(pl.col("placeish") & (pl.col("gap") == 1))
                .select(
                    "row",
                    "k",
                    "s",
                    pl.col("e2").alias("e"),
                    pl.concat_str(["w", "w2"], separator=" ").alias("w"),
                )
            )
        if run.height == 0:
            break
        out.append(run)
    if not out:
        return pl.DataFrame(schema={"row": pl.Int64, "s": pl.Int64, "e": pl.Int64, "w": pl.String})
    longest = pl.concat(out).sort("e", descending=True).unique(["row", "k"], keep="first")
    return longest.select(pl.col("row").cast(pl.Int64), "s", "e", "w")


def find(
    tok: pl.DataFrame,
    lex: Lexicon,
    known_places: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Dictionary hits of featured tokens (:func:`features`) as span rows (``row``,
    ``start``, ``end``, ``label``, ``source``, ``score``).

    * ``lists:names``: a census name that is not vocabulary;
    * ``lists:places``: a place (one to four words) whose words are not all vocabulary;
    * ``lists:context``: a place named after a trigger (:func:`context_places`);
    * ``lists:known``: a word or phrase of ``known_places`` (``w``), found by context
      anywhere in the corpus.
    """
    # A census name that is not vocabulary; or a first name that is also a word of middling
    # frequency ("Helen", "Nancy"), written with a capital in a note that uses capitals. A
    # census name that is also a common noun ("Amber", "Taper") counts only where the capital
    # is evidence: title case inside a sentence (``titled``).
    cap = pl.col("cap").fill_null(True)
    titled = pl.col("cap").fill_null(False) & ~pl.col("brk")
    names = tok.filter(
        ((pl.col("first") | pl.col("last")) & ~pl.col("vocab") & cap & (~pl.col("noun") | titled))
        | (pl.col("first") & (pl.col("zipf") < 4.8) & pl.col("cap").fill_null(False))
    )
    parts = [
        _hits(names, "NAME", "lists:names", 0.7),
        _hits(context_names(tok), "NAME", "lists:context", 0.6),
    ]
    for _, hits in _phrases(tok, lex.places.select("w")):
        if hits.height:
            vocab = tok.select("row", "i", "vocab")
            # Keep a place unless every word of it is vocabulary.
            spans = hits.with_columns(pl.int_ranges("i", pl.col("last") + 1).alias("j")).explode(
                "j"
            )
            spans = (
                spans.join(vocab.rename({"i": "j"}), on=["row", "j"])
                .group_by(["row", "i", "s", "e"])
                .agg(pl.col("vocab").all())
            )
            parts.append(_hits(spans.filter(~pl.col("vocab")), "LOCATION", "lists:places", 0.6))
    ctx = context_places(tok)
    parts.append(_hits(ctx, "LOCATION", "lists:context", 0.6))
    # A well-known place, too frequent in English for the rule above, written with a capital
    # after "from", "to", "in"... ("Sister called from Seattle").
    prev = _shifted("w", 1)
    one_word_places = tok.join(
        lex.places.filter(pl.col("words") == 1).select("w"), on="w", how="semi"
    )
    named = tok.filter(
        titled
        & ~pl.col("noun")
        & (pl.col("zipf") < PLACE_MAX_ZIPF)
        & ~pl.col("unit")
        & prev.is_in(list(_PLACE_PREPOSITIONS)).fill_null(False)
        & (pl.col("gap") == 1)
    ).join(one_word_places.select("row", "i"), on=["row", "i"], how="semi")
    parts.append(_hits(named, "LOCATION", "lists:places", 0.6))
    # A saint's name is a hospital or a home ("St. Agnes", "ST MARY'S", "St A."); "ST
    # changes" is not.
    saint = tok.select(
        "row",
        "s",
        _shifted("e", -1).alias("e"),
        pl.col("w").is_in(["st", "saint"]).alias("st"),
        _shifted("first", -1).alias("next_first"),
        _shifted("noun", -1).alias("next_noun"),
        _shifted("gap", -1).alias("next_gap"),
        _shifted("dot", -1).alias("next_dot"),
        (
            _shifted("w", -1).str.contains(r"^\p{L}$")
            & _shifted("cap", -1).fill_null(True)
            & _shifted("dot", -2).fill_null(False)
        ).alias("next_initial"),
    ).filter(
        pl.col("st")
        & (pl.col("next_first") | pl.col("next_initial"))
        & ~pl.col("next_noun")
        & ((pl.col("next_gap") == 1) | ((pl.col("next_gap") == 2) & pl.col("next_dot")))
    )
    parts.append(_hits(saint, "LOCATION", "lists:places", 0.6))
    # "in Edgemere area": a capitalised word that is not vocabulary before "area".
    area = tok.filter((_shifted("w", -1) == "area") & titled & ~pl.col("vocab") & ~pl.col("noun"))
    parts.append(_hits(area, "LOCATION", "lists:places", 0.6))
    if known_places is not None and known_places.height:
        for _, hits in _phrases(tok, known_places.select("w")):
            parts.append(_hits(hits, "LOCATION", "lists:known", 0.6))
    return pl.concat(parts)


def harvest(tok: pl.DataFrame) -> pl.DataFrame:
    """Context places of featured tokens, counted: ``w`` and ``hits`` (times named after a
    trigger). The counts of batches add up."""
    return _counted(context_places(tok))


def word_rows(texts: pa.Array) -> pl.DataFrame:
    """One row per word of ``texts`` (:func:`~phisieve.text.words.tokenize`): ``row`` (the
    note), ``s``, ``e`` (code points) and ``w`` (normalised), in the notes' order."""
    tok = pl.from_arrow(pa.RecordBatch.from_arrays(list(tokenize(texts)), ["s", "e", "w"]))
    assert isinstance(tok, pl.DataFrame)
    return tok.with_row_index("row").explode(["s", "e", "w"]).drop_nulls("w")


def place_counts(
    texts: pa.Array, lex: Lexicon, max_zipf: float = MAX_ZIPF, max_words: int = 3
) -> pl.DataFrame:
    """:func:`harvest` of the :func:`features` of the :func:`tokens` of ``texts`` (the same
    counts, ``w`` and ``hits``), with the words' features worked out only where a place may
    be named: the few words after a trigger. The corpus pass that learns the places."""
    tok = (
        word_rows(texts)
        .with_columns(pl.col("s").cast(pl.Int64), pl.col("e").cast(pl.Int64))
        .with_row_index("k")
        .with_columns(gap=pl.col("s") - _shifted("e", 1))
    )
    starts, sub = _after_triggers(tok, max_words)
    # Capitals count only in notes that use them as prose does (:func:`tokens`' ``mixed``).
    notes = sub.get_column("row").unique().sort()
    text = pl.from_arrow(texts.cast(pa.large_string()).take(notes.to_arrow()))
    assert isinstance(text, pl.Series)
    words_n = text.str.count_matches(r"\b\p{L}")
    caps = text.str.count_matches(r"\b\p{Lu}")
    mixed = ((caps >= 0.05 * words_n) & (caps <= 0.6 * words_n)).fill_null(False)
    raw = pl.from_arrow(texts.cast(pa.large_string()))
    assert isinstance(raw, pl.Series)
    sub = sub.join(
        pl.DataFrame({"row": notes, "mixed": mixed}), on="row", how="left", maintain_order="left"
    )
    sub = look_up(sub, lex.words, lex.index, ["zipf"])  # lex.zipf's, or null
    # The word as written: the note's characters from s to e.
    sub = sub.with_columns(
        raw=pl.Series(
            [
                t[a:b]
                for t, a, b in zip(
                    raw.gather(sub.get_column("row")).to_list(),
                    sub.get_column("s").to_list(),
                    sub.get_column("e").to_list(),
                    strict=True,
                )
            ],
            dtype=pl.String,
        )
    )
    first = pl.col("raw").str.slice(0, 1)
    cap = pl.when(pl.col("mixed")).then(
        (first != first.str.to_lowercase())
        & (
            (pl.col("raw").str.len_chars() == 1)
            | (pl.col("raw") != pl.col("raw").str.to_uppercase())
        )
    )
    sub = sub.with_columns(
        placeish=((pl.col("zipf").fill_null(0.0) < max_zipf) | cap.fill_null(False))
        & ~pl.col("w").is_in(list(UNITS))
        & pl.col("w").str.contains(r"^\p{L}")
    )
    return _counted(_place_runs(sub, starts, max_words))


def _counted(ctx: pl.DataFrame) -> pl.DataFrame:
    """:func:`harvest`'s counts of context places (``w``)."""
    if ctx.height == 0:
        return pl.DataFrame(schema={"w": pl.String, "hits": pl.UInt32})
    # Every leading part of a phrase counts too: "gh" of "transferred to GH Cathed".
    parts = ctx.select(pl.col("w").str.split(" ").alias("p")).with_columns(n=pl.col("p").list.len())
    ctx = pl.concat(
        [
            parts.filter(pl.col("n") >= k).select(
                pl.col("p").list.head(k).list.join(" ").alias("w")
            )
            for k in range(1, 5)
        ]
    )
    return ctx.group_by("w").agg(pl.len().cast(pl.UInt32).alias("hits"))


def known_places(
    counts: pl.DataFrame,
    max_zipf: float,
    min_share: float = 0.1,
    *,
    stats: CorpusStats,
) -> pl.DataFrame:
    """The context places worth flagging everywhere (``w``): phrases of two or more words, and
    single words that are not everyday English, whenever at least ``min_share`` of the uses of
    their first word in the whole corpus (``stats``) follow a trigger ("GH": yes; "NSR", once
    "converted to NSR": no). ``counts``: :func:`harvest`'s, of any batches that make the
    corpus, with each phrase's ``zipf`` (:attr:`Lexicon.zipf`; null: rare)."""
    counts = counts.group_by("w").agg(pl.col("hits").sum(), pl.col("zipf").first())
    uses = stats.words.select(pl.col("w").alias("h"), pl.col("uses"))
    words = (
        counts.with_columns(
            n=pl.col("w").str.count_matches(" ") + 1,
            h=pl.col("w").str.split(" ").list.first(),
        )
        .join(uses, on="h", how="left")
        .with_columns(pl.col("uses").fill_null(0))
    )
    keep = ((pl.col("n") > 1) | (pl.col("zipf").fill_null(0.0) < max_zipf)) & (
        pl.col("hits") >= min_share * pl.col("uses")
    )
    return words.filter(keep).select("w")


def _covering(tok: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """``row``, ``i`` and ``k`` (the span's ``k`` column) of every word that a span overlaps,
    by the latest-starting such span; a sorted as-of join, linear in words + spans."""
    spans = spans.select("row", "k", "start", "end").sort("row", "start")
    spans = spans.with_columns(reach=pl.col("end").cum_max().over("row")).with_columns(
        pl.col("start").cast(pl.Int64)
    )
    words = tok.select("row", "i", "s", (pl.col("e") - 1).alias("last")).sort("row", "last")
    # Both sides are sorted by (row, key), so each row's group is sorted.
    hit = words.join_asof(
        spans,
        left_on="last",
        right_on="start",
        by="row",
        strategy="backward",
        check_sortedness=False,
    )
    return hit.filter(pl.col("reach") > pl.col("s")).select("row", "i", "k")


def confirm_names(tok: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """Drop rule spans that are plain words: NAME spans ("Dr. X", "wife X") whose words are
    all everyday English and not census names ("Dr. recommended", "wife phoned"), and places
    before a facility word written in lower case as English in a note that uses capitals
    ("was transfered from Memorial Hospital", "ready for rehab")."""
    rule = pl.col("source").str.starts_with("rules:")
    is_name = pl.col("label").str.contains("NAME") & rule
    is_place = (pl.col("label") == "LOCATION") & rule
    spans = spans.with_row_index("k")
    checked = spans.filter(is_name | is_place)
    if checked.height == 0 or tok.height == 0:
        return spans.drop("k")
    words = (
        _covering(tok, checked)
        .join(tok, on=["row", "i"])
        .join(checked.select("k", "label"), on="k")
    )
    # A word with a capital that is not in the dictionary stays a name ("son Vladimir").
    english = (pl.col("zipf") >= 3.0) & ~(
        pl.col("cap").fill_null(False) & ~pl.col("word") & (pl.col("zipf") < 4.5)
    )
    wordy = (
        pl.when(pl.col("label") == "LOCATION")
        .then((english | pl.col("word")) & ~pl.col("cap") & ~pl.col("upper").fill_null(False))
        .otherwise(~pl.col("first") & ~pl.col("last") & english)
    )
    drop = words.group_by("k").agg(wordy.fill_null(False).all().alias("drop")).filter("drop")
    return spans.join(drop.select("k"), on="k", how="anti").drop("k")


def extend_names(tok: pl.DataFrame, spans: pl.DataFrame, rounds: int = 3) -> pl.DataFrame:
    """Grow NAME spans over neighbouring census names ("Mary" in "Mary Hulse"), words in no
    dictionary ("Cetrone" in "Nancy Cetrone") and initials ("J." in "J. Chang"): the extra
    words as span rows (``lists:neighbour``)."""
    names = spans.filter(pl.col("label").str.contains("NAME"))
    if names.height == 0 or tok.height == 0:
        return spans.clear()
    # Words covered by a NAME span.
    cov = _covering(tok, names.with_row_index("k")).select("row", "i").unique()
    nameish = (
        (pl.col("first") | pl.col("last"))
        & (pl.col("zipf") < 5.0)
        & pl.col("w").str.contains(r"^\p{L}+$")
        & ~pl.col("w").is_in(list(NOT_NEIGHBOURS))
    )
    # A word in no dictionary, rare in English and in the corpus, is a surname next to a name
    # ("Nancy Cetrone", "Karen Ann Yanulis").
    unknown = _unknown()
    initial = pl.col("w").str.contains(r"^\p{L}$")
    cand = tok.with_columns(
        nameish=(nameish | unknown | initial) & pl.col("cap").fill_null(True),
        initial=initial,
        next_dot=_shifted("dot", -1),
        next_gap=_shifted("gap", -1),
    ).select("row", "i", "s", "e", "nameish", "initial", "gap", "dot", "next_dot", "next_gap")
    # ". " joins words only after an initial ("J. Chang"), not across sentences.
    prev_initial = _shifted("initial", 1).fill_null(False)
    close_prev = (pl.col("gap") == 1) | ((pl.col("gap") == 2) & pl.col("dot") & prev_initial)
    close_next = (pl.col("next_gap") == 1) | (
        (pl.col("next_gap") == 2) & pl.col("next_dot") & pl.col("initial")
    )
    # An initial joins a name only when written with its period ("J. Chang").
    ok = pl.col("nameish") & (
        ~pl.col("initial") | pl.col("next_dot").fill_null(False) | pl.col("dot")
    )
    # Only AND and OR of these: a null (unknown) counts as false, as in a filter.
    flags = cand.select(
        ok.fill_null(False).alias("ok"),
        close_prev.fill_null(False).alias("prev"),
        close_next.fill_null(False).alias("next"),
    )
    ok_np, prev_np, next_np = (flags.get_column(c).to_numpy() for c in ("ok", "prev", "next"))
    # The words are sorted by note and place: a word's position is its note's first's + i.
    rows = cand.get_column("row").to_numpy()
    same = rows[1:] == rows[:-1]
    covered = np.zeros(cand.height, dtype=bool)
    where = np.searchsorted(rows, cov.get_column("row").to_numpy()) + cov.get_column("i").to_numpy()
    covered[where] = True
    added = []
    for _ in range(rounds):
        prev_cov = np.zeros_like(covered)
        prev_cov[1:] = covered[:-1] & same
        next_cov = np.zeros_like(covered)
        next_cov[:-1] = covered[1:] & same
        new = ~covered & ok_np & ((prev_cov & prev_np) | (next_cov & next_np))
        if not new.any():
            break
        added.append(cand.select("row", "s", "e").filter(pl.Series(new)))
        covered |= new
    if not added:
        return spans.clear()
    return _hits(pl.concat(added), "NAME", "lists:neighbour", 0.6)
