"""The hand-written ``_core.pyi`` stub is checked against the compiled extension module.

Why hand-written and checked rather than generated: a stub generated from the module (as
Hugging Face tokenizers' ``stub.py`` does, from ``__text_signature__`` and docstrings) knows
parameter names and defaults but no types, since PyO3 signatures carry none; the hand types
(``pa.RecordBatch``, ``tuple[pa.Array, pa.Array]``, ``list[str]``...) are what makes the stub
worth having. So the stub stays hand-written, and this test makes it trustworthy:

* every name the module exports is in the stub and every name in the stub is exported, with the
  same kind (class, function or value); likewise every member of every class (methods, dunder
  methods such as ``__len__``, properties), except ``__init__``, which is checked below;
* every function, method and constructor (``__init__`` against the class's own
  ``__text_signature__``) has, in the stub, exactly the runtime's parameters: names, order,
  kinds (positional-only, positional-or-keyword, ``*args``, keyword-only, ``**kwargs``) and
  defaults (compared as values). ``self`` is left out of the comparison. Both sides are read by
  the same parser (the runtime's ``__text_signature__`` is parsed as a ``def``), so a callable
  without a ``__text_signature__`` fails the test: PyO3 writes one for every
  ``#[pyfunction]``, method and ``#[new]``; give it a ``#[pyo3(signature = ...)]`` when it needs
  defaults;
* a module-level value annotated with a builtin type (``__version__: str``) has that type.

Not checked: annotations and return types (PyO3 knows none), docstrings, and whether a property
has a setter (a ``getset_descriptor`` does not say without an instance).

``test_check_catches`` mutates the real stub in several ways and asserts each is reported, so
the check itself cannot silently pass everything.
"""

from __future__ import annotations

import ast
import builtins
import inspect
from pathlib import Path
from typing import Any

import pytest

from phisieve import _core

STUB = Path(_core.__file__).with_name("_core.pyi")

# Class attributes every PyO3 class has, which a stub does not declare.
BOILERPLATE = {"__new__", "__init__", "__doc__", "__module__", "__dict__", "__weakref__"}

Param = tuple[str, str, Any]


def _default(node: ast.expr | None) -> Any:
    if node is None:
        return inspect.Parameter.empty
    try:
        # By repr, so that True differs from 1.
        return ("value", repr(ast.literal_eval(node)))
    except ValueError:
        return ("expression", ast.unparse(node))


def _params(args: ast.arguments, *, bound: bool) -> list[Param]:
    """(name, kind, default) of each parameter; the first left out when ``bound``."""
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out: list[Param] = []
    for i, (a, d) in enumerate(zip(positional, defaults, strict=True)):
        kind = "positional_only" if i < len(args.posonlyargs) else "positional_or_keyword"
        out.append((a.arg, kind, _default(d)))
    if args.vararg is not None:
        out.append((args.vararg.arg, "var_positional", inspect.Parameter.empty))
    for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        out.append((a.arg, "keyword_only", _default(d)))
    if args.kwarg is not None:
        out.append((args.kwarg.arg, "var_keyword", inspect.Parameter.empty))
    if bound:
        if not out or out[0][1] in ("var_positional", "keyword_only", "var_keyword"):
            raise ValueError("a method without a self parameter")
        out = out[1:]
    return out


def _show(params: list[Param]) -> str:
    """``params`` as a signature: ``(a, b='x', *, c)``."""
    parts: list[str] = []
    bare_star = not any(kind == "var_positional" for _, kind, _ in params)
    for i, (name, kind, default) in enumerate(params):
        if kind == "keyword_only" and bare_star and "*" not in parts:
            parts.append("*")
        star = {"var_positional": "*", "var_keyword": "**"}.get(kind, "")
        shown = star + name
        if default is not inspect.Parameter.empty:
            shown += "=" + default[1]
        parts.append(shown)
        if kind == "positional_only" and (i + 1 == len(params) or params[i + 1][1] != kind):
            parts.append("/")
    return "(" + ", ".join(parts) + ")"


def _differ(where: str, stub: list[Param], real: list[Param]) -> list[str]:
    return [] if stub == real else [f"{where}: stub {_show(stub)} != runtime {_show(real)}"]


def runtime_params(obj: object, *, bound: bool) -> list[Param] | None:
    """The parameters of ``obj``'s ``__text_signature__``, or None when it has none."""
    text = getattr(obj, "__text_signature__", None)
    if not text:
        return None
    # `$self` / `$module` / `$type` mark the bound first parameter.
    fn = ast.parse(f"def f{text.replace('$', '')}: pass").body[0]
    assert isinstance(fn, ast.FunctionDef)
    return _params(fn.args, bound=bound)


def _is_property(node: ast.FunctionDef) -> bool:
    return any(
        (isinstance(d, ast.Name) and d.id == "property")
        or (isinstance(d, ast.Attribute) and d.attr in ("setter", "deleter"))
        for d in node.decorator_list
    )


def _check_class(name: str, node: ast.ClassDef, cls: type) -> list[str]:
    problems: list[str] = []
    stub_methods: dict[str, ast.FunctionDef] = {}
    stub_properties: set[str] = set()
    for n in node.body:
        if isinstance(n, ast.FunctionDef):
            if _is_property(n):
                stub_properties.add(n.name)
            else:
                stub_methods[n.name] = n
        elif isinstance(n, (ast.AnnAssign, ast.Assign)):
            problems.append(f"{name}: the stub declares a class attribute the check does not read")
    members = {m: v for m, v in vars(cls).items() if m not in BOILERPLATE}
    runtime_properties = {m for m, v in members.items() if inspect.isdatadescriptor(v)}
    runtime_methods = {m: v for m, v in members.items() if m not in runtime_properties}

    declared = (set(stub_methods) - {"__init__"}) | stub_properties
    for m in sorted(set(members) - declared):
        problems.append(f"{name}.{m}: exported but not in the stub")
    for m in sorted(declared - set(members)):
        problems.append(f"{name}.{m}: in the stub but not exported")
    for m in sorted(stub_properties & set(runtime_methods)):
        problems.append(f"{name}.{m}: a property in the stub, a method at runtime")
    for m in sorted(set(stub_methods) & runtime_properties):
        problems.append(f"{name}.{m}: a method in the stub, a property at runtime")

    # The constructor: the stub's __init__ against the class's own text signature.
    init = stub_methods.get("__init__")
    real = runtime_params(cls, bound=False)
    if init is None and real is not None:
        problems.append(f"{name}.__init__: the class is constructible but the stub has no __init__")
    elif init is not None and real is None:
        problems.append(f"{name}.__init__: in the stub, but the class has no text signature")
    elif init is not None and real is not None:
        problems.extend(_differ(f"{name}.__init__", _params(init.args, bound=True), real))

    for m, n in stub_methods.items():
        if m == "__init__" or m not in runtime_methods:
            continue
        obj = runtime_methods[m]
        statics = {d.id for d in n.decorator_list if isinstance(d, ast.Name)}
        if ("staticmethod" in statics) != isinstance(obj, staticmethod) or (
            "classmethod" in statics
        ) != isinstance(obj, classmethod):
            problems.append(f"{name}.{m}: static/class method in one and not the other")
            continue
        real = runtime_params(getattr(cls, m), bound="staticmethod" not in statics)
        if real is None:
            problems.append(f"{name}.{m}: no __text_signature__ at runtime")
            continue
        stub = _params(n.args, bound="staticmethod" not in statics)
        problems.extend(_differ(f"{name}.{m}", stub, real))
    return problems


def check(stub_text: str, module: Any = _core) -> list[str]:
    """Every difference between ``stub_text`` and ``module``, one line each (none: they agree)."""
    problems: list[str] = []
    tree = ast.parse(stub_text)
    declared: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            declared[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            declared[node.target.id] = node
    exported = {
        n
        for n in vars(module)
        if not (n.startswith("__") and n.endswith("__")) or n == "__version__"
    }
    for n in sorted(exported - set(declared)):
        problems.append(f"{n}: exported but not in the stub")
    for n in sorted(set(declared) - exported):
        problems.append(f"{n}: in the stub but not exported")

    for n in sorted(set(declared) & exported):
        node, obj = declared[n], getattr(module, n)
        if isinstance(node, ast.ClassDef):
            if not inspect.isclass(obj):
                problems.append(f"{n}: a class in the stub, not at runtime")
            else:
                problems.extend(_check_class(n, node, obj))
        elif isinstance(node, ast.FunctionDef):
            if inspect.isclass(obj) or not callable(obj):
                problems.append(f"{n}: a function in the stub, not at runtime")
                continue
            real = runtime_params(obj, bound=False)
            if real is None:
                problems.append(f"{n}: no __text_signature__ at runtime")
                continue
            problems.extend(_differ(n, _params(node.args, bound=False), real))
        elif isinstance(node, ast.AnnAssign):
            ann = node.annotation
            kind = getattr(builtins, ann.id, None) if isinstance(ann, ast.Name) else None
            if isinstance(kind, type) and not isinstance(obj, kind):
                problems.append(f"{n}: annotated {kind.__name__}, is {type(obj).__name__}")
    return problems


def test_stub_matches_module() -> None:
    problems = check(STUB.read_text())
    assert not problems, "_core.pyi differs from the module:\n" + "\n".join(problems)


# Each mutation of the real stub (old text, new text) must be reported.
MUTATIONS = {
    "parameter renamed": ("def id_hashes(ids: Any)", "def id_hashes(values: Any)"),
    "default changed": ('policy: str = "all"', 'policy: str = "minimal"'),
    "default added": ("def normalize_word(word: str,", 'def normalize_word(word: str = "",'),
    "keyword-only": ("def tokenize(texts: Any,", "def tokenize(*, texts: Any,"),
    "positional-only": ("def detect_rules(texts: Any)", "def detect_rules(texts: Any, /)"),
    "order swapped": ("secret: bytes, parts: list[Any]", "parts: list[Any], secret: bytes"),
    "method parameter": ("def encode(self, texts:", "def encode(self, text:"),
    "constructor default": ("hold: bool = True", "hold: bool = False"),
    "default's type": ("modulus: int = 1,", "modulus: int = True,"),
    "method dropped": ("    def fresh(self) -> Packer:", "    def _fresh(self) -> Packer:"),
    "property as method": ("    @property\n    def labels", "    def labels"),
    "function missing": ("def normalize_word(", "def _normalize_word("),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_check_catches(mutation: str) -> None:
    old, new = MUTATIONS[mutation]
    text = STUB.read_text()
    assert text.count(old) == 1, f"the mutation no longer applies: {old!r}"
    assert set(check(text.replace(old, new))) - set(check(text))
