"""CI runs the quota benchmark in a tiny mode only, to prove it still works (no timing asserts)."""
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_bench_quota_quick_mode_measures_every_variant():
    result = subprocess.run([sys.executable, "benchmarks/bench_quota.py", "--quick", "--seconds", "1", "--sends", "20"],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert set(report["variants"]) == {"no flood", "flood, quota", "flood, v1 sender", "a busy core",
                                         "a busy directory"}
    for variant in report["variants"].values():
        assert variant["steadyHandled"] > 0 and variant["p99Ms"] > 0 and variant["receiverPeakMB"] > 0
        assert 0 < variant["sendP99Ms"] <= variant["p99Ms"] * 10  # the senders' own part, reported apart
    assert report["variants"]["flood, quota"]["floodPerSecond"] > 0
    assert set(report["sendCost"]) == {"floor", "plain send", "quota send, room", "quota send, window of 8 full",
                                       "admission check alone"}
