"""A node's Access Registry (RFC §9): the names that may write to its inbox. The set itself is an
immutable value (`core.access`); this holder swaps in a new one under a lock, so readers on any
thread (the protocol thread checks every file name against it) never wait."""
from __future__ import annotations

import threading
from typing import Callable, Iterable

from ..core.access import granted, revoked


class AccessRegistry:
    def __init__(self, names: Iterable[str] = ()):
        self._lock = threading.Lock()
        # the granted names now: an immutable set, replaced whole (the protocol thread tests every
        # file's sender with `in self.current`, a C-level lookup, not a method call)
        self.current: frozenset[str] = granted(frozenset(), *names)
        # called with the names a grant would leave, before they take effect; raises to refuse
        # them (the node's: an entry too large to publish, EntryTooLargeError)
        self.check: Callable[[frozenset[str]], None] | None = None

    def allow(self, *names: str) -> bool:
        """Grant `names`; True if this changed anything."""
        with self._lock:
            after = granted(self.current, *names)
            if after == self.current:
                return False
            if self.check is not None:
                self.check(after)
            self.current = after
            return True

    def revoke(self, *names: str) -> bool:
        with self._lock:
            before, self.current = self.current, revoked(self.current, *names)
            return self.current != before

    def __contains__(self, name: object) -> bool:
        return name in self.current

    def names(self) -> list[str]:
        return sorted(self.current)
