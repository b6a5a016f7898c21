"""The ``Stage`` base class: what a stage declares, and nothing the runner does for it.

A stage declares

* its **options**: a frozen dataclass of typed fields (:func:`phisieve.pipeline.options.
  option`), shared by its command (``phisieve NAME --max-len 128``) and the pipeline file
  (``max-len = 128``);
* its **inputs** (:class:`Input`: datasets, or paths such as a tokenizer folder or a key
  file) and its **output** (:class:`Output`: a dataset, a folder of datasets, a folder such
  as a model or a report, or a file), with the schema of a dataset output;
* its work, by its kind, each overriding one method:

  - a :class:`MapStage`: a **batch function** :meth:`MapStage.map` over the record batches
    of its ``main`` input, after an optional **reduce** :meth:`Stage.reduce` that reads the
    whole corpus first and whose result the batch function receives (a patient's date
    shift, the corpus statistics of the dictionaries...);
  - a :class:`RowsStage`: :meth:`RowsStage.batches`, rows made from its reduce or from
    nothing (the index's terms, generated notes);
  - a :class:`BuildStage`, whose output is not a stream of rows (a model, a report):
    :meth:`BuildStage.build`, which fills the folder (or file) the runner gives it.
* its **summary** (:mod:`phisieve.pipeline.summary`): what its command prints, read from the
  output's manifest once it is committed.

The runner (:mod:`phisieve.pipeline.runner`) alone checks the inputs and the output, opens
the inputs, handles ``--overwrite`` and one-shot streams, records options and inputs' identity
in the manifest, draws progress, merges the stage's :class:`~phisieve.pipeline.stats.Stats`
and commits the output through the dataset contract (:mod:`phisieve.io.dataset`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import InputError
from .options import deciding, settings
from .stats import Stats
from .summary import Summary
from .work import Work

if TYPE_CHECKING:  # the declarations stay importable without pyarrow (an instant --help)
    import pyarrow as pa

    from ..io.sources import BatchSource

DATASET = "dataset"
"""An output or input that is a phisieve dataset (a folder of Parquet files with a marker)."""
DATASETS = "datasets"
"""An output that is a folder of named datasets (``split``: ``OUT/members/``...)."""
FOLDER = "folder"
"""An output that is a folder of files (a model, a tokenizer, a report)."""
FILE = "file"
"""An output that is one file (a key, a word list, a CSV corpus)."""
PATH = "path"
"""An input that is a file or folder (a tokenizer, a model, a key, a word list): checked
through its marker when phisieve wrote it."""
SOURCE = "source"
"""An input of raw files from outside phisieve (what ``ingest`` reads)."""


@dataclass(frozen=True)
class Input:
    """One input of a stage.

    Parameters
    ----------
    name
        Its name on the command line and in the pipeline file: the argument ``DOCS`` (when
        ``positional``) or the option ``--NAME``, and the key ``NAME``.
    help
        One line for ``--help``.
    kind
        :data:`DATASET` (a phisieve dataset; through the Python API also an Arrow table,
        stream or polars frame), :data:`PATH` or :data:`SOURCE`.
    required
        Whether the stage refuses to run without it.
    positional
        An argument rather than an option on the command line.
    columns
        Columns a dataset input must have (checked before any work).
    many
        Several values (``merge``'s parts).
    secret
        The file holds a key: its identity records a keyed fingerprint, never the content.
    """

    name: str
    help: str
    kind: str = DATASET
    required: bool = True
    positional: bool = False
    columns: tuple[str, ...] = ()
    many: bool = False
    secret: bool = False

    @property
    def attr(self) -> str:
        """The Python name (``secret-file`` -> ``secret_file``)."""
        return self.name.replace("-", "_")


@dataclass(frozen=True)
class Output:
    """The output of a stage: its kind (:data:`DATASET`, :data:`DATASETS`, :data:`FOLDER` or
    :data:`FILE`), a line for ``--help``, and whether it holds a key (its manifest then
    records keyed digests of it, never plain hashes)."""

    kind: str = DATASET
    help: str = "Output folder."
    secret: bool = False


@dataclass
class Context(Work):
    """What the runner hands a stage: its opened inputs, progress bars, stats and scratch
    space beside the output (a :class:`~phisieve.pipeline.work.Work`)."""

    stage: Stage
    values: dict[str, Any]
    """Every input by name: a :class:`BatchSource` for a dataset, a ``Path`` (or a list of
    them) for the others, ``None`` when not given."""
    identities: dict[str, Any]
    out: Path
    progress: bool = False
    stats: Stats = field(default_factory=Stats)
    writer: Any = None
    """The output's writer while the stage writes (side files, rejected rows)."""
    engine: Any = None
    """Where the batch function and the reduce steps run
    (:class:`~phisieve.pipeline.engine.Engine`; the runner always gives one)."""

    def scratch_root(self) -> Path:
        """Scratch folders go beside the output, on the disk the user chose for it (hidden:
        ``.phisieve-*``)."""
        self.out.parent.mkdir(parents=True, exist_ok=True)
        return self.out.parent

    def source(self, name: str) -> BatchSource:
        """The opened dataset input ``name``."""
        from ..io.sources import BatchSource

        value = self.values.get(name)
        if not isinstance(value, BatchSource):
            raise InputError(f"{self.stage.name} has no dataset input {name!r}")
        return value

    def path(self, name: str) -> Any:
        """The path input ``name`` (``None`` when not given)."""
        return self.values.get(name)

    def hold(self, name: str) -> BatchSource:
        """The dataset input ``name``, read again as often as needed: a one-shot stream is
        read into memory once (other sources are returned as they are)."""
        from ..io.sources import open_source

        src = self.source(name)
        if not src.reiterable:
            src = open_source(src.table(), self.stage.batch_rows)
            self.values[name] = src
        return src

    def reiterable(self, name: str, why: str) -> BatchSource:
        """The dataset input ``name``, refused when it is a one-shot stream (``why`` says why
        the stage reads it more than once)."""
        src = self.source(name)
        if not src.reiterable:
            raise InputError(f"the {self.stage.name} stage {why}: pass a dataset or a table")
        return src

    def pieces(
        self,
        name: str,
        fn: Callable[[Any], Any],
        columns: Iterable[str] | None = None,
        *,
        by: str | None = None,
        label: str | None = None,
        rows: tuple[int, int] | None = None,
        threaded: bool = False,
    ) -> list[Any]:
        """A reduce step over the dataset input ``name`` (or its rows ``rows``: first, end)
        on the run's engine: ``fn``'s results on pieces of it
        (:meth:`phisieve.pipeline.engine.Engine.scan`; ``threaded``: ``fn`` uses every core
        itself)."""
        if self.engine is None:  # pragma: no cover - the runner always gives one
            raise TypeError("a Context needs an engine (LocalEngine() for this process)")
        engine = self.engine
        cols = list(columns) if columns is not None else None
        return engine.scan(self, name, fn, cols, by=by, label=label, rows=rows, threaded=threaded)

    def scan(
        self, name: str, columns: Iterable[str] | None = None, label: str | None = None
    ) -> Iterator[pa.RecordBatch]:
        """The batches of the dataset input ``name`` (only ``columns``), with a progress bar."""
        src = self.source(name)
        cols = list(columns) if columns is not None else None
        with self.bar(label or self.stage.name, src.num_rows, self.stage.unit) as advance:
            for batch in src.batches(cols):
                yield batch
                advance(batch.num_rows)


class Stage:
    """What every stage declares (see the module's documentation); a stage is one of three
    kinds, each overriding one method:

    * :class:`MapStage`: :meth:`MapStage.map`, a batch function over its main input;
    * :class:`RowsStage`: :meth:`RowsStage.batches`, rows made from a reduce or from
      nothing (the index's terms, generated notes);
    * :class:`BuildStage`: :meth:`BuildStage.build`, a folder or a file (a model, a report).

    Every kind may also check its options (:meth:`check`) and opened inputs (:meth:`open`),
    read the whole corpus first (:meth:`reduce`) and add side files and statistics at the
    end (:meth:`finish`).
    """

    name: ClassVar[str]
    """The command (``phisieve NAME``) and the stage's name in pipeline files."""
    help: ClassVar[str] = ""
    """What the stage does, one paragraph (``--help``)."""
    Options: ClassVar[type]
    """The options dataclass."""
    inputs: ClassVar[tuple[Input, ...]] = ()
    output: ClassVar[Output] = Output()
    batch_rows: ClassVar[int] = 4096
    """Rows per record batch read from a dataset input (results never depend on it)."""
    task_rows: ClassVar[int | None] = None
    """At most this many rows sent to a worker process at once (``None``:
    :attr:`batch_rows`): smaller where a batch's working memory, held by every worker at
    once, is large (results never depend on it)."""
    unit: ClassVar[str] = "documents"
    """What the progress bars count."""
    summary: ClassVar[Summary] = ("written to {out}",)
    """What the command line prints once the output is committed, read from its manifest
    (:mod:`phisieve.pipeline.summary`)."""

    def __init__(self, options: Any = None, /, **values: Any) -> None:
        self.options = options if options is not None else self.Options(**values)
        self.check()

    # -- declarations the runner asks for --------------------------------------------------

    def check(self) -> None:
        """Validate the options (raise :class:`~phisieve.errors.ConfigError`) before any
        input is read."""

    def recorded(self) -> dict[str, Any]:
        """The options recorded in the manifest and compared on resume: those that decide
        the output."""
        return deciding(self.options)

    def provided(self) -> set[str]:
        """Inputs this stage was given another way (a key as bytes through the Python API):
        the runner does not ask for them."""
        return set()

    def settings(self) -> dict[str, Any]:
        """Options recorded apart, never compared (threads, budgets)."""
        return settings(self.options)

    def output_kind(self) -> str:
        """The kind of this run's output (a stage may choose by its options)."""
        return self.output.kind

    # -- the work every kind shares ----------------------------------------------------------

    def open(self, ctx: Context) -> None:
        """Check the opened inputs further (columns beyond :attr:`Input.columns`, types)
        before any work; called by the runner after it opened them."""

    def reduce(self, ctx: Context) -> Any:
        """Read what the work needs from the whole corpus; its result is the ``state`` every
        later step receives. Default: nothing."""
        return None

    def finish(self, ctx: Context, state: Any) -> None:
        """After the work, before the commit: side files (``ctx.writer.write_side``) and
        final statistics (``ctx.stats``)."""


class BuildStage(Stage):
    """A stage whose output is a folder (a model, a tokenizer, a report) or a file (a key, a
    word list): it overrides :meth:`build`."""

    output: ClassVar[Output] = Output(FOLDER)

    def build(self, ctx: Context, target: Path) -> None:
        """Fill a :data:`FOLDER` output (``target`` is an empty folder) or write a
        :data:`FILE` output (``target`` is the file to create)."""
        raise NotImplementedError


class RowsStage(Stage):
    """A stage whose output is a dataset (or a folder of datasets) of rows it makes from its
    reduce or from nothing: it overrides :meth:`batches` (and declares :meth:`schema`)."""

    rows_per_part: ClassVar[int] = 100_000
    """Rows per part file of a dataset output."""
    main: ClassVar[str | None] = None
    """The dataset input a :class:`MapStage` streams (``None``: none)."""
    two_pass: ClassVar[bool] = False
    """The rows the batch function makes are read once more before they are written:
    :meth:`settle` reads them all, then :meth:`finalize` changes each batch (``encode``
    numbers its sequences corpus-wide once every patient's sequences are counted)."""
    distributed: ClassVar[bool] = False
    """The batch function can run on a cluster (:mod:`phisieve.pipeline.ray_engine`): its
    output for a batch depends on that batch alone (and, for a :attr:`grouped` stage, on
    the patient's earlier rows), it counts in its :class:`Stats` or hands what it kept in
    the state over through :meth:`gather`, and its output rows follow its input rows."""

    def schema(self, ctx: Context, state: Any) -> pa.Schema:
        """The schema of the dataset output."""
        raise NotImplementedError

    def batches(self, ctx: Context, state: Any) -> Iterator[Any]:
        """Every output batch (for a :data:`DATASETS` output, mappings part -> batch)."""
        raise NotImplementedError

    def parts(self) -> list[str]:
        """The names of the datasets of a :data:`DATASETS` output."""
        raise NotImplementedError

    def part_stats(self, stats: Stats, part: str) -> dict[str, Any]:
        """The stats recorded in the manifest of one part of a :data:`DATASETS` output."""
        return {**stats, "part": part}


class MapStage(RowsStage):
    """A stage that streams its :attr:`main` input through a batch function: it overrides
    :meth:`map` (with :meth:`flush` for rows left at the end). The batch function receives
    the reduce's ``state`` and counts into its :class:`Stats`."""

    columns: ClassVar[tuple[str, ...] | None] = None
    """The columns of ``main`` that :meth:`map` reads (``None``: all)."""
    grouped: ClassVar[bool] = False
    """The batch function needs each patient's rows together and in order (``encode`` packs
    a patient's documents into sequences): an engine that partitions the corpus keeps a
    patient's rows in one partition, in their input order."""

    def map(self, batch: pa.RecordBatch, state: Any, stats: Stats) -> Any:
        """The batch function: output rows (a record batch, several, or ``None``) for one
        batch of the main input; for a :data:`DATASETS` output, a mapping part -> batch."""
        raise NotImplementedError

    def flush(self, state: Any, stats: Stats) -> Iterable[Any]:
        """Rows left once the main input is exhausted. Default: none."""
        return ()

    def batches(self, ctx: Context, state: Any) -> Iterator[Any]:
        """Every output batch: :meth:`map` over the main input, then :meth:`flush`."""
        if self.main is None:
            raise NotImplementedError(f"{self.name} declares no main input to map")
        for batch in ctx.scan(self.main, self.columns):
            yield from _many(self.map(batch, state, ctx.stats))
        for out in self.flush(state, ctx.stats):
            yield from _many(out)

    def group_columns(self) -> tuple[str, str]:
        """For a :attr:`grouped` stage: the patient column of the main input and of the
        output."""
        return ("patient_id", "patient_id")

    def fork(self, state: Any, row: int = 0) -> Any:
        """For a :attr:`grouped` stage: a fresh copy of the batch function's state, for one
        partition of patients (what :meth:`flush` finishes) whose first row is ``row`` of
        the main input (what its errors name)."""
        return state

    def gather(self, state: Any) -> Any:
        """For a :attr:`distributed` stage whose batch function keeps counts in the reduce's
        state (rather than in its stats): what it kept since the last call, taken out of
        ``state`` (a worker sends it to the driver). Default: nothing."""
        return None

    def absorb(self, state: Any, gathered: list[Any]) -> None:
        """Fold what the workers' :meth:`gather` sent into the driver's ``state``, before
        :meth:`finish`."""

    def settle(self, batches: Iterable[pa.RecordBatch]) -> Any:
        """For a :attr:`two_pass` stage: read every output batch (before it is written) and
        return what :meth:`finalize` needs."""
        return None

    def finalize(self, batch: pa.RecordBatch, settled: Any) -> pa.RecordBatch:
        """For a :attr:`two_pass` stage: an output batch as it is written."""
        return batch


def _many(out: Any) -> Iterator[Any]:
    import pyarrow as pa

    if out is None:
        return
    if isinstance(out, (pa.RecordBatch, pa.Table, dict)):
        yield out
    else:
        yield from out


def require(src: BatchSource, columns: Iterable[str]) -> None:
    """Refuse a dataset input that lacks one of ``columns``."""
    from ..io.sources import require_columns

    require_columns(src.schema, columns, src.name)
