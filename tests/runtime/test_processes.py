"""Real separate processes through `speed node`, `speed call`, `speed send`."""
import base64
import json
import os
import signal
import subprocess
import sys
import time

from speed_runtime import Node
from speed_runtime.journal import read_journal
from speed_runtime.core.liveness import judge
from speed_runtime.registry import Registry
from speed_runtime.transport import inject

from ..helpers.wait import wait_until


def args(procs, *rest):
    return [*rest, "--dir", procs.root, "--key", procs.key_path]


def test_two_processes_exchange_messages_and_calls(procs):
    svc = procs.start("svc", allow=["cli"], services=["calculateTax", "echo"], echo=True)
    done = procs.run(*args(procs, "call", "svc", "calculateTax", '{"amount": 200}', "--as", "cli"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"tax": 36.0} and "SUCCESS" in done.stderr
    sent = procs.run(*args(procs, "send", "svc", '{"hello": "world"}', "--as", "cli", "--confirm"))
    assert sent.returncode == 0, sent.stderr
    assert svc.messages(1) == [{"from": "cli", "seq": 1, "data": {"hello": "world"}}]
    failed = procs.run(*args(procs, "call", "svc", "calculateTax", '{"amount": "x"}', "--as", "cli"))
    assert failed.returncode == 1 and "INVALID_ARGUMENTS" in failed.stderr


def test_duplicate_name_is_refused(procs):
    first = procs.start("unique")
    second = procs.start("unique", wait_ready=False)
    assert second.proc.wait(30) == 3
    assert f"in use by a live node (pid {first.proc.pid}" in "".join(second.stderr)
    assert first.proc.poll() is None


def test_killed_node_goes_stale_and_its_name_is_reclaimed(procs, key):
    victim = procs.start("victim", lease=1.5, heartbeat=0.3)
    victim.proc.kill()
    victim.proc.wait()
    registry = Registry(procs.root)
    assert registry.read("victim").id == victim.id  # a crash leaves the entry behind ...
    wait_until(lambda: judge(registry.read("victim"), time.time()).stale, what="the lease to expire")
    events = []
    node = Node(procs.root, key, "victim")
    node.add_observer(events.append)
    with node:  # ... and the name can be reclaimed
        assert registry.read("victim").id == node.id
    assert [e.event for e in events if getattr(e, "subject", None) == "victim"][:1] in (["reclaimed"], [])


def test_paused_owner_loses_its_lease_and_stops(procs, key):
    paused = procs.start("paused", lease=1.0, heartbeat=0.2)
    paused.signal(signal.SIGSTOP)
    registry = Registry(procs.root)
    try:
        wait_until(lambda: judge(registry.read("paused"), time.time()).stale, what="the lease to expire")
        with Node(procs.root, key, "paused") as usurper:
            paused.signal(signal.SIGCONT)
            assert paused.proc.wait(30) == 5
            assert "lost its lease" in "".join(paused.stderr)
            assert registry.read("paused").id == usurper.id  # the old owner did not remove the new entry
    finally:
        paused.signal(signal.SIGCONT)


def test_unauthorized_sender_writes_nothing(procs):
    procs.start("guarded", allow=["friend"])
    result = procs.run(*args(procs, "send", "guarded", '"hi"', "--as", "stranger"))
    assert result.returncode == 3 and "does not allow stranger" in result.stderr
    home = os.path.join(procs.root, "guarded")
    assert os.listdir(os.path.join(home, "inbox")) == [] and os.listdir(os.path.join(home, "tmp")) == []


def test_replayed_envelope_is_rejected_across_processes(procs):
    procs.start("target", allow=["cli"], services=["echo"], trace=True)
    assert procs.run(*args(procs, "call", "target", "echo", '{"a": 1}', "--as", "cli")).returncode == 0
    journal = os.path.join(procs.root, "speed_traces", "target.jsonl")

    def accepted_request():
        records, _ = read_journal(journal) if os.path.exists(journal) else ([], 0)
        return next((r for r in records if getattr(r, "outcome", "") == "accepted" and r.type == "SPC_REQUEST"), None)
    original = wait_until(accepted_request, what="the journal to show the request")
    # the caller is gone; replay the exact bytes under a fresh file name of the same sender
    inject(procs.root, "target", "cli.00000000.00000000000000000001.00000000.env", original.envelope)

    def rejection():
        records, _ = read_journal(journal)
        return [r for r in records if getattr(r, "outcome", "") == "rejected"]
    rejected = wait_until(rejection, what="the replay's rejection")
    assert rejected[0].reason in ("unknown_sender", "replayed_nonce", "replayed_sequence")
    assert os.listdir(os.path.join(procs.root, "target", "inbox")) == []


def test_replay_while_the_sender_lives_is_rejected_as_replay(procs, key):
    target = procs.start("target2", allow=["live"], trace=True, echo=True)
    with Node(procs.root, key, "live", allow=["target2"]) as live:
        sent = []
        live.add_observer(lambda e: sent.append(e) if getattr(e, "outcome", "") == "sent" else None)
        live.send("target2", "original", confirm=True)
        inject(procs.root, "target2", sent[0].file, sent[0].envelope)
        journal = os.path.join(procs.root, "speed_traces", "target2.jsonl")
        rejected = wait_until(lambda: [r for r in read_journal(journal)[0] if getattr(r, "outcome", "") == "rejected"],
                              what="the replay's rejection")
        assert rejected[0].reason in ("replayed_nonce", "replayed_sequence")
        assert target.messages(1)[0]["data"] == "original"
        assert target.lines.empty()


def test_ten_thousand_messages_from_four_senders_arrive_complete_and_in_order(procs):
    receiver = procs.start("sink", allow=[f"s{i}" for i in range(4)], echo=True)
    senders = []
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        for i in range(4):
            p = subprocess.Popen([sys.executable, "-m", "tests.helpers.sender", procs.root, procs.key_path, f"s{i}",
                                  "sink", "2500"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 env=env, cwd=repo)
            senders.append(p)
        for p in senders:
            assert p.stdout.readline().strip() == "ready"
        for p in senders:
            p.stdin.write("go\n")
            p.stdin.flush()
        got = receiver.messages(10_000, timeout=120)
        for p in senders:
            assert p.stdout.readline().strip() == "done 2500"
            assert p.wait(60) == 0
    finally:
        for p in senders:
            if p.poll() is None:
                p.kill()
                p.wait()
    by_sender = {}
    for m in got:
        by_sender.setdefault(m["from"], []).append(m["data"]["n"])
    assert {k: len(v) for k, v in by_sender.items()} == {f"s{i}": 2500 for i in range(4)}
    assert all(v == list(range(2500)) for v in by_sender.values())


def test_sending_to_a_crashed_receiver_fails_at_once(procs, key):
    victim = procs.start("crashed", allow=["sender"])
    with Node(procs.root, key, "sender", allow=["crashed"]) as sender:
        sender.send("crashed", "before", confirm=True)
        victim.proc.kill()
        victim.proc.wait()
        try:
            sender.send("crashed", "after")
        except Exception as exc:  # noqa: BLE001 - the type is asserted below
            error = exc
        else:
            error = None
    from speed_runtime import NodeUnavailableError
    assert isinstance(error, NodeUnavailableError) and f"pid {victim.proc.pid}" in str(error)
    assert os.listdir(os.path.join(procs.root, "crashed", "inbox")) == []


def test_control_stdin_grants_and_revokes_at_once(procs):
    import subprocess as sp
    import sys as _sys
    cmd = [_sys.executable, "-m", "speed_runtime", "node", "--dir", procs.root, "--key", procs.key_path,
           "--name", "ctl", "--control-stdin"]
    proc = sp.Popen(cmd, stdin=sp.PIPE, stdout=sp.PIPE, stderr=sp.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("ready ctl")
        registry = Registry(procs.root)
        proc.stdin.write("allow friend\nallow other\nrevoke other\nbogus line\nallow bad.name\n")
        proc.stdin.flush()
        wait_until(lambda: registry.read("ctl").allow == ("friend",), what="the grants to be published")
        proc.stdin.close()  # EOF on the control channel does not stop the node
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(30)
        err = proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == 0
    assert "unknown control line 'bogus line'" in err and "invalid node name 'bad.name'" in err


def test_control_stdin_answers_each_line_with_one_short_line_whatever_the_number_of_names(procs, workdir):
    """Each answer used to repeat the whole allow list: 974 grants of 64-character names wrote 31 MB
    to stderr. It says what changed and how many names are allowed, in one line of bounded length."""
    names = [f"n{i:063d}" for i in range(300)]  # the longest names there are (64 characters)
    commands = [f"allow {name}" for name in names] + [f"allow {names[0]}", f"revoke {names[0]}", f"revoke {names[0]}"]
    err_path = os.path.join(workdir, "ctl.stderr")
    with open(err_path, "w") as err_file:
        proc = subprocess.Popen([sys.executable, "-m", "speed_runtime", "node", "--dir", procs.root, "--key",
                                 procs.key_path, "--name", "ctl", "--control-stdin"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err_file, text=True)
    try:
        assert proc.stdout.readline().startswith("ready ctl")
        proc.stdin.write("".join(f"{c}\n" for c in commands))
        proc.stdin.flush()

        def answers():
            with open(err_path) as f:
                return [line for line in f.read().split("\n") if line.startswith("speed: ")]
        wait_until(lambda: len(answers()) == len(commands), timeout=60, what="an answer to every control line")
        lines = answers()
    finally:
        proc.stdin.close()
        proc.terminate()
        proc.wait(30)
        proc.stdout.close()
    assert proc.returncode == 0
    assert max(len(line) for line in lines) <= 160
    assert lines[0] == f"speed: allow {names[0]}: allowed (1 name allowed)"
    assert lines[299] == f"speed: allow {names[299]}: allowed (300 names allowed)"
    assert lines[300:] == [f"speed: allow {names[0]}: already allowed (300 names allowed)",
                           f"speed: revoke {names[0]}: revoked (299 names allowed)",
                           f"speed: revoke {names[0]}: was not allowed (299 names allowed)"]
