"""Snapshots of the tables' own features at 80x24 and 120x36, from the deterministic fixture:
the RATE column with its sparklines (sorted by rate), cells of members' wide glyphs and long
values (columns kept apart, cut only where the view has no room), search words marked in the
Leases rows and detail (after n), the Traces rows and the envelope inspector; a row's cells whole (i), the columns
dialog (W) and wide mode (w). Update with
`pytest tests/console/test_table_snapshots.py --snapshot-update`."""

import pytest

from speedtui.environments.fixture import FIXED_NOW
from speedtui.paths import Paths
from speedtui.services import runtime as rt
from speedtui.services.clock import FrozenClock
from speedtui.ui.app import make_app

from .test_rates import fixture_rates
from .test_table_cells import build_wide

SIZES = [(80, 24), (120, 36)]
sized = pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])


@sized
def test_leases_rates_sorted_busiest_first(size, snap_compare, fixture_app):
    async def before(pilot):
        fixture_rates(pilot.app)
        pilot.app.registry.sort_column = "rate"
        pilot.app.view_widget("leases").refresh_view(force=True)
        await pilot.pause()

    assert snap_compare(fixture_app(steady=True), run_before=before, terminal_size=size)


def wide_app(tmp_path):
    root, key_path, paths = build_wide(tmp_path)
    return make_app(root, rt.load_key(key_path), paths=paths, dir_label="/fixture/speed", steady=True,
                    clock=FrozenClock(FIXED_NOW))


@sized
def test_leases_with_wide_glyphs_and_long_values(size, snap_compare, tmp_path):
    assert snap_compare(wide_app(tmp_path), terminal_size=size)


@sized
def test_traces_with_wide_glyphs_and_long_values(size, snap_compare, tmp_path):
    assert snap_compare(wide_app(tmp_path), press=["4"], terminal_size=size)


@sized
def test_leases_search_marks_rows_and_detail_after_n(size, snap_compare, fixture_app):
    assert snap_compare(fixture_app(steady=True), press=["slash", *"echo", "enter", "n"], terminal_size=size)


@sized
def test_traces_search_marks_rows(size, snap_compare, fixture_app):
    assert snap_compare(fixture_app(steady=True), press=["4", "slash", *"node:gateway tax", "enter", "n"],
                        terminal_size=size)


@sized
def test_envelope_inspector_marks_the_search_words(size, snap_compare, fixture_app):
    assert snap_compare(fixture_app(steady=True), press=["4", "slash", *"tax", "enter", "enter", "n"],
                        terminal_size=size)


@sized
def test_cells_whole_dialog(size, snap_compare, fixture_app):
    assert snap_compare(fixture_app(steady=True), press=["down", "down", "i"], terminal_size=size)


@sized
def test_traces_cells_whole_dialog_of_wide_values(size, snap_compare, tmp_path):
    # a record whose every field is long and wide: each one whole, folded where it has no space
    assert snap_compare(wide_app(tmp_path), press=["4", "down", "down", "down", "i"], terminal_size=size)


@sized
def test_columns_dialog_status_hidden_host_widened(size, snap_compare, fixture_app):
    assert snap_compare(fixture_app(steady=True), press=["W", "down", "space", *["down"] * 5, "right", "right"],
                        terminal_size=size)


@sized
def test_wide_mode(size, snap_compare, fixture_app):
    assert snap_compare(fixture_app(steady=True), press=["w"], terminal_size=size)
