"""`quota` flow control with real processes: the receiver is a separate `scripted_node` process
(stopped with SIGSTOP where a test needs it to take nothing), senders are Nodes of the test
process or `quota_peer` processes. Every bound asserted here follows from what the receiver can
and cannot take, never from how fast anything runs; lower bounds on time are the only timings."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from speed_runtime import Node, NodeUnavailableError, QuotaExceededError

from ..helpers.wait import wait_until
from .conftest import files_of, frozen, go, messages, peak_rss_mb, stopped

QUOTA = ["quota"]


def _receiver(peers, *, allow=("s",), quota=None, delay_ms=0.0, features=QUOTA, name="r", **options):
    opts = {"features": list(features), **options}
    if quota is not None:
        opts["quota"] = quota
    return peers.start_scripted(name, allow=list(allow), delay_ms=delay_ms, options=opts)


def _flags(root: str, target: str) -> set[int]:
    inbox = os.path.join(root, target, "inbox")
    out = set()
    for name in os.listdir(inbox):
        with open(os.path.join(inbox, name), "rb") as f:
            out.add(int.from_bytes(f.read(64)[2:4], "big"))
    return out


def test_a_sender_never_has_more_files_in_the_inbox_than_the_receiver_allows(peers, root, key_path):
    r = _receiver(peers, quota={"pending": 8})
    with Node(root, key_path, "s", allow=["r"], features=QUOTA) as s:
        with stopped(r):
            for i in range(8):
                s.send("r", i, block=False)
            with pytest.raises(QuotaExceededError) as info:
                s.send("r", 8, block=False)
            assert info.value.limit == "pending" and info.value.target == "r"
            assert str(info.value) == ("cannot send to r now: 8 envelopes from s are still in its inbox, the most "
                                       "r allows (quota limit 'pending'); nothing was sent (non-blocking send)")
            started = time.monotonic()
            with pytest.raises(QuotaExceededError, match=r"\(waited 0.3 s\)"):
                s.send("r", 8, timeout=0.3)
            assert time.monotonic() - started >= 0.3
            assert len(files_of(root, "r", "s")) == 8
            # a blocking send waits while the receiver takes nothing, and goes once it has taken one
            result: list = []
            waiter = threading.Thread(target=lambda: result.append(s.send("r", 8, timeout=60)))
            waiter.start()
            assert len(files_of(root, "r", "s")) == 8 and waiter.is_alive()
            assert s.counters()["quotaRefusals"] == 2
        waiter.join(60)
        assert result == [9]  # refused sends consumed no sequence number
    assert [m["data"] for m in messages(r, 9)] == list(range(9))


def test_the_bytes_limit_counts_file_sizes_and_one_envelope_always_fits(peers, root, key_path):
    r = _receiver(peers, quota={"pending": 100, "pending_bytes": 4000})
    with Node(root, key_path, "s", allow=["r"], features=QUOTA) as s:
        with stopped(r):
            sent = 0
            with pytest.raises(QuotaExceededError) as info:
                for _ in range(10):
                    s.send("r", "x" * 1000, block=False)
                    sent += 1
            assert info.value.limit == "pendingBytes" and "r allows 4000 bytes" in str(info.value)
            sizes = [os.path.getsize(os.path.join(root, "r", "inbox", n)) for n in files_of(root, "r", "s")]
            assert len(sizes) == sent == 3 and sum(sizes) <= 4000 < sum(sizes) + sizes[0]
            with pytest.raises(QuotaExceededError):
                s.send("r", "y" * 6000, block=False)  # larger than the limit: only into an empty inbox
        messages(r, 3)
        wait_until(lambda: not files_of(root, "r", "s"), 30, "the receiver to take s's files")
        s.send("r", "y" * 6000, block=False)
    assert len(messages(r, 1)[0]["data"]) == 6000


def test_a_published_rate_delays_sends_and_never_drops_them(peers, root, key_path):
    r = _receiver(peers, quota={"rate": 20, "burst": 5})
    with Node(root, key_path, "s", allow=["r"], features=QUOTA) as s:
        started = time.monotonic()
        for i in range(25):
            s.send("r", i)
        assert time.monotonic() - started >= (25 - 5) / 20 - 0.01  # a burst of 5, then 20 per second
        with pytest.raises(QuotaExceededError) as info:
            for _ in range(3):
                s.send("r", "now", block=False)
        assert info.value.limit == "rate" and "r allows 20 envelopes per second" in str(info.value)
    assert [m["data"] for m in messages(r, 25)] == list(range(25))


def test_own_pacing_per_target_applies_to_a_v1_only_receiver_too(peers, root, key_path):
    r = _receiver(peers, features=())   # v1 only: publishes nothing
    pacing = {"send_rate": 1000, "targets": {"r": {"rate": 50, "burst": 1}}}
    with Node(root, key_path, "s", allow=["r"], features=QUOTA, quota=pacing) as s:
        started = time.monotonic()
        for i in range(11):
            s.send("r", i)
        assert time.monotonic() - started >= 10 / 50 - 0.01
    assert len(messages(r, 11)) == 11


def test_towards_a_v1_only_receiver_a_quota_sender_is_v1(peers, root, key_path):
    r = _receiver(peers, features=())
    with Node(root, key_path, "s", allow=["r"], features=QUOTA) as s, stopped(r):
        for i in range(200):
            s.send("r", i, block=False)   # no limits: nothing refused
        assert len(files_of(root, "r", "s")) == 200
        assert _flags(root, "r") == {0}     # no extension flag on any envelope
        assert s.extensions["quota"].pending("r") == (0, 0)
    assert len(messages(r, 200)) == 200


def test_a_waiting_send_ends_when_the_receiver_dies_and_the_limit_holds_across_its_restart(peers, root, key_path):
    r = _receiver(peers, quota={"pending": 4})
    with Node(root, key_path, "s", allow=["r"], features=QUOTA) as s:
        with stopped(r):
            for i in range(4):
                s.send("r", i, block=False)
            outcome: list = []

            def wait_for_room():
                try:
                    s.send("r", "late", timeout=60)
                except Exception as exc:  # noqa: BLE001 - the test looks at what it was
                    outcome.append(exc)
            waiter = threading.Thread(target=wait_for_room)
            waiter.start()
            r.proc.kill()
            r.proc.wait()
        waiter.join(60)
        assert isinstance(outcome[0], NodeUnavailableError) and "process" in str(outcome[0])
        # the files of the dead instance are still there and still ours: they count against a new
        # instance's limits until it has judged them (wrong_target: they were sealed for the old one)
        peers.started.remove(r)
        r2 = _receiver(peers, quota={"pending": 4}, trace=True)
        wait_until(lambda: not files_of(root, "r", "s"), 30, "the new instance to judge the old files")
        for i in range(4):
            s.send("r", i, block=False)
        assert [m["data"] for m in messages(r2, 4)] == [0, 1, 2, 3]


def test_a_v1_only_flood_is_served_within_the_receivers_bounded_read_ahead(peers, root, key_path):
    """A sender that ignores `quota` fills the inbox (nothing stops it but the Access Registry or a
    quarantine); the receiver still holds at most its read-ahead in memory."""
    r = _receiver(peers, quota={"pending": 8}, delay_ms=1, max_payload=1 << 20)
    baseline = peak_rss_mb(r.proc.pid)
    with Node(root, key_path, "s", allow=["r"], max_payload=1 << 20) as s, stopped(r):
        for i in range(600):  # 600 × 64 KiB = 38 MiB waiting
            s.send("r", {"i": i, "blob": "z" * 65536})
        assert len(files_of(root, "r", "s")) == 600
    got = messages(r, 600, timeout=120)
    assert [m["data"]["i"] for m in got] == list(range(600))
    print(f"v1 flood: 600 x 64 KiB waited; receiver peak RSS +{peak_rss_mb(r.proc.pid) - baseline:.1f} MB")
    # the bound: read-ahead (32) and what one message costs to decode and print, far below 38 MiB
    assert peak_rss_mb(r.proc.pid) - baseline < 20


def test_a_flooding_sender_under_quota_keeps_its_share_of_the_inbox_and_others_are_served(peers, root):
    """One sender floods (as fast as its limit lets it, until told to stop), three send steadily.
    Asserted: the flooder never has more files in the inbox than `pending`, its bytes never more
    than `pendingBytes`; every steady message is handled, in order, while the flood goes on; the
    receiver's peak memory stays bounded. (Latencies: benchmarks/bench_quota.py.)"""
    normal = ("a", "b", "c")
    r = _receiver(peers, allow=("f",) + normal, quota={"pending": 16, "pending_bytes": 65536}, delay_ms=2)
    baseline = peak_rss_mb(r.proc.pid)
    f = peers.start_peer("f", "r", count=10**6, size=2000, features=QUOTA, timeout=60, wait_go=True)
    steady = [peers.start_peer(n, "r", count=60, interval=0.02, features=QUOTA, wait_go=True) for n in normal]
    seen = {"most": 0, "bytes": 0, "looks": 0}
    sampling = threading.Event()

    def sample():  # snapshots: the two processes that change f's files are stopped while we list them
        inbox = os.path.join(root, "r", "inbox")
        while not sampling.wait(0.02):
            with frozen(r, f):
                names = files_of(root, "r", "f")
                size = sum(os.path.getsize(os.path.join(inbox, name)) for name in names)
            seen["most"], seen["bytes"] = max(seen["most"], len(names)), max(seen["bytes"], size)
            seen["looks"] += 1
    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        go(f)
        wait_until(lambda: seen["most"] >= 16, 30, "the flood to fill its share of the inbox")
        for node in steady:
            go(node)
        handled: dict[str, list[int]] = {n: [] for n in normal}
        flood_handled = 0
        while any(len(v) < 60 for v in handled.values()):
            line = messages(r, 1)[0]
            if line["from"] == "f":
                flood_handled += 1
            else:
                handled[line["from"]].append(line["data"]["n"])
        assert f.proc.poll() is None, "the flood must still be going on"
    finally:
        sampling.set()
        sampler.join()
    grew = peak_rss_mb(r.proc.pid) - baseline
    print(f"flood: {seen['looks']} snapshots, most {seen['most']} files / {seen['bytes']} bytes of f; "
          f"{flood_handled} flood messages handled meanwhile; receiver peak RSS +{grew:.1f} MB")  # figures (-s)
    assert handled == {n: list(range(60)) for n in normal}
    assert flood_handled > 0
    assert seen["most"] == 16 and seen["bytes"] <= 65536 and seen["looks"] > 10
    assert peak_rss_mb(r.proc.pid) - baseline < 20
    f.proc.send_signal(signal.SIGTERM)


def test_a_reliable_send_waits_for_room_like_a_plain_one(peers, root, key_path):
    """The first transmission of a reliable message waits for room up to the send's timeout (as a
    plain send does); it used to fail at once, as a non-blocking send."""
    r = _receiver(peers, quota={"pending": 1}, features=["quota", "reliable"])
    with Node(root, key_path, "s", allow=["r"], features=["quota", "reliable"]) as s:
        with stopped(r):
            s.send("r", 0, block=False)
            started = time.monotonic()
            with pytest.raises(QuotaExceededError, match=r"\(waited 0.3 s\)$"):
                s.send("r", "refused", reliable=True, timeout=0.3)
            assert time.monotonic() - started >= 0.3 and len(files_of(root, "r", "s")) == 1
            handles: list = []
            waiter = threading.Thread(target=lambda: handles.append(s.send("r", 1, reliable=True, timeout=60)))
            waiter.start()
        waiter.join(60)  # the receiver takes its file: the waiting send goes
        assert handles and handles[0].result(60).transmissions == 1
    assert [m["data"] for m in messages(r, 2)] == [0, 1]


def test_durable_copies_keep_within_the_receivers_limits(peers, root, key_path):
    """A durable copy is a MESSAGE like any other: with no room in the target's inbox it is not
    delivered now (it is tried again later), rather than passing the limit."""
    r = _receiver(peers, quota={"pending": 1}, durable=True, durable_on_tmpfs=True)
    with Node(root, key_path, "s", allow=["r"], features=QUOTA, durable=True, durable_on_tmpfs=True) as s:
        with stopped(r):
            for i in range(3):
                s.send("r", i, durable=True)
            wait_until(lambda: s.counters()["quotaRefusals"] >= 1, 20, "a copy refused for want of room")
            assert len(files_of(root, "r", "s")) == 1
        wait_until(lambda: not s.extension("durable").outbox_items(), 60, "every receipt")
    assert sorted(m["data"] for m in messages(r, 3)) == [0, 1, 2]
