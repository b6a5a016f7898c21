"""``phisieve ingest``: notes from outside phisieve into the ``documents`` dataset.

The readers (:mod:`phisieve.io.readers`) parse MIMIC-III CSV, PhysioNet deid, JSONL, Parquet
and folders of text files; this stage streams what they read into the dataset and the rows
they reject, with their reason (never their text), into ``OUT.meta/rejected``. Its manifest
(:func:`phisieve.api.ingest`'s result) counts ``rows`` (written), ``rejected``, ``rows_in``
(always ``rows + rejected``) and ``rejected_by_reason``, with the ``format`` and ``input``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pyarrow as pa

from ..io.dataset import DatasetWriter
from ..io.readers import DocumentStream, Rejection
from ..pipeline.stage import Context
from ..pipeline.work import Work


def documents(ctx: Context, state: DocumentStream) -> Iterator[pa.RecordBatch]:
    """The documents ``state`` reads, each batch's rejected rows written beside the
    output as it goes; the counts (which reconcile) into ``ctx.stats``."""
    by_reason: Counter[str] = Counter()
    rows_in = rows_out = 0
    with state, _bytes_bar(ctx, state) as tick:
        for batch, rejections in state:
            rows_out += batch.num_rows
            yield batch
            _write_rejections(ctx.writer, rejections)
            by_reason.update(r.reason for r in rejections)
            rows_in += batch.num_rows + len(rejections)
            tick()
    if rows_out + sum(by_reason.values()) != rows_in:  # pragma: no cover - a bug
        raise AssertionError("ingest lost rows: rows + rejected != rows_in")
    ctx.stats.update(
        rows_in=rows_in,
        rejected_by_reason=dict(sorted(by_reason.items())),
        format=state.fmt,
        input=str(state.path),
    )


def _write_rejections(writer: DatasetWriter, rejections: list[Rejection]) -> None:
    groups: dict[tuple[str, str, str | None], list[int]] = {}
    for r in rejections:
        groups.setdefault((r.source, r.reason, r.column), []).append(r.row)
    for (source, reason, column), rows in groups.items():
        writer.reject(source, rows, reason, column)


@contextmanager
def _bytes_bar(ctx: Work, stream: DocumentStream) -> Iterator[Callable[[], None]]:
    """Yield ``tick()``, which shows the bytes of input read so far (when ``ctx`` draws)."""
    label = f"ingest {stream.path.name}"
    with ctx.bar(label, stream.total_bytes, "bytes") as advance:
        shown = 0

        def tick() -> None:
            nonlocal shown
            now = stream.bytes_read()
            if now > shown:
                advance(now - shown)
                shown = now

        yield tick
        if stream.total_bytes > shown:
            advance(stream.total_bytes - shown)
