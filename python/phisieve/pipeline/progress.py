"""Progress bars on standard error (rich), or nothing when disabled."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

_console = Console(stderr=True)


@contextmanager
def progress_bar(
    label: str, *, total: int | None = None, unit: str = "", enabled: bool = True
) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)``; draws a bar on stderr when ``enabled``."""
    if not enabled:
        yield lambda n: None
        return
    columns = [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    ]
    with Progress(*columns, console=_console, transient=False) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)
