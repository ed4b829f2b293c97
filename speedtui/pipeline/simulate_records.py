"""Records the simulator (simulate.py) writes for one event: the extensions' records of a message
(chunks, reliable, durable, health, control), a quarantine's threat records, the base of a
service's latency, and malformed lines."""
from __future__ import annotations

import math


def extension_records(rng, bufs, kindp, src, dst, t, mid) -> int:
    """Records of the extensions (docs/PROTOCOL.md) for one message from src to dst at t: a
    logical message (chunk envelopes when chunked, message records of both sides), or a durable
    message's steps, or a health or control record. Returns how many records were written."""
    x = rng.random()
    if x < 0.04:
        bufs[src].append('{"kind":"health","ts":%.6f,"node":"%s","event":"renewal_failed","detail":""}\n' % (t, src))
        return 1
    if x < 0.08:
        bufs[dst].append('{"kind":"control","ts":%.6f,"node":"%s","peer":"operator","operator":"ab12",'
                         '"requestId":"c%s","command":"status","arguments":{},"outcome":"applied",'
                         '"reason":null,"detail":""}\n' % (t, dst, mid))
        return 1
    if x < 0.3:
        head = '{"kind":"durable","ts":%.6f,"node":"%s","peer":"%s","event":"%s","stream":"s","id":%d'
        n = int(mid.split("-")[1], 16)
        status = "failed" if rng.random() < 0.1 else "handled"
        bufs[src].append(head % (t, src, dst, "stored", n) + "}\n")
        if rng.random() < 0.05:
            bufs[src].append(head % (t + 60, src, dst, "send_error", n) + ',"status":"expired"}\n')
            return 2
        bufs[src].append(head % (t + 0.001, src, dst, "delivered", n) + "}\n")
        bufs[dst].append(head % (t + 0.002, dst, src, "handled", n) + ',"status":"%s"}\n' % status)
        bufs[src].append(head % (t + 0.003, src, dst, "receipt", n) + ',"status":"%s","index":%d}\n' % (status, n))
        return 4
    chunks = 1 + int(rng.random() * 4)
    reliable = rng.random() < 0.6
    size = 200 + int(rng.random() * 4000)
    written = 0
    for i in range(chunks if chunks > 1 else 0):
        bufs[src].append('{%s"ts":%.6f,"node":"%s","dir":"out","peer":"%s","type":"MESSAGE","seq":%d,"size":%d,'
                         '"outcome":"sent","messageId":"%s","chunk":%d,"chunks":%d}\n'
                         % (kindp[src], t + i * 0.0001, src, dst, i + 1, size // chunks, mid, i, chunks))
        written += 1

    def rec(node, d, peer, ts, event, attempt, reason=None):
        tail = ',"reason":"%s"' % reason if reason else ""
        return ('{"kind":"message","ts":%.6f,"node":"%s","dir":"%s","peer":"%s","messageId":"%s","event":"%s",'
                '"type":"MESSAGE","size":%d,"chunks":%d,"attempt":%d,"reliable":%s,"seq":1%s}\n'
                % (ts, node, d, peer, mid, event, size, chunks, attempt, "true" if reliable else "false", tail))
    bufs[src].append(rec(src, "out", dst, t + 0.001, "sent", 1 if reliable else 0))
    y = rng.random()
    if y < 0.9:
        bufs[dst].append(rec(dst, "in", src, t + 0.002, "delivered", 0))
        written += 2
        if reliable:
            if y > 0.8:   # the acknowledgement was late: sent again, a duplicate at the receiver
                bufs[src].append(rec(src, "out", dst, t + 2.0, "retransmitted", 2))
                bufs[dst].append(rec(dst, "in", src, t + 2.001, "duplicate", 0))
                written += 2
            bufs[src].append(rec(src, "out", dst, t + 2.002, "received", 2))
            written += 1
    elif reliable:
        bufs[src].append(rec(src, "out", dst, t + 2.0, "retransmitted", 2))
        bufs[src].append(rec(src, "out", dst, t + 6.0, "send-error", 2, "no_ack"))
        written += 3
    else:
        bufs[dst].append(rec(dst, "in", src, t + 30.0, "voided", 0, "chunk_expired" if y < 0.95 else "chunk_missing"))
        written += 2
    return written


def quarantine(rng, buf, receiver, sender, t) -> int:
    """The receiver's threat score for sender rises over the threshold, later decays: threat
    records and the envelopes removed unread meanwhile."""
    line = ('{"kind":"threat","ts":%.6f,"node":"%s","peer":"%s","event":"%s","score":%.3f,'
            '"instance":"0a0b0c0d","reason":"%s"}\n')
    buf.append(line % (t + 0.01, receiver, sender, "raised", 4.0 + rng.random(), "bad_tag"))
    buf.append(line % (t + 0.02, receiver, sender, "quarantined", 6.0 + rng.random() * 4, ""))
    removed = int(rng.random() * 4)
    for i in range(removed):
        buf.append('{"kind":"envelope","ts":%.6f,"node":"%s","dir":"in","peer":"%s","type":"MESSAGE","seq":1,'
                   '"size":300,"outcome":"rejected","reason":"quarantined"}\n' % (t + 1 + i, receiver, sender))
    end = "lifted" if rng.random() < 0.2 else "released"
    buf.append(line % (t + 120, receiver, sender, end, 0.5 if end == "released" else 0.0, ""))
    return 3 + removed


def latency_base(rng, svc):
    if svc in ("echo", "fail"):
        return math.log(1.5) + rng.uniform(-0.2, 0.2)
    if svc == "calculateTax":
        return math.log(2.5) + rng.uniform(-0.2, 0.3)
    if svc == "sleep":
        return math.log(400) + rng.uniform(-0.5, 0.5)
    return math.log(rng.uniform(5, 60))


def bad_line(rng, t, src, dst) -> str:
    full = ('{"kind":"envelope","ts":%.6f,"node":"%s","dir":"out","peer":"%s","type":"MESSAGE",'
            '"seq":1,"size":200,"outcome":"sent"}' % (t, src, dst))
    x = rng.random()
    if x < 0.5:
        return full[:rng.randint(1, len(full) - 2)] + "\n"        # torn line
    if x < 0.65:
        return "\x00\x00\x00garbage" + "\n"
    if x < 0.75:
        return '{"kind":"envelope","node":"%s","dir":"out"}\n' % src  # missing ts
    if x < 0.85:
        return '{"kind":"lease","ts":%.6f,"node":"%s","event":"registered"}\n' % (t, src)  # no subject
    if x < 0.95:
        return "[1, 2, 3]\n"
    return '{"ts":"yesterday","node":"%s","dir":"in","peer":"x","type":"ACK","outcome":"accepted"}\n' % src
