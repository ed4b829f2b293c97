"""Is the console's key the environment's key?  A few traced envelopes are opened with it: when
one that its receiver accepted fails its tag (or, with no such envelope traced, every one tried
fails), the console says so once, in a banner, instead of "tag does not verify" on each
envelope.  Pure: the tag check is handed in."""

from __future__ import annotations

from collections import deque
from typing import Callable, Iterable

from .traces import TraceRecord

WRONG_KEY = "every envelope fails its tag: is this the environment's key?"
#: some envelopes that their receivers accepted (so sealed under the key those two share) fail
#: this console's key while others pass: a few matching envelopes hid the banner before
MIXED_KEYS = ("some envelopes their receivers accepted fail their tag under this console's key: nodes here "
              "use more than one key, and this console's is not theirs")
#: added to a request or call the target took and never answered, while WRONG_KEY holds: a node
#: refuses what a wrong key sealed without a word, which otherwise reads as "it may have been applied"
UNANSWERED_WITH_WRONG_KEY = ("; traced envelopes fail this console's key: if --key is not the environment's "
                             "key, the target refused it unread")


class KeyCheck:
    def __init__(self, tag_ok: Callable[[bytes], bool | None], window: int = 8, needed: int = 3,
                 every: int = 200, ours: Callable[[], Iterable[str]] = tuple) -> None:
        self.tag_ok = tag_ok  # True / False, or None when the envelope cannot tell (malformed)
        # the console's own nodes: what they sealed, they sealed with the console's key, so it proves
        # nothing about the environment's (with a wrong key, the console's first call hid the banner)
        self.ours = ours
        self.recent: deque[bool] = deque(maxlen=window)
        # envelopes a receiver accepted: it opened them with the key it shares with their sender,
        # so one that fails the console's key is proof (a forged or junk envelope is never among them)
        self.accepted: deque[bool] = deque(maxlen=window)
        self.needed = needed
        self.every = every  # after the first window, one envelope in this many is tried
        self._seen = 0

    def observe(self, records: Iterable[TraceRecord]) -> None:
        ours = None
        for r in records:
            if not r.envelope:
                continue
            if ours is None:
                ours = frozenset(self.ours())
            if r.sender in ours:
                continue
            self._seen += 1
            window = self.accepted if r.dir == "in" and r.outcome == "accepted" else self.recent
            if len(window) >= window.maxlen and self._seen % self.every:
                continue
            ok = self.tag_ok(r.envelope)
            if ok is not None:
                window.append(ok)

    @property
    def wrong_key(self) -> bool:
        if self.accepted:  # proof, when there is any, decides
            return False in self.accepted
        return len(self.recent) >= self.needed and not any(self.recent)

    def banner(self) -> str:
        if not self.wrong_key:
            return ""
        return MIXED_KEYS if any(self.accepted) else WRONG_KEY
