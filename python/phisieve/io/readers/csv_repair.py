"""mimic: damaged quoting, found and cut out before pyarrow reads the file.

pyarrow's CSV parser is lenient: a quote left open runs on over the records after it, and a
closing quote followed by more text, or a quote inside a quoted field that is not doubled,
is read as text. Either way one record's note can be glued to another's, records vanish
uncounted, or a note is read cut short. :class:`_QuoteRepair` sits between the file and
pyarrow: it parses the records itself, strictly, passes well-formed ones on as they are and
replaces each damaged stretch by one mark line per record it held, which pyarrow skips as a
row of the wrong column count and :mod:`.mimic` rejects with the mark's reason.

It reads every CSV layout the reader accepts. Where a file's records start with integer ids
(:class:`_QuoteCheck`: MIMIC's ``ROW_ID,SUBJECT_ID,HADM_ID``, with TEXT alone after them or
the full NOTEEVENTS header) those give record starts to resynchronise on; where they do not
(its first column is TEXT or a string id), a well-formed record of the file's column count
does. See :class:`_QuoteRepair` for what is damage and for how the records of a damaged
stretch are counted.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import re
from collections import deque
from collections.abc import Iterator
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
_MAX_HELD = 64 << 20  # bytes held back from pyarrow while a damaged stretch is resolved
_QUOTED = re.compile(rb'[^"]*(?:""[^"]*)*')
_UNQUOTED = re.compile(rb"[^,\r\n]*")
_FIELD = rb'(?:"[^"]*(?:""[^"]*)*"|[^",\r\n]*)'  # a well-formed field (RFC 4180)
_BLANK = re.compile(rb"[\r\n]*")
_LINE_END = re.compile(rb"\r\n|\n|\r")
_ID_LINE = re.compile(rb'[0-9",]*')  # what is left of a line cut inside its integer ids
_DIGIT = re.compile(rb"[0-9]")
_LOOSE = 2  # stray delimiters or quotes a record's ids may hold and still start like a record
# How a line starts a record (see _QuoteRepair._start_kind); '' for a fragment.
_END, _HEAD, _CUT, _SHAPED = "end", "head", "cut", "shaped"


class _NeedMore(Exception):  # a signal, never raised out of _QuoteRepair
    """Raised where a decision needs bytes not read yet (caught by ``_advance``)."""


class _QuoteCheck:
    """How a file's records start.

    Parameters
    ----------
    ids
        The patterns of the file's leading integer id fields (its first columns, as many as
        are integer ids, such as MIMIC's ``ROW_ID,SUBJECT_ID,HADM_ID``); empty where its first
        column is not one.

    Attributes
    ----------
    head
        Matches a line that starts like a record: its integer ids, then a delimiter or the
        line's end (a short record of the ids alone). None where there are no ids: then a line
        starts like a record if it begins a well-formed record of the file's column count.
    start
        Finds the line break before a line that may start like a record: a digit after at
        most two delimiters or quotes (None without ids).
    last
        Matches the file's last line holding the ids alone, without a line break.
    lead
        How many id fields a record starts with (0: none).
    """

    def __init__(self, ids: list[bytes]) -> None:
        self.head: re.Pattern[bytes] | None = None
        self.start: re.Pattern[bytes] | None = None
        self.last: re.Pattern[bytes] | None = None
        self.lead = len(ids)
        if ids:
            lead = b",".join(ids)
            self.head = re.compile(lead + b"(?:,|\\r|\\n)")
            self.start = re.compile(b'\\n(?=[,"]{0,2}[0-9])')
            self.last = re.compile(lead + b"\\Z")


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
    * the line after it (blank lines aside) starts a record (:meth:`_start_kind`): it starts
      like one (its integer ids, :class:`_QuoteCheck`, or those ids with a stray delimiter or
      quote or two among them, :meth:`_loose`), begins a record whose first line a stray
      line break cut (:meth:`_broken`), is a record of the file's column count (such as one
      whose patient id is missing) or is the file's end. Any other line is a *fragment*: a
      piece of a record, cut off by a lost opening quote or a stray line break, never a
      record of its own. A record whose first line was cut is damaged, and the record before
      it is passed on only if its last field is quoted (else it may have lost its end to
      that line, and is rejected too).

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
    which is rejected with them; without integer ids nothing tells such a fragment, and the
    first line starts a record.

    Records in. How many records a damaged stretch held is counted as the hypothesis that
    ends each damaged record at the first line inside it that starts a record of the file's
    shape (well formed with its column count, or damaged itself), else at its first line that
    starts like a record, else after its fragments, counts them (at least one); fragments
    are never records, and a record whose first line was cut is one record. With integer
    ids, this is the number of records the file held before it was damaged when the damaged
    stretch's notes hold no line that starts like a record, no fragment happens to be a
    well-formed record of the column count (no reader can tell such a record cut in two
    from two records) and the damage left no record's ids without a digit that starts them
    (a line break, delimiter or quote among the ids is told from a record's text: see
    :meth:`_loose` and :meth:`_broken`). Without integer ids, a record damaged on its first
    line is a fragment of the one before it, and the two are counted as one. Either way,
    rows in equals rows written plus rows rejected.

    A damage that leaves the file well formed (both quotes lost between two records whose
    only quoted field is their last, say) is no damage an RFC 4180 reader can see: the file
    is read as written.

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
        self._ids_last = check.last
        self._lead = check.lead
        self._alone = True  # no record runs on into the line at _rec (see _broken)
        self._cuts: dict[int, int] = {}  # record starts found cut (see _broken): the rest
        self._rests: set[int] = set()  # the rests of those: no record starts there
        self._likes: dict[int, bool] = {}  # without ids: whether a line starts like a record
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
        self._likes, self._cuts, self._rests = {}, {}, set()
        if self._rec < 0:
            line = buf.find(b"\n")
            if line < 0 and not self._eof:
                return
            self._rec = len(buf) if line < 0 else line + 1  # pyarrow skips one line
        while self._rec < len(buf):
            start = rec = self._rec
            try:
                if self._leading:  # lines before the first record start belong to it
                    rec = self._first_record(start, memo)
                    if rec is None:
                        break
                    if _BLANK.match(buf, start).end() >= rec:  # only blank lines before it
                        start = rec
                    else:
                        self._alone = False
                step = None if rec >= len(buf) else self._step(rec, memo, self._alone)
                if step is None and rec < len(buf):
                    break
                to, count = len(buf) if step is None else step.end, 1
                if step is not None and step.damaged:
                    cache = {rec: step}
                    found = self._converge(rec, step, memo, cache)
                    if found is None:
                        break
                    to, count = found, self._count(rec, found, cache)
            except _NeedMore:
                break
            self._leading = False
            if step is not None and not step.damaged and rec == start:
                self._rec, self._alone = step.end, step.quoted
                continue
            self._alone = True  # every reading of the damage starts a record at ``to``
            reason = step.reason if step is not None else ""
            if rec > start:  # the first record, with the lines before it
                reason = MALFORMED_QUOTING if buf.find(b'"', start, rec) >= 0 else WRONG_COLUMNS
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
        """The first line at or after ``pos`` that starts a record (see :meth:`_start_kind`;
        blank lines skipped), whatever the lines before it hold; None until more bytes are
        read. Without integer ids nothing tells a fragment from a record there: the first
        line that is not blank."""
        buf, size = self._buf, len(self._buf)
        if self._head is None:
            pos = _BLANK.match(buf, pos).end()  # type: ignore[union-attr]
            return pos if pos < size or self._eof else None
        alone = True  # the header's line break is no record's
        while True:
            kind = self._start_kind(pos, memo, alone)
            if kind is None:
                return None
            pos = _BLANK.match(buf, pos).end()  # type: ignore[union-attr]
            if kind:
                return pos
            line = buf.find(b"\n", pos)
            if line < 0:
                return size if self._eof else None
            pos, alone = line + 1, False

    def _step(self, pos: int, memo: _Memo, alone: bool = False) -> _Step | None:
        """The record at ``pos`` (see :class:`_Step`); None until more bytes are read.
        ``alone``: no record before it may run on into its line (see :meth:`_broken`)."""
        step = self._decide(pos, memo, alone)
        self.parsed += step is not None
        return step

    def _decide(self, pos: int, memo: _Memo, alone: bool) -> _Step | None:
        buf, size = self._buf, len(self._buf)
        if buf[pos] in b"\r\n":  # blank lines: not a record
            end = _BLANK.match(buf, pos).end()  # type: ignore[union-attr]
            if end >= size and not self._eof:
                return None
            return _Step(end, 0, False, False, False, "")
        whole = self._whole(pos)
        if whole:
            return self._passed(pos, whole.end(), True, memo)
        if self._head is None or not self._head.match(buf, pos):
            if not self._eof and pos + _START_SPAN > size:
                return None
            rest = self._cut(pos, memo, alone)
            if rest is None:
                return None
            if rest:
                return self._cut_start(pos, rest, memo)
        fields, end, inside, clean = self._parse(pos, memo)
        if not self._eof and (inside or end + _START_SPAN > size):
            return None
        shaped = not inside and clean and fields == self._columns
        if not shaped and (inside or self._first(pos, end, memo)):
            return self._damaged(pos, end, inside, UNCLOSED_QUOTE, memo)
        if not clean:
            return self._walk(pos, end, MALFORMED_QUOTING, memo)
        return self._passed(pos, end, shaped, memo)

    def _cut_start(self, pos: int, rest: int, memo: _Memo) -> _Step | None:
        """The record at ``pos`` whose first line a line break cut before ``rest`` (see
        :meth:`_broken`): damaged, with the record parsed on from ``rest`` and any fragments
        after it. ``rest`` is not a record start of its own in any reading."""
        _, end, inside, clean = self._parse(rest, memo)
        if not self._eof and (inside or end + _START_SPAN > len(self._buf)):
            return None
        first = self._first(rest, end, memo)
        if inside or first:  # a quote left open over a record start
            return _Step(end, first, True, inside, False, UNCLOSED_QUOTE)
        quoted = not clean or self._buf.find(b'"', pos, rest) >= 0
        reason = MALFORMED_QUOTING if quoted else WRONG_COLUMNS
        return self._walk(pos, end, reason, memo, rest)

    def _passed(self, pos: int, end: int, whole: bool, memo: _Memo) -> _Step | None:
        """The well-formed record at ``pos``, ending at ``end``: passed on, unless a fragment
        follows it, or a record whose first line was cut (:meth:`_broken`) follows a last
        field that is not quoted (which may have lost its end to that line: both rejected)."""
        quoted = self._quoted_end(end)
        kind = self._start_kind(end, memo, quoted, after=True)
        if kind is None:
            return None
        after = _BLANK.match(self._buf, end).end()  # type: ignore[union-attr]
        if kind == _CUT and not quoted:
            return self._damaged(pos, after, True, WRONG_COLUMNS, memo)
        if kind:
            return _Step(after, 0, False, False, whole, "", quoted)
        return self._walk(pos, end, "", memo)

    def _whole(self, pos: int) -> re.Match[bytes] | None:
        """The well-formed record of the file's column count at ``pos``, if there is one (and
        its line break, or the file's end)."""
        buf = self._buf
        return self._record.match(buf, pos) or (self._last.match(buf, pos) if self._eof else None)

    def _quoted_end(self, end: int) -> bool:
        """Whether the record ending at ``end`` (after its line break) ends in a quoted field."""
        buf = self._buf
        at = end - 2 if buf.startswith(b"\r\n", end - 2) else end - 1
        if buf[at : at + 1] not in (b"\n", b"\r"):
            at = end  # the file's end, without a line break
        return buf[at - 1 : at] == b'"'

    def _walk(self, pos: int, end: int, reason: str, memo: _Memo, skip: int = 0) -> _Step | None:
        """The damaged record at ``pos`` (ending at ``end``, as pyarrow reads it) and the
        fragments after it, up to the next line that starts a record, or to a quote left
        open over a record start. ``reason`` is the first damage seen so far ('' if none).
        Where the file's records start with integer ids, a record of the column count that
        does not start like one ends the walk only right after the damaged record: after a
        fragment, its ids may be the rest of a line cut off them (a line break inside a
        patient id leaves another integer). Record-like lines inside it count from ``skip``
        on (see :meth:`_cut_start`)."""
        buf, at, cut = self._buf, end, False
        while True:
            kind = self._start_kind(at, memo)
            if kind is None:
                return None
            at = _BLANK.match(buf, at).end()  # type: ignore[union-attr]
            if kind == _SHAPED and self._head is not None and cut:
                kind = ""  # a well-formed record that does not start like one ends the walk
                # only right after the damaged record
            if kind:
                return self._damaged(pos, at, True, reason or WRONG_COLUMNS, memo, skip)
            cut = True
            _, stop, inside, clean = self._parse(at, memo)  # parsed by _start_kind
            if inside or self._first(at, stop, memo):  # a quote left open over a record start
                reason = reason or MALFORMED_QUOTING
                return self._damaged(pos, stop, inside, reason, memo, skip)
            if not clean:
                reason = reason or MALFORMED_QUOTING
            at = stop

    def _start_kind(
        self, pos: int, memo: _Memo, alone: bool = False, after: bool = False
    ) -> str | None:
        """How the first line at or after ``pos`` that is not blank starts a record: it is the
        file's end (``end``), starts like one (``head``: its integer ids, or ids with a stray
        delimiter or quote among them, see :meth:`_loose`), begins a record whose first line
        a line break cut (``cut``, see :meth:`_broken`; ``alone``: no record before it may
        run on into it) or is a well-formed record of the file's column count (``shaped``:
        with ids, not one whose quotes hold a line that starts like a record, a quote left
        open over it; without, not the rest of a cut record, see :meth:`_joined`, which a
        line right ``after`` a well-formed record never is); '' if none of these (a
        fragment); None until more bytes are read."""
        buf, size = self._buf, len(self._buf)
        pos = _BLANK.match(buf, pos).end()  # type: ignore[union-attr]
        if pos >= size:
            return _END if self._eof else None
        if not self._eof and pos + _START_SPAN > size:
            return None
        head, last = self._head, self._ids_last
        if head is not None and (head.match(buf, pos) or (self._eof and last.match(buf, pos))):
            return _HEAD
        rest = self._cut(pos, memo, alone)
        if rest is None:
            return None
        if rest:
            return _CUT
        if self._loose(buf[pos : pos + _START_SPAN]):
            return _HEAD
        whole = self._whole(pos)
        if whole:
            shaped, end = True, whole.end()
        else:
            fields, end, inside, clean = self._parse(pos, memo)
            if not self._eof and (inside or end + _START_SPAN > size):
                return None
            shaped = not inside and clean and fields == self._columns
        if shaped and self._head is not None and self._first(pos, end, memo):
            shaped = False  # its quotes hold a line that starts like a record: left open?
        if shaped:
            joined = False if after else self._joined(pos, memo)
            if joined is None:
                return None
            if not joined:
                return _SHAPED
        return ""

    def _cut(self, pos: int, memo: _Memo, alone: bool = False) -> int | None:
        """:meth:`_broken`, kept: a record start found cut stays one, and none of the lines
        after its first piece, up to its rest, is a record start."""
        rest = self._cuts.get(pos) or self._broken(pos, memo, alone)
        if rest and pos not in self._cuts:
            self._cuts[pos] = rest
            self._rests.update(m.end() for m in _LINE_END.finditer(self._buf, pos, rest))
        return rest

    def _broken(self, pos: int, memo: _Memo, alone: bool = False) -> int | None:
        """Where the rest of a record starts whose first line a line break cut, if the line at
        ``pos`` (not blank, not starting like a record) is its first piece; 0 if not; None
        until more bytes are read.

        With integer ids: the line does not start like a record (see :meth:`_loose`), and
        it, and any lines after it, hold nothing but what ids are made of (digits, quotes,
        delimiters), a digit among them, and joined with the line after them they start like
        a record, which that line does not on its own unless ``alone`` (the line at ``pos``
        starts a record: no record runs on into it past the header, or past its closing
        quote into a line of ids). Without: the line is a record of its own, not a
        well-formed one of the file's column count, and joined with the next line (and the
        rest of the record that line starts) it is one.
        """
        buf, size = self._buf, len(self._buf)
        if self._head is not None:
            limit = min(size, pos + _START_SPAN)
            if self._loose(buf[pos:limit]):  # it starts like a record itself
                return 0
            joined, at = b"", pos
            while True:
                brk = _LINE_END.search(buf, at, limit)
                if brk is None or not _ID_LINE.fullmatch(buf, at, brk.start()):
                    return 0
                joined += buf[at : brk.start()]
                at = brk.end()
                digit = _DIGIT.search(joined) is not None
                if at >= size or (self._head.match(buf, at) and not (alone and digit)):
                    return 0
                if digit and self._loose(joined + buf[at:limit]):
                    return at
        if self._whole(pos):  # a record on its own
            return 0
        fields, at, inside, clean = self._parse(pos, memo)
        if not self._eof and (inside or at >= size):
            return None
        brk = _LINE_END.search(buf, pos, at)
        if inside or brk is None or brk.end() != at or at >= size or buf[at] in b"\r\n":
            return 0  # not a single line, or no line after it
        if clean and fields == self._columns:  # a record on its own
            return 0
        _, end, inside, _ = self._parse(at, memo)
        if not self._eof and (inside or end >= size):
            return None
        joined = buf[pos : brk.start()] + buf[at:end]
        whole = self._record.fullmatch(joined) or (end >= size and self._last.match(joined))
        return at if whole and not inside else 0

    def _loose(self, line: bytes) -> bool:
        """With integer ids: whether ``line`` starts like a record, or would but for stray
        delimiters or quotes among its ids (at most :data:`_LOOSE`)."""
        head = self._head
        if head is None:
            return False
        if head.match(line):
            return True
        ids = _ID_LINE.match(line).end()  # type: ignore[union-attr]
        stray = [k for k in range(ids) if line[k] in b',"']
        if len(stray) > 3 * self._lead + _LOOSE:  # more than ids quoted, and strays, hold
            return False
        for n in range(1, _LOOSE + 1):
            for drop in itertools.combinations(stray, n):
                kept = bytes(b for k, b in enumerate(line) if k not in drop)
                if head.match(kept):
                    return True
        return False

    def _joined(self, pos: int, memo: _Memo) -> bool | None:
        """Without integer ids: whether the line at ``pos`` is the rest of a record whose first
        line was cut (the line before it is its first piece, see :meth:`_broken`); None until
        more bytes are read."""
        buf = self._buf
        if self._head is not None or pos == 0 or buf[pos - 1] not in b"\r\n":
            return False
        end = pos - 2 if buf.startswith(b"\r\n", pos - 2) else pos - 1
        line = buf.rfind(b"\n", 0, end) + 1
        line = buf.rfind(b"\r", line, end) + 1 or line
        if line >= end:  # a blank line
            return False
        rest = self._cut(line, memo)
        return None if rest is None else rest == pos

    def _damaged(
        self, pos: int, end: int, resync: bool, reason: str, memo: _Memo, skip: int = 0
    ) -> _Step:
        return _Step(end, self._first(max(pos, skip), end, memo), True, resync, False, reason)

    def _first(self, pos: int, end: int, memo: _Memo) -> int:
        """The first line in ``(pos, end)`` that starts like a record (0: none)."""
        at = next(self._like_lines(pos, memo, end), 0)
        return at if at < end else 0

    def _like_lines(self, pos: int, memo: _Memo, limit: int | None = None) -> Iterator[int]:
        """The lines after ``pos`` (and before ``limit``) that start like a record, in order:
        with integer ids, those ``head`` matches, or would but for a stray delimiter or quote
        (:meth:`_loose`), or that begin a record whose first line was cut (:meth:`_broken`);
        without, those :meth:`_start_kind` takes for a record start. Of a record whose first
        line was cut, its first piece, not the rest. The rest of a
        record found cut is none. Raises :class:`_NeedMore` where that cannot be told from
        the bytes read."""
        buf, rests = self._buf, self._rests
        if self._start is not None:
            for m in self._start.finditer(buf, pos):
                at = m.start() + 1
                if limit is not None and at >= limit:
                    return
                if at in rests:
                    continue
                if self._loose(buf[at : at + _START_SPAN]) or self._cut(at, memo):
                    yield at
            return
        likes = self._likes
        at = buf.find(b"\n", pos)
        while at >= 0:
            at += 1
            if limit is not None and at >= limit:
                return
            like = likes.get(at)
            if like is None:
                if at >= len(buf):
                    if not self._eof:
                        raise _NeedMore
                    return
                kind = "" if buf[at] in b"\r\n" else self._start_kind(at, memo)
                if kind is None:
                    raise _NeedMore
                like = likes[at] = kind in (_CUT, _SHAPED)
            if like and at not in rests:
                yield at
            at = buf.find(b"\n", at)

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
        starts = self._like_lines(rec, memo)
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
        count, or holding a quote, as a record's quoted TEXT does and a line of a table
        does not, or damaged itself), else at its first record-like line, else at its end.
        Blank lines are not records. (Which lines of a damaged stretch were records cannot
        always be told: a note's lines may start like records, as a table's do.)"""
        starts = sorted({*cache, to})  # every hypothesis reaches ``to``: a record start
        buf, count = self._buf, 0
        while pos < to and pos in cache:
            count += buf[pos] not in b"\r\n"
            step = cache[pos]
            if not step.damaged:
                pos = step.end
                continue
            nxt = step.first or step.end
            for at in itertools.islice(starts, bisect.bisect_right(starts, pos), None):
                if at >= step.end:
                    break
                found = cache.get(at)
                if (
                    found is None
                    or found.damaged
                    or found.whole
                    or buf.find(b'"', at, found.end) >= 0
                ):
                    nxt = at  # ``to``, or a record of the file's shape
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
    quoted: bool = False  # passed on, its last field quoted: no line after it is its own


_Memo = dict[int, tuple[int, int, bool, bool]]
