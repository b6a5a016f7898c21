"""The token classifier as ONNX, run with onnxruntime (issue 42)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from phisieve.cli import main
from phisieve.detect.onnx import INT8_FILE, ONNX_FILE, export_onnx
from phisieve.detect.recognizers.model import ModelRecognizer
from phisieve.errors import ConfigError
from tests.detect.test_detect_model import (  # noqa: F401 (fixtures)
    HELD_OUT,
    synthetic,
    tiny_base,
    tiny_model,
)

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def exported(tiny_model: Path, tmp_path_factory) -> Path:  # noqa: F811
    folder = tmp_path_factory.mktemp("onnx") / "model"
    shutil.copytree(tiny_model, folder)
    export_onnx(folder)
    return folder


def texts() -> list[str | None]:
    notes = synthetic(HELD_OUT, 12, seed=9)[0].column("text").to_pylist()
    return [*notes, None, "", "Dr. Jessup " * 60]


def test_export_is_checked_and_recorded(exported: Path):
    info = json.loads((exported / "phisieve.json").read_text())["onnx"]
    assert set(info["files"]) == {ONNX_FILE, INT8_FILE}
    fp32, int8 = info["files"][ONNX_FILE], info["files"][INT8_FILE]
    assert fp32["max_abs_diff"] < 1e-4 and fp32["argmax_differs"] == 0.0
    assert int8["bytes"] < fp32["bytes"]
    assert int8["argmax_differs"] <= 0.05
    assert info["windows"] > 1 and info["opset"] == 17
    assert info["attention"] == "eager"


def test_export_traces_the_plain_attention(exported: Path):
    """Eager attention, masked by addition: none of the per-layer handling of fully masked
    rows that PyTorch's scaled_dot_product_attention traces to (IsNaN, then Where)."""
    import onnx

    ops = [n.op_type for n in onnx.load(str(exported / ONNX_FILE)).graph.node]
    assert "IsNaN" not in ops and ops.count("Softmax") == 2  # the tiny model's two layers


def test_onnx_backends_agree_with_pytorch(exported: Path):
    torch_run = ModelRecognizer(exported, device="cpu", backend="torch")
    fp32 = ModelRecognizer(exported, backend="onnx")
    int8 = ModelRecognizer(exported, backend="onnx-int8", threads=1)
    assert (torch_run.backend, fp32.backend, int8.backend) == ("torch", "onnx", "onnx-int8")
    notes = texts()
    reference = torch_run.token_scores(notes)
    same = fp32.token_scores(notes)
    assert same.select("row", "start", "end", "label").equals(
        reference.select("row", "start", "end", "label")
    )
    np.testing.assert_allclose(same["p"].to_numpy(), reference["p"].to_numpy(), atol=1e-4)
    assert fp32(notes) == [
        [(s, e, label, pytest.approx(score, abs=1e-4)) for s, e, label, score in spans]
        for spans in torch_run(notes)
    ]
    quantised = int8.token_scores(notes)
    assert quantised.height == reference.height
    # 8-bit weights move this tiny model's probabilities (hidden size 32) by up to a tenth or
    # so; its most likely category stays.
    moved = np.abs(quantised["p"].to_numpy() - reference["p"].to_numpy())
    assert moved.max() < 0.25
    assert (quantised["label"] == reference["label"]).mean() >= 0.9
    # On CPU with onnxruntime, `auto` takes the 8-bit model.
    assert ModelRecognizer(exported, device="cpu").backend == "onnx-int8"


def test_batches_by_length_do_not_change_the_scores(exported: Path):
    notes = texts()
    one = ModelRecognizer(exported, backend="onnx", batch_size=1).token_scores(notes)
    many = ModelRecognizer(exported, backend="onnx", batch_size=5).token_scores(notes)
    assert one.select("row", "start", "end", "label").equals(
        many.select("row", "start", "end", "label")
    )
    np.testing.assert_allclose(one["p"].to_numpy(), many["p"].to_numpy(), atol=1e-5)


def test_batch_size_defaults_by_backend(exported: Path):
    """One window a batch for the 8-bit model, cache-sized batches for float32 onnxruntime,
    large ones for PyTorch."""
    assert ModelRecognizer(exported, backend="onnx-int8").batch_size == 1
    assert ModelRecognizer(exported, backend="onnx").batch_size == 8
    assert ModelRecognizer(exported, device="cpu", backend="torch").batch_size == 64
    assert ModelRecognizer(exported, backend="onnx-int8", batch_size=3).batch_size == 3


def test_8bit_scores_of_a_note_do_not_depend_on_the_other_notes(exported: Path):
    """Dynamic quantisation scales a batch's activations together; by default each window
    is its own batch, so a note scores the same alone and among others, to the bit."""
    notes = texts()
    rows = (0, 5, len(notes) - 1)

    def alone_as_among_others(run: ModelRecognizer) -> list[bool]:
        together = run.token_scores(notes)
        return [
            run.token_scores([notes[row]])
            .drop("row")
            .equals(together.filter(together["row"] == row).drop("row"))
            for row in rows
        ]

    assert all(alone_as_among_others(ModelRecognizer(exported, backend="onnx-int8", threads=1)))
    # Batches of several windows couple them: the reason for the default.
    coupled = ModelRecognizer(exported, backend="onnx-int8", threads=1, batch_size=8)
    assert not all(alone_as_among_others(coupled))


def test_missing_files_and_unknown_backends_are_refused(tiny_model: Path):  # noqa: F811
    with pytest.raises(ConfigError, match="detect-onnx"):
        ModelRecognizer(tiny_model, backend="onnx-int8")
    with pytest.raises(ConfigError, match="unknown backend"):
        ModelRecognizer(tiny_model, backend="tensorrt")
    assert ModelRecognizer(tiny_model, device="cpu").backend == "torch"


def test_detect_onnx_command_without_pytorch_weights(tiny_model: Path, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "onnx-only"
    main(["detect-onnx", str(tiny_model), "--out", str(out), "--no-torch-weights"])
    printed = capsys.readouterr().out
    assert "bytes of ONNX" in printed and str(out) in printed
    assert not list(out.glob("*.safetensors")) and (out / INT8_FILE).is_file()
    recognizer = ModelRecognizer(out)
    assert recognizer.backend == "onnx-int8"
    assert recognizer(texts()) == ModelRecognizer(out, backend="onnx-int8")(texts())
    with pytest.raises(SystemExit):
        main(["detect-onnx", str(tmp_path / "nothing"), "--out", str(tmp_path / "x")])


def test_a_worker_s_thread_budget_bounds_onnxruntime(exported: Path, monkeypatch):
    from phisieve.detect.onnx import OnnxLogits

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert OnnxLogits(exported / INT8_FILE).session.get_session_options().intra_op_num_threads == 1
    assert (
        OnnxLogits(exported / INT8_FILE, threads=2)
        .session.get_session_options()
        .intra_op_num_threads
        == 2
    )


def test_a_recognizer_loads_its_model_on_first_use_and_never_pickles_it(exported: Path):
    """``detect --workers N`` hands the recognizers to the workers pickled: the process that
    hands out the notes never loads the model (on a GPU machine, seconds and a CUDA context
    of its own), and the workers load it from the folder."""
    import pickle
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from phisieve.detect.recognizers.model import ModelRecognizer\n"
        f"ModelRecognizer({str(exported)!r})\n"
        "print(sorted(m for m in ('torch', 'transformers', 'onnxruntime') if m in sys.modules))\n"
    )
    imported = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr[-2000:]
    assert imported.stdout.strip() == "[]"

    for backend, device in (("torch", "cpu"), ("onnx", None), ("onnx-int8", None)):
        recognizer = ModelRecognizer(exported, backend=backend, device=device)
        unloaded = len(pickle.dumps(recognizer))
        spans = recognizer(texts())
        assert recognizer.model is not None or recognizer.session is not None
        shipped = pickle.dumps(recognizer)
        assert len(shipped) == unloaded < 50_000  # the weights are megabytes
        again = pickle.loads(shipped)
        assert again.backend == backend and again(texts()) == spans
