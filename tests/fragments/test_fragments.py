"""Fragment shuffling: chunkers (spaCy's definitions, Stanza's tree walk on bracketed trees),
the mixing's guarantees (property tests), the filters on the PhysioNet notes, the stage's
independence from worker counts and batch sizes, and encode on fragments."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phisieve.errors import ConfigError
from phisieve.fragments.chunkers import (
    SpacyChunker,
    StanzaChunker,
    constituents,
    parse_text,
    windows,
)
from phisieve.fragments.mix import mix
from phisieve.io.dataset import dataset_files
from phisieve.pipeline.runner import run_stage


@pytest.fixture(scope="module")
def spacy_chunker() -> SpacyChunker:
    return SpacyChunker()


# -- chunkers ---------------------------------------------------------------------------------


def test_the_parsed_text_keeps_every_offset():
    text = "PT SEEN BY [**Doctor Last Name 12**] TODAY.\nBP STABLE, İ"
    parsed = parse_text(text)
    assert len(parsed) == len(text)
    assert parsed.startswith("pt seen by xxxxxxxx")  # one word, lower-cased with the note
    assert parsed[11:36] == "x" * 25 and parsed.endswith("İ")
    assert parse_text("Seen by [**Name**] today") == "Seen by Xxxxxxxxxx today"


def test_long_notes_are_parsed_in_windows_cut_at_line_breaks():
    text = "".join(f"line {i} of the note\n" for i in range(1000))
    pieces = list(windows(text, size=500))
    assert "".join(p for _, p in pieces) == text
    assert all(len(p) <= 500 and p.endswith("\n") for _, p in pieces)
    assert [o for o, _ in pieces] == [
        sum(len(p) for _, p in pieces[:i]) for i in range(len(pieces))
    ]
    assert [p for _, p in windows("x" * 1200, size=500)] == ["x" * 500, "x" * 500, "x" * 200]


def test_spacy_chunks_follow_the_written_definitions(spacy_chunker):
    texts = [
        "The patient was not discharged home. She denies chest pain.",
        "PT WAS SEEN BY [**Doctor Last Name 123**] TODAY.\nHEPARIN GTT STARTED.",
        "Will follow up\nwith cardiology in two weeks.",
        "",
    ]
    chunks = spacy_chunker(texts)
    got = [[(t[s:e], k, n) for s, e, k, n in c] for t, c in zip(texts, chunks, strict=True)]
    assert got[0] == [
        ("The patient", "NP", 2),
        ("was not discharged home", "VP", 4),  # verb, auxiliary, negation, adverb
        ("denies chest pain", "VP", 3),  # verb and its object's subtree
        ("chest pain", "NP", 2),
    ]
    # An upper-case note parsed lower-cased (cut from the original text); the placeholder
    # is one word, and no chunk crosses the line break.
    assert got[1] == [("WAS SEEN", "VP", 2), ("HEPARIN GTT", "NP", 2)]
    assert got[2] == [("Will follow up", "VP", 3), ("two weeks", "NP", 2)]
    assert got[3] == []


def test_spacy_chunks_do_not_depend_on_batches_or_processes(spacy_chunker):
    texts = [f"The patient {i} was seen by the team and felt well." for i in range(12)]
    whole = spacy_chunker(texts)
    assert [c for i in range(0, 12, 5) for c in spacy_chunker(texts[i : i + 5])] == whole
    assert SpacyChunker(processes=2, batch_size=3)(texts) == whole


def test_the_tag_rules_set_what_the_attribute_ruler_sets(spacy_chunker, synth_docs):
    """spaCy's attribute ruler is replaced by :class:`TagRules` (numpy over a batch): the same
    POS, tags, labels and heads on the synthetic notes and on sentences that its rules name
    (expletives, auxiliaries, pronouns, subordinators, spaces)."""
    import numpy as np
    from spacy.attrs import DEP, HEAD, POS, TAG

    from phisieve.fragments.chunkers import spacy_pipeline

    nlp, rules = spacy_pipeline()
    assert rules is not None and "attribute_ruler" in nlp.disabled
    texts = [
        *_read(synth_docs)["text"].to_pylist()[:20],
        "There are two lesions. There's one. Is there pain?",
        "He has had pain but did not take it. She does. They have been seen; I'd go.",
        "Something is wrong, nobody knows that, which is why it is so.  \n\n  Then",
        "If she improves we will discharge her, although she ain't ready. Do you?",
    ]
    fast = list(nlp.pipe(texts, batch_size=7))
    for b in range(0, len(fast), 7):
        rules(fast[b : b + 7])
    nlp.enable_pipe("attribute_ruler")
    try:
        ruled = list(nlp.pipe(texts))
    finally:
        nlp.disable_pipe("attribute_ruler")
    for a, b in zip(ruled, fast, strict=True):
        assert np.array_equal(a.to_array([POS, TAG, DEP, HEAD]), b.to_array([POS, TAG, DEP, HEAD]))


def _tree(bracketed: str):
    from stanza.models.constituency.tree_reader import read_trees

    return read_trees(bracketed)[0]


def test_the_stanza_tree_walk_keeps_nested_nps_and_vps_of_two_to_four_words():
    tree = _tree(
        "(ROOT (S (NP (DT The) (NN patient)) (VP (VBD was) (RB not) (VP (VBN discharged) "
        "(NP (DT the) (JJ next) (NN day)))) (. .)))"
    )
    # The outer VP has 6 words: only its inner VP and the NPs are kept.
    assert constituents(tree) == [(0, 2, "NP", 2), (4, 8, "VP", 4), (5, 8, "NP", 3)]
    tree = _tree("(ROOT (NP (NP (NN pain)) (, ,) (NP (JJ chest) (NN pain)) (. .)))")
    # Punctuation is no word: the outer NP has 3; a one-word NP is too short.
    assert constituents(tree) == [(0, 5, "NP", 3), (2, 4, "NP", 2)]
    assert constituents(tree, kinds=("VP",)) == []


def test_a_missing_stanza_model_names_the_download_command(tmp_path):
    with pytest.raises(ConfigError, match=r"stanza\.download\('en', processors='tokenize,pos"):
        StanzaChunker(model_dir=str(tmp_path))


# -- mixing -----------------------------------------------------------------------------------


def _fragments(rows: list[tuple[str, str, int, str]]) -> pa.Table:
    return pa.table(
        {
            "source_doc": pa.array([d for d, _, _, _ in rows], pa.string()),
            "source_patient": pa.array([p for _, p, _, _ in rows], pa.string()),
            "start": pa.array([s for _, _, s, _ in rows], pa.int32()),
            "end": pa.array([s + 5 for _, _, s, _ in rows], pa.int32()),
            "kind": pa.array([k for _, _, _, k in rows], pa.string()),
            "text": pa.array([f"{d}:{s}:{k}" for d, _, s, k in rows], pa.string()),
        }
    )


fragment_rows = st.lists(
    st.tuples(
        st.integers(0, 12), st.integers(0, 40), st.sampled_from(["NP", "VP"])
    ),  # (document, start, kind); a document's patient is fixed below
    max_size=150,
    unique=True,
)


@settings(max_examples=60, deadline=None)
@given(fragment_rows, st.integers(0, 3), st.integers(0, 3), st.integers(1, 3), st.integers(0, 9))
def test_no_example_links_two_pieces_of_one_document_or_patient(rows, nps, vps, reuse, seed):
    if nps + vps == 0:
        with pytest.raises(ConfigError):
            mix(_fragments([]), nps=nps, vps=vps)
        return
    table = _fragments([(f"d{d}", f"p{d % 5}", s, k) for d, s, k in rows])
    examples, supply = mix(table, nps=nps, vps=vps, reuse=reuse, seed=seed)
    used: dict[str, int] = {}
    for ex in examples.column("parts").to_pylist():
        assert [p["kind"] for p in ex].count("NP") == nps
        assert [p["kind"] for p in ex].count("VP") == vps
        assert len({p["source_doc"] for p in ex}) == len(ex)
        assert len({p["source_patient"] for p in ex}) == len(ex)
        for p in ex:
            used[p["text"]] = used.get(p["text"], 0) + 1
    assert all(n <= reuse for n in used.values())
    assert examples.column("example_id").to_pylist() == list(range(examples.num_rows))
    assert supply["examples"] == examples.num_rows
    assert supply["NP"]["used"] == nps * examples.num_rows
    assert supply["VP"]["used"] == vps * examples.num_rows
    # A pure function of the seed and the set of fragments: never of their order.
    order = random.Random(seed).sample(range(table.num_rows), table.num_rows)
    shuffled = table.take(pa.array(order, pa.int64()))
    assert mix(shuffled, nps=nps, vps=vps, reuse=reuse, seed=seed)[0].equals(examples)


def test_copies_with_equal_hashes_are_dealt_by_document_offsets_and_copy(monkeypatch):
    import types

    import phisieve.fragments.mix as mixing

    class Same:  # every keyed hash equal: the order falls back on the place and the copy
        def __init__(self, *args, **kwargs):
            pass

        def digest(self) -> bytes:
            return bytes(8)

    monkeypatch.setattr(mixing, "hashlib", types.SimpleNamespace(blake2b=Same))
    rows = [(f"d{d}", f"p{d}", s, "NP") for d in (3, 1, 2) for s in (5, 0)]
    order = mixing._order(_fragments(rows), "NP", 2, 0).tolist()
    places = [(rows[k // 2][0], rows[k // 2][2], k % 2) for k in range(2 * len(rows))]
    assert [places[k] for k in order] == sorted(places)


def test_examples_use_the_supply_until_one_kind_runs_out():
    rows = [(f"d{i}", f"p{i}", 0, "NP") for i in range(10)]
    rows += [(f"d{i}", f"p{i}", 10, "VP") for i in range(10, 15)]
    examples, supply = mix(_fragments(rows), nps=2, vps=2, reuse=1, seed=3)
    assert examples.num_rows == 2 and supply["ran_out"] == "VP"
    assert supply["NP"] == {"fragments": 10, "copies": 10, "used": 4}
    twice = mix(_fragments(rows), nps=2, vps=2, reuse=2, seed=3)[1]
    assert twice["examples"] == 5 and twice["VP"]["copies"] == 10
    assert [p["kind"] for p in examples.column("parts")[0].as_py()] == ["NP", "VP", "NP", "VP"]
    other = mix(_fragments(rows), nps=2, vps=2, reuse=1, seed=4)[0]
    assert not other.equals(examples)  # the seed decides the draw


# -- the stage --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synth_docs(tmp_path_factory) -> Path:
    import phisieve

    docs = tmp_path_factory.mktemp("fragments") / "docs"
    phisieve.synth(docs, patients=12, seed=4)
    return docs


def _read(out: Path) -> pa.Table:
    return pa.concat_tables(pq.read_table(f) for f in dataset_files(out))


def test_the_output_does_not_depend_on_processes_or_batch_sizes(tmp_path, synth_docs):
    from phisieve.fragments.stage import FragmentStage

    outs = []
    for workers, rows in ((1, 1024), (2, 7)):
        stage = FragmentStage(k=2, seed=1)
        stage.batch_rows = rows
        out = tmp_path / f"frags-{workers}-{rows}"
        m = run_stage(stage, {"docs": synth_docs}, out, workers=workers)
        outs.append((m["fingerprint"], _read(out)))
    assert outs[0][0] == outs[1][0]
    examples = outs[0][1]
    assert examples.num_rows > 20
    report = json.loads((tmp_path / "frags-1-1024.meta" / "report.json").read_text())
    f = report["fragments"]
    assert f["all"] == f["NP"]["cut"] + f["VP"]["cut"] and f["kept"] < f["all"]
    assert report["dropped"]["rare"] == f["all"] - f["kept"]  # --k is the only filter here
    assert report["supply"]["examples"] == examples.num_rows
    assert report["supply"]["blocks"] == 1
    for kind in ("NP", "VP"):
        assert set(f[kind]["by_length"]) <= {"2", "3", "4"}
    # Every piece is the text of its source document at some place.
    docs = _read(synth_docs)
    text = dict(zip(docs["doc_id"].to_pylist(), docs["text"].to_pylist(), strict=True))
    for ex in examples.to_pylist()[:50]:
        assert ex["text"] == " ".join(p["text"] for p in ex["parts"])
        assert all(p["text"] in text[p["source_doc"]] for p in ex["parts"])


def test_blocks_give_the_same_output_with_any_processes_and_batch_sizes(tmp_path, synth_docs):
    """Blocks of about 20 of the 66 notes (about 4 patients each: examples of one NP and one
    VP): the same bytes with 1 and 2 workers and any batch size; every example's pieces come
    from one block; the report's counts add up over the blocks to those of one block."""
    from phisieve.fragments.make import block_bounds
    from phisieve.fragments.stage import FragmentStage
    from phisieve.io.sources import open_source

    docs = _read(synth_docs)
    span = pa.struct([("start", pa.int32()), ("end", pa.int32()), ("label", pa.string())])
    gold = pa.table(
        {
            "doc_id": docs["doc_id"],
            "spans": pa.array([[{"start": 0, "end": 40, "label": "NAME"}]] * docs.num_rows,
                              pa.list_(span)),
        }
    )  # fmt: skip

    def run(name: str, workers: int, rows: int, block: int) -> tuple[str, dict]:
        stage = FragmentStage(k=2, seed=1, nps=1, vps=1, block_notes=block)
        stage.batch_rows = rows
        inputs = {"docs": synth_docs, "gold": gold}
        m = run_stage(stage, inputs, tmp_path / name, workers=workers)
        return m["fingerprint"], json.loads((tmp_path / f"{name}.meta" / "report.json").read_text())

    one = run("one", 1, 1024, 10_000)[1]
    first, report = run("a", 1, 1024, 20)
    assert run("b", 2, 7, 20)[0] == first
    assert run("c", 1, 5, 20)[0] == first
    bounds = block_bounds(open_source(synth_docs), 20)
    assert report["supply"]["blocks"] == len(bounds) >= 3
    assert [row["text"] for row in one["gold"]] == ["full text", "fragments", "- rare"]
    for key in ("notes", "words", "words_in_fragments", "coverage", "fragments", "dropped", "gold"):
        assert report[key] == one[key], key
    for kind in ("NP", "VP"):
        assert report["supply"][kind]["copies"] == one["supply"][kind]["copies"]
    block_of = {}
    for b, (lo, hi) in enumerate(bounds):
        for doc in docs["doc_id"].to_pylist()[lo:hi]:
            block_of[doc] = b
    examples = _read(tmp_path / "a")
    assert examples.num_rows == report["supply"]["examples"] > 0
    assert examples["example_id"].to_pylist() == list(range(examples.num_rows))
    blocks_used = set()
    for ex in examples["parts"].to_pylist():
        assert len({block_of[p["source_doc"]] for p in ex}) == 1
        blocks_used.add(block_of[ex[0]["source_doc"]])
    assert len(blocks_used) > 1


def test_blocks_end_where_the_patient_changes():
    from phisieve.fragments.make import block_bounds
    from phisieve.io.sources import open_source

    def bounds(patients: list[str], notes: int, batch: int = 3) -> list[tuple[int, int]]:
        table = pa.table({"patient_id": patients})
        return block_bounds(open_source(table, batch), notes)

    patients = ["a", "a", "b", "b", "b", "c", "d", "d"]
    assert bounds(patients, 3) == [(0, 2), (2, 5), (5, 8)]
    assert bounds(patients, 2) == [(0, 2), (2, 5), (5, 6), (6, 8)]
    assert bounds(patients, 2, batch=1) == bounds(patients, 2, batch=100)
    assert bounds(patients, 8) == bounds(patients, 100) == [(0, 8)]
    assert bounds(["a"] * 10, 2) == [(0, 10)]  # one patient: one block
    assert bounds([], 5) == [(0, 0)]
    with pytest.raises(ConfigError):
        bounds(patients, 0)


def test_encode_packs_one_fragments_example_per_sequence(tmp_path, synth_docs, minilm):
    from phisieve.encode.stage import EncodeStage
    from phisieve.fragments.stage import FragmentStage

    run_stage(FragmentStage(), {"docs": synth_docs}, tmp_path / "frags")
    m = run_stage(
        EncodeStage(max_len=64), {"docs": tmp_path / "frags", "tokenizer": minilm}, tmp_path / "enc"
    )
    examples = _read(tmp_path / "frags")
    enc = _read(tmp_path / "enc")
    assert m["sequences"] == enc.num_rows >= examples.num_rows
    ids = {str(i) for i in examples.column("example_id").to_pylist()}
    assert set(enc.column("patient_id").to_pylist()) == ids
    assert all(len(d) == 1 for d in enc.column("doc_ids").to_pylist())


@pytest.mark.slow
def test_filtered_physionet_fragments_hold_no_protected_word(
    tmp_path, physionet_docs, physionet_terms, physionet_spans
):
    """The bar: with --terms and --spans, no fragment holds an indirect identifier or a word
    found inside a detected span, and none overlaps a span in its note."""
    from phisieve.fragments.stage import FragmentStage
    from phisieve.pipeline.runner import write_dataset
    from phisieve.protection.scope import DocSpans
    from phisieve.term_index.build import read_terms
    from phisieve.text.words import tokenize

    # The notes of the first 25 of the 82 patients (spaCy parses each note: the whole corpus
    # took 48 s), protected by the whole corpus's index and their spans: about 2,500 examples.
    docs = _read(physionet_docs)
    patients = list(dict.fromkeys(docs["patient_id"].to_pylist()))[:25]
    docs = docs.filter(pc.is_in(docs["patient_id"], pa.array(patients)))
    write_dataset(docs, tmp_path / "d")
    out = tmp_path / "frags"
    m = run_stage(
        FragmentStage(reuse=2),
        {"docs": tmp_path / "d", "terms": physionet_terms, "spans": physionet_spans},
        out,
    )
    examples = _read(out)
    parts = [p for ex in examples.column("parts").to_pylist() for p in ex]
    assert m["examples"] == examples.num_rows > 500
    terms = read_terms(physionet_terms)
    indirect = set(
        terms.filter(pc.and_(terms["indirect"], pc.equal(terms["n"], 1)))["term"].to_pylist()
    )
    spans = DocSpans.read(physionet_spans)
    text = dict(zip(docs["doc_id"].to_pylist(), docs["text"].to_pylist(), strict=True))
    inside: set[str] = set()
    for doc, (s, e) in spans.items():
        if doc not in text:  # a note of another patient
            continue
        words = tokenize([text[doc]])
        cols = (words.column(c)[0].as_py() for c in ("starts", "ends", "words"))
        for ws, we, w in zip(*cols, strict=True):
            if any(ws < b and we > a for a, b in zip(s, e, strict=True)):
                inside.add(w)
    words = tokenize([p["text"] for p in parts]).column("words").to_pylist()
    assert not [p["text"] for p, ws in zip(parts, words, strict=True) if set(ws) & indirect]
    assert not [p["text"] for p, ws in zip(parts, words, strict=True) if set(ws) & inside]
    assert all(p["text"] in text[p["source_doc"]] for p in parts)


def test_empty_and_null_notes_give_no_fragment(tmp_path):
    from phisieve.fragments.stage import FragmentStage
    from phisieve.io.schema import FRAGMENTS

    docs = pa.table({"doc_id": ["a", "b", "c"], "patient_id": ["p", "q", "q"],
                     "text": pa.array(["", None, "\n\n"], pa.string())})  # fmt: skip
    m = run_stage(FragmentStage(k=2), {"docs": docs}, tmp_path / "frags")
    assert m["examples"] == m["rows"] == 0
    assert m["report"]["notes"] == 3 and m["report"]["fragments"]["all"] == 0
    assert _read(tmp_path / "frags").schema.equals(FRAGMENTS)
