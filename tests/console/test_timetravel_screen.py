"""Time travel in the app (issue 16): `@` at the selected trace, stepping, event to event, picking a
moment, Esc back to live; and from a real environment whose node was killed with -9."""

import signal

from speedtui.environments.fixture import FIXED_NOW
from speedtui.paths import Paths
from speedtui.services import runtime as rt
from speedtui.ui.app import make_app
from speedtui.ui.screens.timetravel import TimeTravelScreen

from .conftest import SIZE, run_async, wait_for


def past(app) -> TimeTravelScreen:
    assert isinstance(app.screen, TimeTravelScreen)
    return app.screen


async def arrive(pilot, at: float) -> dict:
    """Wait until the screen shows the moment ``at``; its nodes by name."""
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, TimeTravelScreen) and pilot.app.screen.moment is not None
                   and pilot.app.screen.moment.at == at, what=f"the moment {at}")
    await pilot.pause()
    return {n.name: n for n in past(pilot.app).moment.nodes}


@run_async
async def test_travel_step_jump_pick_and_back_to_live(fixture_app):
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        newest = app.view_widget("traces").selected()
        assert newest.ts == FIXED_NOW - 3.0  # mallory's rejected envelope
        await pilot.press("at")  # at the selected record's time
        nodes = await arrive(pilot, FIXED_NOW - 3.0)
        assert nodes["reports"].state == "left" and nodes["reports"].evidence == "observed_leave by billing"
        assert nodes["batch"].state == "stale" and nodes["gateway"].state == "online"
        traffic = past(app).query_one("#past-traffic")
        assert any("mallory" in str(r.cells[2]) for r in traffic.rows)
        await pilot.press("left_square_bracket")  # one step (10 s) back
        nodes = await arrive(pilot, FIXED_NOW - 13.0)
        assert nodes["reports"].state == "unknown"
        await pilot.press("left_curly_bracket")  # the previous event: batch's expiry
        nodes = await arrive(pilot, FIXED_NOW - 30.0)
        assert nodes["batch"].since == FIXED_NOW - 30.0
        await pilot.press("right_curly_bracket")  # the next one: gateway's report about itself
        nodes = await arrive(pilot, FIXED_NOW - 12.0)
        assert nodes["gateway"].health.startswith("registry_lock_held")
        await pilot.press("right_curly_bracket")  # then reports leaving
        await arrive(pilot, FIXED_NOW - 3.0)
        await pilot.press("at", *"-15m", "enter")
        nodes = await arrive(pilot, FIXED_NOW - 900.0)
        assert nodes["ledger"].state == "stale" and nodes["ledger"].evidence == "observed_expiry by gateway"
        assert "ago" in str(past(app).query_one("#past-title").render())
        await pilot.press("escape")  # one key: live again, where it was
        assert not isinstance(app.screen, TimeTravelScreen) and app.active_view() == "traces"


@run_async
async def test_a_node_killed_with_minus_9_as_it_was_before_and_after(procs, tmp_path):
    a = procs.start("a", allow=["b"], groups=["edge"], trace=True, lease=2, heartbeat=0.5)
    procs.start("b", allow=["a"], trace=True, lease=2, heartbeat=0.5)
    app = make_app(procs.root, rt.load_key(procs.key_path), paths=Paths(tmp_path / "config", tmp_path / "data"))
    async with app.run_test(size=SIZE) as pilot:
        rows = app.registry.by_name
        await wait_for(pilot, lambda: {"a", "b"} <= set(rows()) and rows()["a"].status == "online",
                       what="a online")
        before = app.clock.time()
        a.signal(signal.SIGKILL)
        a.proc.wait(30)
        await wait_for(pilot, lambda: any(r.subject == "a" and r.event == "observed_expiry" and r.node == "b"
                                          for r in app.traces.leases), what="b journals a's expiry")
        expiry = next(r.ts for r in app.traces.leases if r.subject == "a" and r.event == "observed_expiry")
        await pilot.press("at")  # a minute ago
        await arrive(pilot, past(app).at)
        past(app).travel(before)
        nodes = await arrive(pilot, before)
        assert nodes["a"].state == "online" and nodes["a"].allow == ("b",) and nodes["a"].groups == ("edge",)
        past(app).travel(expiry + 0.1)
        nodes = await arrive(pilot, expiry + 0.1)
        # b's record, or the console's own scan that saw its pid gone, whichever came last
        assert nodes["a"].state == "stale"
        assert nodes["a"].evidence in ("observed_expiry by b", "its registry entry")
        assert nodes["a"].allow == ("b",)  # its grants as the console last saw them
        await pilot.press("escape")
        assert not isinstance(app.screen, TimeTravelScreen)
