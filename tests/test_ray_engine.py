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
from phisieve.pipeline.engines import LocalEngine, make_engine
from phisieve.pipeline.execute import run_pipeline

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "pipeline.toml"
SETTINGS = [
    "synth.patients=30", "canaries.n=10", "train_ppmlm.max-steps=4",
    "train_reference.max-steps=4", "audit.n-boot=20", "audit.canary-samples=20",
    "audit.max-identifiers=200", "audit.utility-words=100",
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
            if k not in ("write_id", "settings", "seconds", "timings")
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
    from phisieve.io.sources import write_dataset
    from phisieve.pipeline.runner import run_stage

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
