"""What a command prints once its output is committed: each stage's summary, rendered from
the manifest alone by one renderer (:mod:`phisieve.cli.render`)."""

from __future__ import annotations

import io
import string
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from phisieve.catalog import STAGES
from phisieve.cli.render import render, render_items
from phisieve.encode.stage import PROTECTION
from phisieve.pipeline.summary import Each, Item, Line, Table, Within

OUT = Path("/data/out")


def text(lines: list[Any]) -> str:
    """What a console shows of ``lines`` (markup applied, no colours), tables' borders
    left out."""
    buf = io.StringIO()
    console = Console(file=buf, width=200, color_system=None)
    for line in lines:
        console.print(line, soft_wrap=True)
    shown = "".join(c for c in buf.getvalue() if not "\u2500" <= c <= "\u257f")
    return " ".join(shown.split())


def show(stage: str, manifest: dict[str, Any], out: Path = OUT) -> str:
    return text(render(STAGES[stage], {"stage": stage, **manifest}, out))


def texts(items: tuple[Item, ...]) -> list[str]:
    """Every format string of a summary."""
    out: list[str] = []
    for item in items:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, (Line, Each)):
            out.append(item.text)
        elif isinstance(item, Table):
            out += [item.title, *(t for _, t in item.columns), *(item.total or ())]
        elif isinstance(item, Within):
            out += texts(item.items)
    return out


@pytest.mark.parametrize("name", sorted(STAGES))
def test_every_summary_renders_any_manifest(name: str) -> None:
    cls = STAGES[name]
    for fmt in texts(cls.summary):
        list(string.Formatter().parse(fmt))  # a malformed format string raises
    # A manifest without stats shows what it can and never fails.
    assert isinstance(render(cls, {"stage": name}, OUT), list)


def test_a_stage_without_a_summary_says_where_its_output_is() -> None:
    from phisieve.pipeline.stage import Stage

    assert text(render(Stage, {}, OUT)) == f"written to {OUT}"


def test_ingest_lists_the_rejections_by_reason() -> None:
    m = {"rows_in": 5, "rows": 3, "rejected": 2, "rejected_by_reason": {"z": 1, "a": 1}}
    assert show("ingest", m) == (
        f"read 5 rows: 3 documents written to {OUT}, 2 rejected rejected, a: 1 rejected, z: 1"
    )


def test_index_shows_its_table_per_n() -> None:
    per_n = {
        "distinct_terms": 12_000,
        "indirect_terms": 3_000,
        "share_distinct_indirect": 0.25,
        "share_occurrences_indirect": 0.0123,
        "identifiers_per_patient": {"q50": 7, "q90": 20, "q100": 41},
    }
    m = {
        "documents": 1450,
        "patients": 82,
        "tokens": 9_999,
        "k": 2,
        "ngram": 2,
        "per_n": {"1": per_n, "2": {**per_n, "identifiers_per_patient": {}}},
        "execution": {"pieces": 1, "passes": 2, "peak_index_bytes": 3 * 2**20},
        "protected_share": {"all": 0.5, "minimal": 0.25},
        "spans": True,
        "direct_terms": 17,
        "direct_scope": "identifying",
    }
    got = show("index", m)
    assert "1,450 documents, 82 patients, 9,999 words; k = 2" in got
    assert "2 pass(es)" in got and "3.0 MiB" in got
    assert "indirect identifiers: terms used by fewer than k patients" in got
    assert "1 12,000 3,000 25.0% 1.23% 7 20 41" in got
    assert "2 12,000 3,000 25.0% 1.23% - - -" in got
    assert "policy all 50.0%, policy minimal 25.0%" in got
    assert "17 words of direct spans marked direct" in got
    assert f"blacklist.txt and stats.json to {OUT}.meta" in got
    # Without policy stats or spans, those lines are left out.
    del m["protected_share"]
    m["spans"] = False
    got = show("index", m)
    assert "policy all" not in got and "direct spans" not in got


SURROGATE = {
    "rows": 10,
    "placeholders": 998,
    "filled": 998,
    "unfilled": 0,
    "markers_removed": 1,
    "by_kind": {"name": 600, "date": 398},
    "dates_clamped": 0,
    "unknown": {"categories": 2, "placeholders": 4, "single_patient_categories": 1},
    "report_unknown": False,
}


def test_surrogate_names_unknown_categories_only_when_the_manifest_does() -> None:
    got = show("surrogate", SURROGATE)
    assert "name 600" in got and "998 placeholders, 998 filled" in got
    assert "2 unknown categories (4 placeholders; 1 of them used by one patient each)" in got
    assert "--report-unknown-categories names" in got and "unknown category" not in got
    assert "no calendar date" not in got
    named = {**SURROGATE, "report_unknown": True, "unknown_categories": {"[bold]X[/] Y": 3}}
    got = show("surrogate", {**named, "dates_clamped": 2})
    # Shown as it is: a category's name is never taken for markup.
    assert "unknown category '[bold]X[/] Y': 3" in got
    assert "--report-unknown-categories" not in got
    assert "2 date placeholders were no calendar date" in got
    assert "2 unknown categories" not in show(
        "surrogate", {**SURROGATE, "unknown": {"categories": 0}}
    )


def test_split_shows_every_part() -> None:
    split = {
        "by": "patient",
        "seed": 2,
        "fractions": {"a": 0.7, "b": 0.3},
        "units": 10,
        "rows": 19,
        "parts": {
            "a": {"path": str(OUT / "a"), "units": 7, "patients": 7, "rows": 13},
            "b": {"path": str(OUT / "b"), "units": 3, "patients": None, "rows": 6},
        },
    }
    got = show("split", {"split": split, "outputs": {}})
    assert "split by patient (seed 2)" in got
    assert f"a 0.7 7 13 {OUT / 'a'}" in got and f"b 0.3 - 6 {OUT / 'b'}" in got
    assert f"10 patients, 19 documents, written to {OUT}" in got


PROTECTION_REPORT = {
    "tokens": 1000,
    "protected": 250,
    "protected_share": 0.25,
    "by_reason": {
        "span": {"tokens": 100, "share": 0.1, "only": 50, "only_share": 0.05},
        "indirect": {"tokens": 150, "share": 0.15, "only": 100, "only_share": 0.1},
    },
}


def test_encode_shows_the_protection_by_reason_and_coverage_shares_it() -> None:
    m = {
        "documents": 5,
        "sequences": 7,
        "tokens": 1000,
        "protected": 250,
        "direct": 100,
        "encoding": {"protection": PROTECTION_REPORT},
    }
    got = show("encode", m)
    assert "5 documents -> 7 sequences, 1,000 tokens; protected 250 (25.0%), direct 100" in got
    assert "inside a direct span 100 10.00% 50 5.00%" in got
    assert "indirect identifier 150" in got and "any 250 25.00%" in got
    assert "gold PHI" not in got
    gold = {"tokens": 40, "protected": 38, "coverage": 0.95, "by_reason": {"span": 30}}
    got = text(render_items(PROTECTION, {**PROTECTION_REPORT, "gold": gold}))
    assert "gold PHI tokens protected: 38 of 40 (95.00%); by reason: span: 30" in got


def test_canaries_say_where_they_went_and_where_the_secrets_are() -> None:
    m = {"canaries": 4, "planted": 4, "insertions": 21, "patients": 3, "new_patients": 0}
    got = show("canaries", {**m, "options": {"coin": False}})
    assert f"4 of 4 canaries planted (21 insertions) in 3 patients' notes, written to {OUT}" in got
    assert f"secrets are in {OUT}.meta/canaries.parquet" in got and "coin" not in got
    got = show("canaries", {**m, "planted": 2, "new_patients": 4, "options": {"coin": True}})
    assert "2 of 4 canaries planted (21 insertions) in 4 new canary patients" in got
    assert "keyed coin" in got


def test_train_states_its_privacy_guarantee() -> None:
    m = {"objective": "ppclm", "steps": 2, "device": "cpu", "first_loss": 5.0, "final_loss": 4.5}
    assert show("train", m) == f"ppclm: 2 steps on cpu, loss 5.000 -> 4.500 model written to {OUT}"
    dp = {
        "epsilon": 3.14159,
        "delta": 1e-5,
        "accountant": "prv",
        "patients": 1200,
        "noise_multiplier": 1.1,
        "max_per_patient": 8,
        "unit": "patient",
    }
    got = show("train", {**m, "dp": dp})
    assert "DP-SGD: ε = 3.14 per patient at δ = 1e-05 (prv, 1,200 patients, σ = 1.1)" in got
    assert "group privacy" not in got and "without noise" not in got
    got = show("train", {**m, "dp": {**dp, "unit": "sequence", "sequence": {"epsilon": 0.5}}})
    assert "by group privacy over 8 sequences from ε = 0.50 per sequence" in got
    got = show("train", {**m, "dp": {**dp, "epsilon": None, "sequence": {"epsilon": None}}})
    assert "DP-SGD without noise: no finite ε" in got and "per patient" not in got


def test_audit_shows_its_verdict_and_the_report() -> None:
    verdict = [
        {"measure": "AUC", "value": 0.51, "ci": [0.45, 0.57], "reading": "ok", "level": "ok"},
        {"measure": "gap", "value": None, "ci": None, "reading": "none", "level": "info"},
    ]
    m = {"verdict": verdict, "options": {"label": None}, "inputs": {"model": {"path": "/m/x"}}}
    got = show("audit", m)
    assert "audit of /m/x" in got and "AUC 0.510 [0.450, 0.570] ok" in got
    assert "gap - - none" in got and f"report: {OUT / 'index.html'}" in got
    assert "audit of mlm" in show("audit", {**m, "options": {"label": "mlm"}})


def test_fragment_shows_what_was_cut_dropped_and_made() -> None:
    kind = {"cut": 10, "kept": 8, "length_mean": 2.5}
    report = {
        "notes": 3,
        "coverage": 0.5,
        "fragments": {"all": 20, "kept": 16, "NP": kind, "VP": {**kind, "cut": 11}},
        "dropped": {"protected": 3, "rare": 0},
        "supply": {
            "examples": 4,
            "ran_out": "NP",
            "blocks": 2,
            "NP": {"used": 8},
            "VP": {"used": 7},
        },
        "gold": [{"text": "full text", "words": 100, "phi_share": 0.1}],
    }
    got = show("fragment", {"report": report})
    assert "3 notes: 50.0% of their words are in a fragment" in got
    assert "NP 10 8 8 2.50" in got and "VP 11 8 7 2.50" in got
    assert "protected: 3" in got and "full text 100 10.00%" in got
    assert f"4 examples written to {OUT}" in got
    assert "2 blocks mixed apart; the NPs ran out first in most" in got
    report["supply"]["ran_out"] = None
    del report["gold"]
    got = show("fragment", {"report": report})
    assert "ran out" not in got and "gold" not in got


@pytest.mark.parametrize(
    ("stage", "manifest", "expected"),
    [
        ("synth", {"rows": 9, "patients": 3, "tokens": 1234}, "wrote 9 notes of 3 patients"),
        ("keygen", {}, "keep it apart from the outputs you share"),
        ("merge", {"rows": 5, "indirect_terms": 2}, "5 terms (2 indirect) written to"),
        ("detect", {"rows": 4, "spans_found": 6}, "4 documents, 6 spans written to"),
        ("learn-deny", {"words": 1, "notes": 2}, "1 words learnt from 2 notes"),
        ("audit-compare", {"reports": 2}, "comparison of 2 reports"),
        (
            "detect-train",
            {"notes": 40, "windows": 50, "steps": 9, "final_loss": 0.1, "seconds": 3,
             "device": "cpu"},
            "trained on 40 notes (50 windows, 9 steps, final loss 0.1000) in 3 s on cpu",
        ),
    ],
)  # fmt: skip
def test_one_line_summaries(stage: str, manifest: dict[str, Any], expected: str) -> None:
    assert expected in show(stage, manifest)


def test_paths_are_never_taken_for_markup() -> None:
    out = Path("/data/[bold]odd[/]")
    assert show("detect", {"rows": 1, "spans_found": 0}, out).endswith(str(out))
