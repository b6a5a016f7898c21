"""The ``audit`` and ``audit-compare`` stages: their options and inputs, declared without
importing what an audit needs to run (numpy, pyarrow, scikit-learn, torch...); the measures
(:mod:`phisieve.audit.run`) and the report (:mod:`phisieve.audit.report`) are imported when a
stage runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._lazy import LazyModule
from ..pipeline.options import option
from ..pipeline.stage import FOLDER, PATH, BuildStage, Context, Input, Output
from ..pipeline.summary import Line, Table

run = LazyModule(".run", __package__)

__all__ = ["AuditCompareStage", "AuditOptions", "AuditStage", "CompareOptions"]


@dataclass(frozen=True)
class AuditOptions:
    """Options of ``phisieve audit``."""

    device: str = option("auto", "auto, cpu, cuda...")
    batch_size: int = option(32, "Sequences per forward pass.")
    seed: int = option(0, "Seed of masks, samples and bootstrap.")
    max_identifiers: int = option(20_000, "Identifier occurrences scored per side (0: all).")
    utility_words: int = option(5000, "Non-identifier words of non-members scored for utility.")
    mlm_rounds: int = option(1, "Masked LMs: rounds of 15% masks per sequence (membership).")
    n_boot: int = option(1000, "Bootstrap resamples over patients.")
    generation_prompts: int = option(64, "Causal LMs: prompts of free generation.")
    name_slots: int = option(200, "Name slots of the model inversion.")
    name_candidates: int = option(1000, "First and last name candidates of the inversion.")
    canary_samples: int = option(1000, "Candidates a canary's rank is estimated on.")
    show_identifiers: bool = option(False, "Show the text of the most recovered identifiers.")
    label: str | None = option(None, "Model name shown in reports.")


class AuditStage(BuildStage):
    """``phisieve audit``: the privacy audit of a trained model
    (:func:`phisieve.audit.run.measure`); the output folder holds ``audit.json`` and
    ``index.html``."""

    name = "audit"
    help = "Audit a trained model for leakage of its patients (OUT/audit.json, OUT/index.html)."
    Options = AuditOptions
    inputs = (
        Input("model", "The trained model folder.", kind=PATH),
        Input("members", "Encoded dataset of the model's training patients."),
        Input("non-members", "Encoded dataset of patients it never saw."),
        Input("reference-model", "Same architecture trained on the reference split.",
              kind=PATH, required=False),
        Input("canaries", "`phisieve canaries` output the model trained on.", required=False),
        Input("docs", "Members' documents (model inversion of name slots).", required=False),
        Input("spans", "Name spans of --docs (default: its spans column).", required=False),
        Input("tokenizer", "Tokenizer the data was encoded with.", kind=PATH, required=False),
    )  # fmt: skip
    output = Output(FOLDER, "The report folder to write.")
    summary = (
        Line("audit of {options[label]}", when="options[label]"),
        Line("audit of {inputs[model][path]}", unless="options[label]"),
        Table(
            "verdict",
            "verdict",
            (
                ("measure", "{measure}"),
                ("value", "{value:.3f}"),
                ("95% CI", "\\[{ci[0]:.3f}, {ci[1]:.3f}]"),
                ("reading", "{reading}"),
            ),
            left=("reading",),
            level="level",
        ),
        "report: {out}/index.html",
    )

    def build(self, ctx: Context, target: Path) -> None:
        def path(name: str) -> Any:
            value = ctx.values.get(name)
            return getattr(value, "path", value)

        data, seconds = run.measure(
            path("model"),
            path("members"),
            path("non-members"),
            reference_model=path("reference-model"),
            canaries=path("canaries"),
            docs=path("docs"),
            spans=path("spans"),
            tokenizer=path("tokenizer"),
            options=self.options,
            ctx=ctx,
        )
        run.render_files(data, target)
        ctx.stats.update(seconds=seconds, verdict=data["verdict"])


@dataclass(frozen=True)
class CompareOptions:
    """``phisieve audit --compare`` has no options."""


class AuditCompareStage(BuildStage):
    """``phisieve audit --compare``: audit reports side by side (``index.html`` and
    ``compare.json``)."""

    name = "audit-compare"
    help = "Put audit reports side by side (OUT/index.html, OUT/compare.json)."
    Options = CompareOptions
    inputs = (Input("reports", "Audit report folders.", kind=PATH, positional=True, many=True),)
    output = Output(FOLDER, "The comparison folder to write.")
    summary = ("comparison of {reports} reports: {out}/index.html",)

    def build(self, ctx: Context, target: Path) -> None:
        from .report import compare_reports

        reports = ctx.values["reports"]
        compare_reports(list(reports), target)
        ctx.stats["reports"] = len(reports)
