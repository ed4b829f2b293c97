"""Contract revision 1.1 between the C node and the Python runtime: the interop cases whose
Python half is the runtime's 1.1 behaviour (leaving, bounded gaps, per-instance numbering,
responses only from the called node, SPC deadlines, graceful drain, rejected records).

The C half of each case is tested on its own in test_c_node.py; these tests fail while the
Python runtime does not yet follow 1.1 where they need it.
"""
from __future__ import annotations

import json
import os
import signal
import threading

import pytest

from .harness import (c_node_bin, deadline_answers, env, inbox_file, journal_rejection, procs,  # noqa: F401
                      python_runtime, stopped, stream_until_exit, wait_for)


def _python_messages(proc) -> list[dict]:
    """The MESSAGE lines `speed node --echo-messages` printed."""
    out = []
    for line in list(proc.lines):
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def test_python_sender_refuses_a_leaving_c_node(procs, env):
    rt = python_runtime()
    procs.c_node("cnode", allow=["pys"], services=["echo"], lease=7200, heartbeat=3600)
    env.write_entry("cnode", {**env.entry("cnode"), "status": "leaving"})
    with rt.Node(env.root, env.key_path, "pys", allow=["cnode"]) as node:
        with pytest.raises(rt.NodeUnavailableError) as exc:
            node.send("cnode", 1)
        assert "node cnode is leaving" in str(exc.value)
        with pytest.raises(rt.NodeUnavailableError):
            node.call("cnode", "echo", {}, timeout=5)
    assert env.inbox_files("cnode") == [] and env.tmp_files("cnode") == []


def test_python_receiver_bounds_sequence_gaps_from_c(procs, env):
    py = procs.py_node("py", allow=["cnode"])
    c = procs.c_node("cnode", allow=["py"])
    for i in (1, 2):
        c.command(f"send py {i}")
    wait_for(lambda: len(_python_messages(py)) == 2, 10, "two messages at py")
    name, data = env.forge("MESSAGE", {"from": "cnode", "to": "py", "data": "forged"}, sender="cnode",
                           source_id=c.id, target_id=py.id, seq=2**64 - 1)
    env.inject("py", name, data)
    journal_rejection(env, "py", peer="cnode", reason="bad_sequence")
    c.command("send py 3")
    wait_for(lambda: len(_python_messages(py)) == 3, 10, "the genuine third message")
    assert [(m["seq"], m["data"]) for m in _python_messages(py)] == [(1, 1), (2, 2), (3, 3)]


def test_python_sender_numbers_a_restarted_c_node_from_1(procs, env):
    rt = python_runtime()
    r1 = procs.c_node("recv", allow=["pys"], args=["--max-gap", "0"])
    with rt.Node(env.root, env.key_path, "pys", allow=["recv"]) as node:
        assert [node.send("recv", i) for i in (1, 2, 3)] == [1, 2, 3]
        r1.wait_event(event="message", seq=3)
        assert r1.stop() == 0
        r2 = procs.c_node("recv", allow=["pys"], args=["--max-gap", "0"])
        assert node.send("recv", "again") == 1
        assert r2.wait_event(event="message", seq=1)["data"] == "again"
    assert not r2.find(event="rejected")


def test_python_caller_takes_responses_only_from_the_c_node_it_called(procs, env):
    rt = python_runtime()
    b = procs.c_node("cbeta", allow=["pya"], services=["echo"])
    m = procs.c_node("cmallory", allow=["pya"])
    outcome: dict = {}
    with rt.Node(env.root, env.key_path, "pya", allow=["cbeta", "cmallory"], trace=True) as node:
        def call():
            try:
                outcome["result"] = node.call("cbeta", "echo", {"x": 1}, timeout=30)
            except Exception as exc:  # reported by the assertion below
                outcome["error"] = exc
        caller = threading.Thread(target=call)
        with stopped(b):
            caller.start()
            rid = env.open_envelope(inbox_file(env, "cbeta"))[1]["requestId"]
            forged = {"from": "cmallory", "to": "pya", "requestId": rid, "status": "SUCCESS",
                      "result": {"forged": True}}
            name, data = env.forge("SPC_RESPONSE", forged, sender="cmallory", source_id=m.id,
                                   target_id=node.id, seq=1)
            env.inject("pya", name, data)
            journal_rejection(env, "pya", peer="cmallory", reason="unexpected_response")
        caller.join(30)
    assert not caller.is_alive()
    assert outcome == {"result": {"x": 1}}


def test_python_callee_answers_timeout_past_the_deadline(procs, env):
    py = procs.py_node("py", allow=["ccaller"], services=["echo"])
    caller = procs.c_node("ccaller", allow=["py"])
    by_id = deadline_answers(env, py, caller)
    assert (by_id["late"]["status"], by_id["late"]["errorCode"]) == ("ERROR", "TIMEOUT")
    assert (by_id["in-time"]["status"], by_id["in-time"]["result"]) == ("SUCCESS", {"rid": "in-time"})
    assert (by_id["no-deadline"]["status"], by_id["no-deadline"]["result"]) == ("SUCCESS", {"rid": "no-deadline"})


def test_a_stopping_python_node_handles_every_envelope_from_a_c_sender(procs, env):
    py = procs.py_node("py", allow=["csend"])
    s = procs.c_node("csend", allow=["py"])
    with stopped(py):
        s.proc.stdin.write("".join(f"send py {i}\n" for i in range(400)))
        s.proc.stdin.flush()
        wait_for(lambda: s.count("sent") == 400, 30, "400 envelopes in py's inbox")
        os.kill(py.pid, signal.SIGTERM)
    stream_until_exit(s, py, 400)
    assert py.proc.wait(30) == 0
    sent = {e["seq"] for e in s.find(event="sent")}
    handled = {m["seq"] for m in _python_messages(py)}
    assert len(sent) >= 400 and sent <= handled
    assert env.inbox_files("py") == []
    refused = s.find(event="send_error")
    assert refused and {e["errorMessage"] for e in refused} <= {"node py is leaving", "node py is not available"}


def test_a_stopping_c_node_handles_every_envelope_from_a_python_sender(procs, env):
    rt = python_runtime()
    r = procs.c_node("recv", allow=["pys"], lease=120, args=["--drain-max", "5"])
    sent: list[int] = []
    with rt.Node(env.root, env.key_path, "pys", allow=["recv"]) as node:
        with stopped(r):
            sent += [node.send("recv", i) for i in range(400)]
            os.kill(r.pid, signal.SIGTERM)
        refused = None
        while r.proc.poll() is None or refused is None:
            try:
                sent.append(node.send("recv", len(sent)))
            except rt.SpeedError as exc:
                refused = exc
                if r.proc.poll() is None:
                    r.proc.wait(60)
    assert r.proc.wait(30) == 0
    handled = {e["seq"] for e in r.find(event="message")}
    assert set(sent) <= handled, f"{len(set(sent) - handled)} successful sends were never handled"
    assert isinstance(refused, rt.NodeUnavailableError)
    assert env.inbox_files("recv") == [] and env.entry("recv") is None


def test_python_journal_keeps_type_and_size_of_rejected_c_envelopes(procs, env):
    py = procs.py_node("py", allow=["cnode"])
    c = procs.c_node("cnode", allow=["py"])
    with stopped(py):
        c.command('send-confirm py {"n":1}')
        c.wait_event(event="sent", seq=1)
        (name,) = env.inbox_files("py")
        path = os.path.join(env.inbox("py"), name)
        size = os.path.getsize(path)
        with open(path, "r+b") as f:  # one ciphertext bit: bad_tag
            f.seek(80)
            b = f.read(1)
            f.seek(80)
            f.write(bytes([b[0] ^ 1]))
    rec = journal_rejection(env, "py", peer="cnode", reason="bad_tag")
    assert (rec["type"], rec["size"], rec["seq"]) == ("MESSAGE", size, 1)
