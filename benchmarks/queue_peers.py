"""Peers that do SPEED's job the same way — a queue in the file system between processes — for
benchmarks/run.py: `dirq` (a directory queue, one file per element, Perl's Directory::Queue) and
`persist-queue` (`persistqueue.SQLiteQueue`, a queue in an SQLite file). Neither encrypts, checks
senders or wakes a reader on arrival: their consumers poll (here: a 100 µs sleep between empty
polls, the fairest cheap setting on 2 cores). Each has a producer/consumer (one-way rate) and a
request/response built from two queues (round trip).
"""
from __future__ import annotations

import os
import time

POLL_SECONDS = 0.0001


# ------------------------------------------------------------------ dirq
def _dirq(path: str):
    from dirq.QueueSimple import QueueSimple
    return QueueSimple(path)


def _dirq_take(queue) -> bytes | None:
    for name in queue:
        if queue.lock(name):
            data = queue.get(name)
            queue.remove(name)
            return data
    return None


def dirq_echo(ctl, base: str) -> None:
    requests, responses = _dirq(os.path.join(base, "req")), _dirq(os.path.join(base, "resp"))
    ctl.send("ready")
    while True:
        data = _dirq_take(requests)
        if data is None:
            time.sleep(POLL_SECONDS)
            continue
        responses.add(data)
        if data == b"stop":
            return


def dirq_sink(ctl, base: str, count: int) -> None:
    queue = _dirq(os.path.join(base, "q"))
    ctl.send("ready")
    got = 0
    while got < count:
        if _dirq_take(queue) is None:
            time.sleep(POLL_SECONDS)
        else:
            got += 1
    ctl.send(time.perf_counter())


def dirq_rtt(base: str, payload: bytes, n: int, start) -> list[float]:
    proc, _ = start(dirq_echo, base)
    requests, responses = _dirq(os.path.join(base, "req")), _dirq(os.path.join(base, "resp"))
    out = []
    for msg in [payload] * n + [b"stop"]:
        t = time.perf_counter()
        requests.add(msg)
        while _dirq_take(responses) is None:
            time.sleep(POLL_SECONDS)
        if msg != b"stop":
            out.append((time.perf_counter() - t) * 1e6)
    proc.join(30)
    return out


def dirq_rate(base: str, payload: bytes, n: int, start) -> float:
    proc, ctl = start(dirq_sink, base, n)
    queue = _dirq(os.path.join(base, "q"))
    t = time.perf_counter()
    for _ in range(n):
        queue.add(payload)
    done = ctl.recv()
    proc.join(30)
    return n / (done - t)


# ------------------------------------------------------------------ persist-queue (SQLite)
def _pq(path: str):
    from persistqueue import SQLiteQueue
    return SQLiteQueue(path, auto_commit=True, multithreading=True)


def _pq_take(queue) -> bytes | None:
    from persistqueue import Empty
    try:
        return queue.get(block=False)
    except Empty:
        return None


def pq_echo(ctl, base: str) -> None:
    requests, responses = _pq(os.path.join(base, "req")), _pq(os.path.join(base, "resp"))
    ctl.send("ready")
    while True:
        data = _pq_take(requests)
        if data is None:
            time.sleep(POLL_SECONDS)
            continue
        responses.put(data)
        if data == b"stop":
            return


def pq_sink(ctl, base: str, count: int) -> None:
    queue = _pq(os.path.join(base, "q"))
    ctl.send("ready")
    got = 0
    while got < count:
        if _pq_take(queue) is None:
            time.sleep(POLL_SECONDS)
        else:
            got += 1
    ctl.send(time.perf_counter())


def pq_rtt(base: str, payload: bytes, n: int, start) -> list[float]:
    proc, _ = start(pq_echo, base)
    requests, responses = _pq(os.path.join(base, "req")), _pq(os.path.join(base, "resp"))
    out = []
    for msg in [payload] * n + [b"stop"]:
        t = time.perf_counter()
        requests.put(msg)
        while _pq_take(responses) is None:
            time.sleep(POLL_SECONDS)
        if msg != b"stop":
            out.append((time.perf_counter() - t) * 1e6)
    proc.join(30)
    return out


def pq_rate(base: str, payload: bytes, n: int, start) -> float:
    proc, ctl = start(pq_sink, base, n)
    queue = _pq(os.path.join(base, "q"))
    t = time.perf_counter()
    for _ in range(n):
        queue.put(payload)
    done = ctl.recv()
    proc.join(30)
    return n / (done - t)
