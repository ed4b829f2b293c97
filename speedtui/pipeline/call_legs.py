"""The SPC calls of every batch, merged: the open legs per call (`open_calls`) and the finished
calls per (target, service) with their latency sketches (`merged_done`). The report reads them,
and compaction (batches.compact) merges batches with them; they live apart from both so that
neither imports the other."""

from __future__ import annotations

from .rollup import CALLEE, CODE_OTHER, ERR_COLUMNS, SPC_SUMS


def _sketch(accuracy: int):
    from datasketches import kll_doubles_sketch
    return kll_doubles_sketch(int(accuracy))


def _leg_key(r: dict) -> tuple:
    return r["resp_ts"] is None, r["resp_ts"] if r["resp_ts"] is not None else 0.0


def open_calls(opens: list, merge_only: bool = False) -> list[dict]:
    """The open legs of every batch per call (side tag, caller a, target b, requestId c). merge_only:
    the legs merged per (tag, a, b, c, d) (SPC_OPEN columns, for compaction); else one row per call:
    tag, a, b, service (the request's, the largest name if requests disagree, else the response's),
    answered, code, lat (of the first response)."""
    import pyarrow as pa
    legs = pa.concat_tables(opens).to_pylist() if opens else []
    per: dict[tuple, dict] = {}
    for r in legs:
        key = (r["tag"], r["a"], r["b"], r["c"]) + ((r["d"],) if merge_only else ())
        m = per.get(key)
        if m is None:
            m = per[key] = {"tag": r["tag"], "a": r["a"], "b": r["b"], "c": r["c"], "d": r["d"], "nreq": 0, "nresp": 0,
                            "resp_ts": None, "code": None, "lat": None, "req_service": None, "resp_service": None}
        m["nreq"] += r["nreq"] or 0
        m["nresp"] += r["nresp"] or 0
        if r["resp_ts"] is not None and _leg_key(r) < _leg_key(m):
            m["resp_ts"], m["code"], m["lat"] = r["resp_ts"], r["code"], r["lat"]
        for side, count in (("req_service", r["nreq"]), ("resp_service", r["nresp"])):
            if count and r["d"] is not None and (m[side] is None or r["d"] > m[side]):
                m[side] = r["d"]
    if merge_only:
        return [{k: m[k] for k in ("tag", "a", "b", "c", "d", "nreq", "nresp", "resp_ts", "code", "lat")}
                for m in per.values()]
    return [{"tag": m["tag"], "a": m["a"], "b": m["b"], "service": m["req_service"] or m["resp_service"] or "(unknown)",
             "answered": 1 if m["nresp"] > 0 else 0, "code": m["code"], "lat": m["lat"]} for m in per.values()]


def merged_done(dones: list, calls: list[dict], accuracy: int, keep_callers: bool = False) -> list[dict]:
    """spc_done rows of every batch plus resolved calls (open_calls) -> one row per (target,
    service), or with keep_callers per (caller, target, service) (caller null for the callers'
    records): sums, latency sum and max, and the merged sketch (a kll_doubles_sketch)."""
    import pyarrow as pa
    from datasketches import kll_doubles_sketch
    per: dict[tuple, dict] = {}

    def slot(caller, target, service) -> dict:
        key = (caller or "", target, service) if keep_callers else (target, service)
        g = per.get(key)
        if g is None:
            g = per[key] = {"caller": caller if keep_callers else None, "target": target, "service": service,
                            **{k: 0 for k in SPC_SUMS},
                                          "latency_sum": None, "latency_max_ms": None, "sketch": _sketch(accuracy)}
        return g

    def latency(g, total, top) -> None:
        if total is not None:
            g["latency_sum"] = total if g["latency_sum"] is None else g["latency_sum"] + total
        if top is not None and (g["latency_max_ms"] is None or top > g["latency_max_ms"]):
            g["latency_max_ms"] = top

    for r in (pa.concat_tables(dones).to_pylist() if dones else []):
        g = slot(r["caller"], r["target"], r["service"])
        for k in SPC_SUMS:
            g[k] += r[k] or 0
        latency(g, r["latency_sum"], r["latency_max_ms"])
        if r["sketch"] is not None:
            g["sketch"].merge(kll_doubles_sketch.deserialize(r["sketch"]))
    for c in calls:
        g = slot(c["a"] if c["tag"] == CALLEE else None, c["b"], c["service"])
        g["calls"] += 1
        answered, code = c["answered"], c["code"]
        g["answered"] += answered
        g["no_response"] += 1 - answered
        if answered and code is not None:
            g["successes" if code == 0 else "errors"] += 1
            if code:
                g[ERR_COLUMNS[code - 1] if code < CODE_OTHER else "err_OTHER"] += 1
        if answered and c["lat"] is not None:
            g["latency_count"] += 1
            latency(g, c["lat"], c["lat"])
            g["sketch"].update(c["lat"])
    return [per[k] for k in sorted(per)]
