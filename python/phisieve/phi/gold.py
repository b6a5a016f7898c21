"""Gold PHI annotations: PhysioNet's ``id-phi.phrase`` as a ``spans`` table, and gold spans
turned back into MIMIC-III placeholders (the reverse of :mod:`phisieve.phi.surrogate`), so that
real annotated notes can be round-tripped through the surrogate stage (DESIGN.md §7).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from .. import _core
from ..errors import InputError
from ..io.physionet import read_physionet
from ..io.sources import require_columns
from ..pipeline.runner import run_stage
from ..pipeline.stage import SOURCE, Context, Input, Stage

__all__ = [
    "CATEGORY_OF_KIND",
    "PlaceholdersStage",
    "placeholder_text",
    "placeholders",
    "to_placeholders",
]


CATEGORY_OF_KIND = {
    "first_name": "First Name",
    "last_name": "Last Name",
    "full_name": "Name",
    "doctor_first_name": "Doctor First Name",
    "doctor_last_name": "Doctor Last Name",
    "doctor_name": "Attending Info",
    "name_initial": "Name Initial",
    "name_prefix": "Name Prefix (Prefixes)",
    "hospital": "Hospital",
    "ward": "Hospital Ward Name",
    "location": "Location (un)",
    "street_address": "Street Address(1)",
    "company": "Company",
    "country": "Country",
    "email": "E-mail address",
    "state": "State",
    "zip": "State/Zipcode",
    "university": "University/College",
    "url": "URL",
    "phone": "Telephone/Fax (1)",
    "pager": "Pager number",
    "record_number": "Medical Record Number",
    "clip_number": "Clip Number (Radiology)",
    "job_number": "Job Number",
    "serial_number": "Serial Number",
    "md_number": "MD Number",
    "ssn": "Social Security Number",
    "po_box": "PO Box",
    "numeric_id": "Numeric Identifier",
    "unit_number": "Unit Number",
    "provider_number": "Provider Number",
    "month": "Month (only)",
    "year": "Year (4 digits)",
    "month_day": "Month/Day",
    "month_year": "Month/Year",
    "date": "Month/Day/Year",
    "date_range": "Date range (1)",
    "holiday": "Holiday",
    "unknown": "Unknown",
    "empty": "Unknown",
}
"""The MIMIC-III category written for a span labelled with a surrogate kind."""

# Names: (first-name category, last-name category, initial category, a lone word is a first name)
_NAMES = {
    "PTName": ("Known firstname", "Known lastname", "Name Initial (PRE)", False),
    "RelativeProxyName": ("First Name", "Last Name", "Name Initial (NameIs)", True),
    "HCPName": ("First Name (STitle)", "Last Name (STitle)", "Initials (NamePattern4)", False),
}
_FIXED = {
    "Location": "Location (un)",
    "Phone": "Telephone/Fax (1)",
    "Other": "Numeric Identifier",
    "PTNameInitial": "Name Initial (PRE)",
}
_MONTHS = {
    m: i + 1
    for i, names in enumerate(
        ["jan january", "feb february", "mar march", "apr april", "may", "jun june",
         "jul july", "aug august", "sep sept september", "oct october", "nov november",
         "dec december"]
    )
    for m in names.split()
}  # fmt: skip
_RUN_GAP = re.compile(r"[\s.]*")


def _year(text: str) -> int:
    y = int(text)
    if len(text) <= 2:
        return 2000 + y if y <= 30 else 1900 + y
    return y


def _date_placeholder(text: str) -> str | None:
    """A MIMIC bare-date placeholder for a written date, or None when it is not one."""
    t = text.strip().rstrip(".,")
    if m := re.fullmatch(r"(\d{4})-(\d{1,2})-(\d{1,2})", t):
        y, mo, d = int(m[1]), int(m[2]), int(m[3])
    elif m := re.fullmatch(r"(\d{1,2})[/-](\d{1,2})[/-](\d{2}|\d{4})", t):
        y, mo, d = _year(m[3]), int(m[1]), int(m[2])
    elif m := re.fullmatch(r"(\d{1,2})/(\d{1,2})", t):
        mo, d = int(m[1]), int(m[2])
        if 1 <= mo <= 12 and 1 <= d <= 31:
            return f"[**{mo}/{d}**]"
        if 1 <= mo <= 12:
            return f"[**{mo}/{_year(m[2])}**]"
        return None
    elif m := re.fullmatch(r"(\d{1,2})/(\d{4})", t):
        mo = int(m[1])
        return f"[**{mo}/{m[2]}**]" if 1 <= mo <= 12 else None
    elif m := re.fullmatch(r"'?(\d{2}|\d{4})", t):
        return f"[**{_year(m[1])}**]"
    else:
        return None
    return f"[**{y}-{mo}-{d}**]" if 1 <= mo <= 12 and 1 <= d <= 31 else None


def placeholder_text(label: str, text: str, ident: int, role: str | None = None) -> str:
    """The placeholder that hides one gold span.

    Parameters
    ----------
    label
        A PhysioNet category (:data:`PHYSIONET_LABELS`) or a surrogate kind.
    text
        The span's text (read to choose a date form; never copied into the placeholder,
        except the digits of a date, as MIMIC does).
    ident
        The placeholder id: equal for equal (patient, category, text).
    role
        For names: ``first``, ``last`` or ``initial``.
    """
    if label in ("Age", "age_over_90"):
        return "[**Age over 90 **]"
    if label == "empty":
        return "[** **]"
    if label in ("Date", "DateYear", "date", "year", "month_day", "month_year"):
        bare = _date_placeholder(text)
        if bare is not None:
            return bare
        if text.strip().rstrip(".").lower() in _MONTHS:
            return f"[**Month (only) {ident}**]"
        return f"[**{CATEGORY_OF_KIND.get(label, 'Month/Day')} {ident}**]"
    if label in _NAMES:
        first, last, initial, _ = _NAMES[label]
        category = {"first": first, "last": last, "initial": initial}[role or "last"]
        return f"[**{category} {ident}**]"
    if label in _FIXED:
        return f"[**{_FIXED[label]} {ident}**]"
    if label in CATEGORY_OF_KIND:
        return f"[**{CATEGORY_OF_KIND[label]} {ident}**]"
    raise InputError(f"no placeholder category for the span label {label!r}", column="spans")


def _merge(spans: list[dict[str, Any]], length: int, doc: str) -> list[dict[str, Any]]:
    """Sorted spans with overlaps merged (the longer span's label wins)."""
    out: list[dict[str, Any]] = []
    for sp in sorted(spans, key=lambda x: (x["start"], -x["end"])):
        if not 0 <= sp["start"] <= sp["end"] <= length:
            raise InputError(f"span {sp['start']}:{sp['end']} lies outside document {doc!r}")
        if out and sp["start"] < out[-1]["end"]:
            last = out[-1]
            if sp["end"] - sp["start"] > last["end"] - last["start"]:
                last["label"] = sp["label"]
            last["end"] = max(last["end"], sp["end"])
            last["merged"] += 1
            continue
        out.append({**sp, "merged": 0})
    return out


def _roles(text: str, spans: list[dict[str, Any]]) -> list[str | None]:
    """first/last/initial for name spans: in a run of one label's words separated only by
    spaces or periods, the last word is the last name; single letters are initials."""
    roles: list[str | None] = [None] * len(spans)
    i = 0
    while i < len(spans):
        label = spans[i]["label"]
        j = i + 1
        while (
            j < len(spans)
            and spans[j]["label"] == label
            and _RUN_GAP.fullmatch(text[spans[j - 1]["end"] : spans[j]["start"]])
        ):
            j += 1
        if label in _NAMES:
            lone_first = _NAMES[label][3]
            for k in range(i, j):
                word = text[spans[k]["start"] : spans[k]["end"]].strip().rstrip(".")
                if len(word) <= 1:
                    roles[k] = "initial"
                elif k == j - 1 and not (j - i == 1 and lone_first):
                    roles[k] = "last"
                else:
                    roles[k] = "first"
        i = j
    return roles


def to_placeholders(
    documents: pa.Table, gold: pa.Table, *, ids: dict[tuple[str, str, str], int] | None = None
) -> tuple[pa.Table, dict[str, Any]]:
    """Replace every gold span of the documents by a MIMIC-III placeholder.

    Overlapping spans are merged. Within a patient, equal (category, text) get the same
    placeholder id, so the surrogate stage gives them the same surrogate; ids count up per
    patient in the order of the documents.

    Parameters
    ----------
    documents
        ``doc_id``, ``patient_id``, ``text`` (other columns pass through).
    gold
        ``doc_id``, ``spans`` (labels: :data:`PHYSIONET_LABELS` or surrogate kinds).
    ids
        The id table to continue (for a dataset processed batch by batch).

    Returns
    -------
    (pyarrow.Table, dict)
        The documents with placeholders, and counts: ``spans`` read, ``placeholders``
        written, ``merged`` overlaps, ``by_category``, and ``spans_without_document``.
    """
    require_columns(documents.schema, ["doc_id", "patient_id", "text"], "documents")
    require_columns(gold.schema, ["doc_id", "spans"], "spans")
    if "spans" in documents.schema.names:  # offsets of the old text: dropped, not carried
        documents = documents.drop_columns(["spans"])
    ids = {} if ids is None else ids
    gold_by_doc = {
        d: s
        for d, s in zip(
            gold.column("doc_id").to_pylist(), gold.column("spans").to_pylist(), strict=True
        )
        if s
    }
    doc_ids = documents.column("doc_id").to_pylist()
    patients = documents.column("patient_id").to_pylist()
    texts = documents.column("text").to_pylist()
    rows, starts, ends, withs = [], [], [], []
    counts: Counter[str] = Counter()
    for row, (doc, patient, text) in enumerate(zip(doc_ids, patients, texts, strict=True)):
        spans = gold_by_doc.pop(doc, None)
        if not spans or text is None:
            continue
        counts["spans"] += len(spans)
        merged = _merge(spans, len(text), doc)
        counts["merged"] += sum(sp["merged"] for sp in merged)
        for sp, role in zip(merged, _roles(text, merged), strict=True):
            word = text[sp["start"] : sp["end"]]
            key_text = " ".join(word.lower().split())
            category = f"{sp['label']}/{role or ''}"
            key = (patient, category, key_text)
            if key not in ids:
                ids[key] = _next_id(ids, patient)
            ident = ids[key]
            placeholder = placeholder_text(sp["label"], word, ident, role)
            rows.append(row)
            starts.append(sp["start"])
            ends.append(sp["end"])
            withs.append(placeholder)
            counts["placeholders"] += 1
            counts[f"category:{sp['label']}"] += 1
    counts["spans_without_document"] = sum(len(s) for s in gold_by_doc.values())
    new_text, _, _ = _core.splice(
        documents.column("text").combine_chunks(),
        pa.array(rows, pa.uint64()),
        pa.array(starts, pa.int32()),
        pa.array(ends, pa.int32()),
        pa.array(withs, pa.string()),
    )
    idx = documents.schema.get_field_index("text")
    out = documents.set_column(
        idx, documents.schema.field(idx), new_text.cast(documents.schema.field(idx).type)
    )
    report = {k: v for k, v in counts.items() if not k.startswith("category:")}
    report["by_category"] = {
        k.split(":", 1)[1]: v for k, v in sorted(counts.items()) if k.startswith("category:")
    }
    return out, report


def _next_id(ids: dict[tuple[str, str, str], int], patient: str) -> int:
    counter = ("#", patient, "")
    ids[counter] = ids.get(counter, 0) + 1
    return ids[counter]


def placeholders(
    out: str | os.PathLike[str],
    *,
    corpus: str | os.PathLike[str] | None = None,
    docs: Any = None,
    spans: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write a documents dataset whose gold PHI spans are MIMIC-III placeholders (the
    ``placeholders`` stage, :class:`PlaceholdersStage`).

    Either ``corpus`` (a PhysioNet deid folder: ``id.text`` and ``id-phi.phrase``) or
    ``docs`` (a documents dataset or table) with ``spans`` (a spans dataset).

    An existing ``out`` is replaced (atomically) only with ``overwrite``.

    Returns
    -------
    dict
        The manifest (the output's completion marker): rows and the counts of
        :func:`to_placeholders`.
    """
    inputs = {"corpus": corpus, "docs": docs, "spans": spans}
    return run_stage(PlaceholdersStage(), inputs, out, overwrite=overwrite)


@dataclass(frozen=True)
class PlaceholdersOptions:
    """``phisieve placeholders`` has no options."""


class PlaceholdersStage(Stage):
    """``phisieve placeholders``: gold PHI spans become MIMIC-III placeholders (the reverse
    of ``surrogate``). A reduce: placeholder ids are numbered per patient over the whole
    corpus (:func:`to_placeholders`)."""

    name = "placeholders"
    help = "Turn gold PHI spans into MIMIC-III placeholders (the reverse of `surrogate`)."
    Options = PlaceholdersOptions
    inputs = (
        Input("corpus", "PhysioNet deid folder (id.text, id-phi.phrase).", kind=SOURCE,
              required=False),
        Input("docs", "A documents dataset.", required=False),
        Input("spans", "The documents' gold spans.", required=False, columns=("doc_id", "spans")),
    )  # fmt: skip

    def open(self, ctx: Context) -> None:
        if ctx.path("corpus") is None and (
            ctx.values.get("docs") is None or ctx.values.get("spans") is None
        ):
            raise InputError("give a PhysioNet corpus folder, or documents with their spans")

    def reduce(self, ctx: Context) -> tuple[pa.Table, dict[str, Any]]:
        if ctx.path("corpus") is not None:
            documents, gold = read_physionet(ctx.path("corpus"))
        else:
            src = ctx.source("docs")
            documents = src.table()
            gold = ctx.source("spans").table(["doc_id", "spans"])
        return to_placeholders(documents, gold)

    def schema(self, ctx: Context, state: tuple[pa.Table, dict[str, Any]]) -> pa.Schema:
        return state[0].schema

    def batches(self, ctx: Context, state: tuple[pa.Table, dict[str, Any]]) -> Iterator[Any]:
        yield from state[0].to_batches()

    def finish(self, ctx: Context, state: tuple[pa.Table, dict[str, Any]]) -> None:
        ctx.stats.update(state[1])
