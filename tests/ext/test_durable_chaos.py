"""Issue 19 item 5 in CI form: kill -9 of the receiver or one of 3 senders at random moments while
they send durable messages and SPC calls (benchmarks/durable_chaos.py, the full run has 1,000 kills):
nothing confirmed is lost, nothing is handled twice, every receipt chain verifies."""
from __future__ import annotations

import os
import sys

from .test_durable import persistent_base

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks.durable_chaos import run  # noqa: E402


def test_random_kill_9_of_senders_and_receiver_lose_nothing_and_handle_nothing_twice():
    parent = persistent_base()
    result = run(kills=30, senders=3, base=parent, max_pause=0.4, settle_timeout=120)
    assert result["killed"]["rx"] > 0 and result["killed"]["sender"] > 0
    assert result["confirmed"] >= 50, result
    assert result["lost"] == 0, result
    assert result["handledTwice"] == 0, result
    assert result["chainsBroken"] == 0 and result["chains"] >= 6, result
    assert result["unreceipted"] == 0 and result["pendingAtEnd"] == 0, result
    assert result["ok"]
    os.rmdir(parent)
