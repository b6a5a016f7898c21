"""The `crf` recognizer's attributes built in Rust (`_core.CrfWords`, `CrfTagger.tag_words`,
issue 41) against the polars reference (`crf_features`, what training reads): the same
strings, and the same tags as the tagger over those strings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phisieve import _core
from phisieve.detect.recognizers.crf import (
    LEXICAL,
    TEMPLATE,
    CrfRecognizer,
    _char_class,
    _char_classes,
    _covering,
    _word_values,
    crf_features,
    crf_words,
    feature_columns,
    sorted_words,
    token_table,
)
from phisieve.detect.run import detector
from phisieve.detect.stage import DEFAULT_RECOGNIZERS
from phisieve.io.annotated import read_physionet
from phisieve.io.sources import open_source

# Letters of every case class (Lu, Ll, Lt ǅ, Lo), numbers (Nd, No ², Arabic-Indic ٣), marks,
# punctuation, the "|" and "#" the attributes use as separators.
CHARS = "aZé Ωωǅ中3²٣\u0301-./|#'"
text = st.text(alphabet=CHARS, max_size=6)
flag = st.sampled_from([True, False, None])


@st.composite
def word_tables(draw) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A random word table as :func:`token_table` makes it (notes of 0..6 words, sorted, each
    word 2 characters apart), and random merged spans over it."""
    counts = draw(st.lists(st.integers(0, 6), min_size=1, max_size=5))
    n = sum(counts)

    def column(values: st.SearchStrategy) -> list:
        return draw(st.lists(values, min_size=n, max_size=n))

    rows = [r for r, k in enumerate(counts) for _ in range(k)]
    index = [i for k in counts for i in range(k)]
    tok = pl.DataFrame(
        {
            "row": pl.Series(rows, dtype=pl.Int64),
            "i": pl.Series(index, dtype=pl.Int64),
            "s": pl.Series([3 * i for i in index], dtype=pl.Int64),
            "e": pl.Series([3 * i + 2 for i in index], dtype=pl.Int64),
            "w": pl.Series(column(text), dtype=pl.String),
            "raw": pl.Series(column(st.none() | text), dtype=pl.String),
            "zipf": pl.Series(column(st.sampled_from([0.0, 0.25, 0.75, 1.25, 3.3, 7.0])),
                              dtype=pl.Float32),
            "patients": pl.Series(column(st.none() | st.integers(0, 9)), dtype=pl.Int64),
            **{c: pl.Series(column(st.booleans()), dtype=pl.Boolean)
               for c in ("first", "last", "vocab", "noun", "unit", "brk")},
            "cap": pl.Series(column(flag), dtype=pl.Boolean),
            "upper": pl.Series(column(flag), dtype=pl.Boolean),
            "cb": pl.Series(column(st.sampled_from(["^", "a", "d", "_", "N", ".", "é"])),
                            dtype=pl.String),
            "ca": pl.Series(column(st.sampled_from(["^", "a", "d", "_", "N", ","])),
                            dtype=pl.String),
        }
    )  # fmt: skip
    span = st.tuples(
        st.integers(0, len(counts) - 1),
        st.integers(0, 18),
        st.integers(1, 6),
        st.sampled_from(["NAME", "DATE"]),
        st.sampled_from(["rules:date_ymd", "lists:deny", "rules:x+lists:NAME"]),
    )
    found = draw(st.lists(span, max_size=6))
    spans = pl.DataFrame(
        {
            "row": [r for r, *_ in found],
            "start": [s for _, s, *_ in found],
            "end": [s + k for _, s, k, *_ in found],
            "label": [label for *_, label, _ in found],
            "source": [source for *_, source in found],
        },
        schema={"row": pl.Int64, "start": pl.Int32, "end": pl.Int32, "label": pl.String,
                "source": pl.String},
    )  # fmt: skip
    return tok, spans


def rust_attributes(tok: pl.DataFrame, spans: pl.DataFrame) -> list[list[str | None]]:
    words = crf_words(_word_values(tok, spans))
    assert len(words) == tok.height
    return [a.to_pylist() for a in words.attributes(TEMPLATE)]


def reference_attributes(tok: pl.DataFrame, spans: pl.DataFrame) -> list[list[str | None]]:
    feats = crf_features(tok, spans).sort("row", "i")
    return [feats.get_column(c).to_list() for c in feature_columns(feats)]


@settings(max_examples=150, deadline=None)
@given(word_tables())
def test_rust_attributes_equal_the_polars_features(table):
    tok, spans = table
    assert rust_attributes(tok, spans) == reference_attributes(tok, spans)
    # Whatever the order the words come in.
    shuffled = tok.sample(fraction=1.0, shuffle=True, seed=3)
    assert rust_attributes(shuffled, spans) == reference_attributes(tok, spans)


def test_the_template_is_the_features_in_order():
    assert len(TEMPLATE) == 33 and TEMPLATE[: len(LEXICAL)] == LEXICAL
    tok, spans = (
        pl.DataFrame({"row": [0], "i": [0], "s": [0], "e": [1], "w": ["x"], "raw": ["X"],
                      "zipf": [1.0], "patients": [1], "cap": [None], "upper": [None],
                      "first": [True], "last": [False], "vocab": [True], "noun": [True],
                      "unit": [False], "brk": [True], "cb": ["^"], "ca": ["^"]}),
        pl.DataFrame(schema={"row": pl.Int64, "start": pl.Int32, "end": pl.Int32,
                             "label": pl.String, "source": pl.String}),
    )  # fmt: skip
    got = [c[0] for c in rust_attributes(tok, spans)]
    assert got[:3] == ["bias", "w=x", "shp=X"] and "cap=na" in got and "w-1|w=#|x" in got
    assert got[len(LEXICAL) :] == ["src=", "src-2=#", "src-1=#", "src+1=#", "src+2=#"]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([0, 9, 10, 13, 32, 46, 65, 0xB2, 0xE9, 0x661, 0x2028,
                                 0x4E2D, 0x1F600]), max_size=30))  # fmt: skip
def test_character_classes_by_table_equal_the_reference(points):
    cp = np.asarray(points, dtype=np.uint32)
    assert _char_classes(cp).to_list() == _char_class(cp).tolist()


def test_covering_sources_equal_a_brute_force():
    tok = pl.DataFrame({"row": [0, 0, 0, 1], "i": [0, 1, 2, 0], "s": [0, 5, 9, 0],
                        "e": [4, 8, 12, 3]})  # fmt: skip
    spans = pl.DataFrame(
        {
            "row": [0, 0, 0, 1],
            "start": [2, 6, 0, 5],
            "end": [7, 12, 4, 9],
            "label": ["NAME", "DATE", "NAME", "NAME"],
            "source": ["rules:name_title+lists:deny", "rules:date_ymd", "lists:NAME", "lists:x"],
        }
    )
    want = []
    for w in tok.iter_rows(named=True):
        names = {
            f"{part.split(':')[0]}:{sp['label']}"
            for sp in spans.iter_rows(named=True)
            if sp["row"] == w["row"] and sp["start"] < w["e"] and sp["end"] > w["s"]
            for part in sp["source"].split("+")
        }
        want.append("|".join(sorted(names)))
    assert _covering(tok, spans).to_list() == want
    assert want[0] == "lists:NAME|rules:NAME" and want[3] == ""


def test_sorted_words_sorts_only_when_needed():
    tok = pl.DataFrame({"row": [0, 0, 1], "i": [0, 1, 0], "x": ["a", "b", "c"]})
    assert sorted_words(tok) is tok
    assert sorted_words(tok.reverse()).equals(tok)
    assert sorted_words(tok.head(0)).height == 0


@pytest.fixture(scope="module")
def physionet_inputs(physionet_dir: Path) -> tuple[CrfRecognizer, pl.DataFrame, pl.DataFrame]:
    documents, _ = read_physionet(physionet_dir)
    sample = documents.slice(0, 60)
    found = detector(open_source(sample, 4096), DEFAULT_RECOGNIZERS)
    texts = sample.column("text").combine_chunks()
    tok, spans = found.found(texts)
    return found.crf, token_table(texts, tok), spans


def test_tag_words_equals_the_tagger_over_the_reference_strings(physionet_inputs):
    crf, tok, spans = physionet_inputs
    feats = crf_features(tok, spans).sort("row", "i")
    words = crf_words(_word_values(tok, spans))
    assert rust_attributes(tok, spans) == reference_attributes(tok, spans)
    per_note = feats.group_by("row", maintain_order=True).len().get_column("len")
    per_note = per_note.cast(pl.Int64).to_arrow()
    for tagger, template, columns in (
        (crf._tagger, TEMPLATE, feature_columns(feats)),
        (crf._finder, LEXICAL, feature_columns(feats, spans=False)),
    ):
        labels, marginals = tagger.tag([feats.get_column(c).to_arrow() for c in columns], per_note)
        names = np.asarray(tagger.labels, dtype=object)
        p = np.asarray(marginals).reshape(-1, len(names))
        phi = np.flatnonzero(names != "O")
        got_labels, got_p, got_best = tagger.tag_words(words, template, background="O")
        assert got_labels.equals(labels)
        np.testing.assert_allclose(np.asarray(got_p), p[:, phi].sum(axis=1), rtol=0, atol=1e-14)
        assert np.array_equal(np.asarray(got_best), phi[p[:, phi].argmax(axis=1)])
        no_path = tagger.tag_words(words, template, background="O", path=False)
        assert len(no_path[0]) == 0 and no_path[1].equals(got_p) and no_path[2].equals(got_best)
        # Without a background label, every label counts.
        _, every, _ = tagger.tag_words(words, template)
        np.testing.assert_allclose(np.asarray(every), 1.0, atol=1e-12)


def test_bad_words_and_templates_are_errors_without_values():
    secret = pa.array(["secret", "word"])
    per = pa.array([2], pa.int64())
    with pytest.raises(Exception, match="rows"):
        _core.CrfWords([("w", secret, None)], pa.array([3], pa.int64()))
    with pytest.raises(Exception, match="twice"):
        _core.CrfWords([("w", secret, None), ("w", secret, None)], per)
    with pytest.raises(Exception, match="int64"):
        _core.CrfWords([("w", secret, None)], pa.array([2], pa.int32()))
    with pytest.raises(Exception, match="strings, booleans or integers"):
        _core.CrfWords([("w", pa.array([1.5, 2.5]), None)], per)
    words = _core.CrfWords([("w", secret, None)], per)
    tagger = _core.CrfTagger(["O", "NAME"], ["w=secret"], [0.0, 1.0], [0.0] * 4)
    for template, message in (
        ([("v=", [("v", "", 0)])], "not given"),
        ([("w=", [("w", "upper", 0)])], "unknown transform"),
        ([("w=", [("w", "", 0)] * 3)], "at most 2"),
    ):
        for call in (lambda t=template: words.attributes(t),
                     lambda t=template: tagger.tag_words(words, t)):  # fmt: skip
            with pytest.raises(Exception, match=message) as e:
                call()
            assert "secret" not in str(e.value)
