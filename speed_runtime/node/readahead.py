"""The receiver's read-ahead: accepted envelopes that wait for their handler or are in it.

Per sender at most `per_sender` of them, from all senders at most `total`: what is beyond stays
in the inbox, unread (the inbox is the queue). An accepted file stays in the inbox until its
handler starts and `take` removes it (§5.5 step 6: remove, then dispatch); while it is held its
name is never judged again (`taken`).

The protocol thread, which waits while a sender (or all) is at its bound, is woken when that
sender's held envelopes are down to half (a low-water mark), not at the first release: it then
takes several files in one pass and hands them to the lane at once, instead of one file and one
hand-off between threads per handled message.
"""
from __future__ import annotations

import os
import threading
from typing import Callable

from ..fsutil import unlink_keeping_gil
from .threads import SerialLanes


def _unlink(dir_fd: int, name: str) -> None:
    os.unlink(name, dir_fd=dir_fd)


class ReadAhead:
    def __init__(self, per_sender: int, total: int, wake: Callable[[], None]):
        self.per_sender, self.total = per_sender, total
        self._wake = wake  # the protocol thread, which waits while the read-ahead is full
        self._lock = threading.Lock()
        self._in_hand: dict[str, int] = {}  # per sender
        self._in_hand_total = 0
        self._at_bound: set[str] = set()  # senders that reached their bound since the last wake-up
        self._total_at_bound = False
        self.taken: dict[str, int] = {}    # file name -> directory fd of accepted files not yet removed

    def idle(self) -> bool:
        with self._lock:
            return self._in_hand_total == 0

    # full() and has_room() read without the lock (single reads of an int and a dict are atomic in
    # CPython). They are asked by the protocol thread before it holds a file, and it adds to the
    # counts itself; a count another thread lowers at the same moment only means a file is taken at
    # the next pass, and one an extension raises from another thread (durable, chunks) may let one
    # file more in for a moment: the bounds are memory bounds, not exact. The lock cost two
    # acquisitions per received file.
    def full(self) -> bool:
        return self._in_hand_total >= self.total

    def has_room(self, sender: str) -> bool:
        return self._in_hand_total < self.total and self._in_hand.get(sender, 0) < self.per_sender

    def has_room_for_any(self, senders: list[str]) -> bool:
        with self._lock:
            if self._in_hand_total >= self.total:
                return False
            return any(self._in_hand.get(s, 0) < self.per_sender for s in senders)

    def hold(self, sender: str, name: str, dir_fd: int) -> None:
        with self._lock:
            count = self._in_hand[sender] = self._in_hand.get(sender, 0) + 1
            self._in_hand_total += 1
            self.taken[name] = dir_fd
            if count >= self.per_sender:
                self._at_bound.add(sender)
            if self._in_hand_total >= self.total:
                self._total_at_bound = True

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

    def release(self, sender: str, name: str | None = None) -> None:
        """One of `sender`'s held envelopes is done (and `name`, when given, no longer held)."""
        with self._lock:
            if name is not None:
                self.taken.pop(name, None)
            count = self._in_hand.get(sender, 0) - 1
            if count > 0:
                self._in_hand[sender] = count
            else:
                self._in_hand.pop(sender, None)
            self._in_hand_total -= 1
            wake = False
            if sender in self._at_bound and count <= self.per_sender // 2:
                self._at_bound.discard(sender)
                wake = True
            if self._total_at_bound and self._in_hand_total <= self.total // 2:
                self._total_at_bound = False
                wake = True
        if wake:
            self._wake()

    def run_on_lane(self, lanes: SerialLanes, sender: str, name: str, dir_fd: int, task: Callable[[], None]) -> bool:
        """Hold `name` and run `task` on the sender's lane; released when the task ends. False when
        the lanes have stopped with the node (the file stays in the inbox for the next instance)."""
        self.hold(sender, name, dir_fd)
        return self.submit(lanes, sender, [(name, task)])

    def submit(self, lanes: SerialLanes, sender: str, held: list[tuple[str, Callable[[], None]]]) -> bool:
        """Run the tasks of held files on the sender's lane, in order, each releasing its file when
        it ends; one task on the lane for all of them. False (all released) when the lanes have
        stopped."""
        try:
            lanes.submit(sender, lambda: self._run_held(sender, held, lanes.on_error))
        except RuntimeError:
            for name, _ in held:
                self.release(sender, name)
            return False
        return True

    def _run_held(self, sender: str, held: list[tuple[str, Callable[[], None]]],
                  on_error: Callable[[BaseException], None]) -> None:
        for name, task in held:
            try:
                task()
            except BaseException as exc:  # one bad task must not stop the sender's later ones
                on_error(exc)
            finally:
                self.release(sender, name)
