"""The `control` extension between the Python runtime and the C node, both ways: the C node
(written from docs/PROTOCOL.md "### control") checks the shared vectors, applies the Python
operator's signed requests, refuses every forgery with the documented reason, and its answers are
read by the Python client; a C node without --operator never receives a control request."""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import threading

import pytest

from speed_runtime.operator import Operator
from speed_runtime.core import control

from ..ext.control_forge import forge, forgeries, put, send
from ..helpers.processes import SPEED
from ..helpers.wait import wait_until
from .harness import HERE, c_node_bin, env, procs, python_runtime, stopped, wait_for  # noqa: F401

OPERATOR = control.OperatorKey(bytes(range(1, 33)))
VECTORS = HERE.parent / "vectors" / "control_vectors.json"


def c_target(procs, name="cnode", **options):
    return procs.c_node(name, args=["--operator", OPERATOR.public_text], **options)


def test_c_node_checks_the_control_vectors(c_node_bin):
    run = subprocess.run([c_node_bin, "kat-control", str(VECTORS)], capture_output=True, text=True, timeout=60)
    cases = len(json.loads(VECTORS.read_text())["cases"])
    assert run.returncode == 0 and run.stdout.strip() == f"{cases} passed, 0 failed", run.stdout + run.stderr


def test_c_node_advertises_control_only_with_an_operator(procs, env):
    c_target(procs)
    procs.c_node("plain")
    entry = env.entry("cnode")
    assert entry["features"] == ["control"] and entry["operators"] == [OPERATOR.fingerprint]
    assert stat.S_IMODE(os.stat(os.path.join(env.root, "cnode", "control")).st_mode) == 0o700
    assert "features" not in env.entry("plain") and "operators" not in env.entry("plain")
    assert not os.path.exists(os.path.join(env.root, "plain", "control"))
    bad = procs.c_node("bad", args=["--operator", "not-a-key"], wait_ready=False)
    assert bad.proc.wait(10) != 0
    # the exit can come before the harness's reader thread has taken the last stderr line
    wait_until(lambda: any("not an operator public key" in line for line in bad.errors), 10, "the refusal on stderr")


def test_python_operator_administers_a_c_node(procs, env):
    rt = python_runtime()
    cnode = c_target(procs, services=["echo"])
    with Operator(env.root, env.key_path, OPERATOR) as operator, \
            rt.Node(env.root, env.key_path, "pyc", allow=["cnode"]) as pyc:
        with pytest.raises(rt.AccessDeniedError):
            pyc.call("cnode", "echo", {"n": 0}, timeout=5)
        result = operator.allow("cnode", "pyc")
        assert result == {"command": "allow", "peer": "pyc", "changed": True, "published": True, "allow": ["pyc"]}
        assert env.entry("cnode")["allow"] == ["pyc"]  # published before the answer
        assert pyc.call("cnode", "echo", {"n": 1}, timeout=10) == {"n": 1}
        status = operator.status("cnode")
        assert (status["name"], status["id"], status["allow"], status["services"]) == \
            ("cnode", cnode.id, ["pyc"], ["echo"])
        assert status["operators"] == [OPERATOR.fingerprint] and status["features"] == ["control"]
        assert operator.revoke("cnode", "pyc")["allow"] == [] and env.entry("cnode")["allow"] == []
        # the C node keeps no threat scores (its quota side is the sender's): nothing to lift, said so
        assert operator.lift("cnode", "pyc") == {"command": "lift", "sender": "pyc", "lifted": False, "scores": False}
        with pytest.raises(rt.AccessDeniedError):
            pyc.call("cnode", "echo", {"n": 2}, timeout=5)
        assert operator.stop("cnode", wait=True) == {"command": "stop", "stopping": True}
    assert cnode.proc.wait(30) == 0 and env.entry("cnode") is None
    applied = [(e["command"], e["outcome"], e["operator"]) for e in cnode.find(event="control")]
    assert applied == [(c, "applied", OPERATOR.fingerprint) for c in ("allow", "status", "revoke", "lift", "stop")]


def test_c_node_refuses_every_forgery_and_answers_the_python_requester(procs, env):
    rt = python_runtime()
    cnode = c_target(procs, allow=["reports"])
    with rt.Node(env.root, env.key_path, "ops", allow=["cnode"]) as ops:
        ops.on_message(lambda m: None)
        for case, (options, reason) in forgeries().items():
            future, name, rid = send(ops, "cnode", cnode.id, OPERATOR, **options)
            with pytest.raises(rt.SpcError) as info:
                future.result()
            assert control.refusal_of(info.value.message)[0] == reason, case
            line = cnode.wait_event(file=name)
            assert (line["outcome"], line["reason"], line["requestId"], line["command"]) == \
                ("rejected", reason, rid, None), case
        # a replay: the same signed request id in a second envelope
        first, _, rid = send(ops, "cnode", cnode.id, OPERATOR, command="status")
        assert first.result()["name"] == "cnode"
        again, _, _ = send(ops, "cnode", cnode.id, OPERATOR, command="status", request_id=rid)
        with pytest.raises(rt.SpcError, match="control_replayed"):
            again.result()
        # an envelope that is not authentic is removed and never answered
        name, data, _ = forge(ops, "cnode", cnode.id, OPERATOR, flags=0)
        put(env.root, "cnode", name, data)
        assert cnode.wait_event(file=name)["reason"] == "control_malformed"
    assert env.entry("cnode")["allow"] == ["reports"]
    assert os.listdir(os.path.join(env.root, "cnode", "control")) == []


def test_a_c_node_without_operators_never_receives_a_control_request(procs, env, workdir):
    plain = procs.c_node("plain", allow=["reports"])
    key_path = os.path.join(workdir, "operator.key")
    with open(key_path, "wb") as f:
        f.write(control.format_operator_key_text(OPERATOR))
    os.chmod(key_path, 0o600)
    run = subprocess.run(SPEED + ["allow", "plain", "gateway", "--dir", env.root, "--key", env.key_path,
                                  "--operator-key", key_path], capture_output=True, text=True, timeout=60)
    assert run.returncode == 6 and "accepts no control requests" in run.stderr
    assert f"--operator {OPERATOR.public_text}" in run.stderr
    assert sorted(os.listdir(os.path.join(env.root, "plain"))) == ["inbox", "tmp"]
    assert env.inbox_files("plain") == [] and plain.find(event="rejected") == []
    assert env.entry("plain")["allow"] == ["reports"]


def test_a_revoke_found_with_an_envelope_is_in_force_in_the_c_node_first(procs, env):
    rt = python_runtime()
    cnode = c_target(procs, allow=["pys"])
    with rt.Node(env.root, env.key_path, "pys") as pys, Operator(env.root, env.key_path, OPERATOR) as operator:
        pys.send("cnode", {"n": 1})
        assert cnode.wait_event(event="message")["data"] == {"n": 1}
        operator.check("cnode")
        answers = []
        with stopped(cnode):
            revoking = threading.Thread(target=lambda: answers.append(operator.revoke("cnode", "pys")))
            revoking.start()
            wait_for(lambda: os.listdir(os.path.join(env.root, "cnode", "control")), 10, "the revoke to land")
            pys.send("cnode", {"n": 2})
        revoking.join(30)
        assert answers and answers[0]["allow"] == []
    rejected = cnode.wait_event(event="rejected", peer="pys")
    assert rejected["reason"] == "unauthorized" and rejected["size"] > 0
    assert [m["data"] for m in cnode.find(event="message")] == [{"n": 1}]


def test_a_flood_of_junk_in_the_c_nodes_control_directory(procs, env):
    cnode = c_target(procs)
    directory = os.path.join(env.root, "cnode", "control")
    staging = os.path.join(env.root, "cnode", "tmp")
    with stopped(cnode):
        for i in range(2000):
            name = f"junk.0badcafe.{i:020d}.01020304.env"
            with open(os.path.join(staging, name), "wb") as f:
                f.write(b"\x01" * 50)
            os.rename(os.path.join(staging, name), os.path.join(directory, name))
    wait_for(lambda: cnode.count("control") == 2000, 60, "2000 rejections")
    assert {e["reason"] for e in cnode.find(event="control")} == {"bad_size"}
    assert os.listdir(directory) == []
    with Operator(env.root, env.key_path, OPERATOR) as operator:
        assert operator.status("cnode")["name"] == "cnode"
    os.kill(cnode.pid, signal.SIGTERM)
    assert cnode.proc.wait(30) == 0
