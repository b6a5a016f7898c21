"""The Python API (:mod:`phisieve.api`): one function per stage, made from its declaration."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import phisieve
from phisieve import api
from phisieve.catalog import STAGES
from phisieve.pipeline.options import params
from phisieve.pipeline.runner import run_stage

RUN = {"overwrite": False, "progress": False, "resume": False, "engine": None, "workers": 1}


def fn_name(stage: str) -> str:
    return stage.replace("-", "_")


def test_every_stage_has_a_function() -> None:
    assert sorted(api.__all__) == sorted(fn_name(s) for s in STAGES)
    assert set(api.__all__) <= set(dir(api))
    for stage in STAGES:
        fn = getattr(api, fn_name(stage))
        assert fn is getattr(api, fn_name(stage))  # made once
        assert fn.__name__ == fn.__qualname__ == fn_name(stage)
        assert fn.__module__ == "phisieve.api"
    with pytest.raises(AttributeError):
        api.no_such_stage  # noqa: B018


@pytest.mark.parametrize("stage", list(STAGES))
def test_signature_is_the_stage_declaration(stage: str) -> None:
    cls = STAGES[stage]
    sig = inspect.signature(getattr(api, fn_name(stage)))
    P = inspect.Parameter
    positional = [p.attr for p in cls.inputs if p.positional]
    others = [p.attr for p in cls.inputs if not p.positional]
    fields = dataclasses.fields(cls.Options)
    assert list(sig.parameters) == [
        *positional,
        "out",
        *others,
        *(f.name for f in fields),
        *RUN,
    ]
    for name in [*positional, "out"]:
        p = sig.parameters[name]
        assert p.kind is P.POSITIONAL_OR_KEYWORD and p.default is P.empty
    for name in others:
        p = sig.parameters[name]
        assert p.kind is P.KEYWORD_ONLY and p.default is None
    for f in fields:
        p = sig.parameters[f.name]
        assert p.kind is P.KEYWORD_ONLY and p.default == f.default
        assert p.annotation is not P.empty
    for name, default in RUN.items():
        p = sig.parameters[name]
        assert p.kind is P.KEYWORD_ONLY and p.default == default


@pytest.mark.parametrize("stage", list(STAGES))
def test_doc_comes_from_the_stage_declaration(stage: str) -> None:
    cls = STAGES[stage]
    doc = " ".join(getattr(api, fn_name(stage)).__doc__.split())
    assert " ".join(cls.help.split()) in doc
    assert "Parameters" in doc and "Returns" in doc
    for port in cls.inputs:
        assert " ".join(port.help.split()) in doc, port.name
    for p in params(cls.Options):
        assert f"{p.attr} :" in doc
        assert " ".join(p.help.split()) in doc, p.attr


def test_an_unknown_keyword_is_a_type_error(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"index.*unexpected keyword argument 'kk'"):
        api.index(tmp_path / "docs", tmp_path / "terms", kk=3)
    with pytest.raises(TypeError, match=r"synth.*positional"):
        api.synth(tmp_path / "a", 5)  # options are keyword-only
    with pytest.raises(TypeError, match="missing a required argument: 'out'"):
        api.ingest(tmp_path / "docs")
    assert not (tmp_path / "terms").exists() and not (tmp_path / "a").exists()


def test_the_package_root_offers_the_functions() -> None:
    assert phisieve.api is api
    for name in ("ingest", "index", "synth", "split", "surrogate", "detect_train", "merge"):
        assert getattr(phisieve, name) is getattr(api, name)
        assert name in dir(phisieve)
    # detect, encode and audit name sub-packages at the root: their functions are api's.
    for name in ("detect", "encode", "audit"):
        assert callable(getattr(api, name))
        assert name not in phisieve._EXPORTS


def test_a_function_writes_what_run_stage_writes(tmp_path: Path) -> None:
    m = api.synth(tmp_path / "docs", patients=6, seed=3, words_per_note="20:60")
    cls = STAGES["synth"]
    again = run_stage(cls(patients=6, seed=3, words_per_note="20:60"), {}, tmp_path / "docs2")
    assert m["rows"] == again["rows"] > 0
    assert m["fingerprint"] == again["fingerprint"]

    terms = api.index(tmp_path / "docs", tmp_path / "terms", k=3, ngram=2)
    cls = STAGES["index"]
    again = run_stage(cls(k=3, ngram=2), {"docs": tmp_path / "docs2"}, tmp_path / "terms2")
    assert terms["options"] == again["options"] and terms["options"]["k"] == 3
    assert terms["fingerprint"] == again["fingerprint"]

    # The runner's keywords reach the runner.
    kept = api.index(tmp_path / "docs", tmp_path / "terms", k=3, ngram=2, resume=True)
    assert kept.get("skipped") is True and kept["fingerprint"] == terms["fingerprint"]
    with pytest.raises(phisieve.OutputExistsError):
        api.index(tmp_path / "docs", tmp_path / "terms", k=2)
    assert api.index(tmp_path / "docs", tmp_path / "terms", k=2, overwrite=True)["k"] == 2


def test_importing_the_api_imports_no_pyarrow(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import inspect, sys
        import phisieve
        api = phisieve.api
        fns = [getattr(api, name) for name in api.__all__]
        assert all(inspect.signature(f) and f.__doc__ for f in fns)
        before = sorted(m for m in ("pyarrow", "polars", "torch") if m in sys.modules)
        phisieve.synth({str(tmp_path / "docs")!r}, patients=2)
        print(before, "pyarrow" in sys.modules)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["[]", "True"], done.stdout + done.stderr
