"""The dataset contract (phisieve.io.dataset): every stage's output is atomic, checked, readable
by polars, pyarrow, duckdb and Hugging Face datasets by path, and survives kills."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phisieve.cli import main
from phisieve.errors import InputError, OutputExistsError
from phisieve.io.dataset import (
    LOCK_FILE,
    MANIFEST,
    DatasetWriter,
    check_dataset,
    meta_dir,
    read_manifest,
    read_rejected,
    side_file,
)
from phisieve.io.sources import open_source
from phisieve.pipeline.runner import write_dataset

KEY = "5f0c3a8e9b1d47e2a6c4f8b0d2e6a1c3b5d7f9e1a3c5b7d9f1e3a5c7b9d1f3e5"
MIMIC_HEADER = (
    "ROW_ID,SUBJECT_ID,HADM_ID,CHARTDATE,CHARTTIME,STORETIME,CATEGORY,DESCRIPTION,CGID,"
    "ISERROR,TEXT\n"
)


def run(*argv: object) -> None:
    """Run the CLI in this process; fail on a non-zero exit."""
    try:
        main([str(a) for a in argv])
    except SystemExit as e:  # pragma: no cover - a failing stage
        assert e.code in (0, None), f"phisieve {argv[0]} exited {e.code}"


def stage_commands(w: Path, minilm: Path) -> dict[str, list[object]]:
    """One CLI command per stage, each reading earlier stages' outputs under ``w``."""
    return {
        "synth": ["synth", "--patients", 8, "--seed", 3, "--out", w / "notes", "-q"],
        "ingest": ["ingest", w / "notes.csv", "--out", w / "docs", "-q"],
        "surrogate": ["surrogate", w / "notes", "--out", w / "filled", "--secret-file", w / "key",
                      "-q"],
        "detect": ["detect", w / "filled", "--out", w / "spans", "-q"],
        "index": ["index", w / "filled", "--spans", w / "spans", "--out", w / "terms", "-q"],
        "index2": ["index", w / "docs", "--out", w / "terms_docs", "-q", "--ngram", 2],
        "index3": ["index", w / "notes", "--out", w / "terms_notes", "-q", "--ngram", 2],
        "merge": ["merge", w / "terms_docs", w / "terms_notes", "--out", w / "merged",
                  "--shared-patients"],
        "placeholders": ["placeholders", "--docs", w / "filled", "--spans", w / "gold",
                         "--out", w / "ph"],
        "encode": ["encode", w / "filled", "--tokenizer", minilm, "--terms", w / "terms",
                   "--spans", w / "spans", "--max-len", 48, "--out", w / "enc", "-q"],
    }  # fmt: skip


OUTPUTS = {
    "synth": "notes",
    "ingest": "docs",
    "surrogate": "filled",
    "detect": "spans",
    "index": "terms",
    "merge": "merged",
    "placeholders": "ph",
    "encode": "enc",
}


def write_inputs(w: Path) -> None:
    """The raw inputs: a key and a MIMIC CSV with one row ingest must reject."""
    w.mkdir(parents=True, exist_ok=True)
    (w / "key").write_text(KEY)
    rows = [
        '1,101,201,2100-01-01,,,"Nursing","note",,,"Mr. Alpha Zulu seen today, stable."',
        '2,101,201,2100-01-02,,,"Nursing","note",,,"Alpha Zulu was discharged home."',
        '3,102,202,2100-02-01,,,"Nursing","note",,,"   "',
        '4,103,203,2100-03-01,,,"Nursing","note",,,"Ms. Bravo Yankee called 555-0100."',
    ]
    (w / "notes.csv").write_text(MIMIC_HEADER + "\n".join(rows) + "\n")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory, minilm: Path) -> Path:
    """Every stage run once, in order, from the CLI."""
    w = tmp_path_factory.mktemp("stages")
    write_inputs(w)
    for name, argv in stage_commands(w, minilm).items():
        if name == "placeholders":  # the surrogates' gold spans, as a spans dataset
            write_dataset(pq.read_table(w / "filled", columns=["doc_id", "spans"]), w / "gold")
        run(*argv)
    return w


# --------------------------------------------------------------------------------------------
# Layout and the four readers


@pytest.mark.parametrize("stage", list(OUTPUTS))
def test_output_folders_hold_only_their_parquet_files(outputs: Path, stage: str) -> None:
    out = outputs / OUTPUTS[stage]
    m = read_manifest(out)
    assert m["stage"] == stage
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    assert files == sorted(m["files"]) and all(f.endswith(".parquet") for f in files)
    assert (meta_dir(out) / MANIFEST).is_file()
    hidden = [p.name for p in outputs.iterdir() if p.name.startswith(".")]
    assert hidden in ([], [LOCK_FILE]), "temporary folders left"


def test_side_files_and_rejected_rows_live_beside_the_dataset(outputs: Path) -> None:
    blacklist = side_file(outputs / "terms", "blacklist.txt").read_text().splitlines()
    terms = pq.read_table(outputs / "terms")
    assert blacklist == terms.filter(terms["indirect"]).column("term").to_pylist()
    stats = json.loads(side_file(outputs / "terms", "stats.json").read_text())
    assert stats["documents"] == read_manifest(outputs / "filled")["rows"] == 30
    rejected = read_rejected(outputs / "docs")
    assert rejected.to_pylist() == [
        {"source": str(outputs / "notes.csv"), "row": 2, "column": "TEXT", "reason": "empty text"}
    ]
    assert read_manifest(outputs / "docs")["rows"] == 3
    assert read_rejected(outputs / "enc").num_rows == 0


def reader_counts(folder: Path, cache: Path) -> dict[str, int]:
    """The row count each reader returns for a folder, read by path with default options."""
    import datasets
    import duckdb
    import polars as pl

    hf = datasets.load_dataset("parquet", data_dir=str(folder), cache_dir=str(cache))
    return {
        "polars.read_parquet": pl.read_parquet(folder).height,
        "polars.scan_parquet": pl.scan_parquet(folder).select(pl.len()).collect().item(),
        "pyarrow.parquet.read_table": pq.read_table(folder).num_rows,
        "pyarrow.dataset": pads.dataset(folder).count_rows(),
        "duckdb": duckdb.connect()
        .execute(f"SELECT count(*) FROM read_parquet('{folder}/**/*.parquet')")
        .fetchone()[0],
        "datasets": sum(split.num_rows for split in hf.values()),
    }


@pytest.mark.parametrize("stage", list(OUTPUTS))
def test_four_readers_read_exactly_the_accepted_rows(
    outputs: Path, stage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = outputs / OUTPUTS[stage]
    rows = read_manifest(out)["rows"]
    assert rows > 0
    counts = reader_counts(out, tmp_path / "hf")
    assert counts == dict.fromkeys(counts, rows)


# --------------------------------------------------------------------------------------------
# Checked inputs


def damage(folder: Path, how: str) -> None:
    part = folder / "part-00000.parquet"
    if how == "no marker":
        (meta_dir(folder) / MANIFEST).unlink()
    elif how == "extra part":
        pq.write_table(pq.read_table(part), folder / "part-00099.parquet")
    elif how == "missing part":
        part.unlink()
    elif how == "truncated part":
        part.write_bytes(part.read_bytes()[:-100])
    elif how == "damaged marker":
        (meta_dir(folder) / MANIFEST).write_text("{not json")


@pytest.mark.parametrize(
    "how", ["no marker", "extra part", "missing part", "truncated part", "damaged marker"]
)
def test_stages_refuse_an_incomplete_input(
    outputs: Path, tmp_path: Path, how: str, capsys: pytest.CaptureFixture
) -> None:
    import shutil

    docs = tmp_path / "docs"
    shutil.copytree(outputs / "filled", docs)
    shutil.copytree(meta_dir(outputs / "filled"), meta_dir(docs))
    damage(docs, how)
    with pytest.raises(InputError, match="not a complete phisieve dataset") as e:
        open_source(docs)
    assert str(docs) in str(e.value)
    for argv in (
        ["index", docs, "--out", tmp_path / "t", "-q"],
        ["detect", docs, "--out", tmp_path / "s", "-q"],
        ["surrogate", docs, "--out", tmp_path / "f", "--secret-file", outputs / "key", "-q"],
    ):
        with pytest.raises(SystemExit) as exit_:
            main([str(a) for a in argv])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert "not a complete phisieve dataset" in " ".join(err.split()), argv[0]
        assert not (tmp_path / str(argv[3])).exists()


def test_a_missing_spans_folder_is_noticed_before_the_work(
    outputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import phisieve.term_index.build as build
    from phisieve import api

    def never(*a: object, **k: object) -> None:  # pragma: no cover - the bug
        raise AssertionError("the index ran before its inputs were checked")

    monkeypatch.setattr(build, "index_piece", never)
    with pytest.raises(InputError, match="no such file or folder") as e:
        api.index(outputs / "filled", tmp_path / "t", spans=tmp_path / "nope")
    assert "nope" in str(e.value)


def test_foreign_parquet_folders_are_ingested_first(outputs: Path, tmp_path: Path) -> None:
    folder = tmp_path / "foreign"
    folder.mkdir()
    pq.write_table(pq.read_table(outputs / "docs"), folder / "x.parquet")
    with pytest.raises(InputError, match="phisieve ingest"):
        open_source(folder)
    run("ingest", folder, "--out", tmp_path / "docs", "-q")
    assert open_source(tmp_path / "docs").num_rows == 3
    # A single Parquet file is complete by its footer: it is read as it is.
    assert open_source(folder / "x.parquet").num_rows == 3


# --------------------------------------------------------------------------------------------
# Re-runs


def test_an_existing_output_needs_overwrite(
    outputs: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "docs"
    run("ingest", outputs / "notes.csv", "--out", out, "-q")
    before = read_manifest(out)
    with pytest.raises(SystemExit) as e:
        main(["ingest", str(outputs / "notes.csv"), "--out", str(out), "-q"])
    assert e.value.code == 2 and "--overwrite" in capsys.readouterr().err
    with pytest.raises(OutputExistsError):
        write_dataset(pa.table({"a": [1]}), out)
    assert read_manifest(out) == before
    run("ingest", outputs / "notes.csv", "--out", out, "-q", "--overwrite")
    assert read_manifest(out)["rows"] == 3


def test_a_failed_overwrite_keeps_the_previous_output(outputs: Path, tmp_path: Path) -> None:
    out = tmp_path / "t"
    write_dataset(pa.table({"a": [1, 2, 3]}), out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    with (
        pytest.raises(RuntimeError),
        DatasetWriter(out, pa.schema({"a": pa.int64()}), overwrite=True, rows_per_part=1) as w,
    ):
        w.write(pa.table({"a": [4, 5]}))  # two part files written
        raise RuntimeError("the stage failed")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert check_dataset(out)["rows"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_FILE, "t", "t.meta"]


@pytest.mark.parametrize("stage", list(OUTPUTS))
def test_reruns_write_byte_identical_parquet(
    outputs: Path, stage: str, minilm: Path, tmp_path: Path
) -> None:
    argv = stage_commands(outputs, minilm)[stage]
    out = outputs / OUTPUTS[stage]
    again = tmp_path / OUTPUTS[stage]
    run(*[again if a == out else a for a in argv])
    first, second = read_manifest(out), read_manifest(again)
    assert first["files"] == second["files"]
    for name in first["files"]:
        assert (out / name).read_bytes() == (again / name).read_bytes(), name
    assert read_rejected(out).equals(read_rejected(again))


# --------------------------------------------------------------------------------------------
# Kills

DRIVER = textwrap.dedent(
    """
    import os, signal, sys
    import phisieve.io.dataset as d

    kill_at, steps = int(os.environ["KILL_AT"]), [0]
    kill_event = os.environ.get("KILL_EVENT")
    def step(event, path):
        steps[0] += 1
        if steps[0] == kill_at or event == kill_event:
            os.kill(os.getpid(), signal.SIGKILL)
    d._step = step
    post = d.DatasetWriter.__post_init__
    rows_per_part = int(os.environ["ROWS_PER_PART"])
    def small_parts(self):
        self.rows_per_part = rows_per_part  # several part files, so a kill can fall between them
        post(self)
    d.DatasetWriter.__post_init__ = small_parts
    from phisieve.cli import main
    try:
        main(sys.argv[1:])
    finally:
        with open(os.environ["STEPS_FILE"], "w") as f:
            f.write(str(steps[0]))
    """
)


def run_killed(
    argv: list[object], kill_at: int, steps_file: Path, event: str = "", rows_per_part: int = 2
) -> int:
    """Run the CLI in a child process SIGKILLed before its ``kill_at``-th file-system step
    (0: never), or before its first step named ``event``, its datasets written in parts of
    ``rows_per_part`` rows; its exit status."""
    env = {**os.environ, "KILL_AT": str(kill_at), "STEPS_FILE": str(steps_file)}
    env["KILL_EVENT"] = event
    env["ROWS_PER_PART"] = str(rows_per_part)
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, *map(str, argv)], env=env, capture_output=True, timeout=300
    )
    return proc.returncode


@pytest.mark.slow
@pytest.mark.parametrize("stage", list(OUTPUTS))
def test_a_killed_rerun_never_leaves_a_folder_the_next_stage_accepts_short(
    outputs: Path, stage: str, minilm: Path, tmp_path: Path
) -> None:
    import shutil

    w = tmp_path / "w"
    shutil.copytree(outputs, w)
    argv = [*stage_commands(w, minilm)[stage], "--overwrite"]
    if stage == "detect":
        # The rules alone: the default recognizers' dictionaries take each process ~10 s
        # to load, and what is written (one row per document) goes through the same writer.
        argv += ["--recognizers", "rules"]
    out = w / OUTPUTS[stage]
    full = read_manifest(out)["rows"]
    # About eight parts: kills fall between them (more parts only repeat those steps: two
    # rows a part made the merged terms a thousand parts, and each run 20 s or more).
    rows_per_part = max(2, -(-full // 8))
    steps_file = tmp_path / "steps"
    assert run_killed(argv, 0, steps_file, rows_per_part=rows_per_part) == 0
    steps = int(steps_file.read_text())
    assert steps >= 8  # parts, rejected rows, marker, four moves, two removals
    points = sorted({1, 2, steps // 2, *range(max(1, steps - 6), steps + 1)})
    for kill_at in points:
        code = run_killed(argv, kill_at, steps_file, rows_per_part=rows_per_part)
        assert code == -signal.SIGKILL, kill_at
        # Killed before its marker: the previous output; killed while moving the new one
        # into place: the next command finishes the move. Complete either way.
        assert check_dataset(out)["rows"] == full, kill_at
        assert open_source(out).num_rows == full
        assert pq.read_table(out).num_rows == full
    run(*argv)
    assert read_manifest(out)["rows"] == full
    assert [p.name for p in w.iterdir() if p.name.startswith(".")] == [LOCK_FILE]


def synth_argv(out: Path) -> list[object]:
    return ["synth", "--patients", 5, "--seed", 1, "--out", out, "-q", "--overwrite"]


def test_an_interrupt_while_moving_keeps_the_new_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import phisieve.io.dataset as d

    out = tmp_path / "t"
    write_dataset(pa.table({"a": [1]}), out)

    def interrupt(event: str, path: Path) -> None:
        if event == "place-data":
            raise KeyboardInterrupt

    monkeypatch.setattr(d, "_step", interrupt)
    with pytest.raises(KeyboardInterrupt):
        write_dataset(pa.table({"a": [1, 2]}), out, overwrite=True)
    monkeypatch.undo()
    assert check_dataset(out)["rows"] == 2
    assert pq.read_table(out).num_rows == 2


def test_a_write_killed_before_its_commit_never_replaces_a_later_one(tmp_path: Path) -> None:
    out = tmp_path / "notes"
    run(*synth_argv(out))
    # B starts; A starts too, and dies with its marker written but before its commit
    # started; B completes. A's leftovers must never be rolled forward over B.
    with DatasetWriter(out, pa.schema({"doc_id": pa.string()}), overwrite=True) as b:
        b.write(pa.table({"doc_id": ["b"]}))
        argv_a = synth_argv(out)
        assert run_killed(argv_a, 0, tmp_path / "steps", event="journal") == -signal.SIGKILL
        assert any(p.name.startswith(".notes.meta.tmp-") for p in tmp_path.iterdir())
        b.close()
    assert check_dataset(out)["rows"] == 1 and pq.read_table(out).num_rows == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [LOCK_FILE]


def test_concurrent_readers_finish_a_killed_commit_once(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    out = tmp_path / "notes"
    run(*synth_argv(out))
    full = read_manifest(out)["rows"]
    for event in ("retire-meta", "retire-data", "place-data", "place-meta", "remove-old"):
        assert run_killed(synth_argv(out), 0, tmp_path / "steps", event=event) < 0
        with ThreadPoolExecutor(4) as pool:
            rows = list(pool.map(lambda _: check_dataset(out)["rows"], range(4)))
        assert rows == [full] * 4, event
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [LOCK_FILE]


def test_recovery_leaves_a_live_writer_alone(tmp_path: Path) -> None:
    out = tmp_path / "t"
    write_dataset(pa.table({"a": [1]}), out)
    with DatasetWriter(out, pa.schema({"a": pa.int64()}), overwrite=True) as writer:
        writer.write(pa.table({"a": [1, 2, 3]}))
        writer._flush()
        before = sorted(p.name for p in tmp_path.iterdir())
        code = (
            "import sys; from phisieve.io.dataset import check_dataset; check_dataset(sys.argv[1])"
        )
        subprocess.run([sys.executable, "-c", code, str(out)], check=True, timeout=120)
        assert sorted(p.name for p in tmp_path.iterdir()) == before
        writer.close()
    assert check_dataset(out)["rows"] == 3


def test_outputs_that_are_not_plain_folders_are_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    write_dataset(pa.table({"a": [1]}), real)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(InputError, match="not a plain folder"):
        write_dataset(pa.table({"a": [2]}), tmp_path / "link", overwrite=True)
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="not a plain folder"):
        write_dataset(pa.table({"a": [2]}), tmp_path / "f", overwrite=True)
    assert check_dataset(real)["rows"] == 1


def test_a_dataset_rewritten_between_two_passes_is_an_error(tmp_path: Path) -> None:
    out = tmp_path / "t"
    write_dataset(pa.table({"a": [1]}), out)
    src = open_source(out)
    assert sum(b.num_rows for b in src.batches(None)) == 1
    write_dataset(pa.table({"a": [1, 2]}), out, overwrite=True)
    with pytest.raises(InputError, match="rewritten while it was being read"):
        list(src.batches(None))


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=12),
    cuts=st.lists(st.integers(1, 700), min_size=1, max_size=6),
    rows_per_part=st.integers(1, 5000),
    bytes_per_part=st.integers(1, 200_000),
)
def test_parts_and_row_groups_do_not_depend_on_batching(
    tmp_path_factory, sizes, cuts, rows_per_part, bytes_per_part
) -> None:
    """The same rows in the same order make the same part files whatever batches they come
    in: a part closes after `rows_per_part` rows, or at the row where the rows' sizes reach
    `bytes_per_part` (a reference computed row by row here)."""
    from phisieve.io.dataset import DatasetWriter, dataset_files, row_sizes

    texts = ["x" * (n % 257) for n in sizes for _ in range(1 + n % 5)]
    table = pa.table({"i": list(range(len(texts))), "text": texts, "ids": [[1, 2]] * len(texts)})
    base = tmp_path_factory.mktemp("parts")

    def write(name: str, batches: list[pa.RecordBatch]) -> list[bytes]:
        out = base / name
        with DatasetWriter(
            out, table.schema, rows_per_part=rows_per_part, bytes_per_part=bytes_per_part
        ) as w:
            for b in batches:
                w.write(b)
        return [Path(f).read_bytes() for f in dataset_files(out)]

    one = write("one", table.to_batches())
    pieces, start, i = [], 0, 0
    while start < table.num_rows:
        n = cuts[i % len(cuts)]
        pieces.append(table.slice(start, n).to_batches()[0])
        start, i = start + n, i + 1
    assert write("cut", pieces) == one
    # The reference: part boundaries row by row.
    sizes_ = row_sizes(table.combine_chunks().to_batches()[0])
    expected, rows, nbytes = [], 0, 0
    for s in sizes_:
        rows, nbytes = rows + 1, nbytes + int(s)
        if rows >= rows_per_part or nbytes >= bytes_per_part:
            expected.append(rows)
            rows, nbytes = 0, 0
    if rows or not expected:
        expected.append(rows)
    got = [pq.read_metadata(pa.BufferReader(b)).num_rows for b in one]
    assert got == expected


def test_big_parts_are_the_same_bytes_whatever_the_batches(tmp_path: Path) -> None:
    """Parquet cuts its pages as the chunks it is given arrive: a part of several MB written
    from other batches must still be the same bytes."""
    import hashlib

    from phisieve.io.dataset import DatasetWriter, dataset_files

    texts = [hashlib.sha256(str(i).encode()).hexdigest() * (1 + i % 5) for i in range(20_000)]
    table = pa.table({"i": list(range(len(texts))), "text": texts})
    out = []
    for name, size in (("a", 20_000), ("b", 333), ("c", 4096)):
        with DatasetWriter(tmp_path / name, table.schema, rows_per_part=12_000) as w:
            for b in table.to_batches(max_chunksize=size):
                w.write(b)
        out.append([Path(f).read_bytes() for f in dataset_files(tmp_path / name)])
    assert len(out[0]) == 2 and table.nbytes > 2 * 2**20  # pages of 1 MB before compression
    assert out[0] == out[1] == out[2]
