"""The receiver's read-ahead: accepted envelopes that wait for their handler or are in it.

Its bounds — files and what their payloads cost decoded, per sender and in all — are the inbound
path's step 0 (core/inbound.py: Holding, which this extends with a lock, the names held and the
hand-over to the sender's lane). An accepted file stays in the inbox until its handler starts and
`take` removes it (§5.5 step 6: remove, then dispatch); while it is held its name is never judged
again (`taken`).

The protocol thread, which waits while a sender (or all) is at its bound, is woken when that
sender's held envelopes are down to half (a low-water mark), not at the first release: it then
takes several files in one pass and hands them to the lane at once, instead of one file and one
hand-off between threads per handled message.
"""
from __future__ import annotations

import functools
import os
import threading
from typing import Callable

from ..core.inbound import Holding
from ..fsutil import unlink_keeping_gil
from .threads import SerialLanes


def _unlink(dir_fd: int, name: str) -> None:
    os.unlink(name, dir_fd=dir_fd)


class ReadAhead(Holding):
    def __init__(self, per_sender: int, total: int, wake: Callable[[], None], bytes_per_sender: int = 1 << 62,
                 bytes_total: int = 1 << 62):
        super().__init__(per_sender, total, bytes_per_sender, bytes_total)
        self._wake = wake  # the protocol thread, which waits while the read-ahead is full
        self._lock = threading.Lock()
        self.taken: dict[str, int] = {}    # file name -> directory fd of accepted files not yet removed

    def idle(self) -> bool:
        with self._lock:
            return self.empty()

    # full() and has_room() (Holding's) read without the lock (single reads of an int and a dict are
    # atomic in CPython). They are asked by the protocol thread before it holds a file, and it adds
    # to the counts itself; a count another thread lowers at the same moment only means a file is
    # taken at the next pass, and one an extension raises from another thread (durable, chunks) may
    # let one file more in for a moment: the bounds are memory bounds, not exact. The lock cost two
    # acquisitions per received file.
    def has_room_for_any(self, senders: list[str]) -> bool:
        with self._lock:
            return self.room_for_any(senders)

    def hold(self, sender: str, name: str, dir_fd: int, cost: int = 0) -> None:
        """Hold an accepted file of `sender` whose decoded payload costs `cost` bytes."""
        with self._lock:
            self.add(sender, cost)
            self.taken[name] = dir_fd

    def take(self, name: str, dir_fd: int, keep_gil: bool) -> bool:
        """Remove an accepted file just before its handler runs: the moment it is taken. The name
        leaves `taken` only after the unlink, so a listing in between never judges it again.
        False when its sender withdrew it (transport.retract). `keep_gil` for a directory in memory
        (fsutil.unlink_keeping_gil). (A single get or pop of a dict needs no lock.)"""
        try:
            (unlink_keeping_gil if keep_gil else _unlink)(self.taken.get(name, dir_fd), name)
        except FileNotFoundError:
            return False
        finally:
            self.taken.pop(name, None)
        return True

    def release(self, sender: str, name: str | None = None, cost: int = 0) -> None:
        """One of `sender`'s held envelopes (of `cost`, as held) is done (and `name`, when given, no
        longer held)."""
        with self._lock:
            if name is not None:
                self.taken.pop(name, None)
            wake = self.remove(sender, cost)
        if wake:
            self._wake()

    def run_on_lane(self, lanes: SerialLanes, sender: str, name: str, dir_fd: int, task: Callable[[], None],
                    cost: int = 0) -> bool:
        """Hold `name` (of `cost`) and run `task` on the sender's lane; released when the task ends.
        False when the lanes have stopped with the node (the file stays in the inbox for the next
        instance)."""
        self.hold(sender, name, dir_fd, cost)
        return self.submit(lanes, sender, [(name, task, cost)])

    def submit(self, lanes: SerialLanes, sender: str, held: list[tuple[str, Callable[[], None], int]]) -> bool:
        """Run the tasks of held files (name, task, cost) on the sender's lane, in order, each
        releasing its file when it ends: one hand-off to the lane for all of them, each a lane task
        of its own (a flooding sender's batch does not hold a worker another sender waits for).
        False (all released) when the lanes have stopped."""
        try:
            lanes.submit_all(sender, [functools.partial(self._run_held, sender, name, task, cost)
                                      for name, task, cost in held])
        except RuntimeError:
            for name, _, cost in held:
                self.release(sender, name, cost)
            return False
        return True

    def _run_held(self, sender: str, name: str, task: Callable[[], None], cost: int) -> None:
        try:
            task()  # what it raises is the lane's to report (SerialLanes: its on_error), as any task's
        finally:
            self.release(sender, name, cost)
