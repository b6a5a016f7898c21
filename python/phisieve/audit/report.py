"""The audit's HTML report, and the side-by-side comparison of several audits.

:func:`render_report` turns one ``audit.json`` dict (schema ``phisieve-audit/1``) into one
self-contained page for people: inline CSS, every plot a base64 PNG, no script and no external
address, so it can be mailed or archived as it is. :func:`compare_reports` puts several audits
side by side (``index.html`` and ``compare.json``).

Every string from the audit is HTML-escaped. Identifier texts appear only where the audit holds
them (``top_recovered[*]["text"]``, written with ``--show-identifiers``), and the page then
says that it contains patient identifiers. The same dict always gives the same bytes: the PNGs
carry no timestamp or software version. matplotlib is imported only when a page is rendered,
and figures are drawn on their own Agg canvas (no pyplot, no global backend change).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError

SCHEMA = "phisieve-audit/1"
COMPARE_SCHEMA = "phisieve-audit-compare/1"

_DPI = 100
_NULL = "—"
_SCORES = {
    "loss": "Loss",
    "reference": "Reference-calibrated",
    "zlib": "zlib",
    "min_k": "Min-K%",
    "min_k_pp": "Min-K%++",
}
_GROUPS = ("overall", "direct", "indirect", "alpha", "numeric")
_LEVELS = {"ok": "OK", "warn": "Caution", "bad": "Concern", "info": "Info"}
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2")
_MEMBER, _NON_MEMBER = "#d62728", "#1f77b4"

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
 margin:0 auto;max-width:1120px;padding:1.5em 2em 4em;color:#1b1b1b;line-height:1.45}
h1{font-size:1.7em;margin:.2em 0 .1em}h2{font-size:1.3em;margin-top:2em;
 border-bottom:2px solid #ddd;padding-bottom:.2em}h3{font-size:1.05em;margin:1.4em 0 .4em}
p.lead{color:#444;margin-top:0}.muted{color:#666}.why{color:#666;font-size:.88em}
table{border-collapse:collapse;margin:.5em 0 1em;font-size:.93em}
th,td{border:1px solid #d5d5d5;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums;
 white-space:nowrap}td.num .why{white-space:normal}tbody th{white-space:nowrap}
table.meta th{background:#fafafa;font-weight:600}
.level{font-weight:700;text-align:center;white-space:nowrap}
.level-ok{background:#dcf2dc;color:#14561b}.level-warn{background:#fff1c9;color:#6b4c00}
.level-bad{background:#fadadd;color:#8a1020}.level-info{background:#e3edf9;color:#163f73}
table.verdict td{font-size:1.02em}table.verdict{width:100%}
.figs{display:flex;flex-wrap:wrap;gap:1em 1.5em;align-items:flex-start}
figure{margin:.4em 0;display:table}img{max-width:100%;height:auto;display:block}
figcaption{display:table-caption;caption-side:bottom;font-size:.85em;color:#555;padding-top:.3em}
.notrun{color:#666;font-style:italic}.warning{background:#fadadd;border:1px solid #d9a0a8;
 padding:.6em 1em;font-weight:600}ul.notes li{margin:.3em 0}
nav a{margin-right:1em}details{margin:.5em 0}pre{background:#f6f6f6;padding:.6em;
 overflow-x:auto;font-size:.85em}code{font-size:.92em}
@media print{nav{display:none}h2{break-after:avoid}figure,table{break-inside:avoid}}
"""


# ---------------------------------------------------------------------------------- formatting


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _get(d: Any, *keys: str | int) -> Any:
    """``d[k1][k2]...``, ``None`` where a level is missing or null."""
    for k in keys:
        if isinstance(d, dict):
            d = d.get(k)  # type: ignore[arg-type]
        elif isinstance(d, list) and isinstance(k, int) and -len(d) <= k < len(d):
            d = d[k]
        else:
            return None
    return d


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _null(why: str | None = None) -> str:
    out = f'<span class="null">{_NULL}</span>'
    return out + (f' <span class="why">({_e(why)})</span>' if why else "")


def _fmt(value: Any, kind: str = "num", digits: int = 3) -> str:
    """A number as text (no HTML): ``pct`` (percent), ``int``, or ``num`` (fixed decimals)."""
    if kind == "pct":
        return f"{100 * value:.{digits}f}%"
    if kind == "int":
        return f"{round(value):,}"
    if kind == "sig":
        return f"{value:.{digits}g}"
    return f"{value:.{digits}f}"


def _val(value: Any, kind: str = "num", digits: int = 3, why: str | None = None) -> str:
    return _e(_fmt(value, kind, digits)) if _finite(value) else _null(why)


def _with_ci(
    value: Any, ci: Any, kind: str = "num", digits: int = 3, why: str | None = None
) -> str:
    if not _finite(value):
        return _null(why)
    out = _fmt(value, kind, digits)
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(_finite(c) for c in ci):
        out += f" [{_fmt(ci[0], kind, digits)}, {_fmt(ci[1], kind, digits)}]"
    return _e(out)


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    """A table from already-escaped cells; cells starting with ``<td``/``<th`` are kept."""
    out = [f'<table class="{cls}">' if cls else "<table>", "<thead><tr>"]
    out += [f"<th>{h}</th>" for h in head]
    out.append("</tr></thead><tbody>")
    for row in rows:
        out.append("<tr>")
        for cell in row:
            out.append(cell if cell.startswith(("<td", "<th")) else f"<td>{cell}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _num_td(html_text: str) -> str:
    return f'<td class="num">{html_text}</td>'


def _not_run(why: str) -> str:
    return f'<p class="notrun">Not run: {_e(why)}.</p>'


def _figure(uri: str | None, alt: str, caption: str) -> str:
    if uri is None:
        return ""
    return (
        f'<figure><img src="{uri}" alt="{_e(alt)}"><figcaption>{_e(caption)}</figcaption></figure>'
    )


def _page(title: str, body: Sequence[str]) -> str:
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            # Nothing may load from anywhere: the page is self-contained by construction.
            '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
            "img-src data:; style-src 'unsafe-inline'\">",
            f"<title>{_e(title)}</title>",
            f"<style>{_CSS}</style></head><body>",
            *body,
            "</body></html>",
            "",
        ]
    )


# ------------------------------------------------------------------------------------ plotting


def _plot(width: float, height: float, draw: Callable[[Any], None]) -> str:
    """Draw on a fresh Agg figure and return it as a PNG data URI (no metadata: reproducible)."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rc = {
        "font.size": 9,
        "axes.titlesize": 10,
        "axes.labelsize": 9,
        "legend.fontsize": 8,
        "svg.hashsalt": "phisieve",
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
    }
    with matplotlib.rc_context(rc):
        fig = Figure(figsize=(width, height), dpi=_DPI, layout="constrained")
        canvas = FigureCanvasAgg(fig)
        try:
            draw(fig)
            buf = io.BytesIO()
            canvas.print_png(buf, metadata={"Software": None})
        finally:
            fig.clear()
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _floats(values: Any) -> list[float]:
    return [float(v) for v in values or () if _finite(v)]


def _roc_plot(title: str, curves: list[tuple[str, dict[str, Any]]]) -> str | None:
    """ROC curves on log-log axes; zero rates are drawn at 1/(2n) (half a sample)."""
    curves = [(n, r) for n, r in curves if _get(r, "roc", "fpr") and _get(r, "roc", "tpr")]
    if not curves:
        return None
    negatives = max(int(_get(r, "non_members") or 0) for _, r in curves) or 1000
    positives = max(int(_get(r, "members") or 0) for _, r in curves) or 1000
    x0, y0 = 0.5 / negatives, 0.5 / positives
    low = min(x0, y0)

    def draw(fig: Any) -> None:
        ax = fig.add_subplot()
        ax.plot([low, 1], [low, 1], color="#888", ls="--", lw=1, label="chance (TPR = FPR)")
        for i, (name, r) in enumerate(curves):
            fpr = [max(float(v), x0) for v in r["roc"]["fpr"]]
            tpr = [max(float(v), y0) for v in r["roc"]["tpr"]]
            auc = _get(r, "auc")
            label = name + (f" (AUC {auc:.3f})" if _finite(auc) else "")
            ax.plot(fpr, tpr, color=_COLOURS[i % len(_COLOURS)], lw=1.5, label=label)
        for target in (0.01, 0.001):
            if target > x0:
                ax.axvline(target, color="#bbb", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(x0 * 0.9, 1.05)
        ax.set_ylim(y0 * 0.9, 1.05)
        ax.set_xlabel("false positive rate (non-members flagged)")
        ax.set_ylabel("true positive rate (members flagged)")
        ax.set_title(title)
        ax.legend(loc="lower right")

    return _plot(5.2, 4.4, draw)


def _cdf_plot(scores: list[tuple[str, dict[str, Any]]]) -> str | None:
    """Empirical CDFs of members' and non-members' per-patient scores, one panel a score."""
    panels = [
        (name, _floats(_get(r, "scores", "members")), _floats(_get(r, "scores", "non_members")), r)
        for name, r in scores
    ]
    panels = [p for p in panels if p[1] and p[2]]
    if not panels:
        return None
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)

    def step(ax: Any, values: list[float], colour: str, label: str) -> None:
        values = sorted(values)
        n = len(values)
        ax.step(values, [(i + 1) / n for i in range(n)], where="post", color=colour, label=label)

    def draw(fig: Any) -> None:
        axes = fig.subplots(rows, cols, squeeze=False)
        for k, (name, mem, non, r) in enumerate(panels):
            ax = axes[k // cols][k % cols]
            step(ax, mem, _MEMBER, f"members ({len(mem)})")
            step(ax, non, _NON_MEMBER, f"non-members ({len(non)})")
            auc = _get(r, "auc")
            ax.set_title(name + (f" — AUC {auc:.3f}" if _finite(auc) else ""))
            ax.set_xlabel("score per patient (higher = member)")
            ax.set_ylabel("share of patients ≤ score")
            ax.set_ylim(0, 1.02)
            ax.legend(loc="upper left")
        for k in range(len(panels), rows * cols):
            axes[k // cols][k % cols].set_visible(False)

    return _plot(3.6 * cols, 3.0 * rows, draw)


_TOPK = ("top1", "top10", "top100", "top1000")


def _inversion_plot(inv: dict[str, Any]) -> str | None:
    model = [_get(inv, "model", k) for k in _TOPK]
    base = [_get(inv, "baseline", k) for k in _TOPK]
    if not any(_finite(v) for v in model + base):
        return None

    def draw(fig: Any) -> None:
        ax = fig.add_subplot()
        xs = range(len(_TOPK))
        for shift, values, colour, label in (
            (-0.2, model, _MEMBER, "model"),
            (0.2, base, "#999999", "popular-name baseline"),
        ):
            heights = [100 * v if _finite(v) else 0.0 for v in values]
            bars = ax.bar([x + shift for x in xs], heights, 0.4, color=colour, label=label)
            for bar, v in zip(bars, values, strict=True):
                text = f"{100 * v:.1f}%" if _finite(v) else _NULL
                ax.annotate(
                    text,
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
        ax.set_xticks(list(xs), ["top-1", "top-10", "top-100", "top-1000"])
        ax.set_ylabel("names recovered (% of slots)")
        ax.set_title("Model inversion: full names ranked by the model")
        ax.legend(loc="upper left")

    return _plot(5.2, 3.6, draw)


def _canary_plot(can: dict[str, Any]) -> str | None:
    points = [
        c
        for c in _get(can, "canaries") or ()
        if _finite(_get(c, "repeats")) and _get(c, "repeats") > 0 and _finite(_get(c, "exposure"))
    ]
    by = sorted(
        (b for b in _get(can, "by_repeats") or () if _finite(_get(b, "repeats"))),
        key=lambda b: b["repeats"],
    )
    if not points and not by:
        return None
    kinds = sorted({str(c.get("kind")) for c in points})

    def draw(fig: Any) -> None:
        ax = fig.add_subplot()
        # Spread the canaries of one repetition count a little (in log2 units), in input order.
        groups: dict[float, list[dict[str, Any]]] = {}
        for c in points:
            groups.setdefault(float(c["repeats"]), []).append(c)
        for i, kind in enumerate(kinds):
            for estimated in (False, True):
                xs, ys = [], []
                for r, group in groups.items():
                    for j, c in enumerate(group):
                        if str(c.get("kind")) == kind and bool(c.get("estimated")) == estimated:
                            off = 0.0 if len(group) == 1 else 0.3 * (j / (len(group) - 1) - 0.5)
                            xs.append(r * 2**off)
                            ys.append(float(c["exposure"]))
                if xs:
                    colour = _COLOURS[i % len(_COLOURS)]
                    ax.scatter(
                        xs,
                        ys,
                        s=28,
                        edgecolors=colour,
                        facecolors="none" if estimated else colour,
                        label=f"{kind}{' (rank estimated)' if estimated else ''}",
                        zorder=3,
                    )
        reps = [float(b["repeats"]) for b in by]
        mean = [float(b["mean_exposure"]) for b in by if _finite(b.get("mean_exposure"))]
        if mean and len(mean) == len(reps):
            ax.plot(reps, mean, color="black", lw=1.8, marker="s", ms=4, label="mean", zorder=4)
        top = [float(b["max_possible"]) for b in by if _finite(b.get("max_possible"))]
        if top and len(top) == len(reps):
            ax.plot(reps, top, color="#888", ls="--", lw=1, label="maximum possible")
        ticks = sorted(set(reps) | set(groups))
        ax.set_xscale("log", base=2)
        if ticks:
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
            ax.set_xlim(min(ticks) / 1.5, max(ticks) * 1.5)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("times the canary was repeated in the training data")
        ax.set_ylabel("exposure (bits)")
        ax.set_title("Canary exposure vs repetitions")
        ax.legend(loc="best", fontsize=7)

    return _plot(5.2, 4.0, draw)


# ------------------------------------------------------------------------------------ sections


def _label(result: dict[str, Any]) -> str:
    label = _get(result, "model", "label")
    if label:
        return str(label)
    path = _get(result, "model", "path")
    return Path(str(path)).name if path else "model"


def _data_sizes(result: dict[str, Any], which: str) -> str:
    d = _get(result, "data", which) or {}
    return f"{_val(d.get('patients'), 'int')} patients, {_val(d.get('sequences'), 'int')} sequences"


def _header(result: dict[str, Any]) -> list[str]:
    model = _get(result, "model") or {}
    ref = _get(result, "reference_model")
    fp = model.get("fingerprint")
    rows = [
        (
            "Model",
            f"<strong>{_e(_label(result))}</strong> <span class='muted'>"
            f"{_e(model.get('path') or '')}</span>",
        ),
        ("Kind", _e(f"{model.get('kind') or _NULL} ({model.get('class') or 'unknown class'})")),
        ("Training objective", _e(model.get("objective") or "unknown (no train.json)")),
        ("Differential privacy", _dp_cell(model.get("dp"))),
        (
            "Reference model",
            _e(ref.get("label") or ref.get("path")) if isinstance(ref, dict) else "none",
        ),
        ("Members (training data)", _data_sizes(result, "members")),
        ("Non-members (held out)", _data_sizes(result, "non_members")),
        ("Audit date", _e(result.get("created") or _NULL)),
        ("phisieve version", _e(result.get("phisieve_version") or _NULL)),
        ("Model fingerprint", f"<code>{_e(str(fp)[:16])}…</code>" if fp else _NULL),
    ]
    out = [
        f"<h1>Privacy audit: {_e(_label(result))}</h1>",
        '<p class="lead">What a model trained on patients\' notes reveals about them: their '
        "identifiers, whether they were in the training data, and inserted secrets.</p>",
        _table(["", ""], [(f"<th>{k}</th>", v) for k, v in rows], "meta").replace(
            "<thead><tr><th></th><th></th></tr></thead>", ""
        ),
    ]
    if any("text" in r for r in _get(result, "identifiers", "top_recovered") or ()):
        out.insert(
            1,
            '<p class="warning">This report contains patient identifiers (the audit ran with '
            "--show-identifiers): handle it as protected health information.</p>",
        )
    return out


def _dp_cell(dp: Any) -> str:
    """The model's (ε, δ) per patient, with its unit and accountant, in words."""
    if not isinstance(dp, dict):
        return "none: not trained with DP-SGD (no bound on membership)"
    eps, delta = dp.get("epsilon"), dp.get("delta")
    if not _finite(eps):
        return _e(f"DP-SGD without a patient's ε ({dp.get('patient_epsilon_by') or 'no noise'})")
    return (
        f"<strong>ε = {_val(eps, 'num', 3)}</strong> per patient at δ = {_val(delta, 'sig', 2)} "
        f"<span class='why'>({_e(dp.get('patient_epsilon_by') or '')}; "
        f"{_e(dp.get('accountant') or '')}, {_e(dp.get('accountant_version') or '')}; "
        f"σ = {_val(dp.get('noise_multiplier'), 'sig', 3)}, {_val(dp.get('steps'), 'int')} "
        f"steps, sampling rate {_val(dp.get('sample_rate'), 'sig', 3)} over "
        f"{_val(dp.get('patients'), 'int')} patients)</span>"
    )


def _dp_checks(items: list[tuple[str, dict[str, Any]]], dp: Any) -> list[str]:
    """Beside each patient-level attack, the TPR (ε, δ) allows at the FPR it reached."""
    rows = []
    for name, r in items:
        for c in r.get("dp_check") or ():
            cap = c.get("tpr_bound")
            verdict = (
                "<strong>above the cap</strong>"
                if c.get("exceeds")
                else ("within" if _finite(cap) else _null("no ε"))
            )
            rows.append(
                (
                    _e(name),
                    _num_td(_with_ci(c.get("fpr"), c.get("fpr_ci"), "pct", 1)),
                    _num_td(_with_ci(c.get("tpr"), c.get("tpr_ci"), "pct", 1)),
                    _num_td(_val(cap, "pct", 1, why="not trained with DP")),
                    verdict,
                )
            )
    if not rows:
        return []
    eps = dp.get("epsilon") if isinstance(dp, dict) else None
    delta = dp.get("delta") if isinstance(dp, dict) else None
    lead = (
        f"The model claims ε = {_val(eps, 'num', 3)} per patient at δ = {_val(delta, 'sig', 2)}: "
        if _finite(eps)
        else "The model claims no ε: "
    )
    return [
        "<h3>Patient level, against the differential-privacy cap</h3>",
        f'<p class="lead">{lead}no attack can then flag more than min(1, e<sup>ε</sup>·FPR '
        "+ δ, 1 − e<sup>−ε</sup>(1 − δ − FPR)) of the members at a false-positive rate FPR. "
        "Each attack at its best operating point within 1%, 5%, 10%, 25% and 50% FPR (as "
        "many of them as the non-members can measure: the most members flagged, then the "
        "fewest non-members), both rates with exact (Clopper–Pearson) 95% intervals; an "
        "attack is above the cap only when its TPR interval lies above the cap at the upper "
        "end of its FPR interval.</p>",
        _table(["Score", "FPR [95% CI]", "TPR [95% CI]", "TPR (ε, δ) allows", "Reading"], rows),
    ]


def _verdict(result: dict[str, Any]) -> list[str]:
    rows = []
    for v in _get(result, "verdict") or ():
        level = str(v.get("level") or "info")
        value = v.get("value")
        cell = _with_ci(value, v.get("ci"), "sig", 3) if _finite(value) else _null("not estimable")
        rows.append(
            (
                _e(v.get("measure") or ""),
                _num_td(cell),
                _e(v.get("reading") or ""),
                f'<td class="level level-{_e(level)}">{_e(_LEVELS.get(level, level))}</td>',
            )
        )
    out = ['<h2 id="verdict">Verdict</h2>']
    if rows:
        out.append(_table(["Measure", "Value [95% CI]", "What it means", "Level"], rows, "verdict"))
    else:
        out.append(_not_run("the audit gave no verdict"))
    return out


def _identifiers(result: dict[str, Any]) -> list[str]:
    ids = _get(result, "identifiers")
    out = ['<h2 id="identifiers">Identifier prediction</h2>']
    if not isinstance(ids, dict):
        return [*out, _not_run("the audit holds no identifier predictions")]
    out.append(
        '<p class="lead">Each identifier word is hidden and the model asked to predict it. '
        "Privacy = share of identifiers the model does <em>not</em> guess first; compare "
        "members (seen in training) with non-members (never seen).</p>"
    )
    names = {
        "overall": "all identifiers",
        "direct": "direct (names, numbers…)",
        "indirect": "indirect (rare terms)",
        "alpha": "words (names, places)",
        "numeric": "numbers",
    }
    rows = []
    for who, title in (("members", "Members"), ("non_members", "Non-members")):
        for i, g in enumerate(_GROUPS):
            d = _get(ids, who, g) or {}
            first = f'<th rowspan="{len(_GROUPS)}">{title}</th>' if i == 0 else None
            row = [] if first is None else [first]
            row += [
                _e(names[g]),
                _num_td(_val(d.get("n"), "int")),
                _num_td(_val(d.get("top1"), "pct", 1)),
                _num_td(_val(d.get("top5"), "pct", 1)),
                _num_td(f"<strong>{_val(d.get('privacy'), 'pct', 1)}</strong>"),
                _num_td(_val(d.get("mean_nll"), "num", 2)),
                _num_td(_val(d.get("median_rank"), "sig", 4)),
            ]
            rows.append(row)
    out.append(
        _table(
            ["", "Identifiers", "n", "Top-1", "Top-5", "Privacy", "Mean NLL (nats)", "Median rank"],
            rows,
        )
    )
    occ = _get(ids, "occurrences")
    if isinstance(occ, dict):
        parts = [
            f"{label}: {_val(_get(occ, who, 'scored'), 'int')} scored of "
            f"{_val(_get(occ, who, 'all'), 'int')}"
            for who, label in (("members", "members"), ("non_members", "non-members"))
        ]
        out.append(
            f'<p class="note">Identifier occurrences ({"; ".join(parts)}); a sample is drawn '
            "by keyed hash when there are more than the audit's cap.</p>"
        )
    u = _get(ids, "utility")
    out.append("<h3>Utility (non-identifier words)</h3>")
    if isinstance(u, dict):
        out.append(
            _table(
                ["Words", "Top-1", "Top-5", "Perplexity"],
                [
                    (
                        _num_td(_val(u.get("words"), "int")),
                        _num_td(_val(u.get("top1"), "pct", 1)),
                        _num_td(_val(u.get("top5"), "pct", 1)),
                        _num_td(_val(u.get("perplexity"), "num", 2)),
                    )
                ],
            )
        )
    else:
        out.append(_not_run("no utility measured"))
    return out


def _memorisation(result: dict[str, Any]) -> list[str]:
    mem = _get(result, "memorisation")
    out = ['<h2 id="memorisation">Graded memorisation</h2>']
    if not isinstance(mem, dict):
        return [*out, _not_run("the audit holds no memorisation measures")]
    out.append(
        '<p class="lead">How much easier members\' identifiers are for the model than '
        "non-members' (in nats; positive = learnt), even when it never guesses them first. "
        "The gain is calibrated on a reference model; the gap is not.</p>"
    )
    no_ref = _get(result, "reference_model") is None
    rows = []
    for key, title in (
        ("all", "all identifiers"),
        ("alpha", "names and places"),
        ("numeric", "numbers"),
    ):
        m = mem.get(key) or {}
        why = m.get("why")
        gain_why = "needs --reference-model" if no_ref else (why or "not estimable")
        rows.append(
            (
                _e(title),
                _num_td(_with_ci(m.get("gain"), m.get("gain_ci"), "num", 3, gain_why)),
                _num_td(_with_ci(m.get("gap"), m.get("gap_ci"), "num", 3, why or "not estimable")),
                _num_td(_val(m.get("member_patients"), "int")),
                _num_td(_val(m.get("non_member_patients"), "int")),
            )
        )
    out.append(
        _table(
            [
                "Identifiers",
                "Gain [95% CI] (calibrated)",
                "Gap [95% CI] (uncalibrated)",
                "Member patients",
                "Non-member patients",
            ],
            rows,
        )
    )
    return out


def _tpr_cell(entry: dict[str, Any] | None) -> str:
    if not isinstance(entry, dict):
        return _null()
    neg = entry.get("negatives")
    n = f"{_fmt(neg, 'int')} negatives" if _finite(neg) else "negatives unknown"
    if entry.get("estimable") is False or not _finite(entry.get("tpr")):
        return f"not estimable ({_e(n)})"
    return f"{_val(entry['tpr'], 'pct', 1)} <span class='why'>({_e(n)})</span>"


def _tpr_at(r: dict[str, Any], fpr: float) -> dict[str, Any] | None:
    for entry in r.get("tpr_at_fpr") or ():
        if _finite(entry.get("fpr")) and abs(float(entry["fpr"]) - fpr) < 1e-12:
            return entry
    return None


def _score_items(level: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(level, dict):
        return []
    known = [k for k in _SCORES if k in level] + sorted(k for k in level if k not in _SCORES)
    return [(_SCORES.get(k, k), level[k]) for k in known if isinstance(level[k], dict)]


def _membership(result: dict[str, Any]) -> list[str]:
    mia = _get(result, "membership")
    out = ['<h2 id="membership">Membership inference</h2>']
    if not isinstance(mia, dict):
        return [*out, _not_run("the audit holds no membership inference")]
    out.append(
        '<p class="lead">Can an attacker tell whether a sequence (or a patient\'s notes) was in '
        "the training data? AUC 0.5 = no better than chance. What matters most is the share of "
        "members caught while very few non-members are wrongly flagged (TPR at low FPR). "
        "Privacy-preserving objectives withhold identifiers, not membership.</p>"
    )
    figures = []
    for level, title in (("sample", "Sequence level"), ("patient", "Patient level")):
        items = _score_items(mia.get(level))
        out.append(f"<h3>{title}</h3>")
        if not items:
            out.append(_not_run(f"no {level}-level scores"))
            continue
        rows = []
        for name, r in items:
            pl = r.get("pl") or {}
            pl_cell = _val(pl.get("pl"), "num", 3)
            if _finite(pl.get("pl")):
                pl_cell += (
                    f" <span class='why'>(TPR {_val(pl.get('tpr'), 'pct', 1)}, "
                    f"FPR {_val(pl.get('fpr'), 'pct', 1)})</span>"
                )
            rows.append(
                (
                    _e(name),
                    _num_td(_with_ci(r.get("auc"), r.get("auc_ci"), "num", 3)),
                    _num_td(_tpr_cell(_tpr_at(r, 0.01))),
                    _num_td(_tpr_cell(_tpr_at(r, 0.001))),
                    _num_td(pl_cell),
                    _num_td(_val(r.get("members"), "int")),
                    _num_td(_val(r.get("non_members"), "int")),
                )
            )
        out.append(
            _table(
                [
                    "Score",
                    "AUC [95% CI]",
                    "TPR at 1% FPR",
                    "TPR at 0.1% FPR",
                    "Leakage PL = TPR − FPR",
                    "Members",
                    "Non-members",
                ],
                rows,
            )
        )
        figures.append(
            _figure(
                _roc_plot(f"ROC, {title.lower()}", items),
                f"ROC curves of the {level}-level membership scores on log-log axes",
                f"{title}: ROC curves on log-log axes (a zero rate is drawn at half a "
                "sample); dotted lines at 1% and 0.1% FPR.",
            )
        )
    if figures:
        out.append(f'<div class="figs">{"".join(figures)}</div>')
    out += _dp_checks(_score_items(mia.get("patient")), _get(result, "model", "dp"))
    cdf = _cdf_plot(_score_items(mia.get("patient")))
    if cdf is not None:
        out.append("<h3>Per-patient scores: members vs non-members</h3>")
        out.append(
            _figure(
                cdf,
                "Cumulative distributions of per-patient membership scores",
                "Cumulative share of patients by score: the further the red curve (members) "
                "lies right of the blue one (non-members), the easier membership is to infer.",
            )
        )
    return out


def _identifier_mia(result: dict[str, Any]) -> list[str]:
    d = _get(result, "identifier_mia")
    out = ['<h2 id="identifier-mia">Identifier membership inference</h2>']
    if not isinstance(d, dict):
        return [*out, _not_run("the audit holds no identifier membership inference")]
    out.append(
        '<p class="lead">A low-cost attack: a patient is called a member when the model '
        "predicts any of their indirect identifiers.</p>"
    )
    out.append(
        _table(
            ["Precision", "Recall", "F1", "True pos.", "False pos.", "False neg.", "True neg."],
            [
                [_num_td(_val(d.get(k), "pct", 1)) for k in ("precision", "recall", "f1")]
                + [_num_td(_val(d.get(k), "int")) for k in ("tp", "fp", "fn", "tn")]
            ],
        )
    )
    return out


def _generation(result: dict[str, Any]) -> list[str]:
    g = _get(result, "generation")
    out = ['<h2 id="generation">Free generation</h2>']
    if not isinstance(g, dict):
        kind = _get(result, "model", "kind")
        why = (
            "free generation applies to causal language models only (this model is masked)"
            if kind == "masked"
            else "the audit did not generate text"
        )
        return [*out, _not_run(why)]
    out.append(
        '<p class="lead">The model writes freely from prompts; the output is scanned for '
        "identifiers of the training patients.</p>"
    )
    keys = (
        ("prompts", "Prompts"),
        ("tokens", "Tokens generated"),
        ("identifier_hits", "Identifiers generated"),
        ("own_patient_hits", "…of the prompt's own patient"),
        ("distinct_identifiers", "Distinct identifiers"),
    )
    out.append(_table([t for _, t in keys], [[_num_td(_val(g.get(k), "int")) for k, _ in keys]]))
    return out


def _inversion(result: dict[str, Any]) -> list[str]:
    inv = _get(result, "inversion")
    out = ['<h2 id="inversion">Model inversion (full names)</h2>']
    if not isinstance(inv, dict):
        kind = _get(result, "model", "kind")
        why = (
            "model inversion ranks names in masked slots, it applies to masked models only"
            if kind == "causal"
            else "the audit did not run model inversion"
        )
        return [*out, _not_run(why)]
    if not any(_finite(_get(inv, "model", k)) for k in _TOPK):
        return [*out, _not_run(str(inv.get("why") or "no name slot could be scored"))]
    out.append(
        '<p class="lead">For each masked full-name slot, every first × last name candidate is '
        "ranked by the model. A model that beats the popular-name baseline has learnt which "
        "patients' names go together.</p>"
    )
    first, last = _get(inv, "candidates", "first"), _get(inv, "candidates", "last")
    out.append(
        f"<p>{_val(inv.get('slots'), 'int')} name slots, {_val(inv.get('in_candidates'), 'int')} "
        f"with the true name among the candidates ({_val(first, 'int')} first names × "
        f"{_val(last, 'int')} last names).</p>"
    )
    heads = ["", "Top-1", "Top-10", "Top-100", "Top-1000"]
    rows = [
        [_e(title)] + [_num_td(_val(_get(inv, who, k), "pct", 1)) for k in _TOPK]
        for who, title in (("model", "Model"), ("baseline", "Popular-name baseline"))
    ]
    out.append(_table(heads, rows))
    if inv.get("why"):
        out.append(f'<p class="why">{_e(inv["why"])}</p>')
    out.append(
        _figure(
            _inversion_plot(inv),
            "Bar chart of names recovered by the model and by the baseline",
            "Share of name slots whose true full name is within the top k candidates.",
        )
    )
    return out


def _one_run(result: dict[str, Any]) -> list[str]:
    one = _get(result, "canaries", "one_run")
    out = ['<h3 id="one-run">A lower bound on ε from this training run</h3>']
    if not isinstance(one, dict) or not _finite(one.get("epsilon_lower")):
        why = one.get("why") if isinstance(one, dict) else None
        return [*out, _not_run(why or "no canary patients planted by a coin")]
    dp = _get(result, "model", "dp") or {}
    eps = dp.get("epsilon")
    claim = (
        f"The accountant's ε is {_val(eps, 'num', 3)}: a lower bound above it would contradict "
        "the guarantee."
        if _finite(eps)
        else "The model claims no ε: the bound says how much privacy it certainly lacks."
    )
    out.append(
        f'<p class="lead">{_val(one.get("canaries"), "int")} canary patients were each planted '
        f"in the training data by a keyed coin ({_val(one.get('planted'), 'int')} planted). "
        "Ranked by the model's score, the highest are guessed planted and the lowest left out; "
        "if the training were (ε, δ)-DP, this many correct guesses would be unlikely for ε "
        "below the bound (Steinke, Nasr &amp; Jagielski 2023; each number of guesses tried at "
        f"a Bonferroni-corrected level). Score: {_e(one.get('score') or '')}; δ = "
        f"{_val(one.get('delta') or 0.0, 'sig', 2)}. {claim}</p>"
    )
    rows = [
        (
            _num_td(_val(t.get("guesses"), "int")),
            _num_td(_val(t.get("correct"), "int")),
            _num_td(_val(t.get("epsilon"), "num", 3)),
        )
        for t in one.get("tries") or ()
    ]
    out.append(
        f"<p>Lower bound on ε at {_val(one.get('confidence'), 'pct', 0)} confidence: "
        f"<strong>{_val(one.get('epsilon_lower'), 'num', 3)}</strong></p>"
    )
    out.append(_table(["Guesses", "Correct", "ε lower bound"], rows))
    return out


def _canaries(result: dict[str, Any]) -> list[str]:
    can = _get(result, "canaries")
    out = ['<h2 id="canaries">Canary exposure</h2>']
    if not isinstance(can, dict):
        return [*out, _not_run("no canaries were inserted in the training data")]
    if not can.get("canaries"):
        return [*out, "<p>No canary was planted in patients' notes.</p>", *_one_run(result)]
    out.append(
        '<p class="lead">Random dummy secrets (canaries) were inserted in the training data, '
        "some repeated. Exposure (bits) says how far above the other possible secrets the model "
        "ranks the true one: 0 = no memorisation; the maximum = the secret is the model's first "
        "choice.</p>"
    )
    rows = [
        (
            _num_td(_val(b.get("repeats"), "int")),
            _num_td(_val(b.get("n"), "int")),
            _num_td(_val(b.get("mean_exposure"), "num", 1)),
            _num_td(_val(b.get("max_exposure"), "num", 1)),
            _num_td(_val(b.get("max_possible"), "num", 1)),
        )
        for b in can.get("by_repeats") or ()
    ]
    out.append(
        _table(["Repetitions", "Canaries", "Mean exposure", "Max exposure", "Max possible"], rows)
    )
    out.append(
        _figure(
            _canary_plot(can),
            "Scatter plot of canary exposure against repetitions",
            "Each canary (hollow: rank estimated from a sample of candidates), the mean per "
            "repetition count, and the maximum possible exposure.",
        )
    )
    items = can.get("canaries") or []
    if items:
        rows = [
            (
                f"<code>{_e(c.get('id'))}</code>",
                _e(c.get("kind")),
                _num_td(_val(c.get("repeats"), "int")),
                _num_td(_val(c.get("space"), "sig", 3)),
                _num_td(_val(c.get("rank"), "sig", 4)),
                _num_td(_val(c.get("exposure"), "num", 2)),
                "estimated" if c.get("estimated") else "exact",
            )
            for c in items
        ]
        out.append(
            f"<details><summary>All {len(items)} canaries</summary>"
            + _table(["Canary", "Kind", "Repetitions", "Space", "Rank", "Exposure", "Rank"], rows)
            + "</details>"
        )
    return out + _one_run(result)


def _top_recovered(result: dict[str, Any]) -> list[str]:
    top = _get(result, "identifiers", "top_recovered")
    out = ['<h2 id="recovered">Identifiers the model recovers most</h2>']
    if not isinstance(top, list):
        return [*out, _not_run("the audit holds no recovered identifiers")]
    if not top:
        return [*out, "<p>No identifier was the model's first guess.</p>"]
    show = any("text" in t for t in top)
    heads = ["Category", "Length (characters)", "Occurrences", "Patients"]
    rows = []
    for t in top:
        row = [
            _e(t.get("category") or _NULL),
            _num_td(_val(t.get("length"), "int")),
            _num_td(_val(t.get("occurrences"), "int")),
            _num_td(_val(t.get("patients"), "int")),
        ]
        if show:
            row.append(_e(t["text"]) if "text" in t else _null())
        rows.append(row)
    if not show:
        out.append(
            '<p class="muted">Identifier texts are not shown: rerun the audit with '
            "--show-identifiers to see them (the report then holds patient identifiers).</p>"
        )
    out.append(_table([*heads, "Identifier"] if show else heads, rows))
    return out


def _notes(result: dict[str, Any]) -> list[str]:
    notes = [n for n in _get(result, "notes") or () if n]
    out = ['<h2 id="notes">Caveats</h2>']
    if not notes:
        return [*out, '<p class="muted">None.</p>']
    return [*out, '<ul class="notes">' + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>"]


def _details(result: dict[str, Any]) -> list[str]:
    blocks = []
    for key, title in (("config", "Options of the run"), ("versions", "Software versions")):
        value = _get(result, key)
        if value is not None:
            text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
            blocks.append(f"<details><summary>{title}</summary><pre>{_e(text)}</pre></details>")
    return ['<h2 id="run">Run details</h2>', *blocks] if blocks else []


_NAV = (
    ("verdict", "Verdict"),
    ("notes", "Caveats"),
    ("identifiers", "Identifiers"),
    ("memorisation", "Memorisation"),
    ("membership", "Membership"),
    ("identifier-mia", "Identifier MIA"),
    ("generation", "Generation"),
    ("inversion", "Inversion"),
    ("canaries", "Canaries"),
    ("recovered", "Recovered"),
    ("run", "Run details"),
)


def render_report(result: dict[str, Any], out: Path) -> Path:
    """Write the audit's HTML page, ``out/index.html``.

    Parameters
    ----------
    result
        An ``audit.json`` dict (schema ``phisieve-audit/1``). Nulls render as "—" with their
        ``why``; a null section says "not run" and why.
    out
        The report folder (created when missing); ``index.html`` in it is replaced.

    Returns
    -------
    Path
        The page written: one self-contained file (inline CSS, PNG plots as data URIs, no
        script, no external address). The same dict always gives the same bytes.
    """
    if not isinstance(result, dict):
        raise InputError("an audit result must be a JSON object")
    nav = "<nav>" + "".join(f'<a href="#{k}">{t}</a>' for k, t in _NAV) + "</nav>"
    body = [
        *_header(result),
        nav,
        *_verdict(result),
        *_notes(result),
        *_identifiers(result),
        *_memorisation(result),
        *_membership(result),
        *_identifier_mia(result),
        *_generation(result),
        *_inversion(result),
        *_canaries(result),
        *_top_recovered(result),
        *_details(result),
    ]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "index.html"
    path.write_text(_page(f"Privacy audit: {_label(result)}", body), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------- compare


def _load(path: Path) -> dict[str, Any]:
    path = Path(path)
    file = path / "audit.json" if path.is_dir() else path
    if not file.is_file():
        raise InputError("no audit.json in this report folder", path=path)
    try:
        result = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read the audit ({type(exc).__name__})", path=file) from None
    if not isinstance(result, dict) or result.get("schema") != SCHEMA:
        raise InputError(f"not a phisieve audit (the schema is not {SCHEMA!r})", path=file)
    return result


def _mean_exposure(result: dict[str, Any]) -> float | None:
    values = [c.get("exposure") for c in _get(result, "canaries", "canaries") or ()]
    values = [float(v) for v in values if _finite(v)]
    return sum(values) / len(values) if values else None


def _summary(result: dict[str, Any], path: Path) -> dict[str, Any]:
    """The numbers of the comparison table (``compare.json``), ``None`` where absent."""
    loss = _get(result, "membership", "patient", "loss") or {}
    tpr = _tpr_at(loss, 0.01) if loss else None

    def num(*keys: str | int) -> float | None:
        v = _get(result, *keys)
        return float(v) if _finite(v) else None

    def ci(*keys: str) -> list[float] | None:
        v = _get(result, *keys)
        ok = isinstance(v, list) and len(v) == 2 and all(_finite(c) for c in v)
        return [float(c) for c in v] if ok else None

    return {
        "path": str(path),
        "label": _label(result),
        "kind": _get(result, "model", "kind"),
        "objective": _get(result, "model", "objective"),
        "created": result.get("created"),
        "privacy_overall": num("identifiers", "members", "overall", "privacy"),
        "privacy_direct": num("identifiers", "members", "direct", "privacy"),
        "privacy_indirect": num("identifiers", "members", "indirect", "privacy"),
        "utility_top1": num("identifiers", "utility", "top1"),
        "perplexity": num("identifiers", "utility", "perplexity"),
        "gain_alpha": num("memorisation", "alpha", "gain"),
        "gain_alpha_why": _get(result, "memorisation", "alpha", "why"),
        "gain_alpha_ci": ci("memorisation", "alpha", "gain_ci"),
        "gain_numeric": num("memorisation", "numeric", "gain"),
        "gain_numeric_why": _get(result, "memorisation", "numeric", "why"),
        "gain_numeric_ci": ci("memorisation", "numeric", "gain_ci"),
        "gap_alpha": num("memorisation", "alpha", "gap"),
        "gap_alpha_ci": ci("memorisation", "alpha", "gap_ci"),
        "patient_loss_auc": float(loss["auc"]) if _finite(loss.get("auc")) else None,
        "patient_loss_auc_ci": ci("membership", "patient", "loss", "auc_ci"),
        "patient_calibrated_auc": num("membership", "patient", "reference", "auc"),
        "patient_calibrated_auc_ci": ci("membership", "patient", "reference", "auc_ci"),
        "dp_unit": _get(result, "model", "dp", "unit"),
        "dp_epsilon": num("model", "dp", "epsilon"),
        "dp_delta": num("model", "dp", "delta"),
        "epsilon_lower": num("canaries", "one_run", "epsilon_lower"),
        "epsilon_lower_why": _get(result, "canaries", "one_run", "why"),
        "patient_loss_tpr_at_1pct_fpr": (
            float(tpr["tpr"])
            if tpr and tpr.get("estimable") is not False and _finite(tpr.get("tpr"))
            else None
        ),
        "patient_loss_tpr_negatives": int(tpr["negatives"])
        if tpr and _finite(tpr.get("negatives"))
        else None,
        "identifier_mia_recall": num("identifier_mia", "recall"),
        "identifier_mia_precision": num("identifier_mia", "precision"),
        "inversion_top100": num("inversion", "model", "top100"),
        "inversion_baseline_top100": num("inversion", "baseline", "top100"),
        "canary_mean_exposure": _mean_exposure(result),
        "reference_model": _get(result, "reference_model") is not None,
        "member_patients": num("data", "members", "patients"),
        "non_member_patients": num("data", "non_members", "patients"),
    }


def _privacy_utility_plot(models: list[dict[str, Any]]) -> str | None:
    pts = [
        (m["label"], m["utility_top1"], m["privacy_overall"])
        for m in models
        if m["utility_top1"] is not None and m["privacy_overall"] is not None
    ]
    if not pts:
        return None

    def draw(fig: Any) -> None:
        ax = fig.add_subplot()
        for i, (label, x, y) in enumerate(pts):
            ax.scatter([100 * x], [100 * y], s=50, color=_COLOURS[i % len(_COLOURS)], zorder=3)
            ax.annotate(label, (100 * x, 100 * y), textcoords="offset points", xytext=(6, 4))
        xs, ys = [100 * p[1] for p in pts], [100 * p[2] for p in pts]
        pad_x = max(2.0, (max(xs) - min(xs)) * 0.25)
        pad_y = max(2.0, (max(ys) - min(ys)) * 0.25)
        ax.set_xlim(min(xs) - pad_x, max(xs) + pad_x)
        ax.set_ylim(min(ys) - pad_y, min(100.5, max(ys) + pad_y))
        ax.set_xlabel("utility: top-1 accuracy on non-identifier words (%)")
        ax.set_ylabel("privacy: members' identifiers not guessed first (%)")
        ax.set_title("Privacy vs utility (up and right is better)")

    return _plot(5.2, 4.2, draw)


def _compare_exposure_plot(results: list[dict[str, Any]], labels: list[str]) -> str | None:
    lines = []
    for label, r in zip(labels, results, strict=True):
        by = sorted(
            (
                b
                for b in _get(r, "canaries", "by_repeats") or ()
                if _finite(b.get("repeats"))
                and b["repeats"] > 0
                and _finite(b.get("mean_exposure"))
            ),
            key=lambda b: b["repeats"],
        )
        if by:
            lines.append((label, by))
    if not lines:
        return None

    def draw(fig: Any) -> None:
        ax = fig.add_subplot()
        ticks: set[float] = set()
        for i, (label, by) in enumerate(lines):
            reps = [float(b["repeats"]) for b in by]
            ticks |= set(reps)
            colour = _COLOURS[i % len(_COLOURS)]
            ax.plot(
                reps,
                [float(b["mean_exposure"]) for b in by],
                marker="o",
                color=colour,
                label=f"{label} (mean)",
            )
            mx = [b.get("max_exposure") for b in by]
            if all(_finite(v) for v in mx):
                ax.plot(reps, [float(v) for v in mx], ls=":", color=colour, label=f"{label} (max)")
        tops = [
            float(b["max_possible"])
            for _, by in lines
            for b in by
            if _finite(b.get("max_possible"))
        ]
        if tops:
            ax.axhline(max(tops), color="#888", ls="--", lw=1, label="maximum possible")
        ax.set_xscale("log", base=2)
        t = sorted(ticks)
        ax.set_xticks(t, [f"{v:g}" for v in t])
        ax.set_xlim(min(t) / 1.5, max(t) * 1.5)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("times the canary was repeated")
        ax.set_ylabel("exposure (bits)")
        ax.set_title("Canary exposure vs repetitions")
        ax.legend(loc="best", fontsize=7)

    return _plot(5.2, 4.2, draw)


def _compare_memorisation_plot(models: list[dict[str, Any]]) -> str | None:
    rows = []
    for m in models:
        for key, name in (("gain_alpha", "gain"), ("gap_alpha", "gap")):
            if m[key] is not None:
                rows.append((m["label"], name, m[key], m[key + "_ci"]))
    if not rows:
        return None

    def draw(fig: Any) -> None:
        ax = fig.add_subplot()
        labels = list(dict.fromkeys(r[0] for r in rows))
        for label, name, v, ci in rows:
            y = labels.index(label) + (-0.12 if name == "gain" else 0.12)
            err = [[v - ci[0]], [ci[1] - v]] if ci else None
            colour = _MEMBER if name == "gain" else "#555555"
            ax.errorbar([v], [y], xerr=err, fmt="o", color=colour, capsize=3)
        ax.scatter([], [], color=_MEMBER, label="gain (calibrated)")
        ax.scatter([], [], color="#555555", label="gap (uncalibrated)")
        ax.axvline(0, color="#888", lw=1)
        ax.set_yticks(range(len(labels)), labels)
        ax.set_ylim(-0.6, len(labels) - 0.4)
        ax.invert_yaxis()
        ax.set_xlabel("nats (positive = members' names and places easier)")
        ax.set_title("Memorisation of names and places [95% CI]")
        ax.legend(loc="best")

    return _plot(5.2, 1.6 + 0.55 * len({r[0] for r in rows}), draw)


def _compare_roc_plot(results: list[dict[str, Any]], labels: list[str]) -> str | None:
    items = [
        (label, r["membership"]["patient"]["loss"])
        for label, r in zip(labels, results, strict=True)
        if isinstance(_get(r, "membership", "patient", "loss"), dict)
    ]
    return _roc_plot("Patient-level ROC, loss score", items)


def _unique_labels(results: list[dict[str, Any]]) -> list[str]:
    labels, seen = [], {}
    for r in results:
        label = _label(r)
        seen[label] = seen.get(label, 0) + 1
        labels.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return labels


def compare_reports(reports: list[Path], out: Path) -> Path:
    """Put several audits side by side: ``out/index.html`` and ``out/compare.json``.

    Parameters
    ----------
    reports
        Report folders holding ``audit.json``, or ``audit.json`` files, one a model.
    out
        The folder to write (created when missing); its ``index.html`` and ``compare.json``
        are replaced.

    Returns
    -------
    Path
        The page written (self-contained, like :func:`render_report`'s).

    Raises
    ------
    InputError
        A folder without ``audit.json``, or a file that is not a ``phisieve-audit/1`` audit
        (the message names it).
    """
    paths = [Path(p) for p in reports]
    if not paths:
        raise InputError("compare needs at least one report")
    results = [_load(p) for p in paths]
    labels = _unique_labels(results)
    models = [
        {**_summary(r, p), "label": lab} for r, p, lab in zip(results, paths, labels, strict=True)
    ]

    def pct(key: str) -> Callable[[dict[str, Any]], str]:
        return lambda m: _val(m[key], "pct", 1)

    def num(key: str, digits: int) -> Callable[[dict[str, Any]], str]:
        return lambda m: _val(m[key], "num", digits)

    def gain(key: str) -> Callable[[dict[str, Any]], str]:
        def cell(m: dict[str, Any]) -> str:
            why = m[key + "_why"] if m["reference_model"] else "needs --reference-model"
            return _with_ci(m[key], m[key + "_ci"], "num", 3, why or "not estimable")

        return cell

    def auc(m: dict[str, Any]) -> str:
        return _with_ci(m["patient_loss_auc"], m["patient_loss_auc_ci"], "num", 3)

    def calibrated(m: dict[str, Any]) -> str:
        why = None if m["reference_model"] else "needs --reference-model"
        return _with_ci(m["patient_calibrated_auc"], m["patient_calibrated_auc_ci"], "num", 3, why)

    def dp(m: dict[str, Any]) -> str:
        if m["dp_unit"] is None:
            return "none"
        if m["dp_epsilon"] is None:
            return "no finite ε"
        return _e(f"{_fmt(m['dp_epsilon'], 'num', 2)} (δ = {_fmt(m['dp_delta'], 'sig', 2)})")

    def lower(m: dict[str, Any]) -> str:
        return _val(m["epsilon_lower"], "num", 2, m["epsilon_lower_why"] or "needs --canaries")

    def patients(m: dict[str, Any]) -> str:
        return f"{_val(m['member_patients'], 'int')} / {_val(m['non_member_patients'], 'int')}"

    def tpr(m: dict[str, Any]) -> str:
        neg = m["patient_loss_tpr_negatives"]
        n = f"({_fmt(neg, 'int')} negatives)" if neg is not None else ""
        if m["patient_loss_tpr_at_1pct_fpr"] is None:
            return _e(f"not estimable {n}".strip())
        return (
            f"{_val(m['patient_loss_tpr_at_1pct_fpr'], 'pct', 1)} <span class='why'>{_e(n)}</span>"
        )

    rows_spec: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("Objective", lambda m: _e(m["objective"] or "unknown")),
        ("Kind", lambda m: _e(m["kind"] or _NULL)),
        ("Privacy, all identifiers", pct("privacy_overall")),
        ("Privacy, direct identifiers", pct("privacy_direct")),
        ("Privacy, indirect identifiers", pct("privacy_indirect")),
        ("Utility: top-1 on other words", pct("utility_top1")),
        ("Perplexity", num("perplexity", 2)),
        ("Memorisation gain, names/places (nats)", gain("gain_alpha")),
        ("Memorisation gain, numbers (nats)", gain("gain_numeric")),
        ("Patient membership AUC (loss)", auc),
        ("Patients found at 1% FPR (loss)", tpr),
        ("Patient membership AUC (calibrated)", calibrated),
        ("DP-SGD: ε per patient", dp),
        ("ε lower bound per patient, one run (95%)", lower),
        ("Identifier MIA recall", pct("identifier_mia_recall")),
        ("Identifier MIA precision", pct("identifier_mia_precision")),
        ("Inversion top-100 (model)", pct("inversion_top100")),
        ("Inversion top-100 (baseline)", pct("inversion_baseline_top100")),
        ("Mean canary exposure (bits)", num("canary_mean_exposure", 2)),
        ("Patients: members / non-members", patients),
        ("Audit date", lambda m: _e(m["created"] or _NULL)),
    ]
    rows = [
        [f"<th>{_e(name)}</th>"] + [_num_td(fn(m)) if i > 1 else fn(m) for m in models]
        for i, (name, fn) in enumerate(rows_spec)
    ]
    figures = [
        _figure(
            _privacy_utility_plot(models),
            "Scatter plot of privacy against utility, one labelled point per model",
            "Each model's privacy (members' identifiers not guessed first) against its "
            "utility (top-1 accuracy on other words).",
        ),
        _figure(
            _compare_exposure_plot(results, labels),
            "Canary exposure against repetitions, one line per model",
            "Mean (solid) and maximum (dotted) canary exposure by repetition count.",
        ),
        _figure(
            _compare_roc_plot(results, labels),
            "Patient-level ROC curves of the loss score, one per model",
            "Patient-level membership inference with the loss score, log-log axes.",
        ),
        _figure(
            _compare_memorisation_plot(models),
            "Memorisation gain and gap per model with confidence intervals",
            "Calibrated gain and uncalibrated gap for names and places, 95% CI.",
        ),
    ]
    body = [
        "<h1>Privacy audits compared</h1>",
        '<p class="lead">The same measures for each model, side by side. Details are in each '
        "model's own report.</p>",
        '<h2 id="table">Side by side</h2>',
        _table(["Measure", *(_e(lab) for lab in labels)], rows),
        '<h2 id="plots">Plots</h2>',
        f'<div class="figs">{"".join(f for f in figures if f)}</div>',
        '<h2 id="sources">Audits</h2>',
        "<ul>"
        + "".join(
            f"<li><strong>{_e(m['label'])}</strong>: <code>{_e(m['path'])}</code></li>"
            for m in models
        )
        + "</ul>",
    ]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(
        json.dumps({"schema": COMPARE_SCHEMA, "models": models}, indent=2, allow_nan=False) + "\n",
        encoding="utf-8",
    )
    path = out / "index.html"
    path.write_text(_page("Privacy audits compared", body), encoding="utf-8")
    return path
