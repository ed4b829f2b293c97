"""Closing the console's analytics child while it works (a pre-warm on thousands of journals, an
analysis): the console quit, but its process stayed, waiting for the warm-up's thread, which the
close had made start a new child and a new JVM. A stand-in child here (no Spark): it takes a
request and never answers, as a long job does, and writes down the signal that ends it."""
from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from speedtui.pipeline.common import PipelineError
from speedtui.pipeline.worker import AnalyticsWorker

from tests.helpers.wait import wait_until

BUSY_CHILD = r'''
import os, signal, sys, time
signals = sys.argv[1]
signal.signal(signal.SIGTERM, lambda *_: (open(signals, "a").write("TERM\n"), os._exit(0)))
sys.stdin.readline()
open(signals, "a").write("busy\n")
while True:
    time.sleep(1)
'''


@pytest.mark.timeout(120)
def test_a_busy_child_is_ended_at_close_and_no_new_one_starts(tmp_path, monkeypatch):
    signals = tmp_path / "signals"
    started: list[subprocess.Popen] = []

    def start(self):
        proc = subprocess.Popen([sys.executable, "-c", BUSY_CHILD, str(signals)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
        started.append(proc)
        return proc

    monkeypatch.setattr(AnalyticsWorker, "_start", start)
    worker = AnalyticsWorker(str(tmp_path / "analytics.log"))
    failed: list[BaseException] = []

    def warm():
        try:
            worker.warm([str(tmp_path)])
        except BaseException as exc:  # noqa: BLE001 - what the request ends with
            failed.append(exc)

    request = threading.Thread(target=warm)
    request.start()
    wait_until(lambda: signals.exists() and "busy" in signals.read_text(), timeout=30, what="the child at work")
    worker.close(timeout=60)  # busy: ended at once, not after the 60 s its stdin's end would be given
    request.join(timeout=30)
    assert not request.is_alive()
    assert signals.read_text().splitlines() == ["busy", "TERM"]
    assert len(started) == 1 and started[0].poll() is not None
    assert len(failed) == 1 and isinstance(failed[0], PipelineError)
    with pytest.raises(PipelineError, match="closed"):
        worker.warm([str(tmp_path)])
    assert len(started) == 1
