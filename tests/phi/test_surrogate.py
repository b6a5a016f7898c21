"""The surrogate stage: keyed, consistent surrogates for every placeholder form, date shifts,
gold spans, the secret, and the round trip on the real PhysioNet corpus."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json
import os
import random
import re
import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phisieve import _core
from phisieve.api import placeholders, surrogate
from phisieve.cli import main
from phisieve.errors import ConfigError, InputError
from phisieve.io.annotated import PHYSIONET_LABELS, read_physionet_gold
from phisieve.io.dataset import read_manifest, side_file
from phisieve.phi.gold import CATEGORY_OF_KIND, placeholder_text, to_placeholders
from phisieve.phi.placeholders import KINDS, find
from phisieve.phi.surrogate import SurrogateFiller, date_anchors, read_secret
from phisieve.pipeline.engine import LocalEngine

# Secrets as `python -c "import secrets; print(secrets.token_hex(32))"` writes them.
SECRET = b"39681a57149459b6124cc3210de7c47180499cac79413be75eb3144c388a4d11"
OTHER_SECRET = b"a7c4839fa86ae7343466baddabffcd6feafefea66c23531b259dd0fd05072963"


def docs(texts, patients=None):
    patients = patients or ["p1"] * len(texts)
    return pa.table(
        {
            "doc_id": [f"d{i}" for i in range(len(texts))],
            "patient_id": patients,
            "text": pa.array(texts, pa.large_string()),
        }
    )


def anchors_of(texts, patients=None):
    table = docs(texts, patients)
    return dict(date_anchors(find(table.column("text")), table.column("patient_id")).iter_rows())


def fill(texts, patients=None, secret=SECRET, anchors=None, **kw):
    table = docs(texts, patients)
    anchors = anchors_of(texts, patients) if anchors is None else anchors
    filler = SurrogateFiller(secret, anchors=anchors, **kw)
    out = filler.fill(table)
    return out.column("text").to_pylist(), out.column("spans").to_pylist(), filler


def surrogates_of(texts, patients=None, **kw):
    """Per text: [(surrogate text, label)] in order."""
    new, spans, _ = fill(texts, patients, **kw)
    return [
        [(t[s["start"] : s["end"]], s["label"]) for s in sp]
        for t, sp in zip(new, spans, strict=True)
    ]


def faker_list(name, locale="en_US"):
    from faker import Faker

    for p in Faker(locale).factories[0].providers:
        if getattr(p, name, None):
            return set(getattr(p, name))
    raise AssertionError(name)


# --------------------------------------------------------------------------------------------
# Every form of DESIGN.md §7


def test_every_form_of_design_7_is_filled_with_its_kind():
    text = (
        "[**Known lastname 4015**] at [**Hospital1 18**] on [**2149-3-4**], seen [**9/2167**]; "
        "call [**Telephone/Fax (1) 123**]; age [**Age over 90 **]; by [** **]. "
        "[**Female First Name (un) 7**] [**Male First Name (un) 8**] [**Name (NI) 9**] "
        "[**3-4**] [**3/4**] [**2150**] [**Month (only) 5**] [**Street Address(1) 6**]"
    )
    (got,) = surrogates_of([text])
    labels = [label for _, label in got]
    assert labels == [
        "last_name", "hospital", "date", "date", "phone", "age_over_90", "empty",
        "first_name", "first_name", "full_name", "date", "date", "date", "month",
        "street_address",
    ]  # fmt: skip
    values = [v for v, _ in got]
    assert values[0] in faker_list("last_names")
    assert re.fullmatch(r"\w+ (Hospital|.*Center|.*Hospital)", values[1])
    assert 90 <= int(values[5]) <= 104
    assert values[6] in faker_list("last_names")
    assert values[7] in faker_list("first_names_female")
    assert values[8] in faker_list("first_names_male")
    first, last = values[9].split(" ")
    assert first in faker_list("first_names") and last in faker_list("last_names")
    assert re.fullmatch(r"\d{1,2}/\d{1,2}", values[10]) and re.fullmatch(
        r"\d{1,2}/\d{1,2}", values[11]
    )
    assert re.fullmatch(r"\d{4}", values[12])
    assert values[13] in {dt.date(2000, m, 1).strftime("%B") for m in range(1, 13)}
    assert all("[" not in v and "*" not in v for v in values)


@pytest.mark.parametrize("kind", sorted(set(CATEGORY_OF_KIND) - {"empty", "unknown"}))
def test_every_kind_has_a_category_and_a_surrogate(kind):
    placeholder = placeholder_text(kind, "", 3)
    found = find([placeholder])
    assert found.column("kind").to_pylist() == [kind if kind in KINDS else None]
    ((value, label),) = surrogates_of([f"x {placeholder} y"])[0]
    assert label == kind and value.strip() and "[**" not in value


def test_dates_keep_intervals_weekdays_and_land_in_the_years():
    texts = ["adm [**2149-3-4**], dc [**2149-3-11**]", "f/u [**2151-12-31**] and [**2149-3-4**]"]
    (a, b), (c, d) = surrogates_of(texts, ["p", "p"], years=(2000, 2005))
    dates = [a[0], b[0], c[0], d[0]]
    parsed = [_parse(x) for x in dates]
    src = [dt.date(2149, 3, 4), dt.date(2149, 3, 11), dt.date(2151, 12, 31), dt.date(2149, 3, 4)]
    shifts = {(p - s).days for p, s in zip(parsed, src, strict=True)}
    assert len(shifts) == 1 and shifts.pop() % 7 == 0  # one shift per patient, whole weeks
    assert a[0] == d[0]
    assert 2000 - 1 <= parsed[2].year <= 2005 + 1  # the latest year lands in the range


def _parse(s):
    for f in ("%m/%d/%Y", "%Y-%m-%d"):
        try:
            return dt.datetime.strptime(s, f).date()
        except ValueError:
            pass
    raise AssertionError(s)


def test_year_and_month_forms_follow_the_patients_shift():
    (got,) = surrogates_of(["[**2149-7-2**] [**2149**] [**7/2149**] [**7-2**]"])
    full, year, month_year, month_day = (v for v, _ in got)
    d = _parse(full)
    # A lone year is read as July 2nd, a month/year as the 15th: both move with the shift.
    mid = d + dt.timedelta(days=13)
    assert year == str(d.year) and month_year == f"{mid.month}/{mid.year}"
    assert month_day.count("/") == 1


def test_a_typo_year_does_not_anchor_the_shift():
    (got,) = surrogates_of(["[**2149-3-4**] [**2999-1-1**]"], years=(2001, 2001))
    assert _parse(got[0][0]).year in (2000, 2001, 2002)


def test_calendar_overflow_dates_are_clamped_not_failed():
    text = "[**2149-2-30**] [**2148-2-29**] [**2-29**] [**2149-0-0**] [**0-0**] [**0/2149**]"
    (got,) = surrogates_of([text])
    assert [label for _, label in got] == ["date"] * 6
    assert all(re.fullmatch(r"[\d/-]+", v) for v, _ in got)


def test_a_typo_year_takes_the_patients_era_not_an_impossible_year():
    (got,) = surrogates_of(["[**2149-3-4**] [**0100-1-1**] [**0100**] [**9999**]"])
    years = [int(re.findall(r"\d{4}", v)[0]) for v, _ in got]
    assert all(1990 <= y <= 2020 for y in years), years


@pytest.mark.parametrize("years", [(2019, 2020), (2000, 2000)])
def test_dates_and_named_years_stay_within_the_years(years):
    texts = [f"[**2149-12-31**] [**2149-1-1**] [**Year (4 digits) {i}**]" for i in range(30)]
    got = surrogates_of(texts, [f"p{i}" for i in range(30)], years=years)
    lo, hi = years
    for (latest, _), (earliest, _), (named, _) in got:
        assert lo <= _parse(latest).year <= hi and _parse(earliest).year >= lo - 1
        assert lo <= int(named) <= hi


def test_the_qualifier_is_part_of_the_key():
    a = "[**First Name (NI) 3**]"
    b = "[**First Name (female) 3**]"
    alone = surrogates_of([a], ["p"])[0][0][0]
    together = surrogates_of([b + " " + a], ["p"])[0]
    assert together[1][0] == alone  # not changed by another placeholder in the batch
    assert together[0][0] in faker_list("first_names_female")


def test_the_secret_is_not_in_the_fillers_repr():
    assert SECRET.decode() not in repr(SurrogateFiller(SECRET))


@pytest.mark.parametrize("locale", ["en_MS", "en_PH", "fr_FR", "ja_JP"])
def test_every_faker_locale_fills_or_is_refused_up_front(locale):
    try:
        filler = SurrogateFiller(SECRET, locale=locale)
    except ConfigError as e:
        assert locale in str(e)
        return
    out = filler.fill(
        docs(["[**Known lastname 1**] [**Location (un) 2**] [**Telephone/Fax (1) 3**]"])
    )
    assert len(out.column("spans").to_pylist()[0]) == 3


# --------------------------------------------------------------------------------------------
# Consistency, keys and the secret


PIECES = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="[]*"), max_size=6),
    st.sampled_from(["[", "*", "]", "**", "[*"]),
    st.sampled_from(
        [
            "[**Known lastname 12**]",
            "[**Known lastname 13**]",
            "[**Known firstname 12**]",
            "[**Hospital1 18**]",
            "[**Location (un) 4**]",
            "[**Telephone/Fax (1) 5**]",
            "[**2149-3-4**]",
            "[**2150-1-1**]",
            "[**Age over 90 **]",
            "[** **]",
            "[**Strange Category 3**]",
            "[**First Name (NI) 3**]",
            "[**First Name (female) 3**]",
            "[**2149-0-0**]",
            "[**",
            "**]",
        ]
    ),
    st.sampled_from(["é", "😀", "\n", " "]),
)


@settings(max_examples=60, deadline=None)
@given(
    notes=st.lists(
        st.tuples(st.sampled_from(["p1", "p2", "p3"]), st.lists(PIECES, max_size=10)),
        min_size=1,
        max_size=6,
    ),
    split=st.integers(0, 6),
)
def test_spans_point_at_surrogates_and_are_consistent(notes, split):
    patients = [p for p, _ in notes]
    texts = ["".join(parts) for _, parts in notes]
    new, spans, _filler = fill(texts, patients)
    # Spans point exactly at the surrogates: the text around them is the original text.
    for src, out, sp in zip(texts, new, spans, strict=True):
        assert "[**" not in out and "**]" not in out
        rebuilt = _placeholders_back(out, sp)
        assert rebuilt == _markers_removed(src)
    # Same (patient, placeholder) -> same surrogate, whichever note it is in.
    seen: dict[tuple[str, str], str] = {}
    for p, src, out, sp in zip(patients, texts, new, spans, strict=True):
        found = find([src])
        full = [
            src[s:e]
            for s, e, form in zip(
                found.column("start").to_pylist(),
                found.column("end").to_pylist(),
                found.column("form").to_pylist(),
                strict=True,
            )
            if form not in ("unterminated", "stray_close")
        ]
        assert len(full) == len(sp)
        for placeholder, s in zip(full, sp, strict=True):
            value = out[s["start"] : s["end"]]
            assert seen.setdefault((p, placeholder), value) == value
    # Independent of batch boundaries and order.
    # (the date anchors come from the whole input, as the surrogate stage's first pass does)
    anchors = anchors_of(texts, patients)
    a = fill(texts[:split], patients[:split], anchors=anchors)[0] if split else []
    b = fill(texts[split:], patients[split:], anchors=anchors)[0] if split < len(texts) else []
    assert a + b == new
    assert fill(texts[::-1], patients[::-1])[0] == new[::-1]


def _placeholders_back(out, spans):
    """The output with each surrogate replaced by a marker <label>."""
    pieces, at = [], 0
    for s in spans:
        pieces += [out[at : s["start"]], f"<{s['label']}>"]
        at = s["end"]
    return "".join(pieces) + out[at:]


def _markers_removed(src):
    """The source with placeholders as <kind> markers and stray markers as spaces."""
    found = find([src])
    pieces, at = [], 0
    for s, e, kind, form in zip(
        found.column("start").to_pylist(),
        found.column("end").to_pylist(),
        found.column("kind").to_pylist(),
        found.column("form").to_pylist(),
        strict=True,
    ):
        pieces.append(src[at:s])
        pieces.append(
            f"<{kind or 'unknown'}>" if form not in ("unterminated", "stray_close") else " "
        )
        at = e
    return "".join(pieces) + src[at:]


def reference_draw(secret, parts):
    mac = hmac.new(secret, digestmod=hashlib.sha256)
    for p in parts:
        if p is None:
            mac.update(struct.pack("<Q", 2**64 - 1))
        else:
            b = p.encode()
            mac.update(struct.pack("<Q", len(b)) + b)
    return int.from_bytes(mac.digest()[:8], "big")


@settings(max_examples=50, deadline=None)
@given(
    secret=st.binary(min_size=1, max_size=80),
    rows=st.lists(
        st.tuples(st.none() | st.text(max_size=5), st.none() | st.text(max_size=5)), max_size=20
    ),
)
def test_keyed_draws_are_hmac_sha256_of_framed_parts(secret, rows):
    rows = [
        tuple(None if v is None else v.encode("utf-8", "replace").decode() for v in r) for r in rows
    ]
    a = pa.array([r[0] for r in rows], pa.string())
    b = pa.array([r[1] for r in rows], pa.large_string())
    got = _core.keyed_draws(secret, [a, b]).to_pylist()
    assert got == [reference_draw(secret, r) for r in rows]


def test_the_secret_keys_the_mapping():
    texts = ["[**Known lastname 7**] [**Hospital1 18**] [**2149-3-4**]"] * 40
    patients = [f"p{i}" for i in range(40)]
    one = fill(texts, patients)[0]
    assert fill(texts, patients)[0] == one  # same key, same surrogates
    other = fill(texts, patients, secret=OTHER_SECRET)[0]
    assert sum(x != y for x, y in zip(one, other, strict=True)) >= 38
    # The patient is part of the key: the same placeholder differs across patients.
    assert len({t.split(" ")[0] for t in one}) > 20


def test_read_secret_rejects_short_missing_and_inside_output(tmp_path):
    key = tmp_path / "key.txt"
    key.write_bytes(SECRET + b"\n")
    assert read_secret(key) == SECRET
    (tmp_path / "short").write_bytes(b"abc\n")
    with pytest.raises(ConfigError, match="at least 32"):
        read_secret(tmp_path / "short")
    with pytest.raises(ConfigError, match="cannot read"):
        read_secret(tmp_path / "missing")
    with pytest.raises(ConfigError, match="inside the output"):
        read_secret(key, out=tmp_path)
    with pytest.raises(ConfigError):
        SurrogateFiller(b"short")


def test_the_secret_is_never_written_with_the_output(tmp_path, key_file):
    secret = bytes.fromhex("de7ad65732c3c5106c7b192a8abe2066a36dc3ca0316f198d8a2a25b8dba4751")
    out = tmp_path / "out"
    m = surrogate(
        docs(["Pt [**Known lastname 1**] on [**2149-3-4**]."]), out, secret_file=key_file(secret)
    )
    assert m["filled"] == 2 and m["faker_version"] and m["locale"] == "en_US"
    data = _written(tmp_path)  # the output and whatever the stage wrote beside it
    assert data and secret not in data and secret.hex().encode() not in data


# Weak secrets: short, repeated, a word padded, a run, an English phrase.
WEAK_SECRETS = [
    b"a" * 16,
    b"a" * 32,
    b"ab" * 16,
    b"deadbeef" * 8,
    b"Tr0ub4dor&3" * 3,
    b"password" + b"0" * 24,
    b"supersecretpassword".ljust(32, b"!"),
    b"correcthorse".ljust(40, b"x"),
    b"abcdefghijklmnopqrstuvwxyz012345",
    b"a test secret of 32 bytes.......",
    b"benchmark secret of 32 bytes....",
    random.Random(7).randbytes(31),
]


@pytest.mark.parametrize("weak", WEAK_SECRETS, ids=range(len(WEAK_SECRETS)))
def test_weak_secrets_are_refused_with_the_command_that_makes_one(weak, tmp_path):
    key = tmp_path / "key"
    key.write_bytes(weak)
    calls = (
        lambda: read_secret(key),
        lambda: SurrogateFiller(weak),
        lambda: surrogate(docs(["[**Known lastname 1**]"]), tmp_path / "out", secret_file=key),
    )
    for call in calls:
        with pytest.raises(ConfigError, match=r"secrets\.token_hex\(32\)") as e:
            call()
        assert weak.decode("latin-1")[:12] not in str(e.value)  # never the secret itself
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_random_secrets_pass_as_bytes_hex_and_base64(tmp_path):
    rng = random.Random(20240501)
    raw = [rng.randbytes(32) for _ in range(2000)] + [os.urandom(32) for _ in range(5)]
    for secret in raw:
        SurrogateFiller(secret)  # the API takes raw bytes
    key = tmp_path / "key"
    for secret in raw[:300]:
        for text in (secret.hex(), base64.b64encode(secret).decode()):
            key.write_text(text + "\n")  # as `print(secrets.token_hex(32))` writes it
            assert read_secret(key) == text.encode()


# --------------------------------------------------------------------------------------------
# Impossible dates: the shape makes a date, the calendar decides how it is filled

IMPOSSIBLE_DATES = {
    # placeholder: the calendar date it is read as before the patient's shift
    "[**2150-13-45**]": "[**2150-12-31**]",
    "[**2150-2-30**]": "[**2150-2-28**]",
    "[**2150-0-0**]": "[**2150-1-1**]",
    "[**2150-123-4567**]": "[**2150-12-31**]",
    "[**13-45**]": "[**12-31**]",
    "[**0-0**]": "[**1-1**]",
    "[**99/99**]": "[**12/31**]",
    "[**13/2150**]": "[**12/2150**]",
    "[**0/2150**]": "[**1/2150**]",
}


@pytest.mark.parametrize("keep_unfilled", [False, True])
def test_impossible_dates_become_dates_of_the_patients_shift(keep_unfilled):
    texts = ["[**2150-6-1**] " + " ".join(IMPOSSIBLE_DATES), " ".join(IMPOSSIBLE_DATES.values())]
    (bad, good) = surrogates_of(texts, ["p", "p"], keep_unfilled=keep_unfilled)
    assert [label for _, label in bad] == ["date"] * (1 + len(IMPOSSIBLE_DATES))
    # The same surrogate as the calendar date it is clamped to: the patient's shift.
    assert [v for v, _ in bad[1:]] == [v for v, _ in good]
    assert all(_is_calendar_date(v) for v, _ in bad)
    _, _, filler = fill(texts[:1], keep_unfilled=keep_unfilled)
    s = filler.summary()
    assert s["by_form"] == {"date": 1 + len(IMPOSSIBLE_DATES)}
    assert s["unfilled"] == 0 and s["unknown"]["categories"] == 0
    assert s["dates_clamped"] == len(IMPOSSIBLE_DATES)


def _is_calendar_date(value):
    """Whether ``value`` is a real date as the surrogates write them (m/d read in 2000)."""
    for form in ("%m/%d/%Y", "%Y-%m-%d", "%m/%Y", "%Y"):
        try:
            dt.datetime.strptime(value, form)
            return True
        except ValueError:
            pass
    return bool(re.fullmatch(r"\d{1,2}/\d{1,2}", value)) and _is_calendar_date(f"{value}/2000")


def test_an_impossible_date_anchors_the_shift_like_any_date():
    (got,) = surrogates_of(["seen [**2150-13-45**], again [**2150-2-30**]"], years=(2001, 2001))
    assert [label for _, label in got] == ["date", "date"]
    assert all(_parse(v).year in (2000, 2001) for v, _ in got)  # 2150 moved into the years


def test_dates_written_in_other_shapes_are_dates_not_names():
    (got,) = surrogates_of(["[**3/4/2150**] [**3-2150**] [**2150-3**] [**2150/3/4**]"])
    assert [label for _, label in got] == ["date"] * 4
    full, month_year, year_month, full2 = (v for v, _ in got)
    assert _parse(full) == _parse(full2)
    assert month_year == year_month and re.fullmatch(r"\d{1,2}/\d{4}", month_year)


def test_the_manifest_counts_clamped_dates(tmp_path, key_file):
    texts = ["[**2150-13-45**] [**2150-3-4**] [**2-30**]"]
    m = surrogate(docs(texts), tmp_path / "o", secret_file=key_file(SECRET))
    assert m["dates_clamped"] == 2 and m["by_kind"] == {"date": 3}
    assert read_manifest(tmp_path / "o")["dates_clamped"] == 2


# --------------------------------------------------------------------------------------------
# The report counts unknown categories; it names them only when asked

UNKNOWN_NOTES = [
    ("p1", "a [**Strange Thing 3**] b [**Strange Thing 4**] [**Zebediah Quux**]"),
    ("p2", "c [**Strange Thing 9**]"),
]


def _written(root):
    return b"".join(f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file())


def test_the_report_counts_unknown_categories_without_their_text(tmp_path, key_file):
    patients, texts = zip(*UNKNOWN_NOTES, strict=True)
    m = surrogate(docs(list(texts), list(patients)), tmp_path / "o", secret_file=key_file(SECRET))
    assert m["unknown"] == {
        "categories": 2,
        "placeholders": 4,
        "single_patient_categories": 1,
        "single_patient_placeholders": 1,
    }
    assert "unknown_categories" not in m and m["report_unknown"] is False
    manifest = read_manifest(tmp_path / "o")
    assert manifest["unknown"] == m["unknown"]
    for text in ("Strange", "Zebediah", "Quux"):
        assert text not in json.dumps(m) and text not in json.dumps(manifest)
        assert text.encode() not in _written(tmp_path)  # nothing written holds it
    _, _, filler = fill(list(texts), list(patients))
    assert "Strange" not in repr(filler) and "Strange" not in str(filler.summary())


def test_report_unknown_names_only_categories_two_patients_use(tmp_path, key_file):
    patients, texts = zip(*UNKNOWN_NOTES, strict=True)
    m = surrogate(
        docs(list(texts), list(patients)),
        tmp_path / "o",
        secret_file=key_file(SECRET),
        report_unknown_categories=True,
    )
    assert m["unknown_categories"] == {"Strange Thing": 3}
    assert m["report_unknown"] is True and m["unknown"]["single_patient_categories"] == 1
    assert read_manifest(tmp_path / "o")["unknown_categories"] == {"Strange Thing": 3}
    assert "Zebediah" not in json.dumps(m)  # one patient's category: never named


def test_cli_names_unknown_categories_only_with_the_flag(tmp_path, capsys):
    patients, texts = zip(*UNKNOWN_NOTES, strict=True)
    pq.write_table(docs(list(texts), list(patients)), tmp_path / "in.parquet")
    key = tmp_path / "key"
    key.write_bytes(SECRET + b"\n")
    base = ["surrogate", str(tmp_path / "in.parquet"), "--secret-file", str(key), "-q"]
    main([*base, "--out", str(tmp_path / "a")])
    printed = capsys.readouterr().out
    assert "2 unknown categories" in printed and "--report-unknown-categories" in printed
    assert "Strange" not in printed and "Zebediah" not in printed
    main([*base, "--out", str(tmp_path / "b"), "--report-unknown-categories"])
    printed = capsys.readouterr().out
    assert "'Strange Thing': 3" in printed and "Zebediah" not in printed
    assert read_manifest(tmp_path / "b")["unknown_categories"] == {"Strange Thing": 3}


# --------------------------------------------------------------------------------------------
# Unknown categories, malformed markers, bad input


def test_unknown_categories_are_reported_and_filled_or_kept():
    texts = ["a [**Strange Thing 3**] b [**Strange Thing 3**] [**Other One**] [**x **]] c [**"]
    new, spans, filler = fill(
        [*texts, "[**Strange Thing 9**] [**x **]"], ["p1", "p2"], report_unknown=True
    )
    s = filler.summary()
    # Named once two patients use them; a category of one patient may be PHI: only counted.
    assert s["unknown_categories"] == {"Strange Thing": 3, "x": 2}
    assert s["unknown"]["single_patient_categories"] == 1
    assert s["unknown"]["single_patient_placeholders"] == 1
    assert s["unfilled"] == 0 and s["markers_removed"] == 1
    assert [sp["label"] for sp in spans[0]] == ["unknown", "unknown", "unknown", "unknown"]
    assert "[**" not in new[0] and "**]" not in new[0] and new[0].endswith(" c  ")
    kept, kept_spans, f2 = fill(texts, keep_unfilled=True)
    assert kept[0].count("[**Strange Thing 3**]") == 2 and kept[0].endswith("c [**")
    assert kept_spans[0] == []
    assert f2.summary()["unfilled"] == 5


def test_bad_input_is_named_without_text():
    with pytest.raises(InputError, match="text"):
        SurrogateFiller(SECRET).fill(pa.table({"patient_id": ["p"], "doc_id": ["d"]}))
    table = docs(["[**Known lastname 1**]"]).append_column(
        "spans", pa.array([[]], pa.list_(pa.struct([("start", pa.int32())])))
    )
    with pytest.raises(InputError, match="spans"):
        SurrogateFiller(SECRET).fill(table)
    nulls = pa.table({"patient_id": ["p", None], "text": ["a", "[**Known lastname 1**]"]})
    with pytest.raises(InputError, match="row 1"):
        SurrogateFiller(SECRET).fill(nulls)
    with pytest.raises(ConfigError, match="locale"):
        SurrogateFiller(SECRET, locale="xx_NOPE")


def test_empty_null_and_enormous_notes():
    big = ("word [**Known lastname 7**] é " * 100_000) + "[**2149-3-4**]"
    table = pa.table(
        {
            "doc_id": ["a", "b", "c"],
            "patient_id": ["p", "p", "q"],
            "text": pa.array(["", None, big], pa.large_string()),
        }
    )
    out = SurrogateFiller(SECRET).fill(table)
    texts = out.column("text").to_pylist()
    assert texts[0] == "" and texts[1] is None
    spans = out.column("spans").to_pylist()
    assert spans[0] == [] and spans[1] == [] and len(spans[2]) == 100_001
    names = {texts[2][s["start"] : s["end"]] for s in spans[2][:-1]}
    assert len(names) == 1 and "[**" not in texts[2]


def test_other_locales():
    (got,) = surrogates_of(
        ["[**Female First Name (un) 1**] [**Known lastname 2**]"], locale="de_DE"
    )
    assert got[0][0] in faker_list("first_names_female", "de_DE")
    assert got[1][0] in faker_list("last_names", "de_DE")


@settings(max_examples=80, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from("ab é😀\n"), max_size=30),
    cuts=st.lists(
        st.tuples(st.integers(0, 30), st.integers(0, 4), st.text(max_size=4)), max_size=5
    ),
)
def test_splice_matches_a_python_reference(text, cuts):
    edits, at = [], 0
    for start, length, with_ in sorted(cuts):
        start = max(start, at)
        end = min(start + length, len(text))
        if start > len(text):
            break
        with_ = with_.encode("utf-8", "replace").decode()
        edits.append((start, end, with_))
        at = end
    expected, placed, shift = text, [], 0
    for s, e, w in edits:
        expected = expected[: s + shift] + w + expected[e + shift :]
        placed.append((s + shift, s + shift + len(w)))
        shift += len(w) - (e - s)
    new, starts, ends = _core.splice(
        pa.array([text]),
        pa.array([0] * len(edits), pa.uint64()),
        pa.array([s for s, _, _ in edits], pa.int32()),
        pa.array([e for _, e, _ in edits], pa.int32()),
        pa.array([w for _, _, w in edits], pa.string()),
    )
    assert new.to_pylist() == [expected]
    assert list(zip(starts.to_pylist(), ends.to_pylist(), strict=True)) == placed


def test_splice_rejects_overlaps_and_out_of_range_edits():
    args = (pa.array(["abc"]), pa.array([0, 0], pa.uint64()))
    with pytest.raises(ConfigError, match="overlaps"):
        _core.splice(
            *args, pa.array([0, 1], pa.int32()), pa.array([2, 3], pa.int32()), pa.array(["x", "y"])
        )
    with pytest.raises(ConfigError, match="beyond"):
        _core.splice(
            pa.array(["abc"]),
            pa.array([0], pa.uint64()),
            pa.array([1], pa.int32()),
            pa.array([9], pa.int32()),
            pa.array(["x"]),
        )


# --------------------------------------------------------------------------------------------
# Reverse mode and the round trip on the real corpus


def test_physionet_labels_become_placeholders():
    cases = {
        ("Age", "98"): "[**Age over 90 **]",
        ("Date", "7/22"): "[**7/22**]",
        ("Date", "10/12/95"): "[**1995-10-12**]",
        ("Date", "8/88"): "[**8/1988**]",
        ("Date", "July"): "[**Month (only) 4**]",
        ("Date", "14th"): "[**Month/Day 4**]",
        ("DateYear", "92"): "[**1992**]",
        ("DateYear", "1992"): "[**1992**]",
        ("Location", "CALVERT"): "[**Location (un) 4**]",
        ("Phone", "301 944-5032"): "[**Telephone/Fax (1) 4**]",
        ("Other", "rg17"): "[**Numeric Identifier 4**]",
        ("PTNameInitial", "S."): "[**Name Initial (PRE) 4**]",
    }
    for (label, text), expected in cases.items():
        assert placeholder_text(label, text, 4) == expected, (label, text)
    assert set(PHYSIONET_LABELS) >= {label for label, _ in cases}
    with pytest.raises(InputError, match="label"):
        placeholder_text("NoSuchLabel", "x", 1)


def test_name_runs_get_first_and_last_names():
    text = "Dr. John Q. Smith saw pt; wife Mary called; Dr. Jones aware"
    words = [("John", "HCPName"), ("Q.", "HCPName"), ("Smith", "HCPName")]
    words += [("Mary", "RelativeProxyName"), ("Jones", "HCPName")]
    spans = [(text.index(w), text.index(w) + len(w), label) for w, label in words]
    gold = pa.table(
        {
            "doc_id": ["d0"],
            "spans": [
                [
                    {"start": s, "end": e, "label": la, "source": "gold", "score": 1.0}
                    for s, e, la in spans
                ]
            ],
        }
    )
    out, report = to_placeholders(docs([text]), gold)
    assert out.column("text").to_pylist() == [
        "Dr. [**First Name (STitle) 1**] [**Initials (NamePattern4) 2**] "
        "[**Last Name (STitle) 3**] saw pt; wife [**First Name 4**] called; "
        "Dr. [**Last Name (STitle) 5**] aware"
    ]
    assert report["placeholders"] == 5


def test_placeholder_ids_count_up_per_patient_and_repeat_for_equal_text():
    texts = ["Pt Smith here", "pt SMITH and Jones", "Pt Smith again"]
    words = [["Smith"], ["SMITH", "Jones"], ["Smith"]]

    def spans(text, ws):
        return [
            {"start": text.index(w), "end": text.index(w) + len(w), "label": "PTName",
             "source": "gold", "score": 1.0}
            for w in ws
        ]  # fmt: skip

    gold = pa.table(
        {
            "doc_id": ["d0", "d1", "d2"],
            "spans": [spans(t, w) for t, w in zip(texts, words, strict=True)],
        }
    )
    want = [
        "Pt [**Known lastname 1**] here",
        "pt [**Known lastname 1**] and [**Known lastname 2**]",
        "Pt [**Known lastname 1**] again",
    ]
    out, _ = to_placeholders(docs(texts, ["p", "p", "q"]), gold)
    assert out.column("text").to_pylist() == want
    # The ids count up over each patient's notes in doc_id order (d0, d1), not in the order
    # the rows come in: the notes reversed get the same placeholders.
    out, _ = to_placeholders(docs(texts, ["p", "p", "q"])[::-1], gold[::-1])
    assert out.column("text").to_pylist() == want[::-1]


def test_read_physionet_gold_names_the_bad_line(tmp_path):
    bad = tmp_path / "id-phi.phrase"
    bad.write_text("1 1 0 4 PTName John\n1 1 x 9 PTName Secret Name\n")
    with pytest.raises(InputError, match="row 1") as e:
        read_physionet_gold(bad)
    assert "Secret" not in str(e.value)


def test_round_trip_covers_every_gold_span(physionet_dir, tmp_path, key_file):
    ph = tmp_path / "ph"
    m = placeholders(ph, corpus=physionet_dir)
    gold = read_physionet_gold(physionet_dir)
    assert m["spans"] == sum(len(s) for s in gold.column("spans").to_pylist()) == 999
    assert m["spans_without_document"] == 0
    out = tmp_path / "phi"
    s = surrogate(ph, out, secret_file=key_file(SECRET))
    assert s["placeholders"] == m["placeholders"] == s["filled"] and s["unknown"]["categories"] == 0

    original = {r["doc_id"]: r["text"] for r in phisieve_docs(physionet_dir)}
    gold_by_doc = dict(
        zip(gold.column("doc_id").to_pylist(), gold.column("spans").to_pylist(), strict=True)
    )
    filled = pq.read_table(out)
    checked = 0
    for doc, text, spans in zip(
        *(filled.column(c).to_pylist() for c in ("doc_id", "text", "spans")), strict=True
    ):
        assert "[**" not in text
        merged = _union(gold_by_doc.get(doc, []))
        assert len(spans) == len(merged)
        # Outside the spans, the filled text is the original text: every gold span (and
        # nothing else) was replaced by exactly one surrogate span.
        assert _outside(text, spans) == _outside(original[doc], merged)
        checked += len(gold_by_doc.get(doc, []))
    assert checked == 999  # every gold span's document went through the check


def phisieve_docs(corpus):
    from phisieve import read_documents

    for batch, _ in read_documents(corpus / "id.text", "physionet"):
        yield from batch.to_pylist()


def _union(spans):
    out = []
    for s in sorted(spans, key=lambda x: (x["start"], -x["end"])):
        if out and s["start"] < out[-1]["end"]:
            out[-1] = {**out[-1], "end": max(out[-1]["end"], s["end"])}
        else:
            out.append(dict(s))
    return out


def _outside(text, spans):
    pieces, at = [], 0
    for s in spans:
        pieces.append(text[at : s["start"]])
        at = s["end"]
    return [*pieces, text[at:]]


def test_cli_surrogate_and_placeholders(physionet_dir, tmp_path, capsys):
    key = tmp_path / "key.txt"
    key.write_bytes(b"35a100ade2cdfd2328ec2f780f99b5d0bcb43ab217376954f6faf3d983e00e3e\n")

    def run(out, secret_file, *extra):
        args = ["surrogate", str(tmp_path / "ph"), "--out", str(tmp_path / out)]
        main([*args, "--secret-file", str(secret_file), "-q", *extra])

    main(["placeholders", "--corpus", str(physionet_dir), "--out", str(tmp_path / "ph")])
    run("phi", key)
    printed = capsys.readouterr().out
    assert "998 placeholders" in printed and "998 filled" in printed
    for secret_file, extra in ((tmp_path / "nope", ()), (key, ("--years", "bad"))):
        with pytest.raises(SystemExit) as e:
            run("x", secret_file, *extra)
        assert e.value.code == 2
        assert "error:" in capsys.readouterr().err


def test_demo_fills_the_synthetic_corpus_and_knows_its_phi(tmp_path, capsys):
    main(["demo", "--out", str(tmp_path), "--patients", "12", "--no-audit"])
    printed = capsys.readouterr().out
    filled = pq.read_table(tmp_path / "notes_phi")
    assert not any("[**" in t for t in filled.column("text").to_pylist())
    spans = sum(len(s) for s in filled.column("spans").to_pylist())
    placeholders_in = find(pq.read_table(tmp_path / "notes").column("text")).num_rows
    assert spans == placeholders_in > 0
    # --no-audit stops after the index, which sees the detected spans.
    assert "indirect identifiers: terms used by fewer than k patients" in printed
    assert side_file(tmp_path / "terms", "blacklist.txt").exists()
    assert not (tmp_path / "splits").exists()


def test_surrogate_spans_go_back_to_placeholders_of_the_same_kinds(tmp_path, key_file):
    text = (
        "[**Known lastname 1**] [**Female First Name (un) 2**] [**Name (NI) 3**] at "
        "[**Hospital1 4**], [**2149-3-4**]-[**2149-3-8**] [**3/4**] [**9/2150**] [**2150**] "
        "[**Age over 90 **] [** **] [**Telephone/Fax (1) 5**] [**Weird 6**] [**Date range (1) 7**]"
    )
    surrogate(docs([text]), tmp_path / "phi", secret_file=key_file(SECRET))
    phi = pq.read_table(tmp_path / "phi")
    labels = [s["label"] for s in phi.column("spans").to_pylist()[0]]
    m = placeholders(tmp_path / "ph", docs=tmp_path / "phi", spans=tmp_path / "phi")
    assert m["placeholders"] == len(labels) == 14
    back = pq.read_table(tmp_path / "ph")
    assert "spans" not in back.schema.names
    again = find(back.column("text"))
    assert [k or "unknown" for k in again.column("kind").to_pylist()] == labels


# --------------------------------------------------------------------------------------------
# The surrogate stage's output does not depend on the order or batching of its rows: each
# document's output is a pure function of the secret, the reduce's date anchors and that
# document's row (the filler's counters only count, its Faker pool is a cache of keyed values).


@pytest.fixture(scope="module")
def synthetic():
    """A synthetic corpus (25 patients) and two notes of odd placeholders."""
    import phisieve

    table = pa.Table.from_batches(list(phisieve.synth_batches(patients=25, seed=2)))
    # With an unknown category that two patients use, an impossible date and stray markers.
    texts = [
        "[**Weird 6**] [**2150-13-45**] [**3/4**] [**Known lastname 1**] [** **] [**",
        "[**Weird 6**] [**Known lastname 1**] [**Age over 90 **] **]",
    ]
    extra = [
        {**table.slice(0, 1).to_pylist()[0], "doc_id": f"x{i}", "patient_id": f"p-x{i}",
         "text": t}
        for i, t in enumerate(texts)
    ]  # fmt: skip
    return pa.concat_tables([table, pa.Table.from_pylist(extra, schema=table.schema)])


def _stage_run(table, out, batch_rows=None):
    from phisieve.phi.stage import SurrogateStage
    from phisieve.pipeline.runner import run_stage

    stage = SurrogateStage(secret=SECRET, report_unknown_categories=True)
    if batch_rows is not None:
        stage.batch_rows = batch_rows
    manifest = run_stage(stage, {"docs": table}, out)
    return pq.read_table(out), {k: v for k, v in manifest.items() if k not in _RUN_KEYS}


_RUN_KEYS = {"inputs", "write_id"}  # the input table's identity, and the write's own id


def _rows_by_doc(table):
    return {r["doc_id"]: r for r in table.to_pylist()}


def _permuted(table, seed, grouped):
    rng = random.Random(seed)
    if not grouped:
        order = list(range(table.num_rows))
        rng.shuffle(order)
        return table.take(order)
    rows: dict[str, list[int]] = {}
    for i, p in enumerate(table.column("patient_id").to_pylist()):
        rows.setdefault(p, []).append(i)
    patients = sorted(rows)
    rng.shuffle(patients)
    order = []
    for p in patients:
        mine = list(rows[p])
        rng.shuffle(mine)
        order += mine
    return table.take(order)


@pytest.mark.parametrize("grouped", [True, False])
def test_surrogate_stage_does_not_depend_on_row_order(synthetic, tmp_path, grouped):
    want, counts = _stage_run(synthetic, tmp_path / "a")
    assert counts["filled"] > 300 and counts["unknown"]["categories"] == 1
    assert counts["unknown_categories"] == {"Weird": 2} and counts["dates_clamped"] >= 1
    for seed in range(2):
        counts_ = dict(counts)
        got, got_counts = _stage_run(_permuted(synthetic, seed, grouped), tmp_path / f"b{seed}")
        assert _rows_by_doc(got) == _rows_by_doc(want)
        # The same counts; only the files' digests differ (the rows are in the input's order).
        for key in ("files", "fingerprint"):
            del got_counts[key], counts_[key]
        assert got_counts == counts_


@pytest.mark.parametrize("batch_rows", [1, 7, 100_000])
def test_surrogate_stage_does_not_depend_on_batch_size(synthetic, tmp_path, batch_rows):
    want, counts = _stage_run(synthetic, tmp_path / "a")
    got, got_counts = _stage_run(synthetic, tmp_path / "b", batch_rows)
    assert got.equals(want)
    assert got_counts == counts  # the same files too: part files never depend on batching


def test_the_surrogate_batch_function_takes_any_subset_of_rows(synthetic, tmp_path):
    # One reduce (the date anchors); then the batch function over the rows shuffled and cut
    # anywhere, with the reduce's state carried over from batch to batch, or a fresh state per
    # batch (nothing an earlier batch left in the state changes a later batch's output).
    from phisieve.io.sources import open_source
    from phisieve.phi.stage import SurrogateStage
    from phisieve.pipeline.stage import Context
    from phisieve.pipeline.stats import Stats

    want, _ = _stage_run(synthetic, tmp_path / "a")
    stage = SurrogateStage(secret=SECRET)
    ctx = Context(
        stage, {"docs": open_source(synthetic, 5)}, {}, tmp_path / "x", engine=LocalEngine()
    )
    state = stage.reduce(ctx)
    shuffled = _permuted(synthetic, 7, grouped=False)
    rng = random.Random(7)
    carried: dict[str, dict] = {}
    fresh: dict[str, dict] = {}
    at = 0
    while at < shuffled.num_rows:
        k = rng.randint(1, 20)
        batch = shuffled.slice(at, k).combine_chunks().to_batches()[0]
        out = stage.map(batch, state, Stats())
        carried.update(_rows_by_doc(pa.Table.from_batches([out])))
        new = SurrogateFiller(SECRET, anchors=dict(state.anchors))
        fresh.update(_rows_by_doc(pa.Table.from_batches([new.fill(batch)])))
        at += k
    assert carried == fresh == _rows_by_doc(want)
