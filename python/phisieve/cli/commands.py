"""Commands made from stages: one ``phisieve NAME`` per stage, from its declaration.

A stage's inputs become the command's arguments (``DOCS``) and options (``--terms``), its
options dataclass the remaining options (:mod:`phisieve.pipeline.options`: the same names a
pipeline file uses), and every command takes ``--out``, ``--overwrite``, ``--quiet`` and
``--workers``. The
command builds the stage, runs it through the runner and prints the stage's summary of the
committed output (:mod:`phisieve.cli.render`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from ..pipeline.options import params
from ..pipeline.stage import Stage

Hook = Callable[[dict[str, Any]], bool]
"""Called with a command's arguments before the stage runs; True: it handled the command."""


def _param(name: str, annotation: Any, default: Any = inspect.Parameter.empty) -> Any:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=annotation)  # fmt: skip


def stage_parameters(cls: type[Stage], *, loose: bool = False) -> list[inspect.Parameter]:
    """The command-line parameters of ``cls``: inputs, ``--out``, options, ``--overwrite``,
    ``--quiet``, ``--workers``. ``loose``: no input or ``--out`` is required on the command
    line (the command checks them itself, e.g. ``audit`` without ``--compare``)."""
    out: list[inspect.Parameter] = []
    for port in cls.inputs:
        kind: Any = list[Path] if port.many else Path
        if port.positional:
            info = typer.Argument(help=port.help, show_default=False)
            if port.required and not port.many:
                out.append(_param(port.attr, Annotated[kind, info]))
            else:
                out.append(_param(port.attr, Annotated[kind | None, info], None))
        else:
            info = typer.Option(f"--{port.name}", help=port.help, show_default=False)
            if port.required and not loose:
                out.append(_param(port.attr, Annotated[kind, info]))
            else:
                out.append(_param(port.attr, Annotated[kind | None, info], None))
    out_info = typer.Option("--out", "-o", help=cls.output.help, show_default=False)
    if not loose:
        out.append(_param("out", Annotated[Path, out_info]))
    else:
        out.append(_param("out", Annotated[Path | None, out_info], None))
    for p in params(cls.Options):
        decls = [p.flag]
        if p.type is bool and p.negatable:
            decls = [f"{p.flag}/--no-{p.key}"]
        if p.short:
            decls.append(p.short)
        kind = p.type | None if p.optional else p.type
        info = typer.Option(*decls, help=p.help, hidden=p.hidden)
        out.append(_param(p.attr, Annotated[kind, info], p.default))
    out.append(
        _param(
            "overwrite",
            Annotated[
                bool,
                typer.Option(
                    help="Replace an existing output (atomically: the old one stays until the "
                    "new one is complete)."
                ),
            ],
            False,
        )
    )
    quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")]
    out.append(_param("quiet", quiet, False))
    out.append(_param("workers", WORKERS, None))
    return out


WORKERS = Annotated[
    int | None,
    typer.Option(
        "--workers",
        "-w",
        help="Worker processes on this machine (default: the CPUs this process may use; 1: "
        "everything in this process). The output is the same files whatever the number.",
        show_default=False,
    ),
]
"""The ``--workers`` option of every stage's command and of ``phisieve run``."""


def workers_or_default(workers: int | None) -> int:
    """``--workers``, checked, or the CPUs this process may use."""
    from ..errors import ConfigError

    if workers is None:
        from ..pipeline.pool import available_cpus

        return available_cpus()
    if workers < 1:
        raise ConfigError(f"--workers must be at least 1, not {workers}")
    return workers


def run_command(cls: type[Stage], kwargs: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """Build ``cls`` from command-line arguments, run it and print its summary."""
    from rich.console import Console

    from ..pipeline.runner import run_stage
    from .render import render

    inputs = {port.name: kwargs.pop(port.attr) for port in cls.inputs}
    out = kwargs.pop("out")
    overwrite = kwargs.pop("overwrite")
    quiet = kwargs.pop("quiet")
    workers = workers_or_default(kwargs.pop("workers", None))
    stage = cls(cls.Options(**kwargs), **extra)
    manifest = run_stage(
        stage, inputs, out, overwrite=overwrite, progress=not quiet, workers=workers
    )
    out_console = Console()
    for line in render(cls, manifest, Path(out)):
        out_console.print(line, soft_wrap=True)
    return manifest


def stage_command(
    cls: type[Stage],
    *,
    extra: list[inspect.Parameter] | None = None,
    hook: Hook | None = None,
) -> Callable[..., None]:
    """The typer command of ``cls`` (with ``extra`` parameters, and a ``hook`` that may handle
    the command instead)."""
    parameters = stage_parameters(cls, loose=hook is not None)
    names = [p.name for p in parameters]
    more = extra or []

    def command(**kwargs: Any) -> None:
        if hook is not None and hook(kwargs):
            return
        for p in more:
            kwargs.pop(p.name, None)
        if kwargs.get("out") is None:
            raise typer.BadParameter("missing option '--out'")
        run_command(cls, {k: kwargs[k] for k in names})

    signature = inspect.Signature([*parameters, *more])
    command.__signature__ = signature  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
    command.__doc__ = cls.help
    command.__name__ = cls.name.replace("-", "_")
    return command


def register(app: typer.Typer, stages: dict[str, type[Stage]]) -> None:
    """One command per stage."""
    for name, cls in stages.items():
        app.command(name)(stage_command(cls))
