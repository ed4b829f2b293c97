"""The journals as history, for time travel: every ``NAME.jsonl`` and its rotated backups
(``NAME.jsonl.1`` …), read with the runtime's reader (``journal.open_regular``, ``JournalTail``,
``iter_lines``: regular files only, lines bounded at 4 MiB; ``core.records.parse_line``).

- Lease and health records of every journal are collected once, then only new bytes are read
  (files are followed by inode, so a rotation neither loses nor repeats them); the newest
  ``max_lifecycle`` are kept.
- Envelope records around a moment are found by bisecting each file on time (journals are
  appended in time order, give or take a flush), so a step costs a few reads per file however
  large the journals are; a file whose time span misses the window is not read at all.
"""

from __future__ import annotations

import os
import re
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from speed_runtime.core.errors import SpeedError
from speed_runtime.core.records import parse_line
from speed_runtime.fsutil import TRACES_DIR
from speed_runtime.journal import LONG, JournalTail, iter_lines, open_regular

from ..models.traces import TraceRecord, record_of

JOURNAL_NAME = re.compile(r"^.+\.jsonl(\.\d+)?$")
ENVELOPE_PREFIX = b'{"kind":"envelope"'  # how the runtime writes an envelope record: skipped unparsed here
SLACK = 5.0  # records are flushed in batches: a record may be this much out of time order
BISECT_STOP = 1 << 20  # bisect down to this many bytes, then read on


class JournalHistory:
    def __init__(self, root: Path | str, max_lifecycle: int = 50_000, max_window: int = 50_000) -> None:
        self.dir = Path(root) / TRACES_DIR
        self.lifecycle: deque[TraceRecord] = deque(maxlen=max_lifecycle)
        self.max_window = max_window  # envelope records kept per window query, nearest the moment first
        self.problems: dict[str, str] = {}  # file name → why it is skipped
        self._tails: dict[tuple[int, int], JournalTail] = {}  # (dev, inode) → where reading it stands
        self._spans: dict[tuple[int, int, int], tuple[float, float] | None] = {}  # (dev, inode, size) → first, last ts
        self._lock = threading.Lock()  # a step taken while the previous one still reads waits for it

    def _files(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.dir) if JOURNAL_NAME.match(n))
        except OSError:
            return []

    def _open(self, name: str) -> int | None:
        try:
            fd = open_regular(str(self.dir / name), os.O_RDONLY)
        except FileNotFoundError:
            return None
        except (SpeedError, OSError) as exc:
            self.problems[name] = str(exc)
            return None
        self.problems.pop(name, None)
        return fd

    def _opened(self) -> Iterator[tuple[str, int, os.stat_result]]:
        """Each journal, open (its name, descriptor and facts), closed once the caller is done with it."""
        for name in self._files():
            fd = self._open(name)
            if fd is None:
                continue
            try:
                yield name, fd, os.fstat(fd)
            finally:
                os.close(fd)

    # ------------------------------------------------------------------ lease and health records
    def refresh(self) -> list[TraceRecord]:
        """Read what the journals gained since the last call; returns every lifecycle record kept."""
        with self._lock:
            return self._refresh()

    def _refresh(self) -> list[TraceRecord]:
        alive = set()
        for name, fd, st in self._opened():
            ident = (st.st_dev, st.st_ino)
            alive.add(ident)
            tail = self._tails.get(ident)
            if tail is None:
                tail = self._tails[ident] = JournalTail(str(self.dir / name))
            for line in tail.lines(fd):
                if line is LONG or line.startswith(ENVELOPE_PREFIX):
                    continue
                rec = record_of(parse_line(line))
                if rec is not None and rec.kind in ("lease", "health"):  # what time travel reconstructs
                    self.lifecycle.append(rec)
        for gone in set(self._tails) - alive:
            del self._tails[gone]
        return sorted(self.lifecycle, key=lambda r: r.ts)

    # ------------------------------------------------------------------ envelope records around a moment
    def window(self, start: float, end: float, at: float) -> tuple[list[TraceRecord], int]:
        """Envelope records with ``start <= ts <= end`` from every journal, the ``max_window``
        nearest ``at`` (sealed bytes left out), and how many the window held in all."""
        with self._lock:
            return self._window(start, end, at)

    def _window(self, start: float, end: float, at: float) -> tuple[list[TraceRecord], int]:
        found: list[TraceRecord] = []
        total = 0
        seen = set()
        for _, fd, st in self._opened():
            if (st.st_dev, st.st_ino) in seen:
                continue  # one file under two names, in the middle of a rotation
            seen.add((st.st_dev, st.st_ino))
            span = self._span(fd, st)
            if span is None or span[1] < start - SLACK or span[0] > end + SLACK:
                continue
            got, n = _read_window(fd, st.st_size, start, end, at, self.max_window)
            found.extend(got)
            total += n
        if len(found) > self.max_window:
            found.sort(key=lambda r: abs(r.ts - at))
            del found[self.max_window:]
        found.sort(key=lambda r: r.ts)
        return found, total

    def _span(self, fd: int, st: os.stat_result) -> tuple[float, float] | None:
        key = (st.st_dev, st.st_ino, st.st_size)
        if key not in self._spans:
            if len(self._spans) > 1024:
                self._spans.clear()
            first = _ts_from(fd, 0)
            last = _ts_from(fd, max(0, st.st_size - 64 * 1024), newest=True)
            self._spans[key] = None if first is None or last is None else (min(first, last), max(first, last))
        return self._spans[key]


def _ts_from(fd: int, offset: int, newest: bool = False, lines: int = 64) -> float | None:
    """The time of the first valid record starting after ``offset`` (of the last one read, with
    ``newest``), looking at no more than ``lines`` lines."""
    found = None
    for i, (_end, line) in enumerate(iter_lines(fd, offset)):
        if i == 0 and offset > 0:
            continue  # the rest of a line that began before the offset
        event = None if line is LONG else parse_line(line)
        if event is not None:
            found = event.ts
            if not newest:
                return found
        if not newest and i >= lines:
            return None
    return found


def _read_window(fd: int, size: int, start: float, end: float, at: float,
                 cap: int) -> tuple[list[TraceRecord], int]:
    """The envelope records of one file in [start, end]: at most ``cap`` on each side of ``at``
    (the nearest), and how many there are in all."""
    lo, hi = 0, size
    while hi - lo > BISECT_STOP:  # the last offset whose next record is older than the window
        mid = (lo + hi) // 2
        ts = _ts_from(fd, mid)
        if ts is not None and ts < start - SLACK:
            lo = mid
        else:
            hi = mid
    before: deque[TraceRecord] = deque(maxlen=cap)
    after: list[TraceRecord] = []
    total = 0
    for i, (_end, line) in enumerate(iter_lines(fd, lo)):
        if (i == 0 and lo > 0) or line is LONG:
            continue
        event = parse_line(line)
        if event is None:
            continue
        if event.ts > end + SLACK:
            break
        if start <= event.ts <= end and getattr(event, "kind", "") == "envelope":
            total += 1
            if event.ts <= at or len(after) < cap:
                rec = record_of(event, keep_envelope=False)
                if rec is not None:
                    (before.append if rec.ts <= at else after.append)(rec)
    return [*before, *after], total
