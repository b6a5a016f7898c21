"""The ``phisieve`` command line: one sub-command per pipeline stage.

Every command calls the same functions as the Python API. Errors that phisieve raises on
purpose print one line (what and where, never note text) and exit with status 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..catalog import STAGES
from ..errors import ConfigError, PhisieveError
from ..io.dataset import meta_dir, side_file
from .commands import register

app = typer.Typer(
    name="phisieve",
    help="Prepare clinical text corpora for language-model training without letting the "
    "model memorise who the patients are.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out_console = Console()
err_console = Console(stderr=True)
register(app, STAGES)

Out = Annotated[Path, typer.Option("--out", "-o", help="Output folder.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")]
Overwrite = Annotated[
    bool,
    typer.Option(
        help="Replace an existing output (atomically: the old one stays until the new one "
        "is complete)."
    ),
]
Recognizers = Annotated[
    str,
    typer.Option(
        help="Comma-separated recognizers: rules, lists, presidio, stanza, model:DIR "
        "(from detect-train; in detect-eval --cv, a bare `model` is trained per fold)."
    ),
]
StanzaModel = Annotated[
    str | None,
    typer.Option(
        help="Stanza package[:NER model] of the stanza recognizer, e.g. mimic:i2b2 "
        "(downloaded beforehand; STANZA_RESOURCES_DIR says where)."
    ),
]


DirectScope = Annotated[
    str,
    typer.Option(
        help="How far the words of direct spans reach: span (in place), patient (also the "
        "same patient's other uses), identifying (also corpus-wide the alphabetic words "
        "found inside spans in at least MIN_SHARE of their uses), corpus (every span word "
        "everywhere: the old behaviour)."
    ),
]
MinShare = Annotated[
    float,
    typer.Option(help="identifying scope: the share of a word's uses inside spans."),
]


@app.command()
def ingest(
    path: Annotated[Path, typer.Argument(help="Input file or folder.")],
    out: Out,
    fmt: Annotated[
        str, typer.Option("--format", help="mimic, physionet, jsonl, parquet, txt or auto.")
    ] = "auto",
    patient_col: Annotated[str | None, typer.Option(help="Patient id column.")] = None,
    text_col: Annotated[str | None, typer.Option(help="Note text column.")] = None,
    doc_col: Annotated[str | None, typer.Option(help="Document id column.")] = None,
    group_col: Annotated[str | None, typer.Option(help="Admission (group) id column.")] = None,
    id_map: Annotated[
        Path | None, typer.Option(help="CSV file,patient_id[,group_id] for a txt folder.")
    ] = None,
    encoding: Annotated[
        str,
        typer.Option(
            help="Text encoding of the input: a Python codec name such as latin-1 or cp1252."
        ),
    ] = "utf-8",
    overwrite: Overwrite = False,
    quiet: Quiet = False,
) -> None:
    """Read notes (MIMIC-III CSV, PhysioNet deid, JSONL, Parquet, .txt folder) into the
    documents dataset; bad rows go to OUT.meta/rejected with a reason (never their text)."""
    from ..corpus.ingest import ingest as run

    m = run(
        path,
        out,
        fmt,
        patient_col=patient_col,
        text_col=text_col,
        doc_col=doc_col,
        group_col=group_col,
        id_map=id_map,
        encoding=encoding,
        progress=not quiet,
        overwrite=overwrite,
    )
    out_console.print(
        f"read {m['rows_in']:,} rows: {m['rows']:,} documents written to {out}, "
        f"{m['rejected']:,} rejected"
    )
    for reason, count in sorted(m.get("rejected_by_reason", {}).items()):
        out_console.print(f"  rejected, {reason}: {count:,}")


@app.command()
def placeholders(
    out: Out,
    corpus: Annotated[
        Path | None, typer.Option(help="PhysioNet deid folder (id.text, id-phi.phrase).")
    ] = None,
    docs: Annotated[Path | None, typer.Option(help="A documents dataset.")] = None,
    spans: Annotated[Path | None, typer.Option(help="The documents' gold spans.")] = None,
    overwrite: Overwrite = False,
) -> None:
    """Turn gold PHI spans into MIMIC-III placeholders (the reverse of `surrogate`)."""
    from ..phi.gold import placeholders as run

    m = run(out, corpus=corpus, docs=docs, spans=spans, overwrite=overwrite)
    out_console.print(
        f"{m['rows']:,} documents: {m['spans']:,} gold spans -> {m['placeholders']:,} "
        f"placeholders ({m['merged']:,} overlaps merged); written to {out}"
    )


def detect_options(
    recognizers: str, deny: Path | None, allow: Path | None, stanza_model: str | None = None
) -> dict[str, Any]:
    """The recognizer names, word lists and Stanza model that `detect` and `detect-eval` take."""
    from ..detect.run import read_word_list

    package, _, ner = (stanza_model or "").partition(":")
    return {
        "recognizers": [r.strip() for r in recognizers.split(",") if r.strip()],
        "deny": read_word_list(deny) if deny else None,
        "allow": read_word_list(allow) if allow else None,
        "stanza": {"package": package or None, "ner": ner or None},
    }


def parse_thresholds(text: str) -> float | dict[str, float]:
    """``0.5`` or ``presidio=0.85,rules=0`` (``*=`` sets the others)."""
    try:
        if "=" not in text:
            return float(text)
        pairs = (item.split("=", 1) for item in text.split(",") if item.strip())
        return {name.strip(): float(value) for name, value in pairs}
    except ValueError:
        raise ConfigError(
            f"--min-score must be a number or name=number,..., not {text!r}"
        ) from None


@app.command("detect-eval")
def detect_eval(
    corpus: Annotated[Path, typer.Option(help="PhysioNet deid folder (id.text, id-phi.phrase).")],
    recognizers: Recognizers = "rules,lists",
    deny: Annotated[Path | None, typer.Option(help="Deny list (see `detect`).")] = None,
    allow: Annotated[Path | None, typer.Option(help="Allow list (see `detect`).")] = None,
    stanza_model: StanzaModel = None,
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
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the scores (no text) as JSON.")
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Span recall, character precision and recall per gold category, and notes/s; with
    --cv K, their mean ± sd over K patient-level folds."""
    import json

    from ..detect.run import evaluate_corpus

    options = detect_options(recognizers, deny, allow, stanza_model)
    if cv:
        from ..detect.cv import cross_validate, format_mean_sd, read_physionet_folder

        documents, gold = read_physionet_folder(corpus)

        def report(fold: int, s: dict) -> None:
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
            train_options={"epochs": epochs, "learning_rate": learning_rate},
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
    if json_out is not None:
        json_out.write_text(json.dumps(r, indent=1, sort_keys=True, default=str) + "\n")


@app.command("detect-train")
def detect_train(
    annotated: Annotated[
        Path,
        typer.Argument(
            help="PhysioNet deid folder, documents with a gold `spans` column (surrogate "
            "output), or a spans dataset (with --docs)."
        ),
    ],
    base: Annotated[Path, typer.Option(help="A local BERT-style model folder (fast tokenizer).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The model folder to write.")],
    docs: Annotated[
        Path | None, typer.Option(help="The documents of a spans dataset given as ANNOTATED.")
    ] = None,
    epochs: Annotated[int, typer.Option(help="Training epochs.")] = 3,
    batch_size: Annotated[int, typer.Option(help="Windows per step.")] = 16,
    max_length: Annotated[int, typer.Option(help="Window length in tokens.")] = 128,
    stride: Annotated[int, typer.Option(help="Overlap of windows in tokens.")] = 32,
    learning_rate: Annotated[float, typer.Option(help="AdamW learning rate.")] = 1e-4,
    o_weight: Annotated[float, typer.Option(help="Loss weight of non-PHI tokens.")] = 0.1,
    negative_share: Annotated[
        float, typer.Option(help="Share of windows without PHI kept (keyed by the seed).")
    ] = 0.3,
    seed: Annotated[int, typer.Option(help="Seed of initialisation, order and sampling.")] = 0,
    device: Annotated[
        str | None, typer.Option(help="cuda, cpu...; default CUDA when available.")
    ] = None,
    overwrite: Overwrite = False,
    quiet: Quiet = False,
) -> None:
    """Fine-tune a BIO token-classification model on annotated notes, for
    `detect --recognizers rules,lists,model:OUT`."""
    from ..detect.recognizers.model import read_annotated, train_recognizer
    from ..errors import OutputExistsError

    if out.exists() and not overwrite:
        raise OutputExistsError(out)
    documents, gold = read_annotated(annotated, docs)
    stats = train_recognizer(
        documents,
        gold,
        base,
        out,
        epochs=epochs,
        batch_size=batch_size,
        max_length=max_length,
        stride=stride,
        learning_rate=learning_rate,
        o_weight=o_weight,
        negative_share=negative_share,
        seed=seed,
        device=device,
        progress=not quiet,
        overwrite=overwrite,
    )
    out_console.print(
        f"trained on {stats['notes']:,} notes ({stats['windows']:,} windows, "
        f"{stats['steps']:,} steps, final loss {stats['final_loss']:.4f}) in "
        f"{stats['seconds']:.0f} s on {stats['device']}: {out}"
    )


@app.command("learn-deny")
def learn_deny(
    corpus: Annotated[Path, typer.Argument(help="PhysioNet deid folder (id.text, id-phi.phrase).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The deny list file to write.")],
    min_rate: Annotated[
        float, typer.Option(help="Share of a word's occurrences annotated as PHI.")
    ] = 0.5,
    min_patients: Annotated[int, typer.Option(help="Patients whose notes annotate it.")] = 1,
    overwrite: Overwrite = False,
) -> None:
    """Grow a deny list (word TAB LABEL) from annotated notes: the words annotated as PHI in
    most of their uses (clinicians, hospitals), for `detect --deny` on the site's other notes."""
    from ..detect.cv import read_physionet_folder
    from ..detect.learnt import learn_deny_list, write_word_list
    from ..errors import OutputExistsError

    if out.exists() and not overwrite:
        raise OutputExistsError(out)
    documents, gold = read_physionet_folder(corpus)
    words = learn_deny_list(documents, gold, min_rate=min_rate, min_patients=min_patients)
    write_word_list(words, out)
    out_console.print(f"{len(words):,} words learnt from {documents.num_rows:,} notes: {out}")


@app.command()
def encode(
    docs: Annotated[Path, typer.Argument(help="The documents dataset.")],
    out: Out,
    tokenizer: Annotated[
        Path, typer.Option(help="A local Hugging Face fast tokenizer (folder or tokenizer.json).")
    ],
    terms: Annotated[Path | None, typer.Option(help="The terms of `phisieve index`.")] = None,
    spans: Annotated[Path | None, typer.Option(help="Spans of direct identifiers.")] = None,
    max_len: Annotated[int, typer.Option(help="Tokens per sequence, specials included.")] = 512,
    ngram: Annotated[int, typer.Option(help="Use indirect n-grams up to this length.")] = 1,
    policy: Annotated[str, typer.Option(help="n-gram policy: all or minimal.")] = "all",
    pseudonymize: Annotated[
        bool, typer.Option(help="Replace direct identifiers by X (MLMA/CLMA baselines).")
    ] = False,
    normalize: Annotated[
        str | None, typer.Option(help="Word normalisation (default: the terms' own).")
    ] = None,
    direct_scope: Annotated[
        str | None,
        typer.Option(help="span, patient, identifying or corpus (default: the terms' own)."),
    ] = None,
    overwrite: Overwrite = False,
    quiet: Quiet = False,
) -> None:
    """Tokenise documents for a model, with per-token protected/direct flags, packed per
    patient into sequences of at most MAX_LEN tokens."""
    from ..encode import encode as run

    m = run(
        docs,
        out,
        tokenizer,
        terms=terms,
        spans=spans,
        max_len=max_len,
        ngram=ngram,
        policy=policy,
        normalize=normalize,
        direct_scope=direct_scope,
        pseudonymize=pseudonymize,
        progress=not quiet,
        overwrite=overwrite,
    )
    share = m["protected"] / m["tokens"] if m["tokens"] else 0.0
    out_console.print(
        f"{m['documents']:,} documents -> {m['sequences']:,} sequences, {m['tokens']:,} tokens; "
        f"protected {m['protected']:,} ({share:.1%}), direct {m['direct']:,}; written to {out}"
    )
    print_protection(m["encoding"]["protection"])


def print_protection(report: dict[str, Any]) -> None:
    """The protected share of tokens by reason (and the gold coverage, when scored)."""
    table = Table(title="protected tokens by reason", header_style="bold")
    for col in ("reason", "tokens", "% of tokens", "only this reason", "% of tokens "):
        table.add_column(col, justify="left" if col == "reason" else "right")
    labels = {
        "span": "inside a direct span",
        "patient": "same word as a span of the patient",
        "corpus": "corpus-wide direct term",
        "indirect": "indirect identifier",
    }
    for reason, r in report["by_reason"].items():
        table.add_row(
            labels.get(reason, reason),
            f"{r['tokens']:,}",
            f"{r['share']:.2%}",
            f"{r['only']:,}",
            f"{r['only_share']:.2%}",
        )
    table.add_row(
        "[bold]any", f"{report['protected']:,}", f"{report['protected_share']:.2%}", "", ""
    )
    out_console.print(table)
    if "gold" in report:
        g = report["gold"]
        out_console.print(
            f"gold PHI tokens protected: {g['protected']:,} of {g['tokens']:,} "
            f"([bold]{g['coverage']:.2%}[/]); by reason: "
            + ", ".join(f"{k} {v:,}" for k, v in g["by_reason"].items())
        )


@app.command()
def coverage(
    corpus: Annotated[Path, typer.Option(help="PhysioNet deid folder (id.text, id-phi.phrase).")],
    tokenizer: Annotated[
        Path, typer.Option(help="A local Hugging Face fast tokenizer (folder or tokenizer.json).")
    ],
    recognizers: Recognizers = "rules,lists",
    k: Annotated[int, typer.Option("--k", help="Indirect: used by fewer than k patients.")] = 2,
    ngram: Annotated[int, typer.Option(help="Use indirect n-grams up to this length.")] = 1,
    direct_scope: DirectScope = "identifying",
    min_share: MinShare = 0.2,
    max_len: Annotated[int, typer.Option(help="Tokens per sequence, specials included.")] = 512,
    deny: Annotated[Path | None, typer.Option(help="Deny list (see `detect`).")] = None,
    allow: Annotated[Path | None, typer.Option(help="Allow list (see `detect`).")] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the report as JSON here.")
    ] = None,
) -> None:
    """Protection on annotated notes: detect -> index --spans -> encode --terms --spans, then
    the share of gold PHI tokens protected and the share of all tokens protected."""
    import json

    from ..encode.coverage import coverage as run
    from ..encode.coverage import read_physionet

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
    print_protection(r["protection"])
    out_console.print(
        f"{r['documents']:,} notes of {r['patients']:,} patients: gold PHI token coverage "
        f"[bold]{r['coverage']:.4f}[/], protected share of all tokens "
        f"[bold]{r['protected_share']:.4f}[/] (scope {direct_scope}, k = {k}, n <= {ngram})"
    )
    if json_out is not None:
        json_out.write_text(json.dumps(r, indent=2))


@app.command()
def train(
    encoded: Annotated[Path, typer.Argument(help="The encoded dataset.")],
    model: Annotated[Path, typer.Option(help="A local Hugging Face model folder.")],
    out: Out,
    objective: Annotated[
        str, typer.Option(help="ppmlm, ppclm, mlm, clm, mlma, clma, dpp or ipp.")
    ] = "ppmlm",
    batch_size: Annotated[int, typer.Option(help="Sequences per batch.")] = 8,
    epochs: Annotated[int, typer.Option(help="Epochs (unless --max-steps).")] = 1,
    max_steps: Annotated[int | None, typer.Option(help="Optimizer steps.")] = None,
    learning_rate: Annotated[float, typer.Option(help="Peak learning rate.")] = 5e-5,
    warmup_ratio: Annotated[float, typer.Option(help="Share of steps warming up.")] = 0.0,
    grad_accumulation: Annotated[int, typer.Option(help="Batches per optimizer step.")] = 1,
    mask_probability: Annotated[float, typer.Option(help="Masked-LM share of words.")] = 0.15,
    mask_only: Annotated[bool, typer.Option(help="Always [MASK] (no 80/10/10).")] = False,
    seed: Annotated[int, typer.Option(help="Seed of masks, order and initialisation.")] = 0,
    num_workers: Annotated[int, typer.Option(help="DataLoader workers.")] = 0,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:1...")] = "auto",
    checkpoint_every: Annotated[int | None, typer.Option(help="Checkpoint every N steps.")] = None,
    dp: Annotated[bool, typer.Option(help="DP-SGD with Opacus.")] = False,
    noise_multiplier: Annotated[float, typer.Option(help="DP-SGD noise multiplier.")] = 1.0,
    max_grad_norm: Annotated[float, typer.Option(help="DP-SGD per-sample clipping norm.")] = 1.0,
    max_per_patient: Annotated[int, typer.Option(help="DP-SGD: sequences per patient.")] = 50,
    delta: Annotated[float | None, typer.Option(help="DP δ (default 1/patients).")] = None,
    allow_unprotected: Annotated[
        bool,
        typer.Option(
            help="Train a privacy-preserving objective on a dataset encoded without --terms "
            "and --spans (nothing protected)."
        ),
    ] = False,
    untie_output: Annotated[
        bool,
        typer.Option(
            help="Give the output layer its own copy of the input embeddings (BERT and GPT-2 "
            "tie them, so protected words seen as context move their output scores). Not "
            "with --dp."
        ),
    ] = False,
    hide_protected_input: Annotated[
        bool,
        typer.Option(
            help="Show the words the objective protects as [MASK] (the padding token when "
            "the tokenizer has none) in the input too."
        ),
    ] = False,
) -> None:
    """Fine-tune a masked or causal LM on an encoded dataset with a (privacy-preserving)
    objective; writes the model, metrics.jsonl and train.json to OUT."""
    from ..training.loop import DPConfig, TrainConfig
    from ..training.loop import train as run
    from ..training.masking import MaskingConfig

    cfg = TrainConfig(
        objective=objective,
        batch_size=batch_size,
        epochs=epochs,
        max_steps=max_steps,
        learning_rate=learning_rate,
        warmup_ratio=warmup_ratio,
        grad_accumulation=grad_accumulation,
        seed=seed,
        num_workers=num_workers,
        device=device,
        checkpoint_every=checkpoint_every,
        masking=MaskingConfig(
            probability=mask_probability,
            mask_only=mask_only,
            hide_protected_input=hide_protected_input,
        ),
        untie_output=untie_output,
        dp=DPConfig(noise_multiplier, max_grad_norm, max_per_patient, delta) if dp else None,
        allow_unprotected=allow_unprotected,
    )
    s = run(encoded, model, out, cfg)
    line = (
        f"{s['objective']}: {s['steps']} steps on {s['device']}, "
        f"loss {s['first_loss']:.3f} -> {s['final_loss']:.3f}"
    )
    if "dp" in s:
        line += f"; DP-SGD ε = {s['dp']['epsilon']:.2f} at δ = {s['dp']['delta']:.2g}"
    out_console.print(line + f"; model written to {out}")


@app.command()
def audit(
    out: Out,
    model: Annotated[Path | None, typer.Option(help="The trained model folder.")] = None,
    members: Annotated[
        Path | None, typer.Option(help="Encoded dataset of the model's training patients.")
    ] = None,
    non_members: Annotated[
        Path | None, typer.Option(help="Encoded dataset of patients it never saw.")
    ] = None,
    reference_model: Annotated[
        Path | None, typer.Option(help="Same architecture trained on the reference split.")
    ] = None,
    canaries: Annotated[
        Path | None, typer.Option(help="`phisieve canaries` output the model trained on.")
    ] = None,
    docs: Annotated[
        Path | None, typer.Option(help="Members' documents (model inversion of name slots).")
    ] = None,
    spans: Annotated[
        Path | None, typer.Option(help="Name spans of --docs (default: its spans column).")
    ] = None,
    tokenizer: Annotated[
        Path | None, typer.Option(help="Tokenizer the data was encoded with.")
    ] = None,
    compare: Annotated[
        bool,
        typer.Option(help="Put the REPORTS (audit report folders) side by side instead."),
    ] = False,
    reports: Annotated[
        list[Path] | None, typer.Argument(help="With --compare: report folders.")
    ] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda...")] = "auto",
    batch_size: Annotated[int, typer.Option(help="Sequences per forward pass.")] = 32,
    seed: Annotated[int, typer.Option(help="Seed of masks, samples and bootstrap.")] = 0,
    max_identifiers: Annotated[
        int, typer.Option(help="Identifier occurrences scored per side (0: all).")
    ] = 20_000,
    utility_words: Annotated[
        int, typer.Option(help="Non-identifier words of non-members scored for utility.")
    ] = 5000,
    n_boot: Annotated[int, typer.Option(help="Bootstrap resamples over patients.")] = 1000,
    show_identifiers: Annotated[
        bool, typer.Option(help="Show the text of the most recovered identifiers.")
    ] = False,
    label: Annotated[str | None, typer.Option(help="Model name shown in reports.")] = None,
    overwrite: Overwrite = False,
    quiet: Quiet = False,
) -> None:
    """Audit a trained model for leakage of its patients (OUT/audit.json, OUT/index.html),
    or with --compare put earlier reports side by side."""
    if compare:
        from ..audit.report import compare_reports

        if not reports:
            raise ConfigError("--compare needs report folders: audit --compare A B --out DIR")
        page = compare_reports(list(reports), out)
        out_console.print(f"comparison of {len(reports)} reports: {page}", soft_wrap=True)
        return
    if reports:
        raise ConfigError("report folders are given with --compare")
    if model is None or members is None or non_members is None:
        raise ConfigError("audit needs --model, --members and --non-members (or --compare)")
    from ..audit.run import audit as run

    r = run(
        model,
        members,
        non_members,
        reference_model=reference_model,
        canaries=canaries,
        docs=docs,
        spans=spans,
        tokenizer=tokenizer,
        out=out,
        device=device,
        batch_size=batch_size,
        seed=seed,
        max_identifiers=max_identifiers or None,
        utility_words=utility_words,
        n_boot=n_boot,
        show_identifiers=show_identifiers,
        label=label,
        overwrite=overwrite,
        progress=not quiet,
    )
    print_verdict(r.data)
    out_console.print(f"report: {r.html}", soft_wrap=True)


def print_verdict(data: dict[str, Any]) -> None:
    """The audit's verdict table on the console."""
    table = Table(title=f"audit of {data['model']['label']}")
    for col in ("measure", "value", "95% CI", "reading"):
        table.add_column(col)
    colour = {"ok": "green", "warn": "yellow", "bad": "red", "info": "blue"}
    for v in data["verdict"]:
        value = "—" if v["value"] is None else f"{v['value']:.3f}"
        ci = "" if not v["ci"] else f"[{v['ci'][0]:.3f}, {v['ci'][1]:.3f}]"
        table.add_row(
            f"[{colour.get(v['level'], 'white')}]{escape(v['measure'])}[/]",
            value,
            ci,
            escape(v["reading"]),
        )
    out_console.print(table)


def print_index_summary(stats: dict[str, Any]) -> None:
    """A readable table of an index's statistics."""
    out_console.print(
        f"[bold]{stats['documents']:,} documents[/], {stats['patients']:,} patients, "
        f"{stats['tokens']:,} words; k = {stats['k']}, "
        f"{stats['passes']} pass(es), index peak {stats['peak_index_bytes'] / 2**20:,.1f} MiB"
    )
    table = Table(
        title="indirect identifiers: terms used by fewer than k patients "
        "(per patient: median count)"
    )
    for col in ("n", "terms", "indirect", "% of terms", "% of uses", "per patient", "p90", "max"):
        table.add_column(col, justify="right")
    for n, s in stats["per_n"].items():
        q = s["identifiers_per_patient"]
        table.add_row(
            n,
            f"{s['distinct_terms']:,}",
            f"{s['indirect_terms']:,}",
            f"{s['share_distinct_indirect']:.1%}",
            f"{s['share_occurrences_indirect']:.2%}",
            f"{q.get('q50', 0):,.0f}",
            f"{q.get('q90', 0):,.0f}",
            f"{q.get('q100', 0):,.0f}",
        )
    out_console.print(table)
    share = stats.get("protected_share")
    if share:
        out_console.print(
            f"protected word occurrences at n <= {stats['ngram']}: policy all "
            f"{share['all']:.1%}, policy minimal {share['minimal']:.1%}"
        )


@app.command()
def demo(
    out: Annotated[Path, typer.Option("--out", "-o", help="Working folder.")] = Path("demo_out"),
    patients: Annotated[int, typer.Option(help="Synthetic patients.")] = 500,
    ngram: Annotated[int, typer.Option(help="n-gram length for the index.")] = 2,
    audit: Annotated[
        bool,
        typer.Option(help="Then train a tiny BERT with ppmlm on the notes and audit it."),
    ] = True,
    steps: Annotated[int, typer.Option(help="Training steps of the demo's models.")] = 300,
) -> None:
    """Synthetic corpus -> surrogate PHI with gold spans -> patient x term index -> summary;
    then canaries -> split -> train a tiny BERT with PPMLM -> privacy audit -> report."""
    import os

    from ..phi.surrogate import surrogate as run_surrogate
    from ..synthetic.generate import synth as run_synth
    from ..term_index.build import write_index

    out_console.rule("[bold]1. synthetic corpus")
    manifest = run_synth(out / "notes", patients=patients, seed=0, progress=True, overwrite=True)
    out_console.print(f"{manifest['rows']:,} notes of {patients:,} patients in {out / 'notes'}")
    out_console.rule("[bold]2. surrogate PHI in the placeholders, with gold spans")
    # A fresh random key, kept in memory only: the demo's surrogates differ on every run.
    key = os.urandom(32)
    m = run_surrogate(out / "notes", out / "notes_phi", key, progress=True, overwrite=True)
    print_surrogate_summary(m)
    out_console.print(f"filled notes and their gold `spans`: {out / 'notes_phi'}")
    out_console.rule("[bold]3. patient x term index")
    stats = write_index(
        out / "notes_phi", out / "terms", k=2, ngram=ngram, progress=True, overwrite=True
    )
    print_index_summary(stats)
    out_console.print(f"blacklist: {side_file(out / 'terms', 'blacklist.txt')}")
    flagged, words = gold_words_flagged(out / "notes_phi", out / "terms")
    out_console.print(
        f"gold PHI words (from the surrogate spans) that the index flags as indirect "
        f"identifiers: {flagged:,} of {words:,} ({flagged / max(words, 1):.1%}); the rest "
        "recur across patients and need the direct-identifier stage"
    )
    if audit:
        demo_audit(out, key, steps)


def demo_audit(out: Path, key: bytes, steps: int) -> None:
    """The demo's second half: canaries -> split by patient -> tokenizer -> encode -> train a
    tiny BERT with PPMLM (and a reference model) -> audit -> the report's path."""
    import pyarrow.parquet as pq

    from ..audit.run import audit as run_audit
    from ..corpus.split import split as run_split
    from ..encode import encode as run_encode
    from ..io.dataset import dataset_files
    from ..phi.canaries import insert_canaries
    from ..term_index.build import write_index
    from ..training.loop import TrainConfig
    from ..training.loop import train as run_train
    from ..training.tokenizers import train_wordpiece

    try:
        import torch
        from transformers import BertConfig, BertForMaskedLM
    except ImportError as e:
        raise ConfigError(
            "the demo's audit needs the torch and audit extras: pip install "
            "'phisieve[torch,audit]' (or run the demo with --no-audit)"
        ) from e

    out_console.rule("[bold]4. canaries, split by patient")
    patients = len(set(pq.read_table(out / "notes_phi", columns=["patient_id"])
                       .column("patient_id").to_pylist()))  # fmt: skip
    m = insert_canaries(out / "notes_phi", out / "notes_canaries", key,
                        n=min(30, patients // 2), repeats=(1, 4, 16), overwrite=True)  # fmt: skip
    out_console.print(f"{m['canaries']} canaries ({m['insertions']} insertions)")
    parts = run_split(out / "notes_canaries", out / "splits", overwrite=True)
    sizes = ", ".join(f"{k}: {v['patients']} patients" for k, v in parts["parts"].items())
    out_console.print(sizes)
    out_console.rule("[bold]5. tokenizer, index and encoding")
    lines = [
        line
        for f in dataset_files(out / "splits" / "reference")
        for t in pq.read_table(f, columns=["text"]).column("text").to_pylist()
        for line in t.splitlines()
    ]
    tok = train_wordpiece(lines, out / "tokenizer", vocab_size=3000, max_len=128)
    # The index sees every patient (with the surrogates' gold spans as direct identifiers):
    # a canary's secret is used by one patient only, so PPMLM protects it.
    docs = out / "notes_canaries"
    write_index(docs, out / "terms_all", k=2, ngram=1, spans=docs, overwrite=True)
    enc = {}
    for name in ("members", "reference", "heldout"):
        enc[name] = out / f"enc_{name}"
        run_encode(out / "splits" / name, enc[name], tok, terms=out / "terms_all", spans=docs,
                   max_len=128, overwrite=True)  # fmt: skip
    out_console.rule("[bold]6. train a tiny BERT with ppmlm, and a reference model")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=3000, hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=128,
                        max_position_embeddings=128)  # fmt: skip
    BertForMaskedLM(config).save_pretrained(out / "bert_init")
    for name, data, objective in (("model_ppmlm", "members", "ppmlm"),
                                  ("model_reference", "reference", "mlm")):  # fmt: skip
        cfg = TrainConfig(objective=objective, max_steps=steps, batch_size=16,
                          learning_rate=1e-3, pad_to=8)  # fmt: skip
        s = run_train(enc[data], out / "bert_init", out / name, cfg)
        out_console.print(f"{name}: {s['steps']} steps, loss {s['first_loss']:.2f} -> "
                          f"{s['final_loss']:.2f}")  # fmt: skip
    out_console.rule("[bold]7. privacy audit")
    result = run_audit(
        out / "model_ppmlm",
        enc["members"],
        enc["heldout"],
        reference_model=out / "model_reference",
        canaries=out / "notes_canaries",
        docs=out / "splits" / "members",
        tokenizer=tok,
        out=out / "report",
        max_identifiers=2000,
        utility_words=1000,
        n_boot=200,
        name_slots=50,
        canary_samples=200,
        label="ppmlm (demo)",
        overwrite=True,
        progress=True,
    )
    print_verdict(result.data)
    out_console.print(f"audit report: {result.html}", soft_wrap=True)


def gold_words_flagged(filled: Path, terms: Path) -> tuple[int, int]:
    """How many word occurrences inside gold spans are indirect single-word terms."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from ..io.dataset import dataset_files
    from ..term_index.build import read_terms
    from ..text.words import tokenize

    docs = pa.concat_tables(
        [pq.read_table(f, columns=["text", "spans"]) for f in dataset_files(filled)]
    )
    pieces = [
        text[sp["start"] : sp["end"]]
        for text, spans in zip(
            docs.column("text").to_pylist(), docs.column("spans").to_pylist(), strict=True
        )
        for sp in spans or []
    ]
    words = pc.list_flatten(tokenize(pieces).column("words"))
    t = read_terms(terms)
    indirect = t.filter(pc.and_(pc.equal(t["n"], 1), t["indirect"])).column("term")
    return pc.sum(pc.is_in(words, indirect)).as_py() or 0, len(words)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``phisieve`` command."""
    try:
        app(args=argv, standalone_mode=False)
    except PhisieveError as e:
        Console(stderr=True).print(f"[red]error:[/] {escape(str(e))}", highlight=False)
        sys.exit(2)
    except (typer.Exit, SystemExit) as e:
        code = getattr(e, "exit_code", getattr(e, "code", 0))
        sys.exit(code)
    except Exception as e:  # usage errors (click's, or the copy typer vendors)
        show, code = getattr(e, "show", None), getattr(e, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            sys.exit(code)
        raise


if __name__ == "__main__":
    main()
