"""Which bytes of the trace journals are new since the last ingest (no Spark here).

A journal is known by its *head*: a digest of its first line. The runtime rotates by renaming
(``NAME.jsonl`` -> ``NAME.jsonl.1`` -> ...; speed_runtime/journal.py), so a rotated journal keeps
its head under its new name and is read on from where the last ingest stopped; a truncated or
replaced journal starts with a new first line, so it is a new journal read from its start; a copy
of a journal (same head) is read once. Only complete lines are taken: a torn last line (no
newline yet) waits for the next run.

    plan = scan(["/dev/shm/speed/speed_traces"], state_files)   # state_files: head -> entry
    for r in plan.ranges: copy r.path[r.start:r.end]            # then commit plan.files
"""
from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field

#: the head of a journal is its first line, or its first HEAD_LIMIT bytes if that line is longer
HEAD_LIMIT = 64 * 1024
#: how far back from the end a scan looks for the last newline at a time
TAIL_STEP = 64 * 1024


@dataclass(frozen=True)
class Range:
    path: str
    start: int
    end: int           # just after the last complete line

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass
class Plan:
    ranges: list[Range] = field(default_factory=list)
    files: dict = field(default_factory=dict)        # head -> {"path", "offset"} after the ingest
    waiting: list[str] = field(default_factory=list)  # journals with no complete first line yet
    rotated: list[str] = field(default_factory=list)  # "old path -> new path"
    replaced: list[str] = field(default_factory=list)  # paths whose journal was truncated/replaced
    skipped: list[str] = field(default_factory=list)  # not regular files, unreadable, copies

    @property
    def new_bytes(self) -> int:
        return sum(r.size for r in self.ranges)


def journal_files(inputs: list[str]) -> list[str]:
    """Regular files of the input directories (or the files given), Spark's naming rule: names
    starting with '.' or '_' are ignored."""
    out: list[str] = []
    for p in inputs:
        if os.path.isdir(p):
            for name in sorted(os.listdir(p)):
                if not name.startswith((".", "_")):
                    out.append(os.path.join(p, name))
        else:
            out.append(p)
    return out


def read_head(fd: int, size: int) -> str | None:
    """The head digest of an open journal, or None while its first line is incomplete."""
    data = os.pread(fd, min(size, HEAD_LIMIT), 0)
    nl = data.find(b"\n")
    if nl >= 0:
        data = data[:nl + 1]
    elif len(data) < HEAD_LIMIT:
        return None
    return hashlib.sha256(data).hexdigest()[:32]


def last_line_end(fd: int, start: int, size: int) -> int:
    """Just after the last newline in [start, size) of the file, or start if there is none."""
    pos = size
    while pos > start:
        lo = max(start, pos - TAIL_STEP)
        chunk = os.pread(fd, pos - lo, lo)
        nl = chunk.rfind(b"\n")
        if nl >= 0:
            return lo + nl + 1
        pos = lo
    return start


def scan(inputs: list[str], known: dict) -> Plan:
    """What to ingest from the journals now, given `known` (head -> {"path", "offset"}) from the
    last ingest. `known` is not changed; plan.files is the state to keep once the ranges are in."""
    plan = Plan(files={h: dict(e) for h, e in known.items()})
    by_path = {e["path"]: h for h, e in known.items()}
    seen: dict[str, tuple[str, int, int]] = {}       # head -> (path, size, end) of the longest copy
    for path in journal_files(inputs):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            plan.skipped.append(path)       # gone since the listing, a symlink, unreadable
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                plan.skipped.append(path)   # a FIFO, a device: never read
                continue
            head = read_head(fd, st.st_size)
            if head is None:
                plan.waiting.append(path)
                continue
            old = known.get(head)
            start = old["offset"] if old else 0
            end = last_line_end(fd, start, st.st_size) if st.st_size > start else start
        finally:
            os.close(fd)
        prev = seen.get(head)
        if prev is not None:        # two files, one journal: read the longer, the known name on a tie
            known_path = (known.get(head) or {}).get("path")
            keep_prev = prev[2] > end or (prev[2] == end and path != known_path)
            plan.skipped.append(path if keep_prev else prev[0])
            if keep_prev:
                continue
        seen[head] = (path, st.st_size, end)
    for head, (path, _size, end) in seen.items():
        old = known.get(head)
        start = old["offset"] if old else 0
        if old and old["path"] != path:
            plan.rotated.append(f"{old['path']} -> {path}")
        prior = by_path.get(path)
        if prior is not None and prior != head and prior not in seen:
            plan.replaced.append(path)      # this name now holds another journal
        if end > start:
            plan.ranges.append(Range(path, start, end))
        plan.files[head] = {"path": path, "offset": max(start, end)}
    return plan


def copy_range(r: Range, out_fd: int, buffer: int = 1 << 20) -> int:
    """Append the bytes of r at out_fd's position (the kernel copies where it can)."""
    with open(r.path, "rb", buffering=0) as src:
        src_fd, done = src.fileno(), 0
        try:
            while done < r.size:
                n = os.sendfile(out_fd, src_fd, r.start + done, r.size - done)
                if n == 0:
                    break
                done += n
        except OSError:
            pass                            # no sendfile between these files: copy by hand
        while done < r.size:
            chunk = os.pread(src_fd, min(buffer, r.size - done), r.start + done)
            if not chunk:
                break
            done += os.write(out_fd, chunk)
    if done != r.size:
        raise OSError(f"{r.path} became shorter while it was read")
    return done
