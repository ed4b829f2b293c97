"""Traces view: every envelope record the console can see; newest first or follow; filter;
pause/resume; open the decrypted envelope, follow a call, replay, open as a call."""

from __future__ import annotations

import bisect
import time
from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Static

from ...models.query import parse_query
from ...models.traces import TraceRecord
from ..widgets.fast_table import Column, FastTable, Row
from .common import fmt_ts

COLUMNS = [Column("ts", "TIME", 12), Column("node", "JOURNAL", 12), Column("flow", "FROM → TO", 20),
           Column("type", "TYPE", 12), Column("seq", "SEQ", 5), Column("size", "SIZE", 5),
           Column("result", "OUTCOME", 24), Column("rid", "REQUEST SERVICE", 22)]

OUTCOME_STYLE = {"sent": "cyan", "accepted": "green", "rejected": "bold red"}


def trace_row(r: TraceRecord) -> Row:
    res = Text(r.result, style=OUTCOME_STYLE.get(r.outcome, ""))
    if r.status == "ERROR" or r.error_code:
        res.append(f" {r.error_code or 'ERROR'}", style="red")
    elif r.status:
        res.append(f" {r.status}", style="green")
    if r.latency_ms is not None:
        res.append(f" {r.latency_ms:.1f}ms", style="dim")
    rid = r.request_id[:8] + (f" {r.service}" if r.service else "") if r.request_id else ""
    flow = Text(f"{r.sender} → {r.receiver}")
    who = Text(r.node)
    who.append(" out" if r.dir == "out" else " in", style="dim")
    return Row(key=r.id, cells=(fmt_ts(r.ts), who, flow, r.type, "" if r.seq is None else str(r.seq),
                                "" if r.size is None else str(r.size), res, rid + (" ◆" if r.envelope else "")))


class TraceRows(Sequence):
    """A lazy row sequence over a snapshot of the filtered view: rows are built when drawn."""

    def __init__(self, records: list[TraceRecord], newest_first: bool, built: dict[int, Row]) -> None:
        self.records = records
        self.newest_first = newest_first
        # rows by record id, shared between snapshots: a record keeps its Row object, so the
        # table's rendered-line cache still holds when new records push it down the screen
        self._built = built

    def __len__(self) -> int:
        return len(self.records)

    def record(self, i: int) -> TraceRecord:
        return self.records[len(self.records) - 1 - i] if self.newest_first else self.records[i]

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        rec = self.record(i)
        row = self._built.get(rec.id)
        if row is None:
            if len(self._built) > 2000:
                self._built.clear()
            row = self._built[rec.id] = trace_row(rec)
        return row

    def key_at(self, i: int) -> Any:
        return self.record(i).id

    def index_of(self, key: Any) -> int | None:
        ids = [r.id for r in self.records]  # ascending
        j = bisect.bisect_left(ids, key)
        if j < len(ids) and ids[j] == key:
            return len(ids) - 1 - j if self.newest_first else j
        return None


class TraceTable(FastTable):
    """FastTable over TraceRows (lazy rows, cursor found by record id)."""

    def user_moved(self, target: int) -> None:
        # moving away from the tail stops following at once (before any repaint can reset the
        # cursor); moving back to the tail resumes it
        view = self.parent
        if isinstance(view, TracesView):
            tail = 0 if view.newest_first else max(0, len(self.rows) - 1)
            if view.follow != (target == tail):
                view.follow = target == tail
                view._status()


class TracesView(Vertical):
    BINDINGS = [
        Binding("slash", "focus_filter", "Filter", id="traces.filter"),
        Binding("p", "pause", "Pause/resume", id="traces.pause"),
        Binding("f", "follow", "Follow", id="traces.follow"),
        Binding("o", "order", "Order", id="traces.order"),
        Binding("enter", "open", "Envelope", id="traces.open", show=False),
        Binding("c", "follow_call", "Follow call", id="traces.call"),
        Binding("R", "replay", "Replay", id="traces.replay"),
        Binding("C", "as_call", "As call", id="traces.ascall"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.paused = False
        self.follow = True
        self.newest_first = True
        self._shown_total = -1
        self._filter_text = ""
        self._last_paint = 0.0
        self.min_repaint = 0.25  # at most ~4 repaints a second of a moving tail
        self._built_rows: dict[int, Row] = {}

    def compose(self) -> ComposeResult:
        with Horizontal(classes="toolbar"):
            yield Input(placeholder="/ filter: node:NAME type:req|resp|msg outcome:rejected|error  text…", compact=True,
                        id="traces-filter")
            yield Button("Pause", id="traces-pause", compact=True)
            yield Button("Envelope", id="traces-open", compact=True)
            yield Button("Follow call", id="traces-call", compact=True)
            yield Button("Replay", id="traces-replay", compact=True, variant="warning")
        yield TraceTable(COLUMNS, id="traces-table")
        yield Static(id="traces-status", classes="statusline")

    def on_mount(self) -> None:
        self.query_one(TraceTable).empty_text = "no traced envelopes yet (nodes write journals with --trace)"

    # ---- data
    def apply_filter(self) -> None:
        self.app.traces.set_filter(parse_query(self._filter_text, self.app.fabric_nodes()))
        self._shown_total = -1
        self.refresh_view(force=True)

    def refresh_view(self, force: bool = False) -> None:
        store = self.app.traces
        if self.paused and not force:
            self._status()
            return
        if store.total == self._shown_total and not force:
            return
        now = time.monotonic()
        if not force and now - self._last_paint < self.min_repaint:
            return  # under load: the data is buffered, the next drain paints it
        self._last_paint = now
        self._shown_total = store.total
        table = self.query_one(TraceTable)
        rows = TraceRows(list(store.view), self.newest_first, self._built_rows)
        following = self.follow
        table.set_rows(rows, keep_key=not following)
        if following and len(rows):
            table.cursor = 0 if self.newest_first else len(rows) - 1
        self._status()

    def _status(self) -> None:
        store = self.app.traces
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f"{len(store.view):,} shown", style="bold")
        t.append(f" of {len(store.ring):,} buffered (capacity {store.capacity:,}, {store.total:,} seen)")
        if store.dropped:
            t.append(f"  {store.dropped:,} dropped under overload", style="bold yellow")
        if store.bad_lines:
            t.append(f"  {store.bad_lines} unreadable journal lines skipped", style="yellow")
        t.append("  newest first" if self.newest_first else "  oldest first")
        if self.follow:
            t.append("  FOLLOW", style="bold cyan")
        if self.paused:
            t.append(f"  PAUSED ({store.total - self._shown_total:,} new)", style="bold red")
        if t.plain != getattr(self, "_status_plain", None):
            self._status_plain = t.plain
            # one line (app.tcss): repaint without relayout, as in the header
            self.query_one("#traces-status", Static).update(t, layout=False)

    def selected(self) -> TraceRecord | None:
        table = self.query_one(TraceTable)
        if isinstance(table.rows, TraceRows) and 0 <= table.cursor < len(table.rows):
            return table.rows.record(table.cursor)
        return None

    # ---- events
    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "traces-filter":
            self._filter_text = event.value
            self.apply_filter()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_one(TraceTable).focus()

    def on_fast_table_selected(self, event: FastTable.Selected) -> None:
        self.action_open()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        {"traces-pause": self.action_pause, "traces-open": self.action_open,
         "traces-call": self.action_follow_call, "traces-replay": self.action_replay}[event.button.id]()

    # ---- actions
    def action_focus_filter(self) -> None:
        self.query_one("#traces-filter", Input).focus()

    def action_clear_filter(self) -> None:
        self.query_one("#traces-filter", Input).value = ""
        self.query_one(TraceTable).focus()

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.query_one("#traces-pause", Button).label = "Resume" if self.paused else "Pause"
        self.refresh_view(force=not self.paused)
        self.app.update_header()

    def action_follow(self) -> None:
        self.follow = not self.follow
        self.refresh_view(force=True)

    def action_order(self) -> None:
        self.newest_first = not self.newest_first
        self.refresh_view(force=True)

    def action_open(self) -> None:
        rec = self.selected()
        if rec is not None:
            self.app.open_envelope(rec)

    def action_follow_call(self) -> None:
        rec = self.selected()
        if rec is None or not rec.request_id:
            self.app.notify("select an SPC request or response to follow its call", severity="warning")
            return
        self.app.open_call_link(rec)

    def action_replay(self) -> None:
        rec = self.selected()
        if rec is not None:
            self.app.request_replay(rec)

    def action_as_call(self) -> None:
        rec = self.selected()
        if rec is not None:
            self.app.open_call_from_trace(rec)
