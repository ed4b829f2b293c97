"""reference.py (pure Python, exact) agrees with the Spark job on a simulated journal."""
from __future__ import annotations

import os

import pytest

from speedtui.pipeline.job import run_pipeline
from speedtui.pipeline.reference import analyze
from speedtui.pipeline.simulate import simulate


def _close(a, b, key):
    if isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-6), key
    else:
        assert a == b, key


def _rows(spark, out, name):
    return [r.asDict() for r in spark.read.parquet(os.path.join(out, name)).collect()]


def _index(rows, keys):
    return {tuple(r[k] for k in keys): r for r in rows}


@pytest.fixture(scope="module")
def simulated(spark, tmp_path_factory):
    traces = str(tmp_path_factory.mktemp("sim"))
    stats = simulate(traces, nodes=6, records=12_000, seed=5, minutes=45, malformed=0.004)
    out = str(tmp_path_factory.mktemp("sim-out"))
    s = run_pipeline([traces], out, spark=spark)
    ref = analyze([traces])
    return stats, out, s, ref


def test_simulated_summary_agrees(simulated):
    stats, _, s, ref = simulated
    r = ref["summary"]
    assert s["malformed_lines"] == r["malformed_lines"] == stats["malformed"] > 0
    assert s["totals"]["records"] == stats["records"]
    for key in ("totals", "top_talkers", "rejections", "traffic_over_time", "time_range", "spc",
                "other_records", "messages", "threats", "durable"):
        assert s[key] == r[key], key
    assert len(s["availability"]) == len(r["availability"]) == 6
    for a, b in zip(s["availability"], r["availability"]):
        for k in a:
            _close(a[k], b[k], (a["node"], k))
    # the simulation has some of everything
    assert s["rejections"]["bursts"] and s["totals"]["spc_calls"] > 500
    assert sum(a["crashes"] for a in s["availability"]) >= 3
    assert sum(a["graceful_departures"] for a in s["availability"]) >= 2
    assert s["messages"]["totals"]["retransmissions"] and s["messages"]["totals"]["voided"]
    assert s["threats"]["totals"]["quarantined"] and s["threats"]["totals"]["quarantined_rejections"]
    assert s["durable"]["by_event"]["handled"] and all(s["other_records"].values())


@pytest.mark.parametrize("table,keys", [
    ("traffic", ("source", "target", "type", "minute")),
    ("top_talkers", ("source", "target")),
    ("spc", ("target", "service")),
    ("security", ("node", "reason", "minute")),
    ("availability", ("node",)),
    ("messages", ("source", "target", "minute")),
    ("threats", ("receiver", "sender", "minute")),
    ("durable", ("node", "peer", "event", "status")),
])
def test_simulated_tables_agree(spark, simulated, table, keys):
    _, out, _, ref = simulated
    got = _index(_rows(spark, out, table), keys)
    exp = _index(ref["tables"][table], keys)
    assert set(got) == set(exp)
    for k, row in exp.items():
        assert set(got[k]) == set(row), table
        for col, v in row.items():
            _close(got[k][col], v, (table, k, col))
