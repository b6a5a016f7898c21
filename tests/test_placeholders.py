"""The MIMIC-III placeholder grammar and the surrogate kind of each category (issue 4)."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

import phisieve
from phisieve.phi.placeholders import find, kind_of, report, sex_of


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
