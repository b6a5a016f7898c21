"""What the command line prints once a stage's output is committed, declared by the stage.

A stage's :attr:`~phisieve.pipeline.stage.Stage.summary` is a tuple of items, each read from
the output's manifest (the stage's stats beside ``stage``, ``options``, ``inputs``,
``settings``...; for a folder of datasets, the stats beside ``outputs``) by one generic
renderer (:mod:`phisieve.cli.render`); nothing in a summary reads data or note text.

Texts are :meth:`str.format` strings over the manifest, with ``{out}`` (the output path) and
``{meta}`` (its ``.meta`` folder) added: ``{rows:,}``, ``{dp[epsilon]:.2f}``, ``{ci[0]}``;
the format ``:MiB`` writes a byte count in MiB. Rich markup in a text is kept
(``[yellow]...[/]``); the values put into it are escaped. A text whose value is missing
or ``None`` is left out (a line) or shown as ``-`` (a table cell).

Items:

* a string: a :class:`Line`;
* :class:`Line`: one line, shown only ``when`` some values are true and ``unless`` others;
* :class:`Each`: one line per entry of a mapping (counters such as ``rejected_by_reason``);
* :class:`Table`: a table of a mapping of mappings (or a list of mappings), a row per entry;
* :class:`Within`: items read from a mapping inside the manifest.

This module holds declarations only: it imports nothing (stage modules stay light to import).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeAlias


@dataclass(frozen=True)
class Line:
    """One line of text.

    Parameters
    ----------
    text
        A format string over the manifest; the line is left out when a value it names is
        missing or ``None``.
    when
        Values (field names, ``unknown[categories]``) that must all be true for the line to
        show (a count above 0, a non-empty mapping).
    unless
        Values none of which may be true for the line to show (absent counts as false).
    """

    text: str
    when: str | tuple[str, ...] = ()
    unless: str | tuple[str, ...] = ()


@dataclass(frozen=True)
class Each:
    """One line per entry of the mapping at ``field`` (nothing when it is absent or empty).

    ``text`` is a format string over ``{key}``, ``{value}`` and, when the value is a mapping,
    its fields; ``sort``: in the keys' order rather than the manifest's."""

    field: str
    text: str
    sort: bool = False


@dataclass(frozen=True)
class Table:
    """A table with a row per entry of the mapping (or list) at ``field``; none when absent.

    Parameters
    ----------
    field
        A mapping (a row per entry, its key as ``{key}``) or a list (``{key}``: the index).
    title
        A format string over the manifest (no title when a value it names is missing).
    columns
        ``(header, text)``: ``text`` is a format string over the row: ``{key}``, ``{value}``
        and, when the value is a mapping, its fields (which win over those names). The first
        column and those named in ``left`` are aligned left, the others right.
    left
        Headers of further columns aligned left.
    keys
        Only these entries, in this order (when present); default: every entry.
    also
        ``name -> field``: the entry of the same key in another mapping of the manifest,
        given to the row as ``{name}`` (``also={"fraction": "split[fractions]"}``).
    labels
        ``key -> label``, given to the row as ``{label}`` (the key when not listed).
    level
        A field of the row (``ok``, ``warn``, ``bad``, ``info``) that colours its first cell.
    total
        A last row: format strings over the manifest, one per column.
    """

    field: str
    title: str
    columns: tuple[tuple[str, str], ...]
    left: tuple[str, ...] = ()
    keys: tuple[str, ...] | None = None
    also: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    level: str | None = None
    total: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Within:
    """``items`` read from the mapping at ``field`` instead of the whole manifest (nothing
    when it is absent): a part of a manifest that another report shares (``encode``'s
    ``encoding[protection]``, which ``coverage`` prints too)."""

    field: str
    items: tuple[Item, ...]


Item: TypeAlias = "str | Line | Each | Table | Within"
"""One item of a summary."""

Summary: TypeAlias = "tuple[Item, ...]"
"""What a stage prints once its output is committed, in order."""
