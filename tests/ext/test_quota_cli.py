"""`speed node --feature quota --quota KEY=VALUE --threat KEY=VALUE`: the settings reach the entry;
a bad one is one sentence and exit status 2."""
from __future__ import annotations

import json
import os
import signal
import subprocess

from speed_runtime.core.envelope import EnvelopeType

from ..helpers.processes import SPEED

MESSAGE, EVENT = EnvelopeType.MESSAGE, EnvelopeType.EVENT


def _envelope_type(path: str) -> int:
    with open(path, "rb") as f:
        return f.read(2)[1]


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


def test_a_threshold_alone_brings_its_release_level(procs, root):
    """`--threat threshold=20` alone starts (the release level follows the threshold: 10)."""
    node = procs.start("r", extra=["--feature", "quota", "--threat", "threshold=20"])
    assert node.proc.poll() is None and _entry(root, "r")["features"] == ["quota"]


def test_bad_quota_settings_are_one_sentence(root, key_path):
    for args, words in ((["--feature", "quota", "--quota", "pending=0"], "pending must be a whole number"),
                        (["--quota", "pending=3"], "--quota settings belong to the quota extension: add "
                                                   "--feature quota"),
                        (["--feature", "quota", "--threat", "release=500"], "release=500 must be"),
                        (["--feature", "quota", "--threat", "threshold=20", "--threat", "release=30"],
                         "threat release=30 must be at least 0 and below threshold=20"),
                        (["--feature", "quota", "--threat", 'weights={"bad_tag": 50}'],
                         "bad_tag cannot weigh against a sender"),
                        (["--feature", "quota", "--quota", "pending"], "is not KEY=VALUE")):
        r = subprocess.run(SPEED + ["node", "--dir", root, "--key", key_path, "--name", "r", *args],
                           capture_output=True, text=True, timeout=60)
        last = r.stderr.strip().splitlines()[-1]  # (argparse prints its usage lines before a bad argument)
        assert r.returncode == 2 and words in last and "Traceback" not in r.stderr, (args, r.stderr)
    for command in (["call", "r", "echo"], ["send", "r", "1"]):  # the same rule on the temporary nodes
        r = subprocess.run(SPEED + [*command, "--dir", root, "--key", key_path, "--feature", "chunks", "--quota",
                                    "send_rate=5"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and r.stderr == "speed: --quota settings belong to the quota extension: add " \
                                                 "--feature quota\n", r.stderr


def test_speed_send_honours_the_limits_a_target_publishes(procs, root, key_path, workdir):
    """The temporary node of `speed send` speaks quota: a message in chunks towards a stopped
    receiver that allows 2 of a sender's files stops at 2 files, waits its --timeout for room and
    exits 4 naming the limit and what was delivered. (`speed call` runs the same node: its single
    request always fits the empty ledger of a new process, docs/PROTOCOL.md "Safety under crashes".)"""
    r = procs.start("r", allow=["cli"], services=["echo"],
                    extra=["--feature", "chunks", "--feature", "quota", "--quota", "pending=2"])
    inbox = os.path.join(root, "r", "inbox")
    path = os.path.join(workdir, "frame.raw")
    with open(path, "wb") as f:
        f.write(os.urandom(5 << 20))  # 5 MiB: six chunks of a 1 MiB envelope limit
    os.kill(r.proc.pid, signal.SIGSTOP)  # r takes nothing from its inbox from now on
    try:
        sent = procs.run("send", "r", "--file", path, "--as", "cli", "--timeout", "1", "--dir", root, "--key", key_path)
        assert sent.returncode == 4 and "(quota limit 'pending')" in sent.stderr, sent.stderr
        assert "; 2 of the 6 chunks of message " in sent.stderr and "nothing was sent" not in sent.stderr
        kinds = sorted(_envelope_type(os.path.join(inbox, name)) for name in os.listdir(inbox))
        assert kinds == [MESSAGE, MESSAGE, EVENT]  # 2 chunks, and the `leave` EVENT: answers never wait
    finally:
        os.kill(r.proc.pid, signal.SIGCONT)
