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
