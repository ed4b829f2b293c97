"""The chunks extension between nodes: real directories, inotify, threads and processes.

Raw bytes without base64, messages and SPC values up to 64 MiB, refusals before anything is
written, chunks that are missing, reordered, duplicated or forged voiding the message with a
journaled reason (never a corrupt delivery), bounded reassembly, expiry, a target that leaves or
restarts during a message, and a v1 node that never sees any of it."""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time

import pytest

from speed_runtime import Node, NodeUnavailableError, PayloadTooLargeError, SpcError
from speed_runtime.core.chunks import FLAG_BINARY
from speed_runtime.core.envelope import EnvelopeType

from ..helpers.wait import wait_until
from .conftest import FEATURES, MiB, Forger, inbox, journal, read_inbox, stopped, wait_record

MSG = EnvelopeType.MESSAGE


@pytest.fixture
def pair(root, key):
    got: list = []
    with Node(root, key, "a", allow=["b"], features=FEATURES, trace=True) as a, \
            Node(root, key, "b", allow=["a"], features=FEATURES, trace=True, chunk_timeout=1.0) as b:
        b.on_message(got.append)
        b.register("echo", lambda args: args)
        b.register("blob", lambda args: bytes(range(256)) * (args["n"] // 256))
        yield a, b, got


def test_raw_bytes_go_unencoded_to_a_node_that_speaks_chunks(procs, root, key):
    receiver = procs.start("r", allow=["s"], extra=["--feature", "chunks"], echo=True)
    raw = bytes(range(256)) * 40
    with Node(root, key, "s", allow=["r"], features=["chunks"]) as s:
        with stopped(receiver):
            s.send("r", raw)
            s.send("r", {"json": "stays v1"})
            [(h1, p1), (h2, p2)] = read_inbox(root, "r", key)
        assert h1.flags == FLAG_BINARY and p1 == b'{"from":"s","to":"r","body":"bytes"}\x00' + raw
        assert h2.flags == 0 and json.loads(p2) == {"from": "s", "to": "r", "data": {"json": "stays v1"}}
        first, second = receiver.messages(2)
    assert bytes.fromhex(__import__("base64").b64decode(first["data"]["base64"]).hex()) == raw
    assert second["data"] == {"json": "stays v1"}


def test_a_v1_node_never_receives_an_extension_envelope(procs, root, key):
    v1 = procs.start("old", allow=["s"])
    with Node(root, key, "s", allow=["old"], features=FEATURES) as s:
        with stopped(v1):
            s.send("old", b"\x00\xffraw")
            s.send("old", {"n": 1})
            for value in (b"x" * (2 * MiB), {"big": "y" * (2 * MiB)}):
                with pytest.raises(PayloadTooLargeError) as info:
                    s.send("old", value)
                assert "nothing was sent" in str(info.value)
            with pytest.raises(PayloadTooLargeError):
                s.call("old", "echo", {"big": "z" * (2 * MiB)}, timeout=5)
            handle = s.send("old", {"reliably": True}, reliable=True)
            sent = read_inbox(root, "old", key)
            assert os.listdir(os.path.join(root, "old", "tmp")) == []
        assert handle.result(30).transmissions == 1  # acknowledged by v1's ACK once the receiver runs again
    assert [h.flags for h, _ in sent] == [0, 0, 1]  # bit 0 is v1's "ACK requested"; no extension bit, ever
    payloads = [json.loads(p) for _, p in sent]
    assert payloads[0] == {"from": "s", "to": "old", "data": "AP9yYXc=", "encoding": "base64"}
    assert payloads[2] == {"from": "s", "to": "old", "data": {"reliably": True}}


def test_64_mib_messages_and_4_mib_spc_values_arrive_whole(pair):
    a, b, got = pair
    big = os.urandom(64 * MiB)
    a.send("b", big)
    message = wait_until(lambda: got and got[-1], 120, "the 64 MiB message")
    assert message.data == big and message.message_id and message.size > len(big)
    value = {"blob": "é" * (2 * MiB)}
    assert a.call("b", "echo", value, timeout=60) == value
    result = a.call("b", "blob", {"n": 4 * MiB}, timeout=60)
    assert isinstance(result, bytes) and result == bytes(range(256)) * (4 * MiB // 256)
    rec = wait_record(b, "message", event="delivered", messageId=message.message_id)
    assert rec["chunks"] == 65 and rec["size"] == 64 * MiB
    envelopes = [r for r in journal(b.root, "b", "envelope") if r.get("messageId") == message.message_id]
    assert sorted(r["chunk"] for r in envelopes) == list(range(65)) and {r["chunks"] for r in envelopes} == {65}
    assert b.extensions["chunks"].reserved()["total"] == 0 and a.counters()["chunksSent"] >= 65


def test_too_large_is_refused_at_once_and_nothing_is_written(root, key):
    with Node(root, key, "a", allow=["b"], features=FEATURES, max_message=3 * MiB) as a, \
            Node(root, key, "b", allow=["a"], features=FEATURES, max_message=2 * MiB) as b:
        b.register("echo", lambda args: args)
        for send in (lambda: a.send("b", b"x" * (3 * MiB + 1)),             # over the sender's limit
                     lambda: a.send("b", b"x" * (2 * MiB + 1)),             # over what b advertises
                     lambda: a.call("b", "echo", {"v": "x" * (2 * MiB)}, timeout=5)):
            with pytest.raises(PayloadTooLargeError) as info:
                send()
            assert "nothing was sent" in str(info.value)
        assert inbox(root, "b") == [] and os.listdir(os.path.join(root, "b", "tmp")) == []
        assert a.counters()["sent"] == 0
        b.register("huge", lambda args: b"y" * (3 * MiB))  # a result over the caller's limit: an error answer
        with pytest.raises(SpcError) as info:
            a.call("b", "huge", {}, timeout=10)
        assert info.value.code == "INTERNAL_ERROR" and "exceeds" in info.value.message


@pytest.mark.parametrize("case,reason", [
    ("missing", "chunk_missing"), ("reordered", "chunk_missing"), ("duplicated", "chunk_missing"),
    ("forged", "chunk_chain"), ("start_missing", "chunk_missing"),
])
def test_a_broken_chain_voids_the_message_with_a_journaled_reason(pair, case, reason):
    a, b, got = pair
    forger = Forger(a, b)
    order = {"missing": [0, 1, 3, 4, 5], "reordered": [0, 2, 1, 3, 4, 5], "duplicated": [0, 1, 1, 2, 3, 4, 5],
             "forged": None, "start_missing": [1, 2, 3, 4, 5]}[case]
    forged = {2: {"chunkPrev": "0" * 32}} if case == "forged" else None  # a key holder's chunk 2 that names no chunk
    forger.deliver_all(forger.message(os.urandom(20_000), f"m-{case}", order, forged=forged))
    rejected = wait_record(b, "envelope", outcome="rejected", reason=reason)
    assert rejected["peer"] == "a" and rejected["messageId"] == f"m-{case}" and "chunk" in rejected
    wait_until(lambda: len(inbox(b.root, "b")) == 0, 10, "every forged chunk judged")
    if case != "start_missing":
        voided = wait_record(b, "message", event="voided", messageId=f"m-{case}")
        assert voided["reason"] == reason and voided["dir"] == "in"
    after = os.urandom(9000)  # the same sender instance goes on: a whole message after the voided one
    forger.deliver_all(forger.message(after, "after"))
    wait_until(lambda: got, 10, "the whole message")
    assert [m.data for m in got] == [after], "never a corrupt delivery"
    assert b.counters()["rejected"][reason] >= 1 and b.extensions["chunks"].reserved()["total"] == 0


def test_partial_messages_expire_and_free_their_reservation(pair):
    a, b, got = pair
    forger = Forger(a, b)
    parts = forger.message(os.urandom(20_000), "stalled")
    forger.deliver_all(parts[:3])
    wait_until(lambda: b.extensions["chunks"].partials(), 10, "the partial message")
    assert b.extensions["chunks"].reserved()["bySender"] == {"a": 20_000}
    voided = wait_record(b, "message", event="voided", messageId="stalled")
    assert voided["reason"] == "chunk_expired" and "3 of 6" in voided["detail"]
    assert b.extensions["chunks"].partials() == [] and b.extensions["chunks"].reserved()["total"] == 0
    forger.deliver_all(parts[3:4])
    wait_record(b, "envelope", outcome="rejected", reason="chunk_expired")
    assert got == []


def test_the_reassembly_budget_refuses_with_a_reason_then_recovers(root, key):
    release = threading.Event()
    got = []
    with Node(root, key, "a", allow=["b"], features=FEATURES) as a, \
            Node(root, key, "b", allow=["a"], features=FEATURES, trace=True, reassembly_bytes_per_sender=6 * MiB) as b:
        b.on_message(lambda m: (release.wait(30), got.append(m)))
        a.send("b", b"1" * (4 * MiB))   # reserved until its handler returns…
        wait_until(lambda: b.counters()["messagesAssembled"] == 1, 20, "the first message")
        a.send("b", b"2" * (4 * MiB))   # …so this one does not fit
        refused = wait_record(b, "message", event="voided", reason="reassembly_full")
        assert "6291456" in refused["detail"]
        release.set()
        wait_until(lambda: len(got) == 1 and b.extensions["chunks"].reserved()["total"] == 0, 20, "the release")
        a.send("b", b"3" * (4 * MiB))
        wait_until(lambda: len(got) == 2, 20, "the third message")
    assert [m.data[:1] for m in got] == [b"1", b"3"]


def test_a_sender_restarted_mid_message_gets_its_room_back_at_once(root, key):
    """A sender that died mid-message and was started again: its new instance's message fits at
    once (the old instance's half message held the sender's reassembly budget until it expired,
    and the new message, reported sent, was refused `reassembly_full`); another sender's half
    message is not touched."""
    got = []
    with Node(root, key, "b", allow=["a", "c"], features=FEATURES, trace=True, chunk_timeout=120.0,
              reassembly_bytes_per_sender=6 * MiB) as b:
        b.on_message(got.append)
        with Node(root, key, "a", allow=["b"], features=FEATURES, linger_seconds=0) as old, \
                Node(root, key, "c", allow=["b"], features=FEATURES) as c:
            for node, mid in ((old, "dead"), (c, "other")):
                forger = Forger(node, b)
                forger.deliver_all(forger.message(os.urandom(4 * MiB), mid, limit=256 * 1024)[:2])
            wait_until(lambda: len(b.extensions["chunks"].partials()) == 2, 20, "the two half messages")
            old.close()  # as if its process had died: an instance that never comes back
            with Node(root, key, "a", allow=["b"], features=FEATURES) as new:
                new.send("b", b"n" * (4 * MiB))
                wait_until(lambda: len(got) == 1, 20, "the restarted sender's message")
        voided = wait_record(b, "message", event="voided", messageId="dead")
        assert voided["reason"] == "chunk_missing" and "instance registered now" in voided["detail"]
        assert [p["messageId"] for p in b.extensions["chunks"].partials()] == ["other"]
    assert got[0].data == b"n" * (4 * MiB)


def test_a_target_that_leaves_during_a_message_fails_the_send_naming_what_was_delivered(root, key):
    with Node(root, key, "a", allow=["b"], features=FEATURES, chunk_size=64 * 1024) as a, \
            Node(root, key, "b", allow=["a"], features=FEATURES, trace=True) as b:
        def leave_after_third(event) -> None:
            if getattr(event, "chunk", None) == 2 and event.dir == "out":
                b.keeper.publish("leaving")
        a.add_observer(leave_after_third)
        with pytest.raises(NodeUnavailableError) as info:
            a.send("b", os.urandom(MiB))
        assert "began to leave during the message: 3 of the 16 chunks" in str(info.value)
        assert "the rest was not sent" in str(info.value)
        wait_until(lambda: [(p["received"], p["chunks"]) for p in b.extensions["chunks"].partials()] == [(3, 16)], 10,
                   "the three chunks delivered, kept as a partial message")
    voided = [r for r in journal(root, "b", "message") if r["event"] == "voided"]
    assert voided and voided[0]["reason"] == "chunk_missing" and "stopped" in voided[0]["detail"]


def test_bytes_and_large_values_from_the_command_line(procs, root, key_path, tmp_path):
    receiver = procs.start_scripted("r", allow=["cli"], options={"features": ["chunks", "reliable"]})
    data = os.urandom(3 * MiB)
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    done = procs.run("send", "r", "--file", str(path), "--reliable", "--as", "cli", "--dir", root, "--key", key_path)
    assert done.returncode == 0, done.stderr
    assert "acknowledged" in done.stderr
    got = json.loads(receiver.read_line(30))
    assert got["data"] == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)} and got["messageId"]
    missing = procs.run("send", "r", "--file", str(tmp_path / "nope"), "--as", "cli", "--dir", root, "--key", key_path)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr and "nope" in missing.stderr


@pytest.mark.parametrize("order", [["reliable", "chunks"], ["quota", "reliable", "durable", "chunks"]])
def test_a_chunked_reliable_message_arrives_whatever_order_the_features_are_named_in(root, key, order):
    """The extensions' hooks run in one order, whatever order a node names them in: named reliable
    first, its hook took the chunks of a chunked reliable message and the message was lost."""
    got: list = []
    with Node(root, key, "r", allow=["s"], features=order, durable_on_tmpfs=True) as r, \
            Node(root, key, "s", allow=["r"], features=FEATURES) as s:
        r.on_message(got.append)
        body = os.urandom(3 * MiB)  # three chunks at least
        assert s.send("r", body, reliable=True).result(30).transmissions == 1
        wait_until(lambda: got, 30, "the message")
    assert [m.data for m in got] == [body]


def test_a_durable_bit_on_a_binary_layout_is_bad_payload(root, key):
    """docs/PROTOCOL.md, "Combinations": a durable MESSAGE is one envelope of the v1 layout; with
    the binary or chunk bit too, a node that reads those layouts refuses it (as the C node does)."""
    from speed_runtime.core.chunks import binary_plaintext
    from speed_runtime.core.envelope import FLAG_DURABLE
    got: list = []
    with Node(root, key, "r", allow=["s"], features=["chunks", "durable"], durable_on_tmpfs=True,
              trace=True) as r, Node(root, key, "s", allow=["r"], features=FEATURES) as s:
        r.on_message(got.append)
        Forger(s, r).deliver(EnvelopeType.MESSAGE, binary_plaintext(
            {"from": "s", "to": "r", "body": "bytes", "durable": {
                "stream": "5f0c2a9e7d1b4c3a8e6f0d2b4a6c8e1f", "id": 1, "base": 1,
                "expiresAt": int(time.time() * 1000) + 60_000}}, b"x"), FLAG_BINARY | FLAG_DURABLE)
        record = wait_record(r, "envelope", outcome="rejected", peer="s")
    assert record["reason"] == "bad_payload" and got == []
