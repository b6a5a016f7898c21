"""The corpus stages: ``ingest`` (notes from outside phisieve into the ``documents`` dataset,
:mod:`phisieve.corpus.ingest`) and ``split`` (documents by patient into members, reference
and held-out datasets, :mod:`phisieve.corpus.split`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._lazy import LazyModule
from ..errors import ConfigError, InputError
from ..pipeline.options import option
from ..pipeline.stage import (
    DATASETS,
    PATH,
    SOURCE,
    Context,
    Input,
    MapStage,
    Output,
    RowsStage,
    require,
)
from ..pipeline.stats import Stats
from ..pipeline.summary import Each, Table

if TYPE_CHECKING:
    from ..io.readers import DocumentStream

pa = LazyModule("pyarrow")
pc = LazyModule("pyarrow.compute")
readers = LazyModule("..io.readers", __package__)
ingest = LazyModule(".ingest", __package__)
split = LazyModule(".split", __package__)

__all__ = ["IngestOptions", "IngestStage", "SplitOptions", "SplitStage"]


@dataclass(frozen=True)
class IngestOptions:
    """Options of ``phisieve ingest``."""

    fmt: str = option("auto", "mimic, physionet, jsonl, parquet, txt or auto.", flag="--format")
    patient_col: str | None = option(None, "Patient id column.")
    text_col: str | None = option(None, "Note text column.")
    doc_col: str | None = option(None, "Document id column.")
    group_col: str | None = option(None, "Admission (group) id column.")
    encoding: str = option(
        "utf-8", "Text encoding of the input: a Python codec name such as latin-1 or cp1252."
    )
    batch_rows: int = option(8192, "Input records per batch.", decides=False, hidden=True)


class IngestStage(RowsStage):
    """``phisieve ingest``: notes from outside phisieve (:func:`phisieve.io.readers.
    read_documents`) into the ``documents`` dataset; rejected rows, with their reason, into
    ``OUT.meta/rejected``. Counts reconcile: rows read = rows written + rows rejected."""

    name = "ingest"
    help = (
        "Read notes (MIMIC-III CSV, PhysioNet deid, JSONL, Parquet, .txt folder) into the "
        "documents dataset; bad rows go to OUT.meta/rejected with a reason (never their text)."
    )
    Options = IngestOptions
    inputs = (
        Input("path", "Input file or folder.", kind=SOURCE, positional=True),
        Input("id-map", "CSV file,patient_id[,group_id] for a txt folder.", kind=PATH,
              required=False),
    )  # fmt: skip
    unit = "bytes"
    summary = (
        "read {rows_in:,} rows: {rows:,} documents written to {out}, {rejected:,} rejected",
        Each("rejected_by_reason", "  rejected, {key}: {value:,}", sort=True),
    )

    def reduce(self, ctx: Context) -> DocumentStream:
        o = self.options
        return readers.read_documents(
            ctx.path("path"),
            o.fmt,
            patient_col=o.patient_col,
            text_col=o.text_col,
            doc_col=o.doc_col,
            group_col=o.group_col,
            id_map=ctx.path("id-map"),
            batch_rows=o.batch_rows,
            encoding=o.encoding,
        )

    def schema(self, ctx: Context, state: DocumentStream) -> pa.Schema:
        return state.schema

    def batches(self, ctx: Context, state: DocumentStream) -> Iterator[pa.RecordBatch]:
        return ingest.documents(ctx, state)


@dataclass(frozen=True)
class SplitOptions:
    """Options of ``phisieve split``."""

    by: str = option("patient", "patient (or document).")
    fractions: str = option("members=0.6,reference=0.2,heldout=0.2", "NAME=SHARE,... summing to 1.")
    seed: int = option(0, "Key of the patient hash.")


@dataclass
class _Assignment:
    value_sets: dict[str, pa.Array]
    units: int
    seen: int
    members: dict[str, int]
    rows: dict[str, int] = field(default_factory=dict)
    patients: dict[str, set[str]] = field(default_factory=dict)


class SplitStage(MapStage):
    """``phisieve split``: documents split by patient into one dataset per part.

    Reduce: the distinct patients (or documents), assigned to parts by a keyed hash
    (:func:`assign`). Map: every row routed to its unit's part (rows keep their order within
    a part; every column is kept). The output is a folder of datasets, ``OUT/<name>/``.
    """

    name = "split"
    help = (
        "Split documents by patient into datasets OUT/<name>/ (members, reference, held-out "
        "patients for an audit)."
    )
    Options = SplitOptions
    inputs = (Input("docs", "The documents dataset.", positional=True),)
    output = Output(DATASETS, "Output folder: one dataset per part.")
    main = "docs"
    distributed = True
    batch_rows = 16_384
    summary = (
        Table(
            "split[parts]",
            "split by {split[by]} (seed {split[seed]})",
            (
                ("part", "{key}"),
                ("fraction", "{fraction:g}"),
                ("patients", "{patients:,}"),
                ("documents", "{rows:,}"),
                ("folder", "{path}"),
            ),
            left=("folder",),
            also={"fraction": "split[fractions]"},
        ),
        "{split[units]:,} {split[by]}s, {split[rows]:,} documents, written to {out}",
    )

    def _fractions(self) -> dict[str, float]:
        return split.parse_fractions(self.options.fractions)

    def check(self) -> None:
        self._fractions()
        if self.options.by not in split.BY:
            raise ConfigError(
                f"unknown split unit {self.options.by!r}; expected one of {', '.join(split.BY)}"
            )
        split.check_seed(self.options.seed)

    def recorded(self) -> dict[str, Any]:
        return {"by": self.options.by, "seed": self.options.seed, "fractions": self._fractions()}

    def parts(self) -> list[str]:
        return list(self._fractions())

    def open(self, ctx: Context) -> None:
        require(ctx.source("docs"), [split.BY[self.options.by]])
        ctx.reiterable("docs", "reads its input twice")

    def part_stats(self, stats: Stats, part: str) -> dict[str, Any]:
        return {"split": {**stats["split"], "part": part}}

    def schema(self, ctx: Context, state: _Assignment) -> pa.Schema:
        return ctx.source("docs").schema

    def reduce(self, ctx: Context) -> _Assignment:
        by, column = self.options.by, split.BY[self.options.by]
        src = ctx.source("docs")
        units: set[str] = set()
        seen = 0
        for b in ctx.scan("docs", [column], f"{by}s"):
            col = b.column(0)
            if col.null_count:
                row = seen + int(pc.index(pc.is_null(col), True).as_py())
                raise InputError(f"a null {column}", path=src.name, row=row, column=column)
            units.update(pc.unique(col.cast(pa.large_string())).to_pylist())
            seen += b.num_rows
        parts = split.assign(units, self._fractions(), self.options.seed)
        members: dict[str, list[str]] = {name: [] for name in self.parts()}
        for u, name in parts.items():
            members[name].append(u)
        value_sets = {n: pa.array(sorted(ids), pa.large_string()) for n, ids in members.items()}
        sizes = {n: len(ids) for n, ids in members.items()}
        names = self.parts()
        return _Assignment(
            value_sets, len(units), seen, sizes, dict.fromkeys(names, 0), {n: set() for n in names}
        )

    def map(self, batch: pa.RecordBatch, state: _Assignment, stats: Stats) -> dict[str, Any]:
        keys = batch.column(split.BY[self.options.by]).cast(pa.large_string())
        count_patients = self.options.by != "patient" and "patient_id" in batch.schema.names
        out = {}
        for name, values in state.value_sets.items():
            part = batch.filter(pc.is_in(keys, value_set=values))
            state.rows[name] += part.num_rows
            if count_patients:
                state.patients[name].update(pc.unique(part.column("patient_id")).to_pylist())
            out[name] = part
        return out

    def gather(self, state: _Assignment) -> Any:
        out = (state.rows, state.patients)
        state.rows = dict.fromkeys(state.rows, 0)
        state.patients = {n: set() for n in state.patients}
        return out

    def absorb(self, state: _Assignment, gathered: list[Any]) -> None:
        for rows, patients in gathered:
            for name, n in rows.items():
                state.rows[name] += n
            for name, ids in patients.items():
                state.patients[name].update(ids)

    def finish(self, ctx: Context, state: _Assignment) -> None:
        by = self.options.by
        total = sum(state.rows.values())
        if total != state.seen:  # pragma: no cover - every id was assigned in the first pass
            raise InputError(
                "the dataset changed between the two passes", path=ctx.source("docs").name
            )
        count_patients = by != "patient" and "patient_id" in ctx.source("docs").schema.names

        def n_patients(name: str) -> int | None:
            if by == "patient":
                return state.members[name]
            return len(state.patients[name]) if count_patients else None

        ctx.stats["split"] = {
            "by": by,
            "seed": self.options.seed,
            "fractions": self._fractions(),
            "units": state.units,
            "rows": total,
            "parts": {
                name: {
                    "path": str(ctx.out / name),
                    "units": state.members[name],
                    "patients": n_patients(name),
                    "rows": state.rows[name],
                }
                for name in self.parts()
            },
        }
