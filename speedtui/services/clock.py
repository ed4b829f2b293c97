"""Injectable clocks: the app never calls time.time() directly, so tests can freeze it."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float: ...

    def boottime(self) -> float | None: ...


class SystemClock:
    def time(self) -> float:
        return time.time()

    def boottime(self) -> float | None:
        try:
            return time.clock_gettime(time.CLOCK_BOOTTIME)  # type: ignore[attr-defined]
        except (AttributeError, OSError):
            return None


class FrozenClock:
    """A clock that only moves when told to (tests, snapshots, screenshots)."""

    def __init__(self, now: float) -> None:
        self.now = float(now)

    def time(self) -> float:
        return self.now

    def boottime(self) -> float | None:
        return None

    def advance(self, seconds: float) -> None:
        self.now += seconds
