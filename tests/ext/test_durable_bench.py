"""CI runs the durable benchmark in a tiny form only, to prove the command works (no timing asserts)."""
import json
import subprocess
import sys

from .test_durable import REPO, persistent_base


def test_bench_durable_runs_every_variant_and_counts_fsyncs():
    disk = persistent_base()
    try:
        r = subprocess.run([sys.executable, "benchmarks/bench_durable.py", "--quick", "--messages", "40", "--rounds", "1",
                            "--json", "--disk", disk], cwd=REPO, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        out = json.loads(r.stdout)
        assert set(out["variants"]) == {"plain, disk", "durable, disk", "plain, tmpfs", "durable, tmpfs"}
        assert all(v["rate"] > 0 and v["sendRate"] > 0 for v in out["variants"].values())
        assert out["variants"]["plain, disk"]["fsyncsPerMessage"] == 0
        assert out["variants"]["durable, disk"]["senderFsyncsPerMessage"] >= 2       # the outbox entry and its dir
        assert out["variants"]["durable, disk"]["receiverFsyncsPerMessage"] >= 0.9   # the receipt's commit
        assert len(out["floors"]) == 4 and all(v > 0 for v in out["floors"].values())
    finally:
        subprocess.run(["rm", "-rf", disk])
