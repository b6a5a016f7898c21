"""Progress bars on standard error (rich), drawn for a :class:`~phisieve.pipeline.work.Work`
that shows progress; transformers kept quiet meanwhile."""

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
    label: str, *, total: int | None = None, unit: str = ""
) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)``; draws a bar on stderr (whether to draw one is the caller's
    :class:`~phisieve.pipeline.work.Work`'s to decide)."""
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


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """Keep transformers' own progress bars and warnings (loading and saving weights, a new
    classifier head) off the console while a stage works; phisieve draws its own progress."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - the torch extra is not installed
        yield
        return
    previous, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(previous)
        if bars:
            hf_logging.enable_progress_bar()
