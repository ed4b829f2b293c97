"""The chunks and reliable extensions between the Python runtime and the C node, which implements
them from docs/PROTOCOL.md alone (ext_chunks.c, ext_reliable.c): the shared vectors, raw bytes
and chunked messages each way, chunked SPC arguments and results each way, reliable sends
acknowledged by the C node, forged chunks refused by it, and v1-only peers on both sides that never
receive an extension envelope."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest

from .harness import (VECTORS, c_node_bin, env, procs, python_runtime, stopped, wait_for)  # noqa: F401

CHUNKS_VECTORS = VECTORS.with_name("chunks_vectors.json")
FEATURES = ["--feature", "chunks", "--feature", "reliable"]
MiB = 1 << 20
BINARY, CHUNK, RELIABLE = 0x0002, 0x0004, 0x0008


def pattern(size: int) -> bytes:
    """What `send-bytes` sends: byte i = (7i + 3) mod 256."""
    return bytes((i * 7 + 3) & 0xFF for i in range(256)) * (size // 256) + \
        bytes((i * 7 + 3) & 0xFF for i in range(size % 256))


def flags_in_inbox(env, name: str) -> list[int]:
    out = []
    for f in env.inbox_files(name):
        with open(os.path.join(env.inbox(name), f), "rb") as fh:
            out.append(int.from_bytes(fh.read(4)[2:4], "big"))
    return out


def test_the_c_node_agrees_with_the_extension_vectors(c_node_bin):
    done = subprocess.run([c_node_bin, "kat-chunks", str(CHUNKS_VECTORS)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    cases = json.loads(CHUNKS_VECTORS.read_text(encoding="utf-8"))
    total = sum(len(cases[k]) for k in ("envelopes", "messages", "invalid", "advertisement"))
    assert done.stdout.strip() == f"{total} passed, 0 failed"


def test_the_c_node_advertises_its_extensions_only_when_enabled(procs, env):
    procs.c_node("plain")
    procs.c_node("ext", args=FEATURES)
    assert "features" not in env.entry("plain") and "chunks" not in env.entry("plain")
    entry = env.entry("ext")
    assert entry["features"] == ["chunks", "reliable"]
    assert entry["chunks"] == {"maxMessage": 64 * MiB, "maxEnvelopePayload": MiB}


def test_python_sends_raw_bytes_and_chunked_messages_to_the_c_node(procs, env):
    rt = python_runtime()
    c = procs.c_node("cnode", allow=["py"], args=FEATURES)
    small, big = os.urandom(3000), os.urandom(8 * MiB + 5)
    with rt.Node(env.root, env.key_path, "py", allow=["cnode"], features=["chunks"]) as node:
        node.send("cnode", small)
        node.send("cnode", big)
        node.send("cnode", {"text": "é" * (2 * MiB)})
        first = c.wait_event(event="message", body="bytes", size=len(small))
        whole = c.wait_event(30, event="message", body="bytes", size=len(big))
        text = wait_for(lambda: next((e for e in c.find(event="message") if isinstance(e.get("data"), dict)), None),
                        30, "the JSON message")
    assert first["base64"] and __import__("base64").b64decode(first["base64"]) == small
    assert whole["sha256"] == hashlib.sha256(big).hexdigest() and whole["messageId"]
    assert len(c.find(event="chunk", messageId=whole["messageId"])) == 9
    assert text["data"] == {"text": "é" * (2 * MiB)}
    assert not c.find(event="rejected") and not c.find(event="voided")


def test_the_c_node_sends_raw_bytes_and_chunked_messages_to_python(procs, env):
    rt = python_runtime()
    got = []
    with rt.Node(env.root, env.key_path, "py", allow=["cnode"], features=["chunks"], trace=True) as node:
        node.on_message(got.append)
        c = procs.c_node("cnode", allow=["py"], args=FEATURES)
        c.command("send-bytes py 1000")
        c.command(f"send-bytes py {5 * MiB + 17}")
        wait_for(lambda: len(got) == 2, 30, "two messages from C")
        node.journal.flush()
    assert [m.data for m in got] == [pattern(1000), pattern(5 * MiB + 17)]
    assert got[0].message_id is None and got[1].message_id
    records = [json.loads(line) for line in open(os.path.join(env.root, "speed_traces", "py.jsonl"))]
    chunks = [r for r in records if r.get("messageId") == got[1].message_id and r.get("kind") == "envelope"]
    assert sorted(r["chunk"] for r in chunks) == list(range(6))
    assert not [r for r in records if r.get("outcome") == "rejected"]


def test_chunked_spc_arguments_and_results_each_way(procs, env):
    rt = python_runtime()
    value = {"blob": "x" * (3 * MiB), "n": 1}
    with rt.Node(env.root, env.key_path, "py", allow=["cnode"], features=["chunks"]) as node:
        node.register("echo", lambda args: args)
        c = procs.c_node("cnode", allow=["py"], services=["echo"], args=FEATURES)
        assert node.call("cnode", "echo", value, timeout=60) == value  # request and response chunked
        small = {"blob": "y" * (2 * MiB)}
        c.command("call t1 py echo " + json.dumps(small))
        result = c.wait_event(60, event="result", id="t1")
    assert result["result"] == small
    assert len(c.find(event="chunk")) >= 6 and not c.find(event="rejected")


def test_the_c_node_acknowledges_reliable_sends_once_per_message(procs, env):
    rt = python_runtime()
    from speed_runtime.core import payloads
    from speed_runtime.core.envelope import EnvelopeType, Header, envelope_filename, seal
    from speed_runtime.transport import inject
    c = procs.c_node("cnode", allow=["py"], args=FEATURES)
    with rt.Node(env.root, env.key_path, "py", allow=["cnode"], features=["chunks", "reliable"], trace=True) as node:
        first = node.send("cnode", {"n": 1}, reliable=True).result(20)
        big = node.send("cnode", os.urandom(3 * MiB), reliable=True).result(30)
        assert first.transmissions == big.transmissions == 1
        assert c.wait_event(event="message", messageId=first.message_id)["data"] == {"n": 1}
        assert c.wait_event(event="message", messageId=big.message_id)["size"] == 3 * MiB
        body = payloads.encode_payload({"from": "py", "to": "cnode", "data": "again", "messageId": first.message_id})
        nonce = os.urandom(12)  # a copy of the first message, sealed anew (as a retransmission is)
        header = Header(EnvelopeType.MESSAGE, 1000, int(__import__("time").time() * 1000), len(body), node.id_bytes,
                        __import__("uuid").UUID(c.id).bytes, RELIABLE)
        inject(env.root, "cnode", envelope_filename("py", node.id_bytes, 1000, nonce), seal(header, body, node.key, nonce))
        c.wait_event(event="duplicate", messageId=first.message_id, seq=1000)
        wait_for(lambda: node.counters()["rejected"].get("unexpected_response"), 10, "the second ACK, unexpected now")
    assert len(c.find(event="message", messageId=first.message_id)) == 1


def _sealed_to(node, c, plaintext: bytes, seq: int) -> bytes:
    """A MESSAGE of the chunk layout from `node` to the C node `c`, sealed as it is (forged or not)."""
    import time
    import uuid
    from speed_runtime.core.envelope import EnvelopeType, Header, seal
    header = Header(EnvelopeType.MESSAGE, seq, int(time.time() * 1000), len(plaintext), node.id_bytes,
                    uuid.UUID(c.id).bytes, BINARY | CHUNK)
    return seal(header, plaintext, node.key, os.urandom(12))


def _chained(node, c, message_id: str, body: bytes, first_seq: int) -> list[bytes]:
    """`body` cut in chunks of 1,500 bytes, each chunk's `chunkPrev` naming the envelope before."""
    from speed_runtime.core import chunks
    cutter = chunks.Chunker({"from": "py", "to": "cnode", "body": "bytes"}, message_id, body, 1500, MiB)
    out, prev = [], None
    for i in range(cutter.count):
        out.append(_sealed_to(node, c, cutter.plaintext(i, prev), first_seq + i))
        prev = chunks.chain_value(out[-1])
    return out


def _inject(env, node, numbered) -> None:
    from speed_runtime.core.envelope import envelope_filename
    from speed_runtime.transport import inject
    for seq, data in numbered:
        inject(env.root, "cnode", envelope_filename("py", node.id_bytes, seq, data[64:76]), data)


def test_forged_and_broken_chains_are_refused_by_the_c_node(procs, env):
    rt = python_runtime()
    c = procs.c_node("cnode", allow=["py"], args=FEATURES)
    with rt.Node(env.root, env.key_path, "py", allow=["cnode"], features=["chunks"]) as node:
        # the same id and numbers, another chain
        ours, other = _chained(node, c, "forged-1", os.urandom(5000), 500), \
            _chained(node, c, "forged-1", os.urandom(5000), 500)
        _inject(env, node, ((500, ours[0]), (501, ours[1]), (502, other[2]), (503, ours[3])))
        voided = c.wait_event(event="voided", messageId="forged-1")
        later = c.wait_event(event="rejected", seq=503)
    assert voided["reason"] == "chunk_chain" and later["reason"] == "chunk_chain"
    assert not c.find(event="message")


def test_a_first_chunk_forgets_the_id_the_c_node_remembered_as_voided(procs, env):
    """docs/PROTOCOL.md, chunks, step 1: a first chunk always starts a new message, also under the
    id remembered as voided (a retransmission reuses its id), and the remembered id is forgotten:
    a stray later chunk of that id afterwards is `chunk_missing`, as in the Python runtime, not
    the reason of the message voided before (the C node kept it until this was settled)."""
    rt = python_runtime()
    from speed_runtime.core import chunks
    c = procs.c_node("cnode", allow=["py"], args=FEATURES)
    with rt.Node(env.root, env.key_path, "py", allow=["cnode"], features=["chunks"]) as node:
        first = {"from": "py", "to": "cnode", "body": "bytes"}
        too_large = _sealed_to(node, c, chunks.binary_plaintext(
            chunks.chunk_header(first, "again-1", 0, 2, 64 * MiB + 1, None), b"x"), 600)
        _inject(env, node, [(600, too_large)])
        assert c.wait_event(event="rejected", seq=600)["reason"] == "message_too_large"
        again = _chained(node, c, "again-1", os.urandom(2000), 601)  # the retransmission: two chunks
        _inject(env, node, ((601, again[0]), (602, again[1])))
        c.wait_event(event="message", messageId="again-1")
        stray = _chained(node, c, "again-1", os.urandom(2000), 603)[1]  # a later chunk of that id again
        _inject(env, node, [(604, stray)])
        assert c.wait_event(event="rejected", seq=604)["reason"] == "chunk_missing"


def test_a_sender_restarted_mid_message_gets_its_room_back_at_the_c_node(procs, env):
    """docs/PROTOCOL.md, chunks, Memory: the half messages of a sender's earlier instances (two of
    64 MiB declared: the sender's whole budget) give their room to its registered instance's
    message at once, instead of keeping it out (`reassembly_full`) until they expire."""
    rt = python_runtime()
    from speed_runtime.core import chunks
    c = procs.c_node("cnode", allow=["py"], args=FEATURES)
    for mid in ("dead-1", "dead-2"):
        with rt.Node(env.root, env.key_path, "py", allow=["cnode"], features=["chunks"], linger_seconds=0) as node:
            first = chunks.chunk_header({"from": "py", "to": "cnode", "body": "bytes"}, mid, 0, 2, 64 * MiB, None)
            _inject(env, node, [(700, _sealed_to(node, c, chunks.binary_plaintext(first, b"x"), 700))])
            c.wait_event(event="chunk", messageId=mid)
    with rt.Node(env.root, env.key_path, "py", allow=["cnode"], features=["chunks"]) as node:
        body = os.urandom(2 * MiB)
        node.send("cnode", body)
        got = c.wait_event(60, event="message", body="bytes", size=len(body))
    assert {c.wait_event(event="voided", messageId=mid)["reason"] for mid in ("dead-1", "dead-2")} == {"chunk_missing"}
    assert got["sha256"] == hashlib.sha256(body).hexdigest() and not c.find(event="rejected", reason="reassembly_full")


def test_a_request_that_can_never_be_taken_is_answered_at_once_each_way(procs, env):
    """A chunked SPC_REQUEST refused as `message_too_large` (declared beyond maxMessage, or, in the
    Python runtime, costing more decoded than its reassembly budget can ever hold) is answered
    with an ERROR response (INVALID_ARGUMENTS): the caller does not wait for its timeout."""
    rt = python_runtime()
    import time
    import uuid
    from speed_runtime.core import chunks
    from speed_runtime.core.envelope import EnvelopeType, Header, envelope_filename, seal
    from speed_runtime.transport import inject
    c = procs.c_node("cnode", allow=["py"], args=FEATURES)
    with rt.Node(env.root, env.key_path, "py", allow=["cnode"], features=["chunks"]) as node:
        node.register("echo", lambda arguments: arguments)
        # C -> Python: 3.5 MiB of [{},...] cost about 150 MiB decoded, beyond a sender's 128 MiB
        pad = "[" + ",".join(["{}"] * (3_500_000 // 3)) + "]"
        c.command(f'call big py echo {{"pad":{pad}}}')
        refused = c.wait_event(60, event="call_error", id="big")
        assert refused["errorCode"] == "INVALID_ARGUMENTS" and "message_too_large" in refused["errorMessage"]
        # Python -> C: a first chunk that declares more than the C node's maxMessage
        target, rid = uuid.UUID(c.id).bytes, uuid.uuid4().hex
        first = {"from": "py", "to": "cnode", "body": "json", "requestId": rid, "service": "echo", "callerNode": "py"}
        plaintext = chunks.binary_plaintext(chunks.chunk_header(first, "huge-1", 0, 2, 64 * MiB + 1, None), b"{")
        sealed = seal(Header(EnvelopeType.SPC_REQUEST, 500, int(time.time() * 1000), len(plaintext), node.id_bytes,
                             target, BINARY | CHUNK), plaintext, node.key, os.urandom(12))
        answer = node.caller.expect(rid, "cnode", target, "echo", 20, lambda: inject(
            env.root, "cnode", envelope_filename("py", node.id_bytes, 500, sealed[64:76]), sealed))
        with pytest.raises(rt.SpcError) as info:
            answer.result(20)
        assert info.value.code == "INVALID_ARGUMENTS" and "message_too_large" in str(info.value)
        assert c.wait_event(event="voided", messageId="huge-1")["reason"] == "message_too_large"


def test_v1_peers_never_receive_an_extension_envelope(procs, env):
    rt = python_runtime()
    v1 = procs.c_node("oldc", allow=["py"])  # the C node without --feature
    with rt.Node(env.root, env.key_path, "py", allow=["oldc", "cnode"], features=["chunks", "reliable"]) as node:
        with stopped(v1):
            node.send("oldc", b"\x00raw")
            handle = node.send("oldc", {"n": 1}, reliable=True)
            with pytest.raises(rt.PayloadTooLargeError):
                node.send("oldc", os.urandom(2 * MiB))
            assert flags_in_inbox(env, "oldc") == [0, 1]
        assert handle.result(20).transmissions == 1  # the v1 ACK of the C node
        assert v1.wait_event(event="message", encoding="base64")["data"] == "AHJhdw=="
    got = []
    with rt.Node(env.root, env.key_path, "oldpy", allow=["cnode"]) as old:  # Python without the extensions
        old.on_message(got.append)
        c = procs.c_node("cnode", allow=["oldpy"], args=FEATURES)
        c.command("send-bytes oldpy 300")
        wait_for(lambda: got, 10, "the message")
        assert c.wait_event(event="sent", to="oldpy")
    assert got[0].data == pattern(300) and got[0].message_id is None  # v1: base64 in JSON, decoded by the runtime
