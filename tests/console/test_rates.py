"""A rate per node in Leases: envelopes per second from the counters each node publishes, measured
over the node's own heartbeat times (models/rates.py), with a sparkline of its recent rates,
sortable (busiest first); a restarted node never shows a negative or a whole run's rate; memory
is bounded per node and a node gone from the registry is forgotten. Checked on `speed node`
processes the console did not start, fed by a node of the test's own."""

from __future__ import annotations

from pathlib import Path

from speed_runtime import Node

from speedtui.environments.fixture import FIXED_NOW
from speedtui.models.rates import MIN_INTERVAL, SAMPLES, RateTracker, Reading, envelope_total, fmt_rate
from speedtui.models.registry import RegistryModel
from speedtui.paths import Paths
from speedtui.services import runtime as rt
from speedtui.services.clock import FrozenClock
from speedtui.ui.app import make_app
from speedtui.ui.widgets.fast_table import FastTable

from .conftest import SIZE, entry_record, node_id, run_async, wait_for


def reading(name="a", at=100.0, started=1.0, sent=0, received=0, rejected=None):
    return Reading(name, at, started, {"sent": sent, "received": received, "rejected": rejected or {}})


def test_the_envelopes_a_node_counts_are_sent_received_and_rejected():
    assert envelope_total({"sent": 3, "received": 4, "rejected": {"bad_tag": 2, "x": True}}) == 9
    assert envelope_total({"sent": 3, "rejected": 5}) == 8
    assert envelope_total({"spcCalls": 3}) is None
    assert envelope_total({"sent": -5, "received": "7"}) is None


def test_a_rate_is_measured_over_the_nodes_heartbeat_times_not_the_consoles_reads():
    rates = RateTracker()
    rates.observe([reading(at=100.0, sent=10)])
    assert rates.rate("a") is None  # one reading: no rate yet
    for _ in range(3):  # the console reads the same publication again and again
        rates.observe([reading(at=100.0, sent=10)])
    assert rates.rate("a") is None and rates.series("a") == ()
    rates.observe([reading(at=105.0, sent=60, received=50)])
    assert rates.rate("a") == 20.0  # 100 envelopes over its 5 s between two heartbeats
    rates.observe([reading(at=105.0 + MIN_INTERVAL / 2, sent=70, received=50)])
    assert rates.series("a") == (20.0,), "a rewrite within MIN_INTERVAL is not a rate"
    rates.observe([reading(at=110.0, sent=110, received=50)])
    assert rates.series("a") == (20.0, 10.0)


def test_a_restarted_node_shows_no_negative_nor_huge_rate():
    rates = RateTracker()
    rates.observe([reading(at=100.0, sent=5000)])
    rates.observe([reading(at=105.0, sent=5050)])
    assert rates.rate("a") == 10.0
    rates.observe([reading(at=110.0, sent=3)])  # counters went down: a new run of the node
    assert rates.rate("a") is None and rates.series("a") == ()
    rates.observe([reading(at=115.0, sent=53)])
    assert rates.rate("a") == 10.0
    # a new start time with counters above the old ones: a new run too, not (9000-53)/5 s
    rates.observe([reading(at=120.0, started=2.0, sent=9000)])
    assert rates.rate("a") is None
    # a clock that went back
    rates.observe([reading(at=50.0, started=2.0, sent=9100)])
    assert rates.rate("a") is None
    assert all(x >= 0 for x in rates.series("a"))


def test_memory_is_bounded_per_node_and_a_gone_node_is_forgotten():
    rates = RateTracker()
    for i in range(SAMPLES * 5):
        rates.observe([reading("a", at=100.0 + 2 * i, sent=i * 10), reading("b", at=100.0 + 2 * i, sent=i)])
    assert len(rates.series("a")) == SAMPLES and set(rates.series("a")) == {5.0}
    rates.observe([reading("b", at=1000.0, sent=10 ** 6)])
    assert rates.series("a") == () and rates.rate("a") is None and len(rates) == 1


def test_fmt_rate():
    assert [fmt_rate(x) for x in (None, 0.0, 0.04, 3.46, 120.4, 1234.0, 98765.0)] == \
        ["-", "0/s", "0.0/s", "3.5/s", "120/s", "1.2k/s", "99k/s"]


def entry(name, at, sent, started=1.0, lease=30.0):
    return {"name": name, "id": node_id(name), "pid": 1, "host": "elsewhere", "status": "online",
            "startupTimestamp": started, "lastHeartbeat": at, "leaseSeconds": lease, "heartbeatSeconds": 5,
            "protocol": 1, "counters": {"sent": sent, "received": 0, "rejected": {}}}


def test_the_registry_model_gives_rows_their_rate_and_sorts_the_busiest_first():
    model = RegistryModel()
    model.update([entry_record(n, entry(n, 100.0, 0)) for n in ("idle", "busy", "dead")], 100.0)
    model.update([entry_record("idle", entry("idle", 105.0, 5)), entry_record("busy", entry("busy", 105.0, 500)),
                  entry_record("dead", entry("dead", 101.0, 0, lease=2.0))], 105.0)
    rows = model.by_name()
    assert rows["busy"].rate == 100.0 and rows["idle"].rate == 1.0 and rows["busy"].rates == (100.0,)
    assert rows["dead"].status == "stale" and rows["dead"].rate is None, "a stale node has no rate"
    model.sort_column = "rate"
    assert [r.name for r in model.visible()] == ["busy", "idle", "dead"]


def fixture_rates(app):
    """Two heartbeats' counters for the fixture's nodes (the fixture itself is one reading)."""
    rates = app.registry.rates
    for at, k in ((FIXED_NOW - 10, 0), (FIXED_NOW - 5, 1), (FIXED_NOW, 2)):
        rates.observe([Reading("gateway", at, 1.0, {"sent": 400 * k}), Reading("billing", at, 1.0, {"sent": 10 * k}),
                       Reading("ledger", at, 1.0, {"sent": [0, 0, 1][k]}), Reading("audit", at, 1.0, {"sent": 0})])
    app.registry.refresh(FIXED_NOW)
    app.view_widget("leases").refresh_view(force=True)


@run_async
async def test_leases_shows_the_rate_and_sorts_by_it_with_s_and_a_header_click(fixture_app):
    app = fixture_app(steady=True)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        fixture_rates(app)
        await pilot.pause()
        table = app.view_widget("leases").query_one(FastTable)
        line = {r.key: "".join(s.text for s in table._line(r.cells, table.rich_style, 0, 120)) for r in table.rows}
        assert "80/s" in line["gateway"] and "2.0/s" in line["billing"] and "0/s" in line["audit"]
        assert "0.2/s" in line["ledger"]
        assert "-" in line["batch"].split("expired")[1].split()[1], "a stale node: no rate"
        for _ in range(4):  # name → status → remaining → hb_age → rate
            await pilot.press("s")
        assert app.registry.sort_column == "rate"
        assert [r.key for r in table.rows][:3] == ["gateway", "billing", "ledger"]
        await pilot.press("s")
        app.registry.set_sort("name")
        table.post_message(FastTable.HeaderClicked(table, "rate"))
        await pilot.pause()
        assert app.registry.sort_column == "rate" and table.sort_column == "rate"
        assert table.rows[0].key == "gateway"


@run_async
async def test_rates_of_speed_node_processes_the_console_did_not_start(procs, root, key_path, tmp_path):
    procs.start("sink", allow=["loader"], heartbeat=1, lease=10)
    procs.start("quiet", heartbeat=1, lease=10)
    key = rt.load_key(key_path)
    loader = Node(root, key.runtime_key, "loader", allow=["sink"]).start()
    app = make_app(Path(root), key, paths=Paths(tmp_path / "config", tmp_path / "data"))
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: {"sink", "quiet"} <= set(app.registry.by_name()), what="the nodes")
            await wait_for(pilot, lambda: app.registry.by_name()["quiet"].rate is not None, what="quiet's rate")
            for i in range(300):
                loader.send("sink", {"n": i})
            await wait_for(pilot, lambda: any(x > 0 for x in app.registry.by_name()["sink"].rates), timeout=60,
                           what="sink's rate")
            sink = app.registry.by_name()["sink"]
            # at most what was sent over the shortest interval a rate is measured over
            assert 0 < max(sink.rates) <= 300 / MIN_INTERVAL
            assert app.registry.by_name()["quiet"].rate == 0.0
            # the same node again (counters from 0): a new baseline, never a negative rate
            before = sink.raw["startupTimestamp"]
            procs.started[0].stop()
            procs.start("sink", allow=["loader"], heartbeat=1, lease=10)
            await wait_for(pilot, lambda: (app.registry.by_name().get("sink") is not None
                                           and app.registry.by_name()["sink"].raw["startupTimestamp"] != before
                                           and app.registry.by_name()["sink"].rate is not None),
                           timeout=60, what="the restarted sink's rate")
            assert all(x >= 0 for x in app.registry.by_name()["sink"].rates)
            assert app.registry.by_name()["sink"].rates[-1] < 300
    finally:
        loader.close()
