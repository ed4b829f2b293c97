"""The pipeline's own copy of the journal record model (wire contract section 8).

The pipeline must run under ``spark-submit`` without the rest of the project, so it keeps its own
copies of the field names, reject reasons and lease events instead of importing the runtime's;
``tests/pipeline/test_pipeline_pins.py`` pins these copies to the runtime's definitions.
"""
from __future__ import annotations

#: journal fields the analysis reads, with their Spark SQL types (``envelope`` is never parsed)
FIELDS = (("kind", "string"), ("ts", "double"), ("node", "string"), ("dir", "string"),
          ("peer", "string"), ("type", "string"), ("seq", "bigint"), ("size", "bigint"),
          ("outcome", "string"), ("reason", "string"), ("requestId", "string"),
          ("service", "string"), ("status", "string"), ("errorCode", "string"),
          ("latencyMs", "double"), ("subject", "string"), ("event", "string"),
          ("chunks", "bigint"), ("reliable", "boolean"), ("score", "double"), ("stream", "string"),
          ("id", "bigint"))
#: fields the runtime writes that the analysis never reads (a logical message is counted by its
#: records' events, a chunk envelope by its "chunks" field)
UNREAD_FIELDS = ("envelope", "messageId", "chunk", "attempt", "detail", "operator", "command", "arguments",
                 "instance", "index")
ENVELOPE_REQUIRED = ("dir", "peer", "type", "outcome")
LEASE_REQUIRED = ("subject", "event")
#: every record kind of the journal with the fields (beyond ts and node) it must have; a record of
#: any other kind is malformed, as it is for the runtime's parser
RECORD_KINDS = ("envelope", "lease", "health", "control", "message", "threat", "durable")
KIND_REQUIRED = {"envelope": ENVELOPE_REQUIRED, "lease": LEASE_REQUIRED, "health": ("event",),
                 "control": ("peer", "outcome"), "message": ("dir", "peer", "event"),
                 "threat": ("peer", "event", "score"), "durable": ("peer", "event", "stream", "id")}
#: kinds only counted (summary "other_records"); message, threat and durable records have tables
COUNTED_KINDS = ("health", "control")

REJECT_REASONS = ("unauthorized", "bad_size", "bad_version", "bad_tag", "wrong_target",
                  "unknown_sender", "stale_timestamp", "replayed_nonce", "replayed_sequence",
                  "bad_sequence", "unexpected_response", "too_large", "bad_payload", "bad_file")
LEASE_EVENTS = ("registered", "reclaimed", "renewed_late", "lost", "deregistered",
                "observed_join", "observed_expiry", "observed_leave", "reaped")
#: reasons the extensions add (docs/PROTOCOL.md), per extension
EXTENSION_REASONS = {
    "chunks": ("chunk_missing", "chunk_chain", "chunk_invalid", "chunk_expired", "message_too_large",
               "reassembly_full"),
    "reliable": (),
    "quota": ("quarantined",),
    "control": ("control_malformed", "control_unsigned", "control_untrusted", "control_bad_signature",
                "control_wrong_target", "control_wrong_requester", "control_expired", "control_replayed",
                "control_refused"),
    "durable": ("durable_duplicate", "durable_bad_receipt", "durable_streams_full"),
}
MESSAGE_EVENTS = ("sent", "retransmitted", "received", "send-error", "delivered", "duplicate", "voided")
THREAT_EVENTS = ("raised", "quarantined", "released", "lifted")
#: the messages table's count columns and the event each counts; the receiver's events (its node is
#: the link's target; for the sender's events the writer is the source)
MESSAGE_COLUMNS = (("sent", "sent"), ("retransmissions", "retransmitted"), ("acknowledged", "received"),
                   ("send_errors", "send-error"), ("delivered", "delivered"), ("duplicates", "duplicate"),
                   ("voided", "voided"))
RECEIVER_MESSAGE_EVENTS = ("delivered", "duplicate", "voided")
#: durable events the sender journals (node = sender, peer = target); the others the receiver
SENDER_DURABLE_EVENTS = ("stored", "delivered", "receipt", "send_error")
DURABLE_EVENTS = ("stored", "delivered", "handled", "duplicate", "receipt", "send_error")
#: the service of a control request (the `control` extension) in the SPC tables: its callee's
#: request leg is the target's control record with a request id (written only for an authentic
#: request, whose answer follows as an ordinary SPC_RESPONSE); no service name has parentheses
CONTROL_SERVICE = "(control)"
ERROR_CODES = ("SERVICE_NOT_FOUND", "ACCESS_DENIED", "INVALID_ARGUMENTS", "EXECUTION_FAILED",
               "TIMEOUT", "INTERNAL_ERROR")

TERMINAL_EVENTS = ("deregistered", "observed_leave", "observed_expiry", "reaped")
GRACEFUL_EVENTS = ("deregistered", "observed_leave")
START_EVENTS = ("registered", "reclaimed")
SELF_EVENTS = ("registered", "reclaimed", "deregistered", "renewed_late", "lost")

#: what a rejection most likely means, for the security table
REASON_LABELS = {
    "bad_tag": "wrong key or tampering",
    "replayed_nonce": "replay",
    "replayed_sequence": "replay",
    "bad_sequence": "replay or a restarted sender",
    "unexpected_response": "response from a node that was not called",
    "unauthorized": "missing grant or probing",
    "stale_timestamp": "clock skew or delayed replay",
    "unknown_sender": "unknown or restarted sender",
    "wrong_target": "stale registry entry or misrouting",
    "bad_size": "malformed or truncated envelope",
    "bad_version": "malformed or truncated envelope",
    "too_large": "oversized envelope",
    "bad_payload": "malformed payload",
    "bad_file": "file-system tampering",
    "quarantined": "quarantined sender",
    "chunk_missing": "chunked message incomplete",
    "chunk_chain": "chunked message incomplete",
    "chunk_expired": "chunked message incomplete",
    "chunk_invalid": "malformed chunk",
    "message_too_large": "oversized message",
    "reassembly_full": "reassembly space full",
    "durable_duplicate": "durable copy already handled",
    "durable_bad_receipt": "forged or damaged receipt",
    "durable_streams_full": "durable streams per sender full",
}
for _reason in EXTENSION_REASONS["control"]:
    REASON_LABELS[_reason] = "control request refused"
DEFAULT_LABEL = "other rejection"

#: timestamps outside [0, MAX_TS) make a line malformed (guards against Infinity / garbage)
MAX_TS = 1e11
#: a record whose size or chunks is below 0 or above MAX_COUNT is malformed (no envelope or message is
#: that large; it bounds each record's share of the byte and chunk totals, which are 64-bit sums)
MAX_COUNT = 1 << 53
#: the fields MAX_COUNT bounds
COUNTED_FIELDS = ("size", "chunks")
#: Spark's JSON reader options that match lines.parse_line's rules
JSON_OPTIONS = {"mode": "PERMISSIVE", "allowSingleQuotes": "false",
                "allowNonNumericNumbers": "false", "allowUnquotedFieldNames": "false"}


def reason_label(reason: str | None) -> str:
    if reason is None:
        return DEFAULT_LABEL
    if reason.startswith("replayed_"):
        return "replay"
    return REASON_LABELS.get(reason, DEFAULT_LABEL)


def spark_schema():
    from pyspark.sql import types as T
    kinds = {"string": T.StringType(), "double": T.DoubleType(), "bigint": T.LongType(),
             "boolean": T.BooleanType()}
    return T.StructType([T.StructField(n, kinds[t], True) for n, t in FIELDS])


def read_records(spark, paths: list[str]):
    """The record columns + `valid` (bool) of journal files, read with Spark's JSON reader.

    The reader skips blank lines, reads a line holding a JSON array of objects as one record per
    object, and gives a row of nulls (malformed) for any other line that is not an object;
    lines.parse_values follows the same rules."""
    if not paths:
        return with_validity(spark.createDataFrame([], spark_schema()))
    return with_validity(spark.read.schema(spark_schema()).options(**JSON_OPTIONS).json(paths))


def counts_in_range(rec: dict) -> bool:
    """Whether a record's size and chunks (when present) are in [0, MAX_COUNT]: the reference's
    half of the rule with_validity writes for Spark (a lease record of lines.record_of has neither)."""
    for name in COUNTED_FIELDS:
        v = rec.get(name)
        if v is not None and not (0 <= v <= MAX_COUNT):
            return False
    return True


def with_validity(p):
    """kind defaults to "envelope"; `valid` says whether the row is a record (SQL text: one Py4J
    round trip instead of one per column expression)."""
    def rule(kind: str, required: tuple) -> str:
        is_kind = "(kind IS NULL OR kind = 'envelope')" if kind == "envelope" else f"kind = '{kind}'"
        return "(" + " AND ".join([is_kind, *(f"{n} IS NOT NULL" for n in required)]) + ")"
    kinds = " OR ".join(rule(k, req) for k, req in KIND_REQUIRED.items())
    # a lease record has no size or chunks (lines.record_of keeps neither): the bound is not its
    counts = "(kind = 'lease' OR " + " AND ".join(
        f"({n} IS NULL OR ({n} >= 0 AND {n} <= {MAX_COUNT}))" for n in COUNTED_FIELDS) + ")"
    valid = (f"coalesce(ts IS NOT NULL AND ts >= 0 AND ts < {MAX_TS!r} AND node IS NOT NULL AND "
             f"{counts} AND ({kinds}), FALSE) AS valid")
    cols = [n if n != "kind" else "coalesce(kind, 'envelope') AS kind" for n, _ in FIELDS]
    return p.selectExpr(*cols, valid)
