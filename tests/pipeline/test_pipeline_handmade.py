"""The Spark job on small hand-written journals; every expected number is worked out by hand
from tests/pipeline/conftest.py:write_hand_journals."""
from __future__ import annotations

import json
import os

import pytest

from speedtui.pipeline.job import PERCENTILE_ACCURACY, SUMMARY_SCHEMA, TABLES, run_pipeline
from speedtui.pipeline.reference import analyze

from pipeline_journals import MALFORMED, T0, write_hand_journals


def rows(spark, out, table):
    return [r.asDict() for r in spark.read.parquet(os.path.join(out, table)).collect()]


@pytest.fixture(scope="module")
def hand(spark, tmp_path_factory):
    root = write_hand_journals(tmp_path_factory.mktemp("hand") / "traces")
    out = str(tmp_path_factory.mktemp("hand-out"))
    seen = []
    summary = run_pipeline([root], out, spark=spark, progress=lambda f, t: seen.append((f, t)))
    return root, out, summary, seen


def test_totals_and_malformed(hand):
    _, _, s, _ = hand
    t = s["totals"]
    assert s["malformed_lines"] == len(MALFORMED) == 9
    assert t["malformed"] == 9
    # a: 3 MESSAGE + 7 SPC_REQUEST sent; b: 6 SPC_RESPONSE sent
    assert t["envelopes_sent"] == 16
    assert t["bytes_sent"] == 100 + 200 + 50 + 7 * 300 + 6 * 150
    # b accepts 2 MESSAGE + 7 requests, a accepts 6 responses, c accepts 1 MESSAGE
    assert t["accepted"] == 16
    assert t["rejected"] == 6 + 3 + 5
    assert t["lease_records"] == 2 + 2 + 8
    assert t["nodes"] == 3
    assert t["records"] == t["valid"] == t["lines"] - len(MALFORMED)
    assert s["time_range"]["start"] == T0 and s["time_range"]["end"] == T0 + 600
    assert s["empty"] is False and s["message"] is None


def test_traffic_counts_each_envelope_once(spark, hand):
    _, out, _, _ = hand
    got = {(r["source"], r["target"], r["type"], r["minute"]): (r["envelopes"], r["bytes"])
           for r in rows(spark, out, "traffic")}
    assert got == {
        ("a", "b", "MESSAGE", T0): (2, 300),
        ("a", "c", "MESSAGE", T0 + 60): (1, 50),
        ("a", "b", "SPC_REQUEST", T0): (7, 2100),
        ("b", "a", "SPC_RESPONSE", T0): (6, 900),
    }


def test_top_talkers(spark, hand):
    _, out, s, _ = hand
    top = sorted(rows(spark, out, "top_talkers"), key=lambda r: r["rank"])
    assert [(r["source"], r["target"], r["envelopes"], r["bytes"], r["rank"]) for r in top] == [
        ("a", "b", 9, 2400, 1), ("b", "a", 6, 900, 2), ("a", "c", 1, 50, 3)]
    assert top[0]["messages"] == 2 and top[0]["spc_requests"] == 7
    assert s["top_talkers"][0] == {"source": "a", "target": "b", "envelopes": 9, "bytes": 2400}


def test_spc_success_rates_and_percentiles(spark, hand):
    _, out, s, _ = hand
    spc = {(r["target"], r["service"]): r for r in rows(spark, out, "spc")}
    echo = spc[("b", "echo")]
    assert (echo["calls"], echo["successes"], echo["errors"], echo["no_response"]) == (5, 4, 1, 0)
    assert echo["success_rate"] == pytest.approx(0.8)
    assert echo["err_EXECUTION_FAILED"] == 1
    # latencies 10,20,30,40,50: nearest rank ceil(p*n) -> p50 = 3rd = 30, p95 = p99 = 5th = 50
    assert (echo["latency_p50_ms"], echo["latency_p95_ms"], echo["latency_p99_ms"]) == (30.0, 50.0, 50.0)
    tax = spc[("b", "tax")]
    assert (tax["calls"], tax["successes"], tax["no_response"], tax["err_INVALID_ARGUMENTS"]) == (2, 0, 1, 1)
    assert tax["success_rate"] == 0.0 and tax["latency_p50_ms"] == 5.0
    assert s["totals"]["spc_calls"] == 7 and s["totals"]["spc_successes"] == 4
    row = next(r for r in s["spc"] if r["service"] == "echo")
    assert row["error_codes"] == {"EXECUTION_FAILED": 1} and row["p95_ms"] == 50.0


def test_security_bursts_and_labels(spark, hand):
    _, out, s, _ = hand
    sec = {(r["node"], r["reason"], r["minute"]): r for r in rows(spark, out, "security")}
    assert set(sec) == {("b", "bad_tag", T0 + 120), ("b", "unauthorized", T0 + 180),
                        ("b", "replayed_nonce", T0 + 300)}
    bt = sec[("b", "bad_tag", T0 + 120)]
    assert (bt["rejections"], bt["burst"], bt["label"], bt["peers"]) == (6, True, "wrong key or tampering", 1)
    un = sec[("b", "unauthorized", T0 + 180)]
    assert (un["rejections"], un["burst"], un["label"]) == (3, False, "missing grant or probing")
    rp = sec[("b", "replayed_nonce", T0 + 300)]
    assert (rp["rejections"], rp["burst"], rp["label"]) == (5, True, "replay")
    assert [b["reason"] for b in s["rejections"]["bursts"]] == ["bad_tag", "replayed_nonce"]
    assert s["rejections"]["by_reason"] == {"bad_tag": 6, "replayed_nonce": 5, "unauthorized": 3}


def test_availability(spark, hand):
    _, out, s, _ = hand
    av = {r["node"]: r for r in rows(spark, out, "availability")}
    a, b, c, d = av["a"], av["b"], av["c"], av["d"]
    # a: registered T0, deregistered T0+600
    assert (a["online_seconds"], a["sessions"], a["graceful_departures"], a["crashes"]) == (600.0, 1, 1, 0)
    assert a["online_at_end"] is False and a["availability"] == pytest.approx(1.0)
    # b: T0..T0+400 (expiry observed by c) + reclaimed T0+450 .. end of data T0+600
    assert b["online_seconds"] == pytest.approx(400 + 150)
    assert (b["sessions"], b["restarts"], b["crashes"], b["graceful_departures"]) == (2, 1, 1, 0)
    assert b["online_at_end"] is True and b["availability"] == pytest.approx(550 / 600)
    # c: registered T0+5, never left; one late renewal, one lost lease
    assert c["online_seconds"] == pytest.approx(595)
    assert (c["late_renewals"], c["lost_leases"], c["crashes"], c["online_at_end"]) == (1, 1, 0, True)
    # d: known only from c's observations: join T0+50, leave T0+350
    assert d["online_seconds"] == pytest.approx(300)
    assert (d["sessions"], d["graceful_departures"], d["online_at_end"]) == (1, 1, False)
    assert [x["node"] for x in s["availability"]] == ["a", "b", "c", "d"]


def test_summary_json_schema(hand):
    _, out, s, _ = hand
    with open(os.path.join(out, "summary.json")) as f:
        doc = json.load(f)
    assert doc["schema"] == SUMMARY_SCHEMA
    for key, typ in (("generated_at", str), ("inputs", list), ("out_dir", str), ("tables", dict),
                     ("empty", bool), ("malformed_lines", int), ("time_range", dict),
                     ("totals", dict), ("top_talkers", list), ("spc", list), ("rejections", dict),
                     ("traffic_over_time", dict), ("availability", list),
                     ("burst_threshold", int), ("percentile_accuracy", int),
                     ("elapsed_seconds", float)):
        assert isinstance(doc[key], typ), key
    assert set(doc["tables"]) == set(TABLES)
    for name in TABLES:
        assert os.path.isdir(doc["tables"][name])
    assert doc["percentile_accuracy"] == PERCENTILE_ACCURACY
    assert set(doc["time_range"]) >= {"since", "until", "start", "end", "start_iso", "end_iso"}
    tot = doc["traffic_over_time"]
    assert tot["bucket_seconds"] == 60
    assert sum(b["envelopes"] for b in tot["buckets"]) == 16
    rej = doc["rejections"]
    assert sum(b["rejections"] for b in rej["over_time"]) == rej["total"] == 14
    assert {"t", "rejections", "by_reason"} <= set(rej["over_time"][0])
    for row in doc["spc"]:
        assert set(row) == {"target", "service", "calls", "successes", "errors", "no_response",
                            "success_rate", "error_codes", "p50_ms", "p95_ms", "p99_ms"}
    for row in doc["availability"]:
        assert set(row) == {"node", "online_seconds", "availability", "sessions", "restarts",
                            "crashes", "graceful_departures", "lost_leases", "late_renewals",
                            "online_at_end"}
    assert doc["totals"] == s["totals"]
    from speedtui.pipeline import load_summary
    assert load_summary(out) == doc


def test_progress_reported(hand):
    _, _, _, seen = hand
    fracs = [f for f, _ in seen]
    assert fracs and fracs == sorted(fracs) and fracs[-1] == 1.0
    assert any(t.startswith("spc") for _, t in seen)


def test_reference_agrees_on_hand_journals(hand):
    root, _, s, _ = hand
    ref = analyze([root])["summary"]
    for key in ("totals", "malformed_lines", "top_talkers", "spc", "rejections",
                "traffic_over_time", "availability", "time_range", "empty"):
        assert ref[key] == s[key], key


def test_since_until_filter(spark, tmp_path):
    root = write_hand_journals(tmp_path / "traces")
    out = str(tmp_path / "out")
    s = run_pipeline([root], out, spark=spark, since=T0 + 60, until=T0 + 300)
    t = s["totals"]
    assert t["envelopes_sent"] == 1                    # only a -> c at T0+61
    assert t["rejected"] == 6 + 3                      # replays at T0+300.. excluded (until is exclusive)
    assert t["malformed"] == 9                         # malformed lines are counted regardless
    assert t["filtered_out"] == t["valid"] - t["records"] > 0
    assert s["time_range"]["start"] == T0 + 60 and s["time_range"]["end"] == T0 + 300
    av = {r["node"]: r for r in s["availability"]}
    # c: its late renewal at T0+100 shows it online from the window start to the window end
    assert av["c"]["online_seconds"] == pytest.approx(240)
    assert av["c"]["late_renewals"] == 1
    assert analyze([root], T0 + 60, T0 + 300)["summary"]["totals"] == t


def test_empty_input(spark, tmp_path):
    """An empty journal and one of malformed lines only: a valid empty report, lines counted."""
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "empty.jsonl").write_text("")
    (traces / "x.jsonl").write_text("\n".join(MALFORMED) + "\n")
    s = run_pipeline([str(traces)], str(tmp_path / "out"), spark=spark)
    assert s["empty"] is True and s["totals"]["records"] == 0 and s["malformed_lines"] == 9
    assert s["message"].startswith("no trace records found in")
    assert "9 malformed lines skipped" in s["message"]
    assert s["spc"] == [] and s["availability"] == [] and s["traffic_over_time"]["buckets"] == []
    assert json.load(open(tmp_path / "out" / "summary.json"))["empty"] is True
    for name in TABLES:
        assert spark.read.parquet(str(tmp_path / "out" / name)).count() == 0
