"""One shape per stage: the pipeline draws progress and opens outputs, algorithms do neither.

Read from the package's source (every module, functions nested in functions included):

* no function or class outside ``phisieve/pipeline/`` takes a ``progress`` argument or field,
  and none imports a progress-bar library or the pipeline's bar: algorithms take a
  :class:`~phisieve.pipeline.work.Work` (``ctx.bar``, ``ctx.stats``, ``ctx.scratch``);
* only the runner (:mod:`phisieve.pipeline.runner`) opens the dataset contract's writers, and
  only the pipeline makes temporary folders (a stage's scratch space is ``ctx.scratch``);
* every stage is one of three kinds (:class:`~phisieve.pipeline.stage.MapStage`,
  :class:`~phisieve.pipeline.stage.RowsStage`, :class:`~phisieve.pipeline.stage.BuildStage`)
  and overrides that kind's one method.

Each rule is also run on a small module that breaks it, so that it is seen to fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from phisieve.catalog import PATHS, STAGES
from phisieve.pipeline.stage import BuildStage, MapStage, RowsStage

PACKAGE = Path(__file__).resolve().parent.parent / "python" / "phisieve"

BARS = {"rich.progress", "tqdm", "tqdm.auto", "alive_progress", "enlighten"}
"""Progress-bar libraries."""
PIPELINE_BARS = {"progress_bar", "Progress"}
"""Names of :mod:`phisieve.pipeline.progress` that draw."""
WRITERS = {"DatasetWriter", "FolderWriter", "FileWriter"}
"""The dataset contract's writers (:mod:`phisieve.io.dataset`)."""
SCRATCH = {"tempfile"}


def _modules() -> dict[str, ast.Module]:
    return {
        str(f.relative_to(PACKAGE)): ast.parse(f.read_text(encoding="utf-8"))
        for f in sorted(PACKAGE.rglob("*.py"))
    }


def progress_breaches(tree: ast.Module) -> list[str]:
    """Where ``tree`` takes a ``progress`` argument or field, or reaches for a bar."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
            if "progress" in names:
                out.append(f"line {node.lineno}: {getattr(node, 'name', 'lambda')} takes progress")
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                target = item.target if isinstance(item, ast.AnnAssign) else None
                if isinstance(target, ast.Name) and target.id == "progress":
                    out.append(f"line {item.lineno}: {node.name} has a progress field")
        elif isinstance(node, ast.Import):
            out += [f"line {node.lineno}: imports {a.name}" for a in node.names if a.name in BARS]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module in BARS or module.split(".")[0] in BARS - {"rich.progress"}:
                out.append(f"line {node.lineno}: imports from {module}")
            elif module.endswith("progress"):
                out += [
                    f"line {node.lineno}: imports {a.name} from {module}"
                    for a in node.names
                    if a.name in PIPELINE_BARS
                ]
    return out


def writer_breaches(tree: ast.Module) -> list[str]:
    """Where ``tree`` opens one of the contract's writers or makes a temporary folder."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = (
                f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            )
            if name in WRITERS:
                out.append(f"line {node.lineno}: opens a {name}")
        elif isinstance(node, ast.Import):
            out += [
                f"line {node.lineno}: imports {a.name}" for a in node.names if a.name in SCRATCH
            ]
        elif isinstance(node, ast.ImportFrom) and (node.module or "") in SCRATCH:
            out.append(f"line {node.lineno}: imports from {node.module}")
    return out


def test_no_function_outside_the_pipeline_takes_progress_or_draws_a_bar() -> None:
    found = {
        name: hits
        for name, tree in _modules().items()
        if not name.startswith("pipeline/") and (hits := progress_breaches(tree))
    }
    assert found == {}


def test_only_the_runner_opens_writers_and_only_the_pipeline_makes_scratch_folders() -> None:
    found = {}
    for name, tree in _modules().items():
        hits = [] if name == "pipeline/runner.py" else writer_breaches(tree)
        if name.startswith("pipeline/"):  # the pipeline's scratch space (Work.scratch)
            hits = [h for h in hits if "tempfile" not in h]
        if name == "io/dataset.py":  # where the writers are defined
            hits = [h for h in hits if "tempfile" in h]
        if name == "io/cache.py":  # a cache entry is built beside it, then renamed in whole
            hits = [h for h in hits if "tempfile" not in h]
        if hits:
            found[name] = hits
    assert found == {}


@pytest.mark.parametrize(
    ("source", "rule", "expected"),
    [
        ("def f(x, progress=False): pass", progress_breaches, "f takes progress"),
        ("def f(x, *, progress): pass", progress_breaches, "f takes progress"),
        ("class C:\n    progress: bool = False", progress_breaches, "C has a progress field"),
        ("from rich.progress import Progress", progress_breaches, "imports from rich.progress"),
        ("import tqdm", progress_breaches, "imports tqdm"),
        ("from ..pipeline.progress import progress_bar", progress_breaches, "progress_bar"),
        ("w = DatasetWriter(out, schema)", writer_breaches, "opens a DatasetWriter"),
        ("w = dataset.FolderWriter(out)", writer_breaches, "opens a FolderWriter"),
        ("import tempfile", writer_breaches, "imports tempfile"),
    ],
)
def test_the_rules_see_a_breach(source: str, rule, expected: str) -> None:
    hits = rule(ast.parse(source))
    assert len(hits) == 1 and expected in hits[0]


def test_the_rules_let_a_work_context_through() -> None:
    source = (
        "from ..pipeline.progress import quiet_transformers\n"
        "def f(src, ctx=None):\n"
        "    with work(ctx).bar('x', 3) as advance, work(ctx).scratch('y') as tmp:\n"
        "        advance(1)\n"
    )
    tree = ast.parse(source)
    assert progress_breaches(tree) == [] and writer_breaches(tree) == []


@pytest.mark.parametrize("name", sorted(PATHS))
def test_every_stage_is_one_kind_overriding_its_one_method(name: str) -> None:
    """A map stage overrides ``map`` (never ``batches``), a rows stage ``batches``, a build
    stage ``build`` (and neither of the others)."""
    cls = STAGES[name]
    kinds = [k for k in (MapStage, RowsStage, BuildStage) if issubclass(cls, k)]
    own = {m for k in cls.__mro__ if k.__module__ != "phisieve.pipeline.stage" for m in vars(k)}
    if issubclass(cls, MapStage):
        assert kinds == [MapStage, RowsStage] and "map" in own and "batches" not in own
    elif issubclass(cls, RowsStage):
        assert kinds == [RowsStage] and "batches" in own and "map" not in own
    else:
        assert kinds == [BuildStage] and "build" in own and not own & {"map", "batches"}
