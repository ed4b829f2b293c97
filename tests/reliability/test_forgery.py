"""Issue 13 items 7-9 and the journal's rejected records: forged responses, forged sequence numbers,
unclaimable names. Real processes and files; the forger holds the key, as an insider would."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

from speed_runtime import EnvelopeTrace, Node
from speed_runtime.core import payloads
from speed_runtime.core.entry import RegistryEntry
from speed_runtime.core.envelope import EnvelopeType, Header, envelope_filename, seal
from speed_runtime.fsutil import HOSTNAME, prepare_root
from speed_runtime.journal import read_journal
from speed_runtime.registry import Registry
from speed_runtime.transport import inject

from ..helpers.wait import wait_until

SPEED = [sys.executable, "-m", "speed_runtime"]


def _forge(key, sender: str, source_id: bytes, target_id: bytes, etype: int, seq: int, body: dict) -> tuple[str, bytes]:
    data = payloads.encode_payload(body)
    nonce = os.urandom(12)
    header = Header(etype, seq, int(time.time() * 1000), len(data), source_id, target_id)
    return envelope_filename(sender, source_id, seq, nonce), seal(header, data, key, nonce)


def test_a_response_is_taken_only_from_the_node_instance_called(procs, root, key):
    """A allows B and C; C reads a requestId from A's journal and answers it first. A's call returns
    B's result; C's response is rejected as unexpected_response."""
    procs.start_scripted("b", allow=["a"])
    rejected = []
    with Node(root, key, "a", allow=["b", "c"], trace=True) as a, Node(root, key, "c", allow=["a"]) as c:
        a.add_observer(lambda e: rejected.append(e) if isinstance(e, EnvelopeTrace) and e.outcome == "rejected"
                       else None)
        future = a.call_async("b", "slow", {"seconds": 1.5}, timeout=30)
        journal = os.path.join(root, "speed_traces", "a.jsonl")
        a.journal.flush()
        request_id = wait_until(lambda: next((e.request_id for e in read_journal(journal)[0]
                                              if getattr(e, "type", "") == "SPC_REQUEST"), None), timeout=20,
                                what="the request in a's journal")
        forged = payloads.spc_success("c", "a", request_id, {"slept": "forged"})
        c.sender.send("a", EnvelopeType.SPC_RESPONSE, payloads.encode_payload(forged))
        wait_until(lambda: rejected, timeout=20, what="the forged response to be judged")
        assert future.result(30) == {"slept": 1.5}
    assert [(e.peer, e.reason) for e in rejected] == [("c", "unexpected_response")]


def test_one_forged_sequence_cannot_block_a_link(procs, root, key):
    """A key holder that no node allows forges a MESSAGE "from gateway" with gateway's ID and
    sequence 2^64-1. Billing rejects it as bad_sequence and keeps accepting gateway's envelopes
    (before 1.1 every genuine one was replayed_sequence until gateway restarted)."""
    billing = procs.start("billing", allow=["gateway"], trace=True, echo=True)
    with Node(root, key, "gateway", allow=["billing"]) as gateway:
        gateway.send("billing", {"n": 1}, confirm=True, timeout=20)
        target = uuid.UUID(billing.id).bytes
        name, data = _forge(key, "gateway", gateway.id_bytes, target, EnvelopeType.MESSAGE, 2**64 - 1,
                            payloads.message("gateway", "billing", {"n": "forged"}))
        inject(root, "billing", name, data)
        journal = os.path.join(root, "speed_traces", "billing.jsonl")
        wait_until(lambda: any(getattr(e, "reason", None) == "bad_sequence" for e in read_journal(journal)[0]),
                   timeout=30, what="the forgery to be judged")
        for n in range(2, 5):
            gateway.send("billing", {"n": n}, confirm=True, timeout=20)
    got = [json.loads(billing.read_line())["data"]["n"] for _ in range(4)]
    assert got == [1, 2, 3, 4]
    rejected = [e for e in read_journal(journal)[0] if getattr(e, "outcome", "") == "rejected"]
    assert [(e.reason, e.type, e.size) for e in rejected] == [("bad_sequence", "MESSAGE", len(data))]


def _ghost(root: str, name: str, **fields) -> None:
    registry = Registry(prepare_root(root))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    entry = RegistryEntry(name=name, id=str(uuid.uuid4()), last_heartbeat=time.time(), pid=int(dead.stdout),
                          host=HOSTNAME, boot_id=None, boot_time_heartbeat=None)
    raw = json.loads(entry.to_json())
    raw.update(fields)
    raw.pop("bootId", None)
    with registry.locked():
        with open(registry.path(name), "w") as f:
            json.dump(raw, f)


def test_absurd_entries_of_dead_processes_never_make_a_name_unclaimable(procs, root, key_path):
    """lastHeartbeat in milliseconds, or leaseSeconds 1e300, with a dead pid on this host and no
    bootId: `speed registry` says stale, `speed reap` reaps, `speed node` claims the name."""
    _ghost(root, "billing", lastHeartbeat=time.time() * 1000)
    _ghost(root, "ledger", leaseSeconds=1e300)
    _ghost(root, "audit", leaseSeconds=1e300)
    listing = json.loads(procs.run("registry", "--dir", root, "--json").stdout)
    assert {r["name"]: r["state"] for r in listing} == {"audit": "stale", "billing": "stale", "ledger": "stale"}
    assert {r["name"]: r["reason"] for r in listing} == {
        "billing": "heartbeat lies in the future", "ledger": "process has exited", "audit": "process has exited"}
    done = procs.run("reap", "--dir", root, "audit")
    assert done.returncode == 0 and "reaped audit" in done.stdout
    procs.start("billing")
    procs.start("ledger")
    names = {r["name"]: r["state"] for r in json.loads(procs.run("registry", "--dir", root, "--json").stdout)}
    assert names == {"billing": "online", "ledger": "online"}


def test_rejected_records_keep_the_headers_type_and_the_size(root, key):
    """Contract 1.1 §8: a rejected file's record has the header's type and the file's size whenever
    they are known (bad_tag, too_large, bad_size…), not UNKNOWN and 0."""
    seen = []
    with Node(root, key, "r", allow=["s"], max_payload=4096) as r, Node(root, key, "s", allow=["r"]) as s:
        r.add_observer(lambda e: seen.append(e) if isinstance(e, EnvelopeTrace) and e.outcome == "rejected" else None)
        name, data = _forge(key, "s", s.id_bytes, r.id_bytes, EnvelopeType.SPC_REQUEST, 1,
                            payloads.spc_request("s", "r", "x", "echo", {}, 1000))
        tampered = bytearray(data)
        tampered[-1] ^= 1
        inject(root, "r", name, bytes(tampered))
        big_name, big = _forge(key, "s", s.id_bytes, r.id_bytes, EnvelopeType.MESSAGE, 2,
                               payloads.message("s", "r", "x" * 8000))
        inject(root, "r", big_name, big)
        wait_until(lambda: len(seen) == 2, timeout=20, what="both judged")
    by_reason = {e.reason: (e.type, e.size) for e in seen}
    assert by_reason == {"bad_tag": ("SPC_REQUEST", len(data)), "too_large": ("MESSAGE", len(big))}
