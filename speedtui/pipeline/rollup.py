"""The Spark side of the analysis, as Spark SQL: journal records -> a batch of small roll-ups (one
pass), and the roll-ups of any number of batches -> the report's tables.

A *batch* is what one run ingests: either every line of the inputs (``speedtui analyze --traces``)
or what is new in the journals since the last run (the incremental store, store.py). Its roll-ups
are a few Parquet datasets:

``rows/tag=N``   one hash aggregation over the parsed lines, keyed by (tag, a, b, c, d, m, x):
                 0 traffic (source, target, type, minute), 1 rejections (node, reason, peer,
                 minute), 2 SPC call legs (caller, target, requestId, service; only until the
                 batch is split, below), 3 lease events (subject, writer, event, ts), 4 accepted
                 and other records per node, 5 malformed / out-of-range lines; counts, bytes,
                 first and last ts
``spc_done``     calls answered (or without request id) inside the batch, per (target, service):
                 counts per outcome, latency sum/max and a KLL sketch of the latencies
``spc_open``     call legs still waiting for their other half (caller, target, requestId)

Every aggregate of the big pass has a fixed-width buffer, so Spark keeps one hash aggregation
(a string min/max would make it sort all rows). Roll-ups merge by key (sums, min/max, sketch
union), so the tables of many batches cost about what their roll-ups weigh, not their records.
The queries are SQL text: building them column by column costs thousands of Py4J round trips.
Each function takes and returns SQL over named views (``FROM {rows}``).
"""
from __future__ import annotations

from .records import DEFAULT_LABEL, ERROR_CODES, REASON_LABELS

TRAFFIC, REJECTED, CALL, LEASE, OTHER, LINES = 0, 1, 2, 3, 4, 5
#: response outcome codes: 0 success, 1..6 ERROR_CODES, 7 any other (or missing) code
CODE_OTHER = len(ERROR_CODES) + 1
ERR_COLUMNS = tuple(f"err_{ec}" for ec in ERROR_CODES) + ("err_OTHER",)

ROWS_DDL = ("tag int, a string, b string, c string, d string, m bigint, x double, n bigint, "
            "bytes bigint, tmin double, tmax double, nreq bigint, nresp bigint, resp_ts double, "
            "code int, lat double")
SPC_SUMS = ("calls", "answered", "successes", "errors", "no_response", *ERR_COLUMNS, "latency_count")
SPC_DONE_DDL = ("target string, service string, " + ", ".join(f"{k} bigint" for k in SPC_SUMS)
                + ", latency_sum double, latency_max_ms double, sketch binary")
SPC_OPEN_DDL = "a string, b string, c string, d string, nreq bigint, nresp bigint, resp_ts double, code int, lat double"


def _q(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def batch_rows_sql(records: str, since=None, until=None, batch_id: int = 0) -> str:
    """Records (a view of records.read_records) -> the aggregated rows of one batch."""
    win = "TRUE"
    if since is not None:
        win += f" AND ts >= {float(since)!r}"
    if until is not None:
        win += f" AND ts < {float(until)!r}"
    code = " ".join(f"WHEN coalesce(errorCode, 'UNKNOWN') = {_q(ec)} THEN {i + 1}" for i, ec in enumerate(ERROR_CODES))
    return f"""
WITH r AS (
  SELECT *, valid AND {win} AS in_win,
         kind = 'envelope' AND dir = 'out' AND outcome = 'sent' AS sent,
         kind = 'envelope' AND dir = 'in' AND outcome = 'accepted' AS acc,
         kind = 'envelope' AND dir = 'in' AND outcome = 'rejected' AS rej
  FROM {records}
), t AS (
  SELECT *, sent AND type = 'SPC_REQUEST' AS is_req, acc AND type = 'SPC_RESPONSE' AS is_resp FROM r
), e AS (
  SELECT explode(CASE WHEN NOT coalesce(in_win, FALSE) THEN array({LINES})
                      WHEN is_req THEN array({TRAFFIC}, {CALL}) WHEN sent THEN array({TRAFFIC})
                      WHEN is_resp THEN array({CALL}, {OTHER}) WHEN rej THEN array({REJECTED})
                      WHEN kind = 'lease' THEN array({LEASE}) ELSE array({OTHER}) END) AS tag,
         *,
         CASE WHEN is_req OR is_resp THEN coalesce(requestId, concat(chr(0), 'row{int(batch_id)}-',
              CAST(monotonically_increasing_id() AS STRING))) END AS rid,
         IF(is_resp, ts, NULL) AS rts,
         IF(is_resp, CASE WHEN status = 'SUCCESS' THEN 0 {code} ELSE {CODE_OTHER} END, NULL) AS rcode,
         IF(is_resp, latencyMs, NULL) AS rlat
  FROM t
)
SELECT tag,
       CASE tag WHEN {LEASE} THEN subject WHEN {LINES} THEN NULL ELSE node END AS a,
       CASE WHEN tag IN ({TRAFFIC}, {CALL}) THEN peer WHEN tag = {REJECTED} THEN coalesce(reason, 'unknown')
            WHEN tag = {LEASE} THEN node END AS b,
       CASE tag WHEN {TRAFFIC} THEN type WHEN {REJECTED} THEN peer WHEN {CALL} THEN rid WHEN {LEASE} THEN event
                WHEN {LINES} THEN IF(valid, 'filtered', 'malformed')
                WHEN {OTHER} THEN IF(acc, 'accepted', 'other') END AS c,
       IF(tag = {CALL}, service, NULL) AS d,
       IF(tag IN ({TRAFFIC}, {REJECTED}), CAST(floor(ts / 60) * 60 AS BIGINT), NULL) AS m,
       IF(tag = {LEASE}, ts, NULL) AS x,
       count(1) AS n, sum(IF(tag = {TRAFFIC}, coalesce(size, 0), 0)) AS bytes,
       min(IF(tag = {LINES}, NULL, ts)) AS tmin, max(IF(tag = {LINES}, NULL, ts)) AS tmax,
       sum(IF(tag = {CALL} AND is_req, 1, 0)) AS nreq, sum(IF(tag = {CALL} AND is_resp, 1, 0)) AS nresp,
       min(rts) AS resp_ts, min_by(rcode, rts) AS code, min_by(rlat, rts) AS lat
FROM e GROUP BY 1, 2, 3, 4, 5, 6, 7"""


def _call_aggs(accuracy: int) -> str:
    """Per (target, service) aggregates of resolved calls (columns answered, code, lat)."""
    errs = [f"sum(IF(answered = 1 AND code = {i + 1}, 1, 0)) AS err_{ec}" for i, ec in enumerate(ERROR_CODES)]
    return ", ".join([
        "count(1) AS calls", "sum(answered) AS answered",
        "sum(IF(answered = 1 AND code = 0, 1, 0)) AS successes",
        "sum(IF(answered = 1 AND code != 0, 1, 0)) AS errors",
        "sum(IF(answered = 0, 1, 0)) AS no_response", *errs,
        f"sum(IF(answered = 1 AND code = {CODE_OTHER}, 1, 0)) AS err_OTHER",
        "count(lat) AS latency_count", "sum(lat) AS latency_sum", "max(lat) AS latency_max_ms",
        f"kll_sketch_agg_double(lat, {int(accuracy)}) AS sketch"])


RESOLVED = "((nreq > 0 AND nresp > 0) OR substr(c, 1, 1) = chr(0))"


def spc_done_sql(rows: str, accuracy: int) -> str:
    """CALL rows of one batch -> calls resolved inside it, per (target, service)."""
    return f"""
SELECT b AS target, coalesce(d, '(unknown)') AS service, {_call_aggs(accuracy)}
FROM (SELECT b, d, IF(nresp > 0, 1, 0) AS answered, code, lat FROM {rows} WHERE tag = {CALL} AND {RESOLVED})
GROUP BY 1, 2"""


def spc_open_sql(rows: str) -> str:
    return f"SELECT a, b, c, d, nreq, nresp, resp_ts, code, lat FROM {rows} WHERE tag = {CALL} AND NOT {RESOLVED}"


def resolve_open_sql(open_legs: str, accuracy: int) -> str:
    """Open legs of all batches -> calls per (target, service), in spc_done's columns. A call's
    service is its request's (the largest name if requests disagree), else its response's."""
    calls = f"""SELECT b, max(IF(nreq > 0, d, NULL)) AS req_service, max(IF(nresp > 0, d, NULL)) AS resp_service,
               max(IF(nresp > 0, 1, 0)) AS answered, min_by(named_struct('code', code, 'lat', lat), resp_ts) AS r
               FROM {open_legs} GROUP BY a, b, c"""
    return f"""
SELECT b AS target, coalesce(req_service, resp_service, '(unknown)') AS service, {_call_aggs(accuracy)}
FROM (SELECT b, req_service, resp_service, answered, r.code AS code, r.lat AS lat FROM ({calls}) calls) resolved
GROUP BY 1, 2"""


def merge_spc_sql(done: str) -> str:
    """spc_done rows of any number of batches -> one row per (target, service), sketches merged."""
    sums = ", ".join(f"sum({k}) AS {k}" for k in SPC_SUMS)
    return f"""
SELECT target, service, {sums}, sum(latency_sum) AS latency_sum, max(latency_max_ms) AS latency_max_ms,
       kll_merge_agg_double(sketch) AS sketch
FROM {done} GROUP BY 1, 2"""


def spc_table_sql(merged: str) -> str:
    q = lambda p: f"IF(latency_count > 0, kll_sketch_get_quantile_double(sketch, {p}), NULL)"  # noqa: E731
    return f"""
SELECT target, service, {', '.join(SPC_SUMS)}, try_divide(latency_sum, latency_count) AS latency_mean_ms, latency_max_ms,
       successes / calls AS success_rate, {q(0.5)} AS latency_p50_ms, {q(0.95)} AS latency_p95_ms,
       {q(0.99)} AS latency_p99_ms
FROM {merged}"""


def traffic_sql(rows: str) -> str:
    return f"""
SELECT a AS source, b AS target, c AS type, m AS minute, sum(n) AS envelopes, sum(bytes) AS bytes
FROM {rows} WHERE tag = {TRAFFIC} GROUP BY 1, 2, 3, 4"""


def security_sql(rows: str, burst_threshold: int) -> str:
    labels = " ".join(f"WHEN reason = {_q(k)} THEN {_q(v)}" for k, v in REASON_LABELS.items()
                      if not k.startswith("replayed_"))
    return f"""
WITH per_peer AS (
  SELECT a, b, c, m, sum(n) AS n, min(tmin) AS tmin, max(tmax) AS tmax
  FROM {rows} WHERE tag = {REJECTED} GROUP BY 1, 2, 3, 4
), g AS (
  SELECT a AS node, b AS reason, m AS minute, sum(n) AS rejections, count(c) AS peers,
         slice(sort_array(collect_list(c)), 1, 5) AS peers_sample, min(tmin) AS first_ts, max(tmax) AS last_ts
  FROM per_peer GROUP BY 1, 2, 3
)
SELECT *, rejections >= {int(burst_threshold)} AS burst,
       CASE WHEN startswith(reason, 'replayed_') THEN 'replay' {labels} ELSE {_q(DEFAULT_LABEL)} END AS label
FROM g"""


def driver_facts_sql(rows: str, security: str, spc: str) -> str:
    """Everything the summary needs as one small collect: per-node totals, lease events, traffic
    per minute and per link, rejections per minute and reason, bursts and the spc rows; each
    part is a JSON object tagged with its name."""
    part = lambda name, sql: f"SELECT {_q(name)} AS part, to_json(struct(*)) AS j FROM ({sql})"  # noqa: E731
    parts = [
        part("facts", f"""SELECT tag, IF(tag = {LEASE}, b, a) AS node, IF(tag IN ({OTHER}, {LINES}), c, NULL) AS c,
                          sum(n) AS n, sum(bytes) AS bytes, min(tmin) AS tmin, max(tmax) AS tmax
                          FROM {rows} WHERE tag IN ({TRAFFIC}, {REJECTED}, {OTHER}, {LINES}) GROUP BY 1, 2, 3"""),
        part("lease", f"SELECT a, b, c, x, n, tmin, tmax FROM {rows} WHERE tag = {LEASE}"),
        part("minutes", f"SELECT m, sum(n) AS e, sum(bytes) AS b FROM {rows} WHERE tag = {TRAFFIC} GROUP BY 1"),
        part("links", f"""SELECT a AS source, b AS target, sum(n) AS envelopes, sum(bytes) AS bytes,
                          sum(IF(c = 'MESSAGE', n, 0)) AS messages, sum(IF(c = 'SPC_REQUEST', n, 0)) AS spc_requests,
                          min(tmin) AS first_ts, max(tmax) AS last_ts
                          FROM {rows} WHERE tag = {TRAFFIC} GROUP BY 1, 2"""),
        part("rejected", f"SELECT minute, reason, sum(rejections) AS n FROM {security} GROUP BY 1, 2"),
        part("bursts", f"SELECT node, reason, minute, rejections, label FROM {security} WHERE burst"),
        part("spc", f"SELECT * FROM {spc}"),
    ]
    return "\nUNION ALL\n".join(parts)
