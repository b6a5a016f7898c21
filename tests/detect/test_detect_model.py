"""The trained recognizer: detect-train and detect --recognizers model:DIR (issue 18)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from phisieve.cli import main
from phisieve.detect import train as train_module
from phisieve.detect.labels import CATEGORIES, LABELS, category
from phisieve.detect.recognizers.model import ModelRecognizer
from phisieve.detect.run import evaluate, find_spans
from phisieve.detect.stage import DetectTrainOptions as Options
from phisieve.detect.train import read_annotated, token_labels, train_recognizer
from phisieve.errors import ConfigError, PhisieveError
from phisieve.phi.placeholders import KINDS
from phisieve.pipeline.runner import write_dataset
from tests.detect.test_detect_cv import annotated, write_physionet

pytest.importorskip("torch")
pytest.importorskip("transformers")

SURNAMES = [
    "Quaxley", "Vexlor", "Drathe", "Pollux", "Marbury", "Tennick", "Oswin", "Halvard",
    "Brisco", "Calloway", "Dunmore", "Everly", "Fenwick", "Garrow", "Hollis", "Ingram",
]  # fmt: skip
HELD_OUT = ["Jessup", "Kendrick", "Lorimer", "Merriweather", "Norcross", "Penhallow"]
TEMPLATES = [
    "Seen by Dr. {n} today, plan unchanged.",
    "Pt comfortable. Dr. {n} aware of labs.",
    "Family met with Dr. {n} this afternoon.",
    "Resp status stable, Dr. {n} to follow.",
]


def synthetic(names: list[str], n: int, seed: int) -> tuple[pa.Table, pa.Table]:
    rng = random.Random(seed)
    notes = []
    for i in range(n):
        name = rng.choice(names)
        text = rng.choice(TEMPLATES).format(n=name)
        notes.append((f"p{i % 7}", text, [(name, "HCPName")]))
    return annotated(notes)


@pytest.fixture(scope="module")
def tiny_base(minilm: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BERT with MiniLM's WordPiece vocabulary."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForTokenClassification

    out = tmp_path_factory.mktemp("tiny-bert")
    tok = AutoTokenizer.from_pretrained(minilm, local_files_only=True)
    config = BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=256,
    )
    torch.manual_seed(0)
    BertForTokenClassification(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


TRAIN = {"epochs": 30, "batch_size": 8, "learning_rate": 2e-3, "max_length": 32, "stride": 8}


@pytest.fixture(scope="module")
def tiny_model(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    documents, gold = synthetic(SURNAMES, 48, seed=1)
    out = tmp_path_factory.mktemp("recognizer") / "model"
    train_recognizer(documents, gold, tiny_base, out, Options(device="cpu", **TRAIN))
    return out


def test_every_label_has_a_category():
    assert category("HCPName") == category("PTName") == category("RelativeProxyName") == "NAME"
    assert category("PTNameInitial") == "NAME"
    assert category("DateYear") == category("Date") == "DATE"
    assert category("Location") == "LOCATION"
    assert category("Phone") == "PHONE"
    assert category("Age") == "AGE"
    assert category("Other") == "OTHER"
    assert category("ZIP") == "LOCATION"
    assert category("EMAIL") == "CONTACT"
    assert category("SSN") == "ID"
    for kind in KINDS:
        assert category(kind) in (*CATEGORIES, None), kind
    # An empty placeholder's surrogate is a last name.
    assert category("empty") == "NAME"
    assert category("hospital") == "LOCATION"
    assert category("record_number") == "ID"
    assert category("doctor_last_name") == "NAME"
    assert LABELS[0] == "O" and len(LABELS) == 1 + 2 * len(CATEGORIES)


def test_window_labels_are_bio_over_gold_spans():
    # tokens: [CLS] "Dr" "." "Mac" "##Bride" "on" "3" "/" "4" [SEP] [PAD]
    offsets = [(0, 0), (0, 2), (2, 3), (4, 7), (7, 12), (13, 15), (16, 17), (17, 18), (18, 19),
               (0, 0), (0, 0)]  # fmt: skip
    seq = [None, 0, 0, 0, 0, 0, 0, 0, 0, None, None]
    spans = [
        {"start": 4, "end": 12, "label": "HCPName"},
        {"start": 16, "end": 19, "label": "Date"},
    ]
    got = [LABELS[i] if i >= 0 else i for i in token_labels(offsets, seq, spans)]
    assert got == [-100, "O", "O", "B-NAME", "I-NAME", "O", "B-DATE", "I-DATE", "I-DATE",
                   -100, -100]  # fmt: skip
    # Nested spans: every token inside the outer one is labelled (by the innermost span).
    nested = [
        {"start": 4, "end": 19, "label": "Location"},
        {"start": 7, "end": 12, "label": "PTName"},
    ]
    got = [LABELS[i] if i >= 0 else i for i in token_labels(offsets, seq, nested)]
    assert got[3:9] == ["B-LOCATION", "B-NAME", "B-LOCATION", "I-LOCATION", "I-LOCATION",
                        "I-LOCATION"]  # fmt: skip
    # Two adjacent spans start two entities.
    adjacent = [{"start": 4, "end": 7, "label": "PTName"}, {"start": 7, "end": 12, "label": "Age"}]
    got = [LABELS[i] if i >= 0 else i for i in token_labels(offsets, seq, adjacent)]
    assert got[3:5] == ["B-NAME", "B-AGE"]


def test_a_tiny_model_learns_names_it_never_saw(tiny_model: Path):
    documents, gold = synthetic(HELD_OUT, 30, seed=2)
    found = find_spans(documents, [f"model:{tiny_model}"], model_options={"device": "cpu"})
    scores = evaluate(documents, found, gold)
    assert scores["span_recall"] >= 0.8
    assert scores["char_precision"] >= 0.8
    sources = {s["source"] for spans in found.column("spans").to_pylist() for s in spans}
    assert sources == {"model:NAME"}
    meta = json.loads((tiny_model / "phisieve.json").read_text())
    assert meta["format"] == "phisieve-recognizer/1"
    assert meta["positive_windows"] == 48 and meta["notes"] == 48
    assert meta["steps"] == 30 * 6


def test_training_is_a_pure_function_of_the_seed(tiny_base: Path, tiny_model: Path, tmp_path):
    documents, gold = synthetic(SURNAMES, 48, seed=1)
    again = tmp_path / "again"
    stats = train_recognizer(documents, gold, tiny_base, again, Options(device="cpu", **TRAIN))
    first = json.loads((tiny_model / "phisieve.json").read_text())
    counts = ("windows_made", "windows", "positive_windows", "steps", "tokens")
    alignment = ("gold_spans", "aligned_spans", "unaligned_spans")
    for key in (*counts, *alignment, "final_loss"):
        assert stats[key] == first[key]
    assert (first["gold_spans"], first["aligned_spans"], first["unaligned_spans"]) == (48, 48, 0)
    # The same weights, within float tolerance.
    from safetensors.numpy import load_file

    weights = [load_file(folder / "model.safetensors") for folder in (again, tiny_model)]
    assert weights[0].keys() == weights[1].keys()
    for name, value in weights[0].items():
        np.testing.assert_allclose(value, weights[1][name], rtol=1e-5, atol=1e-6)
    texts = synthetic(HELD_OUT, 10, seed=3)[0].column("text").to_pylist()
    assert ModelRecognizer(again, device="cpu")(texts) == ModelRecognizer(tiny_model, device="cpu")(
        texts
    )


def test_training_on_refilled_copies_too(tiny_base: Path, tmp_path, capsys):
    documents, gold = synthetic(["Quaxley"], 12, seed=1)
    quick = {**TRAIN, "epochs": 1, "device": "cpu"}
    plain = train_recognizer(documents, gold, tiny_base, tmp_path / "a", Options(**quick))
    more = train_recognizer(documents, gold, tiny_base, tmp_path / "b", Options(augment=2, **quick))
    assert plain["refilled_copies"] == {"copied": 0, "skipped": 0}
    assert more["refilled_copies"] == {"copied": 12, "skipped": 0}
    assert more["notes"] == plain["notes"] == 12
    # Every copy's windows hold PHI (another surname where "Quaxley" was) and are kept.
    assert more["positive_windows"] == 3 * plain["positive_windows"]
    with pytest.raises(SystemExit):
        main(["detect-train", str(tmp_path), "--base", str(tiny_base), "--out",
              str(tmp_path / "c"), "--augment", "-1"])  # fmt: skip
    assert "augment must be >= 0, not -1" in capsys.readouterr().err


def test_a_base_cut_to_its_first_layers(tiny_base: Path, tmp_path, capsys):
    """``layers`` keeps the base's first N transformer layers, with their pretrained weights."""
    from safetensors.numpy import load_file

    documents, gold = synthetic(["Quaxley"], 8, seed=1)
    still = {**TRAIN, "epochs": 1, "learning_rate": 0.0, "device": "cpu"}  # weights unchanged
    one = tmp_path / "one"
    stats = train_recognizer(documents, gold, tiny_base, one, Options(layers=1, **still))
    assert stats["layers"] == 1
    meta = json.loads((tmp_path / "one" / "phisieve.json").read_text())
    config = json.loads((tmp_path / "one" / "config.json").read_text())
    assert meta["layers"] == config["num_hidden_layers"] == 1
    cut, whole = (load_file(tmp_path / "one" / "model.safetensors"),
                  load_file(tiny_base / "model.safetensors"))  # fmt: skip
    encoder = {k for k in whole if ".encoder.layer." in k}
    assert {k for k in encoder if ".layer.0." in k} == {k for k in cut if ".encoder.layer." in k}
    for name in cut:
        if name in whole and "classifier" not in name:
            np.testing.assert_array_equal(cut[name], whole[name])
    # The whole depth when not given; the found recognizer runs either way.
    full = train_recognizer(documents, gold, tiny_base, tmp_path / "all", Options(**still))
    assert full["layers"] == 2
    assert len(ModelRecognizer(tmp_path / "one", device="cpu")(["Dr. Quaxley saw him."])) == 1
    for bad, message in ((3, "layers=3, but the base model has 2 layers"),
                         (0, "layers must be at least 1, not 0")):  # fmt: skip
        with pytest.raises(ConfigError, match=message):
            train_recognizer(documents, gold, tiny_base, tmp_path / "x", Options(layers=bad))
    assert not (tmp_path / "x").exists()
    with pytest.raises(SystemExit):
        main(["detect-train-crf", str(tmp_path), "--base", str(tiny_base), "--out",
              str(tmp_path / "c"), "--model-layers", "0"])  # fmt: skip
    assert "layers must be at least 1, not 0" in capsys.readouterr().err


def test_notes_are_read_in_groups_with_the_same_result(tiny_model: Path, monkeypatch):
    texts = [*synthetic(HELD_OUT, 12, seed=6)[0].column("text").to_pylist(), None, ""]
    recognizer = ModelRecognizer(tiny_model, device="cpu")
    whole = recognizer(texts)
    monkeypatch.setattr(ModelRecognizer, "CHUNK_CHARS", 60)
    assert recognizer(texts) == whole and len(whole) == len(texts)
    assert sum(map(len, whole)) >= 10
    assert ModelRecognizer(tiny_model, device="cpu", max_length=24, stride=4).max_length == 24


def test_code_points_whole_words_and_enormous_notes(tiny_model: Path):
    recognizer = ModelRecognizer(tiny_model, device="cpu", batch_size=7)
    texts = [
        "é😀 naïve 😀😀 Seen by Dr. Lorimer today, plan unchanged.",
        None,
        "",
        "Resp status stable, Dr. Norcross to follow. " * 5000,  # 220,000 characters
    ]
    out = recognizer(texts)
    assert out[1] == [] and out[2] == []
    assert [(texts[0][s:e], label) for s, e, label, _ in out[0]] == [("Lorimer", "NAME")]
    # Every window of the long note is read (a first window alone would hold one name), and
    # spans are whole words inside the note.
    big, text = out[3], texts[3]
    assert sum(text[s:e] == "Norcross" for s, e, _, _ in big) >= 1000
    for s, e, _, score in big:
        assert 0 <= s < e <= len(text) and 0 < score <= 1
        assert (s == 0 or not text[s - 1].isalnum()) and (e == len(text) or not text[e].isalnum())


def test_detect_merges_model_spans_with_the_others(tiny_model: Path, tmp_path, monkeypatch):
    text = "Seen by Dr. Penhallow today, plan unchanged. Call 617-555-0199 on 3/4/2091."
    table = find_spans(
        pa.table({"doc_id": ["a"], "text": [text]}),
        ["rules", "lists", f"model:{tiny_model}"],
        model_options={"device": "cpu"},
    )
    (spans,) = table.column("spans").to_pylist()
    got = {(text[s["start"] : s["end"]], s["label"]) for s in spans}
    assert {("617-555-0199", "PHONE"), ("3/4/2091", "DATE")} <= got
    name = [s for s in spans if text[s["start"] : s["end"]] == "Penhallow"]
    assert len(name) == 1 and "model:NAME" in name[0]["source"].split("+")
    # A bare `model` is the optional stacked distribution's: missing, or installed by
    # `make build` without the weights `make stacked-model` makes (an empty folder here, so
    # that the test does not depend on whether this machine made them).
    try:
        import phisieve_models_physionet_stacked as installed
    except ModuleNotFoundError:
        pass
    else:
        monkeypatch.setattr(installed, "stacked_path", lambda: tmp_path)
    with pytest.raises(PhisieveError, match="phisieve-models-physionet-stacked"):
        find_spans(pa.table({"doc_id": ["a"], "text": [text]}), ["model"])


def test_a_folder_that_is_not_a_recognizer_is_refused(tiny_base: Path, tmp_path):
    with pytest.raises(ConfigError, match="not a phisieve recognizer"):
        ModelRecognizer(tiny_base)
    with pytest.raises(ConfigError, match="not a model folder"):
        train_recognizer(*synthetic(SURNAMES, 4, 0), tmp_path, tmp_path / "m")


def test_annotated_inputs(tmp_path):
    notes = [("1", "Seen by Dr. Quaxley.", [("Quaxley", "HCPName")]),
             ("2", "Dr. Vexlor called.", [("Vexlor", "HCPName")])]  # fmt: skip
    folder = tmp_path / "deid"
    write_physionet(folder, notes)
    documents, gold = read_annotated(folder)
    assert documents.num_rows == 2
    assert [[(s["start"], s["end"]) for s in g] for g in gold.column("spans").to_pylist()] == [
        [(12, 19)],
        [(4, 10)],
    ]
    # A documents dataset with a gold spans column (surrogate output) ...
    docs_t, gold_t = annotated(notes)
    filled = docs_t.append_column("spans", gold_t.column("spans"))
    write_dataset(filled, tmp_path / "filled")
    d2, g2 = read_annotated(tmp_path / "filled")
    assert "spans" not in d2.column_names
    assert g2.column("spans").to_pylist() == gold_t.column("spans").to_pylist()
    # ... or a spans dataset with its documents.
    write_dataset(docs_t, tmp_path / "docs")
    write_dataset(gold_t, tmp_path / "spans")
    d3, g3 = read_annotated(tmp_path / "spans", tmp_path / "docs")
    assert d3.column("text").to_pylist() == docs_t.column("text").to_pylist()
    assert g3.column("spans").to_pylist() == gold_t.column("spans").to_pylist()


def test_detect_train_and_detect_commands(tiny_base: Path, tmp_path, capsys):
    rng = random.Random(5)
    notes = []
    for i in range(40):
        name = rng.choice(SURNAMES)
        notes.append((str(i % 6 + 1), rng.choice(TEMPLATES).format(n=name), [(name, "HCPName")]))
    folder = tmp_path / "deid"
    write_physionet(folder, notes)
    model = tmp_path / "model"
    args = ["detect-train", str(folder), "--base", str(tiny_base), "--out", str(model),
            "--device", "cpu", "--epochs", "30", "--batch-size", "8", "--learning-rate", "2e-3",
            "--max-length", "32", "--stride", "8", "-q"]  # fmt: skip
    main(args)
    out = capsys.readouterr().out
    assert "trained on 40 notes" in out
    assert "40 gold spans, 0 covering no token" in out
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2
    main(["ingest", str(folder / "id.text"), "--out", str(tmp_path / "docs"), "-q"])
    main(["detect", str(tmp_path / "docs"), "--out", str(tmp_path / "spans"), "-q",
          "--recognizers", f"rules,model:{model}"])  # fmt: skip
    from phisieve.io.sources import read_spans

    found = read_spans(tmp_path / "spans").column("spans").to_pylist()
    assert sum("model:NAME" in s["source"] for spans in found for s in spans) >= 30


def test_cross_validation_trains_one_model_per_fold(
    tiny_base: Path, tiny_model: Path, tmp_path, capsys, monkeypatch
):
    from phisieve.detect.cv import cross_validate, folds

    rng = random.Random(7)
    notes = []
    for i in range(96):
        name = rng.choice(SURNAMES + HELD_OUT)
        notes.append((f"p{i % 6}", rng.choice(TEMPLATES).format(n=name), [(name, "HCPName")]))
    documents, gold = annotated(notes)
    import phisieve.detect.train as model_module

    trained_on: list[set[str]] = []
    original = model_module.train_recognizer

    def spy(docs, *args, **kwargs):
        trained_on.append(set(docs.column("patient_id").to_pylist()))
        return original(docs, *args, **kwargs)

    monkeypatch.setattr(model_module, "train_recognizer", spy)
    r = cross_validate(
        documents,
        gold,
        ["model"],
        k=2,
        base=tiny_base,
        train_options={**TRAIN, "epochs": 15, "device": "cpu"},
        model_options={"device": "cpu"},
    )
    assert r["recognizers"] == ["model"] and len(r["folds"]) == 2
    assert [f["patients"] for f in r["folds"]] == [3, 3]
    assert all(f["fit_seconds"] > 0 for f in r["folds"])
    assert r["span_recall"]["mean"] >= 0.8
    # Each fold's model saw only the other fold's patients.
    fold_of = folds([f"p{i}" for i in range(6)], 2, 0)
    assert trained_on == [{p for p, g in fold_of.items() if g != f} for f in range(2)]
    held_out = [f["patients"] for f in r["folds"]]
    assert held_out == [3, 3]
    with pytest.raises(ConfigError, match="may have seen the held-out"):
        cross_validate(documents, gold, [f"model:{tiny_model}"], k=2)
    with pytest.raises(ConfigError, match="augment must be >= 0"):  # before any fold trains
        cross_validate(
            documents, gold, ["model"], k=2, base=tiny_base, train_options={"augment": -1}
        )
    folder = tmp_path / "deid"
    write_physionet(folder, [(p.removeprefix("p"), t, phi) for p, t, phi in notes[:12]])
    with pytest.raises(SystemExit) as e:
        main(["detect-eval", "--corpus", str(folder), "--cv", "2", "--recognizers", "model"])
    assert e.value.code == 2
    assert "needs --base" in capsys.readouterr().err
    base = ["--recognizers", "model", "--base", str(tiny_base)]
    with pytest.raises(SystemExit) as e:
        main(["detect-eval", "--corpus", str(folder), "--cv", "2", *base, "--augment", "-1"])
    assert e.value.code == 2
    assert "augment must be >= 0" in capsys.readouterr().err


def test_training_on_hostile_notes(tiny_base: Path, tmp_path, monkeypatch):
    import math

    from phisieve.errors import InputError

    documents, gold = synthetic(SURNAMES, 8, seed=4)
    texts = documents.column("text").to_pylist()
    texts[0], texts[1] = "", None  # their gold spans now point past the end
    documents = documents.set_column(2, "text", pa.array(texts, pa.large_string()))
    options = Options(device="cpu", **{**TRAIN, "epochs": 2})
    # Two notes' spans of eight cover no token: far more than a small share, refused (counts
    # only, no text).
    with pytest.raises(InputError, match=r"^2 of 8 gold spans cover no token"):
        train_recognizer(documents, gold, tiny_base, tmp_path / "m", options)
    monkeypatch.setattr(train_module, "MAX_UNALIGNED", 0.5)
    stats = train_recognizer(documents, gold, tiny_base, tmp_path / "m", options)
    assert stats["positive_windows"] == 6 and math.isfinite(stats["final_loss"])
    assert (stats["gold_spans"], stats["aligned_spans"], stats["unaligned_spans"]) == (8, 6, 2)
    none = gold.set_column(
        1, "spans", pa.array([[]] * gold.num_rows, gold.schema.field("spans").type)
    )
    with pytest.raises(InputError, match="no gold PHI"):
        train_recognizer(
            documents, none, tiny_base, tmp_path / "m2", Options(device="cpu", **TRAIN)
        )
