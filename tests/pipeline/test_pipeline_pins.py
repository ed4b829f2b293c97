"""The pipeline keeps its own copy of the journal record model (it must run under spark-submit
without the project): these tests pin the copies and the Spark schema to the runtime's."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from speed_runtime.core import records as runtime
from speedtui.pipeline import records
from speedtui.pipeline.lines import parse_line

#: reasons contract 1.1 (section 8) adds; the runtime may not journal them yet, the pipeline must know them
CONTRACT_1_1_REASONS = ("bad_sequence", "unexpected_response")


def runtime_records() -> list[dict]:
    """One journal line of every kind the runtime writes (every optional field set), through its
    own encoder; the envelope record first."""
    env = runtime.EnvelopeTrace(1.5, "a", "in", "b", "SPC_RESPONSE", 7, 321, "rejected", reason="bad_tag",
                              request_id="r1", service="echo", status="ERROR", error_code="TIMEOUT",
                              latency_ms=2.5, envelope=b"\x00\x01", message_id="m1", chunk=0, chunks=2)
    events = [env, runtime.LeaseTrace(2.5, "a", "b", "observed_join"),
              runtime.HealthTrace(3.0, "a", "receiving_failed", "disk full"),
              runtime.ControlTrace(3.5, "a", "op", "ab12", "c1", "set_quota", {"n": 1}, "rejected",
                                   "control_expired", "late"),
              runtime.MessageTrace(4.0, "a", "out", "b", "m1", "send-error", size=10, chunks=2, attempt=3,
                                   reliable=True, seq=9, reason="no_ack", detail="gave up"),
              runtime.ThreatTrace(4.5, "a", "b", "quarantined", 6.5, "0a0b0c0d", "bad_tag"),
              runtime.DurableTrace(5.0, "a", "b", "receipt", "s1", 3, "handled", 2, "copy 2")]
    assert {e.kind for e in events} == set(runtime.RECORD_KINDS)
    return [json.loads(runtime.encode_line(e, 1 << 16)) for e in events]


def test_reject_reasons_and_lease_events_are_the_runtimes():
    assert set(runtime.REJECT_REASONS) <= set(records.REJECT_REASONS)
    assert set(records.REJECT_REASONS) - set(runtime.REJECT_REASONS) <= set(CONTRACT_1_1_REASONS)
    assert set(CONTRACT_1_1_REASONS) <= set(records.REJECT_REASONS)
    assert records.LEASE_EVENTS == runtime.LEASE_EVENTS
    assert records.EXTENSION_REASONS == runtime.EXTENSION_REASONS
    assert records.MESSAGE_EVENTS == runtime.MESSAGE_EVENTS
    assert records.THREAT_EVENTS == runtime.THREAT_EVENTS
    assert records.DURABLE_EVENTS == runtime.DURABLE_EVENTS
    assert records.RECORD_KINDS == runtime.RECORD_KINDS == tuple(records.KIND_REQUIRED)
    assert set(records.COUNTED_KINDS) <= set(records.RECORD_KINDS)
    assert {ev for _, ev in records.MESSAGE_COLUMNS} == set(records.MESSAGE_EVENTS)
    assert set(records.RECEIVER_MESSAGE_EVENTS) <= set(records.MESSAGE_EVENTS)
    assert set(records.SENDER_DURABLE_EVENTS) <= set(records.DURABLE_EVENTS)
    for group in (records.TERMINAL_EVENTS, records.GRACEFUL_EVENTS, records.START_EVENTS, records.SELF_EVENTS):
        assert set(group) <= set(runtime.LEASE_EVENTS)


def test_every_reason_has_its_own_label():
    for reason in records.REJECT_REASONS + sum(records.EXTENSION_REASONS.values(), ()):
        assert records.reason_label(reason) != records.DEFAULT_LABEL, reason
    assert records.reason_label("something_new") == records.DEFAULT_LABEL


def test_fields_are_the_runtimes_record_fields():
    written = set()
    for rec in runtime_records():
        written |= set(rec)
    # every field the runtime writes is read, except those the analysis never needs (the sealed
    # envelope is never parsed)
    assert written - set(records.UNREAD_FIELDS) == {name for name, _ in records.FIELDS}
    assert set(records.UNREAD_FIELDS) <= written


def test_required_fields_are_the_runtimes():
    """A record without one of the pipeline's required fields is invalid for the runtime's parser
    too, and the other way round."""
    for rec in runtime_records():
        kind = rec["kind"]
        # kind may be left out only for an envelope record
        required = ("ts", "node", *records.KIND_REQUIRED[kind]) + (() if kind == "envelope" else ("kind",))
        for name in rec:
            cut = {k: v for k, v in rec.items() if k != name}
            runtime_ok = runtime.parse_record(cut) is not None
            assert runtime_ok == (name not in required) == (parse_line(json.dumps(cut)) is not None), name


def test_runtime_lines_parse_the_same_in_runtime_reference_and_types():
    """Each line the runtime writes is valid for the runtime's parser and the pipeline's, with the
    types of the Spark schema."""
    py_types = {"string": str, "double": float, "bigint": int, "boolean": bool}
    for rec in runtime_records():
        line = json.dumps(rec)
        assert runtime.parse_record(rec) is not None
        parsed = parse_line(line)
        assert parsed is not None
        assert set(records.KIND_REQUIRED[rec["kind"]]) <= set(parsed), rec["kind"]
        for name, typ in records.FIELDS:
            if name in rec and rec[name] is not None and name in parsed:   # the fields its kind keeps
                assert isinstance(parsed[name], py_types[typ]) or (typ == "double" and isinstance(rec[name], int)), name


def test_spark_schema_matches_fields(spark):
    schema = records.spark_schema()
    assert [(f.name, f.dataType.simpleString()) for f in schema.fields] == list(records.FIELDS)


def test_pipeline_imports_nothing_of_the_project():
    """Importing the Spark job loads no project module outside speedtui.pipeline (spark-submit)."""
    code = ("import sys; import speedtui.pipeline.job; "
            "bad = [m for m in sys.modules if (m.startswith('speedtui') and not m.startswith('speedtui.pipeline') "
            "and m != 'speedtui') or m.startswith('speed_runtime') or m.startswith('textual')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.parametrize("reason", CONTRACT_1_1_REASONS)
def test_contract_1_1_reasons_are_labelled(reason):
    assert records.reason_label(reason) == records.REASON_LABELS[reason]
