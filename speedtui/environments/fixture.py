"""A deterministic fixture environment: registry entries and journals with fixed timestamps,
ids, nonces and key.  Used by the snapshot tests, the screenshot script and the benchmark
(never by the console at run time).  No process is started."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from speed_runtime.fsutil import REGISTRY_DIR, TRACES_DIR

from ..services import runtime as rt
from ..services.own_nodes import NodeLogs

FIXED_NOW = 1767225600.0  # 2026-01-01 00:00:00 UTC
FIXED_KEY = bytes(range(32))
HOST = "fixture-host"  # not this host: pid liveness is not judged, so output is stable

IDS = {
    "gateway": "11111111-1111-4111-8111-111111111111",
    "billing": "22222222-2222-4222-8222-222222222222",
    "ledger": "33333333-3333-4333-8333-333333333333",
    "reports": "44444444-4444-4444-8444-444444444444",
    "audit": "55555555-5555-4555-8555-555555555555",
    "batch": "66666666-6666-4666-8666-666666666666",
}

# what gateway's quota extension publishes about its senders (counters.threat, see ext/quota.py)
THREATS = {
    "eve": {"score": 125.0, "state": "quarantined", "instances": {"0e0e0e0e": 125.0},
            "last": ["unauthorized", "unauthorized", "unauthorized"], "rejections": 5, "recent": [1, 2, 1, 1, 0]},
    "billing": {"score": 3.0, "state": "normal", "instances": {"22222222": 3.0}, "last": ["late_response"],
                "rejections": 1, "recent": [0, 0, 0, 0, 0]},
}
FEATURES = {"gateway": ["chunks", "reliable", "quota"], "billing": ["chunks", "reliable", "durable"],
            "ledger": ["durable"], "reports": ["durable"]}
CHUNKED_ID = "c0ffee00-0000-4000-8000-000000000001"  # billing → gateway, three chunks
RELIABLE_ID = "5eed0000-0000-4000-8000-000000000002"  # billing → gateway, acknowledged after a retransmission
FAILED_ID = "dead0000-0000-4000-8000-000000000003"  # billing → reports, never acknowledged
# durable messages waiting in outboxes: (sender, target, stream, id, age, payload bytes)
OUTBOX = [("billing", "reports", "ab" * 16, 1, 56.0, 42), ("billing", "reports", "ab" * 16, 2, 40.0, 118),
          ("ledger", "archive", "cd" * 16, 7, 3 * 3600.0, 2048)]
# ...of which reports's ledger has receipted billing's message 1 (handled 30 s ago): billing, a sender
# that had exited, has not taken the receipt, so the message is still in its outbox
RECEIPTED = [("billing", "reports", "ab" * 16, 1, 30.0)]

NODES = [
    # name, groups, allow, services, status, heartbeat age, uptime, counters
    ("gateway", ["edge"], ["billing", "reports"], ["echo"], "online", 2.0, 3600,
     {"sent": 120, "received": 118, "rejected": {"replayed_nonce": 1}, "spcCalls": 60, "spcErrors": 2,
      "threat": THREATS}),
    ("billing", ["finance"], ["gateway", "ledger"], ["calculateTax", "echo"], "online", 1.0, 7200,
     {"sent": 98, "received": 121, "rejected": {}, "spcCalls": 10, "spcErrors": 0}),
    ("ledger", ["finance"], ["billing"], ["echo", "sleep"], "online", 24.5, 600,
     {"sent": 11, "received": 12, "rejected": {}, "spcCalls": 0, "spcErrors": 0}),
    ("reports", ["analytics", "finance"], ["gateway"], ["echo"], "leaving", 3.0, 86400 * 2, {}),
    ("audit", [], [], ["fail"], "online", 4.0, 90, {"sent": 0, "received": 0}),
    ("batch", ["analytics"], ["reports"], [], "online", 95.0, 5000, {}),
]


def write_key(path: Path) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"SPEED-KEY-V1\n{base64.b64encode(FIXED_KEY).decode()}\n")
    os.chmod(path, 0o600)
    return path


def entry(name: str, groups, allow, services, status, age, uptime, counters, now: float = FIXED_NOW) -> dict:
    features = {"features": FEATURES[name]} if name in FEATURES else {}
    return {**features,
        "name": name, "id": IDS[name], "pid": 40000 + list(IDS).index(name), "host": HOST, "status": status,
        "startupTimestamp": now - uptime, "lastHeartbeat": now - age, "leaseSeconds": 30,
        "heartbeatSeconds": 5, "protocol": 1, "groups": groups, "allow": allow, "services": services,
        "runtime": "speed_runtime-python/0.1", "counters": counters,
    }


def _seal(etype: int, seq: int, ts: float, src: str, dst: str, payload: dict, nonce_byte: int) -> bytes:
    return rt.seal_envelope(FIXED_KEY, etype, seq, int(ts * 1000), IDS[src], IDS[dst],
                            json.dumps(payload, separators=(",", ":")).encode(), nonce=bytes([nonce_byte]) * 12)


def journal_records(now: float = FIXED_NOW, health: bool = True) -> dict[str, list[dict]]:
    gw, bl = [], []
    t = now - 50.0
    for i in range(1, 9):
        rid = f"req-{i:04d}"
        amount = 100 * i
        req = _seal(2, i, t, "gateway", "billing", {"from": "gateway", "to": "billing", "requestId": rid,
                                                     "service": "calculateTax", "arguments": {"amount": amount},
                                                     "callerNode": "gateway", "timeoutMs": 5000}, i)
        ok = i != 5
        resp_payload = ({"from": "billing", "to": "gateway", "requestId": rid, "status": "SUCCESS",
                         "result": {"tax": amount * 0.18}} if ok else
                        {"from": "billing", "to": "gateway", "requestId": rid, "status": "ERROR",
                         "errorCode": "INVALID_ARGUMENTS", "errorMessage": "'amount' must be a finite number"})
        resp = _seal(3, i, t + 0.004, "billing", "gateway", resp_payload, 100 + i)
        common = {"requestId": rid, "service": "calculateTax"}
        gw.append({"kind": "envelope", "ts": t, "node": "gateway", "dir": "out", "peer": "billing",
                   "type": "SPC_REQUEST", "seq": i, "size": len(req), "outcome": "sent", **common,
                   "envelope": base64.b64encode(req).decode()})
        bl.append({"kind": "envelope", "ts": t + 0.001, "node": "billing", "dir": "in", "peer": "gateway",
                   "type": "SPC_REQUEST", "seq": i, "size": len(req), "outcome": "accepted", **common,
                   "envelope": base64.b64encode(req).decode()})
        st = {"status": "SUCCESS"} if ok else {"status": "ERROR", "errorCode": "INVALID_ARGUMENTS"}
        bl.append({"kind": "envelope", "ts": t + 0.004, "node": "billing", "dir": "out", "peer": "gateway",
                   "type": "SPC_RESPONSE", "seq": i, "size": len(resp), "outcome": "sent", **common, **st,
                   "envelope": base64.b64encode(resp).decode()})
        gw.append({"kind": "envelope", "ts": t + 0.005, "node": "gateway", "dir": "in", "peer": "billing",
                   "type": "SPC_RESPONSE", "seq": i, "size": len(resp), "outcome": "accepted", **common, **st,
                   "latencyMs": 5.25 + i / 10, "envelope": base64.b64encode(resp).decode()})
        t += 5.0
    msg = _seal(1, 9, now - 8.0, "gateway", "billing", {"from": "gateway", "to": "billing",
                                                        "data": {"note": "end of day"}}, 77)
    gw.append({"kind": "envelope", "ts": now - 8.0, "node": "gateway", "dir": "out", "peer": "billing",
               "type": "MESSAGE", "seq": 9, "size": len(msg), "outcome": "sent",
               "envelope": base64.b64encode(msg).decode()})
    bl.append({"kind": "envelope", "ts": now - 7.999, "node": "billing", "dir": "in", "peer": "gateway",
               "type": "MESSAGE", "seq": 9, "size": len(msg), "outcome": "accepted",
               "envelope": base64.b64encode(msg).decode()})
    # a replay the receiver refused, and an intruder
    bl.append({"kind": "envelope", "ts": now - 4.0, "node": "billing", "dir": "in", "peer": "gateway",
               "type": "MESSAGE", "seq": 9, "size": len(msg), "outcome": "rejected", "reason": "replayed_nonce",
               "envelope": base64.b64encode(msg).decode()})
    bl.append({"kind": "envelope", "ts": now - 3.0, "node": "billing", "dir": "in", "peer": "mallory",
               "type": "MESSAGE", "seq": 1, "size": 120, "outcome": "rejected", "reason": "unauthorized"})
    leases = [
        (now - 7200, "billing", "billing", "registered"), (now - 3600, "gateway", "gateway", "registered"),
        (now - 3599, "billing", "gateway", "observed_join"), (now - 900, "gateway", "ledger", "observed_expiry"),
        (now - 600, "gateway", "ledger", "observed_join"), (now - 300, "billing", "ledger", "renewed_late"),
        (now - 30, "gateway", "batch", "observed_expiry"), (now - 3, "billing", "reports", "observed_leave"),
    ]
    for ts, node, subject, event in leases:
        (gw if node == "gateway" else bl).append({"kind": "lease", "ts": ts, "node": node, "subject": subject,
                                                  "event": event})
    # health records (PROTOCOL.md reading 28): billing lost its inbox and recovered; gateway met a
    # registry lock held for a long time a moment ago
    bl += [] if not health else [{"kind": "health", "ts": now - 40.0, "node": "billing", "event": "receiving_failed",
            "detail": "inbox: No such file or directory"},
           {"kind": "health", "ts": now - 39.9, "node": "billing", "event": "inbox_replaced", "detail": ""},
           {"kind": "health", "ts": now - 39.5, "node": "billing", "event": "receiving_recovered", "detail": ""}]
    gw += [] if not health else [{"kind": "health", "ts": now - 12.0, "node": "gateway",
                                  "event": "registry_lock_held", "detail": "pid 4242 held the registry lock for 10 s"}]
    if health:
        extension_records(now, gw, bl)
    gw.sort(key=lambda r: r["ts"])
    bl.sort(key=lambda r: r["ts"])
    return {"gateway": gw, "billing": bl}


def extension_records(now: float, gw: list[dict], bl: list[dict]) -> None:
    """Records of the extensions (PROTOCOL.md): eve rejected and quarantined at gateway (quota), a
    chunked and a reliable message from billing to gateway and one that reports never acknowledged
    (chunks, reliable), billing storing durable messages for reports. All older than the SPC
    exchange the traces snapshots select (the newest rows stay the same)."""
    for ts, score in ((now - 58, 25.0), (now - 45, 50.0), (now - 38, 75.0), (now - 37, 100.0), (now - 35, 125.0)):
        gw.append({"kind": "envelope", "ts": ts, "node": "gateway", "dir": "in", "peer": "eve", "type": "MESSAGE",
                   "seq": 1, "size": 96, "outcome": "rejected", "reason": "unauthorized"})
        gw.append({"kind": "threat", "ts": ts + 0.001, "node": "gateway", "peer": "eve",
                   "event": "quarantined" if score == 100.0 else "raised", "score": score,
                   "instance": "0e0e0e0e", "reason": "unauthorized"})
    gw.append({"kind": "threat", "ts": now - 44, "node": "gateway", "peer": "billing", "event": "raised",
               "score": 3.0, "instance": "22222222", "reason": "late_response"})

    def message(node, ts, direction, peer, mid, event, chunks, attempt, seq, size, reason=None):
        rec = {"kind": "message", "ts": ts, "node": node, "dir": direction, "peer": peer, "messageId": mid,
               "event": event, "type": "MESSAGE", "size": size, "chunks": chunks, "attempt": attempt,
               "reliable": True, "seq": seq}
        (gw if node == "gateway" else bl).append({**rec, "reason": reason} if reason else rec)

    def envelope(node, ts, direction, peer, seq, outcome, mid, chunk=None, size=4096):
        rec = {"kind": "envelope", "ts": ts, "node": node, "dir": direction, "peer": peer, "type": "MESSAGE",
               "seq": seq, "size": size, "outcome": outcome, "messageId": mid}
        (gw if node == "gateway" else bl).append({**rec, "chunk": chunk, "chunks": 3} if chunk else rec)

    t = now - 33.0
    for i in range(1, 4):
        envelope("billing", t + i * 0.01, "out", "gateway", 8 + i, "sent", CHUNKED_ID, i, 262_208)
        envelope("gateway", t + i * 0.01 + 0.002, "in", "billing", 8 + i, "accepted", CHUNKED_ID, i, 262_208)
    message("billing", t + 0.04, "out", "gateway", CHUNKED_ID, "sent", 3, 1, 11, 700_000)
    message("gateway", t + 0.045, "in", "billing", CHUNKED_ID, "delivered", 3, 0, 11, 700_000)
    message("billing", t + 0.05, "out", "gateway", CHUNKED_ID, "received", 3, 1, 11, 700_000)
    t = now - 27.0
    envelope("billing", t, "out", "gateway", 12, "sent", RELIABLE_ID)
    message("billing", t + 0.001, "out", "gateway", RELIABLE_ID, "sent", 1, 1, 12, 3900)
    envelope("billing", t + 2.0, "out", "gateway", 13, "sent", RELIABLE_ID)
    message("billing", t + 2.001, "out", "gateway", RELIABLE_ID, "retransmitted", 1, 2, 13, 3900)
    envelope("gateway", t + 2.01, "in", "billing", 13, "accepted", RELIABLE_ID)
    message("gateway", t + 2.02, "in", "billing", RELIABLE_ID, "delivered", 1, 0, 13, 3900)
    message("billing", t + 2.03, "out", "gateway", RELIABLE_ID, "received", 1, 2, 13, 3900)
    t = now - 24.0
    envelope("billing", t, "out", "reports", 1, "sent", FAILED_ID, size=512)
    message("billing", t + 0.001, "out", "reports", FAILED_ID, "sent", 1, 1, 1, 400)
    envelope("billing", t + 2.0, "out", "reports", 2, "sent", FAILED_ID, size=512)
    message("billing", t + 2.001, "out", "reports", FAILED_ID, "retransmitted", 1, 2, 2, 400)
    message("billing", t + 6.0, "out", "reports", FAILED_ID, "send-error", 1, 2, 0, 400, "unacknowledged")
    for sender, target, stream, mid, age, _size in OUTBOX:
        if sender == "billing":
            bl.append({"kind": "durable", "ts": now - age, "node": sender, "peer": target, "event": "stored",
                       "stream": stream, "id": mid})


def write_outboxes(root: Path, now: float) -> None:
    """Real outbox entries (sealed with the fixture's key) for `speed outbox` and the Durable view."""
    from speed_runtime.core.durable import seal_outbox_entry
    from speed_runtime.core.keys import Key

    key = Key(FIXED_KEY)
    for sender, target, stream, mid, age, size in OUTBOX:
        box = root / sender / "durable" / "outbox" / target
        box.mkdir(mode=0o700, parents=True, exist_ok=True)
        (box / "stream").write_text(stream + "\n")
        meta = {"target": target, "stream": stream, "id": mid, "created": now - age,
                "expiresAt": int((now - age + 86_400) * 1000), "size": size, "type": "MESSAGE"}
        (box / f"{mid:020d}.msg").write_bytes(seal_outbox_entry(meta, bytes(size), key, bytes([mid]) * 12))
    write_ledgers(root, now)


def write_ledgers(root: Path, now: float) -> None:
    """The receivers' ledgers (real receipts under the fixture's key, as a durable node writes them)."""
    from speed_runtime.core.durable import ZERO_MAC, ledger_line, make_receipt, receipt_key

    rkey = receipt_key(FIXED_KEY)
    for sender, target, stream, mid, age in RECEIPTED:
        ledger = root / target / "durable" / "ledger"
        ledger.mkdir(mode=0o700, parents=True, exist_ok=True)
        receipt = make_receipt(rkey, target, sender, stream, 1, mid, "handled", int((now - age) * 1000), ZERO_MAC)
        (ledger / f"{sender}.log").write_bytes(ledger_line("claim", {"stream": stream, "id": mid})
                                               + ledger_line("receipt", {**receipt.to_json(), "base": mid}))


def build(root: Path, now: float = FIXED_NOW, health: bool = True) -> tuple[Path, Path]:
    """Create ROOT (0700) with registry entries and journals (with ``health`` records, which the
    pipeline does not read); return (root, key path)."""
    root = Path(root)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    reg = root / REGISTRY_DIR
    reg.mkdir(mode=0o700, exist_ok=True)
    for spec in NODES:
        e = entry(*spec, now=now)
        (reg / f"{spec[0]}.node").write_text(json.dumps(e, indent=1))
    (reg / "broken.node").write_text("{not json")
    tr = root / TRACES_DIR
    tr.mkdir(mode=0o700, exist_ok=True)
    for name, recs in journal_records(now, health).items():
        with open(tr / f"{name}.jsonl", "w") as fh:
            for r in recs:
                fh.write(json.dumps(r, separators=(",", ":")) + "\n")
            fh.write('{"torn": ')  # a torn last line, as after a crash
    if health:
        write_outboxes(root, now)
    key = write_key(root.parent / f"{root.name}.key")
    return root, key


def sample_summary(now: float = FIXED_NOW) -> dict:
    """The summary.json the pipeline writes for the fixture's journals: computed by the pipeline's
    pure-Python reference (same schema and answers as the Spark job), with the fields that name
    the run (time, paths) pinned so that snapshots are stable."""
    import tempfile

    from ..pipeline.reference import analyze

    with tempfile.TemporaryDirectory() as tmp:
        root, _ = build(Path(tmp) / "root", now, health=False)
        summary = analyze([str(root / TRACES_DIR)])["summary"]
    summary.update(engine="reference", generated_at="2026-01-01T00:00:00Z", inputs=[TRACES_DIR],
                   out_dir="speed-report", elapsed_seconds=1.0)
    return summary


def node_logs(messages: int) -> NodeLogs:
    """What two nodes the console started wrote, at FIXED_NOW: a `speed node` process (billing, its
    ready line and `messages` echoed messages) and an in-process node (ops, its lease registered).
    The logs snapshots and the screenshots add their own last lines."""
    logs = NodeLogs(clock=lambda: FIXED_NOW)
    logs.open("billing", "process", 4242)
    logs.add("billing", "stdout", "ready billing id=6f1c2d9e-0000-4000-8000-000000000001 pid=4242")
    logs.open("ops", "in-process")
    logs.add("ops", "health", "lease registered")
    for i in range(messages):
        logs.add("billing", "stdout", f'{{"from": "ops", "seq": {i + 1}, "data": {{"amount": {100 * (i + 1)}}}}}')
    return logs
