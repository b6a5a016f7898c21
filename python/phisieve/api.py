"""The Python API: one function per stage of the catalog, made from the stage's declaration.

``phisieve.api.NAME`` runs the stage ``NAME`` (``-`` written ``_``: ``detect_train``,
``init_model``...) as its command does: its positional inputs, then ``out``, then, by
keyword only, its other inputs, every option of its options dataclass with its default, and
``overwrite``, ``progress``, ``resume``, ``engine`` and ``workers``
(:func:`phisieve.pipeline.runner.run_stage`). It returns the output's manifest::

    from phisieve import api

    api.synth("notes/", patients=500, seed=0)
    api.index("notes/", "terms/", k=2, ngram=2)
    api.detect("notes/", "spans/", recognizers="rules,lists")

A function's signature (``inspect.signature``, ``help()``) and documentation come from the
stage: its help, each input's and each option's help, written once where the stage is
declared. Functions are made on first use: importing this module imports neither the stages
nor what they run (pyarrow, torch...), and a function imports its stage's algorithms only
when it is called. The package root offers the same functions (``phisieve.ingest``,
``phisieve.index``...), but for those whose name is a sub-package's (``detect``, ``encode``,
``audit``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .catalog import PATHS, STAGES

if TYPE_CHECKING:
    import inspect

    from .pipeline.stage import Input, Stage

NAMES: dict[str, str] = {name.replace("-", "_"): name for name in PATHS}
"""Every function's name -> its stage's name."""

RUN: tuple[tuple[str, Any, str], ...] = (
    ("overwrite", False, "Replace an existing output, atomically (refused without it)."),
    ("progress", False, "Draw progress bars on standard error."),
    (
        "resume",
        False,
        "Keep an existing output that is finished (the same stage, options, inputs and "
        "phisieve version) instead of redoing it; its manifest comes back with "
        '``"skipped": True``.',
    ),
    (
        "engine",
        None,
        "Where the batch function runs (:mod:`phisieve.pipeline.engine`; default: this "
        "process). The output is the same whatever the engine.",
    ),
    (
        "workers",
        1,
        "Without ``engine``: worker processes of this machine that run the batch function "
        "and the reduce steps (1: all in this process; the command line's default is every "
        "CPU). The output is the same whatever the number. A script that asks for more than "
        "one must guard its entry point with ``if __name__ == '__main__':``.",
    ),
)
"""The keywords of every function that are the runner's, not the stage's: name, default and
help (their types: :func:`signature`)."""

__all__ = sorted(NAMES)


def __getattr__(name: str) -> Callable[..., dict[str, Any]]:
    stage = NAMES.get(name)
    if stage is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    fn = make(STAGES[stage])
    globals()[name] = fn
    return fn


def __dir__() -> list[str]:
    return sorted({*globals(), *NAMES})


def make(stage: type[Stage]) -> Callable[..., dict[str, Any]]:
    """The API function of ``stage``: it binds its arguments against its signature
    (:func:`signature`), makes the stage with those options and runs it."""
    from .pipeline.options import params

    sig = signature(stage)
    options = [p.attr for p in params(stage.Options)]
    run = [r[0] for r in RUN]
    name = stage.name.replace("-", "_")

    def fn(*args: Any, **kwargs: Any) -> dict[str, Any]:
        from .pipeline.runner import run_stage

        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{name}() {e}") from None
        bound.apply_defaults()
        given = bound.arguments
        inputs = {port.name: given[port.attr] for port in stage.inputs}
        chosen = stage.Options(**{o: given[o] for o in options})
        return run_stage(stage(chosen), inputs, given["out"], **{k: given[k] for k in run})

    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = __name__
    fn.__signature__ = sig  # type: ignore[attr-defined]
    fn.__doc__ = docstring(stage, sig)
    return fn


def signature(stage: type[Stage]) -> inspect.Signature:
    """The signature of ``stage``'s function: its positional inputs, ``out``, then keyword
    only its other inputs (default ``None``), its options (their defaults and types) and the
    runner's keywords (:data:`RUN`)."""
    import inspect
    import os
    import typing

    from .pipeline.engine import Engine
    from .pipeline.options import params as options

    P = inspect.Parameter
    hints = typing.get_type_hints(stage.Options)
    first = [p for p in stage.inputs if p.positional]
    rest = [p for p in stage.inputs if not p.positional]
    params = [P(p.attr, P.POSITIONAL_OR_KEYWORD, annotation=_input_type(p)) for p in first]
    params.append(P("out", P.POSITIONAL_OR_KEYWORD, annotation=str | os.PathLike[str]))
    params += [P(p.attr, P.KEYWORD_ONLY, default=None, annotation=_input_type(p)) for p in rest]
    params += [
        P(o.attr, P.KEYWORD_ONLY, default=o.default, annotation=hints[o.attr])
        for o in options(stage.Options)
    ]
    types = {
        "overwrite": bool,
        "progress": bool,
        "resume": bool,
        "engine": Engine | None,
        "workers": int,
    }
    params += [P(name, P.KEYWORD_ONLY, default=d, annotation=types[name]) for name, d, *_ in RUN]
    names = [p.name for p in params]
    if clash := sorted({n for n in names if names.count(n) > 1}):  # pragma: no cover
        raise TypeError(f"the stage {stage.name} names {clash[0]!r} twice (input, option, out)")
    return inspect.Signature(params, return_annotation=dict[str, Any])


def _input_type(port: Input) -> Any:
    """The type of an input's parameter: a path (a list of them when it takes several) or,
    for a dataset, also what :func:`phisieve.io.sources.open_source` reads (an Arrow table
    or stream, a polars frame)."""
    import os

    from .pipeline.stage import DATASET

    one: Any = Any if port.kind == DATASET else str | os.PathLike[str]
    kind = list[one] if port.many else one
    return kind if port.positional else kind | None


def docstring(stage: type[Stage], sig: inspect.Signature) -> str:
    """The documentation of ``stage``'s function (numpy style, ``sig`` its signature): the
    stage's help, then every parameter with its input's or option's help, and what it
    returns."""
    import typing

    from .pipeline.options import params
    from .pipeline.stage import DATASET, PATH, SOURCE

    kinds = {
        DATASET: "a phisieve dataset folder, a Parquet file, an Arrow table or stream, or a "
        "polars frame",
        PATH: "a path",
        SOURCE: "a file or folder from outside phisieve",
    }
    first = [p for p in stage.inputs if p.positional]
    rest = [p for p in stage.inputs if not p.positional]
    where = f":class:`{stage.__module__}.{stage.__qualname__}`"
    lines = [_wrap(stage.help), "", _wrap(f"The stage ``phisieve {stage.name}`` ({where})."), ""]
    lines += ["Parameters", "----------"]
    for port in [*first, None, *rest]:
        if port is None:
            lines += ["out : str or PathLike", _wrap(stage.output.help, "    ")]
            continue
        many = ", several" if port.many else ""
        need = "" if port.positional else ", optional" if not port.required else ", required"
        lines += [f"{port.attr} : {kinds[port.kind]}{many}{need}", _wrap(port.help, "    ")]
    helps = [(p.attr, p.help) for p in params(stage.Options)] + [(r[0], r[2]) for r in RUN]
    for name, help in helps:
        p = sig.parameters[name]
        kind = " or ".join(_name(t) for t in typing.get_args(p.annotation) or [p.annotation])
        lines += [f"{name} : {kind}, default {p.default!r}", _wrap(help, "    ")]
    lines += [
        "",
        "Returns",
        "-------",
        "dict",
        _wrap(
            "The output's manifest (:func:`phisieve.pipeline.runner.run_stage`): the stage's "
            "statistics beside ``stage``, ``options``, ``inputs``, ``fingerprint``...",
            "    ",
        ),
    ]
    return "\n".join(lines) + "\n"


def _name(kind: Any) -> str:
    return "None" if kind is type(None) else kind.__name__


def _wrap(text: str, indent: str = "") -> str:
    import textwrap

    return textwrap.fill(
        " ".join(text.split()), 92, initial_indent=indent, subsequent_indent=indent
    )
