"""Pure-Python parts: line parsing rules, the simulator's journals (no Spark)."""
from __future__ import annotations

import json
import os
from collections import Counter

from hypothesis import given, settings, strategies as st

from speedtui.pipeline.common import choose_bucket, parse_time
from speedtui.pipeline.records import reason_label
from speedtui.pipeline.lines import parse_line
from speedtui.pipeline.reference import analyze
from speedtui.pipeline.simulate import simulate

from pipeline_journals import MALFORMED


def test_malformed_lines_are_rejected():
    for line in MALFORMED:
        assert parse_line(line) is None, line
    assert parse_line('{"ts": NaN, "node": "a", "kind": "lease", "subject": "a", "event": "x"}') is None
    assert parse_line("{'ts': 1, 'node': 'a'}") is None


def test_valid_lines():
    rec = parse_line('{"ts": 5, "node": "a", "dir": "in", "peer": "b", "type": "ACK", "outcome": "accepted"}')
    assert rec["kind"] == "envelope" and rec["ts"] == 5.0 and rec["seq"] is None
    rec = parse_line('  {"kind":"lease","ts":1.5,"node":"a","subject":"b","event":"observed_join","extra":[1]}')
    assert rec["event"] == "observed_join"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_parse_line_never_raises(text):
    parse_line(text)


def test_labels_and_helpers():
    assert reason_label("bad_tag") == "wrong key or tampering"
    assert reason_label("replayed_nonce") == reason_label("replayed_sequence") == "replay"
    assert reason_label("unauthorized") == "missing grant or probing"
    assert parse_time("1700000000") == 1_700_000_000.0
    assert parse_time("2023-11-14T22:13:20Z") == 1_700_000_000.0
    assert choose_bucket(0, 3600) == 60 and choose_bucket(0, 86400) == 900


def test_simulator_deterministic_and_consistent(tmp_path):
    a = simulate(str(tmp_path / "a"), nodes=4, records=5000, seed=11, minutes=30)
    simulate(str(tmp_path / "b"), nodes=4, records=5000, seed=11, minutes=30, workers=1)
    for name in os.listdir(tmp_path / "a"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert abs(a["records"] - 5000) < 50
    recs = []
    for name in sorted(os.listdir(tmp_path / "a")):
        for line in open(tmp_path / "a" / name):
            rec = parse_line(line)
            assert rec is not None, line
            assert "envelope" not in json.loads(line)      # optional field omitted
            recs.append(rec)
    env = [r for r in recs if r["kind"] == "envelope"]
    kinds = Counter((r["type"], r["dir"], r["outcome"]) for r in env)
    # both sides journal every SPC envelope
    assert kinds[("SPC_REQUEST", "out", "sent")] == kinds[("SPC_REQUEST", "in", "accepted")]
    assert kinds[("SPC_RESPONSE", "out", "sent")] == kinds[("SPC_RESPONSE", "in", "accepted")]
    resp = [r for r in env if r["type"] == "SPC_RESPONSE" and r["dir"] == "in"]
    assert all(r["latencyMs"] is not None and r["requestId"] and r["status"] for r in resp)
    assert any(r["status"] == "ERROR" and r["errorCode"] for r in resp)
    reasons = Counter(r["reason"] for r in env if r["outcome"] == "rejected")
    assert reasons["bad_tag"] and reasons["unauthorized"] and (reasons["replayed_nonce"] + reasons["replayed_sequence"])
    events = Counter(r["event"] for r in recs if r["kind"] == "lease")
    assert events["registered"] >= 4 and events["observed_join"]


def test_simulator_malformed_fraction(tmp_path):
    st_ = simulate(str(tmp_path), nodes=3, records=20000, seed=2, malformed=0.01)
    ref = analyze([str(tmp_path)])["summary"]
    assert ref["malformed_lines"] == st_["malformed"]
    assert 100 <= st_["malformed"] <= 300
    assert ref["totals"]["records"] == st_["records"]


def test_load_summary_errors(tmp_path):
    import pytest
    from speedtui.pipeline import PipelineError, load_summary
    with pytest.raises(PipelineError, match="no report"):
        load_summary(str(tmp_path))
    (tmp_path / "summary.json").write_text("{}")
    with pytest.raises(PipelineError, match="not a"):
        load_summary(str(tmp_path))


def test_the_warm_up_sample_is_each_journals_last_whole_lines_within_its_bounds(tmp_path):
    """The console's analytics child warms up on the journals' last lines: whole lines only (a torn
    last line waits, a line cut by the sample's start is left out), at most the bytes asked per
    journal and in all, through checked descriptors (a link or a FIFO among them is not read)."""
    from speedtui.pipeline.journals import stage_tails
    traces = tmp_path / "speed_traces"
    traces.mkdir()
    lines = [json.dumps({"ts": float(i), "node": "a", "i": i}) + "\n" for i in range(200)]
    (traces / "a.jsonl").write_text("".join(lines) + '{"ts": 999, "torn')
    (traces / "b.jsonl").write_text("".join(lines[:3]))
    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"ts": 1, "node": "secret"}\n')
    (traces / "c.jsonl").symlink_to(secret)
    os.mkfifo(traces / "d.jsonl")
    staged = stage_tails([str(traces)], str(tmp_path / "sample"), per_journal=500, limit=600)
    got = [open(p, encoding="utf-8").read() for p in staged]
    assert len(got) == 2
    assert got[0] and got[0] == "".join(lines)[-len(got[0]):] and got[0].startswith("{")
    assert len(got[0]) <= 500 and len(got[0]) > 500 - len(lines[-1])
    assert got[1] == "".join(lines[:3])[-len(got[1]):] and got[1].startswith("{") and len(got[1]) <= 100
    assert "secret" not in "".join(got) and "torn" not in "".join(got)
    assert stage_tails([str(traces)], str(tmp_path / "none"), per_journal=500, limit=0) == []
