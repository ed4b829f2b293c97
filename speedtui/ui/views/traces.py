"""Traces view: every envelope record the console can see, in time order; newest first or
follow; filter (with comparisons and a history); absolute or relative times; pause/resume;
open the decrypted envelope, follow a call, replay, open or copy as a call, export."""

from __future__ import annotations

import base64
import bisect
import time
from collections.abc import Sequence
from typing import Any

from rich.text import Text
from speed_runtime.core.visible import visible_json
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Static

from ...models.query import parse_query
from ...models.search import matching_lines, search_words
from ...models.traces import TraceRecord
from ..messages import CallFromTrace, ExportRows, OpenCallLink, OpenEnvelope, ReplayRequested, TracesPaused
from ..state import ConsoleState
from ..widgets.fast_table import Column, FastTable, Row
from .common import fmt_ts, highlighted
from .. import keymap

COLUMNS = [Column("ts", "TIME", 12), Column("node", "JOURNAL", 12), Column("flow", "FROM → TO", 20),
           Column("type", "TYPE", 12), Column("seq", "SEQ", 5), Column("size", "SIZE", 5),
           Column("result", "OUTCOME", 24, flex=True), Column("rid", "REQUEST SERVICE", 22)]

OUTCOME_STYLE = {"sent": "cyan", "accepted": "green", "rejected": "bold red"}
# a logical message's events (chunks, reliable): its final outcome in bold
MESSAGE_STYLE = {"sent": "cyan", "retransmitted": "yellow", "received": "bold green", "delivered": "bold green",
                 "send-error": "bold red", "voided": "bold red", "duplicate": "yellow"}
HISTORY = 30  # filters remembered (up / down in the filter field)


def fmt_size(n: int | None) -> str:
    """Bytes in the SIZE column's five characters (a chunked message's hundreds of KiB too)."""
    if n is None:
        return ""
    if n < 100_000:
        return str(n)
    return f"{n / 1024:.0f}k" if n < 10 * 1024 * 1024 else f"{n / (1024 * 1024):.0f}M"


def fmt_ago(seconds: float) -> str:
    return f"-{seconds:.3f}s" if seconds < 60 else f"-{int(seconds // 60)}m{seconds % 60:04.1f}s"


def message_row(r: TraceRecord, when: str, expanded: bool) -> Row:
    """A chunked or reliable message's event: one row (a chunked one folds its envelopes under it)."""
    res = Text(r.event, style=MESSAGE_STYLE.get(r.event, ""))
    if r.event == "retransmitted":
        res.append(f" #{r.attempt}", style="yellow")
    elif r.event in ("received", "send-error") and r.attempt:  # the final outcome, after so many transmissions
        res.append(f" ({r.attempt} tx)", style="dim")
    if r.reason:
        res.append(f": {r.reason}", style="red")
    chunks = r.chunks or 1
    kind = Text(r.type)
    if chunks > 1:
        kind.append(f" {'▾' if expanded else '▸'}{chunks}", style="bold magenta")
    who = Text(r.node)
    who.append(" out" if r.dir == "out" else " in", style="dim")
    return Row(key=(r.ts, r.id), cells=(when, who, Text(f"{r.sender} → {r.receiver}"), kind, str(r.seq or ""),
                                        fmt_size(r.size), res, Text(f"msg {r.message_id[:8]}", style="magenta")))


def control_row(r: TraceRecord, when: str) -> Row:
    """A control request at the node it was sent to (the `control` extension): who asked (the
    requester node, and the operator key's fingerprint), what, and whether the node applied it."""
    if r.outcome == "applied":
        res = Text(" ".join(x for x in ("applied", r.event, r.detail) if x), style="bold green")
    else:
        res = Text(r.result, style=OUTCOME_STYLE.get(r.outcome, ""))
        if r.event:
            res.append(f" {r.event}")
    who = Text(r.node)
    who.append(" in", style="dim")
    return Row(key=(r.ts, r.id), cells=(when, who, Text(f"{r.sender} → {r.receiver}"), r.type, "", "", res,
                                        Text(f"op {r.subject[:8]}" if r.subject else "", style="magenta")))


def trace_row(r: TraceRecord, now: float | None = None, expanded: bool = False) -> Row:
    when = fmt_ts(r.ts) if now is None else fmt_ago(max(0.0, now - r.ts))
    if r.kind == "message":
        return message_row(r, when, expanded)
    if r.kind == "control":
        return control_row(r, when)
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
    kind: Text | str = r.type
    if r.folded_chunk:  # shown under its message's row
        kind = Text(f" └ {r.chunk}/{r.chunks}", style="magenta")
    if r.message_id and not rid:
        rid = f"msg {r.message_id[:8]}"
    return Row(key=(r.ts, r.id), cells=(when, who, flow, kind, "" if r.seq is None else str(r.seq),
                                        fmt_size(r.size), res, rid + (" ◆" if r.envelope else "")))


class TraceRows(Sequence):
    """A lazy row sequence over a snapshot of the filtered view (in time order): rows are built
    when drawn.  A row's key is (time, record id), so the cursor is found by bisection."""

    def __init__(self, records: list[TraceRecord], newest_first: bool, built: dict[int, Row],
                 now: float | None = None, expanded: set[str] | frozenset[str] = frozenset(),
                 words: tuple[str, ...] = ()) -> None:
        self.records = records
        self.words = words  # the filter's words, marked in the cells
        self.expanded = expanded
        self.newest_first = newest_first
        self.now = now  # relative times are counted from here
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
            row = trace_row(rec, self.now, rec.message_id in self.expanded)
            if self.words:
                row = Row(row.key, tuple(highlighted(c, self.words) for c in row.cells), row.style)
            self._built[rec.id] = row
        return row

    def key_at(self, i: int) -> Any:
        r = self.record(i)
        return (r.ts, r.id)

    def index_of(self, key: Any) -> int | None:
        j = bisect.bisect_left(self.records, key, key=lambda r: (r.ts, r.id))
        if j < len(self.records) and self.records[j].id == key[1]:
            return len(self.records) - 1 - j if self.newest_first else j
        return None


class TraceTable(FastTable):
    """FastTable over TraceRows (lazy rows, cursor found by record time and id)."""

    def user_moved(self, target: int) -> None:
        # moving away from the tail stops following at once (before any repaint can reset the
        # cursor); moving back to the tail resumes it
        view = self.parent
        if isinstance(view, TracesView):
            tail = 0 if view.newest_first else max(0, len(self.rows) - 1)
            if view.follow != (target == tail):
                view.follow = target == tail
                view.show_status()


class FilterInput(Input):
    """The filter field: up / down walk through the filters used before."""

    BINDINGS = [Binding("up", "history(-1)", "Older filter", show=False),
                Binding("down", "history(1)", "Newer filter", show=False)]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.history: list[str] = []
        self._at = 0

    def remember(self, text: str) -> None:
        text = text.strip()
        if text:
            if text in self.history:
                self.history.remove(text)
            self.history = (self.history + [text])[-HISTORY:]
        self._at = len(self.history)

    def action_history(self, step: int) -> None:
        if not self.history:
            return
        self._at = max(0, min(len(self.history), self._at + step))
        self.value = self.history[self._at] if self._at < len(self.history) else ""
        self.cursor_position = len(self.value)


class TracesView(Vertical):
    BINDINGS = keymap.bindings("traces")

    def __init__(self, state: ConsoleState, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.state = state
        self.paused = False
        self.follow = True
        self.newest_first = True
        self.relative = False
        self._shown_total = -1
        self._filter_text = ""
        self._last_paint = 0.0
        self.min_repaint = 0.25  # at most ~4 repaints a second of a moving tail
        self._built_rows: dict[int, Row] = {}
        self._status_plain: str | None = None
        self.words: tuple[str, ...] = ()  # the filter's words (models/search.py)

    def compose(self) -> ComposeResult:
        with Horizontal(classes="toolbar"):
            yield FilterInput(placeholder="/ filter: node: type: outcome: reason: latency>50ms size>4k text…",
                              compact=True, id="traces-filter")
            yield Button("Pause", id="traces-pause", compact=True)
            yield Button("Envelope", id="traces-open", compact=True)
            yield Button("Follow call", id="traces-call", compact=True)
            if not self.state.readonly:
                yield Button("Replay", id="traces-replay", compact=True, variant="warning")
        yield TraceTable(COLUMNS, frozen=1, id="traces-table")
        yield Static(id="traces-status", classes="statusline")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "next_match":  # only with a word to find: else n is the app's launch
            return bool(self.words)
        return keymap.offered("traces", action, self.state.readonly)

    # ---- data
    def apply_filter(self) -> None:
        self.state.traces.set_filter(parse_query(self._filter_text, self.state.fabric_nodes()))
        words = search_words(self._filter_text)
        if words != self.words:
            self.words = words
            self._built_rows.clear()  # rows are built with the words marked
            self.refresh_bindings()  # n / N are offered while there is a word to find
        self._shown_total = -1
        self.refresh_view(force=True)

    def refresh_view(self, force: bool = False) -> None:
        store = self.state.traces
        if self.paused and not force:
            self.show_status()
            return
        if store.total == self._shown_total and not force:
            return
        now = time.monotonic()
        if not force and now - self._last_paint < self.min_repaint:
            return  # under load: the data is buffered, the next drain paints it
        self._last_paint = now
        self._shown_total = store.total
        table = self.query_one(TraceTable)
        if self.relative:
            self._built_rows.clear()  # relative times move: rows are rebuilt at each paint
        rows = TraceRows(list(store.view), self.newest_first, self._built_rows,
                         self.state.now() if self.relative else None, store.expanded, self.words)
        table.empty_text = self._empty_text()
        following = self.follow
        table.set_rows(rows, keep_key=not following)
        if following and len(rows):
            table.cursor = 0 if self.newest_first else len(rows) - 1
        self.show_status()

    def _empty_text(self) -> str:
        store = self.state.traces
        if store.ring:
            return (f"no traced envelope matches the filter ({len(store.ring):,} buffered): "
                    "Esc clears it")
        return "no traced envelopes yet (nodes write journals with --trace)"

    def show_status(self) -> None:
        store = self.state.traces
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f"{len(store.view):,} shown", style="bold")
        t.append(f" of {len(store.ring):,} buffered (capacity {store.capacity:,}, {store.total:,} seen)")
        if store.dropped:
            t.append(f"  {store.dropped:,} dropped under overload", style="bold yellow")
        if store.bad_lines:
            t.append(f"  {store.bad_lines} unreadable journal lines skipped", style="yellow")
        skipped = [w for w in self.state.reader_problems if w.startswith("journal ")]
        if skipped:
            t.append(f"  {len(skipped)} journal{'s' if len(skipped) != 1 else ''} skipped "
                     f"({', '.join(w[8:] for w in skipped[:2])}{', …' if len(skipped) > 2 else ''})",
                     style="bold yellow")
        t.append("  newest first" if self.newest_first else "  oldest first")
        if self.relative:
            t.append("  relative times")
        if self.follow:
            t.append("  FOLLOW", style="bold cyan")
        if self.paused:
            t.append(f"  PAUSED ({store.total - self._shown_total:,} new)", style="bold red")
        if t.plain != self._status_plain:
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
        if isinstance(event.input, FilterInput):
            event.input.remember(event.value)
        self.query_one(TraceTable).focus()

    def on_fast_table_selected(self, event: FastTable.Selected) -> None:
        self.action_open()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        {"traces-pause": self.action_pause, "traces-open": self.action_open,
         "traces-call": self.action_follow_call, "traces-replay": self.action_replay}[event.button.id]()

    # ---- actions
    def action_focus_filter(self) -> None:
        self.screen.set_focus(self.query_one("#traces-filter", Input))  # at once (as the Leases filter)

    def action_clear_filter(self) -> None:
        box = self.query_one("#traces-filter", FilterInput)
        box.remember(box.value)
        box.value = ""
        self.query_one(TraceTable).focus()

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.query_one("#traces-pause", Button).label = "Resume" if self.paused else "Pause"
        self.refresh_view(force=not self.paused)
        self.post_message(TracesPaused(self.paused))

    def action_follow(self) -> None:
        self.follow = not self.follow
        self.refresh_view(force=True)

    def action_order(self) -> None:
        self.newest_first = not self.newest_first
        self.refresh_view(force=True)

    def action_relative_time(self) -> None:
        self.relative = not self.relative
        self._built_rows.clear()
        self.refresh_view(force=True)

    def _need(self) -> TraceRecord | None:
        rec = self.selected()
        if rec is None:
            self.notify("select a traced envelope first", severity="warning")
        return rec

    def action_open(self) -> None:
        rec = self.selected()
        if rec is not None and rec.kind == "message":
            self.toggle_message(rec)
        elif rec is not None:
            self.post_message(OpenEnvelope(rec, self.words))

    def toggle_message(self, rec: TraceRecord) -> None:
        """Enter on a chunked message's row shows its envelopes under it (again: folds them)."""
        if (rec.chunks or 1) <= 1:
            self.notify(f"message {rec.message_id[:8]} went as one envelope: nothing to expand")
            return
        store = self.state.traces
        store.toggle_expanded(rec.message_id)  # ▸ becomes ▾ and the chunks appear under it (or fold again)
        self._built_rows.clear()  # its rows' ▸/▾ marks change
        self.follow = False  # the cursor stays on the message's row
        self.refresh_view(force=True)

    def action_next_match(self, step: int) -> None:
        """n / N: the next (previous) row whose cells, as drawn, hold a search word (wrapping).
        Rows are looked at from the cursor on and built as they are reached: the filter keeps
        only matching records, so the next one is near, and 20,000 rows are never built at once."""
        table = self.query_one(TraceTable)
        rows = table.rows
        for k in range(1, len(rows) + 1):
            i = (table.cursor + step * k) % len(rows)
            if matching_lines([row_text(rows[i])], self.words):
                table.user_moved(i)
                table.cursor = i
                return
        self.notify("no row shows the filter's words", severity="warning")

    def action_follow_call(self) -> None:
        rec = self.selected()
        if rec is None or not rec.request_id:
            self.notify("select an SPC request or response to follow its call", severity="warning")
            return
        self.post_message(OpenCallLink(rec))

    def action_replay(self) -> None:
        rec = self._need()
        if rec is not None:
            self.post_message(ReplayRequested(rec))

    def action_as_call(self) -> None:
        rec = self._need()
        if rec is not None:
            self.post_message(CallFromTrace(rec))

    def action_copy_call(self) -> None:
        rec = self._need()
        if rec is not None:
            self.post_message(CallFromTrace(rec, copy_only=True))

    def action_export(self) -> None:
        """The records the filter shows, as JSON lines (the journal's fields, oldest first)."""
        lines = [visible_json(record_dict(r), separators=(",", ":")) for r in self.state.traces.view]
        what = f"{len(lines)} trace records" + (f" matching {self._filter_text!r}" if self._filter_text else "")
        self.post_message(ExportRows("traces", "jsonl", lines, what))


def row_text(row: Row) -> str:
    """A row's cells as drawn, one line of text."""
    return " ".join(c.plain if isinstance(c, Text) else str(c) for c in row.cells)


def record_dict(r: TraceRecord) -> dict[str, Any]:
    """A record with the journal's field names (§8), empty fields left out."""
    d = {"ts": r.ts, "node": r.node, "kind": r.kind, "dir": r.dir, "peer": r.peer, "type": r.type, "seq": r.seq,
         "size": r.size, "outcome": r.outcome, "reason": r.reason, "requestId": r.request_id, "service": r.service,
         "status": r.status, "errorCode": r.error_code, "latencyMs": r.latency_ms, "messageId": r.message_id,
         "event": r.event, "chunk": r.chunk, "chunks": r.chunks, "attempt": r.attempt or None,
         "envelope": base64.b64encode(r.envelope).decode("ascii") if r.envelope else None}
    return {k: v for k, v in d.items() if v not in ("", None)}
