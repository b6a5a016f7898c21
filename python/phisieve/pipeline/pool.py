"""Worker processes of the local engine (``--workers N``): a stage's batch function and its
reduce steps on the machine's cores.

* **Batch functions** (:meth:`Workers.map`). The driver reads the main input in order and
  sends its batches to ``N`` worker processes (``spawn``), at most ``2 N`` at a time; the
  stage and the reduce's state are written once to a scratch file that each worker loads
  once. The results come back **in input order**, so the runner writes the same files as
  with one process. A :attr:`~phisieve.pipeline.stage.MapStage.grouped` stage (``encode``)
  gets runs of whole patients instead (cut where the patient changes), each on a fresh copy
  of its state (:meth:`~phisieve.pipeline.stage.MapStage.fork`) finished by its ``flush``;
  the driver refuses a patient whose documents are not consecutive, as one process does.
  What a worker counted comes back with each result: its stats, and what the stage kept in
  its state (:meth:`~phisieve.pipeline.stage.MapStage.gather`).
* **Reduce steps** (:meth:`Workers.scan`). A dataset on disk is cut into ``N`` pieces of
  consecutive rows, or with ``by`` into ``N`` pieces by a hash of that column (a patient's
  documents in one piece, in input order); each worker reads its piece itself.

A worker that dies (killed, out of memory) stops the run with a :class:`WorkerError`; the
runner then commits nothing, so the previous output (or none) stays.

Each worker's thread pools (polars, Rust, BLAS) get ``cpus // N`` threads, so ``N``
workers do not each start one thread per core. A script that runs stages with ``N > 1``
through the Python API must guard its entry point (``if __name__ == "__main__":``), as for
any ``spawn`` pool.
"""

from __future__ import annotations

import itertools
import math
import os
import pickle
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import PhisieveError, not_consecutive
from .stage import _many
from .stats import Stats

if TYPE_CHECKING:
    import pyarrow as pa

    from ..io.sources import BatchSource

__all__ = ["Piece", "WorkerError", "Workers", "available_cpus"]

THREAD_VARIABLES = (
    "POLARS_MAX_THREADS",
    "RAYON_NUM_THREADS",
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "TOKENIZERS_PARALLELISM",
)
"""What a worker's thread pools read (``TOKENIZERS_PARALLELISM``: off in a worker)."""

GROUP_ROWS = 4
"""A grouped stage's runs hold at least this many of its batches (then end with a patient)."""


class WorkerError(PhisieveError):
    """A worker process died (killed, out of memory): the stage's output was not written."""


def available_cpus() -> int:
    """The CPUs this process may use: its CPU affinity, bounded by its cgroup's CPU quota (a
    container limited to 4 CPUs of a 64-core machine gets 4)."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        n = os.cpu_count() or 1
    quota = cgroup_quota(Path("/sys/fs/cgroup"))
    if quota is not None:
        n = min(n, max(1, math.floor(quota)))
    return max(1, n)


def cgroup_quota(root: Path) -> float | None:
    """The CPU quota (CPUs) of the cgroup mounted at ``root`` (v2 ``cpu.max``, or v1
    ``cpu/cpu.cfs_quota_us`` over ``cpu.cfs_period_us``); ``None`` when unlimited or
    unknown."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        if quota == "max":
            return None
        return int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


# -- in a worker ---------------------------------------------------------------------------

_LOADED: dict[str, Any] = {}
"""The stage and its state in this worker, by the scratch file they came from."""


def _init(threads: int) -> None:
    for name in THREAD_VARIABLES:
        os.environ[name] = "false" if name == "TOKENIZERS_PARALLELISM" else str(threads)


def _loaded(path: str) -> Any:
    if path not in _LOADED:
        _LOADED.clear()  # one stage at a time
        with open(path, "rb") as f:
            _LOADED[path] = pickle.load(f)
    return _LOADED[path]


def _map_task(path: str, batch: pa.RecordBatch) -> tuple[list[Any], dict[str, Any], Any]:
    """The batch function on one batch, with what it counted."""
    stage, state = _loaded(path)
    stats = Stats()
    outs = list(_many(stage.map(batch, state, stats)))
    return outs, dict(stats), stage.gather(state)


def _group_task(
    path: str, batches: list[pa.RecordBatch], row: int
) -> tuple[list[Any], dict[str, Any], Any]:
    """The batch function on a run of whole patients (starting at ``row`` of the main
    input), on a fresh copy of the state, then its flush."""
    stage, state = _loaded(path)
    fresh = stage.fork(state, row)
    stats = Stats()
    outs: list[Any] = []
    for batch in batches:
        outs += _many(stage.map(batch, fresh, stats))
    for out in stage.flush(fresh, stats):
        outs += _many(out)
    return outs, dict(stats), stage.gather(fresh)


def _scan_task(fn: Callable[[Any], Any], piece: Piece) -> Any:
    return fn(piece.source())


# -- pieces of a dataset -------------------------------------------------------------------


@dataclass(frozen=True)
class Piece:
    """Rows of a Parquet dataset that a worker reads itself: ``slices`` (file, row group,
    first row in it, rows), and with ``by`` only the rows whose hash of that column falls
    in ``bucket`` of ``buckets``."""

    name: str
    slices: tuple[tuple[str, int, int, int], ...]
    batch_rows: int
    rows: int | None = None
    by: str | None = None
    bucket: int = 0
    buckets: int = 1
    schema_bytes: bytes = field(default=b"", repr=False)

    def source(self) -> BatchSource:
        """The piece as a :class:`~phisieve.io.sources.BatchSource` (read anew each time)."""
        import pyarrow as pa

        from ..io.sources import BatchSource

        schema = pa.ipc.read_schema(pa.py_buffer(self.schema_bytes))
        return BatchSource(self._batches, schema, True, self.name, self.rows)

    def _batches(self, columns: list[str] | None) -> Iterator[pa.RecordBatch]:
        import pyarrow.parquet as pq

        read = columns
        if self.by is not None and columns is not None and self.by not in columns:
            read = [*columns, self.by]
        for file, group, offset, rows in self.slices:
            with pq.ParquetFile(file, buffer_size=1 << 20, pre_buffer=False) as pf:
                seen = 0
                for batch in pf.iter_batches(
                    batch_size=self.batch_rows, row_groups=[group], columns=read,
                    use_threads=False,
                ):  # fmt: skip
                    lo, hi = max(offset - seen, 0), min(offset + rows - seen, batch.num_rows)
                    seen += batch.num_rows
                    if hi <= lo:
                        if seen >= offset + rows:
                            break
                        continue
                    part = batch.slice(lo, hi - lo)
                    if self.by is not None:
                        mask = bucket_mask(part.column(self.by), self.buckets, self.bucket)
                        part = part.filter(mask)
                        if read is not columns:
                            part = part.select(columns)
                    if part.num_rows:
                        yield part


def bucket_mask(values: pa.Array, buckets: int, bucket: int) -> pa.Array:
    """Which of ``values`` hash into ``bucket`` of ``buckets`` (the same in every process)."""
    import polars as pl
    import pyarrow as pa

    keys = pl.Series(values).cast(pl.String).hash(seed=7)
    return pa.array(((keys % buckets) == bucket).to_numpy())


def plan_pieces(
    src: BatchSource,
    pieces: int,
    by: str | None,
    batch_rows: int,
    rows: tuple[int, int] | None = None,
) -> list[Piece]:
    """``src`` (a dataset on disk; with ``rows``, only its rows ``first <= row < end``) cut
    into ``pieces`` of consecutive rows, or with ``by`` into ``pieces`` buckets by a hash of
    that column; read in batches of ``batch_rows``."""
    import pyarrow.parquet as pq

    from ..io.dataset import dataset_files

    assert src.path is not None
    path = Path(src.path)
    files = dataset_files(path) if path.is_dir() else [str(path)]
    groups: list[tuple[str, int, int]] = []
    for f in files:
        meta = pq.read_metadata(f)
        groups += [(f, g, meta.row_group(g).num_rows) for g in range(meta.num_row_groups)]
    schema = src.schema.serialize().to_pybytes()
    total = sum(n for *_, n in groups)
    first, end = (0, total) if rows is None else (max(0, rows[0]), min(total, rows[1]))
    if by is not None:
        every = _slices(groups, first, end)
        return [
            Piece(src.name, every, batch_rows, None, by, b, pieces, schema) for b in range(pieces)
        ]
    count = max(0, end - first)
    bounds = [first + count * i // pieces for i in range(pieces + 1)]
    out = []
    for lo, hi in itertools.pairwise(bounds):
        if hi <= lo and out:
            continue
        slices = _slices(groups, lo, hi)
        out.append(Piece(src.name, slices, batch_rows, hi - lo, schema_bytes=schema))
    return out


def _slices(
    groups: list[tuple[str, int, int]], lo: int, hi: int
) -> tuple[tuple[str, int, int, int], ...]:
    """The (file, row group, offset, rows) slices of the rows ``lo <= row < hi`` of row
    groups (file, row group, rows) taken in order."""
    slices, first = [], 0
    for f, g, n in groups:
        a, b = max(lo, first), min(hi, first + n)
        if a < b:
            slices.append((f, g, a - first, b - a))
        first += n
    return tuple(slices)


# -- in the driver -------------------------------------------------------------------------


class Workers:
    """``n`` worker processes (started on first use, ``spawn``), each with ``threads``
    threads in its thread pools.

    Parameters
    ----------
    n
        Worker processes.
    threads
        Threads of each worker's thread pools (default: the CPUs over ``n``).
    """

    def __init__(self, n: int, threads: int | None = None) -> None:
        if n < 1:
            raise ValueError(f"workers must be at least 1, not {n}")
        self.n = n
        self.threads = threads or max(1, available_cpus() // n)
        self._executor: Any = None

    def _pool(self) -> Any:
        if self._executor is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self._executor = ProcessPoolExecutor(
                self.n,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init,
                initargs=(self.threads,),
            )
        return self._executor

    def close(self) -> None:
        """Stop the worker processes (started again on next use)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def ordered(self, calls: Iterable[tuple[Callable[..., Any], tuple[Any, ...]]]) -> Iterator[Any]:
        """The results of ``calls`` (function, arguments), run in the workers with at most
        ``2 n`` pending, in the order of ``calls``."""
        from concurrent.futures.process import BrokenProcessPool

        pool = self._pool()
        pending: deque[Any] = deque()
        try:
            for fn, args in calls:
                pending.append(pool.submit(fn, *args))
                while len(pending) >= 2 * self.n:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        except BrokenProcessPool:
            self._executor = None
            raise WorkerError(
                "a worker process died (killed, out of memory) or could not start (a script "
                "that runs stages with workers must guard its entry point with `if __name__ "
                "== '__main__':`); nothing was written: run again, with fewer workers if "
                "memory ran out"
            ) from None
        finally:
            for future in pending:
                future.cancel()

    def map(self, stage: Any, ctx: Any, state: Any) -> Iterator[Any]:
        """Every output batch of the map stage ``stage`` (see the module), in input order;
        its stats merged into ``ctx.stats`` and what its state kept absorbed into
        ``state`` once the input is exhausted."""
        gathered: list[Any] = []
        with ctx.scratch("state") as folder:
            path = str(folder / "stage.pickle")
            with open(path, "wb") as f:
                pickle.dump((stage, state), f, protocol=5)
            batches = ctx.scan(stage.main, stage.columns)
            if stage.grouped:
                group = stage.group_columns()[0]
                calls: Iterable[Any] = (
                    (_group_task, (path, run, row))
                    for run, row in patient_runs(batches, group, stage, ctx.source(stage.main).name)
                )
            else:
                most = min(stage.task_rows or stage.batch_rows, stage.batch_rows)
                rows = task_rows(ctx.source(stage.main).num_rows, most, self.n)
                calls = (
                    (_map_task, (path, batch.slice(lo, rows)))
                    for batch in batches
                    for lo in range(0, batch.num_rows, rows)
                )
            for outs, stats, kept in self.ordered(calls):
                ctx.stats.merge(stats)
                if kept is not None:
                    gathered.append(kept)
                yield from outs
        stage.absorb(state, gathered)

    def scan(
        self,
        ctx: Any,
        src: BatchSource,
        fn: Callable[[Any], Any],
        by: str | None,
        label: str,
        rows: tuple[int, int] | None = None,
    ) -> list[Any]:
        """``fn``'s results on ``n`` pieces of the dataset ``src`` (only its rows ``rows``
        when given; see the module)."""
        pieces = plan_pieces(src, self.n, by, ctx.stage.batch_rows, rows)
        total = sum(p.rows or 0 for p in pieces) if by is None else src.num_rows or 0
        if by is not None and rows is not None:
            total = max(0, min(total, rows[1]) - max(0, rows[0]))
        results = []
        with ctx.bar(label, total, ctx.stage.unit) as advance:
            calls = ((_scan_task, (fn, p)) for p in pieces)
            for i, result in enumerate(self.ordered(calls)):
                results.append(result)
                rows = pieces[i].rows
                if rows is None:  # a bucket: its share
                    rows = total * (i + 1) // len(pieces) - total * i // len(pieces)
                advance(rows)
        return results


def task_rows(total: int | None, batch_rows: int, workers: int) -> int:
    """Rows sent to a worker at once for an ungrouped batch function: a stage's batch, or
    less when the input has too few batches to keep every worker busy (at least 8 tasks
    per worker, of at least 64 rows; the output never depends on where batches end)."""
    if total is None:
        return batch_rows
    return max(1, min(batch_rows, max(64, -(-total // (8 * workers)))))


def patient_runs(
    batches: Iterable[pa.RecordBatch], column: str, stage: Any, where: str
) -> Iterator[tuple[list[pa.RecordBatch], int]]:
    """Runs of ``stage``'s batches that end where the patient (``column``) changes, each with
    its first row: a run ends at the last change of patient in the batch that brings it to
    :data:`GROUP_ROWS` batches' rows. A patient whose rows come back after another
    patient's is refused (at its first row back)."""
    finished: set[Any] = set()
    last: Any = None
    run: list[pa.RecordBatch] = []
    rows = start = 0
    target = GROUP_ROWS * stage.batch_rows
    for batch in batches:
        patients = batch.column(column).to_pylist()
        for r, patient in enumerate(patients):
            if patient == last:
                continue
            if patient in finished:
                raise not_consecutive(where, start + rows + r, column)
            if last is not None:
                finished.add(last)
            last = patient
        if rows + batch.num_rows < target or not patients:
            run.append(batch)
            rows += batch.num_rows
            continue
        cut = len(patients)
        while cut and patients[cut - 1] == patients[-1]:
            cut -= 1
        if cut == 0:  # one patient throughout: the run goes on
            run.append(batch)
            rows += batch.num_rows
            continue
        run.append(batch.slice(0, cut))
        yield run, start
        start += rows + cut
        run, rows = [batch.slice(cut)], batch.num_rows - cut
    if run:
        yield run, start
