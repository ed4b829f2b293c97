"""Issue 13 items 2 and 3: a graceful restart loses nothing; a receiver's memory is bounded
whatever a sender does, and a kill -9 loses at most what was being handled. Real processes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

from speed_runtime import Node, NodeUnavailableError
from speed_runtime.journal import read_journal

from ..helpers.wait import wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def _drain_lines(node, into: list) -> None:
    while True:
        try:
            into.append(json.loads(node.lines.get_nowait()))
        except Exception:
            return


def test_a_graceful_restart_under_load_loses_no_successful_send(procs, root, key):
    """Receiver with a 5 ms handler, a sender looping send(), SIGTERM while several hundred envelopes
    wait in the inbox, a new instance started as soon as the name is free: every send that
    returned was handled by one of the two instances, once (contract 1.1: `leaving` refuses new
    deliveries; a graceful stop handles its whole inbox before it deregisters)."""
    first = procs.start_scripted("r", allow=["s"], delay_ms=5, options={"trace": True})
    inbox = os.path.join(root, "r", "inbox")
    ok, refused, stop = [], [], threading.Event()
    with Node(root, key, "s", allow=["r"]) as s:
        def pump() -> None:
            n = 0
            while not stop.is_set():
                try:
                    s.send("r", {"n": n})
                    ok.append(n)
                except NodeUnavailableError as exc:
                    refused.append(str(exc))
                    stop.wait(0.005)
                n += 1
        sender = threading.Thread(target=pump, name="test-pump")
        sender.start()
        try:
            wait_until(lambda: len(os.listdir(inbox)) >= 300, timeout=60, what="a backlog of several hundred")
            in_flight = len(os.listdir(inbox))
            first.signal(signal.SIGTERM)
            second = None
            deadline = time.monotonic() + 120
            while second is None and time.monotonic() < deadline:  # start the next one as soon as it may
                candidate = procs.start_scripted("r", allow=["s"], delay_ms=5, wait_ready=False)
                wait_until(lambda: not candidate.lines.empty() or candidate.proc.poll() is not None, timeout=60,
                           what="the new instance to start or give up")
                if not candidate.lines.empty() and candidate.read_line().startswith("ready"):
                    second = candidate  # (it gives up with "name in use" while the old one is leaving)
            assert second is not None, "the new instance never got the name"
            assert first.proc.wait(60) == 0
            mark = len(ok)
            wait_until(lambda: len(ok) >= mark + 200, timeout=60, what="sends to the new instance")
        finally:
            stop.set()
            sender.join()
        handled_first, handled_second = [], []
        _drain_lines(first, handled_first)

        def all_handled() -> bool:
            _drain_lines(second, handled_second)
            done = {m["data"]["n"] for m in handled_first + handled_second if isinstance(m, dict)}
            return set(ok) <= done
        try:
            wait_until(all_handled, timeout=120, what="every successful send to be handled")
        except TimeoutError:
            pass  # reported with the figures below
    one = [m["data"]["n"] for m in handled_first if isinstance(m, dict)]
    two = [m["data"]["n"] for m in handled_second if isinstance(m, dict)]
    assert "closed" in handled_first, "the old instance did not close gracefully"
    assert not set(one) & set(two), "handled twice"
    lost = sorted(set(ok) - set(one) - set(two))
    rejected = [(e.reason, e.seq) for e in read_journal(os.path.join(root, "speed_traces", "r.jsonl"))[0]
                if getattr(e, "outcome", "") == "rejected"]
    assert lost == [], f"{len(lost)} of {len(ok)} successful sends were never handled: {lost[:10]}; {rejected[:10]}"
    assert one == sorted(one) and two == sorted(two)
    print(json.dumps({"inFlightAtSignal": in_flight, "sent": len(ok), "refusedWhileRestarting": len(refused),
                      "handledByOld": len(one), "handledByNew": len(two), "lost": 0}))


def test_a_flood_of_large_messages_keeps_the_receivers_memory_bounded(procs, root, key):
    """A sender pushes 800 × 256 KiB at a receiver whose handler takes 10 ms: the envelopes wait in
    the inbox (the file system is the queue), not in the receiver's memory. Before contract 1.1 the
    receiver drained its inbox into memory: 4,000 such sends took it to 1.1 GB."""
    receiver = procs.start_scripted("r", allow=["s"], delay_ms=10)
    pid = int(receiver.proc.pid)
    baseline = _peak_rss_mb(pid)
    blob = "x" * (256 * 1024 - 64)
    with Node(root, key, "s", allow=["r"], max_payload=1 << 20) as s:
        for n in range(800):
            s.send("r", {"n": n, "blob": blob})
        peak = _peak_rss_mb(pid)
        handled = []
        wait_until(lambda: (_drain_lines(receiver, handled), len(handled) >= 200)[1], timeout=120,
                   what="the receiver to work through part of the flood")
        peak = max(peak, _peak_rss_mb(pid))
    assert peak - baseline < 64, f"peak RSS grew by {peak - baseline:.0f} MB (from {baseline:.0f} MB)"
    print(json.dumps({"baselineMB": round(baseline, 1), "peakMB": round(peak, 1)}))


def test_kill_9_under_load_loses_at_most_the_envelope_being_handled(procs, root, key):
    """Ten kill -9s of a receiver at random moments of a stream (the long run of 200 kills is
    benchmarks/kill_loss.py): each loses at most the one envelope its handler was working on."""
    results = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "kill_loss.py"), "--kills", "10",
                              "--root", root], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert results.returncode == 0, results.stderr[-3000:]
    report = json.loads(results.stdout)
    assert report["kills"] == 10 and report["maxLostPerKill"] <= 1, report
    assert report["handledTwice"] == 0, report


def test_a_backlog_is_judged_as_it_was_when_delivered(root, key):
    """With the inbox as the queue, an envelope may wait longer than the replay window, and its
    sender may have left meanwhile: it is judged against its arrival (the file's change time) and
    the entry its sender had then, so a backlog never turns into stale_timestamp or unknown_sender
    rejections (docs/PROTOCOL.md reading 22). Replays that arrive later are still refused."""
    handled, rejected = [], []
    with Node(root, key, "r", allow=["s"], replay_window=1.0) as r:
        r.add_observer(lambda e: rejected.append(e.reason) if getattr(e, "outcome", "") == "rejected" else None)
        r.on_message(lambda m: (time.sleep(0.02), handled.append(m.data)))
        with Node(root, key, "s", allow=["r"], linger_seconds=0) as s:  # leaves at once, 3 s of work queued
            for n in range(150):
                s.send("r", n)
        wait_until(lambda: len(handled) + len(rejected) == 150, timeout=60, what="the backlog")
    assert sorted(handled) == list(range(150)) and rejected == []
