"""Replay inspection: the console's replays with their verdict (at the top, where no toast covers
it), then each node's replay state."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Static

from ...models.replays import replay_verdict
from ..state import ConsoleState
from ..widgets.fast_table import Column, FastTable, Row
from .common import fmt_ts

NODE_COLS = [Column("name", "NODE", 16), Column("senders", "SENDERS", 8), Column("rej", "REJECTED", 9)]
SHOWN = 6  # the newest replays listed


class ReplayView(Vertical):
    def __init__(self, state: ConsoleState, **kwargs) -> None:
        super().__init__(**kwargs)
        self.state = state
        self._sig: tuple | None = None
        self._state_sig: tuple | None = None
        self._log_sig: tuple | None = None

    def compose(self) -> ComposeResult:
        yield Static("Replay: select a traced envelope in Traces and press [b]R[/b]. The exact sealed "
                     "bytes are re-delivered; the receiver must reject them.", classes="hint")
        yield Static(id="replay-log", classes="detail")
        with Horizontal(id="replay-body"):
            yield FastTable(NODE_COLS, id="replay-nodes")
            with VerticalScroll(id="replay-detail", classes="detail"):
                yield Static(id="replay-state")

    def on_mount(self) -> None:
        self.query_one(FastTable).empty_text = "no nodes"

    def refresh_view(self, force: bool = False) -> None:
        reg = self.state.registry
        names = sorted(r.name for r in reg.rows if reg.in_fabric(r))
        rows = []
        for n in names:
            st = self.state.replay_state_for(n)
            rows.append(Row(n, (n, str(len(st["last_accepted"])), str(len(st["rejections"])))))
        table = self.query_one(FastTable)
        sig = tuple(r.cells for r in rows)
        if sig != self._sig:
            self._sig = sig
            table.set_rows(rows)
        self.show_state(table.cursor_key)
        self.show_log()

    def show_state(self, name: str | None) -> None:
        body = self.query_one("#replay-state", Static)
        if not name:
            body.update(Text("select a node", style="dim"))
            return
        st = self.state.replay_state_for(name)
        sig = (name, repr(st))
        if sig == self._state_sig:
            return
        self._state_sig = sig
        t = Text()
        t.append(f"{name}", style="bold")
        t.append(f"  ({st.get('source', 'journals')})\n", style="dim")
        t.append("last accepted sequence per sender:\n", style="bold")
        if not st["last_accepted"]:
            t.append("  none seen\n", style="dim")
        for peer, seq in st["last_accepted"].items():
            t.append(f"  {peer:<20} {seq}\n")
        t.append("recent rejections:\n", style="bold")
        if not st["rejections"]:
            t.append("  none\n", style="dim")
        for r in st["rejections"][-10:]:
            t.append(f"  {fmt_ts(r.ts)}  from {r.peer:<14} seq {r.seq}  ", style="")
            t.append(f"{r.reason}\n", style="red")
        body.update(t)

    def show_log(self) -> None:
        log = self.state.replays.replays
        sig = tuple((p.ts, p.outcome, p.reason) for p in log[-SHOWN:])
        if sig == self._log_sig:
            return
        self._log_sig = sig
        t = Text()
        t.append("replays by this console:\n", style="bold")
        if not log:
            t.append("  none yet\n", style="dim")
        for rp in log[-SHOWN:]:
            t.append(f"  {fmt_ts(rp.ts)}  {rp.sender} → {rp.receiver} {rp.type} seq {rp.seq}: ")
            if rp.outcome == "pending":
                t.append("waiting for the receiver…\n", style="yellow")
            elif rp.outcome == "rejected":
                text, proved = replay_verdict(rp.reason)
                t.append(text + "\n", style="green" if proved else "yellow")
            elif rp.outcome == "accepted":
                t.append("ACCEPTED: the receiver took a replayed envelope!\n", style="bold red")
            else:
                t.append(f"{rp.outcome} {rp.reason}\n", style="yellow")
        self.query_one("#replay-log", Static).update(t)

    def on_fast_table_highlighted(self, event: FastTable.Highlighted) -> None:
        self.show_state(event.key)
