"""Trace journals on disk (wire contract §8): an appending, rotating writer, and the one reader
of journal files (whole files and incremental tails). Records themselves are `core.records`.

Journals are opened with O_NOFOLLOW | O_NONBLOCK and must be regular files: a FIFO or a symlink
at a journal's path neither blocks a node nor feeds a reader. Lines are read in bounded chunks:
a line longer than MAX_LINE_BYTES (or one that never ends) costs at most that much memory and
counts as one malformed line.
"""
from __future__ import annotations

import os
import threading
from typing import Callable, Iterator

from .core.errors import DirectoryError
from .core.records import (ENVELOPE_FIELD_LIMIT, JOURNALED, MAX_LINE_BYTES, ControlTrace, EnvelopeTrace, HealthTrace,
                           JournalEvent, LeaseTrace, encode_line, envelope_line, parse_line)
from .fsutil import TRACES_DIR, FileRefused, ensure_private_dir, why_not_written
from .fsutil import open_regular as _open_regular

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_BACKUPS = 3
MAX_UNWRITTEN_BYTES = 16 * 1024 * 1024
FLUSH_AT_EVENTS = 20_000           # the writer's buffer is flushed inline beyond this…
FLUSH_AT_ENVELOPE_BYTES = 8 << 20  # …or beyond this many bytes of sealed envelopes held for it
_READ_CHUNK = 256 * 1024


def open_regular(path: str, flags: int, mode: int = 0o600, what: str = "journal") -> int:
    """Open a journal with fsutil.open_regular (no symlink followed, no FIFO blocked on); anything
    but a regular file is DirectoryError."""
    try:
        return _open_regular(path, flags, mode)[0]
    except FileRefused:
        raise DirectoryError(f"{what} {path} is not a regular file; remove it or choose another directory") from None


# Records of the node's state and of operators' actions, a few a minute: flushed soon (`on_rare`).
# Envelopes', messages' and threat scores' come with traffic, a sender's or an attacker's: batched.
RARE = (LeaseTrace, HealthTrace, ControlTrace)


class JournalWriter:
    """Buffers records and appends them on flush(); rotates at `max_bytes` (name.jsonl.1 …).
    Most records wait for the owner's periodic flush (one write for many); a RARE one (a lease
    event, a health report, a control request) calls `on_rare`, with which the owner flushes soon,
    so that what an operator just did is in the journal when its effect is seen."""

    def __init__(self, root: str, node: str, *, max_bytes: int = DEFAULT_MAX_BYTES,
                 backups: int = DEFAULT_BACKUPS, envelope_limit: int = ENVELOPE_FIELD_LIMIT,
                 on_problem: Callable[[str, str], None] | None = None, on_rare: Callable[[], None] | None = None):
        self.dir = ensure_private_dir(os.path.join(root, TRACES_DIR), what="trace directory")
        self.path = os.path.join(self.dir, f"{node}.jsonl")
        self.max_bytes, self.backups, self.envelope_limit = max_bytes, backups, envelope_limit
        self._lock = threading.Lock()
        self._pending: list[JournalEvent] = []
        self._pending_envelope_bytes = 0
        self._fd = self._open()
        self.records_written = 0
        self._unwritten = b""  # bytes a failed append (ENOSPC, EIO) left over, written first next time
        self.bytes_dropped = 0
        # told (event, sentence) when appends begin to fail, when records are dropped, and when
        # appends work again: a journal that silently stops is a journal nobody can trust
        self._on_problem = on_problem
        self._on_rare = on_rare
        self._failing = False

    def _open(self) -> int:
        return open_regular(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, what="trace journal")

    def __call__(self, event: object) -> None:
        """Observer entry point: keep the event; encoding waits for flush(), off the hot path,
        unless the buffer has grown past its bounds (then this caller flushes)."""
        if event.__class__ is EnvelopeTrace:  # one per envelope: the others are rare
            envelope = event.envelope
            if envelope is not None and len(envelope) > self.envelope_limit:
                event = event._replace(envelope=None)  # not journaled: do not hold it until the flush
                envelope = None
        elif isinstance(event, JOURNALED):
            envelope = None
        else:
            return
        with self._lock:
            self._pending.append(event)
            if envelope:
                self._pending_envelope_bytes += len(envelope)
            full = (len(self._pending) >= FLUSH_AT_EVENTS or self._pending_envelope_bytes >= FLUSH_AT_ENVELOPE_BYTES)
        if full:
            self.flush()
        elif self._on_rare is not None and isinstance(event, RARE):
            self._on_rare()

    def flush(self) -> None:
        problem = self._append()
        if problem is not None and self._on_problem is not None:
            self._on_problem(*problem)  # outside the lock: it may journal a health record

    def _append(self) -> tuple[str, str] | None:
        """Append what is pending; (event, sentence) when the operator should hear of it."""
        with self._lock:
            if not (self._pending or self._unwritten) or self._fd < 0:
                return None
            events, self._pending, self._pending_envelope_bytes = self._pending, [], 0
            limit, envelope = self.envelope_limit, envelope_line  # one a record: no detour through encode_line
            data = self._unwritten + "".join([envelope(e, limit) if e.__class__ is EnvelopeTrace
                                              else encode_line(e, limit) for e in events]).encode("utf-8")
            view, done = memoryview(data), 0
            start = os.fstat(self._fd).st_size  # the journal ends with a whole line here
            try:
                while done < len(data):
                    done += os.write(self._fd, view[done:])
            except OSError as exc:  # a full or failing disk loses no record while it lasts (bounded), nor the thread
                # a write cut short (a file-size limit, the last free pages) left part of a line: cut
                # back to the last whole one, so that no reader finds a torn line before the rest
                whole = data.rfind(b"\n", 0, done) + 1
                if whole < done:
                    try:
                        os.ftruncate(self._fd, start + whole)
                        done = whole
                    except OSError:
                        pass
                self._unwritten = bytes(view[done:])
                why = why_not_written(exc)
                if len(self._unwritten) > MAX_UNWRITTEN_BYTES:
                    self.bytes_dropped += len(self._unwritten)
                    self._unwritten = b""
                    self._failing = True
                    return ("journal_dropping", f"dropped trace records it could not append to {self.path} ({why}; "
                                               f"{self.bytes_dropped} bytes so far)")
                if not self._failing:
                    self._failing = True
                    return ("journal_failing", f"cannot append to its trace journal {self.path} ({why}); its "
                                               f"records wait in memory, up to {MAX_UNWRITTEN_BYTES >> 20} MiB, "
                                               "then are dropped")
                return None
            self._unwritten = b""
            self.records_written += len(events)
            if os.fstat(self._fd).st_size >= self.max_bytes:
                self._rotate()
            if self._failing:
                self._failing = False
                return ("journal_recovered", f"appends to its trace journal {self.path} again")
            return None

    def _rotate(self) -> None:
        os.close(self._fd)
        self._fd = -1
        for i in range(self.backups, 0, -1):
            src = self.path if i == 1 else f"{self.path}.{i - 1}"
            if os.path.lexists(src):
                os.replace(src, f"{self.path}.{i}")
        try:
            self._fd = self._open()
        except (OSError, DirectoryError):
            self._fd = -1  # someone put something else at the path: stop journaling, keep running

    def close(self) -> None:
        self.flush()
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


LONG = object()      # iter_lines: an over-long line ended here (one malformed line)
SKIPPED = object()   # iter_lines: bytes of an unfinished over-long line were passed over


def iter_lines(fd: int, offset: int = 0, *, final: bool = True,
               skipping: bool = False) -> Iterator[tuple[int, object]]:
    """(end offset, item) for each line of an open file from `offset`: the line's bytes, LONG for a
    line over MAX_LINE_BYTES, or, when not `final`, SKIPPED for the part of an over-long line read
    so far (resume with `skipping=True` from that offset). Memory stays within MAX_LINE_BYTES plus
    one chunk. The last line without a newline is yielded only when `final` (a whole file); a tail
    leaves it for later, as it may be a record still being written."""
    pos, buf = offset, b""
    while True:
        chunk = os.pread(fd, _READ_CHUNK, pos + len(buf))
        if not chunk:
            break
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                pos += len(chunk)
                continue
            pos += nl + 1
            skipping = False
            yield pos, LONG
            continue
        buf += chunk
        start = 0
        while (nl := buf.find(b"\n", start)) >= 0:
            line = buf[start:nl + 1]
            start = nl + 1
            yield pos + start, (line if len(line) <= MAX_LINE_BYTES else LONG)
        pos += start
        buf = buf[start:]
        if len(buf) > MAX_LINE_BYTES:
            pos, buf, skipping = pos + len(buf), b"", True
    if skipping:
        yield pos, (LONG if final else SKIPPED)
    elif buf and final:
        yield pos + len(buf), buf


def read_journal(path: str) -> tuple[list[JournalEvent], int]:
    """Every valid record of one journal file, and how many lines were not valid records.
    Raises DirectoryError when the path is not a regular file."""
    fd = open_regular(path, os.O_RDONLY)
    events, bad = [], 0
    try:
        for _, line in iter_lines(fd):
            if line is not LONG and not line.strip():
                continue
            event = None if line is LONG else parse_line(line)
            if event is None:
                bad += 1
            else:
                events.append(event)
    finally:
        os.close(fd)
    return events, bad


class JournalTail:
    """Follows one journal path across appends, rotation (a new inode) and truncation, yielding
    each complete record once. A torn last line waits until its newline arrives. Where it stands
    (the file's identity, the offset, whether inside an over-long line) is its own: readers move it
    only through `read`, `lines` and `start_near_end`."""

    def __init__(self, path: str):
        self.path = path
        self._inode: tuple[int, int] | None = None
        self._offset = 0
        self._skipping = False  # inside an over-long line that has not ended yet
        self._read_to_end: tuple[int, int, int, int] | None = None  # the file a read last took to its end
        self._stat: os.stat_result | None = None
        self.bad_lines = 0
        self.error: str | None = None  # why the path cannot be read (not a regular file, …)

    def unchanged(self, st: os.stat_result) -> bool:
        """Whether the file a stat of the path (not following a link) describes is the one the
        last read took to its end, as it was then: nothing to read, so a reader of thousands of
        journals need not open each one at every pass. Only a hint to skip: what is read is still
        opened and checked by `read`."""
        return self.error is None and self._read_to_end == (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def read(self, max_records: int = 50_000) -> list[JournalEvent]:
        """The records the path gained since the last call (at most `max_records`; the rest wait)."""
        try:
            fd = open_regular(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self.error = None
            return []
        except (DirectoryError, OSError) as exc:
            self.error = str(exc)
            return []
        self.error = None
        out: list[JournalEvent] = []
        self._read_to_end = None
        try:
            for line in self.lines(fd):
                if line is not LONG and not line.strip():
                    continue
                event = None if line is LONG else parse_line(line)
                if event is None:
                    self.bad_lines += 1
                else:
                    out.append(event)
                    if len(out) >= max_records:
                        break
            else:
                st = self._stat
                self._read_to_end = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        finally:
            os.close(fd)
        return out

    def lines(self, fd: int) -> Iterator[object]:
        """The complete lines the file open at `fd` gained since the last call (LONG for an
        over-long one), each once, the tail moving past each before it is yielded (a reader may stop
        at any line). A file of another identity (rotated, replaced) or shorter than where the tail
        stands (truncated) is read from its start."""
        st = self._stat = os.fstat(fd)
        identity = (st.st_dev, st.st_ino)
        if identity != self._inode or st.st_size < self._offset:
            self._inode, self._offset, self._skipping = identity, 0, False
        for end, line in iter_lines(fd, self._offset, final=False, skipping=self._skipping):
            self._offset, self._skipping = end, line is SKIPPED
            if line is not SKIPPED:
                yield line

    def start_near_end(self, keep_bytes: int) -> None:
        """Stand at the first line that starts in the journal's last `keep_bytes` (a console shows
        recent history at start, not a 256 MB backlog), as the tail's own reads would have left it.
        A path that cannot be read is left for `read` to report."""
        try:
            fd = open_regular(self.path, os.O_RDONLY)
        except (DirectoryError, OSError):
            return
        try:
            st = os.fstat(fd)
            if st.st_size <= keep_bytes:
                return
            pos = st.st_size - keep_bytes
            while pos < st.st_size:
                chunk = os.pread(fd, 64 * 1024, pos)
                if not chunk:
                    break
                nl = chunk.find(b"\n")
                if nl >= 0:
                    self._inode, self._offset, self._skipping = (st.st_dev, st.st_ino), pos + nl + 1, False
                    return
                pos += len(chunk)
            # no line starts there: the tail is inside one over-long line, which ends as one bad line
            self._inode, self._offset, self._skipping = (st.st_dev, st.st_ino), st.st_size, True
        finally:
            os.close(fd)
