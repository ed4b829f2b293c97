"""An environment of many nodes: what grows with the pairs of nodes (the access matrix, its CSV)
is drawn and exported only up to a bound; what grows with the grants (the picture, the JSON
export, the edges) is found from the grants. Before, the Access view built a cell per pair on the
UI thread: with 10,000 registry entries the console stopped answering at `3` (100 million cells,
RSS past 2 GB)."""

import json
import random
import uuid

from speedtui.environments.fixture import FIXED_NOW, HOST, build
from speedtui.models import timetravel
from speedtui.models.access import MUTUAL, AccessGraph, Edge
from speedtui.models.registry import RegistryModel, build_row
from speedtui.models.timetravel import RegistryHistory
from speedtui.paths import Paths
from speedtui.services import runtime as rt
from speedtui.services.clock import FrozenClock
from speedtui.services.sources import JournalTailer, RegistrySource
from speedtui.ui import feed as feed_module
from speedtui.ui.app import make_app
from speedtui.ui.messages import ChooseFabric
from speedtui.ui.views import access as access_view
from speedtui.ui.views.access_picture import LIST_MAX, access_picture

from .conftest import SIZE, entry_record, run_async, wait_for


def _record(name, age=1.0, allow=(), groups=()):
    """A registry record of an entry that last beat `age` seconds before 2000.0."""
    d = {"name": name, "id": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)), "pid": 1, "host": "elsewhere",
         "status": "online", "startupTimestamp": 1000.0, "lastHeartbeat": 2000.0 - age, "leaseSeconds": 30,
         "groups": list(groups), "allow": list(allow), "services": []}
    return entry_record(name, d)


def _row(name, allow=(), groups=()):
    return build_row(_record(name, allow=allow, groups=groups), 2000.0)


def _every_pair_edges(g: AccessGraph, names=None) -> list[Edge]:
    """The edges as the view found them before: every pair of names looked at."""
    names = sorted(set(names) if names is not None else g.names)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            ab, ba = g.may_write(a, b), g.may_write(b, a)
            if ab or ba:
                out.append(Edge(a, b, MUTUAL) if ab and ba else Edge(a, b, "one-way") if ab else Edge(b, a, "one-way"))
    return out


def test_the_edges_found_from_the_grants_are_those_of_every_pair():
    rnd = random.Random(7)
    names = [f"n{i:02d}" for i in range(40)]
    for _ in range(20):
        # grants to registered nodes, to absent ones and to itself; some nodes grant nothing
        rows = [_row(n, allow=rnd.sample(names + ["ghost", n], rnd.randrange(0, 6)),
                     groups=[rnd.choice("abc")]) for n in names]
        g = AccessGraph(rows)
        assert g.edges() == _every_pair_edges(g)
        some = rnd.sample(names, 15) + ["ghost"]
        assert g.edges(some) == _every_pair_edges(g, some)
        writes = g.writes_to(names)
        assert writes == {a: [b for b in sorted(names) if b != a and g.may_write(a, b)] for a in names}


def test_the_picture_lists_at_most_its_bound_and_says_how_many_more():
    count = LIST_MAX + 30
    # one fabric too wide for lanes: a chain of one-way grants, then nodes with none; grants to absent nodes
    rows = [_row(f"a{i:04d}", allow=[f"a{i + 1:04d}", f"gone{i}"], groups=["big"]) for i in range(count)]
    rows += [_row(f"z{i:04d}", groups=["big"]) for i in range(count)]
    text = access_picture(AccessGraph(rows), 100).plain
    assert text.count("──▶") == 2 + LIST_MAX  # the legend's two arrows, then the bound
    assert f"… and {count - 1 - LIST_MAX:,} more (E exports them all)" in text  # a0229's grant names no node
    assert text.count("✗  no grant in fabric") == LIST_MAX
    assert f"… and {count - LIST_MAX:,} more with no grant in fabric" in text  # the z nodes
    assert text.count("(not registered)") == LIST_MAX
    assert f"… and {count + 1 - LIST_MAX:,} more (E exports them all)" in text  # gone0..gone229 and a0230


def _crowd(tmp_path, count, **options):
    """The fixture's environment and `count` more nodes, each granting the next."""
    root, key_path = build(tmp_path / "root")
    reg = root / "speed_registry"
    for i in range(count):
        name = f"m{i:04d}"
        entry = {"name": name, "id": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)), "pid": 1, "host": HOST,
                 "status": "online", "startupTimestamp": FIXED_NOW - 60, "lastHeartbeat": FIXED_NOW - 1,
                 "leaseSeconds": 30, "heartbeatSeconds": 5, "protocol": 1, "groups": ["crowd"],
                 "allow": [f"m{i + 1:04d}"], "services": []}
        (reg / f"{name}.node").write_text(json.dumps(entry))
    paths = Paths(tmp_path / "config", tmp_path / "data")
    app = make_app(root, rt.load_key(key_path), paths=paths, clock=FrozenClock(FIXED_NOW),
                   dir_label="/fixture/speed", steady=True, **options)
    return root, paths, app


@run_async
async def test_beyond_its_bound_the_matrix_is_not_built_and_says_why(tmp_path, monkeypatch):
    def per_pair(self, names=None):
        raise AssertionError(f"a matrix of {len(names or self.names)} nodes was built")

    monkeypatch.setattr(AccessGraph, "matrix", per_pair)
    root, paths, app = _crowd(tmp_path, access_view.MATRIX_MAX + 1)  # and the fixture's own nodes
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        matrix = app.view_widget("access").query_one("#access-matrix")
        await wait_for(pilot, lambda: matrix.note, what="the note instead of the matrix")
        assert matrix.names == [] and matrix.pair() is None
        drawn = " ".join(str(matrix.render()).split())
        count = len(AccessGraph(app.state.registry.rows).names)
        assert drawn.startswith(f"{count:,} nodes: the matrix is drawn for at most {access_view.MATRIX_MAX}.")
        await pilot.press("enter", "g", "d")  # on no pair: nothing happens, nothing fails
        picture = str(app.view_widget("access").query_one("#access-arrows-body").render())
        assert "m0000 ──▶ m0001" not in picture and "m0001 ──▶ m0000" in picture  # m0000 allows m0001
        app.post_message(ChooseFabric("crowd"))  # as Enter on it in Fabrics does
        await wait_for(pilot, lambda: "in fabric crowd" in str(matrix.render()), what="the fabric's count")
        drawn = " ".join(str(matrix.render()).split())
        assert drawn.startswith(f"{access_view.MATRIX_MAX + 1:,} nodes in fabric crowd: the matrix is drawn for at most "
                                f"{access_view.MATRIX_MAX}. Explain a pair above;")


@run_async
async def test_beyond_its_bound_the_csv_matrix_is_not_exported_and_the_json_holds_every_grant(tmp_path, monkeypatch):
    monkeypatch.setattr(access_view, "EXPORT_MATRIX_MAX", 20)
    root, paths, app = _crowd(tmp_path, 30)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3", "E")
        exports = paths.env_dir(root) / "exports"
        await wait_for(pilot, lambda: list(exports.glob("access-matrix-*.json")), what="the JSON export")
        assert not list(exports.glob("access-matrix-*.csv"))
        doc = json.loads(next(exports.glob("access-matrix-*.json")).read_text())
        assert doc["m0001"]["may_write_to"] == ["m0000"] and doc["m0029"]["may_write_to"] == ["m0028"]
        assert any("exported as CSV for at most 20" in str(n.message) for n in app._notifications)


def test_a_scan_builds_again_only_the_rows_of_the_records_that_changed():
    """With 10,000 nodes heartbeating a scan changes a few hundred records; building every row at
    every scan took the UI thread a quarter of a second each time."""
    a, b, c = _record("a", 1), _record("b", 2), _record("c", 3)
    m = RegistryModel()
    m.update([a, b, c], 2000.0)
    first = {r.name: r for r in m.rows}
    b2 = _record("b", 0)                              # b heartbeated: the reader gives a new record
    m.update([a, b2, c], 2010.0)
    rows = {r.name: r for r in m.rows}
    assert rows["a"] is first["a"] and rows["c"] is first["c"]  # kept as they were (ages of 2000.0)
    assert rows["b"] is not first["b"] and rows["b"].hb_age == 10.0
    m.update([a, c], 2010.0)
    assert [r.name for r in m.rows] == ["a", "c"]
    m.refresh(2020.0)                                 # the tick: every row as of now
    assert {r.name: r.hb_age for r in m.rows} == {"a": 21.0, "c": 23.0}


def test_the_history_looks_only_at_rows_it_has_not_seen(monkeypatch):
    made = []
    real = timetravel.Sighting.of
    monkeypatch.setattr(timetravel.Sighting, "of", classmethod(lambda cls, ts, row: made.append(row.name)
                                                                  or real.__func__(cls, ts, row)))
    m, h = RegistryModel(), RegistryHistory()
    m.update([_record("a", 1), _record("b", 2)], 2000.0)
    h.observe(2000.0, m.rows)
    assert sorted(made) == ["a", "b"]
    made.clear()
    m.update([m.records[0], _record("b", 0)], 2005.0)  # only b changed
    h.observe(2005.0, m.rows)
    assert made == ["b"]
    m.update([m.records[1]], 2006.0)                    # a is gone
    h.observe(2006.0, m.rows)
    assert h.at("a", 2006.0).status == timetravel.GONE


@run_async
async def test_a_refresh_of_every_row_that_takes_long_is_spaced_out(tmp_path, monkeypatch):
    root, paths, app = _crowd(tmp_path, 3)
    async with app.run_test(size=SIZE):
        refreshed = []
        real = app.state.registry.refresh
        monkeypatch.setattr(app.state.registry, "refresh", lambda now, facts=None: refreshed.append(now)
                            or real(now, facts))
        clock = iter(range(10_000))
        # each refresh seems to take 0.25 s: five times the share of the UI thread it may take
        monkeypatch.setattr(feed_module.time, "perf_counter", lambda: next(clock) * 0.25)
        app.feed._ticks_to_skip = 0  # (whatever the app's own first tick took)
        for _ in range(12):
            app.feed.tick()
        assert len(refreshed) == 2  # the first tick; five skipped; the seventh; five skipped again


@run_async
async def test_a_problem_reported_with_a_scan_marks_the_row_of_an_entry_that_did_not_change(tmp_path):
    """A scan keeps the rows of unchanged entries; a health record that arrives with it must still
    mark them (the mark is not part of the entry)."""
    root, paths, app = _crowd(tmp_path, 3, start_sources=False)
    readers = RegistrySource(app.bridge, root), JournalTailer(app.bridge, root)  # stepped here, not threads
    async with app.run_test(size=SIZE):
        for reader in readers:
            reader.step()
        app.feed.drain()
        assert app.state.registry.by_name()["m0001"].health == ""
        reg = root / "speed_registry"
        entry = json.loads((reg / "m0002.node").read_text())
        entry["lastHeartbeat"] = FIXED_NOW               # another entry changes in the same scan
        (reg / "m0002.node").write_text(json.dumps(entry))
        with open(root / "speed_traces" / "m0001.jsonl", "a") as f:
            f.write(json.dumps({"kind": "health", "ts": FIXED_NOW - 1, "node": "m0001", "event": "receiving_failed",
                                "detail": "inbox: gone"}) + "\n")
        for reader in readers:  # a pass of each, then one drain of both
            reader.step()
        app.feed.drain()
        assert app.state.registry.by_name()["m0001"].health == "receiving_failed: inbox: gone"
