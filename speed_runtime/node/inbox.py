"""What the protocol thread knows about its inbox: the directory itself (which an operator may
replace or remove), the names of the files waiting in it, per sender, in sequence order, and the
names of junk to remove (files that authenticate as nobody: refused on the name alone).

All are bounded: names beyond MAX_NAMES_PER_SENDER / MAX_NAMES / MAX_JUNK are not remembered (the
inbox is listed again later, streaming), and a replaced directory is drained into the new one for
a while and then closed. Each sender's files are judged in sequence order whatever the backlog
(see PendingNames). A sender whose names overflowed is looked for again once half of its
remembered names have been taken: listing a backlog of tens of thousands of files at every step
would find only names that cannot be remembered yet, and delay every other sender's files. A
listing is taken in slices of a few milliseconds between the receiver's passes, so even a listing
of a huge inbox never holds up another sender's files for longer than a slice.
"""
from __future__ import annotations

import bisect
import os
import time
from typing import Callable, Container

from ..core.envelope import parse_filename
from ..core.receiving import judge_name
from ..fsutil import close_quietly
from ..inotify import INBOX_EVENTS, Watch
from ..transport import prepare_home
from .watched_dir import WatchedDir

MAX_NAMES_PER_SENDER = 16_384  # names remembered per sender while it waits for room (~5 MB)
MAX_NAMES = 65_536             # … in all; beyond, the inbox is listed again when there is room
FAIR_SHARE = 1_024             # … except that a sender holding fewer names than this is always remembered
MAX_JUNK = 4_096               # names of files refused on the name alone, waiting to be removed
OLD_INBOX_SECONDS = 5.0        # a replaced inbox is watched this long after it was last found non-empty
OLD_INBOX_LOOK_SECONDS = 0.25  # … and looked at this often, counting from the last look
_NEVER = float("inf")


class _SortedKeys:
    """(id8, sequence, file name) keys in ascending order, in chunks of at most 2 * CHUNK keys.
    Adding one in sequence order is an append; adding one anywhere else costs a bisect and a move
    within one chunk, not within all the keys: a listing of a tmpfs inbox names the newest file
    first, so while a backlog is listed every name lands before all the others (one list of 16,384
    keys made that a 128 KB move per name: a listing of 2,000,000 files took tens of seconds).
    Taking the smallest or the largest is O(1) amortized."""

    __slots__ = ("_chunks", "_maxes", "_len")
    CHUNK = 256

    def __init__(self) -> None:
        # each chunk sorted and below the next; none empty, but for one kept while there is no key
        # (most senders have one file waiting at a time: no list is made and dropped per file)
        self._chunks: list[list[tuple[str, int, str]]] = [[]]
        self._maxes: list[tuple[str, int, str]] = [("", 0, "")]  # each chunk's largest key
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def add(self, key: tuple[str, int, str]) -> None:
        maxes = self._maxes
        if not self._len:
            self._chunks[0].append(key)
            maxes[0] = key
        elif key > maxes[-1]:  # the usual case: files arrive in sequence order
            last = self._chunks[-1]
            if len(last) < self.CHUNK:
                last.append(key)
                maxes[-1] = key
            else:
                self._chunks.append([key])
                maxes.append(key)
        else:
            chunks = self._chunks
            i = bisect.bisect_left(maxes, key)  # the first chunk whose largest key is not below it
            chunk = chunks[i]
            bisect.insort(chunk, key)
            if len(chunk) > 2 * self.CHUNK:
                half = len(chunk) // 2
                chunks[i:i + 1] = [chunk[:half], chunk[half:]]
                maxes[i:i + 1] = [chunk[half - 1], chunk[-1]]
        self._len += 1

    def smallest(self) -> tuple[str, int, str]:
        return self._chunks[0][0]

    def largest(self) -> tuple[str, int, str]:
        return self._maxes[-1]

    def pop_smallest(self) -> tuple[str, int, str]:
        self._len -= 1
        chunks = self._chunks
        first = chunks[0]
        if len(first) > 1 or len(chunks) == 1:
            return first.pop(0)  # a chunk's move, at most 2 * CHUNK keys
        del chunks[0], self._maxes[0]
        return first[0]

    def pop_largest(self) -> tuple[str, int, str]:
        self._len -= 1
        chunks = self._chunks
        last = chunks[-1]
        item = last.pop()
        if last:
            self._maxes[-1] = last[-1]
        elif len(chunks) > 1:
            del chunks[-1], self._maxes[-1]
        return item


class _SenderNames:
    """One sender's remembered names (made for most files: a plain class, not a dataclass)."""

    __slots__ = ("keys", "members", "dropped", "barrier")

    def __init__(self) -> None:
        self.keys = _SortedKeys()
        self.members: set[str] = set()
        # the smallest name not remembered for want of room (None: every file of this sender is known);
        # names from it on wait for a listing, so that nothing is judged before a smaller sequence
        self.dropped: tuple[str, int, str] | None = None
        # during a listing: `dropped` as it was when the listing began. Names below it are all known
        # and stay takeable while the listing runs; names the listing finds from it on wait for its end
        self.barrier: tuple[str, int, str] | None = None


class PendingNames:
    """Names of files in the inbox not yet judged, per sender, smallest sequence first. Only names
    of senders allowed when the name was first seen are kept here: the others are the receiver's
    junk (`JunkNames`), refused on their name alone, and never take room from a sender.

    Judged in sequence order even when a backlog is larger than the bound: a listing keeps each
    sender's smallest names (a larger one remembered earlier makes room), and a name at or beyond
    the smallest one not remembered is taken only after a listing found what lies below it (else a
    gap would be accepted and the files below it rejected as replayed).

    A listing is taken in slices between the receiver's passes (`begin_listing`, names, then
    `end_listing`), so a huge inbox never stops the other senders: while it runs, a sender's names
    below its barrier (what it had not remembered when the listing began) stay takeable, names from
    it on wait for the end. After events were lost (an inotify overflow, a replaced inbox, an
    error) nothing is known for sure: every sender waits for the end of the listing under way and
    of one begun after that (`events_lost`), with one pass in between.

    Bounds: MAX_NAMES_PER_SENDER per sender; MAX_NAMES in all, except that a sender holding fewer
    than FAIR_SHARE names is always remembered (so a few flooding senders cannot make the others'
    files wait for a listing): at most MAX_NAMES + FAIR_SHARE × senders allowed."""

    def __init__(self) -> None:
        self._by_sender: dict[str, _SenderNames] = {}
        self._count = 0
        self._overflowed = False  # names were not remembered for want of room in all
        self._listing = False
        self._hold_all = False    # a listing after lost events runs: no sender may be taken yet
        self._lost = True         # events were lost (at start nothing is known): the next listing holds all
        self.need_listing = True  # names not remembered have room now, or events were lost: list again

    def events_lost(self) -> None:
        """Events may have been lost: list again, and take nothing until that listing has ended.
        A listing under way goes on, holding every sender from now on: abandoning it would let a
        writer who overflows the events faster than a listing ends keep every sender waiting for
        ever; between its end and the next listing's beginning one pass takes files."""
        self._lost = self.need_listing = True
        if self._listing:
            self._hold_all = True

    def begin_listing(self) -> None:
        """A listing sees every file: what was not remembered before is looked at anew."""
        self._listing, self._hold_all, self._lost = True, self._lost, False
        self.need_listing = False
        for names in self._by_sender.values():
            names.barrier, names.dropped = names.dropped, None

    def end_listing(self) -> None:
        self._listing = self._hold_all = False
        for sender in list(self._by_sender):
            names = self._by_sender[sender]
            names.barrier = None
            if names.dropped is not None and len(names.members) <= MAX_NAMES_PER_SENDER // 2:
                self.need_listing = True  # taken below its barrier meanwhile: room for half again
            elif not names.members and names.dropped is None:
                del self._by_sender[sender]
        if self._overflowed and self._count <= MAX_NAMES // 2:
            self._overflowed, self.need_listing = False, True

    @property
    def listing(self) -> bool:
        return self._listing

    def remember(self, name: str, allowed: Container[str]) -> bool:
        """Remember the name of a file to judge; False when it is junk: not an envelope name, or
        its sender is not allowed now (the caller refuses it on its name alone)."""
        known = self._by_sender.get(name.partition(".")[0])
        if known is not None and (name in known.members or (known.dropped is not None and not self._listing)):
            return True  # cheap: known already, or a new file of a sender whose names wait for the listing
        parsed, refused = judge_name(name, allowed)
        if refused:
            return False
        sender = parsed.sender
        names = self._by_sender.get(sender)
        if names is None:
            names = self._by_sender[sender] = _SenderNames()
        if name in names.members:
            return True
        key = (parsed.id8, parsed.sequence, name)
        held = len(names.members)
        full = held >= MAX_NAMES_PER_SENDER
        if not full and self._count >= MAX_NAMES and held >= FAIR_SHARE:
            self._overflowed, full = True, True
        if full:
            if not names.keys or key >= names.keys.largest():
                self._drop(names, key)
                return True
            evicted = names.keys.pop_largest()  # a smaller name makes room: the largest waits for a listing
            names.members.discard(evicted[2])
            self._count -= 1
            self._drop(names, evicted)
        names.members.add(name)
        names.keys.add(key)
        self._count += 1
        return True

    @staticmethod
    def _drop(names: _SenderNames, key: tuple[str, int, str]) -> None:
        if names.dropped is None or key < names.dropped:
            names.dropped = key

    def _takeable(self, names: _SenderNames) -> bool:
        if self._hold_all:
            return False
        if not names.members:  # (the same names as keys, and a set's length is cheap)
            if names.dropped is not None and not self._listing:
                self.need_listing = True
            return False
        smallest = names.keys.smallest()
        if names.barrier is not None and smallest >= names.barrier:
            return False  # what lies from the barrier on is known once the running listing has ended
        if names.dropped is not None and smallest >= names.dropped:
            if not self._listing:
                self.need_listing = True  # what lies below it is not known yet
            return False
        return True

    def senders(self) -> list[str]:
        """Senders with a name that may be judged now."""
        return sorted([s for s, names in self._by_sender.items() if self._takeable(names)])

    def has(self, sender: str) -> bool:
        names = self._by_sender.get(sender)
        return names is not None and self._takeable(names)

    def pop(self, sender: str) -> tuple[str, int, str]:
        names = self._by_sender[sender]
        item = names.keys.pop_smallest()
        names.members.discard(item[2])
        self._count -= 1
        if not self._listing:  # (a running listing refills what it can; asking for another would repeat it)
            if names.dropped is not None and len(names.members) <= MAX_NAMES_PER_SENDER // 2:
                self.need_listing = True  # room for half: a listing now finds the rest, in sequence order
            if self._overflowed and self._count <= MAX_NAMES // 2:
                self._overflowed, self.need_listing = False, True
        if not names.members and names.dropped is None and names.barrier is None:
            del self._by_sender[sender]
        return item

    def push_back(self, sender: str, item: tuple[str, int, str]) -> None:
        names = self._by_sender.setdefault(sender, _SenderNames())
        names.keys.add(item)
        names.members.add(item[2])
        self._count += 1

    def __bool__(self) -> bool:
        return bool(self._by_sender)


class JunkNames:
    """Names in the inbox that authenticate as nobody and are refused on the name alone
    (`unauthorized`): not an envelope name, or a sender not allowed when the name was first seen.
    A name's verdict is fixed when it is seen; its removal may wait (the receiver removes at most
    a slice per pass, after the senders' files), so a flood of junk delays nobody by more than a
    slice. Bounded: beyond MAX_JUNK names are not kept, and a listing finds them again once half
    of the kept ones are gone."""

    def __init__(self) -> None:
        self._names: dict[str, tuple[str, int]] = {}  # name -> (claimed sender or "?", sequence): in arrival order
        self._dropped = False

    def add(self, name: str) -> None:
        if name in self._names:
            return
        if len(self._names) >= MAX_JUNK:
            self._dropped = True
            return
        parsed = parse_filename(name)
        self._names[name] = (parsed.sender, parsed.sequence) if parsed is not None else ("?", 0)

    def pop(self) -> tuple[str, str, int]:
        """(name, claimed sender, sequence) of the oldest; `need_listing` tells when to list again."""
        name = next(iter(self._names))
        sender, seq = self._names.pop(name)
        return name, sender, seq

    def need_listing(self) -> bool:
        """Names were not kept, and there is room for half of the bound now (asked once)."""
        if self._dropped and len(self._names) <= MAX_JUNK // 2:
            self._dropped = False
            return True
        return False

    def __contains__(self, name: str) -> bool:
        return name in self._names

    def __len__(self) -> int:
        return len(self._names)


class InboxDirectory(WatchedDir):
    """The inbox (node/watched_dir.py), and the replaced inboxes still drained into it."""

    def __init__(self, root: str, name: str, watch: Watch):
        self.root, self.name = root, name
        super().__init__(self._prepare, lambda path: watch.add(path, INBOX_EVENTS, "inbox"))
        # replaced inboxes still drained: (fd, last seen busy, last looked at)
        self._old: list[tuple[int, float, float]] = []

    def _prepare(self) -> str:
        self.path, self.tmp_path = prepare_home(self.root, self.name)
        return self.path

    def replaced(self) -> bool:
        """Adopt a replaced or removed inbox; True when that happened (the old one is drained)."""
        old = self.adopt_replaced()
        if old is None:
            return False
        self._old.append((old, time.monotonic(), -_NEVER))  # never looked at yet: due at once
        return True

    def next_old_check(self) -> float:
        """When a replaced inbox is next due a look: OLD_INBOX_LOOK_SECONDS after the last look, found
        busy or not (counting from when it was last seen busy made every step after the first
        quarter second a look, and the receiver spin for the rest of OLD_INBOX_SECONDS)."""
        if not self._old:  # the usual case, asked at every step
            return _NEVER
        return min(looked + OLD_INBOX_LOOK_SECONDS for _, _, looked in self._old)

    def drain_old(self, taken: dict[str, int], remember: Callable[[str], None]) -> None:
        """Move what senders (with descriptors opened before the replacement) still deliver to a
        replaced inbox into the current one; close it once it stayed empty for a while."""
        keep = []
        for fd, seen, _ in self._old:
            looked = time.monotonic()
            try:
                with os.scandir(fd) as it:
                    names = [item.name for item in it]
            except OSError:
                names = []
            busy = False
            for name in names:
                if name in taken:
                    busy = True  # accepted from there: its handler removes it there
                    continue
                try:
                    os.rename(name, name, src_dir_fd=fd, dst_dir_fd=self.fd)
                except OSError:
                    continue
                remember(name)
                busy = True
            if busy:
                seen = time.monotonic()
            if time.monotonic() - seen < OLD_INBOX_SECONDS or fd in taken.values():
                keep.append((fd, seen, looked))
            else:
                os.close(fd)
        self._old = keep

    @property
    def draining_old(self) -> bool:
        return bool(self._old)

    def close(self) -> None:
        """Close once (a second call must not close descriptor numbers reused meanwhile)."""
        fds, self._old = [fd for fd, _, _ in self._old], []
        super().close()
        close_quietly(*fds)
