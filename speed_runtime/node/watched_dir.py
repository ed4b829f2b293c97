"""A directory a node receives files in — its inbox, or an extension's own (`control/`): opened
once, watched on the node's one inotify instance, listed in slices, and adopted anew when its path
names another directory (an operator ran `mv inbox inbox.old; mkdir inbox`, or removed it)."""
from __future__ import annotations

import os
import time
from typing import Callable

from ..fsutil import close_quietly, in_memory

LISTING_CLOCK_EVERY = 64  # a listing's slice looks at the clock after this many names
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class DirListing:
    """One listing of a directory, taken in slices of at most `seconds` each (streaming: memory
    stays within the bounds of the names remembered)."""

    def __init__(self, fd: int):
        self._it = os.scandir(fd)
        self.work = 0.0  # seconds spent in its slices

    def slice(self, into: Callable[[str], None], seconds: float) -> bool:
        """Hand the next names to `into` for about `seconds`; True when the listing is complete."""
        started = time.monotonic()
        it = self._it
        try:
            while True:
                for _ in range(LISTING_CLOCK_EVERY):
                    item = next(it, None)
                    if item is None:
                        self.close()
                        return True
                    into(item.name)
                if time.monotonic() - started >= seconds:
                    return False
        finally:
            self.work += time.monotonic() - started

    def take(self, into: Callable[[str], None], full: Callable[[], bool]) -> bool:
        """Hand names to `into` until `full()` (then False: names are left) or the end (True)."""
        for item in self._it:
            if full():
                return False
            into(item.name)
        return True

    def close(self) -> None:
        self._it.close()


class WatchedDir:
    """`prepare()` creates the directory if needed (private, checked) and returns its path;
    `watch(path)` watches it on the node's inotify instance (called by `watch()` and on adoption)."""

    def __init__(self, prepare: Callable[[], str], watch: Callable[[str], None]):
        self._prepare, self._watch = prepare, watch
        self.path = prepare()
        self.fd = os.open(self.path, _DIR)
        self.in_memory = in_memory(self.fd)  # tmpfs: a handler lane may remove files keeping the GIL (fsutil)

    def watch(self) -> None:
        self._watch(self.path)

    def list(self) -> DirListing:
        """A listing of the directory, to be taken in slices."""
        return DirListing(self.fd)

    def adopt_replaced(self) -> int | None:
        """If the path no longer names the directory behind the descriptor (replaced or removed),
        create it anew, open and watch it, and return the old descriptor (the caller drains or closes
        it); else None."""
        try:
            st = os.stat(self.path, follow_symlinks=False)
            fd_st = os.fstat(self.fd)
            if (st.st_dev, st.st_ino) == (fd_st.st_dev, fd_st.st_ino):
                return None
        except FileNotFoundError:
            pass
        self.path = self._prepare()
        fresh = os.open(self.path, _DIR)
        old, self.fd = self.fd, fresh
        self.in_memory = in_memory(fresh)
        self.watch()
        return old

    def close(self) -> None:
        """Close once (a second call must not close a descriptor number reused meanwhile)."""
        fd, self.fd = self.fd, -1
        close_quietly(fd)
