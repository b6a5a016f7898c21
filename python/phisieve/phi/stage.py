"""The dummy-PHI stages, declared: ``keygen``, ``surrogate``, ``placeholders`` and
``canaries``, their options and inputs.

This module imports nothing heavier than the standard library, so that the command line's
``--help`` and option parsing stay instant; a stage reaches its algorithms
(:mod:`phisieve.phi.surrogate`, :mod:`~phisieve.phi.gold`, :mod:`~phisieve.phi.canaries`)
when it runs. The keys are :mod:`phisieve.phi.secret`'s.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._lazy import LazyModule
from ..errors import ConfigError, InputError
from ..pipeline.options import option
from ..pipeline.stage import (
    FILE,
    PATH,
    SOURCE,
    BuildStage,
    Context,
    Input,
    MapStage,
    Output,
    RowsStage,
)
from ..pipeline.summary import Each, Line, Table
from .secret import MIN_SECRET_BYTES, check_secret, read_secret

if TYPE_CHECKING:
    import pyarrow as pa

    from ..pipeline.stats import Stats

surrogate = LazyModule(".surrogate", __package__)
gold = LazyModule(".gold", __package__)
canaries = LazyModule(".canaries", __package__)

__all__ = [
    "DEFAULT_KINDS",
    "CanariesOptions",
    "CanariesStage",
    "KeygenOptions",
    "KeygenStage",
    "PlaceholdersOptions",
    "PlaceholdersStage",
    "SurrogateOptions",
    "SurrogateStage",
    "parse_years",
]

# --------------------------------------------------------------------------------------------
# keygen


@dataclass(frozen=True)
class KeygenOptions:
    """Options of ``phisieve keygen``."""

    bytes: int = option(32, "Random bytes in the key (written as twice as many hex digits).")


class KeygenStage(BuildStage):
    """``phisieve keygen``: a new random secret key for ``surrogate`` and ``canaries``.

    The key is drawn from the operating system's random source (:func:`secrets.token_hex`):
    the one deliberate exception to "every random choice is a function of a seed", since
    it is the secret everything else is keyed by. It is written as hex digits with a line
    end, readable only by its owner. A pipeline keeps it across runs (the stage is finished
    once written), so the surrogates stay the same; keep the file apart from what you share.
    """

    name = "keygen"
    help = (
        "Write a new random secret key (hex digits) for surrogate and canaries; keep it "
        "apart from the outputs you share."
    )
    Options = KeygenOptions
    output = Output(FILE, "The key file to write.", secret=True)
    summary = ("a new key in {out}: keep it apart from the outputs you share",)

    def check(self) -> None:
        if self.options.bytes < MIN_SECRET_BYTES:
            raise ConfigError(
                f"a key needs at least {MIN_SECRET_BYTES} random bytes, not {self.options.bytes}"
            )

    def build(self, ctx: Context, target: Path) -> None:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(secrets.token_hex(self.options.bytes) + "\n")


# --------------------------------------------------------------------------------------------
# surrogate


def parse_years(text: str) -> tuple[int, int]:
    """``FIRST:LAST`` (e.g. ``2000:2020``) as a pair of years."""
    try:
        lo, hi = (int(y) for y in text.split(":"))
    except ValueError:
        raise ConfigError(f"--years must be FIRST:LAST, e.g. 2000:2020, not {text!r}") from None
    return lo, hi


@dataclass(frozen=True)
class SurrogateOptions:
    """Options of ``phisieve surrogate``."""

    locale: str = option("en_US", "Faker locale of the surrogates.")
    keep_unfilled: bool = option(
        False, "Leave unknown categories and malformed markers in the text."
    )
    years: str = option("2000:2020", "FIRST:LAST: years each patient's latest date moves into.")
    report_unknown_categories: bool = option(
        False,
        "Name, in the report and the manifest, the unknown categories that at least two "
        "patients use (one patient's are only counted: they may be PHI). Without it unknown "
        "categories are only counted.",
        negatable=False,
    )


class SurrogateStage(MapStage):
    """``phisieve surrogate``: every placeholder filled with a keyed surrogate, gold spans added.

    Reduce: each patient's latest placeholder year, the anchor of the patient's date shift
    (:func:`phisieve.phi.surrogate.date_anchors`). Map:
    :meth:`phisieve.phi.surrogate.SurrogateFiller.fill` on each batch of documents.
    Each document's output is a pure function of the secret, the anchors and that document's
    row, whatever the batches or the order of the rows: what the filler keeps from batch to
    batch only counts (the summary) or caches keyed values (the Faker pool).
    """

    name = "surrogate"
    help = "Fill MIMIC-III placeholders with consistent keyed surrogates; add gold `spans`."
    Options = SurrogateOptions
    inputs = (
        Input("docs", "The documents dataset, with [** ... **].", positional=True,
              columns=("patient_id", "text")),
        Input(
            "secret-file",
            "File holding the secret key: random, >= 32 bytes (make one with `phisieve "
            "keygen --out KEY`); kept apart.",
            kind=PATH,
            secret=True,
        ),
    )  # fmt: skip
    main = "docs"
    distributed = True
    summary = (
        Table("by_kind", "surrogates", (("kind", "{key}"), ("filled", "{value:,}"))),
        "{rows:,} documents: {placeholders:,} placeholders, {filled:,} filled, {unfilled:,} "
        "left unfilled, {markers_removed:,} stray markers removed",
        Line(
            "[yellow]{dates_clamped:,} date placeholders were no calendar date[/] (e.g. month "
            "13, February 30): moved to the nearest date before the shift",
            when="dates_clamped",
        ),
        # Unknown categories by name only with --report-unknown-categories (and only those
        # several patients use: the text in [** **] may be PHI), otherwise counted.
        Line(
            "[yellow]{unknown[categories]:,} unknown categories[/] ({unknown[placeholders]:,} "
            "placeholders; {unknown[single_patient_categories]:,} of them used by one patient "
            "each)",
            when="unknown[categories]",
        ),
        Line(
            "not named: --report-unknown-categories names those at least two patients use",
            when="unknown[categories]",
            unless="report_unknown",
        ),
        Each("unknown_categories", "[yellow]unknown category[/] {key!r}: {value:,}"),
        "written to {out}",
    )

    def __init__(self, options: Any = None, /, *, secret: bytes | None = None, **values: Any):
        self.secret = secret
        super().__init__(options, **values)

    def check(self) -> None:
        parse_years(self.options.years)
        if self.secret is not None:
            check_secret(self.secret)

    def provided(self) -> set[str]:
        return {"secret-file"} if self.secret is not None else set()

    def open(self, ctx: Context) -> None:
        if self.secret is None:
            self.secret = read_secret(ctx.path("secret-file"), ctx.out)
        ctx.reiterable("docs", "reads its input twice")

    def reduce(self, ctx: Context) -> surrogate.SurrogateFiller:
        assert self.secret is not None
        filler = surrogate.SurrogateFiller(
            self.secret,
            locale=self.options.locale,
            keep_unfilled=self.options.keep_unfilled,
            years=parse_years(self.options.years),
            report_unknown=self.options.report_unknown_categories,
        )
        anchors = filler.anchors
        for found in ctx.pieces(
            "docs", surrogate.latest_years, ["patient_id", "text"], label="dates"
        ):
            for p, y in found.items():
                anchors[p] = max(y, anchors.get(p, y))
        return filler

    def schema(self, ctx: Context, state: surrogate.SurrogateFiller) -> pa.Schema:
        import pyarrow as pa

        from ..io.schema import SPANS

        return ctx.source("docs").schema.append(pa.field("spans", SPANS))

    def map(self, batch: pa.RecordBatch, state: surrogate.SurrogateFiller, stats: Stats) -> Any:
        return state.fill(batch)

    def gather(self, state: surrogate.SurrogateFiller) -> Any:
        return state.take_counts()

    def absorb(self, state: surrogate.SurrogateFiller, gathered: list[Any]) -> None:
        for counts in gathered:
            state.add_counts(counts)

    def finish(self, ctx: Context, state: surrogate.SurrogateFiller) -> None:
        ctx.stats.update(state.summary())


# --------------------------------------------------------------------------------------------
# placeholders


@dataclass(frozen=True)
class PlaceholdersOptions:
    """``phisieve placeholders`` has no options."""


class PlaceholdersStage(RowsStage):
    """``phisieve placeholders``: gold PHI spans become MIMIC-III placeholders (the reverse
    of ``surrogate``).

    Reduce: the placeholder ids, numbered per patient over the patient's documents in
    ``doc_id`` order (:func:`phisieve.phi.gold.placeholder_ids`). Rows: each batch of the
    documents the reduce read, with its gold spans replaced
    (:func:`phisieve.phi.gold.to_placeholders` with those ids), so a document's output
    depends on that document, its spans and the id table alone, never on the order or
    batching of rows.
    """

    name = "placeholders"
    help = "Turn gold PHI spans into MIMIC-III placeholders (the reverse of `surrogate`)."
    Options = PlaceholdersOptions
    inputs = (
        Input("corpus", "PhysioNet deid folder (id.text, id-phi.phrase).", kind=SOURCE,
              required=False),
        Input("docs", "A documents dataset.", required=False),
        Input("spans", "The documents' gold spans.", required=False, columns=("doc_id", "spans")),
    )  # fmt: skip
    summary = (
        "{rows:,} documents: {spans:,} gold spans -> {placeholders:,} placeholders ({merged:,} "
        "overlaps merged); written to {out}",
    )

    def open(self, ctx: Context) -> None:
        if ctx.path("corpus") is None and (
            ctx.values.get("docs") is None or ctx.values.get("spans") is None
        ):
            raise InputError("give a PhysioNet corpus folder, or documents with their spans")

    def reduce(self, ctx: Context) -> gold._Gold:
        from ..io.annotated import read_physionet
        from ..io.sources import require_columns

        if ctx.path("corpus") is not None:
            documents, gold_table = read_physionet(ctx.path("corpus"))
        else:
            documents = ctx.source("docs").table()
            gold_table = ctx.source("spans").table(["doc_id", "spans"])
        require_columns(documents.schema, ["doc_id", "patient_id", "text"], "documents")
        spans = gold.gold_by_doc(gold_table)
        present = set(documents.column("doc_id").to_pylist())
        missing = sum(len(s) for d, s in spans.items() if d not in present)
        return gold._Gold(documents, spans, gold.placeholder_ids(documents, spans), missing)

    def schema(self, ctx: Context, state: gold._Gold) -> pa.Schema:
        schema = state.documents.schema
        return schema.remove(schema.get_field_index("spans")) if "spans" in schema.names else schema

    def batches(self, ctx: Context, state: gold._Gold) -> Iterator[Any]:
        import pyarrow as pa

        for batch in state.documents.to_batches(max_chunksize=self.batch_rows):
            table = pa.Table.from_batches([batch])
            out, counts = gold._splice_placeholders(table, state.spans, state.ids)
            ctx.stats.merge(counts)
            yield out

    def finish(self, ctx: Context, state: gold._Gold) -> None:
        for key in ("spans", "placeholders", "merged"):
            ctx.stats.setdefault(key, 0)
        ctx.stats["spans_without_document"] = state.spans_without_document
        ctx.stats["by_category"] = dict(sorted(ctx.stats.get("by_category", {}).items()))


# --------------------------------------------------------------------------------------------
# canaries


@dataclass(frozen=True)
class CanariesOptions:
    """Options of ``phisieve canaries``."""

    n: int = option(100, "Canaries in all.", flag="--n")
    repeats: str = option("1,4,16", "Repetition counts, e.g. 1,4,16.")
    kinds: str | None = option(
        None,
        "Secret kinds: name, date, mrn, words (default name,date,mrn; words with --new-patients).",
    )
    new_patients: bool = option(
        False, "Each canary is a new patient whose one note holds its sentence repeated."
    )
    coin: bool = option(
        False,
        "Plant each canary with probability 1/2 by a keyed coin (the others are recorded, "
        "not planted), for the audit's one-run lower bound on ε; needs --new-patients.",
    )


DEFAULT_KINDS = {False: ("name", "date", "mrn"), True: ("words",)}
"""The kinds when none are asked for: secrets of PHI kinds in existing patients' notes;
everyday words for canary patients (a privacy-preserving objective trains on them)."""


class CanariesStage(MapStage):
    """``phisieve canaries``: canary sentences with random dummy-PHI secrets appended to
    chosen patients' notes.

    Reduce: the patients (the ``n`` with the smallest keyed draws receive a canary), then the
    chosen patients' notes (each canary's repeats go round-robin over its patient's notes in
    the order of keyed draws of their ``doc_id``). Map: the text of each target note, found
    by ``(patient_id, doc_id)``, gets its canary sentences appended; the same rows come out
    whatever their order or batching.
    """

    name = "canaries"
    help = (
        "Insert canary sentences carrying random dummy-PHI secrets into chosen patients' "
        "notes (each repeated 1, 4, 16... times); `phisieve audit --canaries OUT` measures "
        "their exposure."
    )
    Options = CanariesOptions
    inputs = (
        Input("docs", "The documents dataset.", positional=True,
              columns=("doc_id", "patient_id", "text")),
        Input("secret-file", "File holding the secret key.", kind=PATH, secret=True),
    )  # fmt: skip
    main = "docs"
    distributed = True
    summary = (
        Line(
            "{planted} of {canaries} canaries planted ({insertions} insertions) in "
            "{new_patients} new canary patients, written to {out}",
            when="new_patients",
        ),
        Line(
            "{planted} of {canaries} canaries planted ({insertions} insertions) in {patients} "
            "patients' notes, written to {out}",
            unless="new_patients",
        ),
        Line("--coin: a keyed coin planted each canary or only recorded it", when="options[coin]"),
        "their secrets are in {meta}/canaries.parquet",
    )

    def __init__(self, options: Any = None, /, *, secret: bytes | None = None, **values: Any):
        self.secret = secret
        super().__init__(options, **values)
        if self.options.new_patients:
            # New rows come after the input's (flush), which the local engine writes.
            self.distributed = False

    def plan(self) -> tuple[int, tuple[int, ...], tuple[str, ...]]:
        """The checked number of canaries, repeat counts and kinds."""
        if self.options.coin and not self.options.new_patients:
            raise ConfigError(
                "--coin needs --new-patients: a coin over canaries in existing patients' notes "
                "changes a patient's record rather than adding or removing a patient, which "
                "is not what a patient's ε bounds"
            )
        reps = []
        for s in canaries._parse_list("--repeats", self.options.repeats):
            if not s.isdigit() or int(s) < 1:
                raise ConfigError(
                    f"--repeats takes positive whole numbers such as 1,4,16, not {s!r}"
                )
            reps.append(int(s))
        kinds = (
            DEFAULT_KINDS[self.options.new_patients]
            if self.options.kinds is None
            else tuple(canaries._parse_list("--kinds", self.options.kinds))
        )
        return canaries._check_plan(self.options.n, tuple(reps), kinds)

    def check(self) -> None:
        self.plan()
        if self.secret is not None:
            check_secret(self.secret)

    def provided(self) -> set[str]:
        return {"secret-file"} if self.secret is not None else set()

    def recorded(self) -> dict[str, Any]:
        n, repeats, kinds = self.plan()
        o = self.options
        return {
            "n": n,
            "repeats": list(repeats),
            "kinds": list(kinds),
            "new_patients": o.new_patients,
            "coin": o.coin,
        }

    def open(self, ctx: Context) -> None:
        if self.secret is None:
            self.secret = read_secret(ctx.path("secret-file"), ctx.out)
        ctx.reiterable("docs", "reads its input three times")

    def schema(self, ctx: Context, state: canaries._Insertion) -> pa.Schema:
        return ctx.source("docs").schema

    def reduce(self, ctx: Context) -> canaries._Insertion:
        import pyarrow as pa
        import pyarrow.compute as pc

        assert self.secret is not None
        n, repeats, kinds = self.plan()
        new = self.options.new_patients
        src = ctx.source("docs")
        seen: set[str] = set()
        for b in ctx.scan("docs", ["patient_id"], "patients"):
            seen.update(pc.unique(b.column(0).cast(pa.string())).drop_null().to_pylist())
        if not new and n > len(seen):
            raise ConfigError(
                f"{n} canaries need {n} patients, one each; the documents have {len(seen)}: "
                "ask for fewer canaries"
            )
        plan = canaries._plan(
            self.secret, sorted(seen), n, repeats, kinds, new_patients=new, coin=self.options.coin
        )
        self._schema = src.schema
        doc_type = src.schema.field("doc_id").type
        appended: dict[tuple[str, Any], str] = {}
        doc_ids: dict[str, list[Any]] = {}
        new_rows: list[tuple[str, str, str]] = []
        if new:
            canaries._check_new_patients(src.schema, plan, seen)
            for c in plan:
                doc_ids[c.canary_id] = [c.canary_id] if c.included else []
                if c.included:
                    text = "\n".join([canaries.KINDS[c.kind].sentence(c.secret)] * c.repeats)
                    new_rows.append((c.patient_id, c.canary_id, text))
        else:
            appended, doc_ids = self._in_notes(src, plan, doc_type)
        planted = [c for c in plan if c.included]
        table = pa.table(
            {
                "canary_id": [c.canary_id for c in plan],
                "patient_id": [c.patient_id for c in plan],
                "kind": [c.kind for c in plan],
                "secret": [c.secret for c in plan],
                "prefix": [canaries.KINDS[c.kind].prefix for c in plan],
                "suffix": [canaries.KINDS[c.kind].suffix for c in plan],
                "repeats": pa.array([c.repeats for c in plan], pa.int32()),
                "doc_ids": pa.array([doc_ids[c.canary_id] for c in plan], pa.list_(doc_type)),
                "space": pa.array([canaries.KINDS[c.kind].space for c in plan], pa.int64()),
                "new_patient": pa.array([c.new_patient for c in plan], pa.bool_()),
                "included": pa.array([c.included for c in plan], pa.bool_()),
            },
            schema=pa.schema(
                [
                    f if f.name != "doc_ids" else f.with_type(pa.list_(doc_type))
                    for f in canaries.CANARY_SCHEMA
                ]
            ),
        )
        stats = {
            "canaries": len(plan),
            "planted": len(planted),
            "insertions": sum(c.repeats for c in planted),
            "patients": len({c.patient_id for c in planted}),
            "new_patients": len(new_rows),
            "corpus_patients": len(seen),
            "notes_modified": len(appended),
            "by_repeats": {str(r): sum(c.repeats == r for c in plan) for r in repeats},
            "by_kind": {k: sum(c.kind == k for c in plan) for k in kinds},
        }
        chosen = pa.array(sorted({k[0] for k in appended}), pa.string())
        return canaries._Insertion(appended, chosen, table, stats, new_rows)

    def _in_notes(
        self, src: Any, plan: list[canaries._Canary], doc_type: pa.DataType
    ) -> tuple[dict[tuple[str, Any], str], dict[str, list[Any]]]:
        """Where each canary's repeats go in its patient's notes: the text appended to each
        ``(patient_id, doc_id)``, and each canary's host notes."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        assert self.secret is not None
        by_patient = {c.patient_id: c for c in plan}
        # The chosen patients' notes (their doc_ids), in no particular order.
        notes: dict[str, list[Any]] = {p: [] for p in by_patient}
        chosen = pa.array(sorted(by_patient), pa.string())
        for b in src.batches(["patient_id", "doc_id"]):
            pid = b.column(0).cast(pa.string())
            hits = pa.array(
                np.flatnonzero(pc.is_in(pid, value_set=chosen).to_numpy(zero_copy_only=False))
            )
            if len(hits):
                for p, d in zip(
                    pid.take(hits).to_pylist(), b.column(1).take(hits).to_pylist(), strict=True
                ):
                    notes[p].append(d)
        appended: dict[tuple[str, Any], str] = {}
        doc_ids: dict[str, list[Any]] = {}
        for c in plan:
            mine = notes[c.patient_id]
            canaries._check_addressable(mine)
            hosts = canaries._hosts(self.secret, c.canary_id, mine, doc_type)
            where = [hosts[k % len(hosts)] for k in range(c.repeats)]
            sentence = "\n" + canaries.KINDS[c.kind].sentence(c.secret)
            for d in where:
                key = (c.patient_id, d)
                appended[key] = appended.get(key, "") + sentence
            doc_ids[c.canary_id] = where
        return appended, doc_ids

    def map(
        self, batch: pa.RecordBatch, state: canaries._Insertion, stats: Stats
    ) -> pa.RecordBatch:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        pid = batch.column("patient_id").cast(pa.string())
        hits = np.flatnonzero(
            pc.is_in(pid, value_set=state.patients).to_numpy(zero_copy_only=False)
        ).tolist()
        if not hits:
            return batch
        take = pa.array(hits, pa.int64())
        keys = zip(
            pid.take(take).to_pylist(), batch.column("doc_id").take(take).to_pylist(), strict=True
        )
        rows, extra = [], []
        for r, key in zip(hits, keys, strict=True):
            tail = state.appended.get(key)
            if tail is not None:
                rows.append(r)
                extra.append(tail)
        if rows:
            batch = canaries._append(batch, batch.schema.get_field_index("text"), rows, extra)
        return batch

    def flush(self, state: canaries._Insertion, stats: Stats) -> Iterable[Any]:
        """The canary patients' notes, after the input's rows (``--new-patients``)."""
        import pyarrow as pa

        if not state.new_rows:
            return ()
        schema = self._schema
        n = len(state.new_rows)
        given = {
            "patient_id": [r[0] for r in state.new_rows],
            "doc_id": [r[1] for r in state.new_rows],
            "text": [r[2] for r in state.new_rows],
        }
        columns = [
            pa.array(given[f.name], f.type) if f.name in given else canaries._filler(f, n)
            for f in schema
        ]
        return [pa.record_batch(columns, schema=schema)]

    def finish(self, ctx: Context, state: canaries._Insertion) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        sink = pa.BufferOutputStream()
        pq.write_table(state.table, sink, compression="zstd")
        ctx.writer.write_side(canaries.CANARIES_FILE, sink.getvalue().to_pybytes())
        ctx.stats.update(state.stats)
