"""The ``phisieve`` command line: one command per stage (made from the stage's declaration,
:mod:`phisieve.cli.commands`), ``run`` and ``demo`` for pipeline files
(:mod:`phisieve.cli.pipeline`), ``audit`` with ``--compare`` (:mod:`phisieve.cli.audit`), and
the measuring commands ``detect-eval`` and ``coverage`` (:mod:`phisieve.cli.evaluate`).

Every command calls the same code as the Python API: the stage through the runner. Errors
that phisieve raises on purpose print one line (what and where, never note text) and exit
with status 2.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.markup import escape

from ..catalog import STAGES
from ..errors import PhisieveError
from . import audit, evaluate, pipeline
from .commands import register


class _Group(typer.core.TyperGroup):
    """typer's group, whose ``--help`` flag is False, not None, when it is not given: typer
    coerces a parameter's value through a pydantic adapter unless it is already a bool, so a
    None ``--help`` made every subcommand (``phisieve index --help``) import pydantic (0.2 s)."""

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
pipeline.register(app)
register(app, {name: cls for name, cls in STAGES.items() if name not in audit.STAGES})
audit.register(app)
evaluate.register(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``phisieve`` command."""
    try:
        app(args=argv, standalone_mode=False)
    except PhisieveError as e:
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
