"""`speed node --feature quota --quota KEY=VALUE --threat KEY=VALUE`: the settings reach the entry;
a bad one is one sentence and exit status 2."""
from __future__ import annotations

import json
import os
import subprocess

from ..helpers.processes import SPEED


def _entry(root: str, name: str) -> dict:
    with open(os.path.join(root, "speed_registry", f"{name}.node"), encoding="utf-8") as f:
        return json.load(f)


def test_quota_settings_on_the_command_line_are_published(procs, root):
    procs.start("r", extra=["--feature", "quota", "--quota", "pending=3", "--quota", "rate=12.5",
                            "--quota", 'senders={"bulk": {"pending": 300}}', "--threat", "half_life=5",
                            "--threat", 'weights={"replayed_nonce": 50}'])
    entry = _entry(root, "r")
    assert entry["features"] == ["quota"]
    assert entry["quota"] == {"pending": 3, "pendingBytes": 4194304, "rate": 12.5, "burst": 12,
                              "senders": {"bulk": {"pending": 300, "pendingBytes": 4194304, "rate": 12.5,
                                                   "burst": 12}}}
    assert entry["counters"]["quarantines"] == 0


def test_bad_quota_settings_are_one_sentence(root, key_path):
    for args, words in ((["--feature", "quota", "--quota", "pending=0"], "pending must be a whole number"),
                        (["--quota", "pending=3"], "add features=['quota']"),
                        (["--feature", "quota", "--threat", "release=500"], "below the threshold"),
                        (["--feature", "quota", "--threat", 'weights={"bad_tag": 50}'],
                         "bad_tag cannot weigh against a sender"),
                        (["--feature", "quota", "--quota", "pending"], "is not KEY=VALUE")):
        r = subprocess.run(SPEED + ["node", "--dir", root, "--key", key_path, "--name", "r", *args],
                           capture_output=True, text=True, timeout=60)
        last = r.stderr.strip().splitlines()[-1]  # (argparse prints its usage lines before a bad argument)
        assert r.returncode == 2 and words in last and "Traceback" not in r.stderr, (args, r.stderr)
