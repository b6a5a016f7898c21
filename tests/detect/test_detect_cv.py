"""Patient-level cross-validation of detection and deny lists grown from gold (issue 18)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from phisieve.cli import main
from phisieve.detect.cv import cross_validate, folds, summarise
from phisieve.detect.learnt import learn_deny_list, write_word_list
from phisieve.detect.run import evaluate, find_spans, read_word_list
from phisieve.errors import ConfigError
from phisieve.io.annotated import read_physionet
from phisieve.io.schema import spans_array


def annotated(notes: list[tuple[str, str, list[tuple[str, str]]]]) -> tuple[pa.Table, pa.Table]:
    """(patient, text, [(phrase, label)...]) -> documents and gold spans (first occurrence of
    each phrase after the previous one)."""
    rows, starts, ends, labels = [], [], [], []
    for i, (_, text, phi) in enumerate(notes):
        at = 0
        for phrase, label in phi:
            s = text.index(phrase, at)
            rows.append(i)
            starts.append(s)
            ends.append(s + len(phrase))
            labels.append(label)
            at = s + len(phrase)
    documents = pa.table(
        {
            "doc_id": [f"n{i}" for i in range(len(notes))],
            "patient_id": [p for p, _, _ in notes],
            "text": pa.array([t for _, t, _ in notes], pa.large_string()),
        }
    )
    n = len(notes)
    spans = spans_array(
        n,
        pa.array(rows, pa.int64()).to_numpy(),
        pa.array(starts, pa.int32()),
        pa.array(ends, pa.int32()),
        pa.array(labels, pa.string()),
        pa.array(["gold"] * len(rows), pa.string()),
        pa.array([1.0] * len(rows), pa.float32()),
    )
    return documents, pa.table({"doc_id": documents.column("doc_id"), "spans": spans})


def test_folds_are_balanced_keyed_and_independent_of_order():
    patients = [f"p{i}" for i in range(23)]
    a = folds(patients, 5, seed=1)
    assert sorted(a) == sorted(patients)
    sizes = sorted(list(a.values()).count(f) for f in range(5))
    assert sizes == [4, 4, 5, 5, 5]
    assert folds(list(reversed(patients)) + patients, 5, seed=1) == a
    assert folds(patients, 5, seed=2) != a
    with pytest.raises(ConfigError, match="at least 2 folds"):
        folds(patients, 1)
    with pytest.raises(ConfigError, match="at least 30 patients"):
        folds(patients, 30)


def test_learnt_deny_list_keeps_words_marked_in_most_of_their_uses():
    documents, gold = annotated(
        [
            ("a", "Seen by Quaxley. Plan per Quaxley.", [("Quaxley", "HCPName")]),
            (
                "b",
                "Quaxley and Mrs Brown at Calvert.",
                [("Quaxley", "HCPName"), ("Calvert", "Location")],
            ),
            ("b", "Brown sugar. Brown eyes.", []),
            ("c", "Mrs Brown called; a 12 Brown street.", [("Brown", "PTName")]),
        ]
    )
    # quaxley: 3 of 4 uses marked (rate 0.75); calvert 1/1; brown 1 of 5.
    assert learn_deny_list(documents, gold) == {"calvert": "LOCATION", "quaxley": "NAME"}
    assert learn_deny_list(documents, gold, min_rate=0.8) == {"calvert": "LOCATION"}
    assert learn_deny_list(documents, gold, min_patients=2) == {"quaxley": "NAME"}
    assert learn_deny_list(documents, gold, min_rate=0.2) == {
        "brown": "NAME",
        "calvert": "LOCATION",
        "quaxley": "NAME",
    }


def test_learnt_list_round_trips_through_the_word_list_format(tmp_path):
    path = tmp_path / "deny.tsv"
    write_word_list({"quaxley": "NAME", "calvert": "LOCATION"}, path)
    assert read_word_list(path) == {"calvert": "LOCATION", "quaxley": "NAME"}


def test_cross_validation_learns_only_from_the_training_folds():
    # Every patient's own name is annotated only in its own notes; the clinician Zarquon in
    # everyone's. Held out, a patient's own name cannot have been learnt; Zarquon always is.
    notes = []
    for i, own in enumerate(["Vexlor", "Quimby", "Drathe", "Pollux"]):
        p = f"p{i}"
        notes.append((p, f"Zarquon saw {own} today.", [("Zarquon", "HCPName"), (own, "PTName")]))
        notes.append((p, f"{own} slept.", [(own, "PTName")]))
    documents, gold = annotated(notes)
    r = cross_validate(documents, gold, ["lists"], k=4, seed=0, dictionaries_enabled=False)
    assert [f["span_recall"] for f in r["folds"]] == [pytest.approx(1 / 3)] * 4
    assert r["by_label"]["HCPName"]["recall"] == {"mean": 1.0, "sd": 0.0}
    assert r["by_label"]["PTName"]["recall"] == {"mean": 0.0, "sd": 0.0}
    assert [f["learnt_words"] for f in r["folds"]] == [4, 4, 4, 4]
    assert r["pooled"] == {"gold_spans": 12, "found": 4}
    # Without the learnt list nothing is found; a deny list given is used in every fold.
    off = cross_validate(
        documents, gold, ["lists"], k=4, learn_deny=False, dictionaries_enabled=False
    )
    assert off["span_recall"] == {"mean": 0.0, "sd": 0.0}
    given = cross_validate(
        documents,
        gold,
        ["lists"],
        k=2,
        learn_deny=False,
        deny={"vexlor": "NAME"},
        dictionaries_enabled=False,
    )
    assert given["pooled"]["found"] == 2


def test_summary_means_and_sample_sds():
    per_fold = [
        {
            "span_recall": 1.0,
            "char_precision": 0.5,
            "char_recall": 1.0,
            "gold_spans": 2,
            "by_label": {"NAME": {"gold": 2, "found": 2, "recall": 1.0}},
        },
        {
            "span_recall": 0.5,
            "char_precision": 0.7,
            "char_recall": 0.5,
            "gold_spans": 4,
            "by_label": {
                "NAME": {"gold": 2, "found": 1, "recall": 0.5},
                "DATE": {"gold": 2, "found": 1, "recall": 0.5},
            },
        },
    ]
    s = summarise(per_fold)
    assert s["span_recall"]["mean"] == pytest.approx(0.75)
    assert s["span_recall"]["sd"] == pytest.approx(0.3535533906)
    assert s["char_precision"]["mean"] == pytest.approx(0.6)
    assert s["by_label"]["DATE"] == {"gold": 2, "found": 1, "recall": {"mean": 0.5, "sd": 0.0}}
    assert s["by_label"]["NAME"]["found"] == 3
    assert s["pooled"] == {"gold_spans": 6, "found": 4}


def test_corpus_statistics_can_come_from_a_larger_corpus():
    # "Kowalczyk" (a census surname) is used by one patient of the detected notes but by many
    # of the site's corpus: counted over the corpus it is site vocabulary, not a name.
    site = pa.table(
        {
            "doc_id": [f"d{i}" for i in range(40)],
            "patient_id": [f"p{i}" for i in range(40)],
            "text": pa.array(["Kowalczyk pump on."] * 40, pa.large_string()),
        }
    )
    one = site.slice(0, 1)

    def names(**kw):
        (spans,) = find_spans(one, ["lists"], **kw).column("spans").to_pylist()
        return [s["label"] for s in spans]

    assert names() == ["NAME"]
    assert names(corpus=site) == []


def write_physionet(folder: Path, notes: list[tuple[str, str, list[tuple[str, str]]]]) -> None:
    folder.mkdir()
    text_lines, phrase_lines = [], []
    per_patient: dict[str, int] = {}
    for patient, text, phi in notes:
        per_patient[patient] = per_patient.get(patient, 0) + 1
        note = per_patient[patient]
        text_lines.append(f"START_OF_RECORD={patient}||||{note}||||\n{text}\n||||END_OF_RECORD\n")
        at = 0
        for phrase, label in phi:
            s = text.index(phrase, at)
            phrase_lines.append(f"{patient} {note} {s} {s + len(phrase)} {label} {phrase}\n")
            at = s + len(phrase)
    (folder / "id.text").write_text("".join(text_lines), encoding="utf-8")
    (folder / "id-phi.phrase").write_text("".join(phrase_lines), encoding="utf-8")


def test_detect_eval_cv_command(tmp_path, capsys):
    notes = []
    for i in range(6):
        p = str(i + 1)
        notes.append(
            (
                p,
                f"Seen by Dr. Quaxley on 3/{i + 1}/2091.",
                [("Quaxley", "HCPName"), (f"3/{i + 1}/2091", "Date")],
            )
        )
    folder = tmp_path / "deid"
    write_physionet(folder, notes)
    _, gold = read_physionet(folder)
    assert [s[0]["label"] for s in gold.column("spans").to_pylist()] == ["HCPName"] * 6
    out = tmp_path / "cv.json"
    main(["detect-eval", "--corpus", str(folder), "--cv", "3", "--json", str(out), "-q"])
    printed = capsys.readouterr().out
    assert "3-fold patient-level cross-validation" in printed
    assert "span recall 1.000 ± 0.000" in printed
    r = json.loads(out.read_text())
    assert r["k"] == 3 and r["patients"] == 6 and len(r["folds"]) == 3
    assert [f["patients"] for f in r["folds"]] == [2, 2, 2]
    assert "Quaxley" not in out.read_text()
    with pytest.raises(SystemExit) as e:
        main(["detect-eval", "--corpus", str(folder), "--cv", "7", "-q"])
    assert e.value.code == 2
    assert "7 folds need at least 7 patients" in capsys.readouterr().err


def test_learn_deny_command(tmp_path, capsys):
    folder = tmp_path / "deid"
    write_physionet(
        folder,
        [
            ("1", "Seen by Quaxley at Calvert.", [("Quaxley", "HCPName"), ("Calvert", "Location")]),
            ("2", "Quaxley called.", [("Quaxley", "HCPName")]),
        ],
    )
    out = tmp_path / "deny.tsv"
    main(["learn-deny", str(folder), "--out", str(out), "--min-patients", "2"])
    assert read_word_list(out) == {"quaxley": "NAME"}
    assert "1 words learnt from 2 notes" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["learn-deny", str(folder), "--out", str(out)])
    main(["learn-deny", str(folder), "--out", str(out), "--overwrite"])
    assert read_word_list(out) == {"calvert": "LOCATION", "quaxley": "NAME"}
    (spans,) = (
        find_spans(
            pa.table({"doc_id": ["x"], "text": ["Quaxley and Calvert."]}),
            ["lists"],
            deny=read_word_list(out),
            dictionaries_enabled=False,
        )
        .column("spans")
        .to_pylist()
    )
    assert [(s["start"], s["end"], s["label"]) for s in spans] == [
        (0, 7, "NAME"),
        (12, 19, "LOCATION"),
    ]


def test_integer_document_ids_are_scored():
    documents, gold = annotated([("a", "Zarquon saw him.", [("Zarquon", "HCPName")])] * 4)
    ints = documents.set_column(0, "doc_id", pa.array([0, 1, 2, 3], pa.int64()))
    gold_ints = gold.set_column(0, "doc_id", pa.array([0, 1, 2, 3], pa.int64()))
    found = find_spans(ints, ["lists"], deny={"zarquon": "NAME"}, dictionaries_enabled=False)
    assert found.column("doc_id").to_pylist() == ["0", "1", "2", "3"]
    assert evaluate(ints, found, gold_ints)["span_recall"] == 1.0


def test_folds_without_gold_or_detections_are_not_perfect_scores():
    per_fold = [
        {"span_recall": 0.5, "char_precision": 0.5, "char_recall": 0.5, "gold_spans": 2,
         "detected_chars": 4, "gold_chars": 4, "by_label": {}},
        {"span_recall": 1.0, "char_precision": 1.0, "char_recall": 1.0, "gold_spans": 0,
         "detected_chars": 0, "gold_chars": 0, "by_label": {}},
    ]  # fmt: skip
    s = summarise(per_fold)
    assert s["span_recall"] == {"mean": 0.5, "sd": 0.0}
    assert s["char_precision"] == {"mean": 0.5, "sd": 0.0}


def test_cross_validation_needs_every_patient():
    documents, gold = annotated([("a", "x", []), ("b", "y", [])])
    documents = documents.set_column(1, "patient_id", pa.array(["a", None]))
    with pytest.raises(ConfigError, match="patient_id for every note"):
        cross_validate(documents, gold, ["rules"], k=2)
