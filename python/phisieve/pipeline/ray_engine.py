"""The Ray engine (``phisieve run FILE --engine ray``): the batch function on a Ray cluster.

For a stage whose batch function is **distributed** (:attr:`~phisieve.pipeline.stage.
Stage.distributed`: it keeps nothing between batches but what it counts in its stats) and
whose main input is a dataset on disk:

1. the input's row groups are read by Ray tasks (``ray.data``), each row numbered by its
   place in the dataset;
2. a **grouped** stage (``encode``: a patient's documents packed together) is partitioned
   by a hash of the patient id, so a patient's rows meet in one partition, where they are
   put back in input order; other stages keep Ray's blocks as they are;
3. the stage's batch function runs in Ray actors (``map_batches`` / ``map_groups`` with
   ``batch_format="pyarrow"``), each holding one copy of the reduce's state (recognizers,
   tokenizer, tables), loaded once per actor;
4. the rows come back to the runner **in input order** (a grouped stage's output is sorted
   by its patient's first row, then by its place among the patient's rows), so the runner
   writes the same part files as the local engine, through the same dataset contract; the
   workers' stats are merged.

The reduce steps (the corpus statistics a batch function needs) run on the cluster too,
through :meth:`RayEngine.scan`: a function on Ray's blocks, or, when its counts need each
patient whole, on partitions by a hash of the patient id (an all-to-all step); the driver
only combines the pieces' results. The index is the merge of the indexes of its pieces
(:func:`phisieve.merge_terms`: equal to the one-pass index), the protected share and the
``lists`` recognizer's statistics add up, ``surrogate``'s date anchors take the latest
year. The stages whose work is neither (models,
reports) run in the driver process, as with the local engine.

Setup (:func:`connect`): Ray is started only when it is not running already; a local
instance gets no dashboard, a bounded object store and no token file, and Ray's own logs
stay out of phisieve's output.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import sys
import tempfile
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import ray
    import ray.data

from ..errors import PhisieveError, not_consecutive
from ..io.dataset import dataset_files
from .engine import Engine, LocalEngine
from .stage import DATASET, DATASETS, _many
from .stats import Stats

__all__ = ["RayEngine", "connect"]

ROW = "__phisieve_row"
BUCKET = "__phisieve_bucket"
FIRST = "__phisieve_first"
SUB = "__phisieve_sub"
PART = "__phisieve_part"
_INTERNAL = (ROW, BUCKET, FIRST, SUB, PART)


def default_object_store() -> int:
    """The object store of a local Ray instance: a fifth of the machine's memory, at most
    4 GiB (Ray's own default takes 30%, and spills to disk beyond it)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # pragma: no cover - not a POSIX system
        total = 8 * 2**30
    return int(min(4 * 2**30, max(2**28, total // 5)))


def connect(
    address: str | None = None,
    *,
    num_cpus: int | None = None,
    object_store_memory: int | None = None,
) -> bool:
    """Make sure Ray is running; return True when this call started it.

    Nothing happens when Ray is initialised already. With ``address`` the driver joins that
    cluster (``auto``: the one on this machine; ``ray://HOST:10001``: a remote one). Without
    it a local instance is started with ``num_cpus`` CPUs (default: all), no dashboard, an
    object store of ``object_store_memory`` bytes (default: :func:`default_object_store`),
    token authentication off unless ``RAY_AUTH_MODE`` says otherwise (so no token file is
    written to the home folder), usage statistics off, and its logs kept out of the
    driver's output.
    """
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # The C++ core's log lines (warnings about actors' arguments...) off the terminal;
    # errors still reach phisieve as exceptions.
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
    quiet: dict[str, Any] = {
        "log_to_driver": False,
        "logging_level": logging.ERROR,
        "configure_logging": True,
    }
    with warnings.catch_warnings(), _stderr_aside():
        warnings.simplefilter("ignore", DeprecationWarning)
        if address is not None:
            ray.init(address=address, **quiet)
        else:
            ray.init(
                num_cpus=num_cpus,
                include_dashboard=False,
                object_store_memory=object_store_memory or default_object_store(),
                **quiet,
            )
    return True


@contextlib.contextmanager
def _stderr_aside() -> Iterator[None]:
    """Ray's C++ core prints its start-up lines straight to file descriptor 2: they go to a
    temporary file, shown only if the start fails."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # pytest's capture, a notebook...
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as aside:
        os.dup2(aside.fileno(), fd)
        try:
            yield
        except BaseException:
            os.dup2(saved, fd)
            aside.seek(0)
            sys.stderr.write(aside.read()[-4000:].decode("utf-8", "replace"))
            raise
        finally:
            os.dup2(saved, fd)
            os.close(saved)


def _quiet() -> None:
    """Ray's warnings and log lines stay out of phisieve's output."""
    warnings.filterwarnings("ignore", module=r"ray(\.|$)")
    warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*ray.*")
    for name in ("ray", "ray.data", "ray.train", "ray.tune"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _data_context(workers: int) -> None:
    _quiet()
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    # The sort-based shuffle (tasks) for grouped stages and reduce steps by patient: Ray
    # Data's default starts aggregator actors for every shuffle, about 17 s each on 2 CPUs
    # however small the data. The output does not depend on it.
    if hasattr(ctx, "shuffle_strategy"):
        ctx.shuffle_strategy = "sort_shuffle_pull_based"
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    ctx.enable_operator_progress_bars = False
    if hasattr(ctx, "enable_rich_progress_bars"):
        ctx.enable_rich_progress_bars = False


@ray.remote(num_cpus=0)
class _Collector:
    """Where the workers' stats add up."""

    def __init__(self) -> None:
        self.stats = Stats()
        self.gathered: list[Any] = []

    def add(self, stats: dict[str, Any], gathered: Any) -> None:
        self.stats.merge(stats)
        if gathered is not None:
            self.gathered.append(gathered)

    def get(self) -> tuple[dict[str, Any], list[Any]]:
        return dict(self.stats), self.gathered


def _read(items: pa.Table, columns: list[str], group: str | None, buckets: int) -> pa.Table:
    """Slices of the input's row groups (``file``, ``group``, ``offset``, ``rows``), each
    row numbered by its place in the dataset (``first`` is the slice's first), with a
    bucket (a hash of its patient) for grouped stages."""
    tables = []
    for f, g, first, offset, rows in zip(
        *(items.column(c).to_pylist() for c in ("file", "group", "first", "offset", "rows")),
        strict=True,
    ):
        with pq.ParquetFile(f) as pf:
            t = pf.read_row_group(g, columns=columns).slice(offset, rows)
        t = t.append_column(ROW, pa.array(np.arange(first, first + t.num_rows, dtype=np.int64)))
        tables.append(t)
    table = pa.concat_tables(tables)
    if group is not None:
        import polars as pl

        keys = pl.Series(table.column(group).combine_chunks()).cast(pl.String).hash(seed=7)
        table = table.append_column(BUCKET, pa.array((keys % buckets).to_numpy(), pa.int64()))
    return table


def _output(outs: list[Any], schema: pa.Schema, parts: list[str] | None) -> pa.Table:
    """The batch function's outputs as one table (for a folder of datasets, with each row's
    part)."""
    tables = []
    for out in outs:
        if isinstance(out, dict):
            assert parts is not None
            for name, rows in out.items():
                t = pa.Table.from_batches([rows]) if isinstance(rows, pa.RecordBatch) else rows
                if t.num_rows:
                    t = t.cast(schema)
                    tables.append(t.append_column(PART, pa.array([name] * t.num_rows)))
            continue
        t = pa.Table.from_batches([out]) if isinstance(out, pa.RecordBatch) else out
        if t.num_rows:
            tables.append(t.cast(schema))
    if not tables:
        empty = schema.empty_table()
        return empty if parts is None else empty.append_column(PART, pa.array([], pa.string()))
    return pa.concat_tables(tables)


class _Mapper:
    """An actor running the stage's batch function on blocks in order (ungrouped)."""

    def __init__(
        self, stage: Any, state: Any, collector: Any, schema: pa.Schema, parts: list[str] | None
    ) -> None:
        if isinstance(state, list):
            state = _state(state[0])  # loaded once per worker
        self.stage, self.state, self.collector = stage, state, collector
        self.schema, self.parts = schema, parts

    def __call__(self, table: pa.Table) -> pa.Table:
        outs = _apply(self.stage, self.state, table, self.collector, flush=False)
        return _output(outs, self.schema, self.parts)


def _apply(stage: Any, state: Any, table: pa.Table, collector: Any, *, flush: bool) -> list[Any]:
    """The stage's batch function over ``table`` (its internal columns dropped) in batches
    of the stage's size, then its flush when asked; the stats and what the state kept go
    to the collector."""
    stats = Stats()
    data = table.drop_columns([c for c in _INTERNAL if c in table.column_names])
    outs: list[Any] = []
    for batch in data.to_batches(max_chunksize=stage.batch_rows):
        outs.extend(_many(stage.map(batch, state, stats)))
    for out in stage.flush(state, stats) if flush else ():
        outs.extend(_many(out))
    ray.get(collector.add.remote(dict(stats), stage.gather(state)))
    return outs


_STATES: dict[str, Any] = {}
"""The reduce's state in this worker process, by object id: loaded once per worker."""


def _state(ref: Any) -> Any:
    key = ref.hex()
    if key not in _STATES:
        _STATES.clear()  # one stage at a time
        _STATES[key] = ray.get(ref)
    return _STATES[key]


def _check_consecutive(table: pa.Table, group: str, where: str) -> None:
    """Refuse a patient whose rows are not consecutive in the input, as the local engine
    does, naming the first row where one comes back after another patient's."""
    import polars as pl

    rows = pl.DataFrame({"p": table.column(group).combine_chunks(), "r": table.column(ROW)})
    gaps = rows.with_columns(prev=pl.col("r").shift(1).over("p")).filter(
        pl.col("prev").is_not_null() & (pl.col("r") != pl.col("prev") + 1)
    )
    if gaps.height:
        raise not_consecutive(where, int(gaps["r"].min()), group)


def _unwrapped(error: BaseException) -> BaseException | None:
    """The phisieve error a Ray task raised, out of Ray's wrappers."""
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, PhisieveError):
            return error
        error = getattr(error, "cause", None) or error.__cause__  # type: ignore[assignment]
        seen += 1
    return None


def _map_group(
    table: pa.Table,
    stage: Any,
    state: list[Any],
    collector: Any,
    schema: pa.Schema,
    parts: list[str] | None,
    group_in: str,
    group_out: str,
    where: str,
) -> pa.Table:
    """The batch function on a whole partition of patients (a task; the state is loaded
    once per worker process): the rows put back in input order, the state fresh for the
    partition, and each output row keyed by its patient's first row and its place among
    the patient's output rows."""
    table = table.sort_by(ROW)
    _check_consecutive(table, group_in, where)
    fresh = stage.fork(_state(state[0]))
    out = _output(_apply(stage, fresh, table, collector, flush=True), schema, parts)
    first: dict[str, int] = {}
    for p, r in zip(table.column(group_in).to_pylist(), table.column(ROW).to_pylist(), strict=True):
        first.setdefault(str(p), r)
    seen: dict[str, int] = {}
    firsts, subs = [], []
    for p in out.column(group_out).to_pylist():
        firsts.append(first[str(p)])
        subs.append(seen.get(p, 0))
        seen[p] = subs[-1] + 1
    out = out.append_column(FIRST, pa.array(firsts, pa.int64()))
    return out.append_column(SUB, pa.array(subs, pa.int64()))


def _piece(table: pa.Table, fn: list[Any]) -> pa.Table:
    """A reduce step's function on one piece (a block, or a partition of patients put back
    in input order): its result, pickled, and the rows it read."""
    if ROW in table.column_names:
        table = table.sort_by(ROW)
    data = table.drop_columns([c for c in _INTERNAL if c in table.column_names])
    result = _state(fn[0])(data)
    return pa.table(
        {
            "rows": pa.array([data.num_rows], pa.int64()),
            "result": pa.array([pickle.dumps(result, protocol=5)], pa.large_binary()),
        }
    )


def _bound(args: tuple[Any, ...]) -> type:
    """:class:`_Mapper` with its arguments bound (sent with the class, not as constructor
    arguments, which Ray would log about)."""

    class Bound(_Mapper):
        def __init__(self) -> None:
            super().__init__(*args)

    return Bound


class RayEngine(Engine):
    """The batch functions of distributed stages on Ray (see the module's documentation).

    Parameters
    ----------
    address
        The cluster to join; ``None`` starts a local instance (:func:`connect`).
    workers
        Parallel batch functions (actors) and, for grouped stages, partitions; default:
        the cluster's CPUs. The output never depends on it.
    object_store_memory
        For a local instance: the object store's bytes.
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        workers: int | None = None,
        object_store_memory: int | None = None,
    ) -> None:
        self.started = connect(address, num_cpus=workers, object_store_memory=object_store_memory)
        cpus = float(ray.cluster_resources().get("CPU", 1))
        self.workers = max(1, workers or int(cpus))
        # More workers than CPUs share them (the output never depends on the count).
        self.actor_cpus = min(1.0, cpus / self.workers)
        _data_context(self.workers)

    def describe(self) -> dict[str, Any]:
        return {"engine": self.name, "workers": self.workers}

    def close(self) -> None:
        if self.started and ray.is_initialized():
            ray.shutdown()
            self.started = False

    def batches(self, stage: Any, ctx: Any, state: Any) -> Iterator[Any]:
        src = ctx.values.get(stage.main) if stage.main else None
        kind = stage.output_kind()
        if (
            not stage.distributed
            or src is None
            or getattr(src, "path", None) is None
            or kind not in (DATASET, DATASETS)
        ):
            return stage.batches(ctx, state)
        return self._distributed(stage, ctx, state, src)

    def _dataset(self, src: Any, columns: list[str] | None, group: str | None) -> ray.data.Dataset:
        """The input's rows as a Ray dataset: slices of its row groups read by Ray tasks,
        each row numbered by its place (and, with ``group``, given its patient's bucket)."""
        _data_context(self.workers)
        items: dict[str, list[Any]] = {c: [] for c in ("file", "group", "first", "offset", "rows")}
        groups = []
        for f in dataset_files(src.path):
            meta = pq.read_metadata(f)
            groups += [(f, g, meta.row_group(g).num_rows) for g in range(meta.num_row_groups)]
        # Blocks of at most a row group, and small enough to keep every worker busy.
        total = sum(n for *_, n in groups)
        target = max(256, -(-total // (8 * self.workers)))
        first = 0
        for f, g, n in groups:
            for offset in range(0, n, target):
                items["file"].append(f)
                items["group"].append(g)
                items["first"].append(first + offset)
                items["offset"].append(offset)
                items["rows"].append(min(target, n - offset))
            first += n
        # One block per slice, so the reads spread over the workers.
        table = pa.table(items)
        ds = ray.data.from_arrow([table.slice(i, 1) for i in range(table.num_rows)])
        return ds.map_batches(
            _read,
            batch_format="pyarrow",
            batch_size=1,
            # The same CPUs as the batch function's actors, so that Ray fuses the read into
            # them (a read task waiting for a CPU that the actors hold would wait forever).
            num_cpus=self.actor_cpus,
            fn_kwargs={"columns": columns, "group": group, "buckets": self.workers},
        )

    def scan(
        self,
        ctx: Any,
        name: str,
        fn: Any,
        columns: list[str] | None = None,
        *,
        by: str | None = None,
        label: str | None = None,
        rows: tuple[int, int] | None = None,
        threaded: bool = False,
    ) -> list[Any]:
        """``fn`` in Ray tasks on the input's blocks, or with ``by`` on partitions by a hash
        of that column (an all-to-all step); one piece here for an input held in memory or
        for some of its ``rows`` (see :meth:`phisieve.pipeline.engine.Engine.scan`; ``threaded``
        changes nothing: each Ray task is one piece)."""
        src = ctx.source(name)
        if getattr(src, "path", None) is None or rows is not None:
            return LocalEngine().scan(ctx, name, fn, columns, by=by, label=label, rows=rows)
        cols = None if columns is None else list(dict.fromkeys([*columns, *([by] if by else [])]))
        ds = self._dataset(src, cols, by)
        kwargs = {"fn": [ray.put(fn)]}
        if by is None:
            ds = ds.map_batches(
                _piece, batch_format="pyarrow", batch_size=None, fn_kwargs=kwargs,
                num_cpus=self.actor_cpus,
            )  # fmt: skip
        else:
            ds = ds.groupby(BUCKET).map_groups(_piece, fn_kwargs=kwargs, batch_format="pyarrow")
        results = []
        with ctx.bar(label or name, src.num_rows, ctx.stage.unit) as advance:
            try:
                for table in ds.iter_batches(batch_format="pyarrow", batch_size=None):
                    for rows, blob in zip(
                        table.column("rows").to_pylist(), table.column("result").to_pylist(),
                        strict=True,
                    ):  # fmt: skip
                        results.append(pickle.loads(blob))
                        advance(rows)
            except Exception as e:
                cause = _unwrapped(e)
                if cause is None:
                    raise
                raise cause from None
        if not results:
            empty = pa.schema([src.schema.field(c) for c in cols]) if cols else src.schema
            results.append(fn(empty.empty_table()))
        return results

    def _distributed(self, stage: Any, ctx: Any, state: Any, src: Any) -> Iterator[Any]:
        kind = stage.output_kind()
        parts = stage.parts() if kind == DATASETS else None
        schema = stage.schema(ctx, state)
        columns = list(stage.columns) if stage.columns is not None else None
        group = stage.group_columns() if stage.grouped else None
        ds = self._dataset(src, columns, group[0] if group else None)
        collector = _Collector.remote()  # type: ignore[attr-defined]
        state_ref = ray.put(state)
        args = (stage, [state_ref], collector, schema, parts)
        with ctx.bar(stage.name, src.num_rows, stage.unit) as advance:
            if group is None:
                ds = ds.map_batches(
                    _bound(args),
                    batch_format="pyarrow",
                    # Whole blocks (the actor cuts them into the stage's batches): with a
                    # batch size, Ray Data fed one actor of the pool and left the others idle.
                    batch_size=None,
                    compute=ray.data.ActorPoolStrategy(size=self.workers),
                    num_cpus=self.actor_cpus,
                )
            else:
                ds = (
                    ds.groupby(BUCKET)
                    .map_groups(
                        _map_group,
                        fn_kwargs={
                            "stage": stage,
                            "state": [state_ref],
                            "collector": collector,
                            "schema": schema,
                            "parts": parts,
                            "group_in": group[0],
                            "group_out": group[1],
                            "where": src.name,
                        },
                        batch_format="pyarrow",
                    )
                    .sort([FIRST, SUB])
                )
            try:
                for table in ds.iter_batches(batch_format="pyarrow", batch_size=None):
                    yield from _route(table, parts)
            except Exception as e:
                cause = _unwrapped(e)
                if cause is None:
                    raise
                raise cause from None
            advance(src.num_rows or 0)
        stats, gathered = ray.get(collector.get.remote())
        ctx.stats.merge(stats)
        stage.absorb(state, gathered)


def _route(table: pa.Table, parts: list[str] | None) -> Iterator[Any]:
    data = table.drop_columns([c for c in (ROW, BUCKET, FIRST, SUB) if c in table.column_names])
    if parts is None:
        yield from data.to_batches()
        return
    import pyarrow.compute as pc

    names = data.column(PART)
    rows = data.drop_columns([PART])
    yield {name: rows.filter(pc.equal(names, name)) for name in parts}
