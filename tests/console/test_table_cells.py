"""Table cells never touch: every table view, drawn with members' wide glyphs and long values at
80, 120 and 160 columns, keeps one blank column between every two cells on every line, measured
as a terminal measures (each code point's own width: a joiner or a variation selector adds
nothing, each emoji it joins is two cells); and a column is cut only when the table has no room.

Before the table measured cells as rich does (a cluster "👨‍👩‍👧" is two cells to rich, six to
tmux), a row holding one slid four columns off its headers and its cells ran together; before
columns widened into the room the view had, HOST showed "fixture-h…" beside blank space."""

from __future__ import annotations

import json

import pytest
from rich.cells import get_character_cell_size
from speed_runtime.fsutil import REGISTRY_DIR, TRACES_DIR

from speedtui.environments.fixture import FIXED_NOW, build
from speedtui.paths import Paths
from speedtui.services import runtime as rt
from speedtui.services.clock import FrozenClock
from speedtui.ui.app import make_app
from speedtui.ui.widgets.fast_table import GAP, FastTable, column_widths, terminal_cells

from .conftest import run_async, wait_for

FAMILY = "👨\u200d👩\u200d👧"  # one glyph to rich (2 cells), three emoji to a terminal (6 cells)
WIDE = f"{FAMILY}主机-北京-东城区-⚠\ufe0f-◈-{'长' * 12}"
LONG = "a-value-much-longer-than-any-column-it-is-drawn-in-" * 2
# each table view and the tables in it that hold rows of build_wide's environment (a view fills
# its tables once shown, from readers on other threads: the test waits for those rows)
TABLES_WITH_ROWS = {"leases": ["leases-table"], "traces": ["traces-table"], "replay": ["replay-nodes"],
                    "audit": ["audit-table", "calls-table"], "security": ["security-table"],
                    "durable": ["durable-outbox"]}
TABLE_VIEWS = list(TABLES_WITH_ROWS)
WIDTHS = [80, 120, 160]


def build_wide(base):
    """The fixture's environment plus a node whose every member-written field is wide or long:
    its registry entry, its journal (every kind of record the tables show), a call and an audit
    line quoting it."""
    root, key_path = build(base / "root", FIXED_NOW)
    entry = {"name": "wide", "id": "99999999-9999-4999-8999-999999999999", "pid": 4343, "host": WIDE,
             "status": "online", "startupTimestamp": FIXED_NOW - 60, "lastHeartbeat": FIXED_NOW - 1,
             "leaseSeconds": 30, "heartbeatSeconds": 5, "protocol": 1, "groups": ["g" * 40, "edge"],
             "allow": ["gateway"], "services": ["s" * 30, "echo"], "runtime": WIDE + LONG,
             "features": ["quota"],
             "counters": {"sent": 10 ** 9, "received": 7, WIDE: 3,
                          "threat": {WIDE: {"score": 150.0, "state": "quarantined", "last": [WIDE, LONG],
                                            "rejections": 4, "recent": [1, 2, 1]}}}}
    (root / REGISTRY_DIR / "wide.node").write_text(json.dumps(entry))
    t = FIXED_NOW - 5
    records = [
        {"kind": "envelope", "ts": t, "node": WIDE, "dir": "out", "peer": WIDE, "type": "SPC_REQUEST", "seq": 1,
         "size": 10 ** 7, "outcome": "sent", "requestId": WIDE + LONG, "service": WIDE},
        {"kind": "envelope", "ts": t + 0.01, "node": "wide", "dir": "in", "peer": WIDE, "type": WIDE, "seq": 2,
         "size": 12, "outcome": "rejected", "reason": WIDE + LONG},
        {"kind": "message", "ts": t + 0.02, "node": WIDE, "dir": "out", "peer": WIDE, "messageId": WIDE,
         "event": WIDE, "type": "MESSAGE", "size": 900_000, "chunks": 3, "attempt": 2, "seq": 4, "reason": LONG},
        {"kind": "threat", "ts": t + 0.03, "node": "wide", "peer": WIDE, "event": "quarantined", "score": 150.0,
         "reason": WIDE},
    ]
    with open(root / TRACES_DIR / "wide.jsonl", "w") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
    paths = Paths(base / "config", base / "data")
    paths.env_dir(root).mkdir(parents=True, mode=0o700)
    with open(paths.audit_log(root), "w") as fh:
        fh.write(json.dumps({"ts": t, "action": "call", "detail": WIDE + LONG, "command": WIDE + LONG, "ok": True,
                             "result": WIDE}) + "\n")
    with open(paths.call_history(root), "w") as fh:
        fh.write(json.dumps({"ts": t, "caller": "console-x", "target": "wide", "service": WIDE,
                             "arguments": {WIDE: LONG}, "timeout": 5.0, "status": "ERROR", "result": None,
                             "error_code": WIDE, "error_message": LONG, "latency_ms": 2.0}) + "\n")
    return root, key_path, paths


async def show_with_rows(pilot, app, vid):
    """Show a table view and wait until its tables hold their rows; the view."""
    app.action_show(vid)
    view = app.view_widget(vid)
    await wait_for(pilot, lambda: all(view.query_one(f"#{i}", FastTable).rows for i in TABLES_WITH_ROWS[vid]),
                   what=f"the rows of {vid}'s tables")
    await pilot.pause()
    return view


def terminal_line(strip) -> list[str]:
    """A drawn line as a terminal lays it out: one entry per cell ("" where a wide glyph's second
    half is), each code point as wide as it is alone."""
    cells: list[str] = []
    for seg in strip:
        for ch in seg.text:
            w = get_character_cell_size(ch)
            if w == 0:
                if cells:
                    cells[-1] += ch
                continue
            cells.append(ch)
            cells.extend([""] * (w - 1))
    return cells


def touching(table: FastTable) -> list[str]:
    """Where, on the lines ``table`` draws, a cell runs into the next one or a line is not as wide
    as the table: one sentence each."""
    problems = []
    widths = table.widths()
    view = table.scrollable_content_region.width
    starts, pos = [], (2 if table.mark_cursor else 0)
    for w in widths:
        starts.append(pos)
        pos += w + GAP
    for y in range(min(table.scrollable_content_region.height, len(table.rows) + 1)):
        cells = terminal_line(table.render_line(y))
        if len(cells) != view:
            problems.append(f"{table.id} line {y} is {len(cells)} cells in a view of {view}")
        for col, start in zip(table.columns[1:], starts[1:]):
            if start > len(cells):
                break
            if cells[start - 1] not in (" ",):
                problems.append(f"{table.id} line {y}: the cell before {col.label} touches it: "
                                f"{''.join(cells[max(0, start - 8):start + 8])!r}")
    return problems


@pytest.mark.parametrize("width", WIDTHS)
@run_async
async def test_no_two_cells_touch_in_any_table_view(width, tmp_path):
    root, key_path, paths = build_wide(tmp_path)
    app = make_app(root, rt.load_key(key_path), paths=paths, dir_label="/fixture/speed", steady=True,
                   clock=FrozenClock(FIXED_NOW))
    async with app.run_test(size=(width, 36)) as pilot:
        await pilot.pause()
        problems = []
        for vid in TABLE_VIEWS:
            view = await show_with_rows(pilot, app, vid)
            for table in view.query(FastTable):
                if table.rows:
                    problems += touching(table)
        assert not problems, "\n".join(problems[:20])


@pytest.mark.parametrize("width", [120, 160])
@run_async
async def test_a_column_is_cut_only_when_the_table_has_no_room(width, tmp_path):
    root, key_path = build(tmp_path / "root", FIXED_NOW)
    app = make_app(root, rt.load_key(key_path), paths=Paths(tmp_path / "c", tmp_path / "d"),
                   dir_label="/fixture/speed", steady=True, clock=FrozenClock(FIXED_NOW))
    async with app.run_test(size=(width, 36)) as pilot:
        await pilot.pause()
        table = app.view_widget("leases").query_one(FastTable)
        lines = ["".join(terminal_line(table.render_line(y))) for y in range(1, len(table.rows) + 1)]
        assert all("fixture-host " in line for line in lines if "broken" not in line), "\n".join(lines)
        assert not any("fixture-h…" in line for line in lines)


def test_column_widths_share_the_room_left_to_right_then_the_flex_column():
    # 3 columns of floors 4, 4, 4 (the last flex) in 30 cells: 15 used, 15 spare
    assert column_widths([4, 4, 4], [9, 6, 4], [False, False, True], 30) == (9, 6, 12)
    # no room: the floors, and the column past the edge as wide as its cells
    assert column_widths([10, 10, 10], [12, 12, 20], [False, False, False], 22) == (10, 10, 20)
    # a flex column gives way (down to its least) so the next column fits whole
    assert column_widths([5, 20, 6], [5, 20, 6], [False, True, False], 32, least=[5, 8, 6]) == (5, 19, 6)
    # and never below its least: the next column scrolls instead
    assert column_widths([5, 20, 6], [5, 20, 6], [False, True, False], 20, least=[5, 8, 6]) == (5, 14, 6)


def test_terminal_cells_drops_the_marks_terminals_do_not_measure_as_rich_does():
    from rich.text import Text

    t = Text("a")
    t.append(FAMILY, style="bold")
    t.append("⚠\ufe0f👍🏽b")
    safe = terminal_cells(t)
    assert safe.plain == "a👨👩👧⚠👍b"
    assert sum(get_character_cell_size(c) for c in safe.plain) == safe.cell_len == 11
    bold = {i for s in safe.spans if s.style == "bold" for i in range(s.start, s.end)}
    assert bold == {1, 2, 3}, "each glyph keeps its style"
    assert t.plain.startswith("a" + FAMILY), "the row's own text is left as it was"

