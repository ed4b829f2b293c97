"""The sender's one seal-and-deliver (node/sender.py: Sender.deliver_into), tested directly with
fakes for what it is given (the registry's cache, the host's facts, telemetry): what the node's
sends and the operator's control requests share — a sealed file under its envelope name, a new
nonce on a name clash, and the after-delivery check that withdraws a file its target's instance
can no longer take."""
from __future__ import annotations

import os
import uuid

import pytest

from speed_runtime.core.entry import RegistryEntry
from speed_runtime.core.envelope import EnvelopeType, open_envelope
from speed_runtime.core.errors import NodeUnavailableError
from speed_runtime.core.keys import Key
from speed_runtime.node import sender as sender_module
from speed_runtime.node.sender import Sender
from speed_runtime.transport import TargetDirs, prepare_home

KEY = Key(bytes(range(32)))
ME = uuid.UUID(int=1).bytes


class FakeMonitor:
    """The registry's cache as the sender asks it: whether the entry judged live is still the one
    its file holds (`stamp_matches`), else the entry as its file is now (`refresh`)."""

    def __init__(self, entry: RegistryEntry | None, unchanged: bool = True):
        self.entry, self.unchanged = entry, unchanged

    def stamp_of(self, target):
        return "stamp"

    def stamp_matches(self, target, stamp):
        return self.unchanged

    def refresh(self, target):
        return self.entry


class FakeTelemetry:
    def __init__(self):
        self.counts: dict[str, int] = {}
        self.observers = []

    def count(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1


def target_entry() -> RegistryEntry:
    return RegistryEntry(name="b", id=str(uuid.UUID(int=2)), last_heartbeat=1e12)


def make_sender(tmp_path, monitor) -> tuple[Sender, FakeTelemetry, TargetDirs]:
    prepare_home(str(tmp_path), "b")
    telemetry = FakeTelemetry()
    sender = Sender(str(tmp_path), "a", ME, KEY, 4096, monitor, lambda: None, telemetry)
    return sender, telemetry, TargetDirs(str(tmp_path), "b")


def test_a_delivered_file_is_the_sealed_envelope_under_its_name(tmp_path):
    entry = target_entry()
    sender, telemetry, dirs = make_sender(tmp_path, FakeMonitor(entry))
    try:
        name = sender.deliver_into(dirs, "b", entry, int(EnvelopeType.MESSAGE), 7, 0, b'{"x":1}')
    finally:
        dirs.close()
    assert name.startswith(f"a.{ME.hex()[:8]}.{7:020d}.") and name.endswith(".env")
    header, nonce, body = open_envelope((tmp_path / "b" / "inbox" / name).read_bytes(), KEY)
    assert (header.sequence, header.source_id, header.target_id, body) == (7, ME, entry.id_bytes, b'{"x":1}')
    assert name.split(".")[3] == nonce[:4].hex()
    assert os.listdir(tmp_path / "b" / "tmp") == []  # moved, not copied


def test_a_name_clash_is_resealed_with_a_new_nonce(tmp_path, monkeypatch):
    entry = target_entry()
    sender, telemetry, dirs = make_sender(tmp_path, FakeMonitor(entry))
    nonces = iter([b"\x01" * 12, b"\x01" * 12, b"\x02" * 12])
    monkeypatch.setattr(sender_module.os, "urandom", lambda n: next(nonces))
    try:
        first = sender.deliver_into(dirs, "b", entry, int(EnvelopeType.MESSAGE), 1, 0, b"{}")
        second = sender.deliver_into(dirs, "b", entry, int(EnvelopeType.MESSAGE), 1, 0, b"{}")  # same seq, same nonce
    finally:
        dirs.close()
    assert first != second and second.split(".")[3] == "02020202"
    assert sorted(os.listdir(tmp_path / "b" / "inbox")) == sorted([first, second])
    assert telemetry.counts["sealed"] == 3  # the clash cost one more seal, nothing was overwritten


def test_a_file_for_an_instance_that_stopped_is_withdrawn_and_the_error_says_when(tmp_path):
    entry = target_entry()
    sender, telemetry, dirs = make_sender(tmp_path, FakeMonitor(None, unchanged=False))  # its entry is gone
    try:
        with pytest.raises(NodeUnavailableError) as caught:
            sender.deliver_into(dirs, "b", entry, int(EnvelopeType.SPC_REQUEST), 1, 0, b"{}",
                                during="the control request", withdrawn="the request was withdrawn")
    finally:
        dirs.close()
    assert "during the control request" in str(caught.value) and "the request was withdrawn" in str(caught.value)
    assert os.listdir(tmp_path / "b" / "inbox") == []
    assert telemetry.counts["retracted"] == 1
