"""mimic: damaged quoting, found and cut out before pyarrow reads the file.

pyarrow's CSV parser is lenient: a quote left open runs on over the records after it, and a
closing quote followed by more text, or a quote inside a quoted field that is not doubled,
is read as text. Either way one record's note can be glued to another's, records vanish
uncounted, or a note is read cut short. :class:`_QuoteRepair` sits between the file and
pyarrow: it parses the records itself, strictly, passes well-formed ones on as they are and
replaces each damaged stretch by one mark line per record it held, which pyarrow skips as a
row of the wrong column count and :mod:`.mimic` rejects with the mark's reason.

It works where a file's records start with integer ids (:class:`_QuoteCheck`), which gives
record starts to resynchronise on; see :class:`_QuoteRepair` for what is damage and for how
the records of a damaged stretch are counted.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import re
from collections import deque
from pathlib import Path
from typing import Any, NamedTuple

from ...errors import InputError
from .common import MALFORMED_QUOTING, UNCLOSED_QUOTE, WRONG_COLUMNS

_MARK_REASONS = (UNCLOSED_QUOTE, MALFORMED_QUOTING, WRONG_COLUMNS)
_MARK_PREFIX = "\x1a<phisieve: "
_MARKS = {reason: f"{_MARK_PREFIX}{reason}>\x1a" for reason in _MARK_REASONS}
"""The text of the line that stands for one rejected record, by reason."""
_MARK_LINES = {reason: mark.encode("ascii") + b"\n" for reason, mark in _MARKS.items()}
_START_SPAN = 128  # a record start's pattern never spans more bytes than this
_MIN_COLUMNS = 5  # files of fewer columns are not checked for damaged quoting
_MAX_HELD = 64 << 20  # bytes held back from pyarrow while a damaged stretch is resolved
_QUOTED = re.compile(rb'[^"]*(?:""[^"]*)*')
_UNQUOTED = re.compile(rb"[^,\r\n]*")
_FIELD = rb'(?:"[^"]*(?:""[^"]*)*"|[^",\r\n]*)'  # a well-formed field (RFC 4180)
_BLANK = re.compile(rb"[\r\n]*")


class _QuoteCheck:
    """How a file's records start: ``prefix``, a pattern the first bytes of every record
    match (its integer id fields). ``start`` finds the line break before a line that starts
    like a record, ``head`` matches such a line."""

    def __init__(self, prefix: bytes) -> None:
        self.start = re.compile(b"\\n(?=" + prefix + b")")
        self.head = re.compile(prefix)


class _QuoteRepair:
    """The bytes of a CSV file, with each damaged stretch replaced by one rejected record (a
    mark line, :data:`_MARK_LINES`) per record it held.

    The records are parsed one by one from the header on, strictly (RFC 4180). A record is
    passed on as it is, whatever its quoted fields hold, when it is *well formed*:

    * every quoted field is closed, and its closing quote is followed by a delimiter, a line
      break or the file's end (a quote inside it that is not doubled closes it, so a stray
      quote breaks this rule);
    * no unquoted field holds a doubled quote ``""`` or ends in a quote (what is left of a
      quoted field that lost its opening quote); a quote inside an unquoted field, such as
      ``5'10" tall``, is read literally, as pyarrow reads it;
    * the line after it (blank lines aside) starts like a record (:class:`_QuoteCheck`), is a
      record of the file's column count (such as one whose patient id is missing) or is the
      file's end. Any other line is a *fragment*: a piece of a record, cut off by a lost
      opening quote or a stray line break, never a record of its own.

    A well-formed record of another column count is passed on too (pyarrow rejects it) unless
    a line inside one of its quoted fields starts like a record.

    Any other record is damaged, and the next record starts at a line that starts like a
    record (or one of the file's column count), but which one cannot always be told:

    * a record with a quoted field left open over such lines (an *unclosed quote*): the next
      record starts at one of them (a quoted text's own quotes are doubled, so the field left
      open runs on over all of its text), or at the file's end if the field is still open
      there;
    * any other damaged record (*malformed quoting*, or *wrong column count* for a record
      followed by fragments without any quote out of place): the record and the fragments
      after it, read as pyarrow reads them, are one damaged record; the next starts at the
      first line after them that starts like a record (or, right after the damaged record,
      is one of the column count: after a fragment, such a record's ids may be what is left
      of a line cut inside them), or at a line that starts like a record inside a quoted
      field of one of them that runs on over it (a quote left open).

    Each possible start is taken as a hypothesis and parsed on from, a damaged record met on
    the way branching again, until every hypothesis reaches the same record start: from there
    on all of them, the true parse among them, read the same records. Everything before it
    is rejected, with the reason of the record that started the stretch, so no text is given
    to a record it may not belong to, and no record is read cut short. Lines before the
    file's first record start (fragments with no record before them) belong to that record,
    which is rejected with them.

    Records in. How many records a damaged stretch held is counted as the hypothesis that
    ends each damaged record at the first line inside it that starts a record of the file's
    shape (well formed with its column count, or damaged itself), else at its first line that
    starts like a record, else after its fragments, counts them (at least one); fragments
    are never records. This is the number of records the file held before it was damaged
    when the damaged stretch's notes hold no line that starts like a record and the damage
    did not itself break or make the first line of a record (a line break or a quote inside
    the ids, say, or a fragment that happens to be a well-formed record of the column count:
    no reader can tell such a record cut in two from two records). Either way, rows in equals
    rows written plus rows rejected.

    Parsing resumes at the record after the last one passed on, so each byte is parsed about
    once (a few times inside damaged stretches: each field start's parse is kept), and reads
    grow with the bytes held, so a long record is not reparsed per block. A damaged stretch
    that does not resolve within :data:`_MAX_HELD` bytes makes the file unreadable
    (:class:`InputError`).
    """

    def __init__(
        self, data: Any, check: _QuoteCheck, columns: int, path: Path, block_bytes: int
    ) -> None:
        self.closed = False
        self.repaired = 0  # records rejected
        self.parsed = 0  # records parsed to a decision (a measure of work, for tests)
        self._data = data
        self._start = check.start
        self._head = check.head
        self._columns = columns
        self._path = path
        self._block = block_bytes
        body = _FIELD + rb"(?:," + _FIELD + rb"){" + str(columns - 1).encode() + rb"}"
        self._record = re.compile(body + rb"(?:\r\n|\n|\r)")
        self._last = re.compile(body + rb"(?:\r\n|\n|\r)?\Z")
        self._buf = b""
        self._ready: deque[bytes | memoryview] = deque()  # bytes passed on, not yet read
        self._rec = -1  # where the next undecided record starts in _buf (-1: the header)
        self._eof = False
        self._leading = True  # the first record is not decided yet

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes | memoryview:
        """Up to ``size`` bytes (pyarrow takes short reads and memoryviews)."""
        if size is None or size < 0:
            while not self._eof:
                self._fill()
            rest = b"".join(self._ready)
            self._ready.clear()
            return rest
        while not self._ready and not self._eof:
            self._fill()
        if not self._ready:
            return b""
        piece = self._ready[0]
        if len(piece) <= size:
            return self._ready.popleft()
        self._ready[0] = piece[size:]
        return piece[:size]

    def close(self) -> None:
        self.closed = True

    def _fill(self) -> None:
        held = len(self._buf)
        if held > _MAX_HELD:
            raise InputError(
                "cannot read the CSV file (damaged quoting: no record start after it "
                f"within {_MAX_HELD >> 20} MiB)",
                path=self._path,
            )
        chunk = self._data.read(max(self._block, held))  # grows with a long record
        self._eof = not chunk
        self._buf = self._buf + chunk if self._buf else bytes(chunk)
        self._advance()

    def _advance(self) -> None:
        """Decide the records that can be decided and pass them on, in one piece (pyarrow
        makes a batch of each piece it reads)."""
        buf, done, out = self._buf, 0, []
        memo: _Memo = {}
        if self._rec < 0:
            line = buf.find(b"\n")
            if line < 0 and not self._eof:
                return
            self._rec = len(buf) if line < 0 else line + 1  # pyarrow skips one line
        while self._rec < len(buf):
            start = rec = self._rec
            if self._leading:  # lines before the first record start belong to that record
                rec = self._first_record(start, memo)
                if rec is None:
                    break
                if _BLANK.match(buf, start).end() >= rec:  # only blank lines before it
                    start = rec
            step = None if rec >= len(buf) else self._step(rec, memo)
            if step is None and rec < len(buf):
                break
            self._leading = False
            if step is not None and not step.damaged and rec == start:
                self._rec = step.end
                continue
            reason = step.reason if step is not None else ""
            if rec > start:  # the first record, with the lines before it
                reason = MALFORMED_QUOTING if buf.find(b'"', start, rec) >= 0 else WRONG_COLUMNS
            if step is None or not step.damaged:
                to, count = len(buf) if step is None else step.end, 1
            else:
                cache = {rec: step}
                to = self._converge(rec, step, memo, cache)
                if to is None:
                    break
                count = self._count(rec, to, cache)
            out += [memoryview(buf)[done:start], _MARK_LINES[reason] * count]
            self.repaired += count
            done = self._rec = to
        if self._eof:
            self._rec = len(buf)
        out.append(memoryview(buf)[done : self._rec])
        piece = out[0] if len(out) == 1 else b"".join(out)
        if len(piece):
            self._ready.append(piece)
        self._buf = buf[self._rec :]
        self._rec = 0

    def _first_record(self, pos: int, memo: _Memo) -> int | None:
        """The first line at or after ``pos`` that starts a record (see :meth:`_is_start`;
        blank lines skipped), whatever the lines before it hold; None until more bytes are
        read."""
        buf, size = self._buf, len(self._buf)
        while True:
            starts = self._is_start(pos, memo)
            if starts is None:
                return None
            pos = _BLANK.match(buf, pos).end()  # type: ignore[union-attr]
            if starts:
                return pos
            line = buf.find(b"\n", pos)
            if line < 0:
                return size if self._eof else None
            pos = line + 1

    def _step(self, pos: int, memo: _Memo) -> _Step | None:
        """The record at ``pos`` (see :class:`_Step`); None until more bytes are read."""
        step = self._decide(pos, memo)
        self.parsed += step is not None
        return step

    def _decide(self, pos: int, memo: _Memo) -> _Step | None:
        buf, size = self._buf, len(self._buf)
        if buf[pos] in b"\r\n":  # blank lines: not a record
            end = _BLANK.match(buf, pos).end()  # type: ignore[union-attr]
            if end >= size and not self._eof:
                return None
            return _Step(end, 0, False, False, False, "")
        whole = self._record.match(buf, pos) or (self._eof and self._last.match(buf, pos))
        if whole:
            return self._passed(pos, whole.end(), True, memo)
        fields, end, inside, clean = self._parse(pos, memo)
        if not self._eof and (inside or end + _START_SPAN > size):
            return None
        shaped = not inside and clean and fields == self._columns
        if not shaped and (inside or self._first(pos, end)):
            return self._damaged(pos, end, inside, UNCLOSED_QUOTE)
        if not clean:
            return self._walk(pos, end, MALFORMED_QUOTING, memo)
        return self._passed(pos, end, shaped, memo)

    def _passed(self, pos: int, end: int, whole: bool, memo: _Memo) -> _Step | None:
        """The well-formed record at ``pos``, ending at ``end``: passed on, unless a fragment
        follows it."""
        nxt = self._is_start(end, memo)
        if nxt is None:
            return None
        if nxt:
            after = _BLANK.match(self._buf, end).end()  # type: ignore[union-attr]
            return _Step(after, 0, False, False, whole, "")
        return self._walk(pos, end, "", memo)

    def _walk(self, pos: int, end: int, reason: str, memo: _Memo) -> _Step | None:
        """The damaged record at ``pos`` (ending at ``end``, as pyarrow reads it) and the
        fragments after it, up to the next line that starts a record, or to a quote left
        open over a record start. ``reason`` is the first damage seen so far ('' if none).
        A record of the column count that does not start like one ends the walk only right
        after the damaged record: after a fragment, its ids may be the rest of a line cut
        off them (a line break inside a patient id leaves another integer)."""
        buf, at, cut = self._buf, end, False
        while True:
            starts = self._is_start(at, memo)
            if starts is None:
                return None
            at = _BLANK.match(buf, at).end()  # type: ignore[union-attr]
            if starts and (not cut or at >= len(buf) or self._head.match(buf, at)):
                return self._damaged(pos, at, True, reason or WRONG_COLUMNS)
            cut = True
            _, stop, inside, clean = self._parse(at, memo)  # parsed by _is_start
            if inside or self._first(at, stop):  # a quote left open over a record start
                return self._damaged(pos, stop, inside, reason or MALFORMED_QUOTING)
            if not clean:
                reason = reason or MALFORMED_QUOTING
            at = stop

    def _is_start(self, pos: int, memo: _Memo) -> bool | None:
        """Whether the first line at or after ``pos`` that is not blank starts a record: it
        starts like one, is a well-formed record of the file's column count, or is the file's
        end (False: a fragment); None until more bytes are read."""
        buf, size = self._buf, len(self._buf)
        pos = _BLANK.match(buf, pos).end()  # type: ignore[union-attr]
        if pos >= size:
            return True if self._eof else None
        if not self._eof and pos + _START_SPAN > size:
            return None
        if self._head.match(buf, pos):
            return True
        fields, end, inside, clean = self._parse(pos, memo)
        if not self._eof and (inside or end + _START_SPAN > size):
            return None
        return not inside and clean and fields == self._columns

    def _damaged(self, pos: int, end: int, resync: bool, reason: str) -> _Step:
        return _Step(end, self._first(pos, end), True, resync, False, reason)

    def _first(self, pos: int, end: int) -> int:
        """The first line in ``(pos, end)`` that starts like a record (0: none)."""
        m = self._start.search(self._buf, pos, end + _START_SPAN)
        return m.start() + 1 if m is not None and m.start() + 1 < end else 0

    def _parse(self, pos: int, memo: _Memo) -> tuple[int, int, bool, bool]:
        """Parse the record at ``pos`` as pyarrow does: its field count, end (the file's end
        for one left inside a quote), whether it is left inside a quote and is well formed
        (see :class:`_QuoteRepair`; the lines after it aside). What follows each field start
        is kept in ``memo``: hypotheses meet at field starts, so a damaged stretch is parsed
        about once however many of them cross it."""
        buf, end = self._buf, len(self._buf)
        starts: list[int] = []
        cleans: list[bool] = []
        while True:
            if pos in memo:
                rest_fields, stop, inside, rest_clean = memo[pos]
                break
            starts.append(pos)
            after_quote = pos < end and buf[pos] == 0x22
            if after_quote:
                pos = _QUOTED.match(buf, pos + 1, end).end()  # type: ignore[union-attr]
                if pos >= end:
                    cleans.append(True)
                    rest_fields, stop, inside, rest_clean = 0, end, True, True
                    break
                pos += 1  # pyarrow keeps what follows up to the delimiter
            stop = _UNQUOTED.match(buf, pos, end).end()  # type: ignore[union-attr]
            if after_quote:  # the closing quote is followed by a delimiter or line break
                cleans.append(stop == pos)
            else:  # no doubled quote, no quote at the end
                cleans.append(buf.find(b'""', pos, stop) < 0 and buf[stop - 1 : stop] != b'"')
            if stop < end and buf[stop] == 0x2C:
                pos = stop + 1
                continue
            if stop < end:
                stop += 2 if buf.startswith(b"\r\n", stop) else 1
            rest_fields, inside, rest_clean = 0, False, True
            break
        for start, clean in zip(reversed(starts), reversed(cleans), strict=True):
            rest_fields += 1
            rest_clean = rest_clean and clean
            memo[start] = (rest_fields, stop, inside, rest_clean)
        return rest_fields, stop, inside, rest_clean

    def _converge(self, rec: int, step: _Step, memo: _Memo, cache: dict[int, _Step]) -> int | None:
        """The first record start after the damaged record at ``rec`` that every hypothesis
        reaches (None until more bytes are read). Hypotheses are taken in file order: those
        from passed records and the explicit ends of damaged ones in a heap, the record-like
        lines inside damaged records as one stretch (all of them up to ``reach``)."""
        buf = self._buf
        starts = (m.start() + 1 for m in self._start.finditer(buf, rec))
        heap: list[int] = []
        queued: set[int] = set()
        reach, cur, cand = 0, rec, next(starts, None)
        while True:
            if step.damaged:
                reach = max(reach, step.end)
            if (not step.damaged or step.resync) and step.end not in queued:
                queued.add(step.end)
                heapq.heappush(heap, step.end)
            while cand is not None and cand <= cur:
                cand = next(starts, None)
            implicit = cand if cand is not None and cand < reach else None
            if implicit is not None and (not heap or implicit < heap[0]):
                cur = implicit
            else:
                cur = heapq.heappop(heap)
                queued.discard(cur)
                if cur == implicit:
                    cand = next(starts, None)
            while cand is not None and cand <= cur:
                cand = next(starts, None)
            if (not heap and (cand is None or cand >= reach)) or cur >= len(buf):
                return cur
            found = self._step(cur, memo)
            if found is None:
                return None
            step = cache[cur] = found

    def _count(self, pos: int, to: int, cache: dict[int, _Step]) -> int:
        """The records from ``pos`` to ``to``: a damaged record is taken to end at the first
        line inside it that starts a record of the file's shape (well formed with its column
        count, or damaged itself), else at its first record-like line, else at its end.
        Blank lines are not records. (Which lines of a damaged stretch were records cannot
        always be told.)"""
        starts = sorted({*cache, to})  # every hypothesis reaches ``to``: a record start
        count = 0
        while pos < to and pos in cache:
            count += self._buf[pos] not in b"\r\n"
            step = cache[pos]
            if not step.damaged:
                pos = step.end
                continue
            nxt = step.first or step.end
            for at in itertools.islice(starts, bisect.bisect_right(starts, pos), None):
                if at >= step.end:
                    break
                if at == to or cache[at].damaged or cache[at].whole:
                    nxt = at
                    break
            pos = nxt
        return max(count, 1)


class _Step(NamedTuple):
    """A record as :meth:`_QuoteRepair._step` finds it.

    ``end`` is where the next record starts: after the record and any blank lines for one
    passed on; for a damaged one, the end of the stretch its hypotheses lie in (the next
    record starts at a record-like line inside it, or at ``end`` itself if ``resync``).
    """

    end: int
    first: int  # the first record-like line inside it (0: none)
    damaged: bool
    resync: bool  # damaged, and the next record may start at ``end``
    whole: bool  # passed on, well formed, of the file's column count
    reason: str  # damaged: why its stretch is rejected


_Memo = dict[int, tuple[int, int, bool, bool]]
