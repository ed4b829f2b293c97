"""Records of the extension kinds (health, control, message, threat, durable) in the Spark job
and the reference: never malformed, counted per kind, and the messages, threats and durable
tables and summary sections (issues 17-19). Journals: pipeline_journals.write_extension_journals,
written by the runtime's own encoder; every expected number is worked out by hand from it."""
from __future__ import annotations

import json
import os

import pytest

from speedtui.pipeline.job import TABLES, run_incremental, run_pipeline
from speedtui.pipeline.reference import analyze

from pipeline_journals import EXT_MALFORMED, T0, write_extension_journals

SECTIONS = ("totals", "other_records", "messages", "threats", "durable", "rejections", "malformed_lines")


def rows(spark, out, table):
    return [r.asDict() for r in spark.read.parquet(os.path.join(out, table)).collect()]


@pytest.fixture(scope="module")
def ext(spark, tmp_path_factory):
    root = write_extension_journals(tmp_path_factory.mktemp("ext") / "traces")
    out = str(tmp_path_factory.mktemp("ext-out"))
    return root, out, run_pipeline([root], out, spark=spark), analyze([root])


def test_known_kinds_are_records_and_counted_per_kind(ext):
    _, _, s, _ = ext
    t = s["totals"]
    assert s["malformed_lines"] == t["malformed"] == len(EXT_MALFORMED) == 4
    assert (t["message_records"], t["threat_records"], t["durable_records"]) == (13, 8, 12)
    assert (t["health_records"], t["control_records"]) == (1, 1)
    assert s["other_records"] == {"health": 1, "control": 1}
    # 8 chunk envelopes sent + 4 rejected as quarantined; 4 lease records
    assert (t["envelope_records"], t["lease_records"], t["chunk_envelopes_sent"]) == (12, 4, 8)
    assert t["records"] == 12 + 4 + 13 + 8 + 12 + 1 + 1 == t["valid"] == t["lines"] - 4
    assert t["nodes"] == 3


def test_messages_section(ext):
    _, _, s, _ = ext
    m = s["messages"]
    assert m["totals"] == {"sent": 4, "reliable": 2, "chunks": 7, "bytes": 3550, "retransmissions": 3,
                           "acknowledged": 1, "send_errors": 1, "delivered": 2, "duplicates": 1, "voided": 1,
                           "chunk_envelopes": 8}
    assert [(r["source"], r["target"], r["sent"], r["chunks"], r["retransmissions"], r["delivered"], r["voided"])
            for r in m["links"]] == [("a", "b", 3, 5, 3, 2, 0), ("c", "b", 1, 2, 0, 0, 1)]
    assert m["send_errors_by_reason"] == {"no_ack": 1} and m["voided_by_reason"] == {"chunk_expired": 1}
    assert sum(b["sent"] for b in m["over_time"]) == 4 and sum(b["retransmissions"] for b in m["over_time"]) == 3


def test_messages_table(spark, ext):
    _, out, _, _ = ext
    got = {(r["source"], r["target"], r["minute"]): r for r in rows(spark, out, "messages")}
    assert set(got) == {("a", "b", T0), ("a", "b", T0 + 60), ("c", "b", T0 + 60), ("c", "b", T0 + 120)}
    first = got[("a", "b", T0)]   # m1 (3 chunks, reliable, retransmitted once, acknowledged) and m2
    assert (first["sent"], first["reliable"], first["chunks"], first["bytes"], first["retransmissions"],
            first["acknowledged"], first["delivered"]) == (2, 1, 4, 3100, 1, 1, 2)
    m3 = got[("a", "b", T0 + 60)]
    assert (m3["sent"], m3["retransmissions"], m3["send_errors"], m3["duplicates"]) == (1, 2, 1, 1)
    assert got[("c", "b", T0 + 120)]["voided"] == 1


def test_threats_section_and_table(spark, ext):
    _, out, s, _ = ext
    th = s["threats"]
    assert th["totals"] == {"raised": 4, "quarantined": 2, "released": 1, "lifted": 1,
                            "quarantined_rejections": 4, "quarantined_now": 1, "max_score": 6.0}
    assert [(p["receiver"], p["sender"], p["quarantined_rejections"], p["max_score"], p["quarantined_now"])
            for p in th["pairs"]] == [("b", "x", 3, 6.0, False), ("b", "y", 1, 5.5, True), ("c", "x", 0, 1.0, False)]
    got = {(r["receiver"], r["sender"], r["minute"]): r for r in rows(spark, out, "threats")}
    bx = got[("b", "x", T0 + 180)]
    assert (bx["raised"], bx["quarantined"], bx["max_score"], bx["quarantined_rejections"]) == (2, 1, 6.0, 3)
    by = got[("b", "y", T0 + 240)]          # only the envelope removed unread
    assert (by["quarantined_rejections"], by["max_score"]) == (1, None)
    assert got[("b", "x", T0 + 360)]["released"] == 1
    assert s["rejections"]["by_reason"] == {"quarantined": 4}
    sec = rows(spark, out, "security")
    assert {r["label"] for r in sec} == {"quarantined sender"}


def test_durable_section_and_table(spark, ext):
    _, out, s, _ = ext
    d = s["durable"]
    assert d["by_event"] == {"stored": 3, "delivered": 3, "handled": 2, "duplicate": 1, "receipt": 2, "send_error": 1}
    assert d["handled_by_status"] == {"handled": 1, "failed": 1}
    ab = d["links"][0]
    assert (ab["sender"], ab["receiver"], ab["stored"], ab["delivered"], ab["handled"], ab["failed"],
            ab["duplicates"], ab["receipts"]) == ("a", "b", 2, 3, 2, 1, 1, 2)
    cb = d["links"][1]
    assert (cb["sender"], cb["stored"], cb["send_errors"]) == ("c", 1, 1)
    got = {(r["node"], r["peer"], r["event"], r["status"]): r["records"] for r in rows(spark, out, "durable")}
    assert got[("a", "b", "delivered", None)] == 3 and got[("c", "b", "send_error", "expired")] == 1


def test_reference_agrees(spark, ext):
    _, out, s, ref = ext
    for key in SECTIONS:
        assert s[key] == ref["summary"][key], key
    for table, keys in (("messages", ("source", "target", "minute")), ("threats", ("receiver", "sender", "minute")),
                        ("durable", ("node", "peer", "event", "status"))):
        got = {tuple(r[k] for k in keys): r for r in rows(spark, out, table)}
        exp = {tuple(r[k] for k in keys): r for r in ref["tables"][table]}
        assert got == exp, table


def test_summary_json_has_the_new_tables_and_keys(ext):
    _, out, s, _ = ext
    with open(os.path.join(out, "summary.json")) as f:
        doc = json.load(f)
    assert set(doc["tables"]) == set(TABLES) >= {"messages", "threats", "durable"}
    for key in ("other_records", "messages", "threats", "durable"):
        assert doc[key] == s[key], key


def test_incremental_store_counts_the_extension_records(spark, ext, tmp_path):
    """Two ingests (a and b first, then c): the store's report equals the one-pass report."""
    root, _, s, _ = ext
    live = tmp_path / "live"
    live.mkdir()
    for name in ("a", "b"):
        (live / f"{name}.jsonl").write_bytes(open(os.path.join(root, f"{name}.jsonl"), "rb").read())
    run_incremental([str(live)], str(tmp_path / "store"), str(tmp_path / "r1"), spark=spark)
    (live / "c.jsonl").write_bytes(open(os.path.join(root, "c.jsonl"), "rb").read())
    got = run_incremental([str(live)], str(tmp_path / "store"), str(tmp_path / "r2"), spark=spark)
    assert got["ingest"]["batches"] == 2
    for key in SECTIONS:
        assert got[key] == s[key], key


@pytest.mark.parametrize("schema, lacks", [("speed-analytics-store/1", "counted extension records as malformed"),
                                           ("speed-analytics-store/2", "did not partition its roll-ups by day"),
                                           ("speed-analytics-store/3", "did not keep the callees' side of SPC calls")])
def test_a_store_of_an_older_schema_asks_for_a_rebuild(spark, ext, tmp_path, schema, lacks):
    from speedtui.pipeline import PipelineError
    root, _, s, _ = ext
    store = tmp_path / "store"
    store.mkdir()
    (store / "state.json").write_text(json.dumps({"schema": schema, "files": {}, "batches": []}))
    with pytest.raises(PipelineError, match=rf"older version that {lacks}: rebuild it with `speedtui analyze --rebuild`\.$"):
        run_incremental([root], str(store), str(tmp_path / "r"), spark=spark)
    got = run_incremental([root], str(store), str(tmp_path / "r"), spark=spark, rebuild=True)
    assert got["messages"] == s["messages"]


def test_format_summary_mentions_messages_and_quarantines(ext):
    from speedtui.pipeline import format_summary
    _, _, s, _ = ext
    text = format_summary(s)
    assert "logical messages sent 4 (7 chunks), retransmissions 3, send errors 1, delivered 2" in text
    assert "quarantines 2 (1 still quarantined), envelopes removed unread 4, highest threat score 6.0" in text
