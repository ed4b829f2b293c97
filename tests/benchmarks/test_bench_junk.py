"""CI runs the junk benchmark in a tiny mode only, to prove it still works (no timing asserts)."""
import json
import os
import subprocess
import sys

from benchmarks.bench_junk import RECEIVERS, _kinds

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_bench_junk_quick_mode_clears_every_kind_and_measures_every_variant():
    result = subprocess.run([sys.executable, "benchmarks/bench_junk.py", "--quick", "--files", "200", "--seconds", "1"],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert set(report["clear"]) == set(_kinds())
    for kind in report["clear"].values():
        assert kind["v1Seconds"] > 0 and kind["quotaSeconds"] > 0
    assert set(report["steady"]) == {f"{r} receiver, {j}" for r in RECEIVERS for j in ("no junk", "junk names")}
    for variant in report["steady"].values():
        assert variant["steadyHandled"] == variant["steadySent"] > 0 and variant["p99Ms"] > 0
    assert report["steady"]["quota receiver, junk names"]["junkPerSecond"] > 0
