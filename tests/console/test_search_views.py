"""Search that highlights (the real app, Pilot, the fixture): the `/` filter's words marked in the
Leases rows and detail, the Traces rows and the envelope inspector; `n` / `N` go to the next /
previous match (Leases: a line of the detail pane; Traces: a row whose cells hold a word; the
inspector: one of its lines), and only while a word is set: else `n` is the app's launch."""

from __future__ import annotations

from rich.style import Style

from speedtui.ui.screens.envelope import EnvelopeScreen
from speedtui.ui.screens.forms import LaunchScreen
from speedtui.ui.views.common import MATCH_STYLE
from speedtui.ui.views.traces import TraceRows, TraceTable, row_text
from speedtui.ui.widgets.fast_table import FastTable
from speedtui.ui.widgets.rendered_pane import RenderedPane

from .conftest import run_async, wait_for

MATCH = Style.parse(MATCH_STYLE)


def marked(text) -> set[str]:
    """The pieces of a rich Text drawn in the match style (lower case)."""
    return {text.plain[s.start:s.end].lower() for s in text.spans if Style.parse(str(s.style)) == MATCH}


def strip_marked(strip) -> str:
    """The text a drawn line shows in the match style."""
    return "".join(seg.text for seg in strip if seg.style is not None and seg.style.bgcolor is not None
                   and seg.style.bgcolor == MATCH.bgcolor)


async def type_filter(pilot, text: str) -> None:
    await pilot.press("slash", *text, "enter")  # Enter: back to the table
    await pilot.pause()


@run_async
async def test_leases_marks_the_words_in_rows_and_detail_and_n_walks_the_detail(fixture_app):
    app = fixture_app(steady=True)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        await type_filter(pilot, "echo")
        view = app.view_widget("leases")
        table = view.query_one(FastTable)
        names = [r.key for r in table.rows]
        assert names and all(marked(r.cells[9]) == {"echo"} for r in table.rows), "SERVICES marks echo"
        assert not marked(table.rows[0].cells[0]), "no mark where the word is not"
        body = view.query_one("#leases-detail-body", RenderedPane)
        await wait_for(pilot, lambda: any(strip_marked(s).lower() == "echo" for s in body.lines),
                       what="echo marked in the detail")
        holding = [i for i, s in enumerate(body.lines) if "echo" in s.text.lower()]
        assert len(holding) >= 1
        await pilot.press("n")
        assert not isinstance(app.screen, LaunchScreen), "n went to a match, not to launch"
        assert view._match_line == holding[0] and int(body.scroll_offset.y) == min(holding[0], body.max_scroll_y)
        await pilot.press("N")
        assert view._match_line == holding[-1]
        # Esc clears the filter: n is the app's launch again
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the launch dialog")


@run_async
async def test_traces_marks_the_words_and_n_goes_to_the_next_row_holding_one(fixture_app):
    app = fixture_app(steady=True)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        await pilot.press("4")
        await pilot.pause()
        await type_filter(pilot, "node:gateway tax")
        table = app.view_widget("traces").query_one(TraceTable)
        rows: TraceRows = table.rows
        assert len(rows) > 3
        holding = [i for i in range(len(rows)) if "tax" in row_text(rows[i]).lower()]
        assert holding, "rows show the word"
        assert all("tax" in {m for c in rows[i].cells if hasattr(c, "spans") for m in marked(c)} for i in holding)
        assert all("gateway" in {m for c in rows[i].cells if hasattr(c, "spans") for m in marked(c)}
                   for i in range(len(rows))), "node:gateway marks gateway"
        start = table.cursor
        await pilot.press("n")
        assert table.cursor == next((i for i in holding if i > start), holding[0])
        first = table.cursor
        await pilot.press("n")
        assert table.cursor == next((i for i in holding if i > first), holding[0])
        await pilot.press("N")
        assert table.cursor == first
        table.cursor = holding[-1]
        await pilot.press("n")
        assert table.cursor == holding[0], "n wraps at the end"
        await pilot.press("N")
        assert table.cursor == holding[-1], "N wraps at the start"
        assert not isinstance(app.screen, LaunchScreen)
        # the inspector of the selected record: the words marked, n goes to its line holding one
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, EnvelopeScreen), what="the inspector")
        screen = app.screen
        assert screen.words == ("gateway", "tax")
        await pilot.press("n")
        assert screen._match_line is not None
        assert not isinstance(app.screen, LaunchScreen)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, EnvelopeScreen), what="the inspector closed")
        await pilot.press("escape")  # clears the filter
        await pilot.pause()
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the launch dialog")
