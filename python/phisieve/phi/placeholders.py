"""MIMIC-III placeholders (``[** ... **]``): where they are, their form, and the kind of
surrogate each one needs (DESIGN.md §7).

The grammar is parsed in Rust (:func:`phisieve._core.find_placeholders`); this module maps
named categories (``Known lastname``, ``Hospital1``, ``Telephone/Fax``...) to surrogate
kinds and reports the categories it does not know, with counts, so that no placeholder is
ever silently left in a text.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl
import pyarrow as pa

from .. import _core

# (pattern on the lower-cased category, kind); the first match wins.
_RULES: list[tuple[str, str]] = [
    (r"^doctor first name", "doctor_first_name"),
    (r"^doctor last name", "doctor_last_name"),
    (r"^(attending|dictator) info|^cc contact info", "doctor_name"),
    (r"^md number", "md_number"),
    (r"^(known firstname|(fe)?male first name|first name)", "first_name"),
    (r"^(known lastname|last name)", "last_name"),
    (r"^(name initial|initials?\b)", "name_initial"),
    (r"^name prefix", "name_prefix"),
    (r"^name\d*$|^name\b", "full_name"),
    (r"^(hospital (unit|ward) name|wardname)", "ward"),
    (r"^hospital\d*$", "hospital"),
    (r"^(street|apartment) address", "street_address"),
    (r"^university|^college", "university"),
    (r"^location", "location"),
    (r"^company", "company"),
    (r"^country", "country"),
    (r"^state/zipcode|^zip ?code", "zip"),
    (r"^state$", "state"),
    (r"^e-?mail", "email"),
    (r"^url$", "url"),
    (r"^(telephone|phone|fax)", "phone"),
    (r"^pager", "pager"),
    (r"^medical record number", "record_number"),
    (r"^clip number", "clip_number"),
    (r"^job number", "job_number"),
    (r"^serial number", "serial_number"),
    (r"^social security number", "ssn"),
    (r"^po box", "po_box"),
    (r"^numeric identifier", "numeric_id"),
    (r"^unit number", "unit_number"),
    (r"^provider number", "provider_number"),
    (r"^month/day/year|^month day year", "date"),
    (r"^month/day|^month day|^day month", "month_day"),
    (r"^month/year|^month year", "month_year"),
    (r"^month$", "month"),
    (r"^year$", "year"),
    (r"^date ?range", "date_range"),
    (r"^holiday", "holiday"),
]
_COMPILED = [(re.compile(p), kind) for p, kind in _RULES]

KINDS = sorted({k for _, k in _RULES} | {"date", "age_over_90", "empty"})
"""Every surrogate kind a placeholder can need."""


def kind_of(category: str) -> str | None:
    """The surrogate kind of a named category, or None when the category is unknown."""
    c = " ".join(category.lower().split())
    for pattern, kind in _COMPILED:
        if pattern.search(c):
            return kind
    return None


def sex_of(category: str, qualifier: str | None = None) -> str | None:
    """``female``/``male`` when the category says so (``Female First Name (un)``)."""
    c = f"{category} {qualifier or ''}".lower()
    if "female" in c:
        return "female"
    if re.search(r"\bmale\b", c):
        return "male"
    return None


def find(texts: Any) -> pa.Table:
    """Every placeholder of each text, one row each, with its surrogate ``kind``.

    Parameters
    ----------
    texts
        An Arrow string array (or a list of ``str``).

    Returns
    -------
    pyarrow.Table
        ``text`` (input row), code-point ``start``/``end``, ``form`` (``named``, ``date``,
        ``age_over_90``, ``empty``, ``unterminated``, ``stray_close``), ``category``,
        ``qualifier``, ``id``, ``year``/``month``/``day``/``shape`` for dates, and ``kind``
        (null for unknown categories and malformed markers).
    """
    if isinstance(texts, (list, tuple)):
        texts = pa.array(texts, pa.large_string())
    elif isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    found = pa.Table.from_batches([_core.find_placeholders(texts)])
    df = pl.from_arrow(found.select(["form", "category"]))
    assert isinstance(df, pl.DataFrame)
    categories = df.get_column("category").drop_nulls().unique().to_list()
    known = {c: kind_of(c) for c in categories}
    named = pl.col("category").replace_strict(known, default=None, return_dtype=pl.String)
    kinds = df.select(
        pl.when(pl.col("form") == "named")
        .then(named)
        .when(pl.col("form").is_in(["date", "age_over_90", "empty"]))
        .then(pl.col("form"))
        .otherwise(None)
    ).to_series()
    return found.append_column("kind", kinds.to_arrow().cast(pa.string()))


def report(found: pa.Table) -> dict[str, Any]:
    """Counts of a :func:`find` table: by form, by kind, unknown categories and malformed
    markers (never any text around them)."""
    df = pl.from_arrow(found)
    if not isinstance(df, pl.DataFrame) or df.height == 0:
        return {"placeholders": 0, "by_form": {}, "by_kind": {}, "unknown_categories": {}}

    def counts(frame: pl.DataFrame, col: str) -> dict[str, int]:
        g = frame.group_by(col).len().sort(["len", col], descending=[True, False])
        return {str(k): int(v) for k, v in g.iter_rows()}

    unknown = df.filter((pl.col("form") == "named") & pl.col("kind").is_null())
    return {
        "placeholders": df.height,
        "by_form": counts(df, "form"),
        "by_kind": counts(df.filter(pl.col("kind").is_not_null()), "kind"),
        "unknown_categories": counts(unknown, "category"),
    }
