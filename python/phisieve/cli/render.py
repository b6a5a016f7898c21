"""What the command line prints once a stage's output is committed: one renderer per stage,
from the output's manifest (nothing here reads data or note text)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from ..io.dataset import meta_dir, side_file

Lines = list[Any]
"""Rich renderables (or strings) to print, in order."""


def synth(m: dict[str, Any], out: Path) -> Lines:
    return [
        f"wrote {m.get('rows', 0):,} notes of {m.get('patients', 0):,} patients "
        f"(~{m.get('tokens', 0):,} tokens) to {out}"
    ]


def ingest(m: dict[str, Any], out: Path) -> Lines:
    lines: Lines = [
        f"read {m['rows_in']:,} rows: {m['rows']:,} documents written to {out}, "
        f"{m['rejected']:,} rejected"
    ]
    for reason, count in sorted(m.get("rejected_by_reason", {}).items()):
        lines.append(f"  rejected, {reason}: {count:,}")
    return lines


def keygen(m: dict[str, Any], out: Path) -> Lines:
    return [f"a new key in {out}: keep it apart from the outputs you share"]


def index_summary(stats: dict[str, Any]) -> Lines:
    """A readable table of an index's statistics."""
    run = stats.get("execution", {})
    how = ""
    if run:
        how = f", {run['passes']} pass(es), index peak {run['peak_index_bytes'] / 2**20:,.1f} MiB"
        if run.get("pieces", 1) > 1:
            how += f" (the largest of {run['pieces']} pieces)"
    lines: Lines = [
        f"[bold]{stats['documents']:,} documents[/], {stats['patients']:,} patients, "
        f"{stats['tokens']:,} words; k = {stats['k']}{how}"
    ]
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
    lines.append(table)
    share = stats.get("protected_share")
    if share:
        lines.append(
            f"protected word occurrences at n <= {stats['ngram']}: policy all "
            f"{share['all']:.1%}, policy minimal {share['minimal']:.1%}"
        )
    return lines


def index(m: dict[str, Any], out: Path) -> Lines:
    lines = index_summary(m)
    if m.get("spans"):
        lines.append(
            f"{m['direct_terms']:,} words of direct spans marked direct in the whole "
            f"corpus (scope {m.get('direct_scope')})"
        )
    lines.append(f"terms written to {out}; blacklist.txt and stats.json to {meta_dir(out)}")
    return lines


def merge(m: dict[str, Any], out: Path) -> Lines:
    return [f"{m['rows']:,} terms ({m['indirect_terms']:,} indirect) written to {out}"]


def surrogate_summary(m: dict[str, Any]) -> Lines:
    """The surrogate stage's counts; unknown categories by name only when the manifest holds
    them (``--report-unknown-categories``: those two patients use), otherwise counted."""
    table = Table(title="surrogates", show_header=True, header_style="bold")
    table.add_column("kind")
    table.add_column("filled", justify="right")
    for kind, n in m["by_kind"].items():
        table.add_row(kind, f"{n:,}")
    lines: Lines = [
        table,
        f"{m['rows']:,} documents: {m['placeholders']:,} placeholders, {m['filled']:,} "
        f"filled, {m['unfilled']:,} left unfilled, {m['markers_removed']:,} stray markers "
        "removed",
    ]
    if m.get("dates_clamped"):
        lines.append(
            f"[yellow]{m['dates_clamped']:,} date placeholders were no calendar date[/] "
            "(e.g. month 13, February 30): moved to the nearest date before the shift"
        )
    unknown = m["unknown"]
    if not unknown["categories"]:
        return lines
    lines.append(
        f"[yellow]{unknown['categories']:,} unknown categories[/] "
        f"({unknown['placeholders']:,} placeholders; "
        f"{unknown['single_patient_categories']:,} of them used by one patient each)"
    )
    if "unknown_categories" not in m:
        lines.append("not named: --report-unknown-categories names those at least two patients use")
        return lines
    for category, n in m["unknown_categories"].items():
        lines.append(f"[yellow]unknown category[/] {escape(category)!r}: {n:,}")
    return lines


def surrogate(m: dict[str, Any], out: Path) -> Lines:
    return [*surrogate_summary(m), f"written to {out}"]


def placeholders(m: dict[str, Any], out: Path) -> Lines:
    return [
        f"{m['rows']:,} documents: {m['spans']:,} gold spans -> {m['placeholders']:,} "
        f"placeholders ({m['merged']:,} overlaps merged); written to {out}"
    ]


def detect(m: dict[str, Any], out: Path) -> Lines:
    return [f"{m['rows']:,} documents, {m['spans_found']:,} spans written to {out}"]


def protection(report: dict[str, Any]) -> Lines:
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
    lines: Lines = [table]
    if "gold" in report:
        g = report["gold"]
        lines.append(
            f"gold PHI tokens protected: {g['protected']:,} of {g['tokens']:,} "
            f"([bold]{g['coverage']:.2%}[/]); by reason: "
            + ", ".join(f"{k} {v:,}" for k, v in g["by_reason"].items())
        )
    return lines


def encode(m: dict[str, Any], out: Path) -> Lines:
    share = m["protected"] / m["tokens"] if m["tokens"] else 0.0
    return [
        f"{m['documents']:,} documents -> {m['sequences']:,} sequences, {m['tokens']:,} "
        f"tokens; protected {m['protected']:,} ({share:.1%}), direct {m['direct']:,}; "
        f"written to {out}",
        *protection(m["encoding"]["protection"]),
    ]


def split(manifest: dict[str, Any], out: Path) -> Lines:
    m = manifest["split"]
    table = Table(title=f"split by {m['by']} (seed {m['seed']})")
    for col in ("part", "fraction", "patients", "documents", "folder"):
        table.add_column(col, justify="left" if col in ("part", "folder") else "right")
    for name, part in m["parts"].items():
        table.add_row(
            name,
            f"{m['fractions'][name]:g}",
            "-" if part["patients"] is None else f"{part['patients']:,}",
            f"{part['rows']:,}",
            str(out / name),
        )
    return [table, f"{m['units']:,} {m['by']}s, {m['rows']:,} documents, written to {out}"]


def canaries(m: dict[str, Any], out: Path) -> Lines:
    where = (
        f"{m['new_patients']} new canary patients"
        if m.get("new_patients")
        else f"{m['patients']} patients' notes"
    )
    planted = m.get("planted", m["canaries"])
    left = m["canaries"] - planted
    coin = f", {left} left out by the coin" if left else ""
    return [
        f"{planted} of {m['canaries']} canaries planted{coin} ({m['insertions']} insertions) "
        f"in {where}, written to {out}; their secrets are in "
        f"{side_file(out, 'canaries.parquet')}"
    ]


def tokenizer(m: dict[str, Any], out: Path) -> Lines:
    return [f"a {m['kind_of_tokenizer']} tokenizer of {m['vocab_size']:,} tokens written to {out}"]


def init_model(m: dict[str, Any], out: Path) -> Lines:
    return [f"a new {m['architecture']} of {m['parameters']:,} parameters written to {out}"]


def train(m: dict[str, Any], out: Path) -> Lines:
    line = (
        f"{m['objective']}: {m['steps']} steps on {m['device']}, "
        f"loss {m['first_loss']:.3f} -> {m['final_loss']:.3f}"
    )
    dp = m.get("dp")
    if dp and dp["epsilon"] is None:
        line += "; DP-SGD without noise: no finite ε (clipping only)"
    elif dp:
        line += (
            f"; DP-SGD: ε = {dp['epsilon']:.2f} per patient at δ = {dp['delta']:.2g} "
            f"({dp['accountant']}, {dp['patients']:,} patients, σ = {dp['noise_multiplier']:.3g})"
        )
        if dp["unit"] == "sequence":
            line += (
                f", by group privacy over {dp['max_per_patient']} sequences from ε = "
                f"{dp['sequence']['epsilon']:.2f} per sequence"
            )
    return [line + f"; model written to {out}"]


def verdict(data: dict[str, Any]) -> Lines:
    """The audit's verdict table."""
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
    return [table]


def audit(m: dict[str, Any], out: Path) -> Lines:
    from ..audit.run import read_audit

    return [*verdict(read_audit(out)), f"report: {out / 'index.html'}"]


def audit_compare(m: dict[str, Any], out: Path) -> Lines:
    return [f"comparison of {m['reports']} reports: {out / 'index.html'}"]


def detect_train(m: dict[str, Any], out: Path) -> Lines:
    return [
        f"trained on {m['notes']:,} notes ({m['windows']:,} windows, {m['steps']:,} steps, "
        f"final loss {m['final_loss']:.4f}) in {m['seconds']:.0f} s on {m['device']}: {out}"
    ]


def learn_deny(m: dict[str, Any], out: Path) -> Lines:
    return [f"{m['words']:,} words learnt from {m['notes']:,} notes: {out}"]


def fragment(m: dict[str, Any], out: Path) -> Lines:
    """What ``phisieve fragment`` cut, dropped and made (and the PHI share, with gold)."""
    r = m["report"]
    cut = Table(title="fragments by kind", header_style="bold")
    for col in ("kind", "cut", "kept", "used", "mean words"):
        cut.add_column(col, justify="left" if col == "kind" else "right")
    for kind in ("NP", "VP"):
        f, s = r["fragments"][kind], r["supply"][kind]
        cut.add_row(
            kind, f"{f['cut']:,}", f"{f['kept']:,}", f"{s['used']:,}", f"{f['length_mean']:.2f}"
        )
    dropped = ", ".join(f"{reason} {n:,}" for reason, n in r["dropped"].items() if n)
    lines: Lines = [
        f"{r['notes']:,} notes: {r['coverage']:.1%} of their words are in a fragment",
        cut,
        f"dropped (a fragment may count twice): {dropped or 'none'}",
    ]
    if "gold" in r:
        gold = Table(title="gold PHI share of words", header_style="bold")
        gold.add_column("text")
        gold.add_column("words", justify="right")
        gold.add_column("PHI", justify="right")
        for row in r["gold"]:
            gold.add_row(row["text"], f"{row['words']:,}", f"{row['phi_share']:.2%}")
        lines.append(gold)
    ran_out = r["supply"]["ran_out"]
    lines.append(
        f"{r['supply']['examples']:,} examples written to {out}"
        + (f" (the {ran_out}s ran out)" if ran_out else "")
    )
    return lines


RENDERERS: dict[str, Callable[[dict[str, Any], Path], Lines]] = {
    "synth": synth,
    "ingest": ingest,
    "keygen": keygen,
    "index": index,
    "merge": merge,
    "surrogate": surrogate,
    "placeholders": placeholders,
    "detect": detect,
    "encode": encode,
    "split": split,
    "fragment": fragment,
    "canaries": canaries,
    "tokenizer": tokenizer,
    "init-model": init_model,
    "train": train,
    "audit": audit,
    "audit-compare": audit_compare,
    "detect-train": detect_train,
    "learn-deny": learn_deny,
}


def render(stage: str, manifest: dict[str, Any], out: Path) -> Lines:
    """What to print for ``stage``'s committed output."""
    renderer = RENDERERS.get(stage)
    return renderer(manifest, out) if renderer else [f"written to {out}"]
