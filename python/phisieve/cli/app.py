"""The ``phisieve`` command line: one command per stage (made from the stage's declaration,
:mod:`phisieve.cli.commands`), ``run`` and ``demo`` for pipeline files
(:mod:`phisieve.cli.pipeline`), ``audit`` with ``--compare`` (:mod:`phisieve.cli.audit`), and
the measuring commands ``detect-eval`` and ``coverage`` (:mod:`phisieve.cli.evaluate`).

Every command calls the same code as the Python API: the stage through the runner. Errors
that phisieve raises on purpose print one line (what and where, never note text) and exit
with status 2.

A command is built when it is used: ``phisieve index --help`` imports the index stage's
declaration and builds its command, not the other twenty-two (``phisieve --help`` builds them
all, for their one-line help).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, MutableMapping
from typing import Any

import typer

from ..catalog import STAGES
from ..errors import PhisieveError

MODULES: dict[str, str] = {
    "run": ".pipeline",
    "demo": ".pipeline",
    # audit and audit-compare: the one command of cli/audit.py
    **{name: ".commands" for name in STAGES if name not in ("audit", "audit-compare")},
    "audit": ".audit",
    "detect-eval": ".evaluate",
    "coverage": ".evaluate",
}
"""Every command, in the order ``phisieve --help`` lists them -> the module that makes it:
its ``register(app)`` adds it (``commands.register`` takes the stage too)."""


def _register(name: str, app: typer.Typer) -> None:
    """Add command ``name`` (and the other commands its module makes) to ``app``."""
    module = importlib.import_module(MODULES[name], __package__)
    if MODULES[name] == ".commands":
        module.register(app, {name: STAGES[name]})
    else:
        module.register(app)


class _Commands(MutableMapping[str, Any]):
    """The group's commands by name (every name of :data:`MODULES`, in its order); a command
    is made, with its module's others, the first time it is looked up."""

    def __init__(self, app: typer.Typer) -> None:
        self._app = app
        self._built: dict[str, Any] = {}
        self._names = list(MODULES)

    def _build(self, name: str) -> None:
        sub = typer.Typer()
        _register(name, sub)
        for info in sub.registered_commands:
            command = typer.main.get_command_from_info(
                info,
                pretty_exceptions_short=self._app.pretty_exceptions_short,
                rich_markup_mode=self._app.rich_markup_mode,
            )
            self._built.setdefault(command.name, command)

    def __getitem__(self, name: str) -> Any:
        if name not in self._built and name in MODULES:
            self._build(name)
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        if name not in self._names:
            self._names.append(name)
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        self._names.remove(name)
        self._built.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names


class _Group(typer.core.TyperGroup):
    """typer's group with its commands made on first use (:class:`_Commands`), and whose
    ``--help`` flag is False, not None, when it is not given: typer coerces a parameter's
    value through a pydantic adapter unless it is already a bool, so a None ``--help`` made
    every subcommand (``phisieve index --help``) import pydantic (0.2 s)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        registered = self.commands  # those of app.command(), if any: after MODULES's
        self.commands = _Commands(app)
        self.commands.update(registered)

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return list(self.commands)

    def get_help_option(self, ctx: typer.Context) -> typer.core.TyperOption | None:
        option = super().get_help_option(ctx)
        if option is not None and option.default is None:
            option.default = False
        return option


app = typer.Typer(
    cls=_Group,
    name="phisieve",
    help="Prepare clinical text corpora for language-model training without letting the "
    "model memorise who the patients are.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help: rich's help panels import markdown-it and rich.markdown on every --help
    # (0.35 s of a subcommand's help).
    rich_markup_mode=None,
)


@app.callback()
def _phisieve() -> None:
    # A group's callback: with its commands made by _Group, the app registers none itself,
    # and typer makes a group of an app with a callback.
    pass


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``phisieve`` command."""
    try:
        app(args=argv, standalone_mode=False)
    except PhisieveError as e:
        from rich.console import Console
        from rich.markup import escape

        Console(stderr=True).print(f"[red]error:[/] {escape(str(e))}", highlight=False)
        sys.exit(2)
    except (typer.Exit, SystemExit) as e:
        code = getattr(e, "exit_code", getattr(e, "code", 0))
        sys.exit(code)
    except Exception as e:  # usage errors (click's, or the copy typer vendors)
        show, code = getattr(e, "show", None), getattr(e, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            sys.exit(code)
        raise


if __name__ == "__main__":
    main()
