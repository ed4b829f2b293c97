"""What the protocol thread knows about its inbox: the directory itself (which an operator may
replace or remove) and the names of the files waiting in it, per sender, in sequence order.

Both are bounded: names beyond MAX_NAMES_PER_SENDER / MAX_NAMES are not remembered (the inbox is
listed again later, streaming), and a replaced directory is drained into the new one for a while
and then closed. Each sender's files are judged in sequence order whatever the backlog (see
PendingNames). A sender whose names overflowed is looked for again once half of its remembered
names have been taken: listing a backlog of tens of thousands of files at every step would find
only names that cannot be remembered yet, and delay every other sender's files.
"""
from __future__ import annotations

import bisect
import os
import time
from typing import Callable, Container

from ..core.receiving import judge_name
from ..fsutil import close_quietly, in_memory
from ..inotify import INBOX_EVENTS, Watch
from ..transport import prepare_home

MAX_NAMES_PER_SENDER = 16_384  # names remembered per sender while it waits for room (~5 MB)
MAX_NAMES = 65_536             # … in all; beyond, the inbox is listed again when there is room
OLD_INBOX_SECONDS = 5.0        # a replaced inbox is watched this long after it was last found non-empty
_NEVER = float("inf")
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _SortedKeys:
    """(id8, sequence, file name) keys in ascending order. Taking the smallest is O(1) (a head
    index; the list is compacted now and then), adding one in sequence order is an append."""

    __slots__ = ("_items", "_head")

    def __init__(self) -> None:
        self._items: list[tuple[str, int, str]] = []
        self._head = 0

    def __len__(self) -> int:
        return len(self._items) - self._head

    def add(self, key: tuple[str, int, str]) -> None:
        items = self._items
        if len(items) == self._head or key > items[-1]:
            items.append(key)  # the usual case: files arrive in sequence order
        else:
            bisect.insort(items, key, lo=self._head)

    def smallest(self) -> tuple[str, int, str]:
        return self._items[self._head]

    def largest(self) -> tuple[str, int, str]:
        return self._items[-1]

    def pop_smallest(self) -> tuple[str, int, str]:
        item = self._items[self._head]
        self._head += 1
        if self._head >= 1024 and self._head * 2 >= len(self._items):
            del self._items[:self._head]
            self._head = 0
        return item

    def pop_largest(self) -> tuple[str, int, str]:
        return self._items.pop()


class _SenderNames:
    """One sender's remembered names (made for most files: a plain class, not a dataclass)."""

    __slots__ = ("keys", "members", "dropped")

    def __init__(self) -> None:
        self.keys = _SortedKeys()
        self.members: set[str] = set()
        # the smallest name not remembered for want of room (None: every file of this sender is known);
        # names from it on wait for a listing, so that nothing is judged before a smaller sequence
        self.dropped: tuple[str, int, str] | None = None


class PendingNames:
    """Names of files in the inbox not yet judged, per claimed sender, smallest sequence first.

    Judged in sequence order even when a backlog is larger than the bound: a listing keeps each
    sender's smallest names (a larger one remembered earlier makes room), and a name at or beyond
    the smallest one not remembered is taken only after the next listing found what lies below it
    (else a gap would be accepted and the files below it rejected as replayed)."""

    def __init__(self) -> None:
        self._by_sender: dict[str, _SenderNames] = {}
        self._count = 0
        self._overflowed = False  # names were not remembered for want of room in all
        self._listing = False
        self.need_listing = True  # names not remembered have room now, or events were lost: list again

    def begin_listing(self) -> None:
        """A listing sees every file: what was not remembered before is looked at anew."""
        self._listing = True
        for names in self._by_sender.values():
            names.dropped = None

    def end_listing(self) -> None:
        self._listing = False
        for sender in [s for s, names in self._by_sender.items() if not names.keys and names.dropped is None]:
            del self._by_sender[sender]

    def remember(self, name: str, allowed: Container[str]) -> None:
        known = self._by_sender.get(name.partition(".")[0])
        if known is not None and (name in known.members or (known.dropped is not None and not self._listing)):
            return  # cheap: known already, or a new file of a sender whose names wait for the listing
        parsed, _ = judge_name(name, allowed)
        sender = parsed.sender if parsed is not None else "?"
        names = self._by_sender.get(sender)
        if names is None:
            names = self._by_sender[sender] = _SenderNames()
        if name in names.members:
            return
        key = (parsed.id8, parsed.sequence, name) if parsed else ("", 0, name)
        full = len(names.members) >= MAX_NAMES_PER_SENDER
        if not full and self._count >= MAX_NAMES:
            self._overflowed, full = True, True
        if full:
            if not names.keys or key >= names.keys.largest():
                self._drop(names, key)
                return
            evicted = names.keys.pop_largest()  # a smaller name makes room: the largest waits for a listing
            names.members.discard(evicted[2])
            self._count -= 1
            self._drop(names, evicted)
        names.members.add(name)
        names.keys.add(key)
        self._count += 1

    @staticmethod
    def _drop(names: _SenderNames, key: tuple[str, int, str]) -> None:
        if names.dropped is None or key < names.dropped:
            names.dropped = key

    def _takeable(self, names: _SenderNames) -> bool:
        if not names.members:  # the same names as keys (a set's length is not a Python call)
            return False
        if names.dropped is not None and names.keys.smallest() >= names.dropped:
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
        if names.dropped is not None and len(names.members) <= MAX_NAMES_PER_SENDER // 2:
            self.need_listing = True  # room for half: a listing now finds the rest, in sequence order
        if self._overflowed and self._count <= MAX_NAMES // 2:
            self._overflowed, self.need_listing = False, True
        if not names.members and names.dropped is None:
            del self._by_sender[sender]
        return item

    def push_back(self, sender: str, item: tuple[str, int, str]) -> None:
        names = self._by_sender.setdefault(sender, _SenderNames())
        names.keys.add(item)
        names.members.add(item[2])
        self._count += 1

    def __bool__(self) -> bool:
        return bool(self._by_sender)


class InboxDirectory:
    """The inbox, opened once, watched, and adopted anew when the path names another directory."""

    def __init__(self, root: str, name: str, watch: Watch):
        self.root, self.name, self.watch = root, name, watch
        self.path, self.tmp_path = prepare_home(root, name)
        self.fd = os.open(self.path, _DIR)
        self.in_memory = in_memory(self.fd)  # tmpfs: a handler lane may remove files keeping the GIL (fsutil)
        self._old: list[tuple[int, float]] = []  # replaced inboxes still drained: (fd, last seen busy)

    def watch_events(self) -> None:
        self.watch.add(self.path, INBOX_EVENTS, "inbox")

    def list(self, into: Callable[[str], None]) -> None:
        with os.scandir(self.fd) as it:
            for item in it:
                into(item.name)

    def replaced(self) -> bool:
        """Adopt a replaced or removed inbox; True when that happened."""
        try:
            st = os.stat(self.path, follow_symlinks=False)
            if (st.st_dev, st.st_ino) == _fd_id(self.fd):
                return False
        except FileNotFoundError:
            pass
        self.path, self.tmp_path = prepare_home(self.root, self.name)
        fresh = os.open(self.path, _DIR)
        self._old.append((self.fd, time.monotonic()))
        self.fd = fresh
        self.in_memory = in_memory(fresh)
        self.watch_events()
        return True

    def next_old_check(self) -> float:
        if not self._old:  # the usual case, asked at every step
            return _NEVER
        return min(seen + 0.25 for _, seen in self._old)

    def drain_old(self, taken: dict[str, int], remember: Callable[[str], None]) -> None:
        """Move what senders (with descriptors opened before the replacement) still deliver to a
        replaced inbox into the current one; close it once it stayed empty for a while."""
        keep = []
        for fd, seen in self._old:
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
                keep.append((fd, seen))
            else:
                os.close(fd)
        self._old = keep

    @property
    def draining_old(self) -> bool:
        return bool(self._old)

    def close(self) -> None:
        """Close once (a second call must not close descriptor numbers reused meanwhile)."""
        fds, self.fd, self._old = [self.fd, *(fd for fd, _ in self._old)], -1, []
        close_quietly(*fds)


def _fd_id(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino
