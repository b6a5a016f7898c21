"""Fill MIMIC-III placeholders with consistent, keyed surrogates and emit gold spans
(DESIGN.md §7).

Every surrogate is a pure function of a secret and the placeholder's key, never of the order
in which notes are processed:

* a named placeholder (``[**Known lastname 4015**]``) is keyed by (patient, category, id),
  so the same placeholder within a patient always gets the same surrogate, across notes, runs
  and machines. Draws are ``HMAC-SHA256(secret, key)`` (:func:`phisieve._core.keyed_draws`);
  without the secret the mapping cannot be recomputed from the output.
* names, places and numbers are drawn from Faker's locale data (its name lists with their
  frequency weights, states, countries...) by the keyed draw, vectorised; the kinds that need
  Faker's own formatting (phone numbers, street addresses, companies, e-mails, URLs, ZIP
  codes, SSNs, cities) call Faker seeded with the keyed draw of that placeholder. The mapping
  therefore depends on the secret, the key, the locale and the Faker version (recorded in
  the output's manifest), nothing else.
* dates move by one shift per patient, a whole number of weeks (intervals and weekdays are
  kept). The shift takes the patient's latest year written in a placeholder to a keyed year
  of ``years`` (a plausible past), so MIMIC's 2100-2200 dates become, say, 2000-2020, and
  birth dates decades earlier stay decades earlier.

The output is the ``documents`` table with the filled text and a ``spans`` column: one span
per surrogate (code-point ``start``/``end`` in the new text, ``label`` = the surrogate kind,
``source`` = ``"surrogate"``, ``score`` = 1), ground truth for detection and audits.
"""

from __future__ import annotations

import calendar
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from .. import _core
from ..errors import ConfigError, InputError
from ..io.schema import SPAN, SPANS, spans_array
from ..io.sources import open_source, require_columns
from .placeholders import find, sex_of
from .secret import check_secret, read_secret

__all__ = [
    "SPAN",
    "SPANS",
    "SurrogateFiller",
    "check_secret",
    "date_anchors",
    "read_secret",
]


ANCHOR_YEARS = (1000, 2300)
"""Years that can anchor a patient's date shift (MIMIC writes 2100-2200)."""
SHOWN_AFTER_PATIENTS = 2
"""With ``report_unknown``, an unknown category is named once this many patients use it."""
FAKER_POOL = 1 << 16
"""Values per Faker-formatted kind (phone, address...): see ``SurrogateFiller._pooled``."""
_VERSION = b"phisieve-surrogate-v1"

# Kinds Faker formats itself (one seeded call per distinct key), and the method for each.
_FAKER_METHODS = {
    "location": "city",
    "street_address": "street_address",
    "company": "company",
    "email": "email",
    "url": "url",
    "phone": "phone_number",
    "zip": "postcode",
    "ssn": "ssn",
}
# Identifier numbers: digits of this width (the first one not zero).
_DIGITS = {
    "record_number": 8,
    "clip_number": 6,
    "job_number": 5,
    "serial_number": 7,
    "md_number": 5,
    "numeric_id": 6,
    "unit_number": 7,
    "provider_number": 6,
    "pager": 5,
}
_HOSPITAL_SUFFIXES = (
    "Hospital",
    "Medical Center",
    "General Hospital",
    "Memorial Hospital",
    "Regional Medical Center",
    "Community Hospital",
    "Health Center",
)
_HOLIDAYS = (
    "New Year's Day",
    "Memorial Day",
    "Fourth of July",
    "Labor Day",
    "Thanksgiving",
    "Christmas",
    "Christmas Eve",
    "Easter",
)
# How a full date (year, month, day) is written; one style per patient.
_DATE_STYLES = ("{m}/{d}/{Y}", "{Y}-{mm}-{dd}", "{mm}/{dd}/{Y}")
# Date shapes, by shape alone (whatever the numbers): (shape the date is written back in,
# pattern on the placeholder's content, the field each group holds). The first five are the
# placeholder grammar's (rust/core/src/placeholders.rs); the others, which MIMIC does not
# write, are dates all the same, never names.
_DATE_SHAPES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("y-m-d", r"^([0-9]{4})-([0-9]{1,4})-([0-9]{1,4})$", ("year", "month", "day")),
    ("m/y", r"^([0-9]{1,4})/([0-9]{4})$", ("month", "year")),
    ("y", r"^([0-9]{4})$", ("year",)),
    ("m-d", r"^([0-9]{1,2})-([0-9]{1,2})$", ("month", "day")),
    ("m/d", r"^([0-9]{1,2})/([0-9]{1,2})$", ("month", "day")),
    ("y-m-d", r"^([0-9]{1,2})[-/]([0-9]{1,2})[-/]([0-9]{4})$", ("month", "day", "year")),
    ("y-m-d", r"^([0-9]{4})/([0-9]{1,2})/([0-9]{1,2})$", ("year", "month", "day")),
    ("m/y", r"^([0-9]{1,2})-([0-9]{4})$", ("month", "year")),
    ("m/y", r"^([0-9]{4})[-/]([0-9]{1,2})$", ("year", "month")),
)
_DATE_LIKE = r"^[0-9]{1,4}[-/][0-9]{1,4}([-/][0-9]{1,4})?$|^[0-9]{4}$"
"""Content that may have a date shape: a quick filter before :data:`_DATE_SHAPES`."""


def latest_years(piece: Any) -> dict[str, int]:
    """Each patient's latest placeholder year in ``piece`` (documents with ``patient_id``
    and ``text``): the pass before surrogates, which the engine may run on pieces of the
    corpus (the whole corpus's anchor is the largest of the pieces')."""
    years: dict[str, int] = {}
    for b in open_source(piece).batches(["patient_id", "text"]):
        for p, y in date_anchors(find(b.column("text")), b.column("patient_id")).iter_rows():
            years[p] = max(y, years.get(p, y))
    return years


def date_anchors(found: pa.Table, patients: pa.Array) -> pl.DataFrame:
    """The latest year each patient's date placeholders write (``patient_id``, ``year``): the
    anchor that the patient's date shift moves into the target years. Years outside
    :data:`ANCHOR_YEARS` (typos such as 2999) do not anchor.

    ``found`` is a :func:`phisieve.phi.placeholders.find` table over texts whose patient ids are
    ``patients``. Only dates that carry a year count, impossible ones too
    (:func:`_dates_by_shape`): ``[**2150-13-45**]`` anchors at 2150 as it is filled as a date.
    """
    df = _dates_by_shape(found).select("text", "form", "year", "shape")
    pid = pl.from_arrow(pa.array(patients, pa.string()))
    assert isinstance(pid, pl.Series)
    dated = df.filter(
        (pl.col("form") == "date")
        & pl.col("shape").is_in(["y-m-d", "m/y", "y"])
        & pl.col("year").is_between(*ANCHOR_YEARS)
    )
    dated = dated.with_columns(pid.gather(dated.get_column("text")).alias("patient_id"))
    return dated.group_by("patient_id").agg(pl.col("year").max().cast(pl.Int32))


def _dates_by_shape(found: pa.Table | pl.DataFrame) -> pl.DataFrame:
    """A :func:`phisieve.phi.placeholders.find` table where every date-shaped placeholder is a
    date.

    The grammar reads ``[**2150-13-45**]``, ``[**13-45**]`` or ``[**13/2150**]`` as a named
    placeholder whose category is that text, because a month or day is out of range (and
    ``[**3/4/2150**]`` because it knows no such shape): such a placeholder then fell through
    to an unknown category and got a last name. Here the shape decides the category
    (:data:`_DATE_SHAPES`): it becomes form and kind ``date`` with its numbers as written,
    and validity decides how it is filled (:meth:`SurrogateFiller._dates` clamps it into
    the calendar, and counts it, before the patient's shift).
    """
    df = found if isinstance(found, pl.DataFrame) else pl.from_arrow(found)
    assert isinstance(df, pl.DataFrame)
    cat = pl.col("category")
    bare = (pl.col("form") == "named") & pl.col("qualifier").is_null() & pl.col("id").is_null()
    if not df.select((bare & cat.str.contains(_DATE_LIKE)).any()).item():
        return df
    shape: pl.Expr = pl.lit(None, pl.String)
    fields = {f: pl.col(f) for f in ("year", "month", "day")}
    for name, pattern, groups in reversed(_DATE_SHAPES):
        hit = bare & cat.str.contains(pattern)
        shape = pl.when(hit).then(pl.lit(name)).otherwise(shape)
        for f in fields:
            value = (
                cat.str.extract(pattern, groups.index(f) + 1).cast(pl.UInt32)
                if f in groups
                else pl.lit(0, pl.UInt32)
            )
            fields[f] = pl.when(hit).then(value).otherwise(fields[f])
    is_date = pl.col("date_shape").is_not_null()
    return (
        df.with_columns(date_shape=shape, **{f"date_{f}": e for f, e in fields.items()})
        .with_columns(
            form=pl.when(is_date).then(pl.lit("date")).otherwise(pl.col("form")),
            kind=pl.when(is_date).then(pl.lit("date")).otherwise(pl.col("kind")),
            category=pl.when(is_date).then(None).otherwise(cat),
            shape=pl.coalesce("date_shape", "shape"),
            **{f: pl.col(f"date_{f}").cast(df.schema[f]) for f in fields},
        )
        .drop("date_shape", *(f"date_{f}" for f in fields))
    )


@dataclass
class _Lists:
    """Faker's locale data that surrogates are drawn from by keyed draws."""

    first_female: tuple[np.ndarray, np.ndarray | None]
    first_male: tuple[np.ndarray, np.ndarray | None]
    last: tuple[np.ndarray, np.ndarray | None]
    prefix_female: tuple[np.ndarray, np.ndarray | None]
    prefix_male: tuple[np.ndarray, np.ndarray | None]
    states: tuple[np.ndarray, np.ndarray | None]
    countries: tuple[np.ndarray, np.ndarray | None]
    months: tuple[np.ndarray, np.ndarray | None]


def _provider_data(generator: Any, name: str) -> Any:
    for provider in generator.providers:
        value = getattr(provider, name, None)
        if value:
            return value
    return None


def _as_choices(data: Any, fallback: Iterable[str]) -> tuple[np.ndarray, np.ndarray | None]:
    """Values and weights (None: uniform) of a Faker list or weighted OrderedDict."""
    if isinstance(data, dict) and data:
        keys = [str(k) for k in data]
        if all(isinstance(v, (int, float)) and v >= 0 for v in data.values()):
            weights = np.asarray(list(data.values()), dtype=np.float64)
            if weights.sum() > 0:
                return np.asarray(keys, dtype=object), weights / weights.sum()
        return np.asarray(keys, dtype=object), None
    if data and all(isinstance(v, str) for v in data):
        return np.asarray(list(data), dtype=object), None
    return np.asarray(list(fallback), dtype=object), None


def _choose(choices: tuple[np.ndarray, np.ndarray | None], draws: np.ndarray) -> np.ndarray:
    """A keyed choice per draw: uniform, or by weight through the cumulative distribution."""
    values, weights = choices
    if weights is None:
        return values[(draws % np.uint64(len(values))).astype(np.int64)]
    unit = (draws >> np.uint64(11)).astype(np.float64) * 2.0**-53
    idx = np.searchsorted(np.cumsum(weights), unit, side="right")
    return values[np.minimum(idx, len(values) - 1)]


def _below(draws: np.ndarray, n: int) -> np.ndarray:
    """Keyed integers in ``[0, n)`` (modulo of a 64-bit draw: bias below 2**-40)."""
    return (draws % np.uint64(n)).astype(np.int64)


@dataclass
class SurrogateFiller:
    """Fills placeholders batch by batch; counts what it filled and what it could not.

    Parameters
    ----------
    secret
        The key of every draw: random, at least 32 bytes (:func:`check_secret`). Keep it
        apart from the output: with it and the input, the mapping can be recomputed.
    locale
        Faker locale of the surrogates (``en_US``...).
    keep_unfilled
        Leave placeholders of unknown categories and malformed markers as they are, instead
        of filling unknown categories with a generic surrogate (label ``unknown``) and
        removing stray ``[**``/``**]`` markers.
    years
        Inclusive range each patient's latest placeholder year is moved into.
    anchors
        Latest placeholder year per patient (:func:`date_anchors` over the whole input).
        Patients absent from it keep their years and move by a keyed number of weeks.
    report_unknown
        Name unknown categories in :meth:`summary` (``unknown_categories``: text -> count),
        only those that at least ``SHOWN_AFTER_PATIENTS`` patients use: a category one
        patient wrapped in ``[** **]`` may be PHI, and is only ever counted. Without it the
        summary holds counts only (``unknown``), never a category's text.
    """

    secret: bytes = field(repr=False)
    locale: str = "en_US"
    keep_unfilled: bool = False
    years: tuple[int, int] = (2000, 2020)
    anchors: dict[str, int] = field(default_factory=dict)
    report_unknown: bool = False
    counts: Counter[str] = field(default_factory=Counter)
    unknown_categories: Counter[str] = field(default_factory=Counter, repr=False)
    _unknown_patients: dict[str, set[str]] = field(default_factory=dict, repr=False)
    _pool: dict[str, dict[int, str]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        check_secret(self.secret)
        lo, hi = self.years
        if not 1 <= lo <= hi <= 9000:
            raise ConfigError(f"years must be an increasing range of years, not {self.years}")
        from faker import Faker

        try:
            # Faker is only called for the formatted kinds (phone, address...), whose parts
            # need no frequency weighting; unweighted draws are 5-10x faster.
            self._faker = Faker(self.locale, use_weighting=False)
        except AttributeError:
            raise ConfigError(f"unknown Faker locale {self.locale!r}") from None
        for kind, method in _FAKER_METHODS.items():
            try:
                getattr(self._faker, method)()
            except Exception:  # Faker raises anything when a locale lacks data
                raise ConfigError(
                    f"Faker locale {self.locale!r} cannot make {kind} surrogates ({method})"
                ) from None
        gen = self._faker.factories[0]
        months = _provider_data(gen, "MONTH_NAMES")
        self._lists = _Lists(
            first_female=_as_choices(_provider_data(gen, "first_names_female"), ["Mary"]),
            first_male=_as_choices(_provider_data(gen, "first_names_male"), ["John"]),
            last=_as_choices(_provider_data(gen, "last_names"), ["Smith"]),
            prefix_female=_as_choices(_provider_data(gen, "prefixes_female"), ["Ms.", "Mrs."]),
            prefix_male=_as_choices(_provider_data(gen, "prefixes_male"), ["Mr."]),
            states=_as_choices(_provider_data(gen, "states"), ["Massachusetts"]),
            countries=_as_choices(_provider_data(gen, "countries"), ["Canada"]),
            months=_as_choices(
                [months[k] for k in sorted(months)] if isinstance(months, dict) else None,
                calendar.month_name[1:],
            ),
        )

    def summary(self) -> dict[str, Any]:
        """What was filled so far, and what the mapping depends on (never the secret).

        Returns
        -------
        dict
            Counts of placeholders (by form), of surrogates (by kind), of unfilled
            placeholders and removed markers; ``dates_clamped``: date placeholders that
            were no calendar date (``2150-13-45``, ``2-30``) and were moved into one before
            the shift; ``unknown``: counts of unknown categories (see
            :meth:`_unknown_report`); the options the mapping depends on.
        """
        import faker

        def by(prefix: str) -> dict[str, int]:
            items = [(k[len(prefix) :], v) for k, v in self.counts.items() if k.startswith(prefix)]
            return dict(sorted(items, key=lambda kv: (-kv[1], kv[0])))

        return {
            "placeholders": self.counts["placeholders"],
            "filled": self.counts["filled"],
            "unfilled": self.counts["unfilled"],
            "markers_removed": self.counts["markers_removed"],
            "by_form": by("form:"),
            "by_kind": by("kind:"),
            "dates_clamped": self.counts["dates_clamped"],
            **self._unknown_report(),
            "keep_unfilled": self.keep_unfilled,
            "locale": self.locale,
            "faker_version": faker.VERSION,
            "years": list(self.years),
            "patients_with_dates": len(self.anchors),
        }

    def take_counts(self) -> tuple[Counter[str], Counter[str], dict[str, set[str]]]:
        """What :meth:`summary` counts, taken out of this filler (which starts counting
        again from zero): a worker's share, for :meth:`add_counts` on another filler."""
        out = (self.counts, self.unknown_categories, self._unknown_patients)
        self.counts, self.unknown_categories, self._unknown_patients = Counter(), Counter(), {}
        return out

    def add_counts(self, counts: tuple[Counter[str], Counter[str], dict[str, set[str]]]) -> None:
        """Add another filler's :meth:`take_counts` to this one's (what :meth:`summary`
        reports is then that of both fillers' documents)."""
        filled, categories, patients = counts
        self.counts.update(filled)
        self.unknown_categories.update(categories)
        for name, pids in patients.items():
            self._unknown_patients.setdefault(name, set()).update(pids)

    def _unknown_report(self) -> dict[str, Any]:
        """The unknown categories, counted.

        ``unknown`` holds counts only: distinct categories and their placeholders, and how
        many of those are used by a single patient. With ``report_unknown``,
        ``unknown_categories`` also names (text -> placeholders) the categories that at least
        ``SHOWN_AFTER_PATIENTS`` patients use; a category of one patient is never named, as
        the text it wraps in ``[** **]`` may be PHI.
        """
        shown: dict[str, int] = {}
        single, single_n = 0, 0
        for name, n in sorted(self.unknown_categories.items(), key=lambda kv: (-kv[1], kv[0])):
            if len(self._unknown_patients.get(name, ())) >= SHOWN_AFTER_PATIENTS:
                shown[name] = n
            else:
                single, single_n = single + 1, single_n + n
        report: dict[str, Any] = {
            "unknown": {
                "categories": len(self.unknown_categories),
                "placeholders": sum(self.unknown_categories.values()),
                "single_patient_categories": single,
                "single_patient_placeholders": single_n,
            },
            "report_unknown": self.report_unknown,
        }
        if self.report_unknown:
            report["unknown_categories"] = shown
        return report

    # ----------------------------------------------------------------------------------------
    def draws(self, *parts: pa.Array | list[str | None]) -> np.ndarray:
        """Keyed ``uint64`` draws, one per row of the parts (HMAC-SHA256 under the secret)."""
        arrays = [pa.array(p, pa.string()) if isinstance(p, list) else p for p in parts]
        n = len(arrays[0])
        version = pa.array([_VERSION.decode()] * n, pa.string())
        return _core.keyed_draws(self.secret, [version, *arrays]).to_numpy()

    def fill(self, batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
        """The batch with its placeholders filled and a ``spans`` column of the surrogates.

        ``batch`` has ``patient_id`` and ``text``; other columns pass through unchanged.
        """
        if isinstance(batch, pa.Table):
            batch = (
                batch.combine_chunks().to_batches()[0]
                if batch.num_rows
                else (pa.RecordBatch.from_pylist([], schema=batch.schema))
            )
        require_columns(batch.schema, ["patient_id", "text"], "documents")
        if "spans" in batch.schema.names:
            raise InputError(
                "the documents already have a spans column; drop it first (its offsets would "
                "not match the filled text)",
                column="spans",
            )
        texts = batch.column("text")
        patients = batch.column("patient_id").cast(pa.string())
        if patients.null_count:
            row = int(np.flatnonzero(patients.is_null().to_numpy(zero_copy_only=False))[0])
            raise InputError("the patient id is null", row=row, column="patient_id")
        found = find(texts)
        edits = self._replacements(found, patients)
        rows, starts, ends, with_, labels = (
            edits.column(c).combine_chunks() for c in ("text", "start", "end", "with", "label")
        )
        rows = rows.cast(pa.uint64())
        new_text, new_starts, new_ends = _core.splice(texts, rows, starts, ends, with_)
        spans = _span_lists(batch.num_rows, rows.to_numpy(), new_starts, new_ends, labels)
        idx = batch.schema.get_field_index("text")
        out = batch.set_column(idx, batch.schema.field(idx), new_text.cast(texts.type))
        return out.append_column(pa.field("spans", SPANS), spans)

    # ----------------------------------------------------------------------------------------
    def _replacements(self, found: pa.Table, patients: pa.Array) -> pa.Table:
        """One row per edit (``text``, ``start``, ``end``, ``with``, ``label``; label null
        for removed markers), in text order."""
        df = _dates_by_shape(found)
        pid = pl.from_arrow(patients)
        assert isinstance(pid, pl.Series)
        df = df.with_row_index("order").with_columns(
            pid.gather(df.get_column("text")).alias("patient_id")
        )
        self.counts["placeholders"] += df.height
        for form, n in df.group_by("form").len().iter_rows():
            self.counts[f"form:{form}"] += n
        unknown = df.filter((pl.col("form") == "named") & pl.col("kind").is_null())
        by_category = unknown.group_by("category").agg(
            pl.len(), pl.col("patient_id").unique().head(SHOWN_AFTER_PATIENTS)
        )
        for cat, n, pids in by_category.iter_rows():
            name = " ".join(str(cat).split())
            self.unknown_categories[name] += n
            seen = self._unknown_patients.setdefault(name, set())
            if len(seen) < SHOWN_AFTER_PATIENTS:
                seen.update(pids)

        parts: list[pl.DataFrame] = []
        dates = df.filter(pl.col("form") == "date")
        if dates.height:
            parts.append(self._dates(dates))
        named = df.filter(pl.col("kind").is_not_null() & (pl.col("form") != "date"))
        if not self.keep_unfilled:
            named = pl.concat([named, unknown.with_columns(kind=pl.lit("unknown"))], how="vertical")
        if named.height:
            parts.append(self._named(named))
        if not self.keep_unfilled:
            markers = df.filter(pl.col("form").is_in(["unterminated", "stray_close"]))
            parts.append(
                # A space, not nothing: removing `[**` from `[[****` would make a new `[**`.
                markers.select("order", **{"with": pl.lit(" "), "label": pl.lit(None, pl.String)})
            )
        keep = ["order", "with", "label"]
        edits = (
            pl.concat([p.select(keep) for p in parts], how="vertical")
            if parts
            else pl.DataFrame(schema={"order": pl.UInt32, "with": pl.String, "label": pl.String})
        )
        edits = df.select("order", "text", "start", "end").join(edits, on="order").sort("order")
        filled = edits.filter(pl.col("label").is_not_null())
        self.counts["filled"] += filled.height
        for kind, n in filled.group_by("label").len().iter_rows():
            self.counts[f"kind:{kind}"] += n
        self.counts["unfilled"] += df.height - edits.height
        self.counts["markers_removed"] += edits.height - filled.height
        return edits.drop("order").to_arrow()

    def _named(self, named: pl.DataFrame) -> pl.DataFrame:
        """Surrogates of named placeholders (and empty / age over 90), keyed by (patient,
        category, id)."""
        # The key is the placeholder as written: category and qualifier (which may state a
        # sex), case and spacing normalised.
        written = pl.concat_str(
            pl.col("category"),
            pl.lit(" ("),
            pl.col("qualifier").fill_null(""),
            pl.lit(")"),
        )
        category = written.str.to_lowercase().str.replace_all(r"\s+", " ")
        keyed = named.with_columns(
            key_category=pl.when(pl.col("form") == "named")
            .then(category.str.strip_chars())
            .otherwise(pl.col("form")),
        )
        keys = keyed.select("patient_id", "kind", "key_category", "id", "category", "qualifier")
        uniq = keys.unique(["patient_id", "kind", "key_category", "id"], maintain_order=True)
        values = self._named_values(uniq)
        out = keyed.join(
            uniq.select("patient_id", "kind", "key_category", "id").with_columns(
                pl.Series("with", values, pl.String)
            ),
            on=["patient_id", "kind", "key_category", "id"],
            nulls_equal=True,
        )
        return out.select("order", "with", label=pl.col("kind"))

    def _named_values(self, uniq: pl.DataFrame) -> list[str]:
        n = uniq.height
        arrow = uniq.to_arrow()
        pid, cat, ident = (
            arrow.column("patient_id").combine_chunks(),
            arrow.column("key_category").combine_chunks(),
            arrow.column("id").combine_chunks().cast(pa.string()),
        )

        def field_draws(name: str) -> np.ndarray:
            return self.draws(pid, pa.array([name] * n, pa.string()), cat, ident)

        value, aux, sex_draw = field_draws("value"), field_draws("aux"), field_draws("sex")
        kinds = uniq.get_column("kind").to_numpy()
        pairs = uniq.select("category", "qualifier")
        sexes = {(c, q): sex_of(c or "", q) for c, q in pairs.unique().iter_rows()}
        stated = np.asarray([sexes[cq] for cq in pairs.iter_rows()], dtype=object)
        female = np.where(
            stated == "female",
            True,
            np.where(stated == "male", False, (sex_draw & np.uint64(1)) == 1),
        )
        out = np.empty(n, dtype=object)
        for kind in np.unique(kinds):
            sel = np.flatnonzero(kinds == kind)
            out[sel] = self._kind_values(str(kind), value[sel], aux[sel], female[sel])
        return out.tolist()

    def _first_names(self, draws: np.ndarray, female: np.ndarray) -> np.ndarray:
        return np.where(
            female,
            _choose(self._lists.first_female, draws),
            _choose(self._lists.first_male, draws),
        )

    def _kind_values(
        self, kind: str, value: np.ndarray, aux: np.ndarray, female: np.ndarray
    ) -> np.ndarray:
        """Surrogates of one kind from keyed draws (``value`` the main one, ``aux`` a second)."""
        L = self._lists
        join = np.char.add
        if kind in ("first_name", "doctor_first_name"):
            return self._first_names(value, female)
        if kind in ("last_name", "doctor_last_name", "empty", "unknown"):
            return _choose(L.last, value)
        if kind in ("full_name", "doctor_name"):
            first = self._first_names(value, female).astype(str)
            return join(join(first, " "), _choose(L.last, aux).astype(str)).astype(object)
        if kind == "name_initial":
            return np.asarray([s[:1] for s in self._first_names(value, female)], dtype=object)
        if kind == "name_prefix":
            return np.where(female, _choose(L.prefix_female, value), _choose(L.prefix_male, value))
        if kind == "hospital":
            suffix = np.asarray(_HOSPITAL_SUFFIXES, dtype=str)[_below(aux, len(_HOSPITAL_SUFFIXES))]
            return join(join(_choose(L.last, value).astype(str), " "), suffix).astype(object)
        if kind == "ward":
            floor = (1 + _below(aux, 12)).astype(str)
            return join(join(_choose(L.last, value).astype(str), " "), floor).astype(object)
        if kind == "university":
            state = _choose(L.states, value).astype(str)
            last = _choose(L.last, value).astype(str)
            return np.where(
                (aux & np.uint64(1)) == 1,
                join("University of ", state),
                join(last, " University"),
            ).astype(object)
        if kind == "state":
            return _choose(L.states, value)
        if kind == "country":
            return _choose(L.countries, value)
        if kind == "month":
            return _choose(L.months, value)
        if kind == "holiday":
            return np.asarray(_HOLIDAYS, dtype=object)[_below(value, len(_HOLIDAYS))]
        if kind == "po_box":
            return join("PO Box ", (100 + _below(value, 9900)).astype(str)).astype(object)
        if kind == "age_over_90":
            return (90 + _below(value, 15)).astype(str).astype(object)
        if kind in _DIGITS:
            w = _DIGITS[kind]
            return (10 ** (w - 1) + _below(value, 9 * 10 ** (w - 1))).astype(str).astype(object)
        lo, hi = self.years
        year = lo + _below(value, hi - lo + 1)
        month, day = 1 + _below(aux, 12), 1 + _below(aux >> np.uint64(8), 28)
        m, d, y = month.astype(str), day.astype(str), year.astype(str)
        if kind == "year":
            return y.astype(object)
        if kind == "month_day":
            return join(join(m, "/"), d).astype(object)
        if kind == "month_year":
            return join(join(m, "/"), y).astype(object)
        if kind == "date":
            return join(join(join(join(m, "/"), d), "/"), y).astype(object)
        if kind == "date_range":
            d2 = np.minimum(day + 1 + _below(value >> np.uint64(32), 7), 28).astype(str)
            mm = join(m, "/")
            return join(join(join(mm, d), "-"), join(mm, d2)).astype(object)
        if kind in _FAKER_METHODS:
            return self._pooled(kind, value)
        raise AssertionError(f"no surrogate for kind {kind!r}")  # pragma: no cover

    def _pooled(self, kind: str, value: np.ndarray) -> np.ndarray:
        """Faker-formatted surrogates: the draw picks one of ``FAKER_POOL`` slots per kind, and
        a slot's value is Faker seeded with the slot's own keyed draw, made once and cached.
        Faker is thus called at most ``FAKER_POOL`` times per kind, however large the corpus;
        two keys of a patient share a value with probability about (keys^2 / 2) / FAKER_POOL.
        """
        slots = _below(value, FAKER_POOL)
        pool = self._pool.setdefault(kind, {})
        missing = [int(s) for s in np.unique(slots) if int(s) not in pool]
        if missing:
            n = len(missing)
            seeds = self.draws(
                pa.array(["faker-pool"] * n, pa.string()),
                pa.array([kind] * n, pa.string()),
                pa.array([str(s) for s in missing], pa.string()),
            )
            method = getattr(self._faker, _FAKER_METHODS[kind])
            for slot, seed in zip(missing, seeds.tolist(), strict=True):
                self._faker.seed_instance(seed)
                pool[slot] = method()
        return np.asarray([pool[s] for s in slots.tolist()], dtype=object)

    # ----------------------------------------------------------------------------------------
    def _shifts(self, patients: list[str]) -> pl.DataFrame:
        """Per patient: the shift in days (a whole number of weeks), the reference year of
        dates without a year, and the date style."""
        n = len(patients)
        pid = pa.array(patients, pa.string())
        shift_draw = self.draws(pid, pa.array(["date-shift"] * n, pa.string()))
        style_draw = self.draws(pid, pa.array(["date-style"] * n, pa.string()))
        lo, hi = self.years
        target = lo + _below(shift_draw, hi - lo + 1)
        # 1-26 weeks earlier: the anchor year's last day lands in the second half of the
        # target year, never after it.
        jitter = -1 - _below(shift_draw >> np.uint64(32), 26)
        anchor = np.asarray([self.anchors.get(p, -1) for p in patients], dtype=np.int64)
        has = anchor >= 0
        weeks = np.where(has, np.rint((target - anchor) * 365.2425 / 7), 0) + jitter
        ref = np.where(has, anchor, 2000)
        # Month-day dates are read in a leap year near the anchor, so 2/29 exists.
        ref = ref - ref % 4
        ref = np.where((ref % 100 == 0) & (ref % 400 != 0), ref - 4, ref)
        return pl.DataFrame(
            {
                "patient_id": patients,
                "shift_days": (weeks * 7).astype(np.int64),
                "ref_year": ref.astype(np.int32),
                "style": _below(style_draw, len(_DATE_STYLES)).astype(np.int32),
            }
        )

    def _dates(self, dates: pl.DataFrame) -> pl.DataFrame:
        """Shifted dates written like clinical text, for date placeholders."""
        patients = dates.get_column("patient_id").unique(maintain_order=True).to_list()
        shifts = self._shifts(patients)
        # Dates without a year, or with one that cannot anchor (a typo), take the patient's
        # reference year.
        yearless = pl.col("shape").is_in(["m-d", "m/d"]) | ~pl.col("year").is_between(*ANCHOR_YEARS)
        df = dates.join(shifts, on="patient_id").with_columns(
            y=pl.when(yearless).then(pl.col("ref_year")).otherwise(pl.col("year").cast(pl.Int32)),
            m=pl.when(pl.col("shape") == "y")
            .then(7)
            .otherwise(pl.col("month"))
            .clip(1, 12)
            .cast(pl.Int8),
            d=pl.when(pl.col("shape") == "y")
            .then(2)
            .when(pl.col("shape") == "m/y")
            .then(15)
            .otherwise(pl.col("day"))
            .clip(1, 31)
            .cast(pl.Int8),
        )
        # Clamp to the calendar (MIMIC has 2/30, 0 for a month and the like).
        last = pl.date(pl.col("y"), pl.col("m"), 1).dt.month_end().dt.day()
        day = pl.min_horizontal(pl.col("d"), last)
        self.counts["dates_clamped"] += df.select(_clamped(day).sum()).item()
        shifted = pl.date(pl.col("y"), pl.col("m"), day)
        shifted = shifted + pl.duration(days=pl.col("shift_days"))
        df = df.with_columns(new=shifted).with_columns(
            Y=pl.col("new").dt.year().cast(pl.String),
            m_=pl.col("new").dt.month().cast(pl.String),
            d_=pl.col("new").dt.day().cast(pl.String),
            mm=pl.col("new").dt.strftime("%m"),
            dd=pl.col("new").dt.strftime("%d"),
        )
        styles = [
            pl.format(s.replace("{m}", "{}").replace("{d}", "{}").replace("{Y}", "{}")
                      .replace("{mm}", "{}").replace("{dd}", "{}"),
                      *[pl.col(c) for c in _style_columns(s)])
            for s in _DATE_STYLES
        ]  # fmt: skip
        full = pl.when(pl.col("style") == 0).then(styles[0])
        for i, expr in enumerate(styles[1:], start=1):
            full = full.when(pl.col("style") == i).then(expr)
        text = (
            pl.when(pl.col("shape") == "y-m-d")
            .then(full.otherwise(styles[0]))
            .when(pl.col("shape") == "m/y")
            .then(pl.format("{}/{}", "m_", "Y"))
            .when(pl.col("shape") == "y")
            .then(pl.col("Y"))
            .otherwise(pl.format("{}/{}", "m_", "d_"))
        )
        return df.select("order", **{"with": text, "label": pl.lit("date")})


def _clamped(day: pl.Expr) -> pl.Expr:
    """Whether a date placeholder was no calendar date: its written month (shapes other than
    a lone year) or day (shapes with one) differs from the clamped ``m`` or ``day``."""
    shape = pl.col("shape")
    month_moved = (shape != "y") & (pl.col("month").cast(pl.Int64) != pl.col("m").cast(pl.Int64))
    day_moved = shape.is_in(["y-m-d", "m-d", "m/d"]) & (
        pl.col("day").cast(pl.Int64) != day.cast(pl.Int64)
    )
    return month_moved | day_moved


def _style_columns(style: str) -> list[str]:
    """The columns a date style's fields read, in order."""
    names = {"{m}": "m_", "{d}": "d_", "{Y}": "Y", "{mm}": "mm", "{dd}": "dd"}
    out, i = [], 0
    while (j := style.find("{", i)) >= 0:
        k = style.index("}", j) + 1
        out.append(names[style[j:k]])
        i = k
    return out


def _span_lists(
    rows: int, edit_rows: np.ndarray, starts: pa.Array, ends: pa.Array, labels: pa.Array
) -> pa.ListArray:
    """The ``spans`` list column: each row's filled surrogates (removed markers left out)."""
    keep = pa.array(np.flatnonzero(~labels.is_null().to_numpy(zero_copy_only=False)))
    n = len(keep)
    return spans_array(
        rows,
        edit_rows[keep.to_numpy()],
        starts.take(keep),
        ends.take(keep),
        labels.take(keep),
        pa.array(["surrogate"] * n, pa.string()),
        pa.array(np.ones(n, dtype=np.float32)),
    )
