"""Hand-written journals for the pipeline tests (answers worked out in the tests)."""
from __future__ import annotations

import json
import os

T0 = 1_699_999_980.0          # a minute boundary: T0 % 60 == 0
assert T0 % 60 == 0


def env(ts, node, d, peer, typ, seq, size, outcome, kind=True, **extra):
    rec = {"kind": "envelope"} if kind else {}
    rec.update({"ts": T0 + ts, "node": node, "dir": d, "peer": peer, "type": typ, "seq": seq,
                "size": size, "outcome": outcome})
    rec.update(extra)
    return json.dumps(rec)


def lease(ts, node, subject, event):
    return json.dumps({"kind": "lease", "ts": T0 + ts, "node": node, "subject": subject, "event": event})


MALFORMED = [
    '{"kind":"envelope","ts":1699',                                       # torn
    "not json at all",
    "[1, 2]",
    json.dumps({"kind": "lease", "ts": T0 + 3, "node": "a", "event": "registered"}),   # no subject
    json.dumps({"ts": "x", "node": "a", "dir": "out", "peer": "b", "type": "MESSAGE",
                "outcome": "sent"}),                                        # ts not a number
    json.dumps({"kind": "weird", "ts": T0 + 3, "node": "a"}),             # unknown kind
    '"just a string"',                                                     # JSON, not an object
    '{"ts":1e300,"node":"x"}',            # ts far beyond MAX_TS: its day overflowed an INT (Spark's ANSI mode
    '{"ts":-1e300,"node":"x"}',           # stopped every analysis, ARITHMETIC_OVERFLOW), as far below
]
#: lines that are no record at all (ignored, not counted): blank and whitespace-only lines
BLANK = ["", "   \t"]


def write_hand_journals(root) -> str:
    """Three nodes a, b, c journal; d appears only in c's observations. All ts in [T0, T0+600]."""
    os.makedirs(root, exist_ok=True)
    a = [lease(0, "a", "a", "registered"),
         env(1, "a", "out", "b", "MESSAGE", 1, 100, "sent"),
         env(2, "a", "out", "b", "MESSAGE", 2, 200, "sent",
             envelope="AAECAwQFBgcICQ=="),                      # optional field: ignored
         env(61, "a", "out", "c", "MESSAGE", 1, 50, "sent", kind=False)]   # no kind = envelope
    latencies = {1: 10.0, 2: 20.0, 3: 30.0, 4: 40.0}
    for i in range(1, 8):
        svc = "echo" if i <= 5 else "tax"
        a.append(env(9 + i, "a", "out", "b", "SPC_REQUEST", 2 + i, 300, "sent",
                      requestId=f"r{i}", service=svc))
    for i in (1, 2, 3, 4, 5, 7):
        extra = {"requestId": f"r{i}", "service": "echo" if i <= 5 else "tax"}
        if i <= 4:
            extra.update(status="SUCCESS", latencyMs=latencies[i])
        elif i == 5:
            extra.update(status="ERROR", errorCode="EXECUTION_FAILED", latencyMs=50.0)
        else:
            extra.update(status="ERROR", errorCode="INVALID_ARGUMENTS", latencyMs=5.0)
        a.append(env(20 + i, "a", "in", "b", "SPC_RESPONSE", i, 150, "accepted", **extra))
    a.append(lease(600, "a", "a", "deregistered"))
    a[5:5] = MALFORMED + BLANK   # malformed and blank lines in the middle of a's journal

    b = [lease(0, "b", "b", "registered"),
         env(1.001, "b", "in", "a", "MESSAGE", 1, 100, "accepted"),
         env(2.001, "b", "in", "a", "MESSAGE", 2, 200, "accepted")]
    for i in range(1, 8):
        svc = "echo" if i <= 5 else "tax"
        b.append(env(9.001 + i, "b", "in", "a", "SPC_REQUEST", 2 + i, 300, "accepted",
                     requestId=f"r{i}", service=svc))
    for i in (1, 2, 3, 4, 5, 7):
        b.append(env(19.5 + i, "b", "out", "a", "SPC_RESPONSE", i, 150, "sent", requestId=f"r{i}"))
    for i in range(6):   # burst: 6 x bad_tag within a minute
        b.append(env(120 + i, "b", "in", "x", "MESSAGE", 100 + i, 500, "rejected", reason="bad_tag"))
    for i in range(3):   # 3 x unauthorized: below the threshold
        b.append(env(200 + i, "b", "in", "probe", "MESSAGE", 1, 90, "rejected", reason="unauthorized"))
    for i in range(5):   # exactly 5 x replayed_nonce: a burst
        b.append(env(300 + i, "b", "in", "a", "MESSAGE", 2, 200, "rejected", reason="replayed_nonce"))
    b.append(lease(450, "b", "b", "reclaimed"))

    c = [lease(5, "c", "c", "registered"),
         lease(5.5, "c", "a", "observed_join"),
         lease(50, "c", "d", "observed_join"),
         env(61.002, "c", "in", "a", "MESSAGE", 1, 50, "accepted"),
         lease(100, "c", "c", "renewed_late"),
         lease(350, "c", "d", "observed_leave"),
         lease(400, "c", "b", "observed_expiry"),
         lease(451, "c", "b", "observed_join"),
         lease(500, "c", "c", "lost")]
    for name, lines in (("a", a), ("b", b), ("c", c)):
        with open(os.path.join(root, f"{name}.jsonl"), "w") as f:
            f.write("\n".join(lines) + "\n")
    return str(root)


def write_latency_journal(path) -> str:
    """Caller p calls q's service "big" 100 times, latencies a permutation of 1..100 ms:
    exact nearest-rank p50/p95/p99 = 50/95/99 ms."""
    lines = []
    for i in range(1, 101):
        lines.append(env(i, "p", "out", "q", "SPC_REQUEST", i, 200, "sent", requestId=f"q{i}", service="big"))
        lines.append(env(i + 0.5, "p", "in", "q", "SPC_RESPONSE", i, 200, "accepted", requestId=f"q{i}",
                         status="SUCCESS", latencyMs=float((i * 37) % 100 + 1)))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return str(path)


#: lines of the extension kinds that miss a field their kind needs: malformed
EXT_MALFORMED = [
    json.dumps({"kind": "threat", "ts": T0 + 3, "node": "b", "peer": "x", "event": "raised"}),        # no score
    json.dumps({"kind": "durable", "ts": T0 + 3, "node": "a", "peer": "b", "event": "stored", "id": 1}),  # no stream
    json.dumps({"kind": "health", "ts": T0 + 3, "node": "b"}),                                          # no event
    json.dumps({"kind": "message", "ts": T0 + 3, "node": "a", "peer": "b", "event": "sent"}),          # no dir
]


def write_extension_journals(root) -> str:
    """Journals of a, b, c with records of every kind, written by the runtime's own encoder
    (speed_runtime.core.records); the answers are worked out in test_pipeline_extensions.py."""
    from speed_runtime.core import records as rt

    def msg(ts, node, d, peer, mid, event, **kw):
        return rt.MessageTrace(T0 + ts, node, d, peer, mid, event, **kw)

    def chunk_envelopes(ts, node, peer, mid, count, size):
        return [rt.EnvelopeTrace(T0 + ts + i * 0.01, node, "out", peer, "MESSAGE", 10 + i, size, "sent",
                                 message_id=mid, chunk=i, chunks=count) for i in range(count)]

    def threat(ts, node, peer, event, score, reason=""):
        return rt.ThreatTrace(T0 + ts, node, peer, event, score, "0a0b0c0d", reason)

    def durable(ts, node, peer, event, ident, status=None, index=None):
        return rt.DurableTrace(T0 + ts, node, peer, event, "s1", ident, status, index)

    def quarantined(ts, node, peer):
        return rt.EnvelopeTrace(T0 + ts, node, "in", peer, "MESSAGE", 9, 300, "rejected", reason="quarantined")

    a = [rt.LeaseTrace(T0, "a", "a", "registered"),
         *chunk_envelopes(10, "a", "b", "m1", 3, 1000), msg(10.1, "a", "out", "b", "m1", "sent", size=3000,
                                                             chunks=3, attempt=1, reliable=True),
         *chunk_envelopes(12, "a", "b", "m1", 3, 1000), msg(12.1, "a", "out", "b", "m1", "retransmitted",
                                                             size=3000, chunks=3, attempt=2, reliable=True),
         msg(13, "a", "out", "b", "m1", "received", size=3000, chunks=3, attempt=2, reliable=True),
         msg(20, "a", "out", "b", "m2", "sent", size=100),
         durable(30, "a", "b", "stored", 1), durable(31, "a", "b", "stored", 2),
         durable(32, "a", "b", "delivered", 1), durable(33, "a", "b", "delivered", 2),
         durable(35, "a", "b", "receipt", 1, "handled", 0), durable(40, "a", "b", "delivered", 2),
         durable(42, "a", "b", "receipt", 2, "failed", 1),
         msg(70, "a", "out", "b", "m3", "sent", size=50, attempt=1, reliable=True),
         msg(72, "a", "out", "b", "m3", "retransmitted", size=50, attempt=2, reliable=True),
         msg(80, "a", "out", "b", "m3", "retransmitted", size=50, attempt=3, reliable=True),
         msg(90, "a", "out", "b", "m3", "send-error", size=50, attempt=3, reliable=True, reason="no_ack"),
         rt.ControlTrace(T0 + 160, "a", "operator", "ab12", "c1", "set_quota", {"n": 1}, "applied"),
         rt.LeaseTrace(T0 + 600, "a", "a", "deregistered")]
    b = [rt.LeaseTrace(T0, "b", "b", "registered"),
         msg(12.5, "b", "in", "a", "m1", "delivered", size=3000, chunks=3, reliable=True),
         msg(20.5, "b", "in", "a", "m2", "delivered", size=100),
         durable(34, "b", "a", "handled", 1, "handled"), durable(41, "b", "a", "handled", 2, "failed"),
         durable(45, "b", "a", "duplicate", 2),
         msg(81, "b", "in", "a", "m3", "duplicate", size=50, reliable=True),
         msg(130, "b", "in", "c", "m4", "voided", size=400, chunks=2, reason="chunk_expired"),
         rt.HealthTrace(T0 + 150, "b", "receiving_failed", "disk full"),
         threat(200, "b", "x", "raised", 2.0, "bad_tag"), threat(201, "b", "x", "raised", 4.5, "bad_tag"),
         threat(202, "b", "x", "quarantined", 6.0),
         quarantined(205, "b", "x"), quarantined(206, "b", "x"), quarantined(207, "b", "x"),
         threat(210, "b", "y", "raised", 1.5, "unauthorized"), threat(211, "b", "y", "quarantined", 5.5),
         quarantined(260, "b", "y"),
         threat(400, "b", "x", "released", 1.0)]
    c = [rt.LeaseTrace(T0, "c", "c", "registered"),
         durable(50, "c", "b", "stored", 1),
         *chunk_envelopes(100, "c", "b", "m4", 2, 200), msg(100.1, "c", "out", "b", "m4", "sent", size=400, chunks=2),
         threat(300, "c", "x", "raised", 1.0, "bad_tag"), threat(310, "c", "x", "lifted", 0.0),
         durable(500, "c", "b", "send_error", 1, "expired")]
    os.makedirs(root, exist_ok=True)
    for name, events in (("a", a), ("b", b), ("c", c)):
        lines = [rt.encode_line(e) for e in events]
        if name == "b":
            lines[3:3] = [line + "\n" for line in EXT_MALFORMED]
        with open(os.path.join(root, f"{name}.jsonl"), "w") as f:
            f.write("".join(lines))
    return str(root)
