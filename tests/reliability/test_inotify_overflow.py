"""Case 12: inotify overflow. The receiver's inotify queue is created under a lowered
fs.inotify.max_queued_events (restored right after, and again at teardown), then four sender
processes burst 12,000 envelopes at it: every one must arrive, in order per sender, through the
rescans that follow IN_Q_OVERFLOW; the test measures the delay. The 100,000-envelope burst under
the default limit is `python benchmarks/soak.py --burst 100000` (docs/RELIABILITY.md)."""
import os
import subprocess
import sys
import time

import pytest

from speed_runtime import Node

from ..helpers.wait import wait_until

LIMIT = "/proc/sys/fs/inotify/max_queued_events"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def lowered_queue():
    with open(LIMIT) as f:
        original = f.read().strip()

    def restore():
        with open(LIMIT, "w") as f:
            f.write(original)
    with open(LIMIT, "w") as f:
        f.write("32")
    try:
        yield restore
    finally:
        restore()
        with open(LIMIT) as f:
            assert f.read().strip() == original


def test_every_envelope_arrives_through_rescans_after_an_inotify_overflow(root, key, key_path, lowered_queue):
    senders, count = 4, 3000
    arrivals = []
    with Node(root, key, "sink", allow=[f"s{i}" for i in range(senders)], rescan_seconds=1.0) as sink:
        lowered_queue()  # the queue limit is fixed when the inotify instance is created: restore it at once
        sink.on_message(lambda m: arrivals.append((m.sender, m.data["n"], time.time() * 1000 - m.timestamp_ms)))
        procs = [subprocess.Popen([sys.executable, "-m", "tests.helpers.sender", root, key_path, f"s{i}", "sink",
                                   str(count)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"}) for i in range(senders)]
        try:
            for p in procs:
                assert p.stdout.readline().strip() == "ready"
            for p in procs:
                p.stdin.write("go\n")
                p.stdin.flush()
            for p in procs:
                assert p.stdout.readline().strip() == f"done {count}"
            sent_at = time.monotonic()
            wait_until(lambda: len(arrivals) >= senders * count, timeout=180, interval=0.05,
                       what=f"{senders * count} envelopes")
            drain = time.monotonic() - sent_at
            for p in procs:
                p.stdin.close()
                assert p.wait(60) == 0
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
                p.stdout.close()
        overflows = sink.counters().get("inotifyOverflows", 0)
        assert overflows, "the lowered queue never overflowed: the case was not exercised"
        by_sender = {}
        for sender, n, _ in arrivals:
            by_sender.setdefault(sender, []).append(n)
        assert by_sender == {f"s{i}": list(range(count)) for i in range(senders)}
        delays = sorted(d for _, _, d in arrivals)
        figures = {"envelopes": len(arrivals), "overflows": overflows, "drainAfterLastSendS": round(drain, 2),
                   "delayP50Ms": round(delays[len(delays) // 2]), "delayP99Ms": round(delays[int(len(delays) * .99)]),
                   "delayMaxMs": round(delays[-1])}
        print(figures)
        assert sink.counters()["rejected"] == {}
