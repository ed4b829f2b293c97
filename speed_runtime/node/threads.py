"""The thread machinery of a node: a pool of daemon workers, per-sender FIFO lanes on it, and one
thread that runs callbacks at deadlines.

Workers are daemon threads started on demand: application code (a message handler, a service)
that never returns must not keep a stopping process alive (ThreadPoolExecutor's threads are joined
at interpreter exit), so a node waits for them only for a bounded time when it stops.
"""
from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from concurrent.futures import Future, InvalidStateError
from typing import Any, Callable, Hashable


class WorkerPool:
    """Up to `size` daemon threads running submitted callables; idle ones wait for work."""

    def __init__(self, size: int, name: str, on_error: Callable[[BaseException], None]):
        self._size, self._name, self._on_error = size, name, on_error
        self._cond = threading.Condition()
        self._tasks: deque[Callable[[], None]] = deque()
        self.threads: list[threading.Thread] = []
        self._idle = 0
        self._busy = 0
        self._stopped = False

    def submit(self, task: Callable[[], None]) -> None:
        with self._cond:
            if self._stopped:
                raise RuntimeError("the worker pool is stopped")
            self._tasks.append(task)
            if self._idle:
                self._cond.notify()
            # an idle worker counts until it has woken: two tasks submitted before it does must not
            # both count on it (the second would wait behind the first, which may block for long)
            if len(self._tasks) > self._idle and len(self.threads) < self._size:
                self._start_worker()

    def _start_worker(self) -> None:
        """Under the lock. When no thread can be had now (`ulimit -v`, `-u`) the task waits in the
        queue for a running worker, or for `start_waiting` or the next submit to start one; it is
        never dropped (a handler's file would then be judged again, as a replay of its sender)."""
        thread = threading.Thread(target=self._work, name=f"{self._name}-{len(self.threads)}", daemon=True)
        try:
            thread.start()
        except (RuntimeError, MemoryError):
            return
        self.threads.append(thread)

    def start_waiting(self) -> None:
        """Start a worker for tasks that wait with none to run them (a start failed before)."""
        if self._tasks and not self.threads:  # (unlocked reads: a cheap look, asked often)
            with self._cond:
                if self._tasks and not self.threads and not self._stopped:
                    self._start_worker()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._tasks and not self._stopped:
                    self._idle += 1
                    self._cond.wait()
                    self._idle -= 1
                if not self._tasks:
                    return
                task = self._tasks.popleft()
                self._busy += 1
            try:
                task()
            except BaseException as exc:  # one bad task must not kill the worker
                self._on_error(exc)
            finally:
                with self._cond:
                    self._busy -= 1
                    if not self._tasks and not self._busy:  # for wait_idle; waking every idle worker
                        self._cond.notify_all()             # after each task cost a third of a message

    def idle(self) -> bool:
        with self._cond:
            return not self._tasks and not self._busy

    def wait_idle(self, deadline: float) -> bool:
        """Wait (until `deadline`, monotonic) until no task is queued or running."""
        with self._cond:
            while self._tasks or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
            return True

    def stop(self, deadline: float) -> bool:
        """Let queued tasks run until `deadline`, then stop; returns False if work was left running."""
        finished = self.wait_idle(deadline)
        with self._cond:
            self._stopped = True
            self._tasks.clear()
            self._cond.notify_all()
        if finished:
            for thread in self.threads:
                thread.join(max(0.0, deadline - time.monotonic()) + 1.0)
        return finished


LANE_TURN = 8  # tasks a lane runs before it gives its worker to the lanes waiting for one


class SerialLanes:
    """Per-key FIFO on a shared pool: one sender's work runs in order, different senders in
    parallel, and no thread is tied to a sender that has gone quiet. A lane that always has work
    (a flooding sender) runs LANE_TURN tasks and then queues again behind the lanes waiting for a
    worker: a few flooders cannot hold every worker while the other senders' handlers wait."""

    def __init__(self, pool: WorkerPool, on_error: Callable[[BaseException], None]):
        self._pool = pool
        self._lock = threading.Lock()
        self._lanes: dict[Hashable, deque[Callable[[], None]]] = {}
        self.on_error = on_error  # what a task raised

    def submit(self, key: Hashable, task: Callable[[], None]) -> None:
        """Run `task` after the lane's earlier tasks; RuntimeError when the pool has stopped."""
        with self._lock:
            lane = self._lanes.get(key)
            if lane is not None:
                lane.append(task)
                return
            self._lanes[key] = deque((task,))
        try:
            self._pool.submit(lambda: self._drain(key))
        except RuntimeError:
            with self._lock:
                self._lanes.pop(key, None)
            raise

    def _drain(self, key: Hashable) -> None:
        for _ in range(LANE_TURN):
            with self._lock:
                lane = self._lanes[key]
                if not lane:
                    del self._lanes[key]
                    return
                task = lane.popleft()
            try:
                task()
            except BaseException as exc:  # one bad task must not stall its lane
                self.on_error(exc)
        with self._lock:
            if not self._lanes[key]:
                del self._lanes[key]
                return
        try:  # more to do: after the lanes already waiting for a worker (the pool's queue is FIFO)
            self._pool.submit(lambda: self._drain(key))
        except RuntimeError:  # the pool has stopped with the node: what is queued is dropped, as there
            with self._lock:
                self._lanes.pop(key, None)


class Deadlines:
    """One thread runs callbacks at deadlines (time.monotonic seconds), at most `resolution`
    seconds late, from `start()` on (callbacks set before wait for it). A call that completes
    early costs no wake-up: its entry is skipped when due."""

    def __init__(self, name: str, resolution: float = 0.05):
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._counter = itertools.count()
        self._stopped = False
        self._resolution = resolution
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> "Deadlines":
        self.thread.start()
        return self

    def at(self, when: float, callback: Callable[[], None]) -> None:
        with self._cond:
            earliest = not self._heap or when < self._heap[0][0]
            heapq.heappush(self._heap, (when, next(self._counter), callback))
            if earliest:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                now = time.monotonic()
                due = []
                while self._heap and self._heap[0][0] <= now:
                    due.append(heapq.heappop(self._heap)[2])
                if not due:
                    wait = None if not self._heap else max(self._heap[0][0] - now, self._resolution)
                    self._cond.wait(wait)
                    continue
            for callback in due:
                try:
                    callback()
                except Exception:  # a deadline callback must never kill the thread
                    pass

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self.thread.ident is not None:
            self.thread.join()


def settle(future: Future, result: Any = None, error: BaseException | None = None) -> None:
    """Complete `future` unless its owner already cancelled it (or another path completed it)."""
    if future.done():
        return
    try:
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)
    except InvalidStateError:  # cancelled between the check and the set
        pass
