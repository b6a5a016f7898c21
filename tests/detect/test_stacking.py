"""Stacked detection: the token classifier's evidence inside the CRF (issue 42)."""

from __future__ import annotations

import json
import pickle
import random
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phisieve.detect import stacking
from phisieve.detect.cv import cross_validate, folds
from phisieve.detect.recognizers.crf import CrfRecognizer, token_table
from phisieve.detect.recognizers.model import TOKEN_SCORES, ModelRecognizer
from phisieve.detect.run import detector, evaluate, find_spans
from phisieve.detect.stacking import BUCKETS, ModelCache, train_stacked, word_evidence
from phisieve.detect.stage import CrfTrainOptions, DetectTrainOptions
from phisieve.detect.windows import windows
from phisieve.errors import ConfigError
from tests.detect.test_detect_cv import annotated
from tests.detect.test_detect_model import (  # noqa: F401 (fixtures)
    HELD_OUT,
    SURNAMES,
    TEMPLATES,
    TRAIN,
    synthetic,
    tiny_base,
    tiny_model,
)

pytest.importorskip("torch")
pytest.importorskip("transformers")

QUICK = DetectTrainOptions(device="cpu", **{**TRAIN, "epochs": 4})


def notes(n: int, seed: int, patients: int = 6):
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        name = rng.choice(SURNAMES + HELD_OUT)
        rows.append((f"p{i % patients}", rng.choice(TEMPLATES).format(n=name), [(name, "HCPName")]))
    return annotated(rows)


# --- the model's evidence per word --------------------------------------------------------------


def reference_evidence(words: list[tuple[int, int, int]], tokens: list[tuple]) -> list[tuple]:
    """Per word: the overlapping token of highest p (the first such in ``tokens``)."""
    out = []
    for row, s, e in words:
        best = None
        for t_row, ts, te, p, label in tokens:
            if t_row == row and ts < e and te > s and (best is None or p > best[0]):
                best = (p, label)
        if best is None:
            out.append(("na", "na"))
        else:
            bucket = sum(best[0] >= edge for edge in BUCKETS)
            out.append((str(bucket), best[1] if best[0] >= 0.5 else "O"))
    return out


@st.composite
def words_and_tokens(draw):
    words = []
    for row in range(draw(st.integers(1, 3))):
        at = 0
        for _ in range(draw(st.integers(0, 6))):
            at += draw(st.integers(0, 3))
            length = draw(st.integers(1, 5))
            words.append((row, at, at + length))
            at += length
    tokens = [
        (
            draw(st.integers(0, 3)),
            start := draw(st.integers(0, 40)),
            start + draw(st.integers(1, 6)),
            draw(st.sampled_from([0.0, 0.005, 0.05, 0.2, 0.5, 0.6, 0.95, 1.0])),
            draw(st.sampled_from(["NAME", "DATE"])),
        )
        for _ in range(draw(st.integers(0, 12)))
    ]
    return words, tokens


@given(words_and_tokens())
@settings(max_examples=300, deadline=None)
def test_word_evidence_is_the_best_overlapping_token(case):
    words, tokens = case
    frame = pl.DataFrame(words, schema=["row", "s", "e"], orient="row")
    toks = pl.DataFrame(tokens, schema={k: v for k, v in TOKEN_SCORES.items()}, orient="row")
    got = word_evidence(frame, toks)
    assert got.select("row", "s", "e").rows() == words
    assert list(zip(got["mp"], got["ml"], strict=True)) == reference_evidence(words, tokens)


def test_word_evidence_buckets():
    words = pl.DataFrame({"row": [0] * 8, "s": range(0, 16, 2), "e": range(1, 17, 2)})
    p = [0.0, 0.01, 0.099, 0.1, 0.49, 0.5, 0.89, 0.9]
    tokens = pl.DataFrame(
        {"row": [0] * 8, "start": range(0, 16, 2), "end": range(1, 17, 2), "p": p,
         "label": ["DATE"] * 8},
        schema=TOKEN_SCORES,
    )  # fmt: skip
    got = word_evidence(words, tokens)
    assert got["mp"].to_list() == ["0", "1", "1", "2", "3", "4", "5", "6"]
    assert got["ml"].to_list() == ["O"] * 5 + ["DATE"] * 3


# --- the model's scores per token ----------------------------------------------------------------


def test_token_scores_take_each_token_from_its_most_central_window(tiny_model: Path):  # noqa: F811
    """The vectorised choice against a loop over the windows (the recognizer's former
    code): a token takes the window where it lies farthest from the edges, the first among
    equals."""
    recognizer = ModelRecognizer(tiny_model, device="cpu", max_length=16, stride=6)
    texts = [*synthetic(HELD_OUT, 6, seed=4)[0].column("text").to_pylist(), "", "x " * 40]
    win = windows(recognizer.tokenizer, texts, recognizer.max_length, recognizer.stride)
    probs = recognizer._probabilities(win)
    expected: list[dict] = [{} for _ in texts]
    for w, doc in enumerate(win.doc.tolist()):
        inside = np.flatnonzero(win.inside[w]).tolist()
        for i in inside:
            start, end = win.offsets[w][i].tolist()
            if end <= start:
                continue
            margin = min(i - inside[0], inside[-1] - i)
            kept = expected[doc].get((start, end))
            if kept is None or margin > kept[0]:
                expected[doc][(start, end)] = (margin, probs[w, i])
    scores = recognizer.token_scores(texts)
    rows = [(doc, s, e) for doc, found in enumerate(expected) for (s, e) in sorted(found)]
    assert scores.select("row", "start", "end").rows() == rows
    p = [1.0 - float(found[k][1][0]) for found in expected for k in sorted(found)]
    np.testing.assert_allclose(scores["p"].to_numpy(), p, rtol=1e-6)
    # Spans are made of the same choices: every span's tokens are PHI-labelled there.
    spans = recognizer(texts)
    for doc, found in enumerate(spans):
        for s, e, _, _ in found:
            inside = scores.filter(
                (pl.col("row") == doc) & (pl.col("start") >= s) & (pl.col("end") <= e)
            )
            assert inside.height and (inside["label"] == "NAME").all()
    assert recognizer.token_scores([]).height == 0
    assert recognizer.token_scores(["", None]).height == 0


# --- training and detecting ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def stacked(tiny_base: Path, tmp_path_factory) -> tuple[Path, dict, list]:  # noqa: F811
    documents, gold = notes(60, seed=7)
    out = tmp_path_factory.mktemp("stacked") / "crf"
    trained: list[set[str]] = []
    from phisieve.detect import train

    original = train.train_recognizer

    def spy(docs, *args, **kwargs):
        trained.append(set(docs.column("doc_id").to_pylist()))
        return original(docs, *args, **kwargs)

    train.train_recognizer = spy
    try:
        # Without L1, every feature the tagger saw keeps a weight.
        info = train_stacked(
            documents, gold, tiny_base, out, CrfTrainOptions(c1=0.0), model=QUICK, folds=3
        )
    finally:
        train.train_recognizer = original
    return out, info, trained


def test_stacking_scores_each_note_with_a_model_that_never_saw_it(stacked):
    out, info, trained = stacked
    documents, _ = notes(60, seed=7)
    ids = documents["doc_id"].to_pylist()
    patients = documents["patient_id"].to_pylist()
    fold_of = folds(patients, 3, 0)
    expected = [
        {d for d, p in zip(ids, patients, strict=True) if fold_of[p] != g} for g in range(3)
    ]
    # One model per fold on the others' notes, then the one that ships, on every note.
    assert trained == [*expected, set(ids)]
    assert info["stacked"]["folds"] == 3 and info["stacked"]["buckets"] == list(BUCKETS)
    assert info["stacked"]["model_options"]["epochs"] == 4
    assert info["stacked"]["scored_tokens"] > 0
    recorded = json.loads((out / "phisieve.json").read_text())
    assert recorded["stacked"] == info["stacked"]
    assert (out / "model" / "phisieve.json").is_file()


def test_the_stacked_tagger_learnt_from_the_model(stacked):
    import pycrfsuite

    out, _, _ = stacked
    tagger = pycrfsuite.Tagger()
    tagger.open(str(out / "crf.crfsuite"))
    attributes = {a for a, _ in tagger.info().state_features}
    assert any(a.startswith(("mp=", "ml=")) for a in attributes)
    finder = pycrfsuite.Tagger()
    finder.open(str(out / "finder.crfsuite"))
    assert not any(a.startswith(("mp", "ml")) for a, _ in finder.info().state_features)


def test_detect_with_the_stacked_crf(stacked, tmp_path):
    out, _, _ = stacked
    documents, gold = notes(24, seed=11)
    names = ["rules", "lists", f"crf:{out}"]
    found = find_spans(documents, names, model_options={"device": "cpu"})
    scores = evaluate(documents, found, gold)
    assert scores["span_recall"] >= 0.9
    # Its model runs inside the CRF: its spans are not added, the tagger's are.
    sources = {s["source"] for row in found["spans"].to_pylist() for s in row}
    assert not any(src.startswith("model") for src in sources)
    crf = CrfRecognizer(out, model_options={"device": "cpu"})
    assert crf.stacked and crf.model is not None
    again = pickle.loads(pickle.dumps(crf))
    assert again.model is not None and again.stacked
    det = detector(documents, ["rules", "lists"])
    texts = documents.column("text").combine_chunks()
    tok, merged = det.found(texts)
    table = token_table(texts, tok)
    first, second = crf.tag(table, merged, texts), again.tag(table, merged, texts)
    assert first.spans.equals(second.spans) and first.words.equals(second.words)
    with pytest.raises(ConfigError, match="texts"):
        crf.tag(table, merged)
    # A stacked folder without its model is refused.
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    shutil.rmtree(broken / "model")
    with pytest.raises(ConfigError, match="without its model"):
        CrfRecognizer(broken)


def test_the_model_cache_trains_each_set_of_notes_once(tiny_base: Path, tmp_path):  # noqa: F811
    documents, gold = notes(12, seed=3)
    cache = ModelCache(tmp_path)
    quick = DetectTrainOptions(device="cpu", **{**TRAIN, "epochs": 1})
    first = cache.model(documents, gold, tiny_base, quick)
    assert cache.model(documents.take([*range(11, -1, -1)]), gold, tiny_base, quick) == first
    assert cache.trained == 1
    other = cache.model(documents.slice(0, 6), gold, tiny_base, quick)
    assert other != first and cache.trained == 2
    assert not list(tmp_path.glob("*.partial"))


def patients_trained_on(monkeypatch) -> list[set[str]]:
    """The patients of each model :func:`phisieve.detect.train.train_recognizer` trains from
    now on, in order."""
    from phisieve.detect import train

    trained: list[set[str]] = []
    original = train.train_recognizer

    def spy(docs, *args, **kwargs):
        trained.append(set(docs.column("patient_id").to_pylist()))
        return original(docs, *args, **kwargs)

    monkeypatch.setattr(train, "train_recognizer", spy)
    return trained


def test_stacking_refuses_a_single_fold(tiny_base: Path, tmp_path):  # noqa: F811
    documents, gold = notes(6, seed=1, patients=1)
    with pytest.raises(ConfigError):
        train_stacked(documents, gold, tiny_base, tmp_path / "x", model=QUICK, folds=2)
    with pytest.raises(ConfigError, match="two folds"):
        stacking.out_of_fold(
            documents, gold, tiny_base, QUICK, {"p0": 0}, ModelCache(tmp_path / "c")
        )


def test_detect_train_crf_with_a_base_trains_the_stacked_crf(
    tiny_base: Path,  # noqa: F811
    tmp_path,
    capsys,
):
    from phisieve.cli import main
    from tests.detect.test_detect_cv import write_physionet

    rng = random.Random(5)
    rows = []
    for i in range(30):
        name = rng.choice(SURNAMES)
        rows.append((str(i % 6), rng.choice(TEMPLATES).format(n=name), [(name, "HCPName")]))
    write_physionet(tmp_path / "deid", rows)
    out = tmp_path / "stacked"
    base = ["detect-train-crf", str(tmp_path / "deid"), "--base", str(tiny_base)]
    quick = ["--folds", "2", "--model-epochs", "1", "--device", "cpu", "--augment", "0", "-q"]
    main([*base, "--out", str(out), *quick])
    info = json.loads((out / "phisieve.json").read_text())
    assert info["stacked"]["folds"] == 2 and info["stacked"]["model_options"]["epochs"] == 1
    assert "folds" not in info["options"] and info["options"]["augment"] == 0
    assert json.loads((out / "model" / "phisieve.json").read_text())["notes"] == 30
    with pytest.raises(SystemExit) as e:
        main([*base, "--out", str(tmp_path / "x"), "--folds", "1"])
    assert e.value.code == 2
    assert "folds must be >= 2" in capsys.readouterr().err


def test_a_bare_model_is_the_installed_stacked_crf(stacked, monkeypatch):
    import sys
    import types

    from phisieve.detect.recognizers.crf import STACKED_PACKAGE
    from phisieve.detect.run import require_models, resolve
    from phisieve.detect.stage import check_recognizers
    from phisieve.errors import MissingModelError

    out, _, _ = stacked
    monkeypatch.setitem(sys.modules, STACKED_PACKAGE, None)
    with pytest.raises(MissingModelError, match="phisieve-models-physionet-stacked"):
        require_models(["rules", "lists", "crf", "model"])
    with pytest.raises(MissingModelError, match="model:DIR"):
        resolve(["model"])
    assert resolve(["rules", "crf"]) == ["rules", "crf"]
    installed = types.ModuleType(STACKED_PACKAGE)
    installed.stacked_path = lambda: out.parent / "not-made"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, STACKED_PACKAGE, installed)
    with pytest.raises(ConfigError, match="make stacked-model"):
        require_models(["rules", "lists", "crf", "model"])
    installed.stacked_path = lambda: out  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, STACKED_PACKAGE, installed)
    require_models(["rules", "lists", "crf", "model"])
    assert resolve(["rules", "lists", "crf", "model"]) == ["rules", "lists", f"crf:{out}"]
    assert resolve(["rules", "model"]) == ["rules", f"model:{out / 'model'}"]
    with pytest.raises(ConfigError, match="give it with `crf`"):
        check_recognizers(["model", f"crf:{out}"], 0.0)
    documents, _ = notes(12, seed=13)
    both = find_spans(
        documents, ["rules", "lists", "crf", "model"], model_options={"device": "cpu"}
    )
    same = find_spans(documents, ["rules", "lists", f"crf:{out}"], model_options={"device": "cpu"})
    assert both.equals(same)


@pytest.mark.parametrize("oof", ["nested", "outer"])
def test_stacked_cross_validation_never_scores_a_fold_with_its_own_model(
    tiny_base: Path,  # noqa: F811
    monkeypatch,
    oof: str,
):
    documents, gold = notes(60, seed=7)
    trained = patients_trained_on(monkeypatch)
    r = cross_validate(
        documents,
        gold,
        ["rules", "lists", "crf", "model"],
        k=3,
        base=tiny_base,
        train_options={**TRAIN, "epochs": 3, "device": "cpu"},
        model_options={"device": "cpu"},
        oof=oof,
    )
    fold_of = folds(documents["patient_id"].to_pylist(), 3, 0)
    of = {g: {p for p, f in fold_of.items() if f == g} for g in range(3)}
    everyone = set(fold_of)
    outer = [everyone - of[f] for f in range(3)]
    if oof == "nested":
        # k (k-1) / 2 pair models, then the k fold models (the CRF's model in each fold):
        # none trained on a held-out patient of a fold whose training notes it scores.
        pairs = [everyone - of[f] - of[g] for f in range(3) for g in range(f + 1, 3)]
        assert sorted(map(sorted, trained)) == sorted(map(sorted, pairs + outer))
    else:
        # The k models of the outer folds score the training folds and the held-out one.
        assert trained == outer
    assert r["models_trained"] == len(trained) and r["oof"] == oof
    assert r["span_recall"]["mean"] >= 0.9
    assert r["recognizers"] == ["rules", "lists", "crf", "model"]


def test_cross_validation_refuses_an_unknown_oof(tiny_base: Path):  # noqa: F811
    documents, gold = notes(12, seed=7)
    with pytest.raises(ConfigError, match="nested or outer"):
        cross_validate(documents, gold, ["crf", "model"], k=3, base=tiny_base, oof="inner")
