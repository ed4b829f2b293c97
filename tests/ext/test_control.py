"""The `control` extension on real nodes, real files and real inotify, in one process: every
forgery of the issue's list is removed, journaled with its reason, answered, and changes nothing;
a v1-only node never receives a control request; hostile files and floods in control/ cost bounded
memory and never starve the inbox."""
import json
import os
import threading
import time

import pytest

from speed_runtime import AccessDeniedError, ConfigError, Node, SpcError
from speed_runtime.operator import Operator
from speed_runtime.core import control
from speed_runtime.core.errors import ControlRefusedError, OperatorNotTrustedError
from speed_runtime.core.records import ControlTrace, EnvelopeTrace
from speed_runtime.ext.control import MAX_NAMES

from ..helpers.wait import wait_until
from .control_forge import STRANGER, forge, forgeries, put, send

OPERATOR = control.OperatorKey(bytes(range(1, 33)))


@pytest.fixture
def billing(root, key):
    node = Node(root, key, "billing", operators=[OPERATOR.public_text], allow=["reports"])
    events: list = []
    node.add_observer(events.append)
    node.events = events
    with node:
        yield node


@pytest.fixture
def ops(root, key):
    """A requester node that allows billing, so that billing's answers can come back."""
    with Node(root, key, "ops", allow=["billing"]) as node:
        node.on_message(lambda m: None)
        yield node


def records(node, **match):
    return [e for e in node.events if isinstance(e, ControlTrace)
            and all(getattr(e, k) == v for k, v in match.items())]


def control_files(node):
    return os.listdir(os.path.join(node.root, node.name, "control"))


def test_the_entry_advertises_control_and_the_fingerprints(billing, root):
    entry = json.loads(open(os.path.join(root, "speed_registry", "billing.node")).read())
    assert entry["features"] == ["control"] and entry["operators"] == [OPERATOR.fingerprint]
    assert OPERATOR.public_text not in json.dumps(entry)  # fingerprints only
    assert oct(os.stat(os.path.join(root, "billing", "control")).st_mode & 0o777) == "0o700"


def test_a_valid_request_is_applied_published_journaled_and_answered(billing, ops, root):
    future, name, rid = send(ops, "billing", billing.id, OPERATOR)
    result = future.result()
    assert result == {"command": "allow", "peer": "gateway", "changed": True, "published": True,
                      "allow": ["gateway", "reports"]}
    entry = json.loads(open(os.path.join(root, "speed_registry", "billing.node")).read())
    assert entry["allow"] == ["gateway", "reports"]
    [applied] = records(billing, outcome="applied")
    assert (applied.peer, applied.operator, applied.request_id, applied.command, applied.arguments) == \
        ("ops", OPERATOR.fingerprint, rid, "allow", {"peer": "gateway"})
    assert control_files(billing) == [] and billing.counters()["controlApplied"] == 1


@pytest.mark.parametrize("case", forgeries(), ids=str)
def test_each_forgery_is_removed_journaled_answered_and_changes_nothing(billing, ops, case):
    options, reason = forgeries()[case]
    operator = options.get("operator", OPERATOR)
    future, name, rid = send(ops, "billing", billing.id, OPERATOR, **options)
    with pytest.raises(SpcError) as info:
        future.result()
    assert control.refusal_of(info.value.message)[0] == reason
    assert billing.allowed == ["reports"] and control_files(billing) == []
    [rejected] = records(billing, outcome="rejected")
    assert (rejected.reason, rejected.request_id, rejected.command, rejected.arguments) == (reason, rid, None, None)
    expected_operator = None if case == "unsigned" else operator.fingerprint
    assert rejected.operator == expected_operator
    assert billing.counters()["rejected"] == {reason: 1}


def test_a_replayed_request_id_is_refused_even_in_a_new_envelope(billing, ops):
    future, _, rid = send(ops, "billing", billing.id, OPERATOR, command="revoke", arguments={"peer": "reports"})
    assert future.result()["allow"] == []
    billing.allow("reports")  # the owner grants again; replaying the operator's revoke must not undo it
    again, _, _ = send(ops, "billing", billing.id, OPERATOR, command="revoke", arguments={"peer": "reports"},
                       request_id=rid)
    with pytest.raises(SpcError, match="control_replayed"):
        again.result()
    # and the very same file again (a copy kept by an attacker)
    name, data, _ = forge(ops, "billing", billing.id, OPERATOR, command="revoke", arguments={"peer": "reports"},
                          request_id=rid)
    put(ops.root, "billing", name, data)
    wait_until(lambda: len(records(billing, reason="control_replayed")) == 2, what="the copy to be refused")
    assert billing.allowed == ["reports"]


def test_an_unauthenticated_envelope_is_removed_unanswered(billing, ops, root, key):
    from speed_runtime.core.keys import Key

    name, data, rid = forge(ops, "billing", billing.id, OPERATOR)
    ops.requester_key, ops.key = ops.key, Key(bytes(32))  # sealed under another environment key
    try:
        wrong_name, wrong, _ = forge(ops, "billing", billing.id, OPERATOR)
    finally:
        ops.key = ops.requester_key
    put(root, "billing", wrong_name, wrong)
    wait_until(lambda: records(billing, reason="bad_tag"), what="the bad tag to be journaled")
    no_flag_name, no_flag, _ = forge(ops, "billing", billing.id, OPERATOR, flags=0)
    put(root, "billing", no_flag_name, no_flag)
    wait_until(lambda: records(billing, reason="control_malformed"), what="a request without the flag")
    answers = [e for e in billing.events if isinstance(e, EnvelopeTrace) and e.dir == "out" and e.peer == "ops"]
    assert answers == [] and billing.allowed == ["reports"] and control_files(billing) == []


def test_a_v1_only_node_never_receives_a_control_request(root, key):
    received = []
    with Node(root, key, "plain", allow=["reports"]) as plain, Operator(root, key, OPERATOR) as operator:
        plain.add_observer(received.append)
        with pytest.raises(OperatorNotTrustedError) as info:
            operator.allow("plain", "gateway")
        assert "accepts no control requests" in str(info.value) and OPERATOR.public_text in str(info.value)
        assert OPERATOR.fingerprint in str(info.value) and "--operator" in str(info.value)
        assert sorted(os.listdir(os.path.join(root, "plain"))) == ["inbox", "tmp"]  # no control/ at all
        assert os.listdir(os.path.join(root, "plain", "inbox")) == [] and plain.allowed == ["reports"]
        assert plain.counters()["received"] == 0 and not [e for e in received if isinstance(e, EnvelopeTrace)]


def test_an_operator_the_node_does_not_trust_is_refused_before_writing(billing, root, key):
    with Operator(root, key, STRANGER) as stranger:
        with pytest.raises(OperatorNotTrustedError, match=STRANGER.fingerprint):
            stranger.status("billing")
    assert control_files(billing) == [] and records(billing) == []


def test_the_client_maps_every_answer_to_one_error(billing, root, key):
    from speed_runtime import NodeUnavailableError

    extension = billing.extensions["control"]
    with Operator(root, key, OPERATOR) as operator:
        assert operator.status("billing")["allow"] == ["reports"]
        extension.guard.capacity = 0  # the node remembers as many request ids as it may: it refuses
        with pytest.raises(ControlRefusedError) as info:
            operator.allow("billing", "gateway")
        assert info.value.reason == "control_refused" and "try again later" in str(info.value)
        extension.guard.capacity = control.MAX_REMEMBERED
        extension.trusted.clear()  # the entry still lists the operator: the node's own answer tells
        with pytest.raises(OperatorNotTrustedError, match="is not trusted by billing"):
            operator.allow("billing", "gateway")
        with pytest.raises(ConfigError, match="takes exactly"):
            operator.allow("billing", "../etc")
        with pytest.raises(NodeUnavailableError):
            operator.status("ghost")
    assert billing.allowed == ["reports"]


def test_a_revoked_grant_is_in_force_once_the_operator_is_answered(billing, root, key):
    handled = []
    billing.on_message(handled.append)
    with Node(root, key, "reports", allow=["billing"]) as reports, Operator(root, key, OPERATOR) as operator:
        reports.send("billing", {"n": 1}, confirm=True)
        assert operator.revoke("billing", "reports")["allow"] == []
        with pytest.raises(AccessDeniedError):  # the entry was published before the answer
            reports.send("billing", {"n": 2})
        # a sender that ignores the entry is refused unread: the grant is gone in memory too
        from speed_runtime.core.envelope import EnvelopeType, Header, envelope_filename, seal
        from speed_runtime.transport import inject

        nonce = os.urandom(12)
        body = json.dumps({"from": "reports", "to": "billing", "data": {"n": 3}}).encode()
        data = seal(Header(EnvelopeType.MESSAGE, 2, int(time.time() * 1000), len(body), reports.id_bytes,
                           billing.id_bytes), body, key, nonce)
        inject(root, "billing", envelope_filename("reports", reports.id_bytes, 2, nonce), data)
        wait_until(lambda: [e for e in billing.events if isinstance(e, EnvelopeTrace) and e.reason == "unauthorized"],
                   what="the envelope to be refused")
    assert [m.data for m in handled] == [{"n": 1}]


def test_hostile_files_in_control_are_removed_with_their_reason(billing, ops, root):
    directory = os.path.join(root, "billing", "control")
    os.mkfifo(os.path.join(directory, "ops.0badcafe.00000000000000000001.01020304.env"))
    os.symlink("/etc/passwd", os.path.join(directory, "ops.0badcafe.00000000000000000002.01020304.env"))
    staging = os.path.join(root, "billing", "tmp")
    for name, size in (("ops.0badcafe.00000000000000000003.01020304.env", control.MAX_FILE + 1),  # never read
                       ("notes.txt", 1), ("ops.0badcafe.00000000000000000004.01020304.env", 10)):
        with open(os.path.join(staging, name), "wb") as f:
            f.truncate(size)
        os.rename(os.path.join(staging, name), os.path.join(directory, name))  # whole, as writers deliver
    wait_until(lambda: len(records(billing, outcome="rejected")) == 5, what="five rejections")
    reasons = sorted(r.reason for r in records(billing, outcome="rejected"))
    assert reasons == ["bad_file", "bad_file", "bad_size", "control_malformed", "too_large"]
    assert os.listdir(directory) == [] and os.path.exists("/etc/passwd")
    assert send(ops, "billing", billing.id, OPERATOR, command="status")[0].result()["name"] == "billing"


def test_a_flood_of_junk_costs_bounded_memory_and_never_starves_the_inbox(billing, ops, root, key):
    extension = billing.extensions["control"]
    directory = os.path.join(root, "billing", "control")
    seen_names = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            seen_names.append(len(extension._names))
            time.sleep(0.001)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        for i in range(10_000):
            with open(os.path.join(directory, f"junk.0badcafe.{i:020d}.01020304.env"), "wb") as f:
                f.write(b"\x01" * 50)  # shorter than any envelope: bad_size, decided on fstat
        with Node(root, key, "reports", allow=["billing"]) as reports:
            started = time.monotonic()
            reports.send("billing", {"during": "the flood"}, confirm=True, timeout=30)
            inbox_latency = time.monotonic() - started
        wait_until(lambda: billing.counters()["controlRejected"] == 10_000, timeout=120, what="the flood")
    finally:
        stop.set()
        sampler.join()
    assert os.listdir(directory) == [] and max(seen_names) <= MAX_NAMES
    assert billing.counters()["rejected"] == {"bad_size": 10_000}
    assert inbox_latency < 20  # served while the flood was judged (bounded steps), not after it
    assert send(ops, "billing", billing.id, OPERATOR, command="status")[0].result()["counters"]["controlRejected"] \
        == 10_000


def test_a_withdrawn_request_is_never_applied(billing, root, key):
    """The client withdraws a request the target has not taken when its wait ends (whoever
    unlinks first decides): simulated by a target whose lease cannot be confirmed, so it takes nothing."""
    from speed_runtime.core.errors import ControlTimeoutError

    billing.keeper.lease_valid = lambda: False  # fenced: may_receive() is False, nothing is taken
    billing.keeper.wake = lambda *a, **k: None
    with Operator(root, key, OPERATOR) as operator:
        with pytest.raises(ControlTimeoutError) as info:
            operator.allow("billing", "gateway", timeout=0.5)
    assert info.value.withdrawn and "not applied" in str(info.value)
    del billing.keeper.lease_valid, billing.keeper.wake
    assert control_files(billing) == [] and billing.allowed == ["reports"]


def test_a_stop_request_stops_the_node_gracefully(root, key):
    node = Node(root, key, "worker", operators=[OPERATOR.public_text])
    events = []
    node.add_observer(events.append)
    node.start()
    with Operator(root, key, OPERATOR) as operator:
        assert operator.stop("worker", wait=True) == {"command": "stop", "stopping": True}
    wait_until(lambda: node.state == "closed", what="the node to close")
    assert not os.path.exists(os.path.join(root, "speed_registry", "worker.node"))
    kinds = [(type(e).__name__, getattr(e, "event", None) or getattr(e, "command", None)) for e in events
             if isinstance(e, ControlTrace) or getattr(e, "subject", None) == "worker"]
    assert kinds[-2:] == [("ControlTrace", "stop"), ("LeaseTrace", "deregistered")]


def test_a_replaced_control_directory_is_adopted(billing, ops, root):
    directory = os.path.join(root, "billing", "control")
    os.mkdir(directory + ".new", 0o700)
    os.rename(directory, directory + ".old")
    os.rename(directory + ".new", directory)  # replaces an empty directory the node may have made meanwhile
    wait_until(lambda: [e for e in billing.events if getattr(e, "event", None) == "inbox_replaced"],
               what="the new directory to be adopted")
    assert send(ops, "billing", billing.id, OPERATOR, command="status")[0].result()["name"] == "billing"


@pytest.mark.parametrize("options, message", [
    ({"features": ["control"]}, "needs at least one trusted operator key"),
    ({"operators": ["not-a-key"]}, "not an operator public key"),
])
def test_configuration_errors_are_one_sentence(root, key, options, message):
    with pytest.raises(ConfigError, match=message):
        Node(root, key, "x", **options)
