"""Case 11: registry abuse. Malformed `.node` files never crash a reader (Registry.scan, a running
Node's monitor, `speed registry`, `speed reap`); ten processes racing for one name give exactly one
winner; a paused owner whose name was reclaimed gets none of its later envelopes accepted; a PID
never decides that a live owner is dead. (SIGSTOP → `lost` itself is tests/runtime/test_processes.py.)"""
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import uuid

from speed_runtime import EnvelopeTrace, Node
from speed_runtime.fsutil import BOOT_ID, HOSTNAME, boottime, local_facts, prepare_root
from speed_runtime.core.entry import RegistryEntry
from speed_runtime.core.liveness import judge
from speed_runtime.registry import Registry

from ..helpers.processes import SPEED
from ..helpers.wait import wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def cli(procs, *argv, timeout=60):
    return subprocess.run(SPEED + list(argv) + ["--dir", procs.root], capture_output=True, text=True, timeout=timeout)


def fresh_entry(name, **kw):
    base = dict(name=name, id=str(uuid.uuid4()), last_heartbeat=time.time(), pid=os.getpid(), host=HOSTNAME,
                boot_id=BOOT_ID, boot_time_heartbeat=boottime(), lease_seconds=30.0)
    base.update(kw)
    return RegistryEntry(**base)


def plant_hostile_entries(registry_dir, workdir):
    """Every kind of bad `.node` file; returns the names planted."""
    good = fresh_entry("good").to_json()
    ident = str(uuid.uuid4())
    files = {
        "truncated": good[: len(good) // 2],
        "notjson": b"\xff\xfe{{{",
        "notobject": b"[1, 2, 3]",
        "noid": json.dumps({"name": "noid", "lastHeartbeat": time.time()}).encode(),
        "wrongname": fresh_entry("someoneelse").to_json(),
        "hugenumber": json.dumps({"name": "hugenumber", "id": ident, "lastHeartbeat": 10**400}).encode(),
        "hugelease": json.dumps({"name": "hugelease", "id": ident, "lastHeartbeat": time.time(),
                                 "leaseSeconds": 10**400, "bootTimeHeartbeat": 10**400}).encode(),
        "hugepid": fresh_entry("hugepid", pid=2**80).to_json(),
        "deep": b'{"name":' * 5000 + b'"x"' + b"}" * 5000,
        "padded": good[:-1] + b',"pad":"' + b"x" * 70_000 + b'"}',
    }
    for name, data in files.items():
        with open(os.path.join(registry_dir, f"{name}.node"), "wb") as f:
            f.write(data)
    with open(os.path.join(registry_dir, "sparse.node"), "wb") as f:
        os.truncate(f.fileno(), 10 << 30)  # 10 GiB of nothing
    outside = os.path.join(workdir, "outside.node")
    with open(outside, "wb") as f:
        f.write(fresh_entry("symlinked").to_json())
    os.symlink(outside, os.path.join(registry_dir, "symlinked.node"))
    os.symlink("/dev/zero", os.path.join(registry_dir, "zero.node"))
    os.mkfifo(os.path.join(registry_dir, "fifo.node"))
    os.mkdir(os.path.join(registry_dir, "directory.node"))
    return sorted([*files, "sparse", "symlinked", "zero", "fifo", "directory"])


def test_malformed_entries_never_crash_any_reader(root, key, procs, workdir):
    with Node(root, key, "a", allow=["b"], heartbeat_seconds=0.2, lease_seconds=3, rescan_seconds=0.2) as a, \
            Node(root, key, "b", allow=["a"], heartbeat_seconds=0.2, lease_seconds=3, rescan_seconds=0.2,
                 reap_stale=True) as b:
        registry = Registry(root)
        names = plant_hostile_entries(registry.dir, workdir)
        # a running node's monitor sees them all (rescans every 0.2 s) ...
        bad_expected = set(names) - {"hugelease", "hugepid"}  # these two are valid entries
        wait_until(lambda: bad_expected <= set(a.monitor.bad_entries), timeout=20, what="a's monitor to see them")
        # ... and keeps renewing and delivering
        beat = registry.read("a").last_heartbeat
        wait_until(lambda: registry.read("a").last_heartbeat > beat, timeout=20, what="a to renew its lease")
        assert all(t.is_alive() for t in a.threads() + b.threads())
        a.send("b", "still fine")
        assert b.receive(timeout=20).data == "still fine"
        # a node started among them starts
        with Node(root, key, "c") as c:
            assert c.state == "running" and set(c.monitor.bad_entries) >= bad_expected
        records = {r.name: r for r in registry.scan()}
        assert {n for n, r in records.items() if r.entry is None} == bad_expected
        listing = cli(procs, "registry")
        assert listing.returncode == 0 and "Traceback" not in listing.stderr, listing.stderr
        assert "unreadable" in listing.stdout and "a " in listing.stdout
        as_json = cli(procs, "registry", "--json")
        assert as_json.returncode == 0, as_json.stderr
        rows = {row["name"]: row for row in json.loads(as_json.stdout)}
        assert {n for n, row in rows.items() if row["state"] == "unreadable"} == bad_expected
        reaped = cli(procs, "reap")
        assert reaped.returncode == 0 and "Traceback" not in reaped.stderr, reaped.stderr
        assert registry.read("a").id == a.id and registry.read("b").id == b.id  # live entries untouched
        assert os.path.exists(os.path.join(workdir, "outside.node"))  # symlink removed, target not followed
        assert not os.path.exists(os.path.join(registry.dir, "symlinked.node"))


def test_a_hostile_pid_cannot_crash_registration(root, key):
    """An entry on this host and boot whose pid cannot exist (2**80) is dead, not a crash."""
    registry = Registry(prepare_root(root))
    with registry.locked():
        registry._write(fresh_entry("hugepid", pid=2**80))
    with Node(root, key, "hugepid") as node:
        assert registry.read("hugepid").id == node.id
    with registry.locked():
        registry._write(fresh_entry("negative", pid=-5, last_heartbeat=time.time() - 100, boot_time_heartbeat=None))
    assert registry.reap("negative", time.time())


def test_ten_processes_race_for_one_name_exactly_one_wins(procs):
    racers = [subprocess.Popen([sys.executable, "-m", "tests.reliability.racer", procs.root, procs.key_path],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=REPO, env=ENV) for _ in range(10)]
    rounds = 5
    try:
        for r in range(rounds):
            name = f"contested{r}"
            for p in racers:
                p.stdin.write(f"arm {name}\n")
                p.stdin.flush()
            for p in racers:
                assert p.stdout.readline().strip() == "armed"
            for p in racers:  # release all ten at once
                p.stdin.write("go\n")
            for p in racers:
                p.stdin.flush()
            results = [p.stdout.readline().split(" ", 2) for p in racers]
            winners = [res for res in results if res[0] == "won"]
            losers = [res for res in results if res[0] == "lost"]
            assert len(winners) == 1 and len(losers) == 9, results
            assert all("in use by a live node" in res[2] for res in losers)
            assert Registry(procs.root).read(name).id == winners[0][2].strip()
        for p in racers:
            p.stdin.close()
        assert [p.wait(60) for p in racers] == [0] * 10
        assert [n for n in Registry(procs.root).names() if n.startswith("contested")] == []
    finally:
        for p in racers:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_an_envelope_of_a_replaced_instance_is_rejected_before_the_registry_watch_catches_up(root, key):
    """The receiver's cached entry of a sender must not outlive the file it was read from: an
    envelope delivered after another instance took the name over is the fenced instance's, even
    while the receiver's registry watch has not yet seen the change (a CI run accepted one)."""
    got, rejected = [], []
    with Node(root, key, "sink", allow=["chatty"], registry_rescan_seconds=3600, linger_seconds=0) as sink:
        sink.on_message(lambda m: got.append(m.data))
        sink.add_observer(lambda e: rejected.append(e.reason) if isinstance(e, EnvelopeTrace) and e.outcome == "rejected"
                          else None)
        with Node(root, key, "chatty", allow=["sink"], lease_seconds=60, heartbeat_seconds=20) as old:
            old.send("sink", 1)
            wait_until(lambda: got == [1], timeout=20, what="the first message")
            sink.monitor.hint = lambda name: None            # the watch falls behind: no hint arrives
            registry = Registry(root)
            taken = dataclasses.replace(registry.read("chatty"), id=str(uuid.uuid4()), startup_timestamp=time.time(),
                                        last_heartbeat=time.time())
            tmp = os.path.join(root, "speed_registry", ".chatty.usurper")
            with open(tmp, "wb") as f:
                f.write(taken.to_json())
            os.rename(tmp, registry.path("chatty"))           # another instance holds the name now
            old.send("sink", 2)                               # the fenced instance has not noticed yet
            wait_until(lambda: rejected or len(got) > 1, timeout=20, what="the fenced envelope's verdict")
        assert got == [1]
        assert rejected and set(rejected) == {"unknown_sender"}, rejected  # its closing EVENT is refused too


def test_paused_owner_is_fenced_and_its_later_envelopes_are_rejected(root, key, key_path):
    got, rejected = [], []
    with Node(root, key, "sink", allow=["chatty"]) as sink:
        sink.on_message(lambda m: got.append((m.data["id"], m.data["n"])))
        sink.add_observer(lambda e: rejected.append(e) if isinstance(e, EnvelopeTrace) and e.outcome == "rejected"
                          else None)
        chatty = subprocess.Popen([sys.executable, "-m", "tests.reliability.chatty", root, key_path, "chatty", "sink",
                                   "1.0", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  cwd=REPO, env=ENV)
        try:
            old_id = chatty.stdout.readline().split()[1]
            wait_until(lambda: len(got) >= 20, timeout=30, what="the first messages")
            chatty.send_signal(signal.SIGSTOP)
            inbox = os.path.join(root, "sink", "inbox")
            wait_until(lambda: not os.listdir(inbox), timeout=30, what="the sink to drain")
            registry = Registry(root)
            wait_until(lambda: judge(registry.read("chatty"), time.time()).stale, timeout=30,
                       what="the paused owner's lease to expire")
            accepted_before = len(got)
            with Node(root, key, "chatty", allow=["sink"]) as usurper:
                chatty.send_signal(signal.SIGCONT)  # at once: the sink's cache may still hold the old entry
                assert chatty.wait(30) == 5
                assert "lost" in chatty.stdout.read()
                wait_until(lambda: not os.listdir(inbox), timeout=30, what="the sink to drain again")
                usurper.send("sink", {"id": usurper.id, "n": 0})
                wait_until(lambda: got and got[-1][0] == usurper.id, timeout=20, what="the new owner's message")
            late = [g for g in got[accepted_before:] if g[0] == old_id]
            assert late == [], f"{len(late)} envelopes of the fenced instance were accepted after the takeover"
            assert all(e.reason == "unknown_sender" for e in rejected), [e.reason for e in rejected]
            assert registry.read("chatty") is None  # the usurper deregistered; the old owner removed nothing
        finally:
            if chatty.poll() is None:
                chatty.send_signal(signal.SIGCONT)
                chatty.kill()
            chatty.wait()
            for stream in (chatty.stdout, chatty.stderr):
                stream.close()


def test_a_pid_never_evicts_a_live_owner(procs, root, key):
    owner = procs.start("owner", lease=3, heartbeat=0.3)
    second = procs.start("owner", wait_ready=False)
    assert second.proc.wait(60) == 3 and f"pid {owner.proc.pid}" in "".join(second.stderr)
    refused = cli(procs, "reap", "owner")
    assert refused.returncode == 3 and "is live" in refused.stderr
    registry = Registry(root)
    with Node(root, key, "reaper", reap_stale=True, rescan_seconds=0.1, heartbeat_seconds=0.1, lease_seconds=2):
        beat = registry.read("owner").last_heartbeat
        wait_until(lambda: registry.read("owner").last_heartbeat > beat + 1, timeout=30, what="several renewals")
    assert registry.read("owner").id == owner.id
    # a stale entry whose pid was reused by a live process (this one) is still dead: PIDs never prove life
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        with registry.locked():
            registry._write(fresh_entry("ghost", pid=sleeper.pid, lease_seconds=0.5))
        with Node(root, key, "ghost") as early:
            raise AssertionError(f"a fresh entry was evicted by {early}")
    except Exception as exc:
        assert "in use by a live node" in str(exc), exc
    else:
        raise AssertionError("unreachable")
    try:
        wait_until(lambda: judge(registry.read("ghost"), time.time(), local_facts()).stale,
                   timeout=10, what="the ghost's lease to pass")
        with Node(root, key, "ghost") as heir:
            assert registry.read("ghost").id == heir.id
    finally:
        sleeper.kill()
        sleeper.wait()
