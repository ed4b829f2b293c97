"""The receiver under a v1-only flood (no `quota`): a sender whose backlog overflows the names the
receiver remembers must not make it list the whole inbox at every step (each listing of a large
backlog delayed every other sender's files: benchmarks/bench_quota.py, `flood, v1 sender`)."""
from __future__ import annotations

import os
import threading
import time

from speed_runtime import Node
from speed_runtime.journal import read_journal
from speed_runtime.node.inbox import MAX_NAMES_PER_SENDER, PendingNames
from speed_runtime.node.threads import WorkerPool

from ..helpers.wait import wait_until
from .conftest import frozen, messages


def _name(sender: str, seq: int) -> str:
    return f"{sender}.01234567.{seq:020d}.89abcdef.env"


def test_an_overflowing_sender_is_listed_again_only_once_half_its_names_are_taken():
    names = PendingNames()
    names.need_listing = False
    for seq in range(1, MAX_NAMES_PER_SENDER + 500):
        names.remember(_name("flood", seq), {"flood", "steady"})
    assert not names.need_listing  # listing now would find only names it cannot remember
    names.remember(_name("steady", 1), {"flood", "steady"})  # other senders are remembered as before
    assert names.has("steady")
    taken = [names.pop("flood")[1] for _ in range(MAX_NAMES_PER_SENDER // 2 - 1)]
    assert taken == list(range(1, MAX_NAMES_PER_SENDER // 2)) and not names.need_listing
    names.pop("flood")
    assert names.need_listing  # room for half: now a listing finds the rest, in sequence order


def test_names_of_an_overflowed_sender_are_skipped_without_parsing(monkeypatch):
    names = PendingNames()
    for seq in range(1, MAX_NAMES_PER_SENDER + 2):
        names.remember(_name("flood", seq), {"flood"})
    import speed_runtime.node.inbox as inbox

    def refuse(*_):
        raise AssertionError("parsed a name that cannot be remembered")
    monkeypatch.setattr(inbox, "judge_name", refuse)
    for seq in range(MAX_NAMES_PER_SENDER + 2, MAX_NAMES_PER_SENDER + 1000):
        names.remember(_name("flood", seq), {"flood"})


def test_a_backlog_waits_behind_one_file_of_every_other_sender(peers, root, key_path):
    """Files are taken in turns, one per sender per turn: the other sender's one file is among the
    first two judged, not the 13th behind the backlog's read-ahead (32)."""
    r = peers.start_scripted("r", allow=["a", "b"], options={"trace": True})
    with Node(root, key_path, "a", allow=["r"]) as a, Node(root, key_path, "b", allow=["r"]) as b:
        with frozen(r):
            for i in range(12):
                a.send("r", i)
            b.send("r", "one")
        messages(r, 13)
    order = [e.peer for e in read_journal(os.path.join(root, "speed_traces", "r.jsonl"))[0]
             if getattr(e, "outcome", None) == "accepted" and e.type == "MESSAGE"]
    assert sorted(order) == ["a"] * 12 + ["b"] and order.index("b") <= 1


def test_two_lanes_submitted_while_one_worker_wakes_run_in_parallel():
    """Two tasks submitted before the one idle worker has woken up: the second must get a worker
    of its own, not wait behind the first (a blocked message handler held up another sender's
    lane: tests/runtime/test_node.py::test_per_sender_fifo_with_senders_in_parallel, 1 in 8)."""
    pool = WorkerPool(4, "test-pool", lambda exc: None)
    try:
        done = threading.Event()
        pool.submit(done.set)
        wait_until(lambda: done.is_set() and pool._idle == 1, 10, "one idle worker")
        release, second = threading.Event(), threading.Event()
        with pool._cond:  # the idle worker cannot wake before both are submitted (the race, made certain)
            pool.submit(lambda: release.wait(10))
            pool.submit(second.set)
        assert second.wait(10), "the second task waited behind the first"
        release.set()
    finally:
        pool.stop(time.monotonic() + 5)


def test_a_backlog_larger_than_the_bound_is_taken_in_sequence_order():
    """A listing meets a sender's files in directory order, not sequence order: with more files
    than it may remember it keeps the smallest, and never offers a name beyond one it could not
    remember before a listing found what lies below (regression: 20,000 envelopes of one sender
    behind a slow receiver were judged out of order, 3 gaps accepted and 3,892 envelopes below them
    rejected as `replayed_sequence`)."""
    import random
    rng = random.Random(7)
    inbox = {_name("flood", seq) for seq in range(1, 3 * MAX_NAMES_PER_SENDER)}
    names, taken, arriving = PendingNames(), [], iter(range(3 * MAX_NAMES_PER_SENDER, 4 * MAX_NAMES_PER_SENDER))

    def listing():
        names.begin_listing()
        for name in rng.sample(sorted(inbox), len(inbox)):  # the directory's order: any
            names.remember(name, {"flood"})
        names.end_listing()
        names.need_listing = False

    listing()
    while inbox:
        if names.need_listing:
            listing()
        for _ in range(rng.randrange(1, 50)):  # new files arrive (inotify) between the judgements
            seq = next(arriving, None)
            if seq is not None:
                inbox.add(_name("flood", seq))
                names.remember(_name("flood", seq), {"flood"})
        if not names.has("flood"):
            assert names.need_listing, "names wait, but no listing is asked for"
            continue
        item = names.pop("flood")
        inbox.discard(item[2])
        taken.append(item[1])
    assert taken == sorted(taken) == list(range(1, 4 * MAX_NAMES_PER_SENDER))


def test_a_backlog_of_one_sender_beyond_the_bound_loses_nothing(peers, root, key_path):
    """Real processes: a receiver stopped while one sender writes more envelopes than it remembers
    per sender; once it runs again every message is handled, in order, none rejected."""
    count = 2 * MAX_NAMES_PER_SENDER + 1500  # more than a listing after half was taken can remember
    r = peers.start_scripted("r", allow=["a"], options={"trace": True})
    with Node(root, key_path, "a", allow=["r"]) as a:
        with frozen(r):
            for i in range(count):
                a.send("r", i)
        got = [m["data"] for m in messages(r, count, timeout=60)]
    assert got == list(range(count))
    rejected = [e for e in read_journal(os.path.join(root, "speed_traces", "r.jsonl"))[0]
                if getattr(e, "outcome", None) == "rejected"]
    assert rejected == []
