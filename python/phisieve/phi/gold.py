"""Gold PHI annotations: PhysioNet's ``id-phi.phrase`` as a ``spans`` table, and gold spans
turned back into MIMIC-III placeholders (the reverse of :mod:`phisieve.phi.surrogate`), so that
real annotated notes can be round-tripped through the surrogate stage (DESIGN.md §7).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from .. import _core
from ..errors import InputError
from ..io.sources import require_columns

__all__ = [
    "CATEGORY_OF_KIND",
    "PlaceholderKey",
    "gold_by_doc",
    "placeholder_ids",
    "placeholder_text",
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


def _merge(spans: list[dict[str, Any]], length: int, doc: Any) -> list[dict[str, Any]]:
    """Sorted spans with overlaps merged (the longer span's label wins; between spans of one
    length, the one sorted first: by start, then end, then label)."""
    out: list[dict[str, Any]] = []
    for sp in sorted(spans, key=lambda x: (x["start"], -x["end"], x["label"] or "")):
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


PlaceholderKey = tuple[Any, str, str]
"""What a placeholder id stands for: (patient, ``label/role``, the span's text lower-cased
with its spacing normalised)."""


@dataclass(frozen=True)
class _Span:
    start: int
    end: int
    label: str
    role: str | None
    category: str
    key_text: str
    merged: int


def _spans_of(text: str, spans: list[dict[str, Any]], doc: Any) -> list[_Span]:
    """A document's gold spans, merged and sorted, with their name roles and id keys."""
    merged = _merge(spans, len(text), doc)
    return [
        _Span(
            sp["start"],
            sp["end"],
            sp["label"],
            role,
            f"{sp['label']}/{role or ''}",
            " ".join(text[sp["start"] : sp["end"]].lower().split()),
            sp["merged"],
        )
        for sp, role in zip(merged, _roles(text, merged), strict=True)
    ]


def gold_by_doc(gold: pa.Table) -> dict[Any, list[dict[str, Any]]]:
    """The gold spans of each document (``doc_id`` -> spans; several rows of one ``doc_id``
    are joined). Documents without spans are left out."""
    require_columns(gold.schema, ["doc_id", "spans"], "spans")
    out: dict[Any, list[dict[str, Any]]] = {}
    for d, s in zip(
        gold.column("doc_id").to_pylist(), gold.column("spans").to_pylist(), strict=True
    ):
        if s and d is not None:
            out.setdefault(d, []).extend(s)
    return out


def placeholder_ids(
    documents: pa.Table, gold: pa.Table | dict[Any, list[dict[str, Any]]]
) -> dict[PlaceholderKey, int]:
    """The placeholder id of every gold span of the documents: a pure function of the rows,
    whatever their order or batching.

    Within a patient, equal (category, text) share one id, so the surrogate stage gives them
    one surrogate; the ids count up from 1 per patient over the patient's documents sorted by
    ``doc_id``, and within a document by position. A patient's ids depend on that patient's
    documents alone (all of them: pass the whole corpus, or a partition that holds every
    document of its patients).

    Parameters
    ----------
    documents
        ``doc_id``, ``patient_id``, ``text``.
    gold
        ``doc_id``, ``spans`` (or :func:`gold_by_doc` of it).

    Raises
    ------
    InputError
        A span outside its document, or a ``doc_id`` with gold spans that names several
        rows (the spans could belong to either).
    """
    require_columns(documents.schema, ["doc_id", "patient_id", "text"], "documents")
    spans = gold if isinstance(gold, dict) else gold_by_doc(gold)
    notes: dict[Any, list[tuple[Any, str]]] = {}
    seen: set[Any] = set()
    for doc, patient, text in zip(
        documents.column("doc_id").to_pylist(),
        documents.column("patient_id").to_pylist(),
        documents.column("text").to_pylist(),
        strict=True,
    ):
        if doc not in spans:
            continue
        if doc in seen:
            raise InputError(
                f"the doc_id {doc!r} has gold spans and names more than one document: gold "
                "spans are matched to documents by doc_id, which must then be unique",
                column="doc_id",
            )
        seen.add(doc)
        if text is not None:
            notes.setdefault(patient, []).append((doc, text))
    ids: dict[PlaceholderKey, int] = {}
    for patient, mine in notes.items():
        n = 0
        for doc, text in sorted(mine, key=lambda dt: dt[0]):
            for sp in _spans_of(text, spans[doc], doc):
                key = (patient, sp.category, sp.key_text)
                if key not in ids:
                    n += 1
                    ids[key] = n
    return ids


def to_placeholders(
    documents: pa.Table | pa.RecordBatch,
    gold: pa.Table | dict[Any, list[dict[str, Any]]],
    *,
    ids: dict[PlaceholderKey, int] | None = None,
) -> tuple[pa.Table, dict[str, Any]]:
    """Replace every gold span of the documents by a MIMIC-III placeholder.

    Overlapping spans are merged. Within a patient, equal (category, text) get the same
    placeholder id, so the surrogate stage gives them the same surrogate; the ids are
    :func:`placeholder_ids` (they count up per patient over the patient's documents in
    ``doc_id`` order), so each row's output is a pure function of that row, its gold spans
    and the id table, never of the rows' order.

    Parameters
    ----------
    documents
        ``doc_id``, ``patient_id``, ``text`` (other columns pass through; a ``spans`` column,
        offsets into the old text, is dropped).
    gold
        ``doc_id``, ``spans`` (labels: :data:`PHYSIONET_LABELS` or surrogate kinds), or
        :func:`gold_by_doc` of it.
    ids
        The id table of the whole corpus (:func:`placeholder_ids`), for a dataset processed
        batch by batch; by default the ids of ``documents`` themselves.

    Returns
    -------
    (pyarrow.Table, dict)
        The documents with placeholders, and counts: ``spans`` read, ``placeholders``
        written, ``merged`` overlaps, ``by_category``, and ``spans_without_document`` (gold
        spans of documents not among ``documents``).

    Raises
    ------
    InputError
        A span outside its document, or (with ``ids``) a span whose key the table lacks.
    """
    if isinstance(documents, pa.RecordBatch):
        documents = pa.Table.from_batches([documents])
    require_columns(documents.schema, ["doc_id", "patient_id", "text"], "documents")
    spans = gold if isinstance(gold, dict) else gold_by_doc(gold)
    if ids is None:
        ids = placeholder_ids(documents, spans)
    out, report = _splice_placeholders(documents, spans, ids)
    present = set(documents.column("doc_id").to_pylist())
    report["spans_without_document"] = sum(len(s) for d, s in spans.items() if d not in present)
    return out, report


def _splice_placeholders(
    documents: pa.Table, spans: dict[Any, list[dict[str, Any]]], ids: dict[PlaceholderKey, int]
) -> tuple[pa.Table, dict[str, Any]]:
    """The documents with their gold spans replaced (ids looked up in ``ids``), and counts:
    ``spans``, ``placeholders``, ``merged``, ``by_category``."""
    if "spans" in documents.schema.names:  # offsets of the old text: dropped, not carried
        documents = documents.drop_columns(["spans"])
    rows, starts, ends, withs = [], [], [], []
    counts = {"spans": 0, "placeholders": 0, "merged": 0}
    by_category: Counter[str] = Counter()
    for row, (doc, patient, text) in enumerate(
        zip(
            documents.column("doc_id").to_pylist(),
            documents.column("patient_id").to_pylist(),
            documents.column("text").to_pylist(),
            strict=True,
        )
    ):
        gold = spans.get(doc)
        if not gold or text is None:
            continue
        counts["spans"] += len(gold)
        for sp in _spans_of(text, gold, doc):
            counts["merged"] += sp.merged
            ident = ids.get((patient, sp.category, sp.key_text))
            if ident is None:
                raise InputError(
                    f"a gold span of document {doc!r} has no placeholder id: compute the ids "
                    "over every document of its patient (placeholder_ids)",
                    column="spans",
                )
            rows.append(row)
            starts.append(sp.start)
            ends.append(sp.end)
            withs.append(placeholder_text(sp.label, text[sp.start : sp.end], ident, sp.role))
            counts["placeholders"] += 1
            by_category[sp.label] += 1
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
    return out, {**counts, "by_category": dict(sorted(by_category.items()))}


@dataclass
class _Gold:
    """What the reduce of the placeholders stage found: the documents, their gold spans by
    ``doc_id``, the id table (:func:`placeholder_ids`) and the spans of no document."""

    documents: pa.Table
    spans: dict[Any, list[dict[str, Any]]]
    ids: dict[PlaceholderKey, int]
    spans_without_document: int
