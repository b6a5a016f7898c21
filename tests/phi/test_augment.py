"""Annotated notes re-filled with fresh surrogates (phisieve.phi.augment): training data for
detection that teaches where PHI goes (issue 28, direction 3)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from phisieve.detect.labels import category
from phisieve.errors import ConfigError
from phisieve.phi.augment import refilled

NOTE = "Dr. John Smith saw her on 03/12/2001 at Boston General. Call 617-555-0199."
PIECES = {  # gold span text -> label
    "John Smith": "HCPName",
    "03/12/2001": "Date",
    "Boston General": "Location",
    "617-555-0199": "Phone",
}


def span(text: str, piece: str, label: str) -> dict:
    start = text.index(piece)
    return {"start": start, "end": start + len(piece), "label": label, "source": "gold",
            "score": 1.0}  # fmt: skip


def annotated(notes: dict[str, tuple[str, str]]) -> tuple[pa.Table, pa.Table]:
    """doc_id -> (patient, text); every PIECES text in a note is a gold span."""
    ids = list(notes)
    docs = pa.table({"doc_id": ids, "patient_id": [notes[d][0] for d in ids],
                     "text": [notes[d][1] for d in ids]})  # fmt: skip
    spans = [[span(notes[d][1], p, lab) for p, lab in PIECES.items() if p in notes[d][1]]
             for d in ids]  # fmt: skip
    return docs, pa.table({"doc_id": ids, "spans": spans})


def outside(text: str, spans: list[dict]) -> list[str]:
    """The text between the spans, in order."""
    out, at = [], 0
    for s in sorted(spans, key=lambda s: s["start"]):
        out.append(text[at : s["start"]])
        at = s["end"]
    return [*out, text[at:]]


def test_each_copy_keeps_the_words_around_the_phi_and_changes_the_phi():
    docs, gold = annotated({"n1": ("p1", NOTE)})
    copies, copies_gold, counts = refilled(docs, gold, 3, seed=7)
    assert counts == {"copied": 1, "skipped": 0}
    assert copies.column("doc_id").to_pylist() == ["n1#refill1", "n1#refill2", "n1#refill3"]
    assert copies_gold.column("doc_id").to_pylist() == copies.column("doc_id").to_pylist()
    assert copies.column("patient_id").to_pylist() == ["p1"] * 3
    before = outside(NOTE, gold.column("spans").to_pylist()[0])
    texts = copies.column("text").to_pylist()
    for text, spans in zip(texts, copies_gold.column("spans").to_pylist(), strict=True):
        assert outside(text, spans) == before
        # The name may be filled as one or two surrogates; every category is there again.
        assert {category(s["label"]) for s in spans} == {"NAME", "DATE", "LOCATION", "PHONE"}
        filled = [text[s["start"] : s["end"]] for s in spans]
        assert not set(filled) & set(PIECES)
    assert len(set(texts)) == 3  # every copy has its own surrogates


def test_copies_are_a_pure_function_of_the_seed():
    docs, gold = annotated({"n1": ("p1", NOTE), "n2": ("p2", NOTE)})
    a, a_gold, _ = refilled(docs, gold, 2, seed=1)
    b, b_gold, _ = refilled(docs, gold, 2, seed=1)
    c, _, _ = refilled(docs, gold, 2, seed=2)
    assert a.equals(b) and a_gold.equals(b_gold)
    assert a.column("text").to_pylist() != c.column("text").to_pylist()
    # A note's copy does not depend on the other notes given with it.
    alone, _, _ = refilled(docs.slice(1), gold.slice(1), 2, seed=1)
    texts = a.column("text").to_pylist()  # copy 1 of n1, n2, then copy 2 of n1, n2
    assert alone.column("text").to_pylist() == [texts[1], texts[3]]


def test_a_patient_keeps_one_surrogate_for_one_name_across_notes():
    text = "Seen by Dr. John Smith."
    docs, gold = annotated({"n1": ("p1", text), "n2": ("p1", text), "n3": ("p2", text)})
    copies, _, _ = refilled(docs, gold, 1, seed=3)
    t1, t2, t3 = copies.column("text").to_pylist()
    assert t1 == t2 and t1 != text
    assert t3 != t1  # another patient, another surrogate (a collision is ~1 in 10^6)


def test_notes_with_a_label_no_placeholder_knows_are_left_out():
    docs, gold = annotated({"n1": ("p1", NOTE), "n2": ("p2", "Patient code ZQ-17.")})
    spans = gold.column("spans").to_pylist()
    spans[1] = [span("Patient code ZQ-17.", "ZQ-17", "Nonsense")]
    gold = gold.set_column(1, "spans", pa.array(spans, gold.schema.field("spans").type))
    copies, _, counts = refilled(docs, gold, 2)
    assert counts == {"copied": 1, "skipped": 1}
    assert copies.column("doc_id").to_pylist() == ["n1#refill1", "n1#refill2"]


def test_notes_without_patient_ids_nor_gold():
    docs = pa.table({"doc_id": [5, 6], "text": [NOTE, "Nothing to hide."]})
    gold = pa.table({"doc_id": [5], "spans": [[span(NOTE, "John Smith", "HCPName")]]})
    copies, copies_gold, counts = refilled(docs, gold, 1)
    assert copies.column("doc_id").to_pylist() == ["5#refill1", "6#refill1"]
    assert copies.column("patient_id").to_pylist() == ["5", "6"]
    assert copies.column("text").to_pylist()[1] == "Nothing to hide."
    assert copies_gold.column("spans").to_pylist()[1] == []
    assert counts == {"copied": 2, "skipped": 0}


def test_no_copies_and_bad_counts():
    docs, gold = annotated({"n1": ("p1", NOTE)})
    copies, copies_gold, counts = refilled(docs, gold, 0)
    assert copies.num_rows == 0 and copies_gold.num_rows == 0
    assert counts == {"copied": 0, "skipped": 0}
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match="whole number"):
            refilled(docs, gold, bad)
