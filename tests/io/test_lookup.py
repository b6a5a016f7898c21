"""StringIndex against a dict: rows, absences, nulls, and hashes that collide."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phisieve.io import lookup
from phisieve.io.lookup import StringIndex

words = st.text(alphabet="abcé🙂 ", max_size=4)


def _reference(values: list[str], ids: list[str | None]) -> list[int]:
    first = {}
    for i, v in enumerate(values):
        first.setdefault(v, i)
    return [first.get(x, -1) if x is not None else -1 for x in ids]


@settings(max_examples=200, deadline=None)
@given(st.lists(words, max_size=30, unique=True), st.lists(words | st.none(), max_size=40))
def test_find_is_the_row_of_each_string(values, ids):
    index = StringIndex(pa.array(values, pa.string()))
    assert index.find(pa.array(ids, pa.string())).tolist() == _reference(values, ids)
    assert index.contains(ids).tolist() == [r >= 0 for r in _reference(values, ids)]


@settings(max_examples=50, deadline=None)
@given(st.lists(words, max_size=20, unique=True), st.lists(words | st.none(), max_size=30))
def test_colliding_hashes_are_told_apart_by_the_strings(monkeypatch_hashes, values, ids):
    index = StringIndex(pa.array(values, pa.string()))
    assert index.find(pa.array(ids, pa.large_string())).tolist() == _reference(values, ids)


def test_an_empty_index_finds_nothing():
    assert StringIndex(pa.array([], pa.string())).find(["a", None]).tolist() == [-1, -1]


@pytest.fixture(scope="module")
def monkeypatch_hashes():
    """Every string hashes to 7: each lookup falls back to comparing strings."""
    mp = pytest.MonkeyPatch()
    mp.setattr(lookup, "string_hashes", lambda values: np.full(len(values), 7, np.uint64))
    yield
    mp.undo()
