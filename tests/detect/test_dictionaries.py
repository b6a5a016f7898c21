"""The built-in dictionaries of the `lists` recognizer, and the Stanza recognizer (issue 5)."""

from __future__ import annotations

import sys
import types

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phisieve.detect.recognizers import dictionaries
from phisieve.detect.recognizers.stanza import LABELS, doc_spans, download_command
from phisieve.detect.run import find_spans
from phisieve.errors import ConfigError


def corpus(notes: list[tuple[str, str]]) -> pa.Table:
    """(patient, text) rows as a documents table."""
    return pa.table(
        {
            "doc_id": [f"d{i}" for i in range(len(notes))],
            "patient_id": [p for p, _ in notes],
            "text": pa.array([t for _, t in notes], pa.large_string()),
        }
    )


def found(notes: list[tuple[str, str]], **kw) -> list[set[tuple[str, str]]]:
    """Per note: {(span text, source)}, found by ``rules,lists`` (the recognizers these tests
    specify) unless told otherwise."""
    kw.setdefault("recognizers", ["rules", "lists"])
    table = find_spans(corpus(notes), **kw)
    return [
        {(text[s["start"] : s["end"]], s["source"]) for s in spans}
        for (_, text), spans in zip(notes, table.column("spans").to_pylist(), strict=True)
    ]


FILLER = [
    (f"p{i}", "pt stable on levo, foley draining clear urine, pain controlled.") for i in range(40)
]


def test_census_names_that_are_neither_english_nor_site_vocabulary():
    got = found(
        [
            ("a", "K replaced after Marotta reviewed the labs."),
            ("b", "foley draining, pain is clear. Continue levo."),
            *FILLER,
        ]
    )
    assert ("Marotta", "lists:names") in got[0]
    # "foley" is an eponym, "clear"/"pain" are English, "levo" is used by 41 of 42 patients.
    assert got[1] == set()


def test_a_census_word_is_a_name_only_while_it_is_rare_in_the_corpus():
    # "levo" (a census surname, rare in English) in one patient's notes only: a name...
    alone = found([("a", "spoke with Levo about the plan"), ("b", "afebrile overnight")])
    assert ("Levo", "lists:names") in alone[0]
    # ... but site vocabulary once most patients' notes use it.
    common = found([("a", "spoke with Levo about the plan"), *FILLER])
    assert common[0] == set()


def test_names_grow_over_neighbouring_names_and_initials():
    text = (
        "pt was seen by J. Chang, the pa on call; report given to Mary Hulse, RN. "
        "wife Grace called at noon and was updated."
    )
    (got,) = found([("a", text)])
    words = {w for w, _ in got}
    assert {"J", "Chang", "Mary", "Hulse", "Grace"} <= words
    assert ("J", "lists:neighbour") in got
    assert not words & {"seen", "pa", "RN", "wife", "called", "noon"}


def test_common_nouns_that_are_census_names_need_a_capital_inside_a_sentence():
    got = found(
        [
            ("a", "Dopamine taper overnight. Amber urine, waffle boots on. Seen by Amber today."),
            ("b", "DOPAMINE TAPER, THEN DC. URINE AMBER."),
            ("c", "afebrile overnight"),
        ]
    )
    words = [{w for w, _ in g} for g in got]
    # "taper", "amber", "waffle" are common nouns: lower case, sentence-initial and
    # all-capitals uses are not names; "Amber" in title case inside a sentence is.
    assert "taper" not in words[0] and "waffle" not in words[0]
    assert ("Amber", "lists:names") in got[0]
    assert sum(1 for w in words[0] if w == "Amber") == 1
    assert got[1] == set()


def test_names_from_the_words_around_them():
    got = found(
        [
            ("a", "social: bill called once about 4:30am."),
            ("a", "PER DAVID, HE WILL COME BACK IN THE AM TO SEE HIS MOTHER."),
            ("b", "Lopie Certusi cell# 410-322-1419. spoke with helen from case management."),
            ("c", "pt alert. mary theresa kondouli from speech and swallow in today."),
            ("c", "Hr 100's with 1st degree avb. Reported to D. Phyl. Coags ok."),
            ("c", "HCT >30. KEEP MARTINEZ FAMILY AWARE OF PLAN OF CARE.\nSUSAN\n"),
            ("d", "pt on max assist, t max 99.1, o2 sats ok. Sat up with max assist"),
            ("e", "Family brought him back to St. Agnes, not ST changes. lives in Edgemere area"),
        ]
    )
    words = [{w for w, _ in g} for g in got]
    assert words[0] == {"bill"} and words[1] == {"DAVID"}
    assert {"Lopie", "Certusi", "helen"} <= words[2]
    assert words[3] == {"mary", "theresa", "kondouli"}
    assert words[4] == {"D. Phyl"}
    assert words[5] == {"MARTINEZ", "SUSAN"}
    assert words[6] == set()
    assert {"St. Agnes", "Edgemere"} <= words[7]
    assert not any(w.startswith("ST") for w in words[7])


def test_places_from_the_gazetteer_and_from_context_everywhere_in_the_corpus():
    got = found(
        [
            ("a", "Pt transferred to GH for cath. Lives in Catonsville with wife."),
            ("b", "Back from GH today; plan transfer to MICU."),
            ("c", "converted to NSR, transferred to floor"),
        ]
    )
    assert ("GH", "lists:context+lists:known") in got[0]
    assert any(w == "Catonsville" and "lists:places" in src for w, src in got[0])
    # Learnt from patient a's note, found in patient b's: site names recur across patients.
    assert ("GH", "lists:known") in got[1]
    assert not {w for w, _ in got[1] | got[2]} & {"MICU", "NSR", "floor"}


def test_dictionary_results_do_not_depend_on_document_order():
    notes = [
        ("a", "Pt transferred to GH for cath; Marotta aware."),
        ("b", "GH team saw pt. Mary Hulse, RN"),
        *FILLER[:5],
    ]
    forward = found(notes)
    backward = found(notes[::-1])
    assert forward == backward[::-1]


def test_lists_without_dictionaries_keeps_only_the_deny_list():
    (got,) = found([("a", "per Marotta")], dictionaries_enabled=False)
    assert got == set()


def test_corpus_stats_count_patients_and_skip_null_notes():
    stats = dictionaries.CorpusStats.of(
        corpus([("a", "Levo on"), ("a", "levo off"), ("b", "levo"), ("c", None)])  # type: ignore[list-item]
    )
    counts = dict(stats.words.select("w", "patients").iter_rows())
    assert counts["levo"] == 2 and counts["on"] == 1
    assert dict(stats.words.select("w", "uses").iter_rows())["levo"] == 3
    assert stats.patients == 3
    assert stats.rare_limit(0.03) == 2
    assert dictionaries.CorpusStats(patients=1000, words=stats.words).rare_limit(0.03) == 30


def test_corpus_stats_of_pieces_split_by_patient_combine_into_the_whole():
    rows = [("a", "Levo on"), ("b", "levo off"), ("a", "levo"), ("c", "on off"), ("b", "x")]
    whole = dictionaries.CorpusStats.of(corpus(rows))
    pieces = [
        dictionaries.CorpusStats.of(corpus([r for r in rows if r[0] in group]))
        for group in ("ab", "c")
    ]
    got = dictionaries.CorpusStats.combine(pieces)
    assert got.patients == whole.patients == 3
    assert got.words.rows() == [("levo", 2, 3), ("off", 2, 2), ("on", 2, 2), ("x", 1, 1)]
    assert got.words.equals(dictionaries.CorpusStats.combine([whole]).words)


# -- Stanza ---------------------------------------------------------------------------------


def stanza_doc(text: str, tagged: list[tuple[str, str]]):
    """A Stanza Document built offline from (token, BIOES tag) pairs, located in ``text``."""
    from stanza.models.common.doc import Document

    tokens, at = [], 0
    for i, (tok, tag) in enumerate(tagged, 1):
        start = text.index(tok, at)
        at = start + len(tok)
        tokens.append({"id": i, "text": tok, "start_char": start, "end_char": at, "ner": tag})
    return Document([tokens], text=text)


def test_stanza_entities_become_spans_in_code_points():
    text = "Zoë 😀 saw Jean Hulse at Towson General on 7/22 with pneumonia"
    doc = stanza_doc(
        text,
        [
            ("Zoë", "S-PERSON"),
            ("😀", "O"),
            ("saw", "O"),
            ("Jean", "B-PERSON"),
            ("Hulse", "E-PERSON"),
            ("at", "O"),
            ("Towson", "B-FAC"),
            ("General", "E-FAC"),
            ("on", "O"),
            ("7/22", "S-DATE"),
            ("with", "O"),
            ("pneumonia", "S-PROBLEM"),
        ],
    )
    spans = doc_spans(doc, offset=100)
    got = [(text[s - 100 : e - 100], label) for s, e, label, _ in spans]
    assert got == [
        ("Zoë", "NAME"),
        ("Jean Hulse", "NAME"),
        ("Towson General", "LOCATION"),
        ("7/22", "DATE"),
    ]
    assert "PROBLEM" not in LABELS


def test_missing_stanza_models_name_the_download_command(tmp_path):
    from phisieve.detect.recognizers.stanza import StanzaRecognizer

    with pytest.raises(ConfigError, match=r"stanza\.download\('en', package='mimic'") as e:
        StanzaRecognizer(package="mimic", ner="i2b2", model_dir=tmp_path)
    assert "never downloads" in str(e.value)
    assert download_command() == (
        "python -c \"import stanza; stanza.download('en', processors='tokenize,ner')\""
    )


def test_stanza_recognizer_in_detect_with_long_notes(monkeypatch):
    """The recognizer over a stand-in pipeline that tags every "Hulse": windows of long notes
    map back to note offsets, and duplicates from overlaps are dropped."""
    import stanza

    class Pipeline:
        def __init__(self, lang, **kw):
            assert kw["download_method"] is None
            self.calls = 0

        def bulk_process(self, docs):
            self.calls += 1
            out = []
            for d in docs:
                words = d.text.split(" ")
                tagged = [(w, "S-PERSON" if w == "Hulse" else "O") for w in words if w]
                out.append(stanza_doc(d.text, tagged))
            return out

    monkeypatch.setattr(stanza, "Pipeline", Pipeline)
    long = "pt ok " * 5000 + "Hulse aware " + "pt ok " * 5000
    texts = ["seen by Hulse", "", long]
    table = find_spans(
        pa.table({"doc_id": ["a", "b", "c"], "text": texts}),
        recognizers=["stanza"],
    )
    spans = table.column("spans").to_pylist()
    assert [(texts[0][s["start"] : s["end"]], s["source"]) for s in spans[0]] == [
        ("Hulse", "stanza:NAME")
    ]
    assert spans[1] == []
    assert [long[s["start"] : s["end"]] for s in spans[2]] == ["Hulse"]


def test_stanza_not_installed_is_a_missing_dependency(monkeypatch):
    from phisieve.detect.recognizers.stanza import StanzaRecognizer
    from phisieve.errors import MissingDependencyError

    monkeypatch.setitem(sys.modules, "stanza", types.ModuleType("broken"))
    monkeypatch.setitem(sys.modules, "stanza", None)
    with pytest.raises(MissingDependencyError, match="phisieve\\[ner\\]"):
        StanzaRecognizer()


def test_what_lists_learns_does_not_depend_on_batch_sizes(tmp_path):
    """The corpus statistics and the places learnt after triggers are the same whatever the
    batches the corpus is read in (a place's share of uses after a trigger counts every use
    of its first word in the corpus, not only those in the batches where it was named)."""
    import phisieve
    from phisieve.detect.run import _learn
    from phisieve.io.sources import open_source

    phisieve.synth(tmp_path / "docs", patients=300, seed=2)
    learnt = [_learn(open_source(tmp_path / "docs", rows)) for rows in (97, 5000)]
    (a, b) = learnt
    assert a.stats.words.equals(b.stats.words)
    known = [sorted(x.known_places.get_column("w").to_list()) for x in learnt]
    assert known[0] == known[1] and len(known[0]) > 10


def _reference_counts(texts: pa.Array) -> list[tuple[str, int]]:
    lex = dictionaries.lexicon()
    tok = dictionaries.features(
        dictionaries.tokens(texts), lex, None, dictionaries.MAX_ZIPF, dictionaries.RARE_SHARE
    )
    return sorted(dictionaries.harvest(tok).iter_rows())


def test_the_learning_pass_counts_the_places_of_the_whole_word_table(tmp_path, physionet_docs):
    """place_counts (features only after triggers) counts what harvest counts over every
    word's features, on the PhysioNet notes and on synthetic notes."""
    import phisieve
    from phisieve.io.sources import open_source

    phisieve.synth(tmp_path / "docs", patients=300, seed=2)
    for docs in (physionet_docs, tmp_path / "docs"):
        texts = open_source(docs).table().column("text").combine_chunks()
        expected = _reference_counts(texts)
        got = sorted(dictionaries.place_counts(texts, dictionaries.lexicon()).iter_rows())
        assert got == expected and len(expected) > 10


_WORDS = ["transferred", "to", "from", "admitted", "sent", "Boston", "GH", "st", "Mary's",
          "rehab", "the", "Floor", "x", "NEW", "york", "lives", "in", "home", "ICU",
          "9"]  # fmt: skip
_SEPARATORS = [" ", "  ", ". ", "\n", ", ", "-"]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.sampled_from(_WORDS), st.sampled_from(_SEPARATORS)), max_size=14).map(
            lambda ws: "".join(w + sep for w, sep in ws)
        )
        | st.none(),
        min_size=1,
        max_size=6,
    )
)
def test_place_counts_match_the_reference_on_any_notes(notes):
    """Against the reference, on notes made of triggers, places, capitals, separators and
    note ends in any order (a trigger at a note's end, runs across notes, null notes)."""
    texts = pa.array(notes, pa.string())
    got = sorted(dictionaries.place_counts(texts, dictionaries.lexicon()).iter_rows())
    assert got == _reference_counts(texts)


@settings(max_examples=60, deadline=None)
@given(
    words=st.lists(st.one_of(st.none(), st.sampled_from(["a", "b", "cc", "dé", "", "zz"])),
                   max_size=30),
    table=st.dictionaries(st.sampled_from(["a", "b", "cc", "dé", "", "q"]),
                          st.tuples(st.one_of(st.none(), st.integers(-5, 5)), st.booleans()),
                          max_size=6),
)  # fmt: skip
def test_look_up_is_a_left_join_on_the_word_that_keeps_the_order(
    words: list[str | None], table: dict[str, tuple[int | None, bool]]
) -> None:
    import polars as pl

    from phisieve.io.lookup import StringIndex

    tok = pl.DataFrame(
        {"row": list(range(len(words))), "w": words}, schema={"row": pl.Int64, "w": pl.String}
    )
    right = pl.DataFrame(
        {"w": list(table), "n": [v[0] for v in table.values()],
         "f": [v[1] for v in table.values()]},
        schema={"w": pl.String, "n": pl.Int64, "f": pl.Boolean},
    )  # fmt: skip
    index = StringIndex(right.get_column("w").to_arrow())
    want = tok.join(right, on="w", how="left", maintain_order="left")
    got = dictionaries.look_up(tok, right, index, ["n", "f"])
    assert got.equals(want)
    assert got.schema == want.schema


def test_the_corpus_statistics_index_is_not_pickled() -> None:
    import pickle

    stats = dictionaries.CorpusStats.of(corpus([("p1", "Anna saw Bob"), ("p2", "Bob left")]))
    assert stats.index.find(["bob", "zed"]).tolist() == [
        stats.words.get_column("w").to_list().index("bob"),
        -1,
    ]
    again = pickle.loads(pickle.dumps(stats))
    assert "index" not in again.__dict__
    assert again.words.equals(stats.words)
    assert again.index.find(["bob"]).tolist() == stats.index.find(["bob"]).tolist()
