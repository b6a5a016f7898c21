"""``phisieve audit``: the audit stage's command, and ``--compare REPORT...`` for reports side
by side (the ``audit-compare`` stage)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Any

import typer

from ..audit.stage import AuditCompareStage, AuditStage
from ..errors import ConfigError
from .commands import run_command, stage_command

STAGES = ("audit", "audit-compare")
"""The stages this module makes the command of."""

EXTRA = [
    inspect.Parameter(
        "compare",
        inspect.Parameter.KEYWORD_ONLY,
        default=False,
        annotation=Annotated[
            bool,
            typer.Option(help="Put the REPORTS (audit report folders) side by side instead."),
        ],
    ),
    inspect.Parameter(
        "reports",
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[
            list[Path] | None, typer.Argument(help="With --compare: report folders.")
        ],
    ),
]


def _compare(kwargs: dict[str, Any]) -> bool:
    """Run ``--compare``; refuse report folders without it."""
    reports = kwargs.pop("reports")
    if not kwargs.pop("compare"):
        if reports:
            raise ConfigError("report folders are given with --compare")
        return False
    if not reports:
        raise ConfigError("--compare needs report folders: audit --compare A B --out DIR")
    if kwargs.get("out") is None:
        raise ConfigError("--compare needs --out DIR")
    run_command(
        AuditCompareStage,
        {"reports": reports, "out": kwargs["out"], "overwrite": kwargs["overwrite"],
         "quiet": kwargs["quiet"]},
    )  # fmt: skip
    return True


def register(app: typer.Typer) -> None:
    """``phisieve audit``."""
    app.command("audit")(stage_command(AuditStage, extra=EXTRA, hook=_compare))
