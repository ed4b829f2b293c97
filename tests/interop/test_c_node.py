"""Interoperability of the C SPEED node (tests/interop/c, written from SPEED-WIRE-V1 alone)
with itself, with the shared known-answer vectors, and with the Python runtime.

The harness (environment, processes, forged envelopes) is tests/interop/harness.py.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid

import pytest

from .harness import (C_RUNTIME, REPLAY_REASONS, SPEED, VECTORS, c_node_bin, deadline_answers,  # noqa: F401
                      env, error_line, gen, hold_registry_lock, inbox_file, journal_rejection, peak_rss_kb,
                      procs, python_runtime, stopped, stream_until_exit, wait_for)


# =========================================================================== C only

def test_kat_passes(c_node_bin):
    r = subprocess.run([c_node_bin, "kat", str(VECTORS)], capture_output=True, text=True, timeout=30)
    doc = json.loads(VECTORS.read_text(encoding="utf-8"))
    total = len(doc["vectors"]) + len(doc["invalid"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == f"{total} passed, 0 failed"


def test_vector_file_is_reproducible():
    """The committed vector file is exactly what the generator writes."""
    assert gen.render() == VECTORS.read_text(encoding="utf-8")


def test_kat_detects_a_wrong_vector(c_node_bin, tmp_path):
    doc = json.loads(VECTORS.read_text(encoding="utf-8"))
    v = doc["vectors"][0]
    v["envelope_hex"] = v["envelope_hex"][:-2] + ("00" if v["envelope_hex"][-2:] != "00" else "01")
    doc["invalid"][0]["reason"] = "bad_size"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    r = subprocess.run([c_node_bin, "kat", str(bad)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert r.stdout.strip().endswith("2 failed")


def test_c_registry_entry(procs, env):
    node = procs.c_node("alpha", allow=["beta"], services=["echo"], lease=12, heartbeat=0.5)
    e = env.entry("alpha")
    assert e["name"] == "alpha" and e["id"] == node.id and e["pid"] == node.pid
    assert e["status"] == "online" and e["protocol"] == 1 and e["runtime"] == C_RUNTIME
    assert e["allow"] == ["beta"] and e["services"] == ["echo"] and e["leaseSeconds"] == 12
    assert isinstance(e["bootTimeHeartbeat"], float)
    first = e["lastHeartbeat"]
    wait_for(lambda: env.entry("alpha")["lastHeartbeat"] > first, 5, "a lease renewal")
    for sub in ("", "/alpha", "/alpha/inbox", "/alpha/tmp", "/speed_registry"):
        assert os.stat(env.root + sub).st_mode & 0o777 == 0o700, sub
    # a second holder of the name is refused while the lease is live
    r = procs.c_run("send", "--name", "alpha", "beta", "{}")
    assert r.returncode == 1 and "name in use" in r.stderr
    assert node.stop() == 0
    assert env.entry("alpha") is None


def test_c_node_reclaims_a_stale_entry(procs, env):
    os.makedirs(os.path.join(env.root, "speed_registry"), mode=0o700, exist_ok=True)
    stale = {"name": "alpha", "id": str(uuid.uuid4()), "pid": 999999, "host": "elsewhere",
             "status": "online", "startupTimestamp": time.time() - 100, "lastHeartbeat": time.time() - 100,
             "leaseSeconds": 30, "heartbeatSeconds": 5, "protocol": 1, "groups": [], "allow": [],
             "services": [], "runtime": "test"}
    with open(os.path.join(env.root, "speed_registry", "alpha.node"), "w") as f:
        json.dump(stale, f)
    node = procs.c_node("alpha")
    assert env.entry("alpha")["id"] == node.id != stale["id"]
    wait_for(lambda: any("reclaimed" in l for l in node.errors), 5, "the reclaim notice on stderr")


def test_c_node_stops_when_its_lease_is_taken(procs, env):
    node = procs.c_node("alpha", allow=["beta"], heartbeat=0.2)
    path = os.path.join(env.root, "speed_registry", "alpha.node")
    taken = {**env.entry("alpha"), "id": str(uuid.uuid4()), "pid": 1}
    with open(path + ".tmp", "w") as f:
        json.dump(taken, f)
    os.rename(path + ".tmp", path)
    assert node.proc.wait(10) == 3
    wait_for(lambda: any("lease lost" in l for l in node.errors), 5, "the lease-lost report")
    assert env.entry("alpha")["id"] == taken["id"]  # the new owner's entry is left alone


def test_c_node_refuses_unsafe_setup(procs, env):
    bad_key = env.key_path + ".open"
    shutil.copy(env.key_path, bad_key)
    os.chmod(bad_key, 0o644)
    r = subprocess.run([procs.c_bin, "send", "--dir", env.root, "--key", bad_key, "--name", "a", "b", "1"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 1 and "chmod 600" in r.stderr
    assert gen.base64.b64encode(env.key).decode() not in r.stderr
    os.chmod(env.root, 0o777)
    try:
        r = procs.c_run("send", "--name", "a", "b", "1")
        assert r.returncode == 1 and "writable by group or others" in r.stderr
    finally:
        os.chmod(env.root, 0o700)
    for name in ("speed_registry", "a.b", "-x", "x" * 65, "a/b"):
        r = procs.c_run("send", "--name", name, "b", "1")
        assert r.returncode == 1 and "must match" in r.stderr, name


def test_c_to_c_call(procs, env):
    procs.c_node("alpha", allow=["beta"], services=["echo", "calculateTax"])
    r = procs.c_run("call", "--name", "beta", "alpha", "calculateTax", '{"amount": 100}')
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"tax": 18.0}
    args = {"s": "Grüße 世界 🚀 \"q\" \\ \n", "n": [1, 2.5, -3e-7, None, True], "o": {}}
    r = procs.c_run("call", "--name", "beta", "alpha", "echo", json.dumps(args))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == args
    r = procs.c_run("call", "--name", "beta", "alpha", "nope", "{}")
    assert r.returncode == 1 and error_line(r).startswith("ERROR SERVICE_NOT_FOUND"), r.stderr
    r = procs.c_run("call", "--name", "beta", "alpha", "calculateTax", '{"amount": "100"}')
    assert r.returncode == 1 and error_line(r).startswith("ERROR INVALID_ARGUMENTS"), r.stderr
    r = procs.c_run("call", "--name", "beta", "alpha", "echo", "[1]")
    assert r.returncode == 1 and error_line(r).startswith("ERROR INVALID_ARGUMENTS"), r.stderr
    # the one-shot callers deregistered
    assert env.entry("beta") is None


def test_c_call_timeout_and_unavailable(procs, env):
    r = procs.c_run("call", "--name", "beta", "ghost", "echo", "{}")
    assert r.returncode == 1 and "ERROR UNAVAILABLE" in r.stderr
    node = procs.c_node("alpha", allow=["beta"], services=["echo"])
    with stopped(node):
        r = procs.c_run("call", "--name", "beta", "alpha", "echo", "{}", "--timeout-ms", "300", "--linger", "0.2")
        assert r.returncode == 1 and error_line(r).startswith("ERROR TIMEOUT"), r.stderr


def test_two_c_nodes_message_and_call_each_other(procs):
    a = procs.c_node("alpha", allow=["beta"], services=["echo"])
    b = procs.c_node("beta", allow=["alpha"], services=["calculateTax"])
    a.command('send beta {"hello":"wörld","n":1}')
    a.wait_event(event="sent", to="beta", seq=1)
    assert b.wait_event(event="message", seq=1)["data"] == {"hello": "wörld", "n": 1}
    a.command("send-confirm beta [1,2,3]")
    a.wait_event(event="ack", **{"from": "beta", "ackSeq": 2})
    assert b.wait_event(event="message", seq=2)["data"] == [1, 2, 3]
    a.command('call t1 beta calculateTax {"amount":2.5}')
    assert a.wait_event(event="result", id="t1")["result"] == {"tax": 2.5 * 0.18}
    b.command('call t2 alpha echo {"x":[null]}')
    assert b.wait_event(event="result", id="t2")["result"] == {"x": [None]}
    b.command("call t3 alpha calculateTax {}")
    assert b.wait_event(event="call_error", id="t3")["errorCode"] == "SERVICE_NOT_FOUND"
    b.command("probe alpha")
    b.wait_event(event="heartbeat_reply", **{"from": "alpha"})
    assert not a.find(event="rejected") and not b.find(event="rejected")


def test_c_to_c_replay_and_tamper_rejected(procs, env):
    a = procs.c_node("alpha", allow=["beta"])
    b = procs.c_node("beta", allow=["alpha"])
    with stopped(a):
        b.command('send alpha {"n":1}')
        b.wait_event(event="sent", seq=1)
        b.command('send alpha {"n":2}')
        b.wait_event(event="sent", seq=2)
        first, second = env.inbox_files("alpha")
        with open(os.path.join(env.inbox("alpha"), first), "rb") as f:
            copy = f.read()
        path = os.path.join(env.inbox("alpha"), second)
        with open(path, "r+b") as f:  # flip one ciphertext bit in place
            f.seek(64 + 12)
            byte = f.read(1)
            f.seek(64 + 12)
            f.write(bytes([byte[0] ^ 1]))
    assert a.wait_event(event="message", seq=1)["data"] == {"n": 1}
    assert a.wait_event(event="rejected", file=second)["reason"] == "bad_tag"
    wait_for(lambda: not env.inbox_files("alpha"), 5, "alpha's inbox to drain")
    env.inject("alpha", first, copy)  # the consumed file, linked in again
    assert a.wait_event(event="rejected", file=first)["reason"] in REPLAY_REASONS
    # the link still works and nothing was delivered twice
    b.command('send alpha {"n":3}')
    assert a.wait_event(event="message", seq=3)["data"] == {"n": 3}
    assert [m["seq"] for m in a.find(event="message")] == [1, 3]


def test_c_receiver_checks_forged_envelopes(procs, env):
    """Envelopes sealed with the right key but failing a later check of section 5.5."""
    a = procs.c_node("alpha", allow=["beta"])
    b = procs.c_node("beta", allow=["alpha"])
    ok = {"from": "beta", "to": "alpha", "data": 1}
    cases = [
        ("unauthorized", dict(etype="MESSAGE", payload={**ok, "from": "gamma"}, sender="gamma",
                              source_id=b.id, target_id=a.id, seq=10)),
        ("wrong_target", dict(etype="MESSAGE", payload=ok, sender="beta", source_id=b.id,
                              target_id=str(uuid.uuid4()), seq=11)),
        ("wrong_target", dict(etype="MESSAGE", payload={**ok, "to": "other"}, sender="beta",
                              source_id=b.id, target_id=a.id, seq=12)),
        ("unknown_sender", dict(etype="MESSAGE", payload=ok, sender="beta", source_id=str(uuid.uuid4()),
                                target_id=a.id, seq=13)),
        ("unknown_sender", dict(etype="MESSAGE", payload={**ok, "from": "alpha"}, sender="beta",
                                source_id=b.id, target_id=a.id, seq=14)),
        ("stale_timestamp", dict(etype="MESSAGE", payload=ok, sender="beta", source_id=b.id,
                                 target_id=a.id, seq=15, ts_ms=int(time.time() * 1000) - 120_000)),
        ("bad_tag", dict(etype="MESSAGE", payload=ok, sender="beta", source_id=b.id, target_id=a.id,
                         seq=16, key=bytes(32))),
        ("bad_payload", dict(etype="MESSAGE", payload={"from": "beta", "to": "alpha"}, sender="beta",
                             source_id=b.id, target_id=a.id, seq=17)),
    ]
    names = []
    for reason, kw in cases:
        name, data = env.forge(**kw)
        env.inject("alpha", name, data)
        names.append((name, reason))
    for name, reason in names:
        assert a.wait_event(event="rejected", file=name)["reason"] == reason, name
    # a symlink and a second hard link are bad files
    name, data = env.forge("MESSAGE", ok, sender="beta", source_id=b.id, target_id=a.id, seq=20)
    outside = os.path.join(env.root, "outside.env")
    with open(outside, "wb") as f:
        f.write(data)
    os.symlink(outside, os.path.join(env.inbox("alpha"), name))
    assert a.wait_event(event="rejected", file=name)["reason"] == "bad_file"
    name, data = env.forge("MESSAGE", ok, sender="beta", source_id=b.id, target_id=a.id, seq=21)
    os.link(outside, os.path.join(env.inbox("alpha"), name))
    assert a.wait_event(event="rejected", file=name, timeout=10)["reason"] == "bad_file"
    # and a well-formed forgery with the right ids is accepted, so the checks above were the cause
    name, data = env.forge("MESSAGE", {**ok, "data": "fine"}, sender="beta", source_id=b.id,
                           target_id=a.id, seq=30)
    env.inject("alpha", name, data)
    assert a.wait_event(event="message", seq=30)["data"] == "fine"
    assert not a.find(event="message", seq=10)
    # after 30 was accepted, an older sequence with a fresh nonce is a replay
    name, data = env.forge("MESSAGE", ok, sender="beta", source_id=b.id, target_id=a.id, seq=29)
    env.inject("alpha", name, data)
    assert a.wait_event(event="rejected", file=name)["reason"] == "replayed_sequence"
    # larger than 1 MiB of payload: rejected before reading
    name = gen.filename("beta", b.id, 31, os.urandom(12))
    env.inject("alpha", name, b"\0" * (1024 * 1024 + 64 + 12 + 16 + 1))
    assert a.wait_event(event="rejected", file=name)["reason"] == "too_large"
    # a name that is no envelope name
    env.inject("alpha", "garbage.txt", b"x")
    assert a.wait_event(event="rejected", file="garbage.txt")["reason"] == "unauthorized"
    assert env.inbox_files("alpha") == []


def test_unauthorized_c_sender_refused(procs, env):
    a = procs.c_node("alpha", allow=["beta"], services=["echo"])
    for args in (("call", "--name", "gamma", "alpha", "echo", "{}"),
                 ("send", "--name", "gamma", "alpha", '"hi"')):
        r = procs.c_run(*args)
        assert r.returncode == 1
        assert "ACCESS_DENIED" in r.stderr
    assert env.inbox_files("alpha") == [] and env.tmp_files("alpha") == []
    # a running C node asking to call a peer it does not allow fails before writing anything
    a.command("call t1 beta echo {}")
    assert a.wait_event(event="call_error", id="t1")["errorCode"] in ("ACCESS_DENIED", "UNAVAILABLE")
    assert not a.find(event="message") and not a.find(event="rejected")


def test_c_node_sigterm_sends_leave_and_deregisters(procs, env):
    a = procs.c_node("alpha", allow=["beta"])
    b = procs.c_node("beta", allow=["alpha"])
    # beta must know alpha's id before alpha deregisters: the leave EVENT is sealed while the
    # entry exists but usually checked after it is gone (see README, ambiguities)
    a.command('send beta "before"')
    b.wait_event(event="message", seq=1)
    assert a.stop() == 0
    assert env.entry("alpha") is None
    wait_for(lambda: any('"leave"' in l for l in b.errors), 5, "beta to receive the leave EVENT")
    assert not b.find(event="rejected")


# =========================================================================== contract 1.1

def test_registry_lock_wait_is_bounded_names_the_holder_and_answers_signals(procs, env):
    holder = hold_registry_lock(procs, env)
    r = procs.c_run("send", "--name", "alpha", "--lock-timeout", "1", "beta", "1")
    assert r.returncode == 1
    assert f"held by pid {holder.pid} for" in r.stderr and "gave up waiting" in r.stderr, r.stderr
    assert env.entry("alpha") is None
    # an hour's wait still ends at once on SIGTERM
    node = procs.c_node("alpha", args=["--lock-timeout", "3600"], wait_ready=False)
    node.wait_error(f"waiting for the registry lock held by pid {holder.pid}")
    node.proc.send_signal(signal.SIGTERM)
    assert node.proc.wait(30) == 1
    node.wait_error(f"interrupted by a signal while waiting for the registry lock held by pid {holder.pid}")
    holder.stop()
    procs.c_node("alpha")
    assert env.entry("alpha")["status"] == "online"


@pytest.mark.parametrize("kind", ["a directory", "a symbolic link", "a FIFO"])
def test_a_lock_that_is_not_a_regular_file_is_one_clear_error(procs, env, kind):
    reg = os.path.join(env.root, "speed_registry")
    os.makedirs(reg, mode=0o700)
    lock, target = os.path.join(reg, ".lock"), os.path.join(env.root, "lock-target")
    {"a directory": lambda: os.mkdir(lock, 0o700), "a symbolic link": lambda: os.symlink(target, lock),
     "a FIFO": lambda: os.mkfifo(lock, 0o600)}[kind]()
    r = procs.c_run("send", "--name", "alpha", "beta", "1")
    assert r.returncode == 1
    assert r.stderr.splitlines() == [
        f"error: cannot register 'alpha': configuration error: the registry lock {lock} is {kind}, "
        "not a regular file; remove it (it is created again as an empty file)"]
    assert not os.path.lexists(target) and env.entry("alpha") is None


def test_a_sender_refuses_a_leaving_target(procs, env):
    a = procs.c_node("alpha", allow=["beta"])
    b = procs.c_node("beta", allow=["alpha"], services=["echo"], lease=7200, heartbeat=3600)
    env.write_entry("beta", {**env.entry("beta"), "status": "leaving"})
    a.command('send beta "late"')
    err = a.wait_event(event="send_error", to="beta")
    assert (err["errorCode"], err["errorMessage"]) == ("UNAVAILABLE", "node beta is leaving")
    r = procs.c_run("call", "--name", "gamma", "beta", "echo", "{}")
    assert r.returncode == 1 and error_line(r) == "ERROR UNAVAILABLE node beta is leaving"
    assert env.inbox_files("beta") == [] and env.tmp_files("beta") == []
    env.write_entry("beta", {**env.entry("beta"), "status": "online"})
    a.command('send beta "now"')
    assert b.wait_event(event="message")["data"] == "now"


def test_a_stopping_c_node_handles_every_envelope_delivered_before_leaving(procs, env):
    """Several hundred envelopes wait in the inbox at SIGTERM and the sender keeps streaming:
    every send that succeeded is handled, nothing stays behind."""
    r = procs.c_node("recv", allow=["send"], lease=120)
    s = procs.c_node("send", allow=["recv"])
    with stopped(r):
        s.proc.stdin.write("".join(f"send recv {i}\n" for i in range(400)))
        s.proc.stdin.flush()
        wait_for(lambda: s.count("sent") == 400, 30, "400 envelopes in recv's inbox")
        os.kill(r.pid, signal.SIGTERM)  # delivered when recv continues
    stream_until_exit(s, r, 400)
    assert r.proc.wait(30) == 0
    sent = {e["seq"] for e in s.find(event="sent")}
    handled = [e["seq"] for e in r.find(event="message")]
    assert len(sent) >= 400 and sent == set(handled) and len(handled) == len(set(handled))
    refused = s.find(event="send_error")
    assert refused and {e["errorMessage"] for e in refused} <= {"node recv is leaving",
                                                                  "node recv is not available"}
    assert env.inbox_files("recv") == [] and env.entry("recv") is None


def test_a_stopping_c_node_keeps_its_entry_until_its_leave_was_read(procs, env):
    b = procs.c_node("beta", allow=["alpha"])
    a = procs.c_node("alpha", allow=["beta"], args=["--linger", "60"])
    with stopped(b):
        a.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: any(f.startswith("alpha.") for f in env.inbox_files("beta")), 10, "alpha's leave EVENT")
        assert a.proc.poll() is None and env.entry("alpha")["status"] == "leaving"
    assert a.proc.wait(30) == 0 and env.entry("alpha") is None
    b.wait_error('"event":"leave"')
    assert not b.find(event="rejected")


def test_a_file_with_two_fresh_links_is_deferred_not_rejected(procs, env):
    a = procs.c_node("alpha", allow=["beta"])
    b = procs.c_node("beta", allow=["alpha"])
    msg = {"from": "beta", "to": "alpha"}
    first, one = env.forge("MESSAGE", {**msg, "data": "one"}, sender="beta", source_id=b.id, target_id=a.id, seq=1)
    second, two = env.forge("MESSAGE", {**msg, "data": "two"}, sender="beta", source_id=b.id, target_id=a.id, seq=2)
    tmp = os.path.join(env.root, "alpha", "tmp", first)
    with open(tmp, "wb") as f:
        f.write(one)
    os.link(tmp, os.path.join(env.inbox("alpha"), first))  # a link()+unlink() delivery, half done
    env.inject("alpha", second, two)  # the same sender's next envelope, complete
    a.wait_event(event="deferred", file=first)
    assert not a.find(event="message") and not a.find(event="rejected")  # order kept: two waits too
    os.unlink(tmp)
    a.wait_event(event="message", seq=2)
    assert [(m["seq"], m["data"]) for m in a.find(event="message")] == [(1, "one"), (2, "two")]
    assert not a.find(event="rejected")


def test_reasons_and_their_order_follow_the_contract(procs, env):
    """§5.5 steps 3-4 and docs/PROTOCOL.md "Order of checks": framing before the tag (size,
    then version and header length), the type's shape before identities."""
    rt = python_runtime()
    from speed_runtime.core import envelope
    a = procs.c_node("alpha", allow=["beta"])
    b = procs.c_node("beta", allow=["alpha"])
    ok = {"from": "beta", "to": "alpha", "data": 1}
    cases = [  # (reason, forge arguments, bytes cut off the end)
        ("bad_version", dict(header_length=65), 0),
        ("bad_version", dict(header_length=0), 0),
        ("bad_version", dict(version=2), 0),
        ("bad_size", dict(version=2), 1),
        ("bad_size", dict(header_length=65), 1),
        ("too_large", dict(version=2, payload_size=2**40), 0),
        ("bad_payload", dict(etype=9, target_id=str(uuid.uuid4())), 0),
        ("bad_payload", dict(payload={"from": "gamma", "to": "alpha"}), 0),
        ("unknown_sender", dict(payload={**ok, "from": "alpha"}), 0),
        ("wrong_target", dict(payload={**ok, "to": "other"}), 0),
        ("wrong_target", dict(target_id=str(uuid.uuid4())), 0),
    ]
    expected = []
    for seq, (reason, kw, cut) in enumerate(cases, start=10):
        args = {"etype": "MESSAGE", "payload": ok, "sender": "beta", "source_id": b.id, "target_id": a.id,
                "seq": seq, **kw}
        name, data = env.forge(**args)
        data = data[:len(data) - cut]
        if reason in ("bad_version", "bad_size", "too_large"):  # the Python codec agrees
            with pytest.raises(rt.EnvelopeError) as exc:
                envelope.open_envelope(data, rt.Key(env.key))
            assert exc.value.reason == reason, (reason, kw)
        env.inject("alpha", name, data)
        expected.append((name, reason))
    for name, reason in expected:
        assert a.wait_event(event="rejected", file=name)["reason"] == reason, name
    assert not a.find(event="message")


def test_rejection_lines_keep_the_header_type_and_the_size(procs, env):
    a = procs.c_node("alpha", allow=["beta"])
    b = procs.c_node("beta", allow=["alpha"])
    ids = {"sender": "beta", "source_id": b.id, "target_id": a.id}
    req = {"from": "beta", "to": "alpha", "requestId": "r1", "service": "echo", "arguments": {}}
    name1, data1 = env.forge("SPC_REQUEST", req, seq=5, key=bytes(32), **ids)  # bad_tag
    name2, data2 = env.forge("EVENT", {"from": "beta", "to": "alpha", "event": "x"}, seq=6, **ids)
    data2 += bytes(1024 * 1024)  # too_large: never read past the header
    name3, data3 = env.forge("ACK", {"from": "beta", "to": "alpha", "ackSeq": 1}, seq=7, **ids)
    data3 = data3[:-1]  # bad_size
    name4 = gen.filename("beta", b.id, 8, os.urandom(12))
    data4 = b"0123456789"  # bad_size, no header to read
    name5, data5 = env.forge("MESSAGE", {"from": "gamma", "to": "alpha", "data": 1}, sender="gamma",
                             source_id=b.id, target_id=a.id, seq=9)  # unauthorized: removed unread
    for name, data in ((name1, data1), (name2, data2), (name3, data3), (name4, data4), (name5, data5)):
        env.inject("alpha", name, data)
    got = {n: a.wait_event(event="rejected", file=n) for n in (name1, name2, name3, name4, name5)}
    strip = lambda e: {k: v for k, v in e.items() if k not in ("event", "file")}  # noqa: E731
    assert strip(got[name1]) == {"reason": "bad_tag", "peer": "beta", "type": "SPC_REQUEST", "seq": 5,
                                 "size": len(data1)}
    assert strip(got[name2]) == {"reason": "too_large", "peer": "beta", "type": "EVENT", "seq": 6,
                                 "size": len(data2)}
    assert strip(got[name3]) == {"reason": "bad_size", "peer": "beta", "type": "ACK", "seq": 7,
                                 "size": len(data3)}
    assert strip(got[name4]) == {"reason": "bad_size", "peer": "beta", "size": 10}
    assert strip(got[name5]) == {"reason": "unauthorized", "peer": "gamma", "size": len(data5)}


def test_one_forged_sequence_cannot_block_a_link(procs, env):
    a = procs.c_node("alpha", allow=["beta", "gamma"])
    b = procs.c_node("beta", allow=["alpha"])
    g = procs.c_node("gamma", allow=["alpha"])
    for i in (1, 2):
        b.command(f"send alpha {i}")
    a.wait_event(event="message", seq=2)
    msg = {"from": "beta", "to": "alpha", "data": "forged"}
    name, data = env.forge("MESSAGE", msg, sender="beta", source_id=b.id, target_id=a.id, seq=2**64 - 1)
    env.inject("alpha", name, data)
    assert a.wait_event(event="rejected", file=name)["reason"] == "bad_sequence"
    b.command("send alpha 3")
    assert a.wait_event(event="message", seq=3)["data"] == 3
    # an instance not seen before counts from 0: 65,537 is the largest first sequence
    msg = {"from": "gamma", "to": "alpha", "data": "gap"}
    for seq, outcome in ((65538, "bad_sequence"), (65537, "accepted"), (131075, "bad_sequence"),
                         (131074, "accepted")):
        name, data = env.forge("MESSAGE", msg, sender="gamma", source_id=g.id, target_id=a.id, seq=seq)
        env.inject("alpha", name, data)
        if outcome == "accepted":
            a.wait_event(event="message", seq=seq)
        else:
            assert a.wait_event(event="rejected", file=name)["reason"] == outcome, seq
    a.wait_error('"event":"sequence_gap","from":"gamma","skipped":65536,"got":131074')
    assert [m["data"] for m in a.find(event="message")] == [1, 2, 3, "gap", "gap"]


def test_the_largest_gap_is_configurable(procs, env):
    a = procs.c_node("alpha", allow=["beta"], args=["--max-gap", "10"])
    b = procs.c_node("beta", allow=["alpha"])
    msg = {"from": "beta", "to": "alpha", "data": 0}
    for seq, reason in ((12, "bad_sequence"), (11, None), (23, "bad_sequence"), (22, None)):
        name, data = env.forge("MESSAGE", msg, sender="beta", source_id=b.id, target_id=a.id, seq=seq)
        env.inject("alpha", name, data)
        if reason:
            assert a.wait_event(event="rejected", file=name)["reason"] == reason, seq
        else:
            a.wait_event(event="message", seq=seq)


def test_a_c_sender_numbers_a_restarted_receiver_from_1(procs, env):
    # --max-gap 0: a sender that went on counting would be refused by the new instance
    r1 = procs.c_node("recv", allow=["send"], args=["--max-gap", "0"])
    s = procs.c_node("send", allow=["recv"])
    for i in (1, 2, 3):
        s.command(f"send recv {i}")
    r1.wait_event(event="message", seq=3)
    assert r1.stop() == 0
    r2 = procs.c_node("recv", allow=["send"], args=["--max-gap", "0"])
    s.command('send recv "again"')
    wait_for(lambda: len(s.find(event="sent")) == 4, 10, "the fourth send")
    assert [e["seq"] for e in s.find(event="sent")] == [1, 2, 3, 1]
    assert r2.wait_event(event="message", seq=1)["data"] == "again"
    assert not r2.find(event="rejected")


def test_a_c_caller_takes_responses_only_from_the_instance_it_called(procs, env):
    a = procs.c_node("alpha", allow=["beta", "mallory"], args=["--timeout-ms", "8000"])
    b = procs.c_node("beta", allow=["alpha"], services=["echo"])
    m = procs.c_node("mallory", allow=["alpha"])
    forged = {"from": "mallory", "to": "alpha", "status": "SUCCESS", "result": {"forged": True}}
    with stopped(b):
        a.command('call t1 beta echo {"x":1}')
        rid = env.open_envelope(inbox_file(env, "beta"))[1]["requestId"]
        name, data = env.forge("SPC_RESPONSE", {**forged, "requestId": rid}, sender="mallory",
                               source_id=m.id, target_id=a.id, seq=1)
        env.inject("alpha", name, data)
        got = a.wait_event(event="rejected", file=name)
        assert (got["reason"], got["type"]) == ("unexpected_response", "SPC_RESPONSE")
        name, data = env.forge("ACK", {"from": "mallory", "to": "alpha", "ackSeq": 1}, sender="mallory",
                               source_id=m.id, target_id=a.id, seq=2)
        env.inject("alpha", name, data)
        assert a.wait_event(event="rejected", file=name)["reason"] == "unexpected_response"
    assert a.wait_event(event="result", id="t1")["result"] == {"x": 1}
    # the same name, another instance: the request went to the old one
    os.kill(b.pid, signal.SIGSTOP)
    a.command('call t2 beta echo {"x":2}')
    rid = env.open_envelope(inbox_file(env, "beta"))[1]["requestId"]
    b.proc.kill()
    b.proc.wait(5)
    b2 = procs.c_node("beta", allow=["alpha"], services=["echo"])
    assert b2.wait_event(event="rejected")["reason"] == "wrong_target"  # the old instance's request
    answer = {**forged, "from": "beta", "requestId": rid}
    name, data = env.forge("SPC_RESPONSE", answer, sender="beta", source_id=b2.id, target_id=a.id, seq=1)
    env.inject("alpha", name, data)
    assert a.wait_event(event="rejected", file=name)["reason"] == "unexpected_response"
    assert a.wait_event(event="call_error", id="t2")["errorCode"] == "TIMEOUT"
    assert len(a.find(event="result")) == 1


def test_late_answers_are_unexpected(procs, env):
    a = procs.c_node("alpha", allow=["beta"], args=["--timeout-ms", "300"])
    b = procs.c_node("beta", allow=["alpha"], services=["echo"])
    with stopped(b):
        a.command("call t1 beta echo {}")
        assert a.wait_event(event="call_error", id="t1")["errorCode"] == "TIMEOUT"
        a.command('send-confirm beta "x"')
        a.wait_event(event="ack_timeout", to="beta")
    wait_for(lambda: len(a.find(event="rejected")) == 2, 10, "both late answers")
    assert {(e["reason"], e["type"]) for e in a.find(event="rejected")} == {
        ("unexpected_response", "SPC_RESPONSE"), ("unexpected_response", "ACK")}
    assert not a.find(event="result") and not a.find(event="ack")


def test_a_request_past_its_deadline_is_answered_timeout_and_never_run(procs, env):
    callee = procs.c_node("callee", allow=["caller"], services=["echo"])
    caller = procs.c_node("caller", allow=["callee"])
    by_id = deadline_answers(env, callee, caller)
    assert (by_id["late"]["status"], by_id["late"]["errorCode"]) == ("ERROR", "TIMEOUT")
    assert (by_id["in-time"]["status"], by_id["in-time"]["result"]) == ("SUCCESS", {"rid": "in-time"})
    assert (by_id["no-deadline"]["status"], by_id["no-deadline"]["result"]) == ("SUCCESS", {"rid": "no-deadline"})
    assert sorted(e["requestId"] for e in callee.find(event="served")) == ["in-time", "no-deadline"]


def test_entries_that_cannot_be_live_are_reclaimed(procs, env):
    """§4.1: leaseSeconds clamped to a day, a heartbeat more than a lease in the future is stale,
    and so is an entry of this host whose pid does not exist, with or without bootId."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    now = time.time()
    base = {"id": str(uuid.uuid4()), "pid": 1, "host": "elsewhere.invalid", "status": "online",
            "startupTimestamp": now, "leaseSeconds": 30, "heartbeatSeconds": 5, "protocol": 1,
            "groups": [], "allow": [], "services": [], "runtime": "test"}
    here = {"host": socket.gethostname(), "pid": dead.pid}
    entries = {
        "millis": {**base, "lastHeartbeat": now * 1000},
        "huge": {**base, "lastHeartbeat": now - 90_000, "leaseSeconds": 1e300},
        "deadpid": {**base, **here, "lastHeartbeat": now},
        "issue": {**base, **here, "lastHeartbeat": now * 1000, "leaseSeconds": 1e300},
        "live": {**base, "lastHeartbeat": now},  # the control: this one is in use
    }
    for name, entry in entries.items():
        env.write_entry(name, {**entry, "name": name})
    for name in ("millis", "huge", "deadpid", "issue"):
        node = procs.c_node(name)
        assert env.entry(name)["id"] == node.id
        node.wait_error(f"reclaimed stale registry entry of '{name}'")
    r = procs.c_run("send", "--name", "live", "x", "1")
    assert r.returncode == 1 and "name in use: node 'live' is registered by pid 1 on host elsewhere.invalid" in r.stderr


@pytest.mark.parametrize("value", ["inf", "1e400", "nan", "-1", "0", "86401"])
def test_an_impossible_lease_is_one_sentence(procs, env, value):
    r = procs.c_run("send", "--name", "alpha", "--lease", value, "beta", "1")
    assert r.returncode == 2
    assert r.stderr.splitlines()[0] == f"error: --lease must be a number above 0 and at most 86400, not '{value}'"
    assert env.entry("alpha") is None


def _stats(node) -> dict:
    before = node.count("stats")
    node.command("stats")
    wait_for(lambda: node.count("stats") > before, 10, f"{node.name} stats")
    return node.find(event="stats")[-1]


def test_the_nonce_cache_is_bounded_and_pruned(procs, env):
    r = procs.c_node("recv", allow=["send"], args=["--nonce-cache", "100"])
    s = procs.c_node("send", allow=["recv"])
    with stopped(r):
        s.proc.stdin.write("".join(f"send recv {i}\n" for i in range(300)))
        s.proc.stdin.flush()
        wait_for(lambda: s.count("sent") == 300, 30, "300 sends")
        first = env.inbox_files("recv")[0]
        with open(os.path.join(env.inbox("recv"), first), "rb") as f:
            copy = f.read()
    wait_for(lambda: r.count("message") == 300, 30, "300 messages")
    assert _stats(r)["nonces"] == 100
    env.inject("recv", first, copy)  # its nonce was forgotten: its sequence number still refuses it
    assert r.wait_event(event="rejected", file=first)["reason"] == "replayed_sequence"
    # nonces leave when their window ends
    r2 = procs.c_node("recv2", allow=["send"], args=["--replay-window-ms", "2000"])
    for i in range(5):
        s.command(f"send recv2 {i}")
    wait_for(lambda: r2.count("message") == 5, 10, "5 messages")
    wait_for(lambda: _stats(r2)["nonces"] == 0, 15, "the window to end")
    assert _stats(r2)["senders"] == 1


def test_a_full_inbox_is_read_in_bounded_batches(procs, env):
    """20,000 envelopes wait in the inbox: handled in order, and the receiver's peak memory
    grows by less than a megabyte (reading every name at once takes about two)."""
    n = 20_000
    r = procs.c_node("recv", allow=["send"], lease=600, args=["--nonce-cache", "1000"])
    s = procs.c_node("send", allow=["recv"], lease=600)
    s.proc.stdin.write("".join(f"send recv {i}\n" for i in range(200)))
    s.proc.stdin.flush()
    wait_for(lambda: r.count("message") == 200, 30, "the warm-up")
    baseline = peak_rss_kb(r.pid)
    with stopped(r):
        s.proc.stdin.write("".join(f"send recv {i}\n" for i in range(n)))
        s.proc.stdin.flush()
        wait_for(lambda: s.count("sent") == 200 + n, 300, f"{n} envelopes in the inbox")
    wait_for(lambda: r.count("message") == 200 + n, 300, f"{n} messages")
    assert [e["seq"] for e in r.find(event="message")] == list(range(1, n + 201))
    grown = peak_rss_kb(r.pid) - baseline
    assert grown < 1024, f"peak RSS grew by {grown} kB"


def test_unknown_flag_bits_and_registry_fields_are_ignored(procs, env):
    a = procs.c_node("alpha", allow=["beta", "gamma"])
    b = procs.c_node("beta", allow=["alpha"], lease=7200, heartbeat=3600)
    g = procs.c_node("gamma", allow=["alpha"])  # the identity of the forged envelopes
    assert "features" not in env.entry("alpha") and "features" not in env.entry("beta")
    with stopped(g):  # what alpha sends back stays in gamma's inbox
        for seq, flags in ((1, 0xFFFE), (2, 0xFFFF)):
            name, data = env.forge("MESSAGE", {"from": "gamma", "to": "alpha", "data": flags}, sender="gamma",
                                   source_id=g.id, target_id=a.id, seq=seq, flags=flags)
            env.inject("alpha", name, data)
        a.wait_event(event="message", seq=2)
        wait_for(lambda: len(env.inbox_files("gamma")) == 1, 10, "one ACK")
        header, ack = env.open_envelope(os.path.join(env.inbox("gamma"), env.inbox_files("gamma")[0]))
        assert header["type"] == 8 and header["flags"] == 0 and ack["ackSeq"] == 2
    assert [m["data"] for m in a.find(event="message")] == [0xFFFE, 0xFFFF]
    entry = {**env.entry("beta"), "features": ["chunks", "reliable"], "futureField": {"n": [1, {"x": None}]}}
    env.write_entry("beta", entry)
    with stopped(b):
        a.command('send beta "plain"')
        a.command('send-confirm beta "confirmed"')
        wait_for(lambda: len(env.inbox_files("beta")) == 2, 10, "two messages to beta")
        flags = sorted(env.open_envelope(os.path.join(env.inbox("beta"), f))[0]["flags"]
                       for f in env.inbox_files("beta"))
        assert flags == [0, 1]  # no bit but the ACK request, whatever the target advertises
    b.wait_event(event="message", data="confirmed")
    assert [m["data"] for m in b.find(event="message")] == ["plain", "confirmed"]
    a.wait_event(event="ack", ackSeq=2)
    assert not a.find(event="rejected") and not b.find(event="rejected")


# =========================================================================== with Python

def test_python_node_calls_c_node(procs, env):
    rt = python_runtime()
    procs.c_node("cnode", allow=["pyc"], services=["echo", "calculateTax"])
    with rt.Node(env.root, env.key_path, "pyc", allow=["cnode"]) as node:
        args = {"text": "Grüße 🚀", "list": [1, 2.5, None, False], "nested": {"k": "v"}}
        assert node.call("cnode", "echo", args, timeout=10) == args
        assert node.call("cnode", "calculateTax", {"amount": 100}, timeout=10) == {"tax": 18.0}
        assert node.call("cnode", "calculateTax", {"amount": 12.5}, timeout=10) == {"tax": 12.5 * 0.18}
        with pytest.raises(rt.SpcError) as exc:
            node.call("cnode", "calculateTax", {"amount": "x"}, timeout=10)
        assert exc.value.code == "INVALID_ARGUMENTS"
        with pytest.raises(rt.SpcError) as exc:
            node.call("cnode", "missing", {}, timeout=10)
        assert exc.value.code == "SERVICE_NOT_FOUND"


def test_c_node_calls_python_node(procs, env):
    python_runtime()
    procs.py_node("py", allow=["cnode"], services=["calculateTax"])
    r = procs.c_run("call", "--name", "cnode", "py", "calculateTax", '{"amount": 100}')
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"tax": 18.0}
    r = procs.c_run("call", "--name", "cnode", "py", "calculateTax", '{"amount": 3.3}')
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"tax": 3.3 * 0.18}
    r = procs.c_run("call", "--name", "cnode", "py", "calculateTax", '{"amount": "x"}')
    assert r.returncode == 1 and error_line(r).startswith("ERROR INVALID_ARGUMENTS"), r.stderr
    r = procs.c_run("call", "--name", "cnode", "py", "nope", "{}")
    assert r.returncode == 1 and error_line(r).startswith("ERROR SERVICE_NOT_FOUND"), r.stderr
    # a long-running C node calls too
    c = procs.c_node("cnode", allow=["py"])
    c.command('call t1 py calculateTax {"amount":50}')
    assert c.wait_event(event="result", id="t1")["result"] == {"tax": 9.0}
    c.command("probe py")
    c.wait_event(event="heartbeat_reply", **{"from": "py"})


def test_messages_both_ways(procs, env):
    rt = python_runtime()
    c = procs.c_node("cnode", allow=["pym"])
    got: list = []
    with rt.Node(env.root, env.key_path, "pym", allow=["cnode"]) as node:
        node.on_message(got.append)
        # C -> Python
        c.command('send pym {"text":"hällo 世界","n":[1,2]}')
        c.wait_event(event="sent", to="pym", seq=1)
        c.command('send-confirm pym "second"')
        c.wait_event(event="ack", **{"from": "pym", "ackSeq": 2})
        wait_for(lambda: len(got) >= 2, 10, "two messages at the Python node")
        assert [(m.sender, m.seq, m.data) for m in got] == [
            ("cnode", 1, {"text": "hällo 世界", "n": [1, 2]}), ("cnode", 2, "second")]
        # Python -> C
        seq = node.send("cnode", {"from python": ["ü", 1.5, None]}, confirm=True, timeout=10)
        assert c.wait_event(event="message", seq=seq)["data"] == {"from python": ["ü", 1.5, None]}
        seq2 = node.send("cnode", 42)
        assert seq2 == seq + 1
        assert c.wait_event(event="message", seq=seq2)["data"] == 42
        assert all(e["from"] == "pym" for e in c.find(event="message"))
    assert not c.find(event="rejected")


def test_c_node_in_speed_registry(procs, env):
    python_runtime()
    c = procs.c_node("cnode", allow=["x"], services=["echo"], lease=2, heartbeat=0.5)

    def row():
        r = subprocess.run(SPEED + ["registry", "--dir", env.root, "--json"], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        return next((x for x in json.loads(r.stdout) if x["name"] == "cnode"), None)

    first = row()
    assert first["state"] == "online" and first["runtime"] == C_RUNTIME and first["id"] == c.id
    assert first["allow"] == ["x"] and first["services"] == ["echo"]
    table = subprocess.run(SPEED + ["registry", "--dir", env.root], capture_output=True, text=True, timeout=30)
    assert "cnode" in table.stdout and "online" in table.stdout and C_RUNTIME in table.stdout
    # renewals keep it online past its 2 s lease
    wait_for(lambda: env.entry("cnode")["lastHeartbeat"] > env.entry("cnode")["startupTimestamp"] + 2.5, 6,
             "renewals past one lease")
    assert row()["state"] == "online"
    # killed without deregistering: the lease runs out
    c.proc.kill()
    c.proc.wait(5)
    wait_for(lambda: row()["state"] == "stale", 10, "the C node's entry to go stale")


def test_python_receiver_rejects_replay_and_tamper_from_c(procs, env):
    python_runtime()
    py = procs.py_node("py", allow=["cnode"])
    c = procs.c_node("cnode", allow=["py"])
    with stopped(py):
        for n in (1, 2):
            c.command(f'send py {{"n":{n}}}')
            c.wait_event(event="sent", seq=n)
        first, second = env.inbox_files("py")
        with open(os.path.join(env.inbox("py"), first), "rb") as f:
            copy = f.read()
        with open(os.path.join(env.inbox("py"), second), "r+b") as f:
            f.seek(70)  # bytes 64..75 are the nonce: flip one of its bits
            b = f.read(1)
            f.seek(70)
            f.write(bytes([b[0] ^ 0x10]))
    wait_for(lambda: any(l.startswith("{") and json.loads(l).get("seq") == 1 for l in py.lines), 10,
             "py to print message 1")
    journal_rejection(env, "py", peer="cnode", reason="bad_tag")
    wait_for(lambda: not env.inbox_files("py"), 5, "py's inbox to drain")
    env.inject("py", first, copy)
    rec = journal_rejection(env, "py", peer="cnode", seq=1)
    assert rec["reason"] in REPLAY_REASONS
    c.command('send py {"n":3}')
    wait_for(lambda: any(l.startswith("{") and json.loads(l).get("seq") == 3 for l in py.lines), 10,
             "py to print message 3")
    msgs = [json.loads(l) for l in py.lines if l.startswith("{")]
    assert [(m["seq"], m["data"]) for m in msgs] == [(1, {"n": 1}), (3, {"n": 3})]


def test_c_receiver_rejects_replay_and_tamper_from_python(procs, env):
    rt = python_runtime()
    c = procs.c_node("cnode", allow=["pys"])
    with rt.Node(env.root, env.key_path, "pys", allow=["cnode"]) as node:
        with stopped(c):
            node.send("cnode", {"n": 1})
            node.send("cnode", {"n": 2})
            wait_for(lambda: len(env.inbox_files("cnode")) == 2, 5, "two files in cnode's inbox")
            first, second = env.inbox_files("cnode")
            with open(os.path.join(env.inbox("cnode"), first), "rb") as f:
                copy = f.read()
            with open(os.path.join(env.inbox("cnode"), second), "r+b") as f:
                f.seek(20)  # a timestamp byte of the header (associated data)
                b = f.read(1)
                f.seek(20)
                f.write(bytes([b[0] ^ 0x01]))
        assert c.wait_event(event="message", seq=1)["data"] == {"n": 1}
        assert c.wait_event(event="rejected", file=second)["reason"] == "bad_tag"
        wait_for(lambda: not env.inbox_files("cnode"), 5, "cnode's inbox to drain")
        env.inject("cnode", first, copy)
        assert c.wait_event(event="rejected", file=first)["reason"] in REPLAY_REASONS
        seq = node.send("cnode", {"n": 3}, confirm=True, timeout=10)
        assert c.wait_event(event="message", seq=seq)["data"] == {"n": 3}
    assert [m["data"] for m in c.find(event="message")] == [{"n": 1}, {"n": 3}]


def test_python_node_refuses_unauthorized_c_sender(procs, env):
    python_runtime()
    py = procs.py_node("py", allow=["someone"], services=["calculateTax"])
    r = procs.c_run("call", "--name", "cnode", "py", "calculateTax", '{"amount": 1}')
    assert r.returncode == 1 and "ACCESS_DENIED" in r.stderr
    r = procs.c_run("send", "--name", "cnode", "py", '"hi"')
    assert r.returncode == 1 and "ACCESS_DENIED" in r.stderr
    assert env.inbox_files("py") == [] and env.tmp_files("py") == []
    # a C node that writes anyway (a forged file under its name) is refused unread
    c = procs.c_node("cnode", allow=["py"])
    name, data = env.forge("MESSAGE", {"from": "cnode", "to": "py", "data": 1}, sender="cnode",
                           source_id=c.id, target_id=py.id, seq=1)
    env.inject("py", name, data)
    journal_rejection(env, "py", peer="cnode", reason="unauthorized")
    wait_for(lambda: not env.inbox_files("py"), 5, "py to remove the file")
    assert not [l for l in py.lines if l.startswith("{")]


def test_c_node_refuses_unauthorized_python_sender(procs, env):
    rt = python_runtime()
    c = procs.c_node("cnode", allow=["friend"], services=["echo"])
    with rt.Node(env.root, env.key_path, "pyx", allow=["cnode"]) as node:
        with pytest.raises(rt.AccessDeniedError):
            node.send("cnode", {"x": 1})
        with pytest.raises((rt.AccessDeniedError, rt.SpcError)) as exc:
            node.call("cnode", "echo", {}, timeout=5)
        if isinstance(exc.value, rt.SpcError):
            assert exc.value.code == "ACCESS_DENIED"
        assert env.inbox_files("cnode") == [] and env.tmp_files("cnode") == []
        name, data = env.forge("MESSAGE", {"from": "pyx", "to": "cnode", "data": 1}, sender="pyx",
                               source_id=node.id, target_id=c.id, seq=1)
        env.inject("cnode", name, data)
        assert c.wait_event(event="rejected", file=name)["reason"] == "unauthorized"
    assert not c.find(event="message")


def test_python_opens_shared_vectors():
    rt = python_runtime()
    from speed_runtime.core import envelope
    doc = json.loads(VECTORS.read_text(encoding="utf-8"))
    for v in doc["vectors"]:
        key = rt.Key(bytes.fromhex(v["key_hex"]))
        opened = envelope.open_envelope(bytes.fromhex(v["envelope_hex"]), key)
        h = opened.header
        assert opened.payload == v["payload_utf8"].encode("utf-8"), v["name"]
        assert (h.version, h.type, h.flags, h.header_length, h.sequence, h.timestamp_ms) == (
            v["version"], v["type"], v["flags"], v["header_length"], v["sequence"], v["timestamp_ms"]), v["name"]
        assert h.source_id == uuid.UUID(v["source_id"]).bytes and h.target_id == uuid.UUID(v["target_id"]).bytes
        assert h.encode().hex() == v["header_hex"]
        assert envelope.type_name(h.type) == v["type_name"]
        sealed = envelope.seal(h, opened.payload, key, bytes.fromhex(v["nonce_hex"]))
        assert sealed.hex() == v["envelope_hex"], v["name"]
        sender = json.loads(v["payload_utf8"])["from"]
        assert envelope.envelope_filename(sender, h.source_id, h.sequence, opened.nonce) == v["filename"]
        parsed = envelope.parse_filename(v["filename"])
        assert parsed is not None and parsed.sender == sender and parsed.sequence == h.sequence
    key = rt.Key(bytes.fromhex(doc["vectors"][0]["key_hex"]))
    for bad in doc["invalid"]:
        with pytest.raises(rt.EnvelopeError) as exc:
            envelope.open_envelope(bytes.fromhex(bad["envelope_hex"]), key)
        assert exc.value.reason == bad["reason"], bad["name"]
