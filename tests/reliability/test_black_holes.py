"""Issue 13 items 1 and 13: a node that cannot read its inbox must never stay online and deaf, and
one-shot CLI nodes leave nothing behind. Real processes, real files."""
from __future__ import annotations

import json
import os
import resource
import time

from speed_runtime import HealthTrace, Node, NodeUnavailableError
from speed_runtime.core.entry import RegistryEntry
from speed_runtime.fsutil import HOSTNAME, prepare_root
from speed_runtime.registry import Registry

from ..helpers.wait import wait_until


def _low_fd_limit(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    return apply


def test_a_callee_under_ulimit_64_answers_its_40th_distinct_caller(procs, root, key):
    """Every distinct peer a node sent to used to keep two directory descriptors for ever: under
    `ulimit -n 64` the 25th distinct caller killed the callee's protocol thread (EMFILE) while its
    heartbeats went on. Descriptors are now bounded (least recently used targets closed)."""
    callers = [f"c{i:02d}" for i in range(40)]
    callee = procs.start_scripted("callee", allow=callers, preexec_fn=_low_fd_limit(64))
    for name in callers:  # one at a time: each a new peer the callee must answer
        with Node(root, key, name, allow=["callee"], linger_seconds=0) as caller:
            assert caller.call("callee", "echo", {"from": name}, timeout=20) == {"from": name}
    with Node(root, key, "c00", allow=["callee"]) as again:  # and it is still listening
        assert again.call("callee", "echo", {"again": True}, timeout=20) == {"again": True}
    counters = Registry(root).read("callee").extra["counters"]
    assert callee.proc.poll() is None and counters["protocolErrors"] == 0, counters


def replace_inbox(inbox: str) -> None:
    """`mv inbox inbox.old; mkdir inbox`, with the new one made first: the node may recreate its
    inbox the moment the old one moved, and a rename replaces that (still empty) directory."""
    os.mkdir(inbox + ".new", 0o700)
    os.rename(inbox, inbox + ".old")
    os.rename(inbox + ".new", inbox)


def test_a_replaced_inbox_is_adopted_and_nothing_sent_around_it_is_lost(procs, root, key):
    """`mv inbox inbox.old; mkdir -m700 inbox` used to end the protocol thread (FileNotFoundError)
    while heartbeats went on: a black hole. The node now adopts the new inbox and moves over what
    senders (whose descriptors still point at the old one) deliver there."""
    receiver = procs.start_scripted("r", allow=["s"], options={"trace": True, "rescan_seconds": 0.2})
    inbox = os.path.join(root, "r", "inbox")
    with Node(root, key, "s", allow=["r"]) as s:
        for n in range(50):
            s.send("r", {"n": n})
        got = [json.loads(receiver.read_line(30))["data"]["n"] for _ in range(50)]
        replace_inbox(inbox)
        for n in range(50, 100):  # the sender's cached descriptors still name the old directory
            s.send("r", {"n": n})
        os.rename(inbox + ".old", os.path.join(root, "r", "elsewhere"))  # and it may even move on
        for n in range(100, 150):
            s.send("r", {"n": n})
        got += [json.loads(receiver.read_line(30))["data"]["n"] for _ in range(100)]
        assert sorted(got) == list(range(150))
        os.rename(inbox, inbox + ".gone")  # removed outright: the node makes a new one
        wait_until(lambda: os.path.isdir(inbox), timeout=20, what="the node to recreate its inbox")
        s.send("r", {"n": 150}, confirm=True, timeout=20)
        assert json.loads(receiver.read_line(30))["data"]["n"] == 150
    journal = os.path.join(root, "speed_traces", "r.jsonl")
    wait_until(lambda: os.path.exists(journal) and "inbox_replaced" in open(journal).read(), timeout=20,
               what="the replacement in the journal")
    wait_until(lambda: Registry(root).read("r").extra["counters"]["inboxRecoveries"] >= 2, timeout=20,
               what="the recoveries in its published counters")


def test_a_node_whose_receiving_fails_says_so_and_is_not_left_online(root, key, monkeypatch):
    """When the protocol thread cannot make progress, the node reports it (counters, journal,
    observers) and publishes `leaving`, so senders refuse it at once; when it recovers it is
    online again. Here its inbox listing fails as with EMFILE."""
    events = []
    with Node(root, key, "deaf", allow=["s"], heartbeat_seconds=0.2, lease_seconds=5, rescan_seconds=0.1,
              trace=True) as deaf, Node(root, key, "s", allow=["deaf"]) as s:
        deaf.add_observer(lambda e: events.append(e) if isinstance(e, HealthTrace) else None)
        s.send("deaf", "before", confirm=True, timeout=20)

        def fail(*_a):
            raise OSError(24, "Too many open files")
        monkeypatch.setattr(deaf.receiver.inbox, "list", fail)
        wait_until(lambda: Registry(root).read("deaf").status == "leaving", timeout=20,
                   what="the deaf node to leave the online set")
        try:
            s.send("deaf", "while deaf")
            raise AssertionError("a send to a node that cannot receive succeeded")
        except NodeUnavailableError as exc:
            assert "leaving" in str(exc)
        assert deaf.counters()["protocolErrors"] > 0
        assert {e.event for e in events} >= {"receiving_failed", "stopped_renewing"}
        beat = Registry(root).read("deaf").last_heartbeat
        time.sleep(0.6)  # three heartbeat intervals: the lease is not renewed while deaf
        assert Registry(root).read("deaf").last_heartbeat == beat
        monkeypatch.undo()
        wait_until(lambda: Registry(root).read("deaf").status == "online", timeout=20, what="the recovery")
        s.send("deaf", "after", confirm=True, timeout=20)
        assert "receiving_recovered" in {e.event for e in events}
    journal = open(os.path.join(root, "speed_traces", "deaf.jsonl")).read()
    assert '"kind":"health"' in journal and "stopped_renewing" in journal


def test_one_shot_cli_nodes_leave_no_home_behind(procs, root, key_path):
    procs.start("target", allow=[], services=["echo"])  # allows nobody: every CLI call is refused
    for cmd in (["call", "target", "echo", "{}"], ["send", "target", "1"]):
        done = procs.run(cmd[0], "--dir", root, "--key", key_path, *cmd[1:])
        assert done.returncode == 3, done.stderr
    leftovers = [n for n in os.listdir(root) if n.startswith("speed-cli-")]
    assert leftovers == [], leftovers


def test_homes_of_killed_cli_nodes_are_swept(root, key):
    """A `speed call` killed before it could clean up leaves ROOT/speed-cli-XXXXXXXX/: any node
    sweeps such homes once they are older than a minute and have no live entry."""
    Registry(prepare_root(root))  # creates the communication and registry directories
    old = os.path.join(root, "speed-cli-0badcafe")
    os.makedirs(os.path.join(old, "inbox"), 0o700)
    young = os.path.join(root, "speed-cli-00c0ffee")
    os.makedirs(os.path.join(young, "inbox"), 0o700)
    alive = os.path.join(root, "speed-cli-0a11ce00")
    os.makedirs(os.path.join(alive, "inbox"), 0o700)
    for path in (old, alive):
        os.utime(path, (time.time() - 600, time.time() - 600))
    registry = Registry(root)
    with registry.locked():  # a live CLI node of that name (this process) keeps its home
        registry._write(RegistryEntry(name="speed-cli-0a11ce00", id="00000000-0000-4000-8000-00000000a11c",
                                      last_heartbeat=time.time(), pid=os.getpid(), host=HOSTNAME,
                                      lease_seconds=600))
    with Node(root, key, "sweeper", orphan_seconds=0.5):
        wait_until(lambda: not os.path.exists(old), timeout=20, what="the dead CLI home to be swept")
    assert os.path.isdir(young) and os.path.isdir(alive)


def test_files_left_in_a_replaced_inbox_are_judged_before_the_senders_later_ones(procs, root, key):
    """A sender writes to the old inbox until it notices the replacement, then to the new one:
    its first file in the new one, judged before its last ones still in the old one (looked at
    every quarter second), made those `replayed_sequence`: lost, though every send succeeded."""
    from speed_runtime.core.envelope import EnvelopeType, Header, envelope_filename, seal
    from speed_runtime.transport import inject

    receiver = procs.start_scripted("r", allow=["s"], options={"trace": True})
    inbox = os.path.join(root, "r", "inbox")
    with Node(root, key, "s", allow=["r"]) as s:
        for n in range(5):
            s.send("r", {"n": n})
        got = [json.loads(receiver.read_line(30))["data"]["n"] for _ in range(5)]
        replace_inbox(inbox)
        s.send("r", {"n": 5}, confirm=True, timeout=20)     # the receiver has adopted the new inbox
        got.append(json.loads(receiver.read_line(30))["data"]["n"])
        target = Registry(root).read("r").id_bytes

        def sealed(seq: int) -> tuple[str, bytes]:          # as s would seal its next envelopes
            body = json.dumps({"from": "s", "to": "r", "data": {"n": seq - 1}}).encode()
            nonce = os.urandom(12)
            header = Header(EnvelopeType.MESSAGE, seq, int(time.time() * 1000), len(body), s.id_bytes, target, 0)
            return envelope_filename("s", s.id_bytes, seq, nonce), seal(header, body, s.key, nonce)
        for seq in (7, 8, 9):                                # still to the old inbox (a cached descriptor)…
            name, data = sealed(seq)
            with open(os.path.join(inbox + ".old", "." + name), "wb") as f:
                f.write(data)
            os.rename(os.path.join(inbox + ".old", "." + name), os.path.join(inbox + ".old", name))
        inject(root, "r", *sealed(10))                       # …then to the new one, at once
        got += [json.loads(receiver.read_line(30))["data"]["n"] for _ in range(4)]
    assert got == list(range(10))
