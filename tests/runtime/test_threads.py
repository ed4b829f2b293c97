"""The node's thread machinery: the Waiter a synchronous call waits on, and the worker pool's
hand-over (a queue in C, counts under a plain lock)."""

import threading
import time

import pytest

from speed_runtime.core.errors import SpcError
from speed_runtime.node.threads import Waiter, WorkerPool, settle
from tests.helpers.wait import wait_until


def test_a_waiter_settled_before_its_thread_waits_returns_at_once():
    waiter = Waiter()
    assert not waiter.done()
    settle(waiter, {"ok": 1})
    assert waiter.done()
    assert waiter.result() == {"ok": 1}
    assert waiter.result() == {"ok": 1}  # settled for good


def test_a_waiter_raises_its_error_and_ignores_a_second_settle():
    waiter = Waiter()
    settle(waiter, error=SpcError("TIMEOUT", "late"))
    settle(waiter, "a result after the timeout")  # a response after the deadline: ignored
    with pytest.raises(SpcError) as info:
        waiter.result()
    assert info.value.code == "TIMEOUT"


def test_a_waiter_wakes_the_thread_waiting_on_it():
    waiter, got = Waiter(), []
    thread = threading.Thread(target=lambda: got.append(waiter.result()))
    thread.start()
    settle(waiter, 42)
    thread.join(10)
    assert got == [42]


def test_the_pool_runs_every_task_and_waits_until_idle():
    pool = WorkerPool(3, "test-pool", lambda exc: None)
    ran, lock = [], threading.Lock()

    def task(i):
        with lock:
            ran.append(i)
    try:
        for i in range(200):
            pool.submit(lambda i=i: task(i))
        assert pool.wait_idle(time.monotonic() + 30)
        assert sorted(ran) == list(range(200)) and pool.idle()
        assert len(pool.threads) <= 3
    finally:
        assert pool.stop(time.monotonic() + 5)
    assert all(not t.is_alive() for t in pool.threads)


def test_a_failing_task_is_reported_and_the_worker_goes_on():
    errors = []
    pool = WorkerPool(1, "test-pool", errors.append)
    done = threading.Event()
    try:
        pool.submit(lambda: 1 / 0)
        pool.submit(done.set)
        assert done.wait(10)
        assert [type(e) for e in errors] == [ZeroDivisionError]
    finally:
        pool.stop(time.monotonic() + 5)


def test_a_stopped_pool_drops_what_is_queued_and_refuses_more():
    pool = WorkerPool(1, "test-pool", lambda exc: None)
    release, started, ran = threading.Event(), threading.Event(), []
    pool.submit(lambda: (started.set(), release.wait(10)))
    pool.submit(lambda: ran.append("queued"))
    assert started.wait(10)
    assert not pool.stop(time.monotonic() + 0.05)  # the first task still runs: not finished
    release.set()
    wait_until(lambda: not any(t.is_alive() for t in pool.threads), 10, "the worker ends")
    assert ran == []
    with pytest.raises(RuntimeError):
        pool.submit(lambda: None)
