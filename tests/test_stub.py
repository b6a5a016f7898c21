"""The hand-kept ``_core.pyi`` stub names exactly what the extension module exports."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from phisieve import _core

STUB = Path(_core.__file__).with_name("_core.pyi")


def stub_names() -> dict[str, set[str]]:
    tree = ast.parse(STUB.read_text())
    names: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = {
                n.name
                for n in node.body
                if isinstance(n, ast.FunctionDef)
                and (not n.name.startswith("_") or n.name == "__len__")
            }
        elif isinstance(node, ast.FunctionDef):
            names[node.name] = set()
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = set()
    return names


def module_names() -> dict[str, set[str]]:
    names: dict[str, set[str]] = {}
    for name, obj in vars(_core).items():
        if name.startswith("__") and name != "__version__":
            continue
        if inspect.isclass(obj):
            names[name] = {m for m in vars(obj) if not m.startswith("_") or m == "__len__"}
        else:
            names[name] = set()
    return names


def test_stub_matches_module() -> None:
    assert stub_names() == module_names()


def test_stub_signatures_match() -> None:
    tree = ast.parse(STUB.read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            stub_params = [a.arg for a in node.args.args + node.args.kwonlyargs]
            stub_kwonly = [a.arg for a in node.args.kwonlyargs]
            real = inspect.signature(getattr(_core, node.name))
            assert stub_params == list(real.parameters), node.name
            kwonly = [n for n, p in real.parameters.items() if p.kind == p.KEYWORD_ONLY]
            assert stub_kwonly == kwonly, node.name
