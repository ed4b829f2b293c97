"""The `quota` extension between the C node (sender side, tests/interop/c/ext_quota.c, written
from docs/PROTOCOL.md) and the Python runtime (`speed node --feature quota`), both ways, and with
v1-only peers. A stopped receiver (SIGSTOP) takes nothing from its inbox, so every count asserted
here follows from the limits alone."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import time

from speed_runtime import Node, QuotaExceededError
from speed_runtime.transport import inject

from .harness import SPEED, VECTORS, Proc, c_node_bin, env, journal_records, procs, stopped, wait_for  # noqa: F401

QUOTA_VECTORS = os.path.join(os.path.dirname(VECTORS), "quota_vectors.json")


def _py_receiver(procs, name: str, allow: list[str], *settings: str, trace: bool = False) -> Proc:
    cmd = SPEED + ["node", "--dir", procs.env.root, "--key", procs.env.key_path, "--name", name, "--feature", "quota",
                   "--echo-messages"]
    for a in allow:
        cmd += ["--allow", a]
    for s in settings:
        cmd += ["--quota", s]
    if trace:
        cmd.append("--trace")
    p = Proc(name, cmd)
    procs.started.append(p)
    p.id = p.wait_line(f"ready {name} id=", timeout=30).split("id=")[1].split()[0]
    return p


def _files_of(env, target: str, sender: str) -> list[str]:
    return [f for f in env.inbox_files(target) if f.startswith(sender + ".")]


def _outcomes(node: Proc, count: int) -> list[dict]:
    wait_for(lambda: node.count("sent") + node.count("send_error") >= count, 60, f"{count} outcomes of {node.name}")
    return [e for e in node.events() if e.get("event") in ("sent", "send_error")]


def test_the_c_node_reads_the_quota_vectors_as_the_runtime_does(c_node_bin):
    r = subprocess.run([c_node_bin, "kat-quota", QUOTA_VECTORS], capture_output=True, text=True, timeout=60)
    cases = json.load(open(QUOTA_VECTORS, encoding="utf-8"))
    total = sum(len(cases[k]) for k in ("limits", "admission", "bucket"))
    assert r.returncode == 0 and r.stdout.strip() == f"{total} passed, 0 failed", r.stdout + r.stderr


def test_a_c_sender_honours_the_pending_limit_of_a_python_receiver(procs, env):
    r = _py_receiver(procs, "r", ["c", "c2"], "pending=5")
    c = procs.c_node("c", allow=["r"], args=["--feature", "quota", "--quota-wait-ms", "60000"])
    c2 = procs.c_node("c2", allow=["r"], args=["--feature", "quota", "--quota-wait-ms", "300"])
    with stopped(r):
        for i in range(7):
            c.command(f"send-nowait r {i}")
        out = _outcomes(c, 7)
        assert [e["event"] for e in out] == ["sent"] * 5 + ["send_error"] * 2
        assert {e["errorCode"] for e in out[5:]} == {"QUOTA_EXCEEDED"}
        assert "quota limit 'pending'" in out[5]["errorMessage"] and "r allows 5 envelopes" in out[5]["errorMessage"]
        assert len(_files_of(env, "r", "c")) == 5
        c.command("send r 99")        # waits: nothing can leave the inbox of a stopped receiver
        for i in range(5):
            c2.command(f"send-nowait r {i}")
        started = time.monotonic()
        c2.command("send r 5")        # waits 300 ms, then refuses
        out2 = _outcomes(c2, 6)
        assert time.monotonic() - started >= 0.3 and out2[-1]["errorCode"] == "QUOTA_EXCEEDED"
        assert len(_files_of(env, "r", "c")) == 5 and c.count("sent") == 5
    wait_for(lambda: c.count("sent") == 6, 60, "the waiting send to go once the receiver took a file")
    assert out[-1]["event"] == "send_error" and c.find(event="sent", seq=6)
    wait_for(lambda: len([m for m in r.events() if m.get("from") == "c"]) == 6, 30, "r to handle c's six")
    got = [m["data"] for m in r.events() if m.get("from") == "c"]
    assert got == [0, 1, 2, 3, 4, 99]


def test_a_c_sender_honours_the_byte_limit_and_the_published_rate(procs, env):
    r = _py_receiver(procs, "r", ["c"], "pending=100", "pending_bytes=3000", "rate=20", "burst=2")
    c = procs.c_node("c", allow=["r"], args=["--feature", "quota", "--quota-wait-ms", "60000"])
    blob = "x" * 1000
    with stopped(r):
        for _ in range(3):
            c.command(f'send-nowait r "{blob}"')
        out = _outcomes(c, 3)
        assert [e["event"] for e in out] == ["sent", "sent", "send_error"]
        assert "quota limit 'pendingBytes'" in out[2]["errorMessage"]
        assert sum(os.path.getsize(os.path.join(env.inbox("r"), f)) for f in _files_of(env, "r", "c")) <= 3000
    wait_for(lambda: not _files_of(env, "r", "c"), 30, "r to take c's files")
    started = time.monotonic()
    for i in range(12):
        c.command(f"send r {i}")
    _outcomes(c, 3 + 12)
    assert time.monotonic() - started >= (12 - 2) / 20 - 0.01   # 20 per second after a burst of 2
    assert c.count("sent") == 14


def test_a_v1_only_c_sender_ignores_the_limits_and_is_still_served(procs, env):
    r = _py_receiver(procs, "r", ["c"], "pending=5")
    c = procs.c_node("c", allow=["r"])   # no --feature quota: v1 only
    with stopped(r):
        for i in range(20):
            c.command(f"send-nowait r {i}")
        assert [e["event"] for e in _outcomes(c, 20)] == ["sent"] * 20
        assert len(_files_of(env, "r", "c")) == 20
    wait_for(lambda: len([m for m in r.events() if m.get("from") == "c"]) == 20, 30, "r to handle all twenty")


def test_a_python_quota_sender_is_v1_towards_the_v1_only_c_node(procs, env):
    c = procs.c_node("c", allow=["s"])
    with Node(env.root, env.key_path, "s", allow=["c"], features=["quota"]) as s, stopped(c):
        for i in range(50):
            s.send("c", {"i": i}, block=False)   # the C node publishes nothing: nothing is refused
        files = _files_of(env, "c", "s")
        assert len(files) == 50
        opened = [env.open_envelope(os.path.join(env.inbox("c"), f)) for f in files]
        assert {h["flags"] for h, _ in opened} == {0}                          # no extension flag
        assert {tuple(sorted(p)) for _, p in opened} == {("data", "from", "to")}  # no extension field
    wait_for(lambda: c.count("message") == 50, 30, "the C node to take all fifty")


def test_a_python_sender_waits_for_a_python_receiver_and_never_for_a_c_one(procs, env):
    r = _py_receiver(procs, "r", ["s"], "pending=3")
    c = procs.c_node("c", allow=["s"])
    with Node(env.root, env.key_path, "s", allow=["r", "c"], features=["quota"]) as s, stopped(r), stopped(c):
        for i in range(3):
            s.send("r", i, block=False)
            s.send("c", i, block=False)
        try:
            s.send("r", 3, block=False)
            raise AssertionError("the fourth envelope to r must be refused")
        except QuotaExceededError as exc:
            assert exc.limit == "pending"
        s.send("c", 3, block=False)


def test_a_replaying_c_node_is_quarantined_by_a_python_receiver_at_the_documented_threshold(procs, env):
    """Each of the C node's envelopes is copied under another file name while the receiver is
    stopped: the copies authenticate as the C node (its key, its registered instance) and are
    replays, which count against it (30 each; the threshold is 100)."""
    r = _py_receiver(procs, "r", ["c"], trace=True)
    c = procs.c_node("c", allow=["r"])
    with stopped(r):
        for i in range(6):
            c.command(f"send r {i}")
        _outcomes(c, 6)
        inbox = os.path.join(env.root, "r", "inbox")
        for name in _files_of(env, "r", "c"):
            with open(os.path.join(inbox, name), "rb") as f:
                data = f.read()
            inject(env.root, "r", name[:-len("ffffffff.env")] + "ffffffff.env", data)

    def reasons():
        return [x["reason"] for x in journal_records(env, "r") if x.get("outcome") == "rejected" and x["peer"] == "c"]
    wait_for(lambda: len(reasons()) == 8, 30, "eight records of c's rejected files")
    assert reasons() == ["replayed_nonce"] * 4 + ["quarantined"] * 4   # each pair: the original accepted first
    threat = [x for x in journal_records(env, "r") if x.get("kind") == "threat" and x["peer"] == "c"]
    assert [x["event"] for x in threat] == ["raised"] * 4 + ["quarantined"]
    assert threat[-1]["score"] >= 100 > threat[2]["score"]


def test_a_tampering_c_node_scores_nothing_at_a_python_receiver(procs, env, tmp_path):
    """Sealed with another key, its envelopes authenticate as nobody: `bad_tag`, never counted
    against the name they claim (docs/PROTOCOL.md, "Order of checks")."""
    other = tmp_path / "other.key"
    other.write_text("SPEED-KEY-V1\n" + base64.b64encode(os.urandom(32)).decode() + "\n")
    other.chmod(0o600)
    r = _py_receiver(procs, "r", ["c"], trace=True)
    c = Proc("c", [procs.c_bin, "node", "--dir", env.root, "--key", str(other), "--name", "c", "--allow", "r"],
             stdin=True)
    procs.started.append(c)
    c.wait_line("ready c id=")
    with stopped(r):
        for i in range(6):
            c.command(f"send r {i}")
        _outcomes(c, 6)

    def reasons():
        return [x["reason"] for x in journal_records(env, "r") if x.get("outcome") == "rejected" and x["peer"] == "c"]
    wait_for(lambda: len(reasons()) == 6, 30, "six records of c's files")
    assert reasons() == ["bad_tag"] * 6
    assert [x for x in journal_records(env, "r") if x.get("kind") == "threat"] == []
