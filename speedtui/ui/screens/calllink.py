"""Follow call: the SPC request and its response, linked by request id, with the round trip."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ...models.traces import CallLink
from ..views.common import fmt_ts


class CallLinkScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q", "dismiss", "Close")]

    def __init__(self, link: CallLink) -> None:
        super().__init__()
        self.link = link

    def compose(self) -> ComposeResult:
        lk = self.link
        head = Text()
        head.append(f"{lk.caller} → {lk.callee}  {lk.service or '?'}  request {lk.request_id}\n", style="bold")
        if lk.status:
            head.append(f"status {lk.status} {lk.error_code}".strip(),
                        style="green" if lk.status == "SUCCESS" else "red")
        else:
            head.append("no response seen (yet)", style="yellow")
        head.append(f"   round trip {lk.rtt_ms:.2f} ms" if lk.rtt_ms is not None else "   round trip unknown")
        t = Table(box=None, padding=(0, 1))
        for col in ("time", "step", "by", "type", "seq", "outcome"):
            t.add_column(col, no_wrap=True)
        t0 = lk.records[0].ts if lk.records else 0.0
        for r in lk.records:
            step = {("SPC_REQUEST", "out"): "request sent", ("SPC_REQUEST", "in"): "request received",
                    ("SPC_RESPONSE", "out"): "response sent", ("SPC_RESPONSE", "in"): "response received"
                    }.get((r.type, r.dir), r.type)
            # Text cells: a str cell of a rich table is markup, and the records' fields are members'
            t.add_row(*(Text(c) for c in (f"{fmt_ts(r.ts)} +{(r.ts - t0) * 1000:.1f}ms", step, r.node, r.type,
                                          str(r.seq), r.result)))
        with Vertical(classes="dialog", id="calllink-dialog"):
            yield Static("Follow call (Esc closes)", classes="dialog-title")
            with VerticalScroll():
                yield Static(head)
                yield Static(t)
