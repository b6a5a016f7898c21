"""The runner: the one place that checks, opens, resumes, draws progress and commits.

:func:`run_stage` runs one stage on given inputs into an output:

1. the stage's options were checked when it was made; the inputs are checked now (a dataset
   must be complete, a path must exist) and their identity taken (:func:`input_identity`);
2. the output is checked (``--overwrite``; not inside an input); with ``resume``, an output
   whose manifest records the same stage, options, inputs and phisieve version is finished
   and kept (:func:`finished`);
3. the dataset inputs are opened (columns checked), the stage's reduce runs, then its batches
   stream into the output's writer (or its ``build`` fills a folder or file);
4. the stage's stats are merged into the manifest, which is written last, and the output is
   committed atomically (:mod:`phisieve.io.dataset`): a run killed at any point leaves the
   previous output, or none.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pyarrow as pa

from .._core import __version__
from ..errors import ConfigError, InputError, OutputExistsError
from ..io.dataset import (
    DatasetWriter,
    FileWriter,
    FolderWriter,
    check_output,
    dataset_identity,
    output_manifest,
    path_identity,
    source_identity,
)
from ..io.sources import open_source
from .engine import Engine, LocalEngine
from .stage import DATASET, DATASETS, FILE, FOLDER, PATH, SOURCE, Context, Input, Stage, require
from .stats import Stats

__all__ = [
    "finished",
    "input_identity",
    "run_stage",
    "second_pass",
    "stale_reason",
    "write_dataset",
]


def _is_path(value: Any) -> bool:
    return isinstance(value, (str, os.PathLike))


def input_identity(port: Input, value: Any) -> Any:
    """What an output records about one input: for a dataset folder its path and content
    fingerprint (the folder is checked); for a path its path and fingerprint (through its
    marker when phisieve wrote it; a key file's is keyed, never its content); for raw files
    their listing; for an in-memory table, its type."""
    if port.many:
        return [input_identity(_one(port), v) for v in value]
    if port.kind == DATASET:
        return dataset_identity(value) if _is_path(value) else {"kind": type(value).__name__}
    if port.kind == SOURCE:
        return source_identity(value)
    if port.kind == PATH:
        return path_identity(value, secret=port.secret)
    raise ValueError(f"unknown input kind {port.kind!r}")


def _one(port: Input) -> Input:
    return Input(port.name, port.help, port.kind, port.required, secret=port.secret)


def _resolve(stage: Stage, given: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The inputs by name (checked) and their identities."""
    known = {p.name for p in stage.inputs} | {p.attr for p in stage.inputs}
    if unknown := sorted(set(given) - known):
        raise ConfigError(f"{stage.name} has no input {unknown[0]!r}")
    values: dict[str, Any] = {}
    ids: dict[str, Any] = {}
    for port in stage.inputs:
        value = given.get(port.name, given.get(port.attr))
        if port.many and value is not None and (_is_path(value) or not isinstance(value, list)):
            value = [value]
        if value is None or (port.many and not value):
            if port.required and port.name not in stage.provided():
                how = port.name.upper() if port.positional else f"--{port.name}"
                raise ConfigError(f"{stage.name} needs its input {how}")
            values[port.name] = None
            continue
        if port.kind in (PATH, SOURCE):
            value = [Path(v) for v in value] if port.many else Path(value)
        try:
            ids[port.name] = input_identity(port, value)
        except InputError as e:
            name = port.name.upper() if port.positional else f"--{port.name}"
            raise InputError(f"{stage.name} {name}: {e}") from None
        values[port.name] = value
    return values, ids


def _json(value: Any) -> Any:
    """``value`` as it reads back from a manifest (JSON round trip)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def stale_reason(stage: Stage, out: Path, identities: dict[str, Any]) -> str | None:
    """Why ``out`` is not the finished output of ``stage`` on inputs of these identities
    (``None``: it is finished)."""
    try:
        manifest = output_manifest(out, stage.output_kind(), _parts(stage))
    except InputError as e:
        return str(e)
    if manifest is None:
        return "no output yet"
    if manifest.get("stage") != stage.name:
        return f"the output was written by {manifest.get('stage')!r}, not {stage.name}"
    if manifest.get("phisieve_version") != __version__:
        return f"written by phisieve {manifest.get('phisieve_version')}, this is {__version__}"
    options = _json(stage.recorded())
    old = manifest.get("options") or {}
    if old != options:
        changed = sorted(k for k in set(old) | set(options) if old.get(k) != options.get(k))
        return f"options changed: {', '.join(changed)}"
    ids = _json(identities)
    seen = manifest.get("inputs") or {}
    if seen != ids:
        changed = sorted(k for k in set(seen) | set(ids) if seen.get(k) != ids.get(k))
        return f"inputs changed: {', '.join(changed)}"
    return None


def finished(stage: Stage, out: Path, identities: dict[str, Any]) -> dict[str, Any] | None:
    """The manifest of ``out`` when it is the finished output of ``stage`` on these inputs:
    the same stage, options (those that decide the output), inputs' identities and phisieve
    version. ``None`` otherwise."""
    if stale_reason(stage, out, identities) is not None:
        return None
    return output_manifest(out, stage.output_kind(), _parts(stage))


def _parts(stage: Stage) -> list[str] | None:
    return stage.parts() if stage.output_kind() == DATASETS else None


def run_stage(
    stage: Stage,
    inputs: dict[str, Any] | None = None,
    out: str | os.PathLike[str] | None = None,
    *,
    overwrite: bool = False,
    progress: bool = False,
    resume: bool = False,
    engine: Engine | None = None,
    workers: int = 1,
) -> dict[str, Any]:
    """Run ``stage`` on ``inputs`` (by input name) into ``out``; return the manifest.

    Parameters
    ----------
    stage
        A stage with its options.
    inputs
        Its inputs by name (``docs``, ``terms``, ``secret-file``...): paths, or for a
        dataset input through the Python API also an Arrow table, stream or polars frame.
    out
        The output path.
    overwrite
        Replace an existing output (atomically: the old one stays until the new one is
        complete). Without it an existing output is refused.
    progress
        Draw progress bars on standard error.
    resume
        Keep an existing output that is finished (:func:`finished`) instead of redoing it;
        its manifest is returned with ``"skipped": True``.
    engine
        Where the batch function runs (:mod:`phisieve.pipeline.engine`; default: here).
        The output is the same whatever the engine.
    workers
        Without ``engine``: worker processes of the local engine (:class:`~phisieve.
        pipeline.engine.LocalEngine`; 1: all in this process). The output is the same
        whatever the number.

    Returns
    -------
    dict
        The output's manifest: the stage's stats beside ``stage``, ``options``, ``inputs``...
        (for a folder of datasets, the stats and every part's manifest under ``outputs``).
    """
    if out is None:
        raise ConfigError(f"{stage.name} needs --out")
    if engine is not None:
        return _run(stage, inputs, Path(out), overwrite, progress, resume, engine)
    made = LocalEngine(workers)
    try:
        return _run(stage, inputs, Path(out), overwrite, progress, resume, made)
    finally:
        made.close()


def _run(
    stage: Stage,
    inputs: dict[str, Any] | None,
    out: Path,
    overwrite: bool,
    progress: bool,
    resume: bool,
    engine: Engine,
) -> dict[str, Any]:
    values, ids = _resolve(stage, dict(inputs or {}))
    kind = stage.output_kind()
    if resume:
        done = finished(stage, out, ids)
        if done is not None:
            return {**done, "skipped": True}
    parts = _parts(stage)
    targets = [out / p for p in parts] if parts is not None else [out]
    if parts is not None:
        _check_folder_of_datasets(out, parts)
    for target in targets:
        check_output(target, overwrite, ids, kind=kind if kind == FILE else DATASET)
    ctx = Context(stage, values, ids, out, progress, Stats(), engine=engine)
    for port in stage.inputs:
        value = values[port.name]
        if port.kind == DATASET and value is not None and not port.many:
            src = open_source(value, stage.batch_rows)
            require(src, port.columns)
            ctx.values[port.name] = src
    stage.open(ctx)
    state = stage.reduce(ctx)
    settings = stage.settings()
    if engine.name != "local":
        settings = {**settings, **engine.describe()}
    common = {
        "stage": stage.name,
        "inputs": ids,
        "options": stage.recorded(),
        "settings": settings,
        "overwrite": overwrite,
    }
    if kind == DATASET:
        with DatasetWriter(
            out, stage.schema(ctx, state), rows_per_part=stage.rows_per_part, **common
        ) as writer:
            ctx.writer = writer
            batches = engine.batches(stage, ctx, state)
            if stage.two_pass:
                batches = second_pass(stage, batches, writer)
            for batch in batches:
                writer.write(batch)
            stage.finish(ctx, state)
            return writer.close(**ctx.stats)
    if kind == DATASETS:
        assert parts is not None
        batches = engine.batches(stage, ctx, state)
        return _write_parts(stage, ctx, state, batches, out, parts, common)
    if kind in (FOLDER, FILE):
        cls = FolderWriter if kind == FOLDER else FileWriter
        with cls(out, **common, secret=stage.output.secret) as writer:
            ctx.writer = writer
            stage.build(ctx, writer.target)
            stage.finish(ctx, state)
            return writer.close(**ctx.stats)
    raise ValueError(f"unknown output kind {kind!r}")


def write_dataset(
    data: Any,
    out: str | os.PathLike[str],
    *,
    stage: str = "table",
    overwrite: bool = False,
    **stats: Any,
) -> dict[str, Any]:
    """Write an Arrow table (or anything :func:`~phisieve.io.sources.open_source` reads: a
    polars frame, a stream) as a complete phisieve dataset, e.g. documents prepared outside
    ``ingest``; ``stage`` is the name its manifest records as the writer.

    Returns the manifest; ``stats`` are recorded in it.
    """
    src = open_source(data)
    with DatasetWriter(Path(out), src.schema, stage=stage, overwrite=overwrite) as writer:
        for batch in src.batches(None):
            writer.write(batch)
        return writer.close(**stats)


def second_pass(
    stage: Stage, batches: Iterable[Any], writer: DatasetWriter
) -> Iterator[pa.RecordBatch]:
    """The output of a :attr:`~phisieve.pipeline.stage.Stage.two_pass` stage: ``batches``
    spilled to an Arrow stream in the output's pending folder (discarded with it if the
    run dies), read whole by the stage's ``settle``, then read again through its
    ``finalize``."""
    spill = writer.side_dir / ".spill.arrows"
    schema = writer.schema
    with pa.OSFile(str(spill), "wb") as sink, pa.ipc.new_stream(sink, schema) as out:
        for b in batches:
            for piece in b.to_batches() if isinstance(b, pa.Table) else [b]:
                out.write_batch(piece.cast(schema) if piece.schema != schema else piece)

    def read() -> Iterator[pa.RecordBatch]:
        # Read, not memory-mapped: mapped pages stay resident (and in the peak RSS) as long
        # as the map is open, which would hold the whole output in memory.
        with pa.OSFile(str(spill), "rb") as src:
            yield from pa.ipc.open_stream(src)

    try:
        settled = stage.settle(read())
        for b in read():
            yield stage.finalize(b, settled)
    finally:
        spill.unlink(missing_ok=True)


def _write_parts(
    stage: Stage,
    ctx: Context,
    state: Any,
    batches: Iterable[Any],
    out: Path,
    parts: list[str],
    common: dict[str, Any],
) -> dict[str, Any]:
    schema = stage.schema(ctx, state)
    with ExitStack() as stack:
        writers = {
            name: stack.enter_context(
                DatasetWriter(
                    out / name,
                    schema,
                    rows_per_part=stage.rows_per_part,
                    **{**common, "options": {**common["options"], "part": name}},
                )
            )
            for name in parts
        }
        ctx.writer = writers
        for routed in batches:
            for name, batch in routed.items():
                writers[name].write(batch)
        stage.finish(ctx, state)
        manifests = {
            name: writers[name].close(**stage.part_stats(ctx.stats, name)) for name in parts
        }
    return {**ctx.stats, "stage": stage.name, "outputs": manifests}


def _check_folder_of_datasets(out: Path, names: list[str]) -> None:
    """A folder of datasets holds nothing but its parts (and their ``.meta`` folders)."""
    from ..io.dataset import META_SUFFIX, meta_dir

    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise InputError("the output must be a folder", path=out)
    if out.name.endswith(META_SUFFIX) or meta_dir(out).exists():
        raise InputError("this output is a folder of datasets, not a dataset itself", path=out)
    if not out.exists():
        return
    allowed = {*names, *(n + META_SUFFIX for n in names)}
    for entry in out.iterdir():
        if not entry.name.startswith(".") and entry.name not in allowed:
            raise InputError(
                f"the output folder holds something other than the parts "
                f"({', '.join(names)}), e.g. {entry.name}; use a new or empty folder",
                path=out,
            )


def reject_unless_owned(stage: Stage, out: Path) -> None:
    """Refuse to replace an ``out`` that another stage (or no phisieve stage) wrote: a
    pipeline replaces its own stale outputs, never someone else's data."""
    try:
        manifest = output_manifest(out, stage.output_kind(), _parts(stage))
    except InputError:
        manifest = None
    exists = out.exists() or out.is_symlink()
    if exists and (manifest is None or manifest.get("stage") != stage.name):
        raise OutputExistsError(out)
