"""Per-sender FIFO on a shared pool: one sender's work runs in order, different senders in
parallel, and no thread is tied to a sender that has gone quiet."""
from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Hashable


class SerialLanes:
    def __init__(self, workers: int, name: str, on_error: Callable[[BaseException], None]):
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._lanes: dict[Hashable, deque[Callable[[], None]]] = {}
        self._on_error = on_error

    def submit(self, key: Hashable, task: Callable[[], None]) -> None:
        with self._lock:
            lane = self._lanes.get(key)
            if lane is not None:
                lane.append(task)
                return
            self._lanes[key] = deque((task,))
        self._pool.submit(self._drain, key)

    def _drain(self, key: Hashable) -> None:
        while True:
            with self._lock:
                lane = self._lanes[key]
                if not lane:
                    del self._lanes[key]
                    return
                task = lane.popleft()
            try:
                task()
            except BaseException as exc:  # one bad task must not stall its lane
                self._on_error(exc)

    def shutdown(self) -> None:
        """Run what is queued, then join the workers."""
        self._pool.shutdown(wait=True)
