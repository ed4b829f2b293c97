"""Is the console's key the environment's key?  A few traced envelopes are opened with it: when
every one tried fails its tag, the console says so once, in a banner, instead of "tag does not
verify" on each envelope.  Pure: the tag check is handed in."""

from __future__ import annotations

from collections import deque
from typing import Callable, Iterable

from .traces import TraceRecord

WRONG_KEY = "every envelope fails its tag: is this the environment's key?"
#: added to a request or call the target took and never answered, while WRONG_KEY holds: a node
#: refuses what a wrong key sealed without a word, which otherwise reads as "it may have been applied"
UNANSWERED_WITH_WRONG_KEY = ("; every traced envelope fails this console's key, so the target most likely "
                             "refused it unread: is --key the environment's key?")


class KeyCheck:
    def __init__(self, tag_ok: Callable[[bytes], bool | None], window: int = 8, needed: int = 3,
                 every: int = 200) -> None:
        self.tag_ok = tag_ok  # True / False, or None when the envelope cannot tell (malformed)
        self.recent: deque[bool] = deque(maxlen=window)
        self.needed = needed
        self.every = every  # after the first window, one envelope in this many is tried
        self._seen = 0

    def observe(self, records: Iterable[TraceRecord]) -> None:
        for r in records:
            if not r.envelope:
                continue
            self._seen += 1
            if len(self.recent) >= self.recent.maxlen and self._seen % self.every:
                continue
            ok = self.tag_ok(r.envelope)
            if ok is not None:
                self.recent.append(ok)

    @property
    def wrong_key(self) -> bool:
        return len(self.recent) >= self.needed and not any(self.recent)

    def banner(self) -> str:
        return WRONG_KEY if self.wrong_key else ""
