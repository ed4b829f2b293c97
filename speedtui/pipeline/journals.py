"""Which bytes of the trace journals are new since the last ingest (no Spark here).

A journal is known by its *head* (a digest of its first line) and, within a head, by its NAME
first: a file still present under the name the store knows keeps that journal's read position,
whatever other file has the same first line (a padded or doctored copy is a copy: skipped and
listed, it takes nothing over). The runtime rotates by renaming (``NAME.jsonl`` ->
``NAME.jsonl.1`` -> ...; speed_runtime/journal.py), so a journal whose known name no longer holds
it is looked for under another name with the same head: the same file (device and inode) or one
whose bytes before the known offset end as the journal's did (the digest of its last bytes read,
``tail``) is read on from where the last ingest stopped; any other is a new journal, read from its
start. A known offset is used only where it fits: never beyond a file's end, never where the bytes
before it changed (the journal is then read again from its start and listed as replaced). Only
complete lines are taken: a torn last line (no newline yet) waits for the next run.

Compressed journals (``.gz``, ``.bz2``, ``.xz``, ``.deflate``) are decompressed here, through the
checked descriptor, and read as their text in every mode (store, ``--full``); one that does not
decompress whole (corrupt, or not what its name says) or is compressed in a form Python cannot read
is skipped and listed, as a FIFO or a journal that shrank while it was copied is: no single file
stops an analysis. Names in every listing have their control characters made visible.

    plan = scan(["/dev/shm/speed/speed_traces"], state_files, staging)   # state_files: head -> entry
    Spark reads plan.staged; then commit plan.files

Every journal is opened once, without following a symbolic link (``openat`` under the directory's
descriptor, ``O_NOFOLLOW``), checked with ``fstat`` to be a regular file, and its new bytes are
copied into the staging directory through that same descriptor: a name swapped for a link or
another file after the check is never read. Spark (embedded, on a cluster or behind Spark Connect)
reads only the staged copies, which belong to the analysis.
"""
from __future__ import annotations

import bz2
import hashlib
import json
import lzma
import os
import re
import stat
import zlib
from dataclasses import dataclass, field

from .common import visible

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
#: how many bytes before a journal's offset are kept as a digest (its ``tail``): a file another name
#: holds is read on from that offset only if its bytes there are the same
TAIL_BYTES = 4096
#: decompressed bytes made at a time (a small compressed file can hold much)
_INFLATE_STEP = 4 * 1024 * 1024
#: a compressed journal decompresses to at most this many times its size, plus INFLATE_FLOOR: journals
#: compress 5-20 times; a member's "decompression bomb" (1 MB of gzip for 1 GB) would fill the disk
#: the staged copies are written to, so it is skipped and listed instead
INFLATE_RATIO = 100
INFLATE_FLOOR = 64 * 1024 * 1024
_DECOMPRESSORS = {".gz": lambda: zlib.decompressobj(wbits=31), ".deflate": lambda: zlib.decompressobj(),
                  ".bz2": bz2.BZ2Decompressor, ".xz": lzma.LZMADecompressor}
_KIND = {".gz": "gzip", ".deflate": "deflate (zlib)", ".bz2": "bzip2", ".xz": "xz"}


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
    problems: list[str] = field(default_factory=list)  # one line per journal skipped for a fault of its own

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


def compression(name: str) -> str | None:
    """The compressed ending of a journal's name (".gz", ...), or None for plain text."""
    low = name.lower()
    return next((e for e in _COMPRESSED if low.endswith(e)), None)


class Unreadable(Exception):
    """A compressed journal that does not decompress whole; str() is the reason."""


def decompress_fd(src_fd: int, out_path: str, ending: str, limit: int | None = None) -> int:
    """Decompress the open file src_fd (compressed as its name's `ending` says, one stream or
    several in a row) into a new file out_path; the bytes written. With `limit`, stop once that
    many are written (the rest is not checked). Unreadable if it does not decompress whole."""
    make = _DECOMPRESSORS.get(ending)
    if make is None:
        raise Unreadable(f"compressed as {ending}, which this analysis cannot read")
    kind = _KIND[ending]
    is_zlib = ending in (".gz", ".deflate")
    most = INFLATE_FLOOR + INFLATE_RATIO * os.fstat(src_fd).st_size
    out_fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    written, pos, d, fed = 0, 0, make(), False

    def put(out: bytes) -> int:
        if written + len(out) > most:
            raise Unreadable(f"it decompresses to more than {most:,} bytes ({INFLATE_RATIO} times its size and "
                             f"{INFLATE_FLOOR >> 20} MiB): not a journal")
        return _write_all(out_fd, out)

    def more(data: bytes) -> tuple[bytes, bytes]:
        """(output, input left) of one step of d; a data error is Unreadable."""
        try:
            out = d.decompress(data, _INFLATE_STEP)
        except (zlib.error, lzma.LZMAError, OSError, EOFError, ValueError):
            raise Unreadable(f"not a readable {kind} file") from None
        if d.eof:
            return out, d.unused_data
        return out, (d.unconsumed_tail if is_zlib else b"")

    try:
        while limit is None or written < limit:
            data = os.pread(src_fd, 1 << 20, pos)
            if not data:
                break
            pos += len(data)
            while data and (limit is None or written < limit):
                if d.eof:
                    if not data.strip(b"\0"):
                        break           # zero padding after the last stream (as gzip allows)
                    d = make()
                fed = True
                out, data = more(data)
                written += put(out)
                while not is_zlib and not d.eof and not d.needs_input and (limit is None or written < limit):
                    out, _ = more(b"")
                    written += put(out)
        if (limit is None or written < limit) and fed and not d.eof:
            raise Unreadable(f"not a whole {kind} file (it ends inside a stream)")
    except BaseException:
        os.close(out_fd)
        os.unlink(out_path)
        raise
    os.close(out_fd)
    return written


def _safe(name: str) -> str:
    """A journal's name as part of a staged copy's name: what Spark (Hadoop paths) and a terminal
    take as it is (a member names its journal; ':' or ESC in a path is trouble in either)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def _write_all(fd: int, data: bytes) -> int:
    view, done = memoryview(data), 0
    while done < len(data):
        done += os.write(fd, view[done:])
    return done


def _tail_digest(fd: int, offset: int) -> str:
    lo = max(0, offset - TAIL_BYTES)
    return hashlib.sha256(os.pread(fd, offset - lo, lo)).hexdigest()[:32]


def _fits(fd: int, size: int, entry: dict) -> bool:
    """Whether the known offset of `entry` can be read on from in this file: not beyond its end,
    and (when the store knows them) the bytes before it are the journal's."""
    offset = entry.get("offset", 0)
    if not isinstance(offset, int) or offset < 0 or offset > size:
        return False
    tail = entry.get("tail")
    return tail is None or offset == 0 or _tail_digest(fd, offset) == tail


class _Text:
    """An opened journal's text: its own descriptor, or the private decompressed copy of a
    compressed one (removed already: only the descriptor holds it)."""

    def __init__(self, fd: int, st: os.stat_result, ending: str | None, scratch: str):
        self.own = ending is None
        if self.own:
            self.fd, self.size = fd, st.st_size
            return
        decompress_fd(fd, scratch, ending)
        try:
            self.fd = os.open(scratch, os.O_RDONLY | os.O_CLOEXEC)
        finally:
            os.unlink(scratch)
        self.size = os.fstat(self.fd).st_size

    def close(self) -> None:
        if not self.own:
            os.close(self.fd)


def _head_at(path: str, scratch: str) -> str | None:
    """The head of the journal a name holds now, or None if it holds none (a peek: nothing but its
    first line is read)."""
    opened = open_checked(None, path)
    if opened is None:
        return None
    fd, st = opened
    try:
        ending = compression(path)
        if ending is None:
            return read_head(fd, st.st_size)
        try:
            size = decompress_fd(fd, scratch, ending, limit=HEAD_LIMIT)
        except (Unreadable, OSError):
            return None
        text_fd = os.open(scratch, os.O_RDONLY | os.O_CLOEXEC)
        os.unlink(scratch)
        try:
            return read_head(text_fd, size)
        finally:
            os.close(text_fd)
    finally:
        os.close(fd)


def _named_for(fd: int, name: str, ending: str | None) -> int:
    """1 if a journal's name is the one the runtime gives its node's journal (``NODE.jsonl`` or a
    rotation of it, ``NODE.jsonl.N``; the node from its first record), else 0."""
    if ending is not None:
        name = name[:-len(ending)]
    try:
        node = json.loads(os.pread(fd, HEAD_LIMIT, 0).split(b"\n", 1)[0]).get("node")
    except (ValueError, AttributeError, UnicodeDecodeError):
        return 0
    if not isinstance(node, str):
        return 0
    stem = f"{node}.jsonl"
    return int(name == stem or (name.startswith(stem + ".") and name[len(stem) + 1:].isdigit()))


def scan(inputs: list[str], known: dict, staging: str) -> Plan:
    """What to ingest from the journals now, given `known` (head -> {"path", "offset", "dev",
    "ino", "tail"[, "zsig"]}) from the last ingest; the new bytes are copied into the directory
    `staging` through the descriptor that was checked. `known` is not changed; plan.files is the
    state to keep once the ranges are in. Entries of older stores (path and offset only) are read
    with the checks they allow (an offset beyond the end is not used)."""
    os.makedirs(staging, mode=0o700, exist_ok=True)
    plan = Plan(files={h: dict(e) for h, e in known.items()})
    by_path = {e["path"]: h for h, e in known.items()}
    seen: dict[str, tuple[tuple, Range, dict, bool]] = {}   # head -> (rank, range, entry, start again)
    scratch = os.path.join(staging, "scratch.tmp")
    copies = 0

    def skip(path: str, why: str | None = None) -> None:
        plan.skipped.append(visible(path))
        if why:
            plan.problems.append(f"{visible(path)}: {why}; skipped")

    holders: dict[str, str | None] = {}  # a known path -> the head it holds now (peeked once)
    for path, dir_fd, name in journal_files(inputs):
        opened = open_checked(dir_fd, name)
        if opened is None:
            skip(path)                      # gone since the listing, a symlink, a FIFO, unreadable
            continue
        fd, st = opened
        text = None
        try:
            ending = compression(name)
            sig = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]
            if ending is not None:
                h = by_path.get(path)
                if h is not None and h not in seen and known[h].get("zsig") == sig:   # unchanged since read
                    off = known[h]["offset"]
                    seen[h] = ((4, 1, off, True), Range(path, off, off), dict(known[h]), False)
                    continue
            try:
                text = _Text(fd, st, ending, scratch)
            except Unreadable as exc:
                skip(path, str(exc))
                continue
            head = read_head(text.fd, text.size)
            if head is None:
                plan.waiting.append(visible(path))
                continue
            old = known.get(head)
            rank, start, again = 0, 0, False
            if old is not None:
                same_file = [old.get("dev"), old.get("ino")] == [st.st_dev, st.st_ino]
                if old["path"] != path:
                    if old["path"] not in holders:
                        holders[old["path"]] = _head_at(old["path"], scratch)
                    if holders[old["path"]] == head:        # the journal is still under its own name: this is a copy
                        skip(path)
                        continue
                fits = _fits(text.fd, text.size, old)
                if old["path"] == path:
                    rank = 3
                elif same_file:
                    rank = 2                # renamed (rotated): the same file
                elif fits:
                    rank = 1                # another file that holds the journal's bytes up to its offset
                if rank and fits:
                    start = old["offset"]
                else:   # truncated or rewritten, or a different file with the head of a journal whose
                    again = True            # name is gone: read from its start
            end = (text.size if ending is not None else
                   last_line_end(text.fd, start, text.size) if text.size > start else start)
            prev = seen.get(head)
            key = (rank, _named_for(text.fd, name, ending), end, path == (old or {}).get("path"))
            if prev is not None:            # two files, one journal: the known one, else the one named
                                            # for its node (NODE.jsonl[.N], as the runtime names), the longer
                if prev[0] >= key:
                    skip(path)
                    continue
                skip(prev[1].path)
                if prev[1].staged:
                    os.unlink(prev[1].staged)
            staged = ""
            if end > start:
                staged = os.path.join(staging, f"{copies:06d}.jsonl")
                copies += 1
                try:
                    copy_fd(text.fd, start, end, staged, path)
                except OSError:
                    if os.path.lexists(staged):
                        os.unlink(staged)
                    if prev is not None:    # the other copy is gone too: it is read next time
                        seen.pop(head, None)
                    skip(path, "became shorter while it was read (read again next time)")
                    continue
            entry = {"path": path, "offset": end, "dev": st.st_dev, "ino": st.st_ino,
                     "tail": _tail_digest(text.fd, end)}
            if ending is not None:
                entry["zsig"] = sig
            seen[head] = (key, Range(path, start, end, staged), entry, again and old is not None)
        finally:
            if text is not None:
                text.close()
            os.close(fd)
    for head, (_, r, entry, again) in seen.items():
        old = known.get(head)
        if old and old["path"] != r.path and not again:
            plan.rotated.append(f"{visible(old['path'])} -> {visible(r.path)}")
        prior = by_path.get(r.path)
        if again or (prior is not None and prior != head and prior not in seen):
            plan.replaced.append(visible(r.path))    # this name now holds another journal, or it was rewritten
        if r.end > r.start:
            plan.ranges.append(r)
        plan.files[head] = entry
    return plan


def stage_whole(inputs: list[str], staging: str, follow_top: bool = True,
                problems: list[str] | None = None) -> tuple[list[str], list[str]]:
    """Copy every journal of the local inputs (files, or directories' regular files; links inside a
    directory are never followed) into `staging` through its checked descriptor; a compressed one
    is decompressed on the way (as the store reads it). Returns (staged paths, skipped paths, their
    control characters made visible); one that shrinks while it is copied or does not decompress is
    skipped, and a line saying why is added to `problems` if given: no single journal stops the
    analysis."""
    os.makedirs(staging, mode=0o700, exist_ok=True)
    staged: list[str] = []
    skipped: list[str] = []

    def skip(path: str, why: str | None = None) -> None:
        skipped.append(visible(path))
        if why and problems is not None:
            problems.append(f"{visible(path)}: {why}; skipped")

    for path, dir_fd, name in journal_files(inputs, follow_top=follow_top):
        if dir_fd is None:                  # a file the operator named: its name may be a link they chose
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                st = os.fstat(fd)
            except OSError:
                skip(path)
                continue
            if not stat.S_ISREG(st.st_mode):
                os.close(fd)
                skip(path)
                continue
            opened = (fd, st)
        else:
            opened = open_checked(dir_fd, name)
        if opened is None:
            skip(path)
            continue
        fd, st = opened
        try:
            base = os.path.basename(path)
            ending = compression(base)
            if ending is not None:
                out = os.path.join(staging, f"{len(staged):06d}-{_safe(base[:-len(ending)])}.jsonl")  # text now
                try:
                    decompress_fd(fd, out, ending)
                except Unreadable as exc:
                    skip(path, str(exc))
                    continue
            else:
                out = os.path.join(staging, f"{len(staged):06d}-{_safe(base)}")
                try:
                    copy_fd(fd, 0, st.st_size, out, path)
                except OSError:
                    if os.path.lexists(out):
                        os.unlink(out)
                    skip(path, "became shorter while it was read")
                    continue
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
        opened = open_checked(dir_fd, name) if dir_fd is not None and compression(name) is None else None
        if opened is None:
            continue                        # (the tail of a compressed journal is no compressed file)
        fd, st = opened
        try:
            end = last_line_end(fd, 0, st.st_size)
            start = max(0, end - min(per_journal, left))
            if start > 0:                   # from the first line that begins inside the sample
                nl = os.pread(fd, end - start, start).find(b"\n")
                start = start + nl + 1 if 0 <= nl < end - start - 1 else end
            if end > start:
                out = os.path.join(staging, f"{len(staged):06d}-{_safe(os.path.basename(path))}")
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
        raise OSError(f"{visible(shown)} became shorter while it was read")


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
