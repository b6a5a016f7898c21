"""What an algorithm reports to while it works: progress bars, counts and scratch space.

Every algorithm that takes long (reading a corpus, counting the index, detecting, training,
auditing) takes a :class:`Work` as its last argument, ``ctx``, and draws its progress with
``ctx.bar`` and counts into ``ctx.stats``; it never decides itself whether a bar is drawn.
The runner hands a stage its :class:`~phisieve.pipeline.stage.Context`, which is a ``Work``
that draws bars when the command asked for them and keeps scratch files beside the output;
called directly, an algorithm gets a plain ``Work()``: nothing drawn, stats kept, scratch in
the system's temporary folder.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from .stats import Stats

if TYPE_CHECKING:  # the declarations stay importable without pyarrow (an instant --help)
    import pyarrow as pa

    from ..io.sources import BatchSource

__all__ = ["Work", "work"]


class Work:
    """Progress, counts and scratch space of one piece of work (see the module).

    Parameters
    ----------
    progress
        Draw progress bars on standard error (rich).
    stats
        Where the work counts (a new :class:`Stats` by default).
    root
        Where :meth:`scratch` folders go (default: the system's temporary folder).
    """

    progress: bool
    stats: Stats

    def __init__(
        self, progress: bool = False, stats: Stats | None = None, root: Path | None = None
    ) -> None:
        self.progress = progress
        self.stats = Stats() if stats is None else stats
        self.root = root

    @contextmanager
    def bar(self, label: str, total: int | None, unit: str = "") -> Iterator[Callable[[int], None]]:
        """A progress bar (nothing when progress is off); yields ``advance(n)``."""
        if not self.progress:
            yield lambda n: None
            return
        from .progress import progress_bar

        with progress_bar(label, total=total, unit=unit) as advance:
            yield advance

    def counted(self, src: BatchSource, label: str, unit: str = "") -> BatchSource:
        """``src``, drawing a bar of the rows read each time it is read (``src`` itself when
        progress is off)."""
        if not self.progress:
            return src
        from ..io.sources import BatchSource

        def batches(columns: list[str] | None) -> Iterator[pa.RecordBatch]:
            with self.bar(label, src.num_rows, unit) as advance:
                for batch in src.batches(columns):
                    yield batch
                    advance(batch.num_rows)

        return BatchSource(batches, src.schema, src.reiterable, src.name, src.num_rows, src.path)

    def detached(self) -> Work:
        """A quiet-or-not copy of this work with stats of its own, which can be sent to
        another process (a reduce step on a worker)."""
        return Work(self.progress, root=self.scratch_root())

    @contextmanager
    def scratch(self, prefix: str) -> Iterator[Path]:
        """A folder for temporary files, removed when the block ends (also on error)."""
        import tempfile

        root = self.scratch_root()
        if root is not None and not root.is_dir():  # e.g. a worker on another machine
            root = None
        name = f"{'' if root is None else '.'}phisieve-{prefix}-"
        with tempfile.TemporaryDirectory(prefix=name, dir=root) as d:
            yield Path(d)

    def scratch_root(self) -> Path | None:
        """Where :meth:`scratch` folders go (``None``: the system's temporary folder)."""
        return self.root


def work(ctx: Work | None) -> Work:
    """``ctx``, or a quiet :class:`Work` when the caller gave none."""
    return Work() if ctx is None else ctx
