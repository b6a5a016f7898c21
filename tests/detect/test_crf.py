"""The `crf` recognizer: Rust inference against CRFsuite and a plain-Python reference, its
training, vetting of the other recognizers' spans, the model of phisieve-models-physionet
(found through that distribution; a clear error without it) and cross-validation (issue 28)."""

from __future__ import annotations

import json
import math
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pycrfsuite
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phisieve import _core
from phisieve.detect.crf_train import hidden_spans, train_crf, word_labels
from phisieve.detect.cv import cross_validate
from phisieve.detect.recognizers import crf as crf_module
from phisieve.detect.recognizers.crf import (
    FIND,
    FORMAT,
    MODELS,
    CrfRecognizer,
    crf_features,
    feature_columns,
    note_runs,
    overlaps,
    physionet_crf,
    token_table,
)
from phisieve.detect.run import detector, find_spans
from phisieve.detect.stage import DEFAULT_RECOGNIZERS, CrfTrainOptions
from phisieve.errors import ConfigError, MissingDependencyError, MissingModelError, PhisieveError
from phisieve.io.annotated import read_physionet
from phisieve.io.sources import open_source
from phisieve.phi.augment import refilled
from phisieve.text.words import tokenize


def normalized(text: str) -> list[str]:
    return tokenize(pa.array([text])).column(2).to_pylist()[0]


def reference_tag(state: np.ndarray, trans: np.ndarray) -> tuple[list[int], np.ndarray]:
    """Viterbi and forward-backward in plain Python over every labelling (short sequences)."""
    n, labels = state.shape
    scores = {}
    for code in range(labels**n):
        y = [code // labels**t % labels for t in range(n)]
        scores[tuple(y)] = sum(state[t, y[t]] for t in range(n)) + sum(
            trans[y[t - 1], y[t]] for t in range(1, n)
        )
    best = max(scores, key=lambda y: scores[y])
    top = max(scores.values())
    z = sum(math.exp(s - top) for s in scores.values())
    marginals = np.zeros((n, labels))
    for y, s in scores.items():
        for t in range(n):
            marginals[t, y[t]] += math.exp(s - top) / z
    return list(best), marginals


@settings(max_examples=60, deadline=None)
@given(
    labels=st.integers(1, 3),
    lengths=st.lists(st.integers(0, 4), min_size=1, max_size=4),
    data=st.data(),
)
def test_rust_tagger_equals_the_reference(labels, lengths, data):
    attrs = ["a", "b", "c", "d"]
    weight = st.floats(-3, 3, allow_nan=False)
    weights = np.array(data.draw(st.lists(weight, min_size=4 * labels, max_size=4 * labels)))
    trans = np.array(data.draw(st.lists(weight, min_size=labels**2, max_size=labels**2)))
    positions = sum(lengths)
    # Two attribute columns; "zz" is unknown to the model and a null is no attribute.
    pick = st.sampled_from([*attrs, "zz", None])
    columns = [data.draw(st.lists(pick, min_size=positions, max_size=positions)) for _ in "xy"]
    names = [f"L{i}" for i in range(labels)]
    tagger = _core.CrfTagger(names, attrs, weights.tolist(), trans.tolist())
    assert tagger.labels == names
    got_labels, got_marginals = tagger.tag(
        [pa.array(c, pa.string()) for c in columns], pa.array(lengths, pa.int64())
    )
    got_labels = got_labels.to_pylist()
    got_marginals = np.asarray(got_marginals).reshape(-1, labels)
    w = weights.reshape(4, labels)
    state = np.zeros((positions, labels))
    for t in range(positions):
        for c in columns:
            if c[t] in attrs:
                state[t] += w[attrs.index(c[t])]
    at = 0
    for n in lengths:
        best, marginals = reference_tag(state[at : at + n], trans.reshape(labels, labels))
        scores = [
            sum(state[at + t, y[t]] for t in range(n))
            + sum(trans.reshape(labels, labels)[y[t - 1], y[t]] for t in range(1, n))
            for y in (best, got_labels[at : at + n])
        ]
        # The best labelling (its score: ties between labellings may pick either).
        assert scores[1] == pytest.approx(scores[0], abs=1e-9)
        np.testing.assert_allclose(got_marginals[at : at + n], marginals, atol=1e-9)
        at += n


def test_bad_tagger_input_is_an_error_without_values():
    with pytest.raises(Exception, match="weights"):
        _core.CrfTagger(["O"], ["a"], [1.0, 2.0], [0.0])
    tagger = _core.CrfTagger(["O"], ["secret"], [1.0], [0.0])
    with pytest.raises(Exception, match="positions") as e:
        tagger.tag([pa.array(["secret"])], pa.array([2], pa.int64()))
    assert "secret" not in str(e.value)
    with pytest.raises(Exception, match="int64"):
        tagger.tag([pa.array(["a"])], pa.array([1], pa.int32()))


def test_overlaps_pairs_each_span_with_the_words_it_touches():
    words = pl.DataFrame({"row": [0, 0, 0, 1, 1], "s": [0, 5, 9, 0, 4], "e": [4, 8, 12, 3, 7]})
    spans = pl.DataFrame(
        {"row": [1, 0, 0, 0, 1], "start": [2, 6, 3, 12, 8], "end": [5, 10, 4, 14, 9]}
    )
    span_index, word_index = overlaps(words, spans)
    pairs = sorted(zip(span_index.tolist(), word_index.tolist(), strict=True))
    # span 0 (row 1, 2-5) touches words 3 and 4; span 1 (6-10) words 1 and 2; span 2 (3-4)
    # word 0; spans 3 and 4 touch nothing.
    assert pairs == [(0, 3), (0, 4), (1, 1), (1, 2), (2, 0)]
    brute = sorted(
        (j, i)
        for j, sp in enumerate(spans.iter_rows(named=True))
        for i, w in enumerate(words.iter_rows(named=True))
        if w["row"] == sp["row"] and w["s"] < sp["end"] and w["e"] > sp["start"]
    )
    assert pairs == brute


@pytest.fixture(scope="module")
def physionet(physionet_dir: Path) -> tuple[pa.Table, pa.Table]:
    return read_physionet(physionet_dir)


def default_inputs(documents: pa.Table, n: int) -> tuple[Any, pl.DataFrame, pl.DataFrame]:
    """The default detector over the first ``n`` notes, their word table and the rules' and
    lists' spans: what the CRF is given."""
    sample = documents.slice(0, n)
    found = detector(open_source(sample, 4096), DEFAULT_RECOGNIZERS)
    texts = sample.column("text").combine_chunks()
    tok, spans = found.found(texts)
    return found, token_table(texts, tok), spans


def test_the_physionet_model_tags_like_crfsuite(physionet):
    found, words, spans = default_inputs(physionet[0], 60)
    feats = crf_features(words, spans).sort("row", "i")
    crf = found.crf
    tagged = crf.tag(words, spans)
    rows = feats.get_column("row").to_list()
    starts, ends = feats.get_column("s").to_list(), feats.get_column("e").to_list()

    def reference(model: str, columns: list[str]) -> tuple[list[str], list[float], list[str]]:
        # CRFsuite's Viterbi tags, P(PHI) and most likely PHI label of every word.
        tagger = pycrfsuite.Tagger()
        tagger.open(str(physionet_crf() / model))
        phi = [x for x in tagger.labels() if x != "O"]
        values = feats.select(columns).rows()
        tags, p_phi, best = [], [], []
        for row in sorted(set(rows)):
            seq = [list(v) for r, v in zip(rows, values, strict=True) if r == row]
            tags += tagger.tag(seq)
            for t in range(len(seq)):
                p = {x: tagger.marginal(x, t) for x in phi}
                p_phi.append(1 - tagger.marginal("O", t))
                best.append(max(phi, key=lambda x: p[x]))
        return tags, p_phi, best

    tags, p_phi, _ = reference("crf.crfsuite", feature_columns(feats))
    got = tagged.spans.filter(~pl.col("source").str.starts_with("crf:find:"))
    want = [(s, e, t) for s, e, t in zip(starts, ends, tags, strict=True) if t != "O"]
    assert sorted(got.select("start", "end", "label").rows()) == sorted(want)
    assert any(t != "O" for t in tags)
    # The dump gives the weights to 6 decimals.
    np.testing.assert_allclose(tagged.words.get_column("p").to_numpy(), p_phi, atol=1e-4)
    # The finder sees no span feature; it tags the words it gives P(PHI) >= FIND.
    assert feature_columns(feats, spans=False) == [
        c for c in feature_columns(feats) if c.startswith("f")
    ]
    _, p_find, best = reference("finder.crfsuite", feature_columns(feats, spans=False))
    got = tagged.spans.filter(pl.col("source").str.starts_with("crf:find:"))
    want = [
        (s, e, b, f"crf:find:{b}")
        for s, e, p, b in zip(starts, ends, p_find, best, strict=True)
        if p >= FIND + 1e-4
    ]
    assert set(want) <= set(got.select("start", "end", "label", "source").rows())
    assert len(want) > 0 and got.height <= len(want) + sum(abs(p - FIND) < 1e-4 for p in p_find)


def test_note_runs_cut_between_whole_notes():
    rows = pl.Series("row", [0, 0, 0, 2, 2, 5, 6, 6, 6, 6])
    assert note_runs(rows, 3) == [(0, 0), (2, 5), (6, 6)]
    assert note_runs(rows, 100) == [(0, 6)]
    assert note_runs(rows, 1) == [(0, 0), (2, 2), (5, 5), (6, 6)]
    assert note_runs(rows.clear(), 5) == []


def test_tagging_in_runs_of_notes_changes_nothing(physionet, monkeypatch):
    found, words, spans = default_inputs(physionet[0], 40)
    whole = found.crf.tag(words, spans)
    monkeypatch.setattr(crf_module, "CHUNK_WORDS", 700)
    assert len(note_runs(words.get_column("row"), 700)) > 5
    runs = found.crf.tag(words.sample(fraction=1.0, shuffle=True, seed=1), spans)
    order = ["row", "start", "source"]
    assert runs.spans.sort(order).equals(whole.spans.sort(order))
    assert runs.words.sort("row", "s").equals(whole.words.sort("row", "s"))


def test_vetting_drops_unlikely_spans_of_learnt_categories_only():
    crf = CrfRecognizer(verify=0.2)
    spans = pl.DataFrame(
        {
            "row": [0, 0, 0, 0],
            "start": [0, 10, 20, 40],
            "end": [4, 14, 30, 41],
            "label": ["NAME", "NAME", "EMAIL", "DATE"],
            "source": ["lists:NAME", "rules:name_title", "rules:email", "rules:x"],
            "score": [1.0, 1.0, 1.0, 1.0],
        }
    )
    words = pl.DataFrame(
        {"row": [0, 0, 0, 0], "s": [0, 10, 20, 26], "e": [4, 14, 25, 30], "p": [0.1, 0.5, 0.0, 0.0]}
    )
    kept = crf.vet(spans, words)
    # NAME at 0-4 is below 0.2: dropped. The e-mail address is a category the model never
    # learnt: kept. The span at 40-41 covers no word: kept.
    assert kept.get_column("start").to_list() == [10, 20, 40]
    assert CrfRecognizer(verify=0.0).vet(spans, words).height == 4
    with pytest.raises(ConfigError, match="verify"):
        CrfRecognizer(verify=1.5)
    with pytest.raises(ConfigError, match="find"):
        CrfRecognizer(find=-0.1)


def test_find_one_turns_the_finder_off(physionet):
    found, words, spans = default_inputs(physionet[0], 30)
    on = found.crf.tag(words, spans).spans
    off = CrfRecognizer(find=1.0).tag(words, spans).spans
    assert on.filter(pl.col("source").str.starts_with("crf:find:")).height > 0
    assert off.filter(pl.col("source").str.starts_with("crf:find:")).height == 0
    order = ["row", "start", "source"]
    assert off.sort(order).equals(
        on.filter(~pl.col("source").str.starts_with("crf:find:")).sort(order)
    )


def test_word_labels_take_the_earliest_gold_span():
    words = pl.DataFrame({"row": [0, 0, 1], "i": [0, 1, 0], "s": [0, 5, 0], "e": [4, 9, 3]})
    span = lambda s, e, label: {"start": s, "end": e, "label": label, "source": "g", "score": 1.0}  # noqa: E731
    gold = pa.table(
        {"doc_id": ["a", "b"], "spans": [[span(5, 7, "Date"), span(3, 6, "HCPName")], []]}
    )
    got = word_labels(words, gold, ["a", "b"]).get_column("y").to_list()
    assert got == ["NAME", "NAME", "O"]


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2), st.integers(0, 500), st.integers(1, 20), st.sampled_from("DN")
        ),
        min_size=1,
        max_size=60,
        unique_by=lambda t: t[:3],
    ),
    st.data(),
)
def test_training_hides_each_span_by_its_own_keyed_draw(rows, data):
    def frame(rs):
        return pl.DataFrame(
            {
                "row": [r for r, *_ in rs],
                "start": [s for _, s, *_ in rs],
                "end": [s + n for _, s, n, _ in rs],
                "label": [lab for *_, lab in rs],
            },
            schema={"row": pl.Int64, "start": pl.Int64, "end": pl.Int64, "label": pl.String},
        )

    ids = ["note-a", "note-b", "note-c"]
    hidden = dict(zip(rows, hidden_spans(frame(rows), ids, 0.3, 0).to_list(), strict=True))
    # A span's fate does not hang on the other spans or their order: any subset, shuffled,
    # keeps it; another seed draws again.
    subset = data.draw(st.permutations(rows)).copy()[: data.draw(st.integers(1, len(rows)))]
    again = hidden_spans(frame(subset), ids, 0.3, 0).to_list()
    assert again == [hidden[r] for r in subset]
    # Keyed by the note's id, not its row.
    moved = [(2 - r, *rest) for r, *rest in rows]
    assert hidden_spans(frame(moved), ids[::-1], 0.3, 0).to_list() == list(hidden.values())


def test_training_hides_the_share_asked():
    n = 20_000
    spans = pl.DataFrame(
        {"row": [0] * n, "start": range(n), "end": range(1, n + 1), "label": ["DATE"] * n}
    )
    share = hidden_spans(spans, ["a"], 0.15, 0).mean()
    assert abs(share - 0.15) < 0.01
    assert hidden_spans(spans, ["a"], 0.0, 0).sum() == 0
    other = hidden_spans(spans, ["a"], 0.15, 1)
    assert (other != hidden_spans(spans, ["a"], 0.15, 0)).sum() > 0.2 * n


def test_training_is_deterministic_and_the_model_is_used(physionet, tmp_path):
    documents, gold = physionet
    ids = documents.column("patient_id").to_pylist()
    keep = [i for i, p in enumerate(ids) if p in set(sorted(set(ids))[:12])]
    docs, golds = documents.take(keep), gold
    options = CrfTrainOptions(max_iterations=40)
    first = train_crf(docs, golds, tmp_path / "a", options)
    train_crf(docs, golds, tmp_path / "b", options)
    for model in ("crf.crfsuite", "finder.crfsuite"):
        assert (tmp_path / "a" / model).read_bytes() == (tmp_path / "b" / model).read_bytes()
    info = json.loads((tmp_path / "a" / "phisieve.json").read_text())
    assert info["format"] == FORMAT and info["notes"] == len(keep)
    assert info["refilled_copies"] == {"copied": len(keep), "skipped": 0}
    assert info["options"] == {
        "c1": 0.05,
        "c2": 0.01,
        "max_iterations": 40,
        "drop_spans": 0.15,
        "augment": 2,
        "seed": 0,
    }
    assert first["phi_words"] > 0 and "O" in info["labels"]
    for model, key in (("crf.crfsuite", "labels"), ("finder.crfsuite", "finder_labels")):
        tagger = pycrfsuite.Tagger()
        tagger.open(str(tmp_path / "a" / model))
        assert info[key] == sorted(tagger.labels())  # what each model can emit
        tagger.close()
    assert set(info["finder_labels"]) - set(info["labels"]) == {"ID"}  # from the copies only
    # No text of the notes in what the model folder records.
    assert not any(w in json.dumps(info) for w in ("Dr.", "Hospital"))
    found = find_spans(docs.slice(0, 20), ["rules", "lists", f"crf:{tmp_path / 'a'}"])
    sources = {s["source"] for row in found.column("spans").to_pylist() for s in row}
    assert any("crf:" in s for s in sources)


def attributes(model: Path) -> set[str]:
    tagger = pycrfsuite.Tagger()
    tagger.open(str(model))
    found = {attr for attr, _ in tagger.info().state_features}
    tagger.close()
    return found


def test_the_finder_learns_from_refilled_copies_too_the_tagger_does_not(physionet, tmp_path):
    documents, gold = physionet
    docs = documents.slice(0, 40)
    options = CrfTrainOptions(max_iterations=30, augment=1, seed=4)
    train_crf(docs, gold, tmp_path / "m", options)
    copies, _, _ = refilled(docs, gold, 1, seed=4)
    words = {f"w={w}" for t in copies.column("text").to_pylist() for w in normalized(t)}
    words -= {f"w={w}" for t in docs.column("text").to_pylist() for w in normalized(t)}
    assert words  # the surrogates bring words the notes do not have
    assert attributes(tmp_path / "m" / "finder.crfsuite") & words
    assert not attributes(tmp_path / "m" / "crf.crfsuite") & words
    # Without copies, neither model has them.
    train_crf(docs, gold, tmp_path / "none", replace(options, augment=0))
    info = json.loads((tmp_path / "none" / "phisieve.json").read_text())
    assert info["refilled_copies"] == {"copied": 0, "skipped": 0}
    assert not attributes(tmp_path / "none" / "finder.crfsuite") & words
    tagger = [(tmp_path / m / "crf.crfsuite").read_bytes() for m in ("m", "none")]
    assert tagger[0] == tagger[1]  # the tagger never sees the copies


def test_training_options_are_checked(physionet, tmp_path):
    documents, gold = physionet
    bad_options = (CrfTrainOptions(drop_spans=1.0), CrfTrainOptions(c1=-1.0),
                   CrfTrainOptions(augment=-1))  # fmt: skip
    for bad in bad_options:
        with pytest.raises(ConfigError):
            train_crf(documents.slice(0, 2), gold, tmp_path / "m", bad)
    assert not (tmp_path / "m").exists()


def test_model_folders_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="not a CRF model folder"):
        CrfRecognizer(tmp_path)
    shutil.copytree(physionet_crf(), tmp_path / "old")
    info = json.loads((tmp_path / "old" / "phisieve.json").read_text())
    (tmp_path / "old" / "phisieve.json").write_text(json.dumps({**info, "format": "x"}))
    with pytest.raises(ConfigError, match="format 'x'"):
        CrfRecognizer(tmp_path / "old")
    with pytest.raises(ConfigError, match="crf recognizer once"):
        find_spans(pa.table({"doc_id": ["a"], "text": ["x"]}), ["crf", f"crf:{physionet_crf()}"])


def test_cross_validation_never_uses_a_trained_crf(physionet):
    documents, gold = physionet
    with pytest.raises(ConfigError, match="may have seen the held-out"):
        cross_validate(documents, gold, ["rules", f"crf:{physionet_crf()}"], k=2)


def test_default_detection_runs_the_physionet_crf():
    assert DEFAULT_RECOGNIZERS == ("rules", "lists", "crf")
    text = "Seen 7/22/97 by Dr. Quaxley Mesite; e-mail jo@example.org."
    found = find_spans(pa.table({"doc_id": ["a"], "text": [text]}))
    spans = found.column("spans").to_pylist()[0]
    assert {text[s["start"] : s["end"]] for s in spans} >= {"7/22/97", "Mesite", "jo@example.org"}


def test_the_physionet_crf_comes_from_its_own_distribution():
    import phisieve_models_physionet

    folder = physionet_crf()
    assert folder == phisieve_models_physionet.crf_path()
    assert sorted(p.name for p in folder.iterdir()) == [
        "crf.crfsuite",
        "finder.crfsuite",
        "phisieve.json",
    ]
    package = Path(crf_module.__file__).resolve().parents[2]  # phisieve's own folder
    assert package.name == "phisieve" and package not in folder.resolve().parents
    assert CrfRecognizer().folder == folder  # the bare `crf` loads it
    assert MODELS == "phisieve-models-physionet"


NOTE = "Seen 7/22/97 by Dr. Quaxley Mesite at Ombrell Hospital."


def test_crf_without_its_distribution_says_how_to_install_it(monkeypatch, tmp_path, capsys):
    from phisieve.cli import main
    from phisieve.detect.stage import DetectStage
    from phisieve.pipeline.runner import write_dataset

    own = tmp_path / "own"
    shutil.copytree(physionet_crf(), own)
    write_dataset(pa.table({"doc_id": ["a"], "text": [NOTE]}), tmp_path / "docs")
    # As when phisieve-models-physionet is not installed: its package cannot be imported.
    monkeypatch.setitem(sys.modules, "phisieve_models_physionet", None)
    notes = pa.table({"doc_id": ["a"], "text": [NOTE]})
    calls = (
        lambda: find_spans(notes),  # the default recognizers
        lambda: find_spans(notes, ["rules", "crf"]),
        lambda: CrfRecognizer(),
        lambda: DetectStage(recognizers="rules,lists,crf"),
    )
    for call in calls:
        with pytest.raises(MissingModelError) as raised:
            call()
        message = str(raised.value)
        assert "the recognizer `crf` needs the model distribution" in message
        assert "pip install phisieve-models-physionet" in message and "make build" in message
        assert "--recognizers rules,lists" in message
        assert not any(w in message for w in ("7/22/97", "Quaxley", "Mesite", "Ombrell"))
        assert isinstance(raised.value, MissingDependencyError)  # a PhisieveError, an ImportError
        assert isinstance(raised.value, PhisieveError) and isinstance(raised.value, ImportError)
        assert raised.value.distribution == MODELS
    # Without the bare `crf`, nothing is missing: rules and lists, or a CRF of one's own.
    assert find_spans(notes, ["rules", "lists"]).num_rows == 1
    found = find_spans(notes, ["rules", "lists", f"crf:{own}"]).column("spans").to_pylist()[0]
    assert any("crf:" in s["source"] for s in found)
    # The command stops before writing anything, on one line that names the distribution.
    with pytest.raises(SystemExit) as exited:
        main(["detect", str(tmp_path / "docs"), "--out", str(tmp_path / "spans")])
    assert exited.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "pip install phisieve-models-physionet" in err and "Quaxley" not in err
    assert not (tmp_path / "spans").exists()
    main(["detect", str(tmp_path / "docs"), "--out", str(tmp_path / "spans"),
          "--recognizers", "rules,lists", "-q"])  # fmt: skip
    assert (tmp_path / "spans").is_dir()


def test_a_broken_model_distribution_is_not_reported_as_missing(monkeypatch, tmp_path):
    # Installed, but it imports something that is not: that error is not "pip install me".
    fake = tmp_path / "phisieve_models_physionet"
    fake.mkdir()
    (fake / "__init__.py").write_text("import phisieve_no_such_module\n")
    monkeypatch.delitem(sys.modules, "phisieve_models_physionet", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as raised:
        physionet_crf()
    assert not isinstance(raised.value, MissingModelError)
    assert raised.value.name == "phisieve_no_such_module"
