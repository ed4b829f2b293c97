"""CI runs the quota benchmark in a tiny mode only, to prove it still works (no timing asserts)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from benchmarks import bench_quota

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


def test_the_count_of_the_flooded_inbox_is_what_a_listing_finds(tmp_path):
    """The count is one `stat` on tmpfs (20 bytes a name), a listing elsewhere: both as a listing."""
    places = [tmp_path] + ([tempfile.mkdtemp(dir="/dev/shm")] if os.path.isdir("/dev/shm") else [])
    try:
        for place in places:
            inbox = os.path.join(place, "inbox")
            os.mkdir(inbox)
            for i in range(137):
                open(os.path.join(inbox, f"flood.{i:020d}.env"), "w").close()
            os.mkdir(os.path.join(inbox, "a-directory"))
            assert bench_quota._names_in(inbox) == len(os.listdir(inbox)) == 138
    finally:
        for place in places[1:]:
            shutil.rmtree(place)
