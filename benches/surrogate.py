"""Benchmark: phisieve's surrogate stage vs a plain ``re.sub`` + Faker implementation.

Both fill every MIMIC-III placeholder of the same synthetic corpus (``phisieve synth``), in
memory, on one Python thread, in one run:

* the anchor, written the way KART and most scripts do it: one ``re.sub`` per note with a
  callback that parses the placeholder, caches a surrogate per (patient, placeholder) in a
  dict and otherwise calls Faker (unseeded), shifting dates by a per-patient offset;
* phisieve: :func:`phisieve.phi.surrogate.date_anchors` over the corpus, then
  :class:`phisieve.phi.surrogate.SurrogateFiller` batch by batch: keyed (HMAC) surrogates that do
  not depend on the order of the notes, and the gold ``spans`` column, which the anchor does
  not produce.

    python benches/surrogate.py [--patients 3000] [--reps 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import re
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

PLACEHOLDER = re.compile(r"\[\*\*(.*?)\*\*\]")
DATE = re.compile(
    r"(\d{4})-(\d{1,2})-(\d{1,2})$|(\d{1,2})/(\d{4})$|(\d{4})$|(\d{1,2})[-/](\d{1,2})$"
)


def anchor_fill(patients: list[str], texts: list[str]) -> list[str]:
    """Plain Python: ``re.sub`` with a cached Faker callback (what scripts usually do)."""
    from faker import Faker

    fake = Faker("en_US")
    cache: dict[tuple[str, str], str] = {}
    shifts: dict[str, int] = {}
    out = []
    for patient, text in zip(patients, texts, strict=True):
        shift = shifts.setdefault(patient, -random.randint(150, 170) * 365)

        def replace(m: re.Match[str], patient: str = patient, shift: int = shift) -> str:
            inner = m.group(1).strip()
            key = (patient, inner)
            if key not in cache:
                cache[key] = surrogate_of(fake, inner, shift)
            return cache[key]

        out.append(PLACEHOLDER.sub(replace, text))
    return out


def surrogate_of(fake, inner: str, shift: int) -> str:
    if d := DATE.match(inner):
        g = d.groups()
        try:
            if g[0]:
                day = dt.date(int(g[0]), int(g[1]), int(g[2])) + dt.timedelta(days=shift)
                return f"{day.month}/{day.day}/{day.year}"
            if g[3]:
                day = dt.date(int(g[4]), int(g[3]), 15) + dt.timedelta(days=shift)
                return f"{day.month}/{day.year}"
            if g[5]:
                return str((dt.date(int(g[5]), 7, 2) + dt.timedelta(days=shift)).year)
            day = dt.date(2000, int(g[6]), int(g[7])) + dt.timedelta(days=shift)
            return f"{day.month}/{day.day}"
        except ValueError:
            return fake.date()
    c = inner.lower()
    if "age over 90" in c:
        return str(random.randint(90, 104))
    if "first name" in c or "firstname" in c:
        return fake.first_name_female() if "female" in c else fake.first_name()
    if "last name" in c or "lastname" in c or not c:
        return fake.last_name()
    if c.startswith("name"):
        return fake.name()
    if c.startswith("hospital"):
        return f"{fake.last_name()} Hospital"
    if c.startswith("location"):
        return fake.city()
    if "telephone" in c or "phone" in c:
        return fake.phone_number()
    if "address" in c:
        return fake.street_address()
    if "company" in c:
        return fake.company()
    if "country" in c:
        return fake.country()
    if "e-mail" in c:
        return fake.email()
    if "url" in c:
        return fake.url()
    if "social security" in c:
        return fake.ssn()
    if "state" in c:
        return fake.state()
    if "month" in c:
        return fake.month_name()
    if "year" in c:
        return fake.year()
    return fake.numerify("######")


def phisieve_fill(table: pa.Table) -> pa.Table:
    from phisieve.phi.placeholders import find
    from phisieve.phi.surrogate import SurrogateFiller, date_anchors

    anchors: dict[str, int] = {}
    batches = table.to_batches(max_chunksize=4096)
    for b in batches:
        for p, y in date_anchors(find(b.column("text")), b.column("patient_id")).iter_rows():
            anchors[p] = max(y, anchors.get(p, y))
    secret = b"07f183476803d61b1b4b99d1a011fda6ddde2a1e3ae570fd7493038ed1c572e3"
    filler = SurrogateFiller(secret, anchors=anchors)
    return pa.Table.from_batches([filler.fill(b) for b in batches])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--patients", type=int, default=3000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    from phisieve import synth
    from phisieve.phi.placeholders import find

    with tempfile.TemporaryDirectory() as tmp:
        synth(Path(tmp) / "notes", patients=args.patients, seed=0)
        table = pq.read_table(Path(tmp) / "notes").combine_chunks()
    texts = table.column("text").to_pylist()
    patients = table.column("patient_id").to_pylist()
    mb = sum(len(t.encode()) for t in texts) / 1e6
    n_ph = find(table.column("text")).num_rows
    print(f"{table.num_rows:,} notes, {mb:.1f} MB, {n_ph:,} placeholders")

    def best(fn) -> tuple[float, object]:
        times, result = [], None
        for _ in range(args.reps):
            t = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - t)
        return min(times), result

    t_anchor, anchor_out = best(lambda: anchor_fill(patients, texts))
    t_ours, ours = best(lambda: phisieve_fill(table))
    assert not any("[**" in t for t in anchor_out)
    assert not any("[**" in t for t in ours.column("text").to_pylist())
    spans = sum(len(s) for s in ours.column("spans").to_pylist())
    assert spans == n_ph, (spans, n_ph)
    print("| method | seconds | MB/s | placeholders/s |\n|---|---:|---:|---:|")
    for name, t in (("re.sub + Faker (cached per patient)", t_anchor), ("phisieve", t_ours)):
        print(f"| {name} | {t:.3f} | {mb / t:.2f} | {n_ph / t:,.0f} |")
    print(f"phisieve is {t_anchor / t_ours:.1f}x the re.sub + Faker anchor ({spans:,} gold spans)")


if __name__ == "__main__":
    main()
