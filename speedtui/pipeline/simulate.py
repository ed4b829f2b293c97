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

from .simulate_plan import node_names, plan_leases
from .simulate_records import bad_line, extension_records, latency_base, quarantine

DEFAULT_START = 1_750_000_000.0
SLICE_RECORDS = 1_000_000
MAX_SLICES = 64


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
    lat_base = {(nm, s): latency_base(rng, s) for nm in names for s in services[nm]}
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
                written += quarantine(rng, bufs[dst], dst, probe, tt)
            continue
        if r < 0.03:  # a logical message (chunks, reliable), a durable message, health or control
            written += extension_records(rng, bufs, kindp, src, dst, t, "%x-%x" % (k + 1, rid_n))
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
            bufs[src].append(bad_line(rng, t, src, dst))
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
    plan = plan_leases(names, seed, start, end)
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
