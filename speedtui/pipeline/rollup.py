"""The Spark side of the analysis, as Spark SQL: journal records -> a batch of small roll-ups, in
one query (one Spark job per ingest). Everything after that (merging batches, the report's tables)
is the driver's work on what this returns (report.py), so a Spark Connect server runs it as well
as an embedded session.

A *batch* is what one run ingests: either every line of the inputs (``speedtui analyze --traces``)
or what is new in the journals since the last run (the incremental store, store.py). Its roll-ups
are three tables (in the store, Parquet datasets):

``rows/tag=N/day=D``
                 one hash aggregation over the parsed lines, keyed by (tag, a, b, c, d, m, x, day),
                 day the UTC date of the records (none for lines without a time and for call legs):
                 0 traffic (source, target, type, minute), 1 rejections (node, reason, peer,
                 minute), 2 SPC call legs (caller, target, requestId, service: only in the
                 query; they end in spc_done or spc_open; a control request's service is
                 CONTROL_SERVICE), 3 lease events (subject, writer, event, ts), 4 accepted
                 and other records per node (c: accepted, other, or the kind of a health or
                 control record), 5 malformed / out-of-range lines, 6 message records (source,
                 target, event, reason of a send-error or voided, minute), 7 threat records
                 (receiver, sender, event, minute), 8 durable records (node, peer, event, status); counts, bytes,
                 first and last ts, chunks (chunk envelopes of a traffic row, chunks of a message
                 row), rel (reliable messages), score (highest threat score)
``spc_done``     calls answered (or without request id) inside the batch, per (target, service):
                 counts per outcome, latency sum/max and a KLL sketch of the latencies; the same
                 from the callees' records per (caller, target, service) (10: an accepted request,
                 a sent response), which count for callers that keep no journal
``spc_open``     call legs still waiting for their other half (tag 2 the caller's, 10 the
                 callee's; caller, target, requestId)

Every aggregate of the big pass has a fixed-width buffer, so Spark keeps one hash aggregation
(a string min/max would make it sort all rows). Roll-ups merge by key (sums, min/max, sketch
union), so the report of many batches costs about what their roll-ups weigh, not their records.
The queries are SQL text: building them column by column costs thousands of Py4J round trips.
"""
from __future__ import annotations

from .records import CONTROL_SERVICE, ERROR_CODES, MAX_TS, RECEIVER_MESSAGE_EVENTS

TRAFFIC, REJECTED, CALL, LEASE, OTHER, LINES, MESSAGE, THREAT, DURABLE = 0, 1, 2, 3, 4, 5, 6, 7, 8
#: the callee's side of a call (its accepted request, its sent response): caller a, callee b, requestId c
CALLEE = 10
_RECEIVER_EVENTS = "(" + ", ".join(f"'{e}'" for e in RECEIVER_MESSAGE_EVENTS) + ")"
#: response outcome codes: 0 success, 1..6 ERROR_CODES, 7 any other (or missing) code
CODE_OTHER = len(ERROR_CODES) + 1
ERR_COLUMNS = tuple(f"err_{ec}" for ec in ERROR_CODES) + ("err_OTHER",)

ROWS_DDL = ("tag int, a string, b string, c string, d string, m bigint, x double, day date, n bigint, "
            "bytes bigint, tmin double, tmax double, nreq bigint, nresp bigint, resp_ts double, "
            "code int, lat double, chunks bigint, rel bigint, score double")
SPC_SUMS = ("calls", "answered", "successes", "errors", "no_response", *ERR_COLUMNS, "latency_count")
#: caller: null for calls seen in the caller's journal, else the caller of calls seen only in the
#: callee's (counted when the caller keeps no journal)
SPC_DONE_DDL = ("caller string, target string, service string, " + ", ".join(f"{k} bigint" for k in SPC_SUMS)
                + ", latency_sum double, latency_max_ms double, sketch binary")
#: tag: CALL (the caller's legs) or CALLEE (the callee's)
SPC_OPEN_DDL = ("tag int, a string, b string, c string, d string, nreq bigint, nresp bigint, resp_ts double, "
                "code int, lat double")


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
         kind = 'envelope' AND dir = 'in' AND outcome = 'rejected' AS rej,
         coalesce(kind = 'control' AND requestId IS NOT NULL, FALSE) AS is_control_req
  FROM {records}
), t AS (
  SELECT *, sent AND type = 'SPC_REQUEST' AS is_req, acc AND type = 'SPC_RESPONSE' AS is_resp,
         (acc AND type = 'SPC_REQUEST') OR is_control_req AS is_creq, sent AND type = 'SPC_RESPONSE' AS is_cresp FROM r
), e AS (
  SELECT explode(CASE WHEN NOT coalesce(in_win, FALSE) THEN array({LINES})
                      WHEN is_req THEN array({TRAFFIC}, {CALL}) WHEN is_cresp THEN array({TRAFFIC}, {CALLEE})
                      WHEN sent THEN array({TRAFFIC})
                      WHEN is_resp THEN array({CALL}, {OTHER}) WHEN is_creq THEN array({CALLEE}, {OTHER})
                      WHEN rej THEN array({REJECTED})
                      WHEN kind = 'lease' THEN array({LEASE}) WHEN kind = 'message' THEN array({MESSAGE})
                      WHEN kind = 'threat' THEN array({THREAT}) WHEN kind = 'durable' THEN array({DURABLE})
                      ELSE array({OTHER}) END) AS tag,
         *,
         CASE WHEN is_req OR is_resp OR is_creq OR is_cresp THEN coalesce(requestId, concat(chr(0),
              'row{int(batch_id)}-', CAST(monotonically_increasing_id() AS STRING))) END AS rid,
         IF(is_resp OR is_cresp, ts, NULL) AS rts,
         IF(is_resp OR is_cresp, CASE WHEN status = 'SUCCESS' THEN 0 {code} ELSE {CODE_OTHER} END, NULL) AS rcode,
         IF(is_resp, latencyMs, NULL) AS rlat
  FROM t
)
SELECT tag,
       CASE tag WHEN {LEASE} THEN subject WHEN {LINES} THEN NULL
                WHEN {MESSAGE} THEN IF(event IN {_RECEIVER_EVENTS}, peer, node) WHEN {CALLEE} THEN peer
                ELSE node END AS a,
       CASE WHEN tag IN ({TRAFFIC}, {CALL}, {THREAT}, {DURABLE}) THEN peer WHEN tag = {CALLEE} THEN node
            WHEN tag = {OTHER} AND acc THEN peer
            WHEN tag = {REJECTED} THEN coalesce(reason, 'unknown')
            WHEN tag = {LEASE} THEN node WHEN tag = {MESSAGE} THEN IF(event IN {_RECEIVER_EVENTS}, node, peer)
       END AS b,
       CASE tag WHEN {TRAFFIC} THEN type WHEN {REJECTED} THEN peer WHEN {CALL} THEN rid WHEN {CALLEE} THEN rid
                WHEN {LEASE} THEN event
                WHEN {LINES} THEN IF(valid, 'filtered', 'malformed')
                WHEN {OTHER} THEN IF(acc, 'accepted', IF(kind = 'envelope', 'other', kind))
                ELSE event END AS c,
       CASE WHEN tag IN ({CALL}, {CALLEE}) THEN coalesce(service, IF(is_control_req, {_q(CONTROL_SERVICE)}, NULL))
            WHEN tag = {MESSAGE} AND event IN ('send-error', 'voided') THEN reason
            WHEN tag = {DURABLE} THEN status END AS d,
       IF(tag IN ({TRAFFIC}, {REJECTED}, {MESSAGE}, {THREAT}), CAST(floor(ts / 60) * 60 AS BIGINT), NULL) AS m,
       IF(tag = {LEASE}, ts, NULL) AS x,
       IF(tag IN ({CALL}, {CALLEE}) OR NOT coalesce(ts >= 0 AND ts < {MAX_TS!r}, FALSE), NULL,
          date_add(DATE'1970-01-01', CAST(floor(ts / 86400) AS INT))) AS day,
       count(1) AS n, sum(IF(tag IN ({TRAFFIC}, {MESSAGE}), coalesce(size, 0), 0)) AS bytes,
       min(IF(tag = {LINES}, NULL, ts)) AS tmin, max(IF(tag = {LINES}, NULL, ts)) AS tmax,
       sum(IF((tag = {CALL} AND is_req) OR (tag = {CALLEE} AND is_creq), 1, 0)) AS nreq,
       sum(IF((tag = {CALL} AND is_resp) OR (tag = {CALLEE} AND is_cresp), 1, 0)) AS nresp,
       min(IF(tag IN ({CALL}, {CALLEE}), rts, NULL)) AS resp_ts, min_by(IF(tag IN ({CALL}, {CALLEE}), rcode, NULL), rts) AS code,
       min_by(IF(tag = {CALL}, rlat, NULL), rts) AS lat,
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
    """CALL rows of one batch -> calls resolved inside it, per (target, service); CALLEE rows -> per
    (caller, target, service) (used where the caller keeps no journal)."""
    return f"""
SELECT IF(tag = {CALLEE}, a, NULL) AS caller, b AS target, coalesce(d, '(unknown)') AS service, {_call_aggs(accuracy)}
FROM (SELECT tag, a, b, d, IF(nresp > 0, 1, 0) AS answered, code, lat FROM {rows}
      WHERE tag IN ({CALL}, {CALLEE}) AND {RESOLVED})
GROUP BY 1, 2, 3"""



ROW_COLUMNS = tuple(c.strip().split(" ")[0] for c in ROWS_DDL.split(","))
OPEN_COLUMNS = tuple(c.strip().split(" ")[0] for c in SPC_OPEN_DDL.split(","))
#: the ingest's result rows of calls resolved inside the batch (spc_done): b = target, d = service
DONE = 9


def ingest_sql(records: str, since=None, until=None, batch_id: int = 0, accuracy: int = 10000) -> str:
    """Records -> everything a batch keeps, as ONE query (one Spark job per ingest): the roll-up
    rows, the call legs still open (tags CALL and CALLEE) and, as tag DONE rows with an `spc` struct,
    the calls resolved inside the batch per (caller if seen by the callee only, target, service). The aggregation is written once and read by
    both branches (Spark reuses its shuffle)."""
    done_cols = ", ".join(f"{c.split(' ')[0]}: {c.split(' ')[1].upper()}"
                          for c in (x.strip() for x in SPC_DONE_DDL.split(","))
                          if c.split(" ")[0] not in ("caller", "target", "service"))
    done_names = [c.strip().split(" ")[0] for c in SPC_DONE_DDL.split(",")][3:]
    struct = "named_struct(" + ", ".join(f"'{n}', {n}" for n in done_names) + ")"
    rows = ", ".join(ROW_COLUMNS)
    nulls = ", ".join(f"NULL AS {c}" if c not in ("tag", "a", "b", "d") else
                      {"tag": f"{DONE} AS tag", "a": "caller AS a", "b": "target AS b", "d": "service AS d"}[c]
                      for c in ROW_COLUMNS)
    return f"""
WITH agg AS ({batch_rows_sql(records, since, until, batch_id)})
SELECT {rows}, CAST(NULL AS STRUCT<{done_cols}>) AS spc FROM agg WHERE tag NOT IN ({CALL}, {CALLEE}) OR NOT {RESOLVED}
UNION ALL
SELECT {nulls}, {struct} AS spc FROM ({spc_done_sql('agg', accuracy)}) done"""
