"""The thread machinery of a node: a pool of daemon workers, per-sender FIFO lanes on it, and one
thread that runs callbacks at deadlines.

Workers are daemon threads started on demand: application code (a message handler, a service)
that never returns must not keep a stopping process alive (ThreadPoolExecutor's threads are joined
at interpreter exit), so a node waits for them only for a bounded time when it stops.
"""
from __future__ import annotations

import _thread
import heapq
import itertools
import queue
import threading
import time
from collections import deque
from concurrent.futures import Future, InvalidStateError
from typing import Any, Callable, Hashable, Iterable


class WorkerPool:
    """Up to `size` daemon threads running submitted callables; idle ones wait for work.

    A task is handed over through a `queue.SimpleQueue` (one C call to put, one to take, the GIL
    released while a worker waits) and counted under a plain lock: a Condition and a deque cost the
    callee's hand-off to its SPC pool 64,000 instructions a round trip (Python code on both sides).
    Each queued task is either claimed by an idle worker (which is already waiting in `get`) or
    unclaimed, waiting for a worker that finishes or starts; a worker that comes back takes an
    unclaimed task before it counts itself idle, so two tasks submitted before an idle worker has
    woken never both count on it (the second would wait behind the first, which may block long)."""

    def __init__(self, size: int, name: str, on_error: Callable[[BaseException], None]):
        self._size, self._name, self._on_error = size, name, on_error
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)  # `wait_idle`: no task queued or running
        self._tasks: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []
        self._idle = 0  # workers waiting in `get` with no task claimed for them
        self._unclaimed = 0  # queued tasks no idle worker was counted on for
        self._pending = 0  # tasks queued or running
        self._watchers = 0  # threads in `wait_idle`
        self._stopped = False

    def submit(self, task: Callable[[], None]) -> None:
        with self._lock:
            if self._stopped:
                raise RuntimeError("the worker pool is stopped")
            self._pending += 1
            if self._idle:
                self._idle -= 1
            else:
                self._unclaimed += 1
                if len(self.threads) < self._size:
                    self._start_worker()
            self._tasks.put(task)

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
        if self._unclaimed and not self.threads:  # (unlocked reads: a cheap look, asked often)
            with self._lock:
                if self._unclaimed and not self.threads and not self._stopped:
                    self._start_worker()

    def _work(self) -> None:
        while True:
            with self._lock:
                if self._unclaimed:
                    self._unclaimed -= 1
                else:
                    self._idle += 1
            task = self._tasks.get()
            if task is None:  # `stop`
                return
            try:
                task()
            except BaseException as exc:  # one bad task must not kill the worker
                self._on_error(exc)
            finally:
                del task  # what the task holds is not kept while the worker waits for the next
                with self._lock:
                    self._pending -= 1
                    if not self._pending and self._watchers:
                        self._settled.notify_all()

    def idle(self) -> bool:
        return not self._pending

    def waiting(self) -> bool:
        """Whether a task waits with no worker to run it (an unlocked read: a hint, asked often)."""
        return self._unclaimed > 0

    def wait_idle(self, deadline: float) -> bool:
        """Wait (until `deadline`, monotonic) until no task is queued or running."""
        with self._lock:
            self._watchers += 1
            try:
                while self._pending:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._settled.wait(min(left, 0.1))
                return True
            finally:
                self._watchers -= 1

    def stop(self, deadline: float) -> bool:
        """Let queued tasks run until `deadline`, then stop; returns False if work was left running."""
        finished = self.wait_idle(deadline)
        with self._lock:
            self._stopped = True
            dropped = 0
            while True:  # what is still queued is dropped, as before a stop
                try:
                    task = self._tasks.get_nowait()
                except queue.Empty:
                    break
                if task is not None:
                    dropped += 1
            self._pending -= dropped
            for _ in self.threads:
                self._tasks.put(None)
        if finished:
            for thread in self.threads:
                thread.join(max(0.0, deadline - time.monotonic()) + 1.0)
        return finished


LANE_TURN_SECONDS = 0.001  # a lane with work keeps its worker this long while another lane waits for one


class SerialLanes:
    """Per-key FIFO on a shared pool: one sender's work runs in order, different senders in
    parallel, and no thread is tied to a sender that has gone quiet. A lane that always has work
    (a flooding sender) gives its worker up at the end of a turn (the task in hand, and at least
    LANE_TURN_SECONDS of them) when another lane waits for one, and queues again behind it: a
    flooding sender holds a worker only while no other sender's handler wants it, so the others'
    handlers wait for one turn of it at most, not for its backlog (handlers of 2 ms: one of them).
    A turn of a millisecond, not a single task, so that lanes of short tasks do not pass their
    workers round after every one (a hand-off through the pool each)."""

    def __init__(self, pool: WorkerPool, on_error: Callable[[BaseException], None]):
        self._pool = pool
        self._lock = threading.Lock()
        self._lanes: dict[Hashable, deque[Callable[[], None]]] = {}
        self.on_error = on_error  # what a task raised

    def submit(self, key: Hashable, task: Callable[[], None]) -> None:
        """Run `task` after the lane's earlier tasks; RuntimeError when the pool has stopped."""
        self.submit_all(key, (task,))

    def submit_all(self, key: Hashable, tasks: Iterable[Callable[[], None]]) -> None:
        """Run `tasks`, in order, after the lane's earlier tasks: one hand-off to a worker for them
        all, each still a task of its own (the lane may give its worker up between two).
        RuntimeError when the pool has stopped."""
        with self._lock:
            lane = self._lanes.get(key)
            if lane is not None:
                lane.extend(tasks)
                return
            self._lanes[key] = deque(tasks)
        try:
            self._pool.submit(lambda: self._drain(key))
        except RuntimeError:
            with self._lock:
                self._lanes.pop(key, None)
            raise

    def _drain(self, key: Hashable) -> None:
        turn_ends, turn_over = time.monotonic() + LANE_TURN_SECONDS, False
        while True:
            with self._lock:
                lane = self._lanes[key]
                if not lane:
                    del self._lanes[key]
                    return
                if turn_over:
                    break  # another lane waits for a worker: it has this one, this lane queues behind it
                task = lane.popleft()
            try:
                task()
            except BaseException as exc:  # one bad task must not stall its lane
                self.on_error(exc)
            del task  # what the task holds is not kept while this lane waits for a worker again
            turn_over = self._pool.waiting() and time.monotonic() >= turn_ends
        try:  # the pool's queue is FIFO: after the lanes already waiting for a worker
            self._pool.submit(lambda: self._drain(key))
        except RuntimeError:  # the pool has stopped with the node: what is queued is dropped, as there
            with self._lock:
                self._lanes.pop(key, None)


class Deadlines:
    """One thread runs callbacks at deadlines (time.monotonic seconds), at most `resolution`
    seconds late, from `start()` on (callbacks set before wait for it). A call that completes
    early costs no wake-up: its entry is skipped when due."""

    def __init__(self, name: str, resolution: float = 0.05):
        # entered with the plain lock (C code) on every call's `at`; the Condition only to sleep
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._counter = itertools.count()
        self._stopped = False
        self._resolution = resolution
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> "Deadlines":
        self.thread.start()
        return self

    def at(self, when: float, callback: Callable[[], None]) -> None:
        with self._lock:
            earliest = not self._heap or when < self._heap[0][0]
            heapq.heappush(self._heap, (when, next(self._counter), callback))
            if earliest:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
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
        with self._lock:
            self._stopped = True
            self._cond.notify()
        if self.thread.ident is not None:
            self.thread.join()


class Waiter:
    """What one thread waits on until another settles it: a lock held from its making until
    `set_result` or `set_exception` releases it. Settling is one C call and so is waiting, where a
    Future takes a Condition (Python code) on both sides: for a synchronous SPC call that is the
    caller's hand-off, 69,000 instructions a round trip with a Future. A result that lands before
    its thread waits is found without sleeping. Settled once: its owner makes sure only one path
    settles it (a second settle is ignored, as `settle` ignores it for a Future)."""

    __slots__ = ("_lock", "_result", "_error")

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()
        self._result: Any = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        return not self._lock.locked()

    def set_result(self, result: Any) -> None:
        self._settle(result, None)

    def set_exception(self, error: BaseException) -> None:
        self._settle(None, error)

    def _settle(self, result: Any, error: BaseException | None) -> None:
        if self._lock.locked():
            self._result, self._error = result, error
            try:
                self._lock.release()
            except RuntimeError:  # released by another path between the look and now
                pass

    def result(self) -> Any:
        """Wait until settled; return the result or raise the error."""
        self._lock.acquire()
        self._lock.release()  # settled for good: a second `result()` returns at once
        if self._error is not None:
            raise self._error
        return self._result


def settle(future: Future | Waiter, result: Any = None, error: BaseException | None = None) -> None:
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
