"""``phisieve run FILE``: a pipeline file, stage by stage, finished stages skipped; and
``phisieve demo``, which runs the demo pipeline that ships with phisieve."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..catalog import load_pipeline
from ..pipeline.engine import Engine
from .commands import workers_or_default

if TYPE_CHECKING:
    from ..pipeline.config import Pipeline
    from ..pipeline.execute import Event

out_console = Console()

DEMO = "demo.toml"
"""The demo pipeline, beside this module (``examples/pipeline.toml`` links to it)."""


def _rel(pipeline: Pipeline, path: Path) -> str:
    try:
        return str(path.relative_to(pipeline.workdir))
    except ValueError:
        return str(path)


def show_plan(pipeline: Pipeline, events: list[Event]) -> None:
    """The plan of a run: every stage, its inputs and output, and what a run would do."""
    table = Table(title=f"{pipeline.path} (workdir {pipeline.workdir})", header_style="bold")
    for col in ("#", "stage", "inputs", "output", "plan"):
        table.add_column(col)
    colour = {"skip": "green", "run": "yellow", "wait": "blue"}
    for e in events:
        inputs = ", ".join(f"{k}={_rel(pipeline, p)}" for k, p in e.step.input_paths())
        what = {"skip": "finished: skip", "run": f"run ({e.reason})", "wait": f"run {e.reason}"}
        table.add_row(
            str(e.index),
            f"{e.step.name}" + (f" ({e.step.kind})" if e.step.kind != e.step.name else ""),
            escape(inputs),
            escape(_rel(pipeline, e.step.out)),
            f"[{colour[e.action]}]{escape(what[e.action])}[/]",
        )
    out_console.print(table)


def _report(pipeline: Pipeline, quiet: bool) -> object:
    def report(e: Event) -> None:
        title = f"[{e.index}/{e.total}] {e.step.name}"
        if e.action == "skip":
            out_console.print(f"{title}: finished, skipped ({_rel(pipeline, e.step.out)})")
        elif e.action == "run":
            out_console.rule(f"[bold]{escape(title)}[/] ({escape(e.reason)})")
        elif e.action == "done" and e.manifest is not None:
            from .render import render

            for line in render(type(e.step.stage), e.manifest, e.step.out):
                out_console.print(line, soft_wrap=True)

    return report


def execute(
    pipeline: Pipeline,
    start: list[str] | None,
    stop: list[str] | None,
    dry_run: bool,
    overwrite: bool,
    quiet: bool,
    engine: Engine | None = None,
) -> None:
    """Show the plan (``dry_run``) or run it (with ``engine``: default, this process)."""
    if dry_run:
        from ..pipeline.execute import plan

        show_plan(pipeline, plan(pipeline, start=start, stop=stop))
        return
    from ..pipeline.execute import run_pipeline

    run_pipeline(
        pipeline,
        start=start,
        stop=stop,
        overwrite=overwrite,
        progress=not quiet,
        report=_report(pipeline, quiet),  # type: ignore[arg-type]
        engine=engine,
    )
    out_console.print(
        f"[bold green]done[/]: every stage of {pipeline.path} is finished", soft_wrap=True
    )


Names = Annotated[
    list[str] | None,
    typer.Option(
        "--from", help="Re-run this stage (a table name, or a stage) and all that follow from it."
    ),
]


def run(
    file: Annotated[Path, typer.Argument(help="The pipeline file (TOML).")],
    start: Names = None,
    stop: Annotated[
        list[str] | None,
        typer.Option("--to", help="Stop after this stage (runs only what it needs)."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option(help="Show the plan (stages, inputs, outputs, what is stale).")
    ] = False,
    workdir: Annotated[
        Path | None, typer.Option(help="Where relative paths point (default: the file's own).")
    ] = None,
    settings: Annotated[
        list[str] | None,
        typer.Option("--set", help="STAGE.KEY=VALUE over the file, e.g. train.max-steps=50."),
    ] = None,
    overwrite: Annotated[
        bool,
        typer.Option(
            help="Replace outputs that this pipeline's stages did not write (by default only "
            "their own stale outputs are replaced)."
        ),
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
    engine: Annotated[
        str,
        typer.Option(
            help="Where batch functions run: local (this process) or ray (a Ray cluster: "
            "pip install 'phisieve[ray]'). The outputs are the same files."
        ),
    ] = "local",
    address: Annotated[
        str | None,
        typer.Option(
            help="With --engine ray: the cluster to join (auto, ray://HOST:10001); without "
            "it a local Ray instance is started."
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            "-w",
            help="Worker processes: with --engine local those of this machine (default: the "
            "CPUs this process may use; 1: all in this process), with --engine ray the "
            "parallel batch functions (default: the cluster's CPUs). The outputs are the same "
            "files whatever the number.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run a pipeline file: its stages in the order their inputs need, skipping those whose
    output records the same inputs and options (checked before anything runs)."""
    pipeline = load_pipeline(file, workdir=workdir, overrides=settings or ())
    if dry_run:
        execute(pipeline, start, stop, dry_run, overwrite, quiet)
        return
    from ..pipeline.execute import make_engine

    if engine != "ray" or workers is not None:
        workers = workers_or_default(workers)
    runner = make_engine(engine, address=address, workers=workers)
    try:
        execute(pipeline, start, stop, dry_run, overwrite, quiet, runner)
    finally:
        runner.close()


def demo(
    out: Annotated[Path, typer.Option("--out", "-o", help="Working folder.")] = Path("demo_out"),
    patients: Annotated[int, typer.Option(help="Synthetic patients.")] = 500,
    steps: Annotated[int, typer.Option(help="Training steps of the demo's models.")] = 300,
    audit: Annotated[
        bool,
        typer.Option(help="Then train a tiny BERT with ppmlm on the notes and audit it."),
    ] = True,
    dry_run: Annotated[bool, typer.Option(help="Show the plan only.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
) -> None:
    """The demo pipeline (``examples/pipeline.toml``): synthetic notes -> surrogate PHI ->
    canaries -> detect -> index -> split -> tokenizer -> encode -> tiny BERT trained with
    PPMLM and a reference model -> privacy audit -> the report."""
    with resources.as_file(resources.files(__package__).joinpath(DEMO)) as file:
        overrides = [
            f"synth.patients={patients}",
            f"canaries.n={min(30, max(1, patients // 2))}",
            f"train_ppmlm.max-steps={steps}",
            f"train_reference.max-steps={steps}",
        ]
        pipeline = load_pipeline(file, workdir=out, overrides=overrides)
    stop = None if audit else ["index"]
    execute(pipeline, None, stop, dry_run, False, quiet)
    if audit and not dry_run:
        page = pipeline.step("audit").out / "index.html"
        out_console.print(f"audit report: {page}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    """``run`` and ``demo``."""
    app.command("run")(run)
    app.command("demo")(demo)
