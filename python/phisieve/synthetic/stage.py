"""The ``synth`` stage: a synthetic MIMIC-III-style corpus (:mod:`phisieve.synthetic.
generate` writes it), a pure function of the seed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._lazy import LazyModule
from ..errors import InputError
from ..pipeline.options import option
from ..pipeline.stage import DATASET, FILE, Context, Output, RowsStage

if TYPE_CHECKING:
    import pyarrow as pa

generate = LazyModule(".generate", __package__)

__all__ = ["FORMATS", "SynthOptions", "SynthStage"]

FORMATS = ("parquet", "mimic-csv")
"""What ``synth`` writes: a documents dataset, or a NOTEEVENTS-style CSV file."""


@dataclass(frozen=True)
class SynthOptions:
    """Options of ``phisieve synth``."""

    patients: int = option(500, "Number of patients.")
    seed: int = option(0, "Random seed; output is a pure function of it.")
    fmt: str = option(
        "parquet",
        "parquet or mimic-csv (a NOTEEVENTS-style CSV file; .gz: gzipped).",
        flag="--format",
    )
    notes_per_patient: str = option("2:8", "LO:HI notes per patient (at most 999).")
    words_per_note: str = option("60:400", "LO:HI whitespace tokens per note.")


class SynthStage(RowsStage):
    """``phisieve synth``: a synthetic MIMIC-III-style corpus, a pure function of the seed.

    No input; patient ``i``'s notes depend on ``(seed, i)`` only, generated patient by
    patient (streaming: any size fits in memory).
    """

    name = "synth"
    help = "Write a synthetic MIMIC-III-style corpus with [** ... **] placeholders."
    Options = SynthOptions
    output = Output(help="Output folder (or, with --format mimic-csv, the CSV file).")
    unit = "patients"
    rows_per_part = 100_000
    summary = ("wrote {rows:,} notes of {patients:,} patients (~{tokens:,} tokens) to {out}",)

    def check(self) -> None:
        o = self.options
        if o.fmt not in FORMATS:
            raise InputError(f"unknown synth format {o.fmt!r} (expected 'parquet' or 'mimic-csv')")
        self.ranges = (
            generate.parse_range(o.notes_per_patient, "--notes-per-patient"),
            generate.parse_range(o.words_per_note, "--words-per-note"),
        )
        generate.check_sizes(o.patients, o.seed, *self.ranges)

    def output_kind(self) -> str:
        return FILE if self.options.fmt == "mimic-csv" else DATASET

    def _rows(self) -> Iterator[tuple[int, list[tuple]]]:
        return generate.patient_rows(self.options.patients, self.options.seed, *self.ranges, 0)

    def _stats(self, ctx: Context) -> None:
        o = self.options
        ctx.stats.update(
            patients=o.patients,
            seed=o.seed,
            format=o.fmt,
            notes_per_patient=list(self.ranges[0]),
            words_per_note=list(self.ranges[1]),
        )

    def schema(self, ctx: Context, state: Any) -> pa.Schema:
        return generate.SYNTH

    def batches(self, ctx: Context, state: Any) -> Iterator[pa.RecordBatch]:
        self._stats(ctx)
        ctx.stats["tokens"] = 0
        with ctx.bar("synth", self.options.patients, "patients") as tick:

            def counted() -> Iterator[tuple[int, list[tuple]]]:
                for i, notes in self._rows():
                    ctx.stats.add("tokens", sum(nt[9] for nt in notes))
                    yield i, notes
                    tick(1)

            yield from generate.to_batches(counted(), 8192)

    def build(self, ctx: Context, target: Path) -> None:
        self._stats(ctx)
        with ctx.bar("synth", self.options.patients, "patients") as tick:
            made = generate.write_mimic_csv(target, self._rows(), tick, ctx.out.name)
        ctx.stats.update(made)
