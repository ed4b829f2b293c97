"""Time travel (`@`): the registry and the traffic at a past moment, reconstructed from the
journals and from the registry scans this console made; step backwards and forwards, from event
to event, pick a moment; Esc is live again. The reconstruction is ``models/timetravel.py``; the
journals are read in a worker (``services/journal_history.py``)."""

from __future__ import annotations

from functools import partial
from typing import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Input, Static

from ...models.registry import fmt_duration
from ...models.timetravel import (GONE, LEAVING, LEFT, ONLINE, STALE, STEPS, UNKNOWN, Moment, PastNode,
                                  RegistryHistory, event_times, neighbour, parse_moment, reconstruct)
from ...models.traces import TraceRecord
from ...services.journal_history import JournalHistory
from ..messages import PastReady
from ..views.common import HEALTH_ICON, fmt_ts
from ..views.traces import OUTCOME_STYLE
from ..widgets.fast_table import Column, FastTable, Row
from ..widgets.footer import SpeedFooter

PAST_STYLE = {ONLINE: ("●", "green"), LEAVING: ("◐", "yellow"), STALE: ("○", "bold red"), LEFT: ("◌", "yellow"),
              GONE: ("⊘", "red"), UNKNOWN: ("?", "dim")}
NODE_COLUMNS = [Column("name", "NAME", 13), Column("state", "STATE", 9), Column("since", "SINCE", 8),
                Column("evidence", "EVIDENCE", 26, flex=True), Column("allow", "ALLOW", 18),
                Column("groups", "FABRICS", 12), Column("traffic", "TRAFFIC", 14)]
TRAFFIC_COLUMNS = [Column("ts", "AT", 9), Column("node", "JOURNAL", 12), Column("flow", "FROM → TO", 20),
                   Column("type", "TYPE", 12), Column("seq", "SEQ", 5), Column("result", "OUTCOME", 22, flex=True)]
WINDOW = 5.0  # seconds of traffic shown on each side of the moment


def state_text(state: str) -> Text:
    icon, style = PAST_STYLE.get(state, ("?", ""))
    return Text(f"{icon} {state}", style=style)


def node_row(n: PastNode, at: float) -> Row:
    if n.allow is None:
        allow = Text("unknown", style="dim")
    else:
        allow = Text(("?" if n.grants_later else "") + (",".join(n.allow) or "-"),
                     style="dim" if n.grants_later else "")
    groups = "?" if n.groups is None else (",".join(n.groups) or "-")
    evidence = Text(n.evidence)
    if n.health:
        evidence = Text(f"{HEALTH_ICON} {n.health}; ", style="yellow") + evidence
    traffic = f"tx{n.sent} rx{n.received}" + (f" rej{n.rejected}" if n.rejected else "") \
        if n.sent or n.received else "-"
    since = "-" if n.since is None else fmt_duration(n.since - at)
    return Row(key=n.name, cells=(Text(n.name, style="bold"), state_text(n.state), since, evidence, allow, groups,
                                  traffic))


def node_detail(n: PastNode, m: Moment) -> Text:
    """Everything known of one node at the moment, wrapped (the table's cells are cut to fit)."""
    t = Text()
    t.append(f"{n.name} ", style="bold")
    t.append_text(state_text(n.state))
    if n.since is not None:
        t.append(f" since {fmt_ts(n.since)}")
    t.append(f": {n.evidence}")
    if n.health:
        t.append(f" · {HEALTH_ICON} {n.health}", style="yellow")
    if n.allow is None:
        t.append(" · grants unknown (no registry scan of it by this console)", style="dim")
    else:
        t.append(f" · allows {', '.join(n.allow) or 'nobody'}")
        t.append(f" (as first seen later, at {fmt_ts(n.grants_from)})" if n.grants_later
                 else f" (registry scan at {fmt_ts(n.grants_from)})", style="dim")
    if n.groups:
        t.append(f" · fabrics {', '.join(n.groups)}")
    if n.lease:
        t.append(f" · lease {n.lease:g}s")
    t.append(f" · around it: sent {n.sent}, received {n.received}, rejected {n.rejected}" if n.sent or n.received
             else f" · no traffic of its own within ±{m.window:g}s")
    return t


def traffic_row(r: TraceRecord, at: float) -> Row:
    offset = r.ts - at
    when = f"{'+' if offset >= 0 else '-'}{abs(offset):.3f}s"
    if r.kind != "envelope":  # a lease or health record around the moment
        what = Text(f"{r.event}" + (f": {r.detail}" if r.detail else ""),
                    style="yellow" if r.kind == "health" else "cyan")
        return Row(key=(r.ts, r.id), cells=(when, r.node, r.subject, r.kind, "", what))
    res = Text(r.result, style=OUTCOME_STYLE.get(r.outcome, ""))
    if r.error_code:
        res.append(f" {r.error_code}", style="red")
    who = Text(r.node)
    who.append(" out" if r.dir == "out" else " in", style="dim")
    return Row(key=(r.ts, r.id), cells=(when, who, f"{r.sender} → {r.receiver}", r.type, str(r.seq), res))


class MomentInput(Input):
    """The moment field: Esc leaves it (elsewhere on this screen, Esc is live again)."""

    BINDINGS = [Binding("escape", "leave", "Leave the field", show=False)]

    def action_leave(self) -> None:
        self.screen.query_one("#past-nodes", FastTable).focus()


class TimeTravelScreen(Screen):
    BINDINGS = [
        Binding("escape", "live", "Live", id="past.live"),
        Binding("left_square_bracket", "step(-1)", "Back", id="past.back"),
        Binding("right_square_bracket", "step(1)", "On", id="past.forward"),
        Binding("left_curly_bracket", "event(-1)", "Prev event", id="past.previous"),
        Binding("right_curly_bracket", "event(1)", "Next event", id="past.next"),
        Binding("plus", "step_size(1)", "Longer step", id="past.longer", show=False),
        Binding("minus", "step_size(-1)", "Shorter step", id="past.shorter", show=False),
        Binding("at", "pick", "Moment", id="past.pick"),
    ]

    def __init__(self, at: float, source: JournalHistory, history: RegistryHistory,
                 own_records: Callable[[float, float], list[TraceRecord]], now: Callable[[], float],
                 steady: bool = False) -> None:
        super().__init__()
        self.at = at
        self.source = source
        self.history = history
        self.own_records = own_records  # records of the console's own nodes (observers, not journaled)
        self.now = now
        self.steady = steady
        self.step = 10.0
        self.moment: Moment | None = None
        self.times: list[float] = []

    def compose(self) -> ComposeResult:
        with Horizontal(id="past-bar"):
            yield Static(id="past-title")
            yield MomentInput(placeholder="@ a moment: -5m, 14:32:10…", compact=True, id="past-at")
        yield Static(id="past-summary", classes="hint")
        yield FastTable(NODE_COLUMNS, frozen=2, id="past-nodes")
        yield Static(id="past-detail", classes="detail")
        yield Static(id="past-traffic-title", classes="section")
        yield FastTable(TRAFFIC_COLUMNS, frozen=1, id="past-traffic")
        yield SpeedFooter()

    def on_mount(self) -> None:
        self.query_one("#past-nodes", FastTable).empty_text = "reading the journals…"
        self.query_one("#past-traffic", FastTable).empty_text = "no envelope traced around this moment"
        self.query_one("#past-nodes", FastTable).focus()
        self.travel(self.at)

    # ---- loading
    def travel(self, at: float) -> None:
        self.at = at
        self._title(loading=True)
        own = self.own_records(at - WINDOW, at + WINDOW)
        self.run_worker(partial(self._load, at, self.history.snapshot(), own), thread=True, exclusive=True,
                        group="past")

    def _load(self, at: float, history: RegistryHistory, own: list[TraceRecord]) -> None:
        lifecycle = self.source.refresh() + [r for r in own if r.kind != "envelope"]
        found, total = self.source.window(at - WINDOW, at + WINDOW, at)
        traffic = found + [r for r in own if r.kind == "envelope"]
        moment = reconstruct(at, lifecycle, traffic, history, WINDOW, total=total + len(traffic) - len(found))
        self.post_message(PastReady(moment, event_times(lifecycle, history)))

    def on_past_ready(self, m: PastReady) -> None:
        if m.moment.at != self.at:
            return  # an older step, overtaken
        self.moment, self.times = m.moment, m.event_times
        self._show(m.moment)

    # ---- drawing
    def _title(self, loading: bool = False) -> None:
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(" ⏪ PAST ", style="bold reverse")
        t.append(f" {fmt_ts(self.at)}", style="bold")
        ago = self.now() - self.at
        t.append(f" ({fmt_duration(ago)} ago)" if ago >= 0 else f" (in {fmt_duration(-ago)})", style="dim")
        t.append(f"  step {fmt_duration(self.step)}")
        if loading:
            t.append("  reading…", style="dim")
        self.query_one("#past-title", Static).update(t)

    def _show(self, m: Moment) -> None:
        self._title()
        c = m.counts()
        s = Text()
        s.append(f"{len(m.nodes)} nodes: ", style="bold")
        s.append(" ".join(f"{PAST_STYLE[k][0]}{c[k]} {k}" for k in (ONLINE, LEAVING, STALE, LEFT, GONE, UNKNOWN)
                          if c.get(k)))
        s.append(" · grants from this console's registry scans" +
                 (f" (since {fmt_ts(m.scans_from, ms=False)}; ? = first seen later)" if m.scans_from else ""))
        if m.journals_from is not None:
            s.append(f" · journals {fmt_ts(m.journals_from, ms=False)}–{fmt_ts(m.journals_to, ms=False)}")
        self.query_one("#past-summary", Static).update(s)
        nodes = self.query_one("#past-nodes", FastTable)
        nodes.empty_text = "no node known at this moment"
        nodes.set_rows([node_row(n, m.at) for n in m.nodes])
        self._detail(nodes.cursor_key)
        rows = sorted([*m.traffic, *m.events], key=lambda r: (r.ts, r.id))
        title = Text(f"around it (±{WINDOW:g}s): {m.traffic_total} envelopes", style="bold")
        if len(m.traffic) < m.traffic_total:
            title.append(f", the {len(m.traffic)} nearest shown", style="dim")
        if m.events:
            title.append(f", {len(m.events)} lease/health records")
        self.query_one("#past-traffic-title", Static).update(title)
        table = self.query_one("#past-traffic", FastTable)
        table.set_rows([traffic_row(r, m.at) for r in rows], keep_key=False)
        if rows:  # the cursor on the first record at or after the moment
            table.cursor = next((i for i, r in enumerate(rows) if r.ts >= m.at), len(rows) - 1)

    def _detail(self, name: str | None) -> None:
        m = self.moment
        node = next((n for n in m.nodes if n.name == name), None) if m is not None and name else None
        self.query_one("#past-detail", Static).update(node_detail(node, m) if node is not None else "")

    def on_fast_table_highlighted(self, event: FastTable.Highlighted) -> None:
        if event.table.id == "past-nodes":
            self._detail(event.key)

    # ---- keys
    def action_live(self) -> None:
        self.app.pop_screen()

    def action_step(self, direction: int) -> None:
        self.travel(self.at + direction * self.step)

    def action_event(self, direction: int) -> None:
        t = neighbour(self.at, self.times, direction)
        if t is None:
            self.notify("no earlier event recorded" if direction < 0 else "no later event recorded",
                        severity="warning")
            return
        self.travel(t)

    def action_step_size(self, direction: int) -> None:
        i = min(range(len(STEPS)), key=lambda k: abs(STEPS[k] - self.step))
        self.step = STEPS[max(0, min(len(STEPS) - 1, i + direction))]
        self._title()

    def action_pick(self) -> None:
        box = self.query_one("#past-at", Input)
        box.value = ""
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            at = parse_moment(event.value, self.now())
        except ValueError as exc:
            self.notify(str(exc), severity="warning")
            return
        self.query_one("#past-nodes", FastTable).focus()
        self.travel(at)

