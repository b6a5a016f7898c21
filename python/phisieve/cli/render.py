"""What the command line prints once a stage's output is committed: the stage's
:attr:`~phisieve.pipeline.stage.Stage.summary` (:mod:`phisieve.pipeline.summary`) rendered
from the output's manifest, by one renderer for every stage (nothing here reads data or
note text)."""

from __future__ import annotations

import string
from collections.abc import Iterator, Mapping
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table as RichTable

from ..io.dataset import meta_dir
from ..pipeline.summary import Each, Item, Line, Table, Within

if TYPE_CHECKING:
    from ..pipeline.stage import Stage

Lines = list[Any]
"""Rich renderables (or strings) to print, in order."""

LEVELS = {"ok": "green", "warn": "yellow", "bad": "red", "info": "blue"}
"""The colour of a table row's :attr:`~phisieve.pipeline.summary.Table.level`."""

EMPTY = "-"
"""A table cell whose value is missing."""


class Missing(Exception):
    """A value a text names is absent or ``None``."""


class _Formatter(string.Formatter):
    """:meth:`str.format` whose missing values raise :class:`Missing`, with ``:MiB``, and
    whose values are escaped from rich markup."""

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        try:
            return super().get_field(field_name, args, kwargs)
        except (KeyError, IndexError, TypeError, AttributeError) as e:
            raise Missing(field_name) from e

    def format_field(self, value: Any, format_spec: str) -> str:
        if value is None:
            raise Missing
        if format_spec == "MiB":
            return f"{value / 2**20:,.1f} MiB"
        return escape(format(value, format_spec))

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        if value is None:
            raise Missing
        return super().convert_field(value, conversion)


_fmt = _Formatter()


def fill(text: str, values: Mapping[str, Any]) -> str:
    """``text`` formatted over ``values`` (:class:`Missing` when a value is)."""
    return _fmt.vformat(text, (), values)


def lookup(name: str, values: Mapping[str, Any]) -> Any:
    """The value ``name`` (``dp``, ``unknown[categories]``) of ``values``; ``None`` when
    absent."""
    try:
        return _fmt.get_field(name, (), values)[0]
    except Missing:
        return None


def _names(names: str | tuple[str, ...]) -> tuple[str, ...]:
    return (names,) if isinstance(names, str) else names


def line(item: Line, values: Mapping[str, Any]) -> str | None:
    """The text of a :class:`Line` (``None``: not shown)."""
    if not all(lookup(n, values) for n in _names(item.when)):
        return None
    if any(lookup(n, values) for n in _names(item.unless)):
        return None
    try:
        return fill(item.text, values)
    except Missing:
        return None


def entries(value: Any, keys: tuple[str, ...] | None = None) -> Iterator[tuple[Any, Any]]:
    """``(key, value)`` of a mapping (only ``keys``, when given) or ``(index, item)`` of a
    list."""
    if isinstance(value, Mapping):
        if keys is None:
            yield from value.items()
        else:
            yield from ((k, value[k]) for k in keys if k in value)
    elif isinstance(value, (list, tuple)):
        yield from enumerate(value)


def row_values(key: Any, value: Any, **more: Any) -> dict[str, Any]:
    """What a row's texts read: ``key``, ``value``, the value's fields when it is a mapping
    (which win over those two: the audit verdict's rows have a ``value``), and ``more``."""
    fields = value if isinstance(value, Mapping) else {}
    return {"key": key, "value": value, **fields, **more}


def cell(text: str, values: Mapping[str, Any]) -> str:
    try:
        return fill(text, values)
    except Missing:
        return EMPTY


def table(item: Table, values: Mapping[str, Any]) -> RichTable | None:
    """The rich table of a :class:`Table` (``None`` when its field is absent)."""
    rows = lookup(item.field, values)
    if rows is None:
        return None
    try:
        title = fill(item.title, values)
    except Missing:
        title = None
    out = RichTable(title=title, header_style="bold")
    for i, (header, _) in enumerate(item.columns):
        left = i == 0 or header in item.left
        out.add_column(header, justify="left" if left else "right")
    also = {name: lookup(f, values) or {} for name, f in item.also.items()}
    for key, value in entries(rows, item.keys):
        more = {name: other.get(key) for name, other in also.items()}
        if item.labels:
            more["label"] = item.labels.get(key, key)
        row = row_values(key, value, **more)
        cells = [cell(text, row) for _, text in item.columns]
        colour = LEVELS.get(row.get(item.level)) if item.level else None
        if colour:
            cells[0] = f"[{colour}]{cells[0]}[/]"
        out.add_row(*cells)
    if item.total is not None:
        out.add_row(*(cell(text, values) for text in item.total))
    return out


def render_items(items: tuple[Item, ...], values: Mapping[str, Any]) -> Lines:
    """What ``items`` show of ``values`` (a manifest, or a part of one)."""
    out: Lines = []
    for item in items:
        if isinstance(item, str):
            item = Line(item)
        if isinstance(item, Line):
            text = line(item, values)
            if text is not None:
                out.append(text)
        elif isinstance(item, Each):
            pairs = list(entries(lookup(item.field, values)))
            for key, value in sorted(pairs) if item.sort else pairs:
                with suppress(Missing):
                    out.append(fill(item.text, row_values(key, value)))
        elif isinstance(item, Table):
            rich = table(item, values)
            if rich is not None:
                out.append(rich)
        elif isinstance(item, Within):
            inner = lookup(item.field, values)
            if isinstance(inner, Mapping):
                out += render_items(item.items, inner)
        else:  # pragma: no cover - a typo in a stage's summary
            raise TypeError(f"not a summary item: {item!r}")
    return out


def render(stage: type[Stage], manifest: Mapping[str, Any], out: Path) -> Lines:
    """What to print for the committed output ``out`` of ``stage``: its summary over the
    manifest, with ``out`` and ``meta`` (the output's ``.meta`` folder)."""
    values = {**manifest, "out": out, "meta": meta_dir(out)}
    return render_items(stage.summary, values)
