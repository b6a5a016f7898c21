"""One map of labels: gold (PhysioNet), detect and surrogate labels to the categories the
trained recognizer tags (:data:`CATEGORIES`), shared by the recognizer, its training and the
deny lists grown from gold."""

from __future__ import annotations

__all__ = ["CATEGORIES", "LABELS", "category"]

CATEGORIES = ("NAME", "DATE", "LOCATION", "PHONE", "ID", "AGE", "CONTACT", "OTHER")
"""The PHI categories the model tags (BIO): detect's labels, coarsened."""

LABELS = ("O", *(f"{p}-{c}" for c in CATEGORIES for p in "BI"))

_CATEGORY = {
    # PhysioNet gold
    "hcpname": "NAME",
    "ptname": "NAME",
    "ptnameinitial": "NAME",
    "relativeproxyname": "NAME",
    "date": "DATE",
    "dateyear": "DATE",
    "location": "LOCATION",
    "phone": "PHONE",
    "age": "AGE",
    "other": "OTHER",
    # detect's own labels
    "name": "NAME",
    "id": "ID",
    "zip": "LOCATION",
    "email": "CONTACT",
    "url": "CONTACT",
    "ip": "CONTACT",
    "ssn": "ID",
    # surrogate kinds (phisieve.phi.placeholders.KINDS)
    "age_over_90": "AGE",
    "clip_number": "ID",
    "company": "LOCATION",
    "country": "LOCATION",
    "date_range": "DATE",
    "doctor_first_name": "NAME",
    "doctor_last_name": "NAME",
    "doctor_name": "NAME",
    "first_name": "NAME",
    "full_name": "NAME",
    "holiday": "DATE",
    "hospital": "LOCATION",
    "job_number": "ID",
    "last_name": "NAME",
    "md_number": "ID",
    "month": "DATE",
    "month_day": "DATE",
    "month_year": "DATE",
    "name_initial": "NAME",
    "name_prefix": "NAME",
    "numeric_id": "ID",
    "pager": "PHONE",
    "po_box": "LOCATION",
    "provider_number": "ID",
    "record_number": "ID",
    "serial_number": "ID",
    "state": "LOCATION",
    "street_address": "LOCATION",
    "unit_number": "ID",
    "university": "LOCATION",
    "ward": "LOCATION",
    "year": "DATE",
    # An empty placeholder ([** **]) is filled with a last name (SurrogateFiller._kind_values).
    "empty": "NAME",
    "unknown": "OTHER",
}


def category(label: str) -> str | None:
    """The model category of a gold, detect or surrogate label (case-insensitive); labels it
    does not know are ``OTHER``."""
    return _CATEGORY.get(label.strip().lower(), "OTHER")
