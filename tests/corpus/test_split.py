"""``phisieve split``: patients go to exactly one part, exact part sizes, an assignment that
depends on the seed and the set of patients only, and the dataset contract of every part."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from phisieve.api import split
from phisieve.corpus.split import assign, check_fractions, parse_fractions, part_sizes
from phisieve.errors import ConfigError, InputError, OutputExistsError
from phisieve.io.dataset import dataset_files, read_manifest
from phisieve.io.sources import open_source
from phisieve.pipeline.runner import write_dataset

PARTS = ("members", "reference", "heldout")
FRACTIONS = {"members": 0.6, "reference": 0.2, "heldout": 0.2}
PATIENTS = [f"p{i:02d}" for i in range(10)]


def corpus(patients: int = 10) -> pa.Table:
    """``patients`` patients p00, p01..., patient i with i % 3 + 1 notes, grouped by patient."""
    doc_ids, pids, texts = [], [], []
    for p in range(patients):
        for d in range(p % 3 + 1):
            doc_ids.append(f"p{p:02d}-{d}")
            pids.append(f"p{p:02d}")
            texts.append(f"note {d} of patient {p}")
    return pa.table(
        {
            "doc_id": doc_ids,
            "patient_id": pids,
            "group_id": pa.array([None] * len(pids), pa.string()),
            "text": pa.array(texts, pa.large_string()),
        }
    )


def read_part(path) -> pa.Table:
    return pa.concat_tables([pq.read_table(f) for f in dataset_files(path)])


def parts_of(out) -> dict[str, pa.Table]:
    return {name: read_part(out / name) for name in PARTS}


def assignment(out) -> dict[str, str]:
    """patient -> part, read back from the written parts."""
    return {
        p: name for name, t in parts_of(out).items() for p in t.column("patient_id").to_pylist()
    }


def test_parts_are_disjoint_cover_every_patient_and_have_exact_sizes(tmp_path):
    docs = corpus(10)
    write_dataset(docs, tmp_path / "docs")
    s = split(tmp_path / "docs", tmp_path / "split")["split"]
    parts = parts_of(tmp_path / "split")
    patients = {name: set(t.column("patient_id").to_pylist()) for name, t in parts.items()}
    assert [len(patients[n]) for n in PARTS] == [6, 2, 2]
    assert set().union(*patients.values()) == set(docs.column("patient_id").to_pylist())
    assert sum(len(p) for p in patients.values()) == 10  # disjoint
    assert sum(t.num_rows for t in parts.values()) == docs.num_rows == 19
    for name, t in parts.items():
        # Every column kept; rows in input order within the part.
        want = docs.filter(pc.is_in(docs["patient_id"], pa.array(sorted(patients[name]))))
        assert t.equals(want.cast(t.schema))
        m = read_manifest(tmp_path / "split" / name)
        assert m["stage"] == "split" and m["rows"] == t.num_rows
        assert m["options"]["part"] == name and m["options"]["seed"] == 0
        assert m["split"]["part"] == name
        assert m["split"]["parts"][name] == {
            "path": str(tmp_path / "split" / name),
            "units": len(patients[name]),
            "patients": len(patients[name]),
            "rows": t.num_rows,
        }
    assert s["units"] == 10 and s["rows"] == 19 and s["by"] == "patient"
    assert s["fractions"] == FRACTIONS
    # out/ holds the parts and their .meta folders only (hidden lock files aside).
    visible = sorted(p.name for p in (tmp_path / "split").iterdir() if p.name[0] != ".")
    assert visible == sorted([*PARTS, *(f"{n}.meta" for n in PARTS)])


def test_assignment_is_pinned_for_seed_0(tmp_path):
    # The order is BLAKE2b keyed by the seed: a change would silently move patients between
    # members and held-out in audits that are re-run, so it is pinned.
    split(corpus(10), tmp_path / "s")
    got = assignment(tmp_path / "s")
    assert {p for p, n in got.items() if n == "reference"} == {"p07", "p08"}
    assert {p for p, n in got.items() if n == "heldout"} == {"p00", "p06"}
    assert got == assign(PATIENTS, check_fractions(FRACTIONS), 0)


def test_assignment_ignores_row_order_and_batch_boundaries(tmp_path):
    docs = corpus(30)
    split(docs, tmp_path / "a", seed=5)
    # Shuffle the patients' blocks (each patient's notes stay together and in order) and read
    # in batches of 3 rows.
    blocks: dict[str, list[int]] = {}
    for i, p in enumerate(docs.column("patient_id").to_pylist()):
        blocks.setdefault(p, []).append(i)
    order = list(blocks)
    random.Random(1).shuffle(order)
    shuffled = docs.take(pa.array([i for p in order for i in blocks[p]]))
    split(open_source(shuffled, batch_size=3), tmp_path / "b", seed=5)
    assert assignment(tmp_path / "a") == assignment(tmp_path / "b")
    for name in PARTS:
        a, b = read_part(tmp_path / "a" / name), read_part(tmp_path / "b" / name)
        assert sorted(a.column("doc_id").to_pylist()) == sorted(b.column("doc_id").to_pylist())


def test_another_seed_gives_another_assignment(tmp_path):
    split(corpus(30), tmp_path / "a", seed=0)
    split(corpus(30), tmp_path / "b", seed=1)
    a, b = assignment(tmp_path / "a"), assignment(tmp_path / "b")
    assert a != b
    assert sorted(a.values()) == sorted(b.values())  # the same sizes: 18 / 6 / 6


def test_part_sizes_largest_remainder():
    f = FRACTIONS
    assert part_sizes(10, f) == {"members": 6, "reference": 2, "heldout": 2}
    # 4.2 / 1.4 / 1.4: one patient left, the tie goes to the earlier part.
    assert part_sizes(7, f) == {"members": 4, "reference": 2, "heldout": 1}
    assert part_sizes(1, f) == {"members": 1, "reference": 0, "heldout": 0}
    assert part_sizes(0, f) == {"members": 0, "reference": 0, "heldout": 0}
    assert part_sizes(3, {"a": 0.5, "b": 0.5}) == {"a": 2, "b": 1}
    thirds = {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}
    assert part_sizes(100, thirds) == {"a": 34, "b": 33, "c": 33}


def test_parse_fractions():
    assert parse_fractions("members=0.6,reference=0.2,heldout=0.2") == {
        "members": 0.6,
        "reference": 0.2,
        "heldout": 0.2,
    }
    assert list(parse_fractions(" b = 0.5 , a=0.5")) == ["b", "a"]  # order kept
    for bad in (
        "members=0.6;heldout=0.4",
        "members",
        "members=",
        "=1",
        "members=x,heldout=0.5",
        "a=0.5,a=0.5",
        "members=0.6,heldout=0.3",  # sums to 0.9
        "members=1.2,heldout=-0.2",
        "members=1,heldout=0",
        "../up=0.5,b=0.5",
        "a.meta=0.5,b=0.5",
        "A=0.5,a=0.5",  # the same folder on case-insensitive file systems
        "a=nan,b=0.5",
        "",
    ):
        with pytest.raises(ConfigError):
            parse_fractions(bad)


def test_bad_options_are_refused_before_anything_is_written(tmp_path):
    docs = corpus(4)
    for kw in (
        {"fractions": "members=0.5,heldout=0.4"},
        {"fractions": "members/x=0.5,heldout=0.5"},
        {"by": "visit"},
        {"seed": -1},
        {"seed": 2**64},
    ):
        with pytest.raises(ConfigError):
            split(docs, tmp_path / "out", **kw)
    assert not (tmp_path / "out").exists()
    nulls = pa.table({"doc_id": ["a", "b"], "patient_id": ["p", None], "text": ["x", "y"]})
    with pytest.raises(InputError, match="row 1"):
        split(nulls, tmp_path / "out")
    with pytest.raises(InputError, match="twice"):
        split(pa.RecordBatchReader.from_batches(docs.schema, docs.to_batches()), tmp_path / "o2")
    with pytest.raises(InputError, match="patient_id"):
        split(docs.drop_columns(["patient_id"]), tmp_path / "o3")


def test_rerun_needs_overwrite_and_out_holds_only_parts(tmp_path):
    out = tmp_path / "split"
    split(corpus(10), out, seed=0)
    with pytest.raises(OutputExistsError):
        split(corpus(10), out, seed=0)
    split(corpus(10), out, seed=3, overwrite=True)
    assert read_manifest(out / "members")["options"]["seed"] == 3
    assert assignment(out) == assign(PATIENTS, FRACTIONS, 3)
    (out / "notes.txt").write_text("x")
    with pytest.raises(InputError, match=r"notes\.txt"):
        split(corpus(10), out, overwrite=True)
    write_dataset(corpus(2), tmp_path / "ds")
    with pytest.raises(InputError, match="not a dataset itself"):
        split(corpus(10), tmp_path / "ds", overwrite=True)
    with pytest.raises(InputError, match="lie in an input"):
        split(tmp_path / "ds", tmp_path / "ds" / "inside")


def test_by_document(tmp_path):
    docs = corpus(10)  # 19 documents
    s = split(docs, tmp_path / "s", by="document", fractions="train=0.5,test=0.5")["split"]
    train, test = read_part(tmp_path / "s" / "train"), read_part(tmp_path / "s" / "test")
    assert (train.num_rows, test.num_rows) == (10, 9)  # 9.5 each: the tie goes to train
    assert set(train["doc_id"].to_pylist()).isdisjoint(test["doc_id"].to_pylist())
    assert s["units"] == 19
    assert s["parts"]["train"]["patients"] == len(set(train["patient_id"].to_pylist()))


def test_split_command_prints_the_parts(tmp_path, capsys):
    from phisieve.cli import main

    write_dataset(corpus(10), tmp_path / "docs")
    argv = ["split", tmp_path / "docs", "--out", tmp_path / "s", "--fractions", "a=0.7,b=0.3"]
    main([str(a) for a in [*argv, "--seed", "2", "-q"]])
    assert [read_manifest(tmp_path / "s" / p)["split"]["parts"][p]["units"] for p in "ab"] == [
        7,
        3,
    ]
    out = capsys.readouterr().out
    assert "10 patients, 19 documents" in out
