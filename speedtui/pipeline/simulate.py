"""Seeded generator of realistic SPEED trace journals (wire contract section 8).

``simulate(out_dir, nodes=N, records=M, seed=S)`` writes ``out_dir/<node>.jsonl`` for every node:
both sides of every envelope (the sender's out/sent record and the receiver's in/accepted or
in/rejected record), SPC request/response pairs (requestId, service, status, errorCode and
latencyMs on the caller's accepted response), bursts of rejections (bad_tag, replayed_*,
unauthorized) and sporadic ones, and lease records consistent with node restarts, crashes and
lost leases. The optional ``envelope`` field is omitted. ``malformed`` > 0 adds that fraction of
torn or invalid lines (on top of the M valid records).

The time line is cut into slices that are generated independently (seeded per slice) and run
on a process pool, then concatenated per node in slice order, so the output depends only on the
arguments, not on the number of worker processes.
"""
from __future__ import annotations

import math
import multiprocessing as mp
import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass, field

DEFAULT_START = 1_750_000_000.0
BASE_NAMES = ["gateway", "billing", "reports", "inventory", "auth", "orders", "search", "payments",
              "ledger", "notify", "catalog", "shipping", "analytics", "audit", "pricing", "users"]
DEMO = ("echo", "calculateTax", "sleep", "fail")
CUSTOM = ("lookup", "quote", "reserve", "charge", "render", "index", "verify", "publish")
LEASE_SECONDS = 30.0
SLICE_RECORDS = 1_000_000
MAX_SLICES = 64


def node_names(n: int) -> list[str]:
    if n <= len(BASE_NAMES):
        return BASE_NAMES[:n]
    return BASE_NAMES + [f"worker-{i:03d}" for i in range(1, n - len(BASE_NAMES) + 1)]


@dataclass
class Plan:
    names: list[str]
    start: float
    end: float
    services: dict[str, list[str]]
    pairs: list[tuple[int, int]]          # weighted (expanded) list of (src, dst) indices
    lease: list[tuple[float, str, str]]   # (ts, writer, line) sorted
    offline: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    no_kind: set = field(default_factory=set)


def _plan(names: list[str], seed: int, start: float, end: float) -> Plan:
    rng = random.Random(f"plan-{seed}")
    n = len(names)
    services = {}
    for name in names:
        k = rng.randint(1, 3)
        services[name] = list(DEMO[:rng.randint(2, 4)]) + rng.sample(CUSTOM, k)
    # talker pairs with a heavy tail: a few hot links
    pairs: list[tuple[int, int]] = []
    if n >= 2:
        for i in range(n):
            for j in range(n):
                if i == j:
                    continue
                w = rng.paretovariate(1.2)
                pairs.extend([(i, j)] * max(1, min(200, int(w * 3))))
    rng.shuffle(pairs)
    no_kind = {nm for nm in names if rng.random() < 0.25}   # older writers omit "kind"

    # ---- lifecycle: sessions, crashes, graceful restarts, lost leases
    duration = end - start
    lease: list[tuple[float, str, str]] = []
    offline: dict[str, list[tuple[float, float]]] = {nm: [] for nm in names}
    incidents: list[tuple[float, str, str]] = []   # (t, node, kind)
    for nm in names:
        t = start + rng.uniform(0, min(5.0, duration * 0.01))
        incidents.append((t, nm, "boot"))
        n_inc = rng.choices([0, 1, 2, 3], weights=[50, 30, 15, 5])[0] if duration > 600 else 0
        for _ in range(n_inc):
            incidents.append((start + rng.uniform(0.05, 0.9) * duration, nm,
                              rng.choices(["crash", "restart", "lost"], weights=[50, 40, 10])[0]))
        if duration > 600 and rng.random() < 0.1:
            incidents.append((end - rng.uniform(60, 300), nm, "shutdown"))
    incidents.sort()

    def rec(ts, writer, subject, event):
        lease.append((ts, writer, '{"kind":"lease","ts":%.6f,"node":"%s","subject":"%s","event":"%s"}\n'
                      % (ts, writer, subject, event)))

    down_until: dict[str, float] = {}
    last_down: dict[str, float] = {}

    def online(nm, t):
        return all(not (a <= t < b) for a, b in offline[nm])

    def observers(subject, t):
        return [o for o in names if o != subject and online(o, t) and o in down_until]

    for t, nm, kind in incidents:
        if kind != "boot" and (nm not in down_until or t < down_until.get(nm, 0) + 60
                               or t < last_down.get(nm, -1e18) + 120):
            continue  # not up yet, or too close to the previous incident
        if kind == "boot":
            rec(t, nm, nm, "registered")
            for o in observers(nm, t):
                rec(t + rng.uniform(0.01, 1.5), o, nm, "observed_join")
            down_until[nm] = t
            continue
        if kind == "shutdown":
            rec(t, nm, nm, "deregistered")
            for o in observers(nm, t):
                rec(t + rng.uniform(0.01, 1.0), o, nm, "observed_leave")
            offline[nm].append((t, math.inf))
            down_until[nm] = math.inf
            continue
        if rng.random() < 0.5:
            rec(t - rng.uniform(1, 20), nm, nm, "renewed_late")
        if kind == "restart":
            back = t + rng.uniform(2, 30)
            rec(t, nm, nm, "deregistered")
            for o in observers(nm, t):
                rec(t + rng.uniform(0.01, 1.0), o, nm, "observed_leave")
            offline[nm].append((t, back))
            rec(back, nm, nm, "registered")
            for o in observers(nm, back):
                rec(back + rng.uniform(0.01, 1.5), o, nm, "observed_join")
        elif kind == "crash":
            seen = t + LEASE_SECONDS + rng.uniform(0.5, 5)
            back = seen + rng.uniform(1, 120)
            obs = observers(nm, seen)
            for o in obs:
                rec(seen + rng.uniform(0, 2), o, nm, "observed_expiry")
            offline[nm].append((t, back))
            rec(back, nm, nm, "reclaimed")
            for o in observers(nm, back):
                rec(back + rng.uniform(0.01, 1.5), o, nm, "observed_join")
        else:  # lost: paused past its lease, reaped by a peer, then finds its entry gone
            seen = t + LEASE_SECONDS + rng.uniform(0.5, 5)
            obs = observers(nm, seen)
            for o in obs:
                rec(seen + rng.uniform(0, 2), o, nm, "observed_expiry")
            if obs:
                rec(seen + 2.5, obs[0], nm, "reaped")
            resume = seen + rng.uniform(5, 60)
            rec(resume, nm, nm, "lost")
            back = resume + rng.uniform(1, 10)
            offline[nm].append((t, back))
            rec(back, nm, nm, "registered")
            for o in observers(nm, back):
                rec(back + rng.uniform(0.01, 1.5), o, nm, "observed_join")
        down_until[nm] = max(b for _, b in offline[nm])
        last_down[nm] = t
    lease = [x for x in lease if start <= x[0] < end]
    lease.sort()
    return Plan(names, start, end, services, pairs, lease, offline, no_kind)


# --------------------------------------------------------------------------------------------
# slice worker
# --------------------------------------------------------------------------------------------

REJECT_SPORADIC = ("stale_timestamp", "bad_size", "unknown_sender", "wrong_target", "bad_payload",
                   "too_large", "bad_version", "bad_file")
BURST_REASONS = ("bad_tag", "bad_tag", "replayed_nonce", "replayed_sequence", "unauthorized",
                 "unauthorized")


def _slice(args) -> tuple[int, int, int]:
    (k, plan, t0, t1, quota, seed, malformed, part_dir) = args
    rng = random.Random(f"slice-{seed}-{k}")
    rnd = rng.random
    names = plan.names
    n = len(names)
    os.makedirs(part_dir, exist_ok=True)
    bufs: dict[str, list[str]] = {nm: [] for nm in names}
    files = {nm: open(os.path.join(part_dir, nm + ".jsonl"), "w", encoding="utf-8", buffering=1 << 20)
             for nm in names}
    kindp = {nm: ("" if nm in plan.no_kind else '"kind":"envelope",') for nm in names}
    written = 0
    bad_written = 0

    def flush(nm):
        b = bufs[nm]
        files[nm].write("".join(b))
        b.clear()

    # templates: (writer, peer, type, dir/outcome) -> "%s" template taking (ts, seq, size)
    tmpl_cache: dict[tuple, str] = {}

    def tmpl(writer, peer, typ, d, outcome):
        key = (writer, peer, typ, d, outcome)
        t = tmpl_cache.get(key)
        if t is None:
            t = ('{' + kindp[writer] + '"ts":%.6f,"node":"' + writer + '","dir":"' + d + '","peer":"'
                 + peer + '","type":"' + typ + '","seq":%d,"size":%d,"outcome":"' + outcome + '"')
            tmpl_cache[key] = t
        return t

    seqs: dict[tuple[str, str], int] = {}
    base = k * max(1, quota // max(1, n * n)) + 1

    def nextseq(a, b):
        s = seqs.get((a, b), base)
        seqs[(a, b)] = s + 1
        return s

    # offline set maintenance (t increases monotonically in this slice)
    bounds = sorted({x for nm in names for iv in plan.offline[nm] for x in iv if t0 <= x < t1 + 3600})
    bi = 0

    def offline_at(t):
        return {nm for nm in names if any(a <= t < b for a, b in plan.offline[nm])}

    off = offline_at(t0)
    lease = [x for x in plan.lease if t0 <= x[0] < t1]
    li = 0
    pairs = plan.pairs
    npairs = len(pairs)
    services = plan.services
    lat_base = {(nm, s): _lat_base(rng, s) for nm in names for s in services[nm]}
    acts = max(1, quota / 2.9)
    dt = (t1 - t0) / acts
    t = t0
    rid_prefix = "%x" % (k + 1)
    rid_n = 0
    next_burst = t0 + rng.expovariate(1 / 90.0)
    bad_every = (1.0 / malformed) if malformed > 0 else 0
    next_bad = rng.uniform(0, bad_every * 2) if bad_every else math.inf
    expo = rng.expovariate
    lognorm = rng.lognormvariate

    while written < quota and npairs:
        t += dt * 2 * rnd()
        while bi < len(bounds) and bounds[bi] <= t:
            bi += 1
            off = offline_at(t)
        while li < len(lease) and lease[li][0] <= t:
            _, w, line = lease[li]
            bufs[w].append(line)
            li += 1
            written += 1
        s_i, d_i = pairs[int(rnd() * npairs)]
        src, dst = names[s_i], names[d_i]
        if src in off or dst in off:
            continue
        r = rnd()
        if t >= next_burst:
            # a burst of rejections of one reason at one node
            next_burst = t + expo(1 / 90.0)
            reason = BURST_REASONS[int(rnd() * len(BURST_REASONS))]
            count = int(4 + expo(1 / 12.0))
            tt = t
            probe = "intruder-%d" % int(rnd() * 3) if reason == "unauthorized" and rnd() < 0.5 else src
            for _ in range(count):
                tt += rnd() * 0.8
                size = 120 + int(rnd() * 400)
                seq = nextseq(src, dst)
                if reason == "bad_tag" and probe == src:   # misconfigured sender: both sides
                    bufs[src].append(tmpl(src, dst, "MESSAGE", "out", "sent") % (tt, seq, size) + "}\n")
                    written += 1
                bufs[dst].append(tmpl(dst, probe, "MESSAGE", "in", "rejected") % (tt + 0.0005, seq, size)
                                 + ',"reason":"' + reason + '"}\n')
                written += 1
            if count >= 8:   # the receiver's quota extension quarantines the sender for a while
                written += _quarantine(rng, bufs[dst], dst, probe, tt)
            continue
        if r < 0.03:  # a logical message (chunks, reliable), a durable message, health or control
            written += _extension_records(rng, bufs, kindp, src, dst, t, "%x-%x" % (k + 1, rid_n))
            rid_n += 1
            continue
        if r < 0.45:  # MESSAGE (+ ACK)
            size = 92 + int(lognorm(5.5, 1.0))
            seq = nextseq(src, dst)
            bufs[src].append(tmpl(src, dst, "MESSAGE", "out", "sent") % (t, seq, size) + "}\n")
            ta = t + 0.0003 + expo(1000.0)
            if rnd() < 0.004:
                reason = REJECT_SPORADIC[int(rnd() * len(REJECT_SPORADIC))]
                bufs[dst].append(tmpl(dst, src, "MESSAGE", "in", "rejected") % (ta, seq, size)
                                 + ',"reason":"' + reason + '"}\n')
                written += 2
                continue
            bufs[dst].append(tmpl(dst, src, "MESSAGE", "in", "accepted") % (ta, seq, size) + "}\n")
            written += 2
            if rnd() < 0.3:
                sq = nextseq(dst, src)
                tb = ta + 0.0002 + expo(2000.0)
                bufs[dst].append(tmpl(dst, src, "ACK", "out", "sent") % (tb, sq, 120) + "}\n")
                bufs[src].append(tmpl(src, dst, "ACK", "in", "accepted") % (tb + 0.0004, sq, 120) + "}\n")
                written += 2
        elif r < 0.88:  # SPC call
            svcs = services[dst]
            svc = svcs[int(rnd() * len(svcs))]
            if rnd() < 0.01:
                svc = "missing"
            rid_n += 1
            rid = "%s-%s-%x" % (src, rid_prefix, rid_n)
            seq = nextseq(src, dst)
            size = 160 + int(rnd() * 300)
            spc = ',"requestId":"%s","service":"%s"' % (rid, svc)
            bufs[src].append(tmpl(src, dst, "SPC_REQUEST", "out", "sent") % (t, seq, size) + spc + "}\n")
            ta = t + 0.0003 + expo(1500.0)
            bufs[dst].append(tmpl(dst, src, "SPC_REQUEST", "in", "accepted") % (ta, seq, size) + spc + "}\n")
            written += 2
            if rnd() < 0.002:
                continue  # no response (callee stopped mid-call / caller timed out)
            # outcome
            if svc == "missing":
                code = "SERVICE_NOT_FOUND"
            elif svc == "fail":
                code = "EXECUTION_FAILED"
            else:
                x = rnd()
                code = None
                if svc == "calculateTax" and x < 0.03:
                    code = "INVALID_ARGUMENTS"
                elif svc == "sleep" and x < 0.05:
                    code = "TIMEOUT"
                elif x < 0.004:
                    code = "ACCESS_DENIED"
                elif x < 0.006:
                    code = "INTERNAL_ERROR"
                elif x < 0.015:
                    code = "EXECUTION_FAILED"
            mu = lat_base.get((dst, svc), 0.7)
            lat = lognorm(mu, 0.6)
            if code == "TIMEOUT":
                lat = 5000 + rnd() * 200
            elif rnd() < 0.01:
                lat *= 8  # tail
            status = ',"status":"SUCCESS"}\n' if code is None else (
                ',"status":"ERROR","errorCode":"%s"}\n' % code)
            rseq = nextseq(dst, src)
            rsize = 140 + int(rnd() * 900) if code is None else 170
            tr = t + lat / 1000.0
            resp = ',"requestId":"%s","service":"%s"' % (rid, svc)
            bufs[dst].append(tmpl(dst, src, "SPC_RESPONSE", "out", "sent") % (tr - 0.0003, rseq, rsize)
                             + resp + status)
            bufs[src].append(tmpl(src, dst, "SPC_RESPONSE", "in", "accepted") % (tr, rseq, rsize)
                             + resp + ',"latencyMs":%.3f' % lat + status[:-2] + "}\n")
            written += 2
        else:  # HEARTBEAT probe + reply, or EVENT
            typ = "HEARTBEAT" if r < 0.97 else "EVENT"
            seq = nextseq(src, dst)
            bufs[src].append(tmpl(src, dst, typ, "out", "sent") % (t, seq, 130) + "}\n")
            bufs[dst].append(tmpl(dst, src, typ, "in", "accepted") % (t + 0.0004, seq, 130) + "}\n")
            written += 2
            if typ == "HEARTBEAT":
                sq = nextseq(dst, src)
                bufs[dst].append(tmpl(dst, src, typ, "out", "sent") % (t + 0.0008, sq, 128) + "}\n")
                bufs[src].append(tmpl(src, dst, typ, "in", "accepted") % (t + 0.0012, sq, 128) + "}\n")
                written += 2
        if written >= next_bad:
            next_bad = written + rng.uniform(0.2, 1.8) * bad_every
            bufs[src].append(_bad_line(rng, t, src, dst))
            bad_written += 1
        if len(bufs[src]) > 2000:
            flush(src)
        if len(bufs[dst]) > 2000:
            flush(dst)
    for _, w, line in lease[li:]:
        bufs[w].append(line)
        written += 1
    for nm in names:
        flush(nm)
        files[nm].close()
    return k, written, bad_written


def _extension_records(rng, bufs, kindp, src, dst, t, mid) -> int:
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


def _quarantine(rng, buf, receiver, sender, t) -> int:
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


def _lat_base(rng, svc):
    if svc in ("echo", "fail"):
        return math.log(1.5) + rng.uniform(-0.2, 0.2)
    if svc == "calculateTax":
        return math.log(2.5) + rng.uniform(-0.2, 0.3)
    if svc == "sleep":
        return math.log(400) + rng.uniform(-0.5, 0.5)
    return math.log(rng.uniform(5, 60))


def _bad_line(rng, t, src, dst) -> str:
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


def simulate(out_dir: str, nodes: int = 8, records: int = 100_000, seed: int = 0,
             start_ts: float | None = None, minutes: float = 60.0, malformed: float = 0.0,
             workers: int | None = None) -> dict:
    """Write out_dir/<node>.jsonl journals with about `records` valid records in total
    (plus about malformed * records bad lines). Returns statistics."""
    if nodes < 2:
        raise ValueError("nodes must be at least 2")
    if records < 0:
        raise ValueError("records must be >= 0")
    if not (0.0 <= malformed < 0.5):
        raise ValueError("malformed must be a fraction in [0, 0.5)")
    t_start = time.time()
    start = DEFAULT_START if start_ts is None else float(start_ts)
    end = start + minutes * 60.0
    names = node_names(nodes)
    plan = _plan(names, seed, start, end)
    os.makedirs(out_dir, exist_ok=True)
    slices = max(1, min(MAX_SLICES, math.ceil(records / SLICE_RECORDS)))
    span = (end - start) / slices
    tmp_root = tempfile.mkdtemp(prefix=".sim-", dir=out_dir)
    jobs = []
    for k in range(slices):
        q = records // slices + (1 if k < records % slices else 0)
        jobs.append((k, plan, start + k * span, start + (k + 1) * span, q, seed, malformed,
                     os.path.join(tmp_root, str(k))))
    try:
        if workers is None:
            workers = min(os.cpu_count() or 1, slices)
        if workers > 1 and slices > 1:
            with mp.get_context("fork").Pool(workers) as pool:
                results = pool.map(_slice, jobs, chunksize=1)
        else:
            results = [_slice(j) for j in jobs]
        total_bytes = 0
        for nm in names:
            dest = os.path.join(out_dir, nm + ".jsonl")
            with open(dest, "wb") as out:
                for k in range(slices):
                    part = os.path.join(tmp_root, str(k), nm + ".jsonl")
                    with open(part, "rb") as src:
                        _copy(src, out)
                    os.unlink(part)
            total_bytes += os.path.getsize(dest)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    written = sum(r[1] for r in results)
    bad = sum(r[2] for r in results)
    return {"out_dir": os.path.abspath(out_dir), "nodes": names, "files": len(names),
            "records": written, "malformed": bad, "bytes": total_bytes, "start_ts": start,
            "end_ts": end, "seed": seed, "slices": slices, "seconds": round(time.time() - t_start, 3)}


def _copy(src, dst) -> None:
    try:
        size = os.fstat(src.fileno()).st_size
        off = 0
        while off < size:
            n = os.copy_file_range(src.fileno(), dst.fileno(), size - off)
            if n == 0:
                break
            off += n
        if off == size:
            return
        src.seek(off)
    except (AttributeError, OSError):
        src.seek(0)
        dst.seek(0, os.SEEK_END)
    shutil.copyfileobj(src, dst, 1 << 20)
