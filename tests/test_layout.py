"""The package's layout holds: sub-packages by concern, in layers that import only downwards,
no module importing the package root, no import cycle (Python or the Rust core); the
PhysioNet-trained weights (GPL-2.0) live in their own distribution, never in the package."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "phisieve"
RUST = ROOT / "rust" / "core" / "src"
MODELS = ROOT / "models" / "physionet"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("_core", "_lazy", "errors"),
    ("dependencies",),
    ("text",),
    ("io",),
    ("pipeline",),
    ("protection",),
    ("term_index",),
    ("synthetic", "corpus"),
    ("phi",),
    ("detect",),
    ("fragments",),
    ("encode",),
    ("training",),
    ("audit",),
    ("catalog",),
    ("api",),
    ("cli",),
)
"""The package's parts from the lowest to the highest: a module may import its own part and
the parts of lower layers, never a higher layer or another part of its own layer."""

RANK = {part: i for i, layer in enumerate(LAYERS) for part in layer}


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by dotted name (``phisieve.io.dataset``; a package by its
    own name, for its ``__init__``)."""
    out = {}
    for f in sorted(package.rglob("*.py")):
        parts = list(f.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def is_package(name: str, found: dict[str, Path]) -> bool:
    return found[name].name == "__init__.py"


def imports(name: str, found: dict[str, Path]) -> list[tuple[str, int, str | None]]:
    """What module ``name`` imports, anywhere in it (inside functions too): (the imported
    module, the line, the name taken from it when that name is not a module)."""
    tree = ast.parse(found[name].read_text(encoding="utf-8"))
    here = name.split(".") if is_package(name, found) else name.split(".")[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                sub = f"{target}.{a.name}"
                if sub in found:
                    out.append((sub, node.lineno, None))
                else:
                    out.append((target, node.lineno, a.name))
    return [
        (m, line, attr) for m, line, attr in out if m == "phisieve" or m.startswith("phisieve.")
    ]


def part(name: str) -> str:
    """The sub-package (or root module) a module belongs to."""
    return name.split(".")[1]


FOUND = modules()
FOUND["phisieve._core"] = PACKAGE / "_core.pyi"  # the Rust extension, by its stub
INNER = [m for m in FOUND if m not in ("phisieve", "phisieve._core")]


def test_at_least_eight_sub_packages() -> None:
    subs = [m for m in FOUND if m.count(".") == 1 and is_package(m, FOUND)]
    assert len(subs) >= 8, subs
    # Every sub-package is placed in a layer, and the root keeps only a few modules.
    assert {part(m) for m in INNER} <= set(RANK), sorted({part(m) for m in INNER} - set(RANK))
    roots = [m for m in INNER if m.count(".") == 1 and not is_package(m, FOUND)]
    assert sorted(roots) == [
        "phisieve._lazy",
        "phisieve.api",
        "phisieve.catalog",
        "phisieve.dependencies",
        "phisieve.errors",
    ]


@pytest.mark.parametrize("name", INNER)
def test_no_module_imports_the_package_root(name: str) -> None:
    bad = [(line, attr) for m, line, attr in imports(name, FOUND) if m == "phisieve"]
    assert not bad, f"{name} imports the package root at line(s) {bad}"


@pytest.mark.parametrize("name", INNER)
def test_layers_import_only_downwards(name: str) -> None:
    mine = part(name)
    for target, line, _ in imports(name, FOUND):
        if target == "phisieve" or part(target) == mine:
            continue
        theirs = part(target)
        assert RANK[theirs] < RANK[mine], (
            f"{name} (layer {RANK[mine]}: {mine}) imports {target} (layer {RANK[theirs]}: "
            f"{theirs}) at line {line}"
        )


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one node, or a node
    that reaches itself (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    found.append(sorted(component))
    return found


def test_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_package() -> None:
    graph = {
        name: {m for m, _, _ in imports(name, FOUND) if m in FOUND and m != name} for name in FOUND
    }
    assert cycles(graph) == []


def rust_modules() -> dict[str, set[str]]:
    """The Rust core's modules and the modules each names through ``crate::``."""
    names = {f.stem for f in RUST.glob("*.rs") if f.stem != "lib"}
    graph = {}
    for name in names:
        text = (RUST / f"{name}.rs").read_text(encoding="utf-8")
        used = set(re.findall(r"\bcrate::(\w+)", text))
        for group in re.findall(r"\bcrate::\{([^}]*)\}", text):
            used.update(w.split("::")[0].strip() for w in group.split(","))
        graph[name] = {u for u in used if u in names and u != name}
    return graph


def test_no_module_cycle_in_the_rust_core() -> None:
    graph = rust_modules()
    assert len(graph) >= 10 and "hash" in graph
    assert cycles(graph) == []


def test_the_package_root_offers_its_entry_points() -> None:
    import phisieve

    assert callable(phisieve.index) and callable(phisieve.synth) and callable(phisieve.ingest)
    assert "run_pipeline" in dir(phisieve)


GPL_TEXT = (b"GNU GENERAL PUBLIC LICENSE", b"Everyone is permitted to copy and distribute verbatim")
"""Lines of the GNU GPL's text (every version)."""


def test_the_package_holds_no_model_weights_and_no_gpl_text() -> None:
    # `pip install phisieve` is Apache-2.0 only: the weights trained on the PhysioNet notes
    # (GPL-2.0) are phisieve-models-physionet's. Every file the wheel takes from here, the
    # compiled extension included, is read.
    found = []
    for f in sorted(p for p in PACKAGE.rglob("*") if p.is_file()):
        data = f.read_bytes()
        if f.suffix == ".crfsuite" or data.startswith(b"lCRF"):  # CRFsuite's magic
            found.append(f"{f.relative_to(ROOT)}: a CRFsuite model")
        if f.name.upper().startswith(("LICENSE", "LICENCE", "COPYING")):
            found.append(f"{f.relative_to(ROOT)}: a licence file")
        if any(line in data for line in GPL_TEXT):
            found.append(f"{f.relative_to(ROOT)}: GPL text")
    assert not found, found
    assert (PACKAGE / "errors.py").is_file()  # the scan did read the package


def test_the_weights_are_a_gpl_distribution_of_their_own() -> None:
    from phisieve.detect.recognizers import crf

    project = tomllib.loads((MODELS / "pyproject.toml").read_text(encoding="utf-8"))
    meta = project["project"]
    assert meta["name"] == crf.MODELS == "phisieve-models-physionet"
    assert meta["license"] == "GPL-2.0-only" and meta["license-files"] == ["LICENSE"]
    words = (MODELS / "LICENSE").read_text(encoding="utf-8").split()
    assert words[:7] == ["GNU", "GENERAL", "PUBLIC", "LICENSE", "Version", "2,", "June"]
    # Its package data is the model folder, which `make crf-model` writes.
    package = MODELS / "src" / crf.MODELS_PACKAGE
    data = project["tool"]["setuptools"]["package-data"][crf.MODELS_PACKAGE]
    assert sorted(data) == sorted(f"crf/{f.name}" for f in (package / "crf").iterdir())
    make = dict(
        re.findall(r"^(\w+) := (.*)$", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M)
    )
    assert make["MODELS"] == "models/physionet"
    assert make["CRF_MODEL"].replace("$(MODELS)", make["MODELS"]) == str(
        (package / "crf").relative_to(ROOT)
    )
    # phisieve names it in no dependency list, extras included.
    root = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = root["optional-dependencies"].values()
    wanted = [*root["dependencies"], *(d for extra in extras for d in extra)]
    assert not [d for d in wanted if d.startswith(meta["name"])]
    assert root["license"] == {"text": "Apache-2.0"}
