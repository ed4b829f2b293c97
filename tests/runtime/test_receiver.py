"""The receiver (node/receiver.py) tested directly: a Receiver built from a NodeContext of the real
registry, monitor and telemetry, with fakes for the parts it hands work to (keeper, sender,
caller, callee), carries one real inbox file through the inbound state machine and does what its
action says — without a protocol thread: each test calls the one step that takes a file."""
from __future__ import annotations

import os
import time
import uuid

import pytest

from speed_runtime.core import payloads
from speed_runtime.core.entry import RegistryEntry
from speed_runtime.core.envelope import EnvelopeType, Header, envelope_filename, seal
from speed_runtime.core.keys import Key
from speed_runtime.fsutil import BOOT_ID, HOSTNAME, local_facts
from speed_runtime.monitor import RegistryMonitor
from speed_runtime.node.application import Application
from speed_runtime.node.calls import ServiceTable
from speed_runtime.node.config import NodeConfig
from speed_runtime.node.context import NodeContext
from speed_runtime.node.grants import AccessRegistry
from speed_runtime.node.hooks import Extension
from speed_runtime.node.receiver import Receiver
from speed_runtime.node.telemetry import Telemetry
from speed_runtime.node.threads import WorkerPool
from speed_runtime.registry import Registry
from speed_runtime.transport import inject

KEY = Key(bytes(range(32)))
A, B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)


class FakeLifecycle:
    state = "running"

    def may_receive(self) -> bool:
        return True

    def name_taken(self) -> bool:
        return False


class FakeKeeper:
    def hint(self, file_name: str) -> None:
        raise AssertionError("no registry hint expected")


class FakeSender:
    def awaits_ack(self, sender, source_id, seq) -> bool:
        return False

    def ack_awaited(self, sender, seq) -> bool:
        return False


class FakeCaller:
    """A caller that asked nothing."""

    def expects(self, sender, source_id, payload) -> bool:
        return False

    def pending(self, request_id) -> bool:
        return False


class FakeCallee:
    def __init__(self):
        self.requests = []

    def submit(self, request) -> None:
        self.requests.append(request)


class Scores(Extension):
    """What an extension that keeps threat scores hears: only rejections that count against a sender."""
    name = "scores"

    def __init__(self):
        self.heard = []

    def on_rejected(self, sender, name, reason, detail) -> None:
        self.heard.append((sender, reason))


@pytest.fixture
def node(tmp_path):
    root = str(tmp_path)
    registry = Registry(root)
    registry.register(RegistryEntry(name="a", id=str(A), last_heartbeat=time.time(), pid=os.getpid(), host=HOSTNAME,
                                    boot_id=BOOT_ID, allow=("b",)), time.time())
    telemetry = Telemetry("b")
    monitor = RegistryMonitor(registry, "b", telemetry.lease_event, local_facts)
    access = AccessRegistry(["a"])
    ctx = NodeContext("b", str(B), B.bytes, root, KEY, NodeConfig(allow=("a",)), access, telemetry, registry, monitor,
                      Application(telemetry), ServiceTable())
    callee, scores = FakeCallee(), Scores()
    receiver = Receiver(ctx, FakeLifecycle(), FakeKeeper(), FakeSender(), FakeCaller(), callee,
                        WorkerPool(1, "test-lane", lambda exc: None), lambda *a, **k: None)
    receiver.attach((scores,))
    receiver.open(None)
    yield receiver, callee, access, scores, telemetry, tmp_path / "b" / "inbox"
    receiver.close()


def put(root, etype: EnvelopeType, payload: dict, seq: int = 1, sender: str = "a", tamper: bool = False) -> str:
    body = payloads.encode_payload(payload)
    nonce = os.urandom(12)
    data = bytearray(seal(Header(int(etype), seq, int(time.time() * 1000), len(body), A.bytes, B.bytes), body, KEY,
                          nonce))
    if tamper:
        data[-1] ^= 1  # the tag no longer verifies
    name = envelope_filename(sender, A.bytes, seq, nonce)
    inject(str(root), "b", name, bytes(data))
    return name


def test_a_request_goes_to_the_callee_and_its_file_stays_until_a_worker_takes_it(node, tmp_path):
    receiver, callee, _, scores, telemetry, inbox = node
    name = put(tmp_path, EnvelopeType.SPC_REQUEST, payloads.spc_request("a", "b", "r1", "echo", {"x": 1}, 5000))
    assert receiver._receive_one(name, "a", 1)
    [request] = callee.requests
    assert (request.caller, request.request_id, request.service_name, request.arguments) == ("a", "r1", "echo", {"x": 1})
    assert os.listdir(inbox) == [name]  # held (read-ahead) until the worker takes it
    assert request.take() and os.listdir(inbox) == []
    assert telemetry.snapshot()["received"] == 1 and scores.heard == []


def test_a_response_nobody_awaits_is_rejected_and_counts_against_its_authenticated_sender(node, tmp_path):
    receiver, callee, _, scores, telemetry, inbox = node
    name = put(tmp_path, EnvelopeType.SPC_RESPONSE, payloads.spc_success("a", "b", "never-asked", 1))
    assert receiver._receive_one(name, "a", 1)
    assert os.listdir(inbox) == [] and callee.requests == []
    assert scores.heard == [("a", "unexpected_response")]  # it authenticated as a: principle (a) lets it count


def test_a_tampered_file_is_rejected_and_never_counts_against_the_sender_it_names(node, tmp_path):
    receiver, callee, _, scores, telemetry, inbox = node
    name = put(tmp_path, EnvelopeType.SPC_REQUEST, payloads.spc_request("a", "b", "r1", "echo", {}, None), tamper=True)
    assert receiver._receive_one(name, "a", 1)
    assert os.listdir(inbox) == [] and callee.requests == []
    assert telemetry.snapshot()["received"] == 0 and scores.heard == []  # unauthenticated: counts against nobody


def test_a_sender_no_longer_allowed_is_refused_unread(node, tmp_path):
    receiver, callee, access, scores, telemetry, inbox = node
    name = put(tmp_path, EnvelopeType.SPC_REQUEST, payloads.spc_request("a", "b", "r1", "echo", {}, None))
    access.revoke("a")
    assert receiver._receive_one(name, "a", 1)
    assert os.listdir(inbox) == [] and callee.requests == [] and scores.heard == []


class Clock:
    """time.monotonic for the inbox module, moved only by the test."""

    def __init__(self, now: float):
        self.now = now

    def monotonic(self) -> float:
        return self.now


def test_a_replaced_inbox_is_looked_at_every_quarter_second_counting_from_the_last_look(node, tmp_path, monkeypatch):
    """A replaced inbox found empty used to be due again at once from a quarter second after it was
    adopted on (due counted from when it was last found busy): the receiver waited 0 and scanned it
    in a busy loop for the rest of OLD_INBOX_SECONDS."""
    from speed_runtime.node import inbox as inbox_module
    receiver, _, _, _, _, inbox = node
    directory = receiver.inbox
    clock = Clock(1000.0)
    monkeypatch.setattr(inbox_module, "time", clock)
    os.rename(inbox, str(inbox) + ".old")
    assert directory.replaced() and directory.draining_old
    remembered = []
    name = put(tmp_path, EnvelopeType.MESSAGE, {"n": 1})  # (into the new inbox: moved back to the old one below)
    os.rename(inbox / name, tmp_path / "b" / "inbox.old" / name)
    directory.drain_old({}, remembered.append)
    assert remembered == [name] and os.listdir(inbox) == [name]  # what was left there is moved over
    assert directory.next_old_check() == clock.now + 0.25
    for _ in range(19):  # found empty from now on: due a quarter second after each look, never at once
        clock.now += 0.25
        directory.drain_old({}, remembered.append)
        assert directory.draining_old and directory.next_old_check() == clock.now + 0.25
    clock.now += 0.25  # OLD_INBOX_SECONDS after it was last found busy: closed
    directory.drain_old({}, remembered.append)
    assert not directory.draining_old and directory.next_old_check() == float("inf") and remembered == [name]
