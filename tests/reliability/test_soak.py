"""Case 16 (CI mode): 8 nodes in separate processes exchange ~5,000 MESSAGEs and ~500 SPC calls
while granting and revoking each other at random. The long mode (50 nodes, 500,000 messages,
50,000 calls) is `python benchmarks/soak.py --long`, kept out of CI; docs/RELIABILITY.md has its
figures."""
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_soak_ci_mode_loses_duplicates_and_reorders_nothing():
    done = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "soak.py"), "--ci"], capture_output=True,
                          text=True, timeout=280, cwd=REPO)
    assert done.stdout.strip(), done.stderr[-3000:]
    report = json.loads(done.stdout)
    for figure in ("lost", "duplicated", "outOfOrder", "unexplained", "mismatched", "phantom", "unexpectedErrors"):
        assert report[figure] == 0, (figure, report["examples"])
    assert report["ok"] and done.returncode == 0
    assert report["nodes"] == 8 and report["revokes"] > 0
    assert report["sent"]["MESSAGE"] + report["messagesDeniedBeforeWriting"] == 5000
    assert sum(v for k, v in report["calls"].items() if ":" not in k) == 500 and report["calls"]["ok"] > 0
    # every MESSAGE written was either handed to its receiver's handler or rejected as unauthorized
    assert report["handled"] + report["rejectedMessages"] == report["sent"]["MESSAGE"]
