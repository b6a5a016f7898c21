"""The MIMIC-III placeholder grammar and the surrogate kind of each category (issue 4), and
the ``placeholders`` stage's ids: a pure function of the data, whatever the rows' order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import phisieve
from phisieve.api import placeholders
from phisieve.errors import InputError
from phisieve.io.annotated import read_physionet
from phisieve.io.schema import SPANS
from phisieve.phi.gold import placeholder_ids, to_placeholders
from phisieve.phi.placeholders import find, kind_of, report, sex_of
from phisieve.phi.stage import PlaceholdersStage
from phisieve.pipeline.engine import LocalEngine
from phisieve.pipeline.runner import run_stage
from phisieve.pipeline.stage import Context
from phisieve.pipeline.stats import Stats


def rows(text: str) -> list[dict]:
    return find([text]).to_pylist()


def test_every_form_of_the_design():
    text = (
        "Mr. [**Known lastname 4015**] at [**Hospital1 18**] on [**2149-3-4**], seen "
        "[**9/2167**] and [**2149**], again [**3-4**]; call [**Telephone/Fax (1) 123**]. "
        "[**Age over 90 **] yo, [** **], [**Last Name (un) **], [**Date range (1) 77**]"
    )
    got = rows(text)
    for r in got:
        assert text[r["start"] : r["end"]].startswith("[**")
        assert text[r["start"] : r["end"]].endswith("**]")
    forms = [(r["form"], r["kind"]) for r in got]
    assert forms == [
        ("named", "last_name"),
        ("named", "hospital"),
        ("date", "date"),
        ("date", "date"),
        ("date", "date"),
        ("date", "date"),
        ("named", "phone"),
        ("age_over_90", "age_over_90"),
        ("empty", "empty"),
        ("named", "last_name"),
        ("named", "date_range"),
    ]
    assert (got[2]["year"], got[2]["month"], got[2]["day"], got[2]["shape"]) == (
        2149,
        3,
        4,
        "y-m-d",
    )
    assert (got[3]["year"], got[3]["month"], got[3]["shape"]) == (2167, 9, "m/y")
    assert (got[5]["month"], got[5]["day"], got[5]["shape"]) == (3, 4, "m-d")
    assert (got[6]["category"], got[6]["qualifier"], got[6]["id"]) == ("Telephone/Fax", "1", "123")
    assert got[9]["id"] is None and got[9]["qualifier"] == "un"


def test_malformed_markers_are_reported_not_dropped():
    got = rows("a [**Name 1 [**2149**] b**] c [**open")
    assert [r["form"] for r in got] == ["unterminated", "date", "stray_close", "unterminated"]
    assert [r["kind"] for r in got] == [None, "date", None, None]


def test_categories_map_to_kinds_and_unknown_ones_are_counted():
    assert kind_of("Female First Name (un)") == "first_name"
    assert sex_of("Female First Name", "un") == "female"
    assert sex_of("Male First Name", "un") == "male"
    assert sex_of("First Name", None) is None
    assert kind_of("Doctor Last Name") == "doctor_last_name"
    assert kind_of("First Name4") == "first_name"
    assert kind_of("Hospital Ward Name") == "ward"
    assert kind_of("Street Address") == "street_address"
    assert kind_of("Social Security Number") == "ssn"
    assert kind_of("Flux capacitor") is None
    r = report(find(["[**Flux capacitor 3**] [**Flux capacitor 4**] [**Hospital 1**]"]))
    assert r["unknown_categories"] == {"Flux capacitor": 2}
    assert r["by_kind"] == {"hospital": 1}
    assert r["placeholders"] == 3


def test_every_placeholder_of_the_synthetic_corpus_is_known():
    t = pa.Table.from_batches(list(phisieve.synth_batches(patients=100, seed=1)))
    found = find(t.column("text"))
    r = report(found)
    assert r["placeholders"] > 500
    assert r["unknown_categories"] == {}
    assert set(r["by_form"]) <= {"named", "date", "age_over_90", "empty"}


@settings(max_examples=200, deadline=None)
@given(
    parts=st.lists(
        st.one_of(
            st.text(alphabet=st.characters(codec="utf-8", exclude_characters="[]*"), max_size=8),
            st.sampled_from(["[**Known lastname 12**]", "[**2149-3-4**]", "[** **]", "[**"]),
            st.sampled_from(["**]", "é", "😀", "\n"]),
        ),
        max_size=12,
    )
)
def test_offsets_are_code_points_and_markers_are_complete(parts):
    text = "".join(parts)
    got = rows(text)
    for r in got:
        piece = text[r["start"] : r["end"]]
        if r["form"] == "unterminated":
            assert piece == "[**"
        elif r["form"] == "stray_close":
            assert piece == "**]"
        else:
            assert piece.startswith("[**") and piece.endswith("**]")
    starts = [r["start"] for r in got]
    assert starts == sorted(starts)
    assert text.count("[**") == sum(r["form"] != "stray_close" for r in got)


# --------------------------------------------------------------------------------------------
# Gold spans -> placeholders: ids keyed on the data, never on the order rows arrive in


def _gold(texts: dict[str, str], words: dict[str, list[str]], label: str = "PTName") -> pa.Table:
    return pa.table(
        {
            "doc_id": list(words),
            "spans": pa.array(
                [
                    [{"start": texts[d].index(w), "end": texts[d].index(w) + len(w),
                      "label": label, "source": "gold", "score": 1.0} for w in ws]
                    for d, ws in words.items()
                ],
                SPANS,
            ),
        }
    )  # fmt: skip


def _docs(rows: list[tuple[str, str, str]]) -> pa.Table:
    doc, patient, text = zip(*rows, strict=True)
    return pa.table(
        {
            "doc_id": list(doc),
            "patient_id": list(patient),
            "text": pa.array(text, pa.large_string()),
        }
    )


def test_placeholder_ids_count_up_in_doc_id_order_whatever_the_arrival_order():
    # Patient p's notes arrive d2, q0, d0, d1: ids count up per patient over p's notes in
    # doc_id order (d0, d1, d2), then by position within a note; q counts apart.
    texts = {
        "d0": "Pt Smith here",
        "d1": "pt Jones and SMITH",
        "d2": "Pt Brown, Jones",
        "q0": "Pt Brown again",
    }
    words = {"d0": ["Smith"], "d1": ["Jones", "SMITH"], "d2": ["Brown", "Jones"], "q0": ["Brown"]}
    want = {
        "d0": "Pt [**Known lastname 1**] here",
        "d1": "pt [**Known lastname 2**] and [**Known lastname 1**]",
        "d2": "Pt [**Known lastname 3**], [**Known lastname 2**]",
        "q0": "Pt [**Known lastname 1**] again",
    }
    rows = [(d, "q" if d == "q0" else "p", texts[d]) for d in ("d2", "q0", "d0", "d1")]
    for order in ([0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2]):
        docs = _docs([rows[i] for i in order])
        gold = _gold(texts, words)
        out, report = to_placeholders(docs, gold.take(order))
        got = dict(zip(out["doc_id"].to_pylist(), out["text"].to_pylist(), strict=True))
        assert got == want
        assert report["placeholders"] == report["spans"] == 6
    ids = placeholder_ids(_docs(rows), _gold(texts, words))
    assert ids == {
        ("p", "PTName/last", "smith"): 1,
        ("p", "PTName/last", "jones"): 2,
        ("p", "PTName/last", "brown"): 3,
        ("q", "PTName/last", "brown"): 1,
    }


def test_a_batch_uses_the_corpus_ids_and_refuses_keys_it_lacks():
    texts = {"d0": "Pt Smith here", "d1": "pt Jones and Smith"}
    words = {"d0": ["Smith"], "d1": ["Jones", "Smith"]}
    docs, gold = _docs([("d0", "p", texts["d0"]), ("d1", "p", texts["d1"])]), _gold(texts, words)
    ids = placeholder_ids(docs, gold)
    # d1 alone, with the corpus' ids: Jones keeps the id it has in the whole corpus (2).
    out, report = to_placeholders(docs.slice(1), gold, ids=ids)
    assert out["text"].to_pylist() == ["pt [**Known lastname 2**] and [**Known lastname 1**]"]
    assert report["spans_without_document"] == 1
    with pytest.raises(InputError, match="no placeholder id"):
        to_placeholders(docs.slice(1), gold, ids=placeholder_ids(docs.slice(0, 1), gold))
    # Spans of one doc_id spread over two rows of the gold table are one document's spans.
    split = pa.concat_tables([gold.slice(0, 1), _gold(texts, {"d1": ["Jones"]}),
                              _gold(texts, {"d1": ["Smith"]})])  # fmt: skip
    assert to_placeholders(docs[::-1], split)[0].equals(to_placeholders(docs, gold)[0][::-1])


def test_a_doc_id_with_gold_spans_must_name_one_document():
    texts = {"d0": "Pt Smith here"}
    docs = _docs([("d0", "p", texts["d0"]), ("d0", "q", "Pt Jones here")])
    with pytest.raises(InputError, match="doc_id 'd0' has gold spans and names more than one"):
        to_placeholders(docs, _gold(texts, {"d0": ["Smith"]}))
    # Without gold spans a repeated doc_id is left alone.
    out, _ = to_placeholders(docs, _gold(texts, {"dx": []}))
    assert out["text"].to_pylist() == ["Pt Smith here", "Pt Jones here"]


@pytest.fixture(scope="module")
def physionet_placeholders(physionet_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """The placeholders stage over the real corpus, as read (notes in file order)."""
    out = tmp_path_factory.mktemp("placeholders") / "ph"
    manifest = placeholders(out, corpus=physionet_dir)
    return pq.read_table(out), manifest


def _by_doc(table: pa.Table) -> dict[str, dict]:
    return {r["doc_id"]: r for r in table.to_pylist()}


_COUNTS = ("rows", "spans", "placeholders", "merged", "by_category", "spans_without_document")


def test_placeholder_ids_count_up_over_each_patients_doc_ids(physionet_placeholders):
    # On the real corpus, where file order (1-1, 1-2, ... 1-10) is not doc_id order (1-1,
    # 1-10, 1-2...): walking each patient's notes in doc_id order, ids first appear in
    # increasing order (with gaps: a key whose placeholder shows no id, a bare date, still
    # takes a number).
    table, manifest = physionet_placeholders
    assert manifest["placeholders"] == 998 and manifest["spans"] == 999
    notes: dict[str, list[tuple[str, str]]] = {}
    for r in table.to_pylist():
        notes.setdefault(r["patient_id"], []).append((r["doc_id"], r["text"]))
    out_of_file_order = checked = 0
    for patient, mine in notes.items():
        top, seen = 0, set()
        for _, text in sorted(mine):
            for ident in find([text]).column("id").to_pylist():
                if ident is not None and ident not in seen:
                    assert int(ident) > top, patient
                    top = int(ident)
                    seen.add(ident)
                    checked += 1
        out_of_file_order += [d for d, _ in mine] != sorted(d for d, _ in mine)
    assert checked > 300
    assert out_of_file_order > 0  # the corpus does tell the two orders apart


@pytest.mark.parametrize("grouped", [True, False])
def test_placeholders_do_not_depend_on_row_order(physionet_dir, physionet_placeholders, tmp_path,
                                                 grouped):  # fmt: skip
    want, manifest = physionet_placeholders
    documents, gold = read_physionet(physionet_dir)
    rng = np.random.default_rng(3)
    if grouped:  # patients in a random order, each one's notes together in a random order
        rows: dict[str, list[int]] = {}
        for i, p in enumerate(documents["patient_id"].to_pylist()):
            rows.setdefault(p, []).append(i)
        order = [i for p in rng.permutation(sorted(rows)).tolist()
                 for i in rng.permutation(rows[p]).tolist()]  # fmt: skip
    else:
        order = rng.permutation(documents.num_rows).tolist()
    gold = gold.take(rng.permutation(gold.num_rows))
    m = placeholders(tmp_path / "ph", docs=documents.take(order), spans=gold)
    got = pq.read_table(tmp_path / "ph")
    assert got["doc_id"].to_pylist() == documents.take(order)["doc_id"].to_pylist()
    assert _by_doc(got) == _by_doc(want)
    assert {k: m[k] for k in _COUNTS} == {k: manifest[k] for k in _COUNTS}


@pytest.mark.parametrize("batch_rows", [1, 13, 100_000])
def test_placeholders_do_not_depend_on_batch_size(physionet_dir, physionet_placeholders,
                                                  tmp_path, batch_rows):  # fmt: skip
    want, manifest = physionet_placeholders
    stage = PlaceholdersStage()
    stage.batch_rows = batch_rows
    m = run_stage(stage, {"corpus": physionet_dir}, tmp_path / "ph")
    assert pq.read_table(tmp_path / "ph").equals(want)
    assert {k: m[k] for k in _COUNTS} == {k: manifest[k] for k in _COUNTS}


def test_the_placeholders_batch_function_takes_any_subset_of_rows(
    physionet_dir, physionet_placeholders
):
    # One reduce (the ids), then the stage's splice (to_placeholders with the corpus's id
    # table) over the notes shuffled and cut anywhere: each note comes out as the whole run
    # wrote it, and the counts add up to the run's.
    want, manifest = physionet_placeholders
    stage = PlaceholdersStage()
    ctx = Context(
        stage,
        {"corpus": physionet_dir, "docs": None, "spans": None},
        {},
        Path("x"),
        engine=LocalEngine(),
    )
    state = stage.reduce(ctx)
    rng = np.random.default_rng(5)
    documents = state.documents.take(rng.permutation(state.documents.num_rows))
    got: dict[str, dict] = {}
    stats = Stats()
    at = 0
    while at < documents.num_rows:
        k = int(rng.integers(1, 400))
        for batch in documents.slice(at, k).to_batches():
            out, counts = to_placeholders(batch, state.spans, ids=state.ids)
            counts.pop("spans_without_document")
            stats.merge(counts)
            got.update(_by_doc(out))
        at += k
    assert got == _by_doc(want)
    for key in ("spans", "placeholders", "merged", "by_category"):
        assert stats[key] == manifest[key], key
