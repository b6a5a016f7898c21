"""The Ray engine writes the same outputs as the local engine (the demo pipeline, stage by
stage, byte for byte), whatever the number of workers; Ray is set up without the user's
help and imported only when chosen."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from phisieve.catalog import load_pipeline
from phisieve.errors import ConfigError
from phisieve.pipeline.engine import LocalEngine
from phisieve.pipeline.execute import make_engine, run_pipeline

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pipeline.toml"
SETTINGS = [
    "synth.patients=20", "canaries.n=10", "train_ppmlm.max-steps=4",
    "train_reference.max-steps=4", "audit.n-boot=10", "audit.canary-samples=10",
    "audit.max-identifiers=50", "audit.utility-words=20", "audit.name-slots=5",
    "audit.name-candidates=50",
]  # fmt: skip
DATA_STAGES = ["encode_members", "encode_reference", "encode_heldout"]


@pytest.fixture(scope="module")
def ray_local():
    """A local Ray with 2 CPUs and a small object store, for this module."""
    import ray

    from phisieve.pipeline.ray_engine import connect

    started = connect(num_cpus=2, object_store_memory=512 * 2**20)
    yield
    if started:
        ray.shutdown()


def _run(work: Path, engine, stop: list[str] | None = None, key: Path | None = None) -> None:
    if key is not None:
        work.mkdir(parents=True, exist_ok=True)
        for p in key.parent.glob(key.name + "*"):
            dest = work / p.name
            shutil.copytree(p, dest) if p.is_dir() else shutil.copy2(p, dest)
    pipeline = load_pipeline(EXAMPLE, workdir=work, overrides=SETTINGS)
    run_pipeline(pipeline, stop=stop, progress=False, engine=engine)


def _outputs(root: Path) -> dict[str, object]:
    """Every output's content: each file's bytes but the per-write ones (manifests: write
    ids, timings, settings; training logs: seconds per step), and each manifest's
    fingerprint and stats."""
    files = {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in ("manifest.json", "metrics.jsonl")
    }
    manifests = {}
    for p in sorted(root.rglob("manifest.json")):
        m = json.loads(p.read_text())
        m["side_files"] = {k: v for k, v in m.get("side_files", {}).items() if not v.get("log")}
        manifests[p.relative_to(root).as_posix()] = {
            k: v
            for k, v in m.items()
            if k not in ("write_id", "settings", "seconds", "timings", "execution")
            and not k.endswith("_seconds")
        }
    return {"files": files, "manifests": manifests}


def _diff(a: dict, b: dict) -> list[str]:
    out = []
    for kind in ("files", "manifests"):
        for k in sorted(set(a[kind]) | set(b[kind])):
            if a[kind].get(k) != b[kind].get(k):
                out.append(f"{kind}: {k}")
    return out


@pytest.mark.slow
def test_the_demo_pipeline_on_ray_writes_the_local_outputs(tmp_path, monkeypatch, ray_local):
    """The bar: `examples/pipeline.toml` with the local engine and with Ray (2 CPUs, 1, 2
    and 4 workers) writes every stage's output with the same bytes, the same fingerprint
    and the same stats."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    # Every run in the same folder (outputs record their inputs' paths), moved aside after.
    work = tmp_path / "work"
    _run(work, LocalEngine())
    assert (work / "report" / "index.html").is_file()
    expected = _outputs(work)
    key = work.rename(tmp_path / "local") / "demo.key"
    engine = make_engine("ray", workers=2)
    assert engine.name == "ray" and engine.workers == 2
    _run(work, engine, key=key)
    got = _outputs(work)
    assert _diff(expected, got) == []
    manifest = json.loads((work / "enc_members.meta" / "manifest.json").read_text())
    assert manifest["settings"]["engine"] == "ray" and manifest["settings"]["workers"] == 2
    assert (
        manifest["sequences"] > 0
        and manifest["fingerprint"]
        == json.loads((tmp_path / "local" / "enc_members.meta" / "manifest.json").read_text())[
            "fingerprint"
        ]
    )

    # The reduce steps ran on Ray too: the index of the whole corpus is the merge of the
    # indexes of 2 pieces that split it by patient.
    def pieces(root: Path) -> int:
        m = json.loads((root / "terms.meta" / "manifest.json").read_text())
        return m["execution"]["pieces"]

    assert (pieces(tmp_path / "local"), pieces(work)) == (1, 2)
    # 1 and 4 workers, up to the encoded datasets (what follows runs in the driver).
    upto = {
        kind: {n: v for n, v in d.items() if not n.startswith(("bert", "model", "report"))}
        for kind, d in expected.items()
    }
    for workers in (1, 4):
        shutil.rmtree(work)
        _run(work, make_engine("ray", workers=workers), stop=DATA_STAGES, key=key)
        assert _diff(upto, _outputs(work)) == [], workers


def test_engines_are_checked_and_ray_is_imported_only_when_chosen(tmp_path) -> None:
    with pytest.raises(ConfigError, match="unknown engine"):
        make_engine("spark")
    with pytest.raises(ConfigError, match="--address is for --engine ray"):
        make_engine("local", address="auto")
    code = (
        "import sys; from phisieve.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    assert not e.code\n"
        "assert 'ray' not in sys.modules, 'ray imported'\nprint('ok')"
    )
    argv = ["run", str(EXAMPLE), "--workdir", str(tmp_path), "--to", "synth", "-q"]
    argv += ["--set", "synth.patients=3", "--engine", "local"]
    run = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-2000:]


def test_a_local_ray_leaves_nothing_in_the_home_folder(tmp_path) -> None:
    """Started by phisieve, Ray writes no token file (or anything else) to the home folder,
    starts no dashboard, and its log lines stay out of phisieve's output."""
    home = tmp_path / "home"
    home.mkdir()
    code = (
        "import ray; from phisieve.pipeline.ray_engine import connect\n"
        "assert connect(num_cpus=1, object_store_memory=256 * 2**20)\n"
        "assert not connect()  # already running: nothing to do\n"
        "ctx = ray.get_runtime_context()\n"
        "print('dashboard', ray.worker.get_dashboard_url() or '')\n"
        "ray.shutdown()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["HOME"] = str(home)
    run = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, env=env
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "dashboard"
    assert list(home.rglob("*")) == []
    assert "Started a local Ray instance" not in run.stdout + run.stderr


def test_ray_refuses_what_the_local_engine_refuses(tmp_path, minilm, ray_local) -> None:
    """A patient whose documents are not consecutive: the same InputError (file, row,
    column) from both engines, never a Ray traceback, never the note's text."""
    import pyarrow as pa

    from phisieve.encode.stage import EncodeStage
    from phisieve.errors import InputError
    from phisieve.pipeline.runner import run_stage, write_dataset

    docs = pa.table(
        {
            "doc_id": ["d0", "d1", "d2", "d3"],
            "patient_id": ["a", "a", "b", "a"],
            "text": ["secret alpha", "beta", "gamma", "delta"],
        }
    )
    write_dataset(docs, tmp_path / "docs")
    errors = []
    for engine in (LocalEngine(), make_engine("ray", workers=2)):
        with pytest.raises(InputError, match="not consecutive") as e:
            run_stage(
                EncodeStage(max_len=16),
                {"docs": tmp_path / "docs", "tokenizer": minilm},
                tmp_path / f"enc-{engine.name}",
                engine=engine,
            )
        errors.append((e.value.row, e.value.column))
        assert "secret" not in str(e.value)
        assert not (tmp_path / f"enc-{engine.name}").exists()
    assert errors == [(3, "patient_id"), (3, "patient_id")]


@pytest.fixture(scope="module")
def synth_docs(tmp_path_factory) -> Path:
    import phisieve

    docs = tmp_path_factory.mktemp("synth") / "docs"
    phisieve.synth(docs, patients=60, seed=3)
    return docs


@pytest.fixture(scope="module")
def few_docs(tmp_path_factory) -> Path:
    """Fewer patients, for the fragments (each engine parses every note with spaCy)."""
    import phisieve

    docs = tmp_path_factory.mktemp("synth") / "docs"
    phisieve.synth(docs, patients=15, seed=3)
    return docs


def _patients_in(piece) -> dict[str, object]:
    from phisieve.io.sources import open_source

    table = open_source(piece).table()
    return {"rows": table.column("doc_id").to_pylist(), "patients": table.column("patient_id")}


def test_a_reduce_step_on_ray_sees_every_row_once_and_each_patient_whole(
    tmp_path, ray_local
) -> None:
    """``Engine.scan``: with ``by``, every patient's rows in one piece, in input order; all
    rows once; an empty input gives one empty piece; the local engine gives one piece."""
    import pyarrow as pa

    from phisieve.io.sources import open_source
    from phisieve.pipeline.runner import write_dataset
    from phisieve.pipeline.stage import Context
    from phisieve.term_index.stage import IndexStage

    n = 3000
    docs = pa.table(
        {
            "doc_id": [f"d{i:05d}" for i in range(n)],
            "patient_id": [f"p{i // 7}" for i in range(n)],
            "text": ["x"] * n,
        }
    )
    write_dataset(docs, tmp_path / "docs")
    write_dataset(docs.slice(0, 0), tmp_path / "empty")
    ray = make_engine("ray", workers=2)
    for name, engine in (("ray", ray), ("local", LocalEngine())):
        ctx = Context(
            IndexStage(),
            {"docs": open_source(tmp_path / "docs")},
            {},
            tmp_path,
            engine=LocalEngine(),
        )
        got = engine.scan(ctx, "docs", _patients_in, ["doc_id", "patient_id"], by="patient_id")
        assert len(got) == (2 if name == "ray" else 1)
        rows = [r for g in got for r in g["rows"]]
        assert sorted(rows) == docs.column("doc_id").to_pylist()
        for g in got:
            assert g["rows"] == sorted(g["rows"])  # input order within a piece
        owners = [set(g["patients"].to_pylist()) for g in got]
        assert sum(len(o) for o in owners) == len(set().union(*owners)) == -(-n // 7)
        ctx = Context(
            IndexStage(),
            {"docs": open_source(tmp_path / "empty")},
            {},
            tmp_path,
            engine=LocalEngine(),
        )
        empty = engine.scan(ctx, "docs", _patients_in, ["doc_id", "patient_id"], by="patient_id")
        assert [g["rows"] for g in empty] == [[]]
    blocks = ray.scan(ctx, "docs", _patients_in, ["doc_id", "patient_id"])
    assert [g["rows"] for g in blocks] == [[]]


@pytest.mark.parametrize("scope", ["identifying", "patient", "corpus"])
def test_the_index_on_ray_is_the_one_pass_index(tmp_path, ray_local, synth_docs, scope):
    """The index's reduce on Ray (pieces by patient, merged) writes the local index's bytes,
    stats.json and blacklist.txt included, for bigrams counted in passes under a memory
    budget and every direct scope; only how it was counted (the manifest's ``execution``)
    differs."""
    from phisieve.detect.stage import DetectStage
    from phisieve.pipeline.runner import run_stage
    from phisieve.term_index.stage import IndexStage

    spans = tmp_path / "spans"
    run_stage(DetectStage(recognizers="rules"), {"docs": synth_docs}, spans)
    outs = {}
    for engine in (LocalEngine(), make_engine("ray", workers=2)):
        out = tmp_path / f"terms-{engine.name}"
        stage = IndexStage(ngram=2, direct_scope=scope, memory_budget="1MB")
        m = run_stage(stage, {"docs": synth_docs, "spans": spans}, out, engine=engine)
        files = sorted(p for p in out.parent.glob(out.name + "*/*") if p.name != "manifest.json")
        outs[engine.name] = ({p.name: p.read_bytes() for p in files}, m)
    (local, lm), (ray, rm) = outs["local"], outs["ray"]
    assert set(local) == {"part-00000.parquet", "blacklist.txt", "stats.json"}
    assert local == ray
    assert lm["fingerprint"] == rm["fingerprint"] and lm["per_n"]["2"]["indirect_terms"] > 0
    assert (lm["execution"]["pieces"], rm["execution"]["pieces"]) == (1, 2)
    assert lm["execution"]["partitions"] > 1  # counted in passes under the budget


@pytest.mark.slow
def test_fragments_on_ray_are_the_local_fragments(tmp_path, ray_local, few_docs):
    """``fragment``'s reduce steps (the parse, the span words, the patients per word) on
    Ray's pieces give the local engine's examples, byte for byte."""
    from phisieve.detect.stage import DetectStage
    from phisieve.fragments.stage import FragmentStage
    from phisieve.pipeline.runner import run_stage

    spans = tmp_path / "spans"
    run_stage(DetectStage(recognizers="rules"), {"docs": few_docs}, spans)
    prints = []
    for engine in (LocalEngine(), make_engine("ray", workers=2)):
        m = run_stage(
            FragmentStage(k=2),
            {"docs": few_docs, "spans": spans},
            tmp_path / f"frags-{engine.name}",
            engine=engine,
        )
        prints.append((m["fingerprint"], m["report"]))
    assert prints[0] == prints[1] and prints[0][1]["supply"]["examples"] > 50
