"""Leases view: every registry entry, live; sort, filter, expiring-soon order, detail, reap,
copy the entry, export the lease history."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from rich.console import Group
from rich.syntax import Syntax
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Static

from ...models.registry import COLUMNS, EXPIRING, FLEX_COLUMN, FROZEN_COLUMNS, NodeRow, fmt_counters, fmt_duration
from ..messages import CopyText, ExportRows, ReapRequested
from ..state import ConsoleState
from ..widgets.fast_table import Column, FastTable, Row
from ..widgets.rendered_pane import RenderedPane
from ...models.rates import fmt_rate
from ...models.security import sparkline
from ...models.traces import RECOVERED
from ...models.search import matching_lines, next_match, search_words
from .common import HEALTH_ICON, fmt_datetime, fmt_ts, highlighted, pretty_json, status_text
from .. import keymap

SORT_KEYS = [c[0] for c in COLUMNS]
DURABLE_MARK = "◈"  # after the name of a node that speaks the durable extension (stores and forwards)


def lease_cell(r: NodeRow) -> Text:
    if r.status != "stale":
        return Text(fmt_duration(r.remaining), style="bold yellow" if r.expiring_soon else "")
    if r.pid_alive is False and r.remaining > 0:  # dead with time left on its lease: say so
        return Text(f"{fmt_duration(r.remaining)}✗", style="red")
    return Text("expired", style="red")


RATE_SPARK = 6  # the recent rates the RATE cell draws


def rate_cell(r: NodeRow) -> Text:
    """Envelopes per second and a sparkline of its recent rates (each relative to the highest)."""
    t = Text(f"{fmt_rate(r.rate):>6}", style="bold" if r.rate else "")
    if r.rates:
        # sparkline draws integer series: milli-envelopes per second keep a slow node's bars
        t.append(" " + sparkline(int(x * 1000) for x in r.rates[-RATE_SPARK:]), style="cyan")
    return t


def name_cell(r: NodeRow) -> Text:
    t = Text(r.name, style="bold")
    if r.durable:
        t.append(f" {DURABLE_MARK}", style="bold magenta")
    return t


def node_row(r: NodeRow, words: tuple[str, ...] = ()) -> Row:
    pid = "-" if r.pid is None else str(r.pid)
    pid_t = Text(pid + ("" if r.pid_alive is None else (" ✓" if r.pid_alive else " ✗")),
                 style="red" if r.pid_alive is False else "")
    cells = {
        "status": status_text(r.status, r.health), "name": name_cell(r), "remaining": lease_cell(r),
        "hb_age": fmt_duration(r.hb_age), "rate": rate_cell(r), "pid": pid_t, "host": r.host or "-",
        "runtime": r.runtime or "-",
        "uptime": fmt_duration(r.uptime), "groups": ",".join(r.groups) or "-",
        "services": ",".join(r.services) or "-", "allow": str(len(r.allow)), "counters": fmt_counters(r.counters),
    }
    return Row(key=r.name, cells=tuple(highlighted(cells[k], words) for k in SORT_KEYS))


class LeaseRows(Sequence):
    """Lazy rows over the sorted NodeRows: Text cells are built only for drawn lines (the search
    words marked in them)."""

    def __init__(self, rows: list[NodeRow], words: tuple[str, ...] = ()) -> None:
        self.nodes = rows
        self.words = words
        self._cache: dict[int, Row] = {}
        self._index = None

    def __len__(self) -> int:
        return len(self.nodes)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        row = self._cache.get(i)
        if row is None:
            row = self._cache[i] = node_row(self.nodes[i], self.words)
        return row

    def key_at(self, i: int) -> str:
        return self.nodes[i].name

    def index_of(self, key) -> int | None:
        if self._index is None:
            self._index = {r.name: i for i, r in enumerate(self.nodes)}
        return self._index.get(key)


class LeasesView(Vertical):
    BINDINGS = keymap.bindings("leases")

    detail_delay = 0.05
    min_repaint = 0.4  # registry churn (500 nodes renewing) repaints at most ~2.5 times a second

    def __init__(self, state: ConsoleState, **kwargs) -> None:
        super().__init__(**kwargs)
        self.state = state
        self._last_paint = 0.0
        self._repaint_timer = None
        self._detail_sig: tuple | None = None
        self._head_plain: str | None = None
        self._detail_timer = None
        self._detail_share = 40  # percent of the view the detail pane may take at least (+/-)
        self._match_line: int | None = None  # the detail's line n / N went to last
        self._head_words: tuple[str, ...] = ()

    def compose(self) -> ComposeResult:
        with Horizontal(classes="toolbar"):
            yield Input(placeholder="/ filter: name, host, fabric, service, status…", compact=True,
                        id="leases-filter")
            yield Button("Expiring soon", id="leases-expiring", compact=True)
            if not self.state.readonly:
                yield Button("Reap stale", id="leases-reap", compact=True, variant="error")
        cols = [Column(k, label, w, flex=k == FLEX_COLUMN) for k, label, w in COLUMNS]
        yield FastTable(cols, frozen=FROZEN_COLUMNS, id="leases-table")
        with Vertical(id="leases-detail", classes="detail"):
            yield Static(id="leases-detail-head")
            yield RenderedPane(id="leases-detail-body")

    def on_mount(self) -> None:
        t = self.query_one(FastTable)
        t.sort_column = self.state.registry.sort_column

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "next_match":  # only with a word to find: else n is the app's launch
            return bool(self.words())
        return keymap.offered("leases", action, self.state.readonly)

    def words(self) -> tuple[str, ...]:
        """The filter's words, marked in the rows and the detail (models/search.py)."""
        return search_words(self.state.registry.filter_text)

    def refresh_view(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_paint < self.min_repaint:
            # too soon: paint once the interval is over (one timer at a time)
            if self._repaint_timer is None:
                self._repaint_timer = self.set_timer(self.min_repaint - (now - self._last_paint), self._late_paint)
            return
        self._last_paint = now
        model = self.state.registry
        table = self.query_one(FastTable)
        table.sort_column = "remaining" if model.sort_column == EXPIRING else model.sort_column
        table.sort_reverse = model.sort_reverse
        visible = model.visible()
        empty = model.empty_text()
        if table.empty_text != empty:
            table.empty_text = empty
            table.refresh()
        old = table.rows.nodes if isinstance(table.rows, LeaseRows) else None
        words = self.words()
        if old != visible or table.rows.words != words:
            table.set_rows(LeaseRows(visible, words))
            if old is None or len(old) != len(visible):
                table.refresh(layout=True)  # the table is as tall as its rows: the detail takes the rest
        self.show_detail(table.cursor_key)

    def _late_paint(self) -> None:
        self._repaint_timer = None
        if self.display and self.is_attached:
            self.refresh_view()

    def show_detail(self, name: str | None) -> None:
        row = self.state.registry.by_name().get(name) if name else None
        self._show_head(row)
        # the entry and its history repaint only when they change, not with every countdown
        # tick: highlighting and laying out the JSON was the costliest paint in this view
        words = self.words()
        sig = (name, None if row is None else (row.raw, row.error, row.reason, row.health),
               self.state.traces.lease_version, words)
        if sig == self._detail_sig:
            return
        moved = self._detail_sig is None or sig[0] != self._detail_sig[0]
        self._detail_sig = sig
        self._match_line = None  # n starts again from the top of what is shown
        body = self.query_one("#leases-detail-body", RenderedPane)
        if moved:  # another node: its entry from the top
            body.scroll_to(y=0, animate=False, immediate=True)
        if row is None:
            body.update("")
            return
        own, seen = self.state.traces.lease_history_split(row.name)
        h = Text()
        if row.reason:
            h.append(f"judged stale: {row.reason}\n", style="bold red")
        if row.health:
            h.append(f"{HEALTH_ICON} it reported a problem with itself: {row.health}\n", style="bold yellow")
        h.append("its own lease and health events (from its journal):\n", style="bold")
        if not own:
            h.append("  none journaled (does it run with --trace?)\n", style="dim")
        for rec in own:
            if rec.kind == "health":
                h.append(f"  {fmt_ts(rec.ts)}  {HEALTH_ICON} {rec.event}" + (f": {rec.detail}" if rec.detail else "")
                         + "\n", style="green" if rec.event == RECOVERED else "yellow")
            else:
                h.append(f"  {fmt_ts(rec.ts)}  {rec.event}\n")
        h.append("what its peers observed:\n", style="bold")
        if not seen:
            h.append("  nothing journaled by other nodes\n", style="dim")
        for rec in seen:
            h.append(f"  {fmt_ts(rec.ts)}  {rec.event:<16} seen by {rec.node}\n")
        parts = [highlighted(h, words), Text("entry:", style="bold")]
        if row.raw is not None:
            entry = Syntax(pretty_json(row.raw), "json", theme="ansi_dark", background_color="default")
            # searching: the highlighted JSON as Text, the words marked in it
            parts.append(highlighted(entry.highlight(entry.code), words) if words else entry)
        if row.raw and isinstance(row.raw.get("startupTimestamp"), (int, float)):
            parts.append(Text(f"started {fmt_datetime(row.raw['startupTimestamp'])}", style="dim"))
        body.update(Group(*parts))

    def _show_head(self, row: NodeRow | None) -> None:
        if row is None:
            head = Text("select a node to see its full entry and lease history", style="dim")
        else:
            head = Text(no_wrap=True, overflow="ellipsis")
            head.append(f"{row.name}  ", style="bold")
            head.append_text(status_text(row.status, row.health))
            if row.error:
                head.append(f"  entry problem: {row.error}", style="bold red")
            elif row.reason:
                head.append(f"  {row.reason}", style="bold red")
            if row.health:
                head.append(f"  {HEALTH_ICON} {row.health}", style="bold yellow")
            if row.status != "stale":
                head.append(f"  lease {fmt_duration(row.remaining)} of {row.lease_seconds:g}s")
            elif row.remaining > 0:
                head.append(f"  ({fmt_duration(row.remaining)} left on its lease)", style="dim")
            if row.features:
                head.append(f"  features: {', '.join(row.features)}", style="magenta")
                if row.durable:
                    head.append(f" {DURABLE_MARK}", style="bold magenta")
        head = highlighted(head, self.words())
        if head.plain != self._head_plain or self._head_words != self.words():
            self._head_words = self.words()
            self._head_plain = head.plain
            # one line whatever it says: the countdown repaints it without a relayout of the pane
            self.query_one("#leases-detail-head", Static).update(head, layout=False)

    # ---- events
    def on_fast_table_highlighted(self, event: FastTable.Highlighted) -> None:
        # the moved cursor is painted first; the detail follows once the cursor rests, so a
        # held arrow key is not slowed by laying out one entry per row passed
        if self._detail_timer is not None:
            self._detail_timer.stop()
        if self.state.steady:  # snapshots and screenshots: the frame shows the detail at once
            self.show_detail(event.key)
            return
        self._detail_timer = self.set_timer(self.detail_delay, lambda: self.show_detail(event.key))

    def on_fast_table_header_clicked(self, event: FastTable.HeaderClicked) -> None:
        self.state.registry.set_sort(event.column)
        self.refresh_view(force=True)

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "leases-filter":
            self.state.registry.filter_text = event.value
            self.refresh_view(force=True)
            self.refresh_bindings()  # n / N are offered while there is a word to find

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_one(FastTable).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "leases-expiring":
            self.action_expiring()
        elif event.button.id == "leases-reap":
            self.action_reap()

    # ---- actions
    def action_focus_filter(self) -> None:
        # at once, not after a refresh (Widget.focus): keys typed with `/` in one burst are already on
        # their way, and must find the filter focused (SpeedApp.on_key), not the table's bindings
        self.screen.set_focus(self.query_one("#leases-filter", Input))

    def action_clear_filter(self) -> None:
        self.query_one("#leases-filter", Input).value = ""
        self.query_one(FastTable).focus()

    def action_cycle_sort(self) -> None:
        m = self.state.registry
        cur = m.sort_column if m.sort_column in SORT_KEYS else SORT_KEYS[0]
        m.sort_column = SORT_KEYS[(SORT_KEYS.index(cur) + 1) % len(SORT_KEYS)]
        m.sort_reverse = False
        self.refresh_view(force=True)

    def action_reverse_sort(self) -> None:
        self.state.registry.sort_reverse = not self.state.registry.sort_reverse
        self.refresh_view(force=True)

    def action_expiring(self) -> None:
        self.state.registry.sort_column = EXPIRING
        self.state.registry.sort_reverse = False
        self.refresh_view(force=True)

    def action_reap(self) -> None:
        name = self.query_one(FastTable).cursor_key
        if name:
            self.post_message(ReapRequested(name))

    def selected_node(self) -> str | None:
        """The node under the cursor: d, g, F and m act on it (the app asks the shown view)."""
        row = self.selected_row()
        return row.name if row is not None and row.error is None else None

    def selected_row(self) -> NodeRow | None:
        name = self.query_one(FastTable).cursor_key
        return self.state.registry.by_name().get(name) if name else None

    def action_copy_entry(self) -> None:
        row = self.selected_row()
        if row is None or row.raw is None:
            self.notify("select a node with a readable entry to copy it", severity="warning")
            return
        self.post_message(CopyText(pretty_json(row.raw), f"{row.name}'s registry entry"))

    def action_export_history(self) -> None:
        row = self.selected_row()
        if row is None:
            self.notify("select a node to export its lease history", severity="warning")
            return
        hist = self.state.traces.lease_history(row.name, limit=10_000)
        lines = [json.dumps({"kind": r.kind, "ts": r.ts, "node": r.node, "event": r.event, "detail": r.detail}
                            if r.kind == "health" else
                            {"kind": r.kind, "ts": r.ts, "node": r.node, "subject": r.subject, "event": r.event},
                            separators=(",", ":")) for r in hist]
        self.post_message(ExportRows(f"lease-history-{row.name}", "jsonl", lines,
                                     f"{len(lines)} lease records of {row.name}"))

    def action_next_match(self, step: int) -> None:
        """n / N: the detail pane's next (previous) line holding a search word, at its top."""
        body = self.query_one("#leases-detail-body", RenderedPane)
        lines = [strip.text for strip in body.lines]
        line = next_match(matching_lines(lines, self.words()), self._match_line, forward=step > 0)
        if line is None:
            self.notify("no line of the detail holds the filter's words", severity="warning")
            return
        self._match_line = line
        body.scroll_to(y=line, animate=False, immediate=True)

    def action_detail_size(self, step: int) -> None:
        """+ / -: the detail pane takes more or less of the view (the table keeps at least a fifth)."""
        self._detail_share = max(15, min(80, self._detail_share + 10 * step))
        self.query_one(FastTable).styles.max_height = f"{100 - self._detail_share}%"
