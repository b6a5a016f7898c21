"""Pipeline files and the runner: checked before anything runs, finished stages skipped,
--from/--to/--dry-run, outputs owned, and a run killed in the middle of a stage that resumes
to byte-identical outputs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from phisieve.catalog import STAGES, load_pipeline
from phisieve.cli import main
from phisieve.errors import ConfigError, InputError, OutputExistsError
from phisieve.io.dataset import check_output, meta_dir, read_manifest
from phisieve.pipeline.execute import plan, run_pipeline
from phisieve.pipeline.options import params
from phisieve.pipeline.runner import run_stage, write_dataset
from phisieve.pipeline.stats import Stats
from phisieve.term_index.stage import IndexStage

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pipeline.toml"

SMALL = """
[synth]
patients = 12
seed = 3
out = "notes"

[index]
docs = "notes"
k = 2
out = "terms"

[split]
docs = "notes"
fractions = "a=0.5,b=0.5"
out = "parts"

[index_a]
stage = "index"
docs = "parts/a"
out = "terms_a"
"""


def write(tmp_path: Path, text: str, name: str = "p.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def run(*argv: object) -> None:
    """The CLI in this process; fails on a non-zero exit."""
    try:
        main([str(a) for a in argv])
    except SystemExit as e:  # pragma: no cover - a failing command
        assert e.code in (0, None), f"phisieve {argv} exited {e.code}"


def test_examples_pipeline_is_the_demo() -> None:
    """`phisieve demo` runs the file that ships in the package; examples/ links to it."""
    packaged = REPO / "python" / "phisieve" / "cli" / "demo.toml"
    assert EXAMPLE.is_symlink() and EXAMPLE.resolve() == packaged.resolve()
    p = load_pipeline(EXAMPLE)
    kinds = [s.kind for s in p.steps]
    for a, b in [("synth", "surrogate"), ("surrogate", "detect"), ("detect", "index"),
                 ("index", "encode"), ("canaries", "split"), ("encode", "train"),
                 ("train", "audit")]:  # fmt: skip
        assert kinds.index(a) < kinds.index(b), (a, b)
    assert p.workdir == (REPO / "demo_out").absolute()


def test_every_option_has_one_definition_for_command_and_file() -> None:
    """The pipeline file's keys are the command's names: inputs, out and options, with no
    key twice."""
    for name, cls in STAGES.items():
        keys = [p.name for p in cls.inputs] + [p.key for p in params(cls.Options)]
        assert len(keys) == len(set(keys)), name
        assert "out" not in keys and "stage" not in keys, name


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[synth]\npatient = 3\nout = 'n'\n",
         r"\[synth\] patient: unknown key \(did you mean 'patients'\?\)"),
        ("[synthh]\nout = 'n'\n",
         r"\[synthh\]: the table name is no stage \(did you mean 'synth'\?\)"),
        ("[x]\nstage = 'nope'\nout = 'n'\n", r"\[x\]: stage = 'nope' is no stage"),
        ("[synth]\npatients = 'many'\nout = 'n'\n",
         r"\[synth\] patients: must be an integer, not str 'many'"),
        ("[synth]\npatients = true\nout = 'n'\n", r"\[synth\] patients: must be an integer"),
        ("[synth]\npatients = 3\n", r"\[synth\] out: missing"),
        ("[index]\ndocs = 'nowhere'\nout = 't'\n",
         r"\[index\] docs: .*nowhere does not exist and no stage writes it"),
        ("[encode]\ndocs = 'n'\nout = 'e'\n[synth]\nout = 'n'\n",
         r"\[encode\] tokenizer: missing \(the input"),
        ("[index]\ndocs = 'b'\nout = 'a'\n[index2]\nstage = 'index'\ndocs = 'a'\nout = 'b'\n",
         r"the stages form a cycle: index -> index2 -> index"),
        ("[synth]\nout = 'n'\n[s2]\nstage = 'synth'\nout = 'n'\n",
         r"\[synth\] and \[s2\] both write"),
        ("[split]\ndocs = 'n'\nfractions = 'a=2'\nout = 's'\n[synth]\nout = 'n'\n",
         r"\[split\]: the fractions must sum to 1"),
        ("[pipeline]\nworkdri = '.'\n[synth]\nout = 'n'\n", r"\[pipeline\] workdri: unknown key"),
        ("synth = 3\n", r"'synth' is not a stage table"),
        ("[synth\n", r"not valid TOML"),
    ],
)  # fmt: skip
def test_a_bad_pipeline_is_refused_before_anything_runs(tmp_path, text, message, capsys) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as e:
        load_pipeline(path)
    assert str(path) in str(e.value)
    with pytest.raises(SystemExit):
        main(["run", str(path)])
    assert "error:" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.toml"]  # nothing written


def test_set_overrides_are_checked(tmp_path) -> None:
    path = write(tmp_path, SMALL)
    with pytest.raises(ConfigError, match="no stage 'nope'"):
        load_pipeline(path, overrides=["nope.k=3"])
    with pytest.raises(ConfigError, match=r"STAGE\.KEY=VALUE"):
        load_pipeline(path, overrides=["k=3"])
    with pytest.raises(ConfigError, match=r"\[index\] k: must be an integer"):
        load_pipeline(path, overrides=["index.k=two"])
    assert load_pipeline(path, overrides=["index.k=3"]).step("index").stage.options.k == 3


def test_a_run_skips_finished_stages_and_redoes_only_stale_ones(tmp_path, capsys) -> None:
    path = write(tmp_path, SMALL)
    run("run", path, "-q")
    first = capsys.readouterr().out
    assert "finished, skipped" not in first
    ids = {n: read_manifest(tmp_path / n)["write_id"] for n in ("notes", "terms", "terms_a")}
    run("run", path, "-q")
    again = capsys.readouterr().out
    assert again.count("finished, skipped") == 4
    assert {n: read_manifest(tmp_path / n)["write_id"] for n in ids} == ids

    # An option that decides the output makes its stage stale, and what reads it waits.
    events = plan(load_pipeline(path, overrides=["synth.seed=4"]))
    assert [(e.step.name, e.action) for e in events] == [
        ("synth", "run"), ("index", "wait"), ("split", "wait"), ("index_a", "wait"),
    ]  # fmt: skip
    assert events[0].reason == "options changed: seed"
    # One that does not (a memory budget, threads) changes nothing.
    events = plan(load_pipeline(path, overrides=["index.threads=1", "index.memory-budget='1GB'"]))
    assert {e.action for e in events} == {"skip"}
    run("run", path, "-q", "--set", "index.k=3")
    out = capsys.readouterr().out
    assert out.count("finished, skipped") == 3  # synth, split, index_a
    assert read_manifest(tmp_path / "terms")["options"]["k"] == 3
    assert read_manifest(tmp_path / "terms_a")["write_id"] == ids["terms_a"]


def test_dry_run_from_and_to(tmp_path, capsys) -> None:
    path = write(tmp_path, SMALL)
    run("run", path, "--dry-run")
    out = capsys.readouterr().out
    assert "run (no output yet)" in out and not (tmp_path / "notes").exists()
    run("run", path, "-q", "--to", "index")
    assert (tmp_path / "terms").exists() and not (tmp_path / "parts").exists()
    capsys.readouterr()
    run("run", path, "-q")
    ids = {n: read_manifest(tmp_path / n)["write_id"] for n in ("notes", "terms", "terms_a")}
    events = plan(load_pipeline(path), start=["split"])
    assert [(e.step.name, e.action) for e in events] == [
        ("synth", "skip"), ("index", "skip"), ("split", "run"), ("index_a", "run"),
    ]  # fmt: skip
    run("run", path, "-q", "--from", "split")
    assert read_manifest(tmp_path / "notes")["write_id"] == ids["notes"]
    assert read_manifest(tmp_path / "terms_a")["write_id"] != ids["terms_a"]
    # A stage's name selects every step of that stage.
    assert {s.name for s in load_pipeline(path).select("index")} == {"index"}
    with pytest.raises(ConfigError, match="no stage 'indx'"):
        plan(load_pipeline(path), start=["indx"])


def test_a_deleted_output_is_made_again(tmp_path, capsys) -> None:
    """`rm -rf OUT` leaves OUT.meta behind: a leftover, not an output."""
    path = write(tmp_path, SMALL)
    run("run", path, "-q")
    shutil.rmtree(tmp_path / "terms")
    assert meta_dir(tmp_path / "terms").exists()
    assert [e.action for e in plan(load_pipeline(path))][:2] == ["skip", "run"]
    run("run", path, "-q")
    assert read_manifest(tmp_path / "terms")["stage"] == "index"
    # The same for a stage run on its own: the leftover .meta does not make the output exist.
    shutil.rmtree(tmp_path / "notes")
    check_output(tmp_path / "notes")
    run("synth", "--patients", 3, "--out", tmp_path / "notes", "-q")


def test_a_pipeline_never_writes_over_what_it_did_not_write(tmp_path) -> None:
    path = write(tmp_path, SMALL)
    (tmp_path / "terms").mkdir()
    (tmp_path / "terms" / "mine.txt").write_text("a user's file")
    with pytest.raises(OutputExistsError):
        run_pipeline(load_pipeline(path), progress=False)
    assert (tmp_path / "terms" / "mine.txt").exists()
    # An output of another stage is not this stage's either.
    shutil.rmtree(tmp_path / "terms")
    write_dataset(pa.table({"x": [1]}), tmp_path / "terms")
    with pytest.raises(OutputExistsError):
        run_pipeline(load_pipeline(path), progress=False)
    run_pipeline(load_pipeline(path), overwrite=True, progress=False)
    assert read_manifest(tmp_path / "terms")["stage"] == "index"


def test_run_stage_resumes_and_fingerprints_content(tmp_path) -> None:
    docs = pa.table({"doc_id": ["1", "2"], "patient_id": ["p", "q"], "text": ["a b", "b c"]})
    write_dataset(docs, tmp_path / "docs")
    stage = IndexStage(k=2)
    m1 = run_stage(stage, {"docs": tmp_path / "docs"}, tmp_path / "t")
    assert m1["options"]["k"] == 2 and m1["settings"]["threads"] == 0
    assert m1["inputs"]["docs"]["fingerprint"] == read_manifest(tmp_path / "docs")["fingerprint"]
    skipped = run_stage(stage, {"docs": tmp_path / "docs"}, tmp_path / "t", resume=True)
    assert skipped["skipped"] and skipped["write_id"] == m1["write_id"]
    # The same content written again has the same fingerprint (none of the write's own ids).
    m2 = run_stage(stage, {"docs": tmp_path / "docs"}, tmp_path / "t", overwrite=True)
    assert m2["write_id"] != m1["write_id"] and m2["fingerprint"] == m1["fingerprint"]
    with pytest.raises(InputError, match=r"index DOCS: .*no such"):
        run_stage(stage, {"docs": tmp_path / "nothing"}, tmp_path / "t2")
    with pytest.raises(ConfigError, match="index needs its input DOCS"):
        run_stage(stage, {}, tmp_path / "t2")


def test_stats_merge_by_adding() -> None:
    a = Stats(rows=2, by={"x": 1}, kind="k")
    a.add("rows", 3)
    a.count("by", {"x": 1, "y": 2})
    a.merge({"rows": 1, "by": {"y": 1}, "kind": "k", "new": 4})
    assert a == {"rows": 6, "by": {"x": 2, "y": 3}, "kind": "k", "new": 4}
    with pytest.raises(ValueError, match="cannot merge"):
        a.merge({"kind": "other"})


KILL_IN_ENCODE = textwrap.dedent(
    """
    import os, signal, sys
    from phisieve.encode import batches

    original = batches.Encoder.__call__

    def killed(self, batch):
        out = original(self, batch)
        os.kill(os.getpid(), signal.SIGKILL)  # in the middle of encode's first stage
        return out

    batches.Encoder.__call__ = killed
    from phisieve.cli import main

    main(sys.argv[1:])
    """
)

DEMO_SETTINGS = [
    "synth.patients=20", "canaries.n=10", "train_ppmlm.max-steps=4",
    "train_reference.max-steps=4", "audit.n-boot=10", "audit.canary-samples=10",
    "audit.max-identifiers=50", "audit.utility-words=20", "audit.name-slots=5",
    "audit.name-candidates=50",
]  # fmt: skip


def _run_demo(workdir: Path, script: str | None = None) -> subprocess.CompletedProcess:
    argv = ["run", str(EXAMPLE), "--workdir", str(workdir), "-q"]
    for s in DEMO_SETTINGS:
        argv += ["--set", s]
    code = script or "import sys; from phisieve.cli import main; main(sys.argv[1:])"
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1700000000"}
    return subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=900
    )


def _files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` but the per-write ones: manifests (write ids, timings and
    absolute paths) and training logs (seconds per step)."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in ("manifest.json", "metrics.jsonl")
    }


@pytest.mark.slow
def test_a_pipeline_killed_in_encode_resumes_to_the_same_outputs(tmp_path) -> None:
    """The bar: the demo pipeline killed (SIGKILL) in the middle of `encode`, then run
    again, skips the stages that finished, redoes encode and what follows, and every output
    is byte-identical to an uninterrupted run's (same key, same folder)."""
    work = tmp_path / "work"
    done = _run_demo(work)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (work / "report" / "index.html").is_file()
    reference = _files(work)
    fingerprints = {
        p.parent.name: json.loads(p.read_text())["fingerprint"] for p in work.rglob("manifest.json")
    }
    # Start again from nothing but the key (a new key would give other surrogates).
    for entry in work.iterdir():
        if not entry.name.startswith("demo.key"):
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    killed = _run_demo(work, KILL_IN_ENCODE)
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert not (work / "enc_members").exists()
    assert list(work.glob(".enc_members.tmp-*"))  # the encode was in flight
    resumed = _run_demo(work)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    skipped = [line.split(": ")[0] for line in resumed.stdout.splitlines() if "skipped" in line]
    assert [s.split("] ")[1] for s in skipped] == [
        "keygen", "synth", "surrogate", "canaries", "detect", "index", "split", "tokenizer",
    ]  # fmt: skip
    assert "encode_members" in resumed.stdout and not list(work.glob(".enc_members.*"))
    assert _files(work) == reference
    assert {
        p.parent.name: json.loads(p.read_text())["fingerprint"] for p in work.rglob("manifest.json")
    } == fingerprints


@pytest.mark.parametrize("stage_name", ["train", "audit"])
def test_a_failed_model_or_report_leaves_the_old_output(tmp_path, monkeypatch, stage_name):
    """Folders (a model, a report) go through the contract too: a run that dies half-way
    leaves no output, or the previous one untouched."""
    import phisieve.audit.run as audit_run
    import phisieve.training.loop as loop
    from phisieve.audit.stage import AuditStage
    from phisieve.training.stage import TrainStage

    write_dataset(pa.table({"x": [1]}), tmp_path / "data")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")

    def half_written(target: Path) -> None:
        (target / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt  # killed mid-way (Ctrl-C)

    if stage_name == "train":
        monkeypatch.setattr(loop, "_train", lambda e, m, out, c, log: half_written(out))
        stage = TrainStage(objective="mlm")
        inputs = {"encoded": tmp_path / "data", "model": tmp_path / "model"}
    else:
        stage = AuditStage()
        inputs = {"model": tmp_path / "model", "members": tmp_path / "data",
                  "non-members": tmp_path / "data"}  # fmt: skip

        def measure(*args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(audit_run, "measure", measure)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        run_stage(stage, inputs, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".phisieve.lock", "data", "data.meta", "model",
    ]  # fmt: skip
    out.mkdir()
    (out / "old.bin").write_bytes(b"the previous output")
    with pytest.raises(KeyboardInterrupt):
        run_stage(stage, inputs, out, overwrite=True)
    assert [p.name for p in out.iterdir()] == ["old.bin"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]
