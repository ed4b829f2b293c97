"""Time travel's reader of the journals (services/journal_history.py), on real journal files
written by the runtime's JournalWriter: lease and health records of every journal and its
rotated backups, each once; envelope records around a moment found by bisection in a large
journal; a FIFO among the journals reported, never opened for reading."""

import os
import subprocess
import sys
import time

from speed_runtime.core.records import EnvelopeTrace, HealthTrace, LeaseTrace
from speed_runtime.fsutil import TRACES_DIR
from speed_runtime.journal import JournalWriter

from speedtui.services.journal_history import JournalHistory

T0 = 1_000_000.0


def msg(ts, node="a", seq=1):
    return EnvelopeTrace(ts, node, "out", "b", "MESSAGE", seq, 300, "sent")


def test_lifecycle_records_of_every_journal_and_backup_once(tmp_path):
    w = JournalWriter(str(tmp_path), "a", max_bytes=4000, backups=3)
    w(LeaseTrace(T0, "a", "a", "registered"))
    for i in range(100):  # enough to rotate (the writer rotates at a flush)
        w(msg(T0 + 1 + i, seq=i))
        if i % 20 == 19:
            w.flush()
    w(HealthTrace(T0 + 200, "a", "receiving_failed", "inbox gone"))
    w.flush()
    names = sorted(os.listdir(tmp_path / TRACES_DIR))
    assert "a.jsonl.1" in names  # rotated
    history = JournalHistory(tmp_path)
    first = history.refresh()
    assert [(r.kind, r.event) for r in first] == [("lease", "registered"), ("health", "receiving_failed")]
    for i in range(40):  # more rotations: what was read is not read again under its new name
        w(msg(T0 + 300 + i, seq=100 + i))
        if i % 20 == 19:
            w.flush()
    w(LeaseTrace(T0 + 500, "a", "a", "deregistered"))
    w.close()
    again = history.refresh()
    assert [r.event for r in again] == ["registered", "receiving_failed", "deregistered"]


def test_the_window_of_a_large_journal_is_found_by_bisection(tmp_path, monkeypatch):
    w = JournalWriter(str(tmp_path), "a", max_bytes=1 << 30)
    for i in range(60_000):  # about 12 MB, one record every 10 ms
        w(msg(T0 + i / 100, seq=i))
        if i % 5000 == 4999:
            w.flush()
    w.close()
    reads = []
    real_pread = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, off: reads.append(n) or real_pread(fd, n, off))
    got, total = JournalHistory(tmp_path, max_window=50).window(T0 + 300, T0 + 310, T0 + 305)
    assert total == 1001  # T0+300.00 … T0+310.00
    seqs = [r.seq for r in got]  # the 50 nearest the moment, in time order
    assert seqs == list(range(seqs[0], seqs[0] + 50)) and 30475 <= seqs[0] <= 30476
    assert sum(reads) < 4 * 2**20, f"read {sum(reads) / 2**20:.1f} MiB of a {12} MB journal"
    assert got[0].envelope is None


def test_a_fifo_among_the_journals_is_reported_and_never_read(tmp_path):
    w = JournalWriter(str(tmp_path), "a")
    w(LeaseTrace(T0, "a", "a", "registered"))
    w.close()
    fifo = tmp_path / TRACES_DIR / "evil.jsonl"
    os.mkfifo(fifo, 0o600)
    writer = subprocess.Popen([sys.executable, "-c", "import os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
                               "os.write(fd, b'{}\\n'); print('ready', flush=True); sys.stdin.read()", str(fifo)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "ready"
        history = JournalHistory(tmp_path)
        started = time.monotonic()
        assert [r.event for r in history.refresh()] == ["registered"]
        assert history.window(T0 - 10, T0 + 10, T0) == ([], 0)
        assert time.monotonic() - started < 10
        assert "not a regular file" in history.problems["evil.jsonl"]
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            assert os.read(fd, 100) == b"{}\n"  # still there: nobody read it
        finally:
            os.close(fd)
    finally:
        writer.stdin.close()
        writer.wait(30)
        writer.stdout.close()
