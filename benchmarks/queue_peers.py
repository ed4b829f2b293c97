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


class _Dirq:
    """dirq's QueueSimple: one file per element; a consumer locks, reads and removes it."""

    @staticmethod
    def open(path: str):
        from dirq.QueueSimple import QueueSimple
        return QueueSimple(path)

    @staticmethod
    def put(queue, data: bytes) -> None:
        queue.add(data)

    @staticmethod
    def take(queue) -> bytes | None:
        for name in queue:
            if queue.lock(name):
                data = queue.get(name)
                queue.remove(name)
                return data
        return None


class _PersistQueue:
    """persist-queue's SQLiteQueue: a queue in an SQLite file."""

    @staticmethod
    def open(path: str):
        from persistqueue import SQLiteQueue
        return SQLiteQueue(path, auto_commit=True, multithreading=True)

    @staticmethod
    def put(queue, data: bytes) -> None:
        queue.put(data)

    @staticmethod
    def take(queue) -> bytes | None:
        from persistqueue import Empty
        try:
            return queue.get(block=False)
        except Empty:
            return None


PEERS = {"dirq": _Dirq, "persist-queue": _PersistQueue}


def echo(ctl, peer: str, base: str) -> None:
    kind = PEERS[peer]
    requests, responses = kind.open(os.path.join(base, "req")), kind.open(os.path.join(base, "resp"))
    ctl.send("ready")
    while True:
        data = kind.take(requests)
        if data is None:
            time.sleep(POLL_SECONDS)
            continue
        kind.put(responses, data)
        if data == b"stop":
            return


def sink(ctl, peer: str, base: str, count: int) -> None:
    kind = PEERS[peer]
    queue = kind.open(os.path.join(base, "q"))
    ctl.send("ready")
    got = 0
    while got < count:
        if kind.take(queue) is None:
            time.sleep(POLL_SECONDS)
        else:
            got += 1
    ctl.send(time.perf_counter())


def rtt(peer: str, base: str, payload: bytes, n: int, start) -> list[float]:
    """Round trips in µs through a request queue and a response queue to an echoing process."""
    kind = PEERS[peer]
    proc, _ = start(echo, peer, base)
    requests, responses = kind.open(os.path.join(base, "req")), kind.open(os.path.join(base, "resp"))
    out = []
    for msg in [payload] * n + [b"stop"]:
        t = time.perf_counter()
        kind.put(requests, msg)
        while kind.take(responses) is None:
            time.sleep(POLL_SECONDS)
        if msg != b"stop":
            out.append((time.perf_counter() - t) * 1e6)
    proc.join(30)
    return out


def rate(peer: str, base: str, payload: bytes, n: int, start) -> float:
    """Elements per second from this process to a consuming one."""
    kind = PEERS[peer]
    proc, ctl = start(sink, peer, base, n)
    queue = kind.open(os.path.join(base, "q"))
    t = time.perf_counter()
    for _ in range(n):
        kind.put(queue, payload)
    done = ctl.recv()
    proc.join(30)
    return n / (done - t)
