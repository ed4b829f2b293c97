"""The `control` extension end to end with real `speed node` processes and the `speed` command:
operator keys, grant, revoke, status and stop from the CLI and the API, checked on disk (registry
entries, journals), exit codes, and the order of a revoke against an envelope found at once."""
import json
import os
import signal
import stat
import threading

import pytest

from speed_runtime import ControlTimeoutError
from speed_runtime.operator import Operator, load_operator_key
from speed_runtime.core import control
from speed_runtime.journal import read_journal
from speed_runtime.core.records import ControlTrace, EnvelopeTrace

from ..helpers.wait import wait_until


@pytest.fixture
def operator_env(workdir):
    """An operator key in a private configuration directory (XDG_CONFIG_HOME), as a user has it."""
    config = os.path.join(workdir, "config")
    env = {**os.environ, "XDG_CONFIG_HOME": config}
    env.pop("SPEED_OPERATOR_KEY", None)
    return env


def speed(procs, *args, env=None, timeout=60):
    import subprocess

    from ..helpers.processes import SPEED

    return subprocess.run(SPEED + list(args), capture_output=True, text=True, timeout=timeout, env=env)


def keygen(procs, env):
    made = speed(procs, "operator", "keygen", env=env)
    assert made.returncode == 0, made.stderr
    public = made.stdout.split("public key")[1].split()[0]
    return public, made


def entry(root, name):
    return json.loads(open(os.path.join(root, "speed_registry", f"{name}.node")).read())


def journal(root, name):
    return read_journal(os.path.join(root, "speed_traces", f"{name}.jsonl"))[0]


def env_args(procs):
    return ["--dir", procs.root, "--key", procs.key_path]


@pytest.mark.parametrize("cmd", [["operator"], ["operator", "keygen"], ["operator", "show"], ["allow"], ["revoke"],
                                 ["stop"], ["status"]])
def test_help_of_the_operator_commands(procs, cmd):
    result = speed(procs, *cmd, "--help")
    assert result.returncode == 0 and "usage: speed" in result.stdout
    assert "6 the target does not trust this operator" in speed(procs, "--help").stdout


def test_operator_keygen_writes_a_private_file_and_never_prints_the_secret(procs, operator_env, workdir):
    public, made = keygen(procs, operator_env)
    path = os.path.join(workdir, "config", "speed", "operator.key")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    key = load_operator_key(path)
    seed_line = open(path).read().split()[1]
    assert key.public_text == public and key.fingerprint in made.stdout
    assert seed_line not in made.stdout + made.stderr and f"--operator {public}" in made.stdout
    shown = speed(procs, "operator", "show", env=operator_env)
    assert shown.returncode == 0 and public in shown.stdout and seed_line not in shown.stdout
    again = speed(procs, "operator", "keygen", env=operator_env)
    assert again.returncode == 2 and "already exists" in again.stderr and load_operator_key(path).public_key \
        == key.public_key
    fifo, link = os.path.join(workdir, "fifo"), os.path.join(workdir, "link")
    os.mkfifo(fifo)
    os.symlink(path, link)
    for target in (fifo, link):
        refused = speed(procs, "operator", "keygen", target, "--force", env=operator_env)
        assert refused.returncode == 2 and "not a regular file" in refused.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.readlink(link) == path
    os.chmod(path, 0o644)
    loose = speed(procs, "status", "x", *env_args(procs), env=operator_env)
    assert loose.returncode == 2 and "chmod 600" in loose.stderr


def test_grant_revoke_status_and_stop_from_the_cli(procs, operator_env):
    public, _ = keygen(procs, operator_env)
    billing = procs.start("billing", services=["echo"], trace=True, extra=["--operator", public])
    plain = procs.start("plain")
    assert entry(procs.root, "billing")["operators"] == [control.fingerprint(control.parse_public_key(public))]

    denied = speed(procs, "call", "billing", "echo", "{}", "--as", "gateway", *env_args(procs))
    assert denied.returncode == 3 and "does not allow gateway" in denied.stderr, denied.stderr

    allowed = speed(procs, "allow", "billing", "gateway", *env_args(procs), env=operator_env)
    assert allowed.returncode == 0, allowed.stderr
    assert json.loads(allowed.stdout)["allow"] == ["gateway"] and "billing allows gateway" in allowed.stderr
    assert entry(procs.root, "billing")["allow"] == ["gateway"]  # published before the answer
    called = speed(procs, "call", "billing", "echo", '{"n": 1}', "--as", "gateway", *env_args(procs))
    assert called.returncode == 0 and json.loads(called.stdout) == {"n": 1}, called.stderr

    status = speed(procs, "status", "billing", *env_args(procs), env=operator_env)
    assert status.returncode == 0, status.stderr
    account = json.loads(status.stdout)
    assert account["id"] == billing.id and account["allow"] == ["gateway"] and account["services"] == ["echo"]

    revoked = speed(procs, "revoke", "billing", "gateway", *env_args(procs), env=operator_env)
    assert revoked.returncode == 0 and entry(procs.root, "billing")["allow"] == []
    again = speed(procs, "call", "billing", "echo", "{}", "--as", "gateway", *env_args(procs))
    assert again.returncode == 3

    untrusting = speed(procs, "allow", "plain", "gateway", *env_args(procs), env=operator_env)
    assert untrusting.returncode == 6 and f"--operator {public}" in untrusting.stderr
    assert entry(procs.root, "plain")["allow"] == [] and "control" not in os.listdir(os.path.join(procs.root, "plain"))
    missing = speed(procs, "status", "ghost", *env_args(procs), env=operator_env)
    assert missing.returncode == 3 and "not available" in missing.stderr

    stopped = speed(procs, "stop", "billing", "--wait", *env_args(procs), env=operator_env)
    assert stopped.returncode == 0, stopped.stderr
    assert billing.proc.wait(30) == 0 and not os.path.exists(os.path.join(procs.root, "speed_registry", "billing.node"))
    assert plain.proc.poll() is None

    records = journal(procs.root, "billing")
    applied = [(r.command, r.arguments) for r in records if isinstance(r, ControlTrace)]
    assert applied == [("allow", {"peer": "gateway"}), ("status", {}), ("revoke", {"peer": "gateway"}), ("stop", {})]
    assert all(r.outcome == "applied" and r.operator == control.fingerprint(control.parse_public_key(public))
               for r in records if isinstance(r, ControlTrace))
    assert records[-1].kind == "lease" and records[-1].event == "deregistered"
    for result in (allowed, status, revoked, untrusting, stopped):
        assert "Traceback" not in result.stderr


def test_another_operators_key_gets_exit_code_6(procs, operator_env, workdir):
    public, _ = keygen(procs, operator_env)
    procs.start("billing", extra=["--operator", public])
    other = os.path.join(workdir, "other.key")
    assert speed(procs, "operator", "keygen", other, env=operator_env).returncode == 0
    refused = speed(procs, "allow", "billing", "x", "--operator-key", other, *env_args(procs), env=operator_env)
    assert refused.returncode == 6 and load_operator_key(other).fingerprint in refused.stderr
    assert entry(procs.root, "billing")["allow"] == []


def test_a_revoke_found_with_an_envelope_is_in_force_before_that_envelope(procs, key):
    """The target is stopped (SIGSTOP) while the operator's revoke and a grantee's envelope land;
    when it wakes up with both, the revoke is applied first and the envelope refused unread."""
    from speed_runtime import Node

    operator_key = control.OperatorKey.new()
    billing = procs.start("billing", allow=["reports"], echo=True, trace=True,
                          extra=["--operator", operator_key.public_text])
    with Node(procs.root, key, "reports") as reports, Operator(procs.root, key, operator_key) as operator:
        reports.send("billing", {"n": 1})
        assert billing.messages(1)[0]["data"] == {"n": 1}
        operator.check("billing")  # the requester node is up before the target stops
        billing.signal(signal.SIGSTOP)
        try:
            answers = []
            revoking = threading.Thread(target=lambda: answers.append(operator.revoke("billing", "reports")))
            revoking.start()
            control_dir = os.path.join(procs.root, "billing", "control")
            wait_until(lambda: os.listdir(control_dir), what="the revoke to land")
            reports.send("billing", {"n": 2})  # lands after it, while billing still allows reports
        finally:
            billing.signal(signal.SIGCONT)
        revoking.join(30)
        assert answers and answers[0]["allow"] == []
    billing.stop()
    records = journal(procs.root, "billing")
    refused = [r for r in records if isinstance(r, EnvelopeTrace) and r.dir == "in" and r.peer == "reports"
               and r.seq == 2]
    assert [r.reason for r in refused] == ["unauthorized"]
    assert billing.lines.empty()  # message 2 never reached the application


def test_a_request_to_a_target_killed_before_it_took_it_is_withdrawn_before_its_timeout(procs, key):
    """The target is stopped (SIGSTOP) with the request in its control/ directory, then killed:
    the requester sees it gone, withdraws the request and says so, without waiting out 60 s."""
    operator_key = control.OperatorKey.new()
    billing = procs.start("billing", extra=["--operator", operator_key.public_text])
    with Operator(procs.root, key, operator_key, timeout=60) as operator:
        operator.check("billing")
        billing.signal(signal.SIGSTOP)
        outcome = []
        revoking = threading.Thread(target=lambda: _outcome_of(lambda: operator.revoke("billing", "reports"), outcome))
        revoking.start()
        control_dir = os.path.join(procs.root, "billing", "control")
        wait_until(lambda: os.listdir(control_dir), what="the revoke to land")
        billing.proc.kill()
        billing.proc.wait()
        revoking.join(50)
        assert outcome, "the request still waited 50 s after its target died"
        error = outcome[0]
        assert isinstance(error, ControlTimeoutError) and error.withdrawn is True, error
        assert "stopped before it took the request" in str(error) and "not applied" in str(error), str(error)
        assert os.listdir(control_dir) == []


def _outcome_of(action, into: list) -> None:
    try:
        into.append(action())
    except Exception as exc:  # noqa: BLE001 - the test looks at which one
        into.append(exc)


def test_the_operator_api_administers_a_speed_node_process(procs, key):
    operator_key = control.OperatorKey.new()
    billing = procs.start("billing", trace=True, extra=["--operator", operator_key.public_text])
    with Operator(procs.root, key, operator_key) as operator:
        assert operator.allow("billing", "gateway")["changed"] is True
        assert operator.allow("billing", "gateway")["changed"] is False  # idempotent, still answered
        assert entry(procs.root, "billing")["allow"] == ["gateway"]
        status = operator.status("billing")
        assert status["id"] == billing.id and status["counters"]["controlApplied"] == 3  # this one included
        assert operator.stop("billing", wait=True)["stopping"] is True
    assert billing.proc.wait(30) == 0
    records = [r for r in journal(procs.root, "billing") if isinstance(r, ControlTrace)]
    assert [(r.command, r.outcome) for r in records] == [("allow", "applied")] * 2 + [("status", "applied"),
                                                                                      ("stop", "applied")]
    assert len({r.request_id for r in records}) == 4
    assert len({r.peer for r in records}) == 1 and records[0].peer.startswith("speed-cli-")  # one requester node


def test_lift_ends_a_quarantine_from_the_cli(procs, operator_env, workdir):
    """Issue 18: the operator lifts a sender's quarantine through the control extension."""
    from speed_runtime import Node
    from speed_runtime.core.records import ThreatTrace

    from ..helpers.replay import send_and_replay

    public, _ = keygen(procs, operator_env)
    procs.start("billing", allow=["mallory"], trace=True, heartbeat=0.5,
                extra=["--operator", public, "--feature", "quota", "--threat", "half_life=3600"])
    procs.start("plain", extra=["--operator", public])
    with Node(procs.root, procs.key_path, "mallory", allow=["billing"]) as mallory:
        for i in range(8):  # each copy authenticates as mallory and is a replay (30 points)
            send_and_replay(mallory, "billing", i)
        wait_until(lambda: entry(procs.root, "billing")["counters"]["threat"].get("mallory", {}).get("state")
                   == "quarantined", 30, "mallory's quarantine in billing's entry")

        lifted = speed(procs, "lift", "billing", "mallory", *env_args(procs), env=operator_env)
        assert lifted.returncode == 0, lifted.stderr
        assert json.loads(lifted.stdout) == {"command": "lift", "sender": "mallory", "lifted": True, "scores": True}
        assert "mallory's quarantine at billing lifted" in lifted.stderr
        # published with the answer: the entry no longer shows the quarantine
        assert entry(procs.root, "billing")["counters"]["threat"].get("mallory", {}).get("state") != "quarantined"

    again = speed(procs, "lift", "billing", "mallory", *env_args(procs), env=operator_env)
    assert again.returncode == 0 and json.loads(again.stdout)["lifted"] is False
    assert "mallory was not quarantined at billing" in again.stderr
    no_scores = speed(procs, "lift", "plain", "mallory", *env_args(procs), env=operator_env)
    assert no_scores.returncode == 0 and json.loads(no_scores.stdout)["scores"] is False
    assert "keeps no threat scores" in no_scores.stderr
    bad = speed(procs, "lift", "billing", "../x", *env_args(procs), env=operator_env)
    assert bad.returncode == 2 and 'lift takes exactly {"sender": NODE_NAME}' in bad.stderr  # refused before sending
    records = wait_until(lambda: [r for r in journal(procs.root, "billing") if isinstance(r, ThreatTrace)
                                  and r.event == "lifted"] and journal(procs.root, "billing"), 10, "the lift journaled")
    assert [(r.command, r.arguments, r.outcome) for r in records if isinstance(r, ControlTrace)] == \
        [("lift", {"sender": "mallory"}, "applied"), ("lift", {"sender": "mallory"}, "applied")]
