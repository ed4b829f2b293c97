"""The Spark side of the analysis, as Spark SQL: journal records -> a batch of small roll-ups (one
pass), and the roll-ups of any number of batches -> the report's tables.

A *batch* is what one run ingests: either every line of the inputs (``speedtui analyze --traces``)
or what is new in the journals since the last run (the incremental store, store.py). Its roll-ups
are a few Parquet datasets:

``rows/tag=N/day=D``
                 one hash aggregation over the parsed lines, keyed by (tag, a, b, c, d, m, x, day),
                 day the UTC date of the records (none for lines without a time and for call legs):
                 0 traffic (source, target, type, minute), 1 rejections (node, reason, peer,
                 minute), 2 SPC call legs (caller, target, requestId, service; only until the
                 batch is split, below), 3 lease events (subject, writer, event, ts), 4 accepted
                 and other records per node (c: accepted, other, or the kind of a health or
                 control record), 5 malformed / out-of-range lines, 6 message records (source,
                 target, event, reason of a send-error or voided, minute), 7 threat records
                 (receiver, sender, event, minute), 8 durable records (node, peer, event, status); counts, bytes,
                 first and last ts, chunks (chunk envelopes of a traffic row, chunks of a message
                 row), rel (reliable messages), score (highest threat score)
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

from .records import (DEFAULT_LABEL, ERROR_CODES, MESSAGE_COLUMNS, REASON_LABELS, RECEIVER_MESSAGE_EVENTS,
                      THREAT_EVENTS)

TRAFFIC, REJECTED, CALL, LEASE, OTHER, LINES, MESSAGE, THREAT, DURABLE = 0, 1, 2, 3, 4, 5, 6, 7, 8
_RECEIVER_EVENTS = "(" + ", ".join(f"'{e}'" for e in RECEIVER_MESSAGE_EVENTS) + ")"
#: response outcome codes: 0 success, 1..6 ERROR_CODES, 7 any other (or missing) code
CODE_OTHER = len(ERROR_CODES) + 1
ERR_COLUMNS = tuple(f"err_{ec}" for ec in ERROR_CODES) + ("err_OTHER",)

ROWS_DDL = ("tag int, a string, b string, c string, d string, m bigint, x double, day date, n bigint, "
            "bytes bigint, tmin double, tmax double, nreq bigint, nresp bigint, resp_ts double, "
            "code int, lat double, chunks bigint, rel bigint, score double")
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
                      WHEN kind = 'lease' THEN array({LEASE}) WHEN kind = 'message' THEN array({MESSAGE})
                      WHEN kind = 'threat' THEN array({THREAT}) WHEN kind = 'durable' THEN array({DURABLE})
                      ELSE array({OTHER}) END) AS tag,
         *,
         CASE WHEN is_req OR is_resp THEN coalesce(requestId, concat(chr(0), 'row{int(batch_id)}-',
              CAST(monotonically_increasing_id() AS STRING))) END AS rid,
         IF(is_resp, ts, NULL) AS rts,
         IF(is_resp, CASE WHEN status = 'SUCCESS' THEN 0 {code} ELSE {CODE_OTHER} END, NULL) AS rcode,
         IF(is_resp, latencyMs, NULL) AS rlat
  FROM t
)
SELECT tag,
       CASE tag WHEN {LEASE} THEN subject WHEN {LINES} THEN NULL
                WHEN {MESSAGE} THEN IF(event IN {_RECEIVER_EVENTS}, peer, node) ELSE node END AS a,
       CASE WHEN tag IN ({TRAFFIC}, {CALL}, {THREAT}, {DURABLE}) THEN peer
            WHEN tag = {REJECTED} THEN coalesce(reason, 'unknown')
            WHEN tag = {LEASE} THEN node WHEN tag = {MESSAGE} THEN IF(event IN {_RECEIVER_EVENTS}, node, peer)
       END AS b,
       CASE tag WHEN {TRAFFIC} THEN type WHEN {REJECTED} THEN peer WHEN {CALL} THEN rid WHEN {LEASE} THEN event
                WHEN {LINES} THEN IF(valid, 'filtered', 'malformed')
                WHEN {OTHER} THEN IF(acc, 'accepted', IF(kind = 'envelope', 'other', kind))
                ELSE event END AS c,
       CASE WHEN tag = {CALL} THEN service WHEN tag = {MESSAGE} AND event IN ('send-error', 'voided') THEN reason
            WHEN tag = {DURABLE} THEN status END AS d,
       IF(tag IN ({TRAFFIC}, {REJECTED}, {MESSAGE}, {THREAT}), CAST(floor(ts / 60) * 60 AS BIGINT), NULL) AS m,
       IF(tag = {LEASE}, ts, NULL) AS x,
       IF(tag = {CALL}, NULL, date_add(DATE'1970-01-01', CAST(floor(ts / 86400) AS INT))) AS day,
       count(1) AS n, sum(IF(tag IN ({TRAFFIC}, {MESSAGE}), coalesce(size, 0), 0)) AS bytes,
       min(IF(tag = {LINES}, NULL, ts)) AS tmin, max(IF(tag = {LINES}, NULL, ts)) AS tmax,
       sum(IF(tag = {CALL} AND is_req, 1, 0)) AS nreq, sum(IF(tag = {CALL} AND is_resp, 1, 0)) AS nresp,
       min(rts) AS resp_ts, min_by(rcode, rts) AS code, min_by(rlat, rts) AS lat,
       sum(CASE tag WHEN {TRAFFIC} THEN IF(chunks IS NULL, 0, 1) WHEN {MESSAGE} THEN coalesce(chunks, 1)
                    ELSE 0 END) AS chunks,
       sum(IF(tag = {MESSAGE} AND coalesce(reliable, FALSE), 1, 0)) AS rel,
       max(IF(tag = {THREAT}, score, NULL)) AS score
FROM e GROUP BY 1, 2, 3, 4, 5, 6, 7, 8"""


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
        part("facts", f"""SELECT tag, CASE tag WHEN {LEASE} THEN b WHEN {MESSAGE} THEN IF(c IN {_RECEIVER_EVENTS}, b, a)
                                           ELSE a END AS node, IF(tag IN ({OTHER}, {LINES}), c, NULL) AS c,
                          sum(n) AS n, sum(bytes) AS bytes, sum(chunks) AS chunks, min(tmin) AS tmin,
                          max(tmax) AS tmax
                          FROM {rows} WHERE tag NOT IN ({CALL}, {LEASE}) GROUP BY 1, 2, 3"""),
        part("lease", f"SELECT a, b, c, x, n, tmin, tmax FROM {rows} WHERE tag = {LEASE}"),
        part("minutes", f"SELECT m, sum(n) AS e, sum(bytes) AS b FROM {rows} WHERE tag = {TRAFFIC} GROUP BY 1"),
        part("links", f"""SELECT a AS source, b AS target, sum(n) AS envelopes, sum(bytes) AS bytes,
                          sum(IF(c = 'MESSAGE', n, 0)) AS messages, sum(IF(c = 'SPC_REQUEST', n, 0)) AS spc_requests,
                          min(tmin) AS first_ts, max(tmax) AS last_ts
                          FROM {rows} WHERE tag = {TRAFFIC} GROUP BY 1, 2"""),
        part("rejected", f"SELECT minute, reason, sum(rejections) AS n FROM {security} GROUP BY 1, 2"),
        part("bursts", f"SELECT node, reason, minute, rejections, label FROM {security} WHERE burst"),
        part("spc", f"SELECT * FROM {spc}"),
        part("msg_links", f"""SELECT a AS source, b AS target, c AS event, sum(n) AS n, sum(rel) AS rel,
                              sum(chunks) AS chunks, sum(bytes) AS bytes FROM {rows} WHERE tag = {MESSAGE}
                              GROUP BY 1, 2, 3"""),
        part("msg_minutes", f"SELECT m AS minute, c AS event, sum(n) AS n FROM {rows} WHERE tag = {MESSAGE} GROUP BY 1, 2"),
        part("msg_reasons", f"""SELECT c AS event, coalesce(d, 'unknown') AS reason, sum(n) AS n FROM {rows}
                                WHERE tag = {MESSAGE} AND c IN ('send-error', 'voided') GROUP BY 1, 2"""),
        part("threat_pairs", f"""SELECT a AS receiver, b AS sender, c AS event, sum(n) AS n, max(score) AS score,
                                 min(tmin) AS first_ts, max(tmax) AS last_ts FROM {rows} WHERE tag = {THREAT}
                                 GROUP BY 1, 2, 3"""),
        part("threat_minutes", f"""SELECT m AS minute, c AS event, sum(n) AS n, max(score) AS score FROM {rows}
                                   WHERE tag = {THREAT} GROUP BY 1, 2"""),
        part("quarantined", f"""SELECT a AS receiver, c AS sender, sum(n) AS n, min(tmin) AS first_ts,
                                max(tmax) AS last_ts FROM {rows} WHERE tag = {REJECTED} AND b = 'quarantined'
                                GROUP BY 1, 2"""),
        part("durable", f"""SELECT a AS node, b AS peer, c AS event, d AS status, sum(n) AS n FROM {rows}
                            WHERE tag = {DURABLE} GROUP BY 1, 2, 3, 4"""),
    ]
    return "\nUNION ALL\n".join(parts)


def messages_sql(rows: str) -> str:
    """Logical messages per (source, target, minute): the sender's events (sent, retransmitted,
    received = acknowledged, send-error) and the receiver's (delivered, duplicate, voided)."""
    counts = ", ".join(f"sum(IF(c = {_q(ev)}, n, 0)) AS {name}" for name, ev in MESSAGE_COLUMNS)
    return f"""
SELECT a AS source, b AS target, m AS minute, {counts},
       sum(IF(c = 'sent', rel, 0)) AS reliable, sum(IF(c = 'sent', chunks, 0)) AS chunks,
       sum(IF(c = 'sent', bytes, 0)) AS bytes, min(tmin) AS first_ts, max(tmax) AS last_ts
FROM {rows} WHERE tag = {MESSAGE} GROUP BY 1, 2, 3"""


def threats_sql(rows: str) -> str:
    """Threat-score changes per (receiver, sender, minute) with the highest score, and the
    envelopes the receiver removed unread (rejected, reason quarantined)."""
    counts = ", ".join(f"sum(IF(c = {_q(ev)}, n, 0)) AS {ev}" for ev in THREAT_EVENTS)
    zeros = ", ".join(f"0 AS {ev}" for ev in THREAT_EVENTS)
    sums = ", ".join(f"sum({ev}) AS {ev}" for ev in THREAT_EVENTS)
    return f"""
WITH u AS (
  SELECT a AS receiver, b AS sender, m AS minute, {counts}, max(score) AS max_score,
         CAST(0 AS BIGINT) AS quarantined_rejections, min(tmin) AS first_ts, max(tmax) AS last_ts
  FROM {rows} WHERE tag = {THREAT} GROUP BY 1, 2, 3
  UNION ALL
  SELECT a, c, m, {zeros}, CAST(NULL AS DOUBLE), sum(n), min(tmin), max(tmax)
  FROM {rows} WHERE tag = {REJECTED} AND b = 'quarantined' GROUP BY 1, 2, 3
)
SELECT receiver, sender, minute, {sums}, max(max_score) AS max_score,
       sum(quarantined_rejections) AS quarantined_rejections, min(first_ts) AS first_ts, max(last_ts) AS last_ts
FROM u GROUP BY 1, 2, 3"""


def durable_sql(rows: str) -> str:
    return f"""
SELECT a AS node, b AS peer, c AS event, d AS status, sum(n) AS records, min(tmin) AS first_ts,
       max(tmax) AS last_ts
FROM {rows} WHERE tag = {DURABLE} GROUP BY 1, 2, 3, 4"""
