"""Nothing important is only ever shown cut: in every table (FastTable) `i` shows the selected
row's cells whole in a dialog, `W` chooses which columns are shown and how wide, `w` is wide
mode (every column as wide as its cells, the table scrolls right). The real app, Pilot, the
fixture (and the wide-glyph environment of test_table_cells for long values)."""

from __future__ import annotations

from contextlib import asynccontextmanager

from speedtui.environments.fixture import FIXED_NOW
from speedtui.services import runtime as rt
from speedtui.services.clock import FrozenClock
from speedtui.ui.app import make_app
from speedtui.ui.palette import help_rows, palette_commands
from speedtui.ui.screens.cells import CellsScreen, ColumnsScreen
from speedtui.ui.widgets.fast_table import FastTable, terminal_cells

from .conftest import run_async, wait_for
from .test_table_cells import TABLE_VIEWS, build_wide, show_with_rows, terminal_line


def drawn(table: FastTable) -> list[str]:
    return ["".join(terminal_line(table.render_line(y))) for y in range(len(table.rows) + 1)]


def dialog_text(screen) -> str:
    """What a dialog shows, as plain text (its lines rendered at its width)."""
    from rich.console import Console

    body = screen.query_one("#cells-body")
    console = Console(width=400, record=True, color_system=None)
    console.print(body.content)
    return console.export_text()


@run_async
async def test_i_shows_the_selected_rows_cells_whole_in_every_table_view(tmp_path):
    root, key_path, paths = build_wide(tmp_path)
    app = make_app(root, rt.load_key(key_path), paths=paths, dir_label="/fixture/speed", steady=True,
                   clock=FrozenClock(FIXED_NOW))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        seen = 0
        for vid in TABLE_VIEWS:
            view = await show_with_rows(pilot, app, vid)
            for table in view.query(FastTable):
                if not table.rows:
                    continue
                table.focus()
                # the row with the longest text: the one most cut on screen
                longest = max(range(len(table.rows)), key=lambda i: sum(len(str(getattr(c, "plain", c)))
                                                                        for c in table.rows[i].cells))
                table.user_moved(longest)  # as a key would (Traces stops following)
                table.cursor = longest
                await pilot.pause()
                row = table.rows[table.cursor]
                await pilot.press("i")
                await wait_for(pilot, lambda: isinstance(app.screen, CellsScreen), what=f"the cells of {table.id}")
                text = " ".join(dialog_text(app.screen).split())
                for column, cell in zip(table.columns, row.cells):
                    value = " ".join(terminal_cells(cell).plain.split())
                    assert column.label in text
                    assert value in text, f"{table.id} {column.label}: {value!r} not whole in the dialog"
                await pilot.press("escape")
                await wait_for(pilot, lambda: not isinstance(app.screen, CellsScreen), what="the dialog closed")
                seen += 1
        assert seen >= 7


@asynccontextmanager
async def leases_at_120(fixture_app):
    """(app, pilot, the Leases table) of the fixture at 120x36."""
    app = fixture_app(steady=True)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        yield app, pilot, app.view_widget("leases").query_one(FastTable)


@run_async
async def test_W_hides_shows_and_widens_columns_and_keeps_one(fixture_app):
    async with leases_at_120(fixture_app) as (app, pilot, table):
        assert "STATUS" in drawn(table)[0]
        await pilot.press("W")
        await wait_for(pilot, lambda: isinstance(app.screen, ColumnsScreen), what="the columns dialog")
        await pilot.press("down", "space")  # STATUS
        await pilot.pause()
        assert "STATUS" not in drawn(table)[0] and "online" not in "".join(drawn(table)[1:])
        host = [c.key for c in table.columns].index("host")
        before = table.widths()[host]
        for _ in range(host - 1):
            await pilot.press("down")
        await pilot.press("right", "right")
        await pilot.pause()
        assert table.widths()[host] >= max(before, table.columns[host].width + 8) and table.extra["host"] == 8
        await pilot.press("left")
        assert table.extra["host"] == 4
        # hiding every column leaves the last one
        for key in [c.key for c in table.columns]:
            table.set_shown(key, False)
        assert len(table.hidden) == len(table.columns) - 1
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ColumnsScreen), what="the dialog closed")
        for key in list(table.hidden):
            table.set_shown(key, True)
        await pilot.pause()
        assert "STATUS" in drawn(table)[0]


@run_async
async def test_w_wide_mode_shows_every_cell_whole_and_back(fixture_app):
    async with leases_at_120(fixture_app) as (app, pilot, table):
        services = [c.key for c in table.columns].index("services")
        longest = max(len(str(getattr(r.cells[services], "plain", r.cells[services]))) for r in table.rows)
        assert table.widths()[services] < longest, "fitted: SERVICES is cut at 120 columns"
        assert any("…" in line for line in drawn(table)[1:])
        await pilot.press("w")
        await pilot.pause()
        assert table.wide and table.widths()[services] >= longest
        assert not any("…" in line for line in drawn(table)[1:]), "nothing on screen is cut"
        await pilot.press("w")
        await pilot.pause()
        assert not table.wide and table.widths()[services] < longest


@run_async
async def test_the_table_keys_are_in_the_help_and_the_palette(fixture_app):
    async with leases_at_120(fixture_app) as (app, pilot, table):
        ids = {bid for _key, _what, bid in help_rows(app)}
        assert {"table.cells", "table.wide", "table.columns", "leases.next_match", "traces.next_match",
                "envelope.next_match"} <= ids
        commands = {c.title: c for c in palette_commands(app)}
        assert "key w in every table" in commands["Wide mode"].help
        commands["Wide mode"].callback()
        await pilot.pause()
        assert table.wide
