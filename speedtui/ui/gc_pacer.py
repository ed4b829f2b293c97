"""Keep full garbage collections off the key path.

Measured (benchmarks/bench_console.py, 500 entries, 2,000 traced envelopes/s): CPython's
automatic full collections walked every object the app holds (Textual's widget tree, styles,
caches, the 20,000-record trace ring: about 160,000 objects), took 100-210 ms each, came every
2-3 s, and a key pressed during one waited for it.  That was the console's p99.

Freezing the app's long-lived objects after start-up was not enough: at 2,000 records/s the
whole trace ring is younger than ten seconds, so the automatic full collections still walked
60,000 young objects (60-140 ms).  The pacer therefore takes full collections over: it turns
the automatic ones off (the young generations are still collected as usual), runs the full
collection itself when the operator has not touched a key or the mouse for a moment, and after
``at_most`` seconds whatever happens, so cyclic garbage is reclaimed and memory stays bounded.
After each one it freezes what survived, so the next one is short.
"""

from __future__ import annotations

import gc
import time
from typing import Callable


class PacerPolicy:
    """When to run a full collection; pure, so it is tested with made-up times."""

    def __init__(self, every: float = 10.0, idle_after: float = 0.5, at_most: float = 60.0) -> None:
        self.every = every
        self.idle_after = idle_after
        self.at_most = at_most

    def due(self, now: float, last_full: float, last_input: float) -> bool:
        since_full = now - last_full
        if since_full >= self.at_most:
            return True
        return since_full >= self.every and now - last_input >= self.idle_after


class CollectorPacer:
    def __init__(self, policy: PacerPolicy | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy or PacerPolicy()
        self.clock = clock
        self.last_input = float("-inf")
        self.last_full = clock()
        self.full_collections = 0
        self.last_pause_ms = 0.0
        self.active = False
        self._thresholds = gc.get_threshold()

    def start(self) -> None:
        """After start-up: one full collection, then freeze what the app is made of."""
        if self.active:
            return
        self.active = True
        self._thresholds = gc.get_threshold()
        young, middle, _ = self._thresholds
        gc.set_threshold(young, middle, 1 << 30)  # never by itself: full collections are ours
        self._collect_and_freeze()

    def input_seen(self) -> None:
        self.last_input = self.clock()

    def tick(self) -> bool:
        if self.active and self.policy.due(self.clock(), self.last_full, self.last_input):
            self._collect_and_freeze()
            return True
        return False

    def stop(self) -> None:
        """Give the frozen objects back to the collector (the process may live on: tests)."""
        if self.active:
            self.active = False
            gc.set_threshold(*self._thresholds)
            gc.unfreeze()

    def _collect_and_freeze(self) -> None:
        t0 = time.perf_counter()
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.last_pause_ms = (time.perf_counter() - t0) * 1000.0
        self.last_full = self.clock()
        self.full_collections += 1
