"""Bounded waits on a condition: the only way tests synchronise with other threads and processes."""
from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float = 10.0, what: str = "condition",
               interval: float = 0.01) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
