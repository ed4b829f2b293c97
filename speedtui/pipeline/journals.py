"""Which bytes of the trace journals are new since the last ingest (no Spark here).

A journal is known by its *head*: a digest of its first line. The runtime rotates by renaming
(``NAME.jsonl`` -> ``NAME.jsonl.1`` -> ...; speed_runtime/journal.py), so a rotated journal keeps
its head under its new name and is read on from where the last ingest stopped; a truncated or
replaced journal starts with a new first line, so it is a new journal read from its start; a copy
of a journal (same head) is read once. Only complete lines are taken: a torn last line (no
newline yet) waits for the next run.

    plan = scan(["/dev/shm/speed/speed_traces"], state_files, staging)   # state_files: head -> entry
    Spark reads plan.staged; then commit plan.files

Every journal is opened once, without following a symbolic link (``openat`` under the directory's
descriptor, ``O_NOFOLLOW``), checked with ``fstat`` to be a regular file, and its new bytes are
copied into the staging directory through that same descriptor: a name swapped for a link or
another file after the check is never read. Spark (embedded, on a cluster or behind Spark Connect)
reads only the staged copies, which belong to the analysis.
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
#: staged copies are joined into bundles of about this many bytes: Spark opens every file it reads
#: and, given more than 32 paths, lists them in a job of one task per path, so 5,000 journals of a
#: few hundred bytes each took 40 s to analyse where one file holding their lines took 16 s
BUNDLE_BYTES = 64 * 1024 * 1024
#: the endings Spark (Hadoop) reads as compressed: such copies stay files of their own
_COMPRESSED = (".gz", ".bz2", ".deflate", ".lz4", ".snappy", ".zst", ".br", ".lzo", ".xz")


@dataclass(frozen=True)
class Range:
    path: str
    start: int
    end: int           # just after the last complete line
    staged: str = ""   # the copy of [start, end) in the staging directory

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
    def staged(self) -> list[str]:
        return [r.staged for r in self.ranges]

    @property
    def new_bytes(self) -> int:
        return sum(r.size for r in self.ranges)


def journal_files(inputs: list[str], follow_top: bool = False):
    """(path, directory descriptor or None, name) of the regular-looking entries of the input
    directories, or of the files given; Spark's naming rule: names starting with '.' or '_' are
    ignored. An input directory is opened without following a link unless follow_top (an operator's
    explicit path); the caller closes nothing: the descriptors are closed when the generator ends."""
    for p in inputs:
        try:
            dfd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow_top else os.O_NOFOLLOW))
        except OSError:
            yield p, None, p                 # a file given by name (or not a directory): opened as given
            continue
        try:
            for name in sorted(os.listdir(dfd)):
                if not name.startswith((".", "_")):
                    yield os.path.join(p, name), dfd, name
        finally:
            os.close(dfd)


def open_checked(dir_fd: int | None, name: str) -> tuple[int, os.stat_result] | None:
    """(descriptor, stat) of a regular file, opened without following a link; None for a link, a
    FIFO, a device, or what cannot be opened. The descriptor is the only way the file is read."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, st


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


def scan(inputs: list[str], known: dict, staging: str) -> Plan:
    """What to ingest from the journals now, given `known` (head -> {"path", "offset"}) from the
    last ingest; the new bytes are copied into the directory `staging` through the descriptor that
    was checked. `known` is not changed; plan.files is the state to keep once the ranges are in."""
    os.makedirs(staging, mode=0o700, exist_ok=True)
    plan = Plan(files={h: dict(e) for h, e in known.items()})
    by_path = {e["path"]: h for h, e in known.items()}
    seen: dict[str, Range] = {}                      # head -> the longest copy's range
    copies = 0
    for path, dir_fd, name in journal_files(inputs):
        opened = open_checked(dir_fd, name)
        if opened is None:
            plan.skipped.append(path)       # gone since the listing, a symlink, a FIFO, unreadable
            continue
        fd, st = opened
        try:
            head = read_head(fd, st.st_size)
            if head is None:
                plan.waiting.append(path)
                continue
            old = known.get(head)
            start = old["offset"] if old else 0
            end = last_line_end(fd, start, st.st_size) if st.st_size > start else start
            prev = seen.get(head)
            if prev is not None:    # two files, one journal: read the longer, the known name on a tie
                known_path = (known.get(head) or {}).get("path")
                keep_prev = prev.end > end or (prev.end == end and path != known_path)
                plan.skipped.append(path if keep_prev else prev.path)
                if keep_prev:
                    continue
                if prev.staged:
                    os.unlink(prev.staged)
            staged = ""
            if end > start:
                staged = os.path.join(staging, f"{copies:06d}.jsonl")
                copies += 1
                copy_fd(fd, start, end, staged, path)
            seen[head] = Range(path, start, end, staged)
        finally:
            os.close(fd)
    for head, r in seen.items():
        old = known.get(head)
        start = old["offset"] if old else 0
        if old and old["path"] != r.path:
            plan.rotated.append(f"{old['path']} -> {r.path}")
        prior = by_path.get(r.path)
        if prior is not None and prior != head and prior not in seen:
            plan.replaced.append(r.path)    # this name now holds another journal
        if r.end > start:
            plan.ranges.append(r)
        plan.files[head] = {"path": r.path, "offset": max(start, r.end)}
    return plan


def stage_whole(inputs: list[str], staging: str, follow_top: bool = True) -> tuple[list[str], list[str]]:
    """Copy every journal of the local inputs (files, or directories' regular files; links inside a
    directory are never followed) into `staging` through its checked descriptor, keeping its name's
    ending (.gz stays compressed for Spark). Returns (staged paths, skipped paths)."""
    os.makedirs(staging, mode=0o700, exist_ok=True)
    staged: list[str] = []
    skipped: list[str] = []
    for path, dir_fd, name in journal_files(inputs, follow_top=follow_top):
        if dir_fd is None:                  # a file the operator named: its name may be a link they chose
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                st = os.fstat(fd)
            except OSError:
                skipped.append(path)
                continue
            if not stat.S_ISREG(st.st_mode):
                os.close(fd)
                skipped.append(path)
                continue
            opened = (fd, st)
        else:
            opened = open_checked(dir_fd, name)
        if opened is None:
            skipped.append(path)
            continue
        fd, st = opened
        try:
            out = os.path.join(staging, f"{len(staged):06d}-{os.path.basename(path)}")
            copy_fd(fd, 0, st.st_size, out, path)
            staged.append(out)
        finally:
            os.close(fd)
    return staged, skipped


def stage_tails(inputs: list[str], staging: str, per_journal: int, limit: int) -> list[str]:
    """Copy the last whole lines of each journal of the input directories (at most per_journal
    bytes of each, limit in all; links, FIFOs and what cannot be opened skipped) into `staging`
    through its checked descriptor: a sample of the journals as they are, for warming up the job
    on what it will read. Returns the staged paths."""
    os.makedirs(staging, mode=0o700, exist_ok=True)
    staged: list[str] = []
    left = limit
    for path, dir_fd, name in journal_files(inputs):
        if left <= 0:
            break
        opened = open_checked(dir_fd, name) if dir_fd is not None else None
        if opened is None:
            continue
        fd, st = opened
        try:
            end = last_line_end(fd, 0, st.st_size)
            start = max(0, end - min(per_journal, left))
            if start > 0:                   # from the first line that begins inside the sample
                nl = os.pread(fd, end - start, start).find(b"\n")
                start = start + nl + 1 if 0 <= nl < end - start - 1 else end
            if end > start:
                out = os.path.join(staging, f"{len(staged):06d}-{os.path.basename(path)}")
                copy_fd(fd, start, end, out, path)
                staged.append(out)
                left -= end - start
        except OSError:
            continue                        # it shrank meanwhile: a sample needs no retry
        finally:
            os.close(fd)
    return staged


def copy_fd(src_fd: int, start: int, end: int, out_path: str, shown: str, buffer: int = 1 << 20) -> None:
    """Write bytes [start, end) of the open file src_fd into a new file out_path (the kernel copies
    where it can). OSError if the file became shorter while it was read."""
    out_fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        done = _append(out_fd, src_fd, start, end, buffer)
    finally:
        os.close(out_fd)
    if done != end - start:
        raise OSError(f"{shown} became shorter while it was read")


def _append(out_fd: int, src_fd: int, start: int, end: int, buffer: int = 1 << 20) -> int:
    """Write bytes [start, end) of src_fd at out_fd's position; the number written (fewer when the
    file is shorter)."""
    size, done = end - start, 0
    try:
        while done < size:
            n = os.sendfile(out_fd, src_fd, start + done, size - done)
            if n == 0:
                break
            done += n
    except OSError:
        pass                                # no sendfile between these files: copy by hand
    while done < size:
        chunk = os.pread(src_fd, min(buffer, size - done), start + done)
        if not chunk:
            break
        done += os.write(out_fd, chunk)
    return done


def bundle(staged: list[str], staging: str, limit: int = BUNDLE_BYTES) -> list[str]:
    """The staged copies (files this run wrote in `staging`) to give Spark, the small ones joined
    into bundles of about `limit` bytes each, in their order, each copy's lines whole: one that
    does not end with a newline (a torn last line) gets one, so its last line stays a line of its
    own. Compressed copies and copies of `limit` bytes or more stay files of their own. A record
    names its node, so a bundle reads as its parts did; the parts are removed."""
    out: list[str] = []
    parts: list[tuple[str, int]] = []
    for path in staged:
        size = os.path.getsize(path)
        if path.lower().endswith(_COMPRESSED) or size >= limit:
            out.append(path)
        elif size:
            parts.append((path, size))
        else:
            os.unlink(path)                 # nothing to read
    bundle_fd, filled = -1, 0
    try:
        for path, size in parts:
            if bundle_fd < 0 or filled >= limit:
                if bundle_fd >= 0:
                    os.close(bundle_fd)
                name = os.path.join(staging, f"bundle-{len(out):06d}.jsonl")
                bundle_fd, filled = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), 0
                out.append(name)
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                filled += _append(bundle_fd, fd, 0, size)
                if os.pread(fd, 1, size - 1) != b"\n":
                    filled += os.write(bundle_fd, b"\n")
            finally:
                os.close(fd)
            os.unlink(path)
    finally:
        if bundle_fd >= 0:
            os.close(bundle_fd)
    return out
