"""Commands that measure rather than make a dataset: ``detect-eval`` (detection against gold,
with patient-level cross-validation) and ``coverage`` (protection against gold). Their
``--json`` reports are written through the output contract, like every output."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ..detect.stage import RECOGNIZERS_HELP, STANZA_HELP, parse_recognizers, stanza_options
from ..protection.policy import DIRECT_SCOPE_HELP, MIN_SHARE_HELP

out_console = Console()
err_console = Console(stderr=True)

Recognizers = Annotated[str, typer.Option(help=RECOGNIZERS_HELP)]
Corpus = Annotated[Path, typer.Option(help="PhysioNet deid folder (id.text, id-phi.phrase).")]
Deny = Annotated[Path | None, typer.Option(help="Deny list (see `detect`).")]
Allow = Annotated[Path | None, typer.Option(help="Allow list (see `detect`).")]
JsonOut = Annotated[
    Path | None, typer.Option("--json", help="Also write the scores (no text) as JSON here.")
]
Overwrite = Annotated[bool, typer.Option(help="Replace an existing --json file (atomically).")]


def detect_options(
    recognizers: str, deny: Path | None, allow: Path | None, stanza_model: str | None = None
) -> dict[str, Any]:
    """The recognizer names, word lists and Stanza model that `detect-eval` and `coverage`
    take, as :func:`phisieve.detect.run.find_spans`'s arguments."""
    from ..detect.run import read_word_list

    return {
        "recognizers": parse_recognizers(recognizers),
        "deny": read_word_list(deny) if deny else None,
        "allow": read_word_list(allow) if allow else None,
        "stanza": stanza_options(stanza_model),
    }


def _report(json_out: Path | None, data: dict[str, Any], stage: str, options: dict[str, Any],
            overwrite: bool) -> None:  # fmt: skip
    if json_out is not None:
        from ..io.dataset import write_json

        write_json(json_out, data, stage=stage, options=options, overwrite=overwrite)


def detect_eval(
    corpus: Corpus,
    recognizers: Recognizers = "rules,lists,crf",
    deny: Deny = None,
    allow: Allow = None,
    stanza_model: Annotated[str | None, typer.Option(help=STANZA_HELP)] = None,
    cv: Annotated[
        int,
        typer.Option(
            help="Patient-level k-fold cross-validation: fit on k-1 folds, score the last "
            "(0: score every note with nothing fitted)."
        ),
    ] = 0,
    seed: Annotated[int, typer.Option(help="Key of the patients' assignment to folds.")] = 0,
    learn_deny: Annotated[
        bool,
        typer.Option(help="With --cv: grow a deny list from the training folds' gold for lists."),
    ] = True,
    base: Annotated[
        Path | None,
        typer.Option(help="With --cv and the recognizer `model`: the BERT trained per fold."),
    ] = None,
    epochs: Annotated[int, typer.Option(help="With --base: training epochs per fold.")] = 3,
    learning_rate: Annotated[
        float, typer.Option(help="With --base: the learning rate (see detect-train).")
    ] = 1e-4,
    augment: Annotated[
        int,
        typer.Option(
            help="With --base: also train each fold's model on this many surrogate-filled "
            "copies of each training note (see detect-train)."
        ),
    ] = 0,
    layers: Annotated[
        int | None,
        typer.Option(
            help="With --base: keep the base model's first N transformer layers (see "
            "detect-train; default: all)."
        ),
    ] = None,
    oof: Annotated[
        str,
        typer.Option(
            help="With --cv and the recognizers crf,model (stacked): where the training folds' "
            "model scores come from: nested (models that never saw the held-out fold; "
            "k(k-1)/2 + k models) or outer (the k models of the outer folds, which saw it)."
        ),
    ] = "nested",
    json_out: JsonOut = None,
    overwrite: Overwrite = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines.")] = False,
) -> None:
    """Span recall, character precision and recall per gold category, and notes/s; with
    --cv K, their mean ± sd over K patient-level folds."""
    from ..detect.run import evaluate_corpus
    from ..io.annotated import read_physionet
    from ..io.dataset import FILE, check_output

    if json_out is not None:
        check_output(json_out, overwrite, kind=FILE)
    options = detect_options(recognizers, deny, allow, stanza_model)
    train_options = {
        "epochs": epochs,
        "learning_rate": learning_rate,
        "augment": augment,
        "layers": layers,
    }
    recorded = {"recognizers": recognizers, "cv": cv, "seed": seed, "learn_deny": learn_deny,
                "oof": oof, **train_options}  # fmt: skip
    if cv:
        from ..detect.cv import cross_validate, format_mean_sd

        documents, gold = read_physionet(corpus)

        def report(fold: int, s: dict[str, Any]) -> None:
            if not quiet:
                err_console.print(
                    f"fold {fold + 1}/{cv}: {s['patients']} patients, {s['documents']} notes, "
                    f"span recall {s['span_recall']:.3f}, "
                    f"character precision {s['char_precision']:.3f}"
                )

        r = cross_validate(
            documents,
            gold,
            options.pop("recognizers"),
            k=cv,
            seed=seed,
            learn_deny=learn_deny,
            base=base,
            train_options=train_options,
            oof=oof,
            on_fold=report,
            **options,
        )
        table = Table(
            title=f"{cv}-fold patient-level cross-validation on {corpus}", header_style="bold"
        )
        for col in ("category", "gold spans", "found", "span recall (mean ± sd)"):
            table.add_column(col, justify="left" if col == "category" else "right")
        for label, m in r["by_label"].items():
            table.add_row(label, f"{m['gold']:,}", f"{m['found']:,}", format_mean_sd(m["recall"]))
        out_console.print(table)
        out_console.print(
            f"span recall {format_mean_sd(r['span_recall'])}, character precision "
            f"{format_mean_sd(r['char_precision'])}, character recall "
            f"{format_mean_sd(r['char_recall'])} (mean ± sd over {cv} folds of "
            f"{r['patients']} patients, {r['documents']:,} notes)"
        )
    else:
        r = evaluate_corpus(corpus, **options)
        table = Table(title=f"detection on {corpus}", header_style="bold")
        for col in ("category", "gold spans", "found", "span recall"):
            table.add_column(col, justify="left" if col == "category" else "right")
        for label, m in r["by_label"].items():
            table.add_row(label, f"{m['gold']:,}", f"{m['found']:,}", f"{m['recall']:.3f}")
        out_console.print(table)
        out_console.print(
            f"span recall {r['span_recall']:.3f}, character precision {r['char_precision']:.3f}, "
            f"character recall {r['char_recall']:.3f}; {r['documents']:,} notes at "
            f"{r.get('notes_per_s', 0):,.0f} notes/s"
        )
    _report(json_out, r, "detect-eval", recorded, overwrite)


def coverage(
    corpus: Corpus,
    tokenizer: Annotated[
        Path, typer.Option(help="A local Hugging Face fast tokenizer (folder or tokenizer.json).")
    ],
    recognizers: Recognizers = "rules,lists,crf",
    k: Annotated[int, typer.Option("--k", help="Indirect: used by fewer than k patients.")] = 2,
    ngram: Annotated[int, typer.Option(help="Use indirect n-grams up to this length.")] = 1,
    direct_scope: Annotated[str, typer.Option(help=DIRECT_SCOPE_HELP)] = "identifying",
    min_share: Annotated[float, typer.Option(help=MIN_SHARE_HELP)] = 0.2,
    max_len: Annotated[int, typer.Option(help="Tokens per sequence, specials included.")] = 512,
    deny: Deny = None,
    allow: Allow = None,
    json_out: JsonOut = None,
    overwrite: Overwrite = False,
) -> None:
    """Protection on annotated notes: detect -> index --spans -> encode --terms --spans, then
    the share of gold PHI tokens protected and the share of all tokens protected."""
    from ..encode.coverage import coverage as run
    from ..io.annotated import read_physionet
    from ..io.dataset import FILE, check_output

    if json_out is not None:
        check_output(json_out, overwrite, kind=FILE)
    opts = detect_options(recognizers, deny, allow, None)
    documents, gold = read_physionet(corpus)
    r = run(
        documents,
        gold,
        tokenizer,
        recognizers=opts.pop("recognizers"),
        k=k,
        ngram=ngram,
        direct_scope=direct_scope,
        min_share=min_share,
        max_len=max_len,
        detect_options=opts,
    )
    from ..encode.stage import PROTECTION
    from .render import render_items

    for line in render_items(PROTECTION, r["protection"]):
        out_console.print(line)
    out_console.print(
        f"{r['documents']:,} notes of {r['patients']:,} patients: gold PHI token coverage "
        f"[bold]{r['coverage']:.4f}[/], protected share of all tokens "
        f"[bold]{r['protected_share']:.4f}[/] (scope {direct_scope}, k = {k}, n <= {ngram})"
    )
    recorded = {"recognizers": recognizers, "k": k, "ngram": ngram, "direct_scope": direct_scope,
                "min_share": min_share, "max_len": max_len}  # fmt: skip
    _report(json_out, r, "coverage", recorded, overwrite)


def register(app: typer.Typer) -> None:
    """The measuring commands."""
    app.command("detect-eval")(detect_eval)
    app.command("coverage")(coverage)
