"""Help screen: views, keys (as currently bound) and where the config lives."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

VIEW_HELP = [
    ("Leases", "every registry entry: status, lease countdown, heartbeat age, pid, fabrics, services, "
               "counters. / filter, s sort, e expiring soon, x reap a stale entry, click a header to sort."),
    ("Fabrics", "groups as a tree with rolled-up health; Enter on a fabric filters every view."),
    ("Access", "who may write to whom (matrix and arrows); g grant, d revoke on a cell (✱: the node trusts "
               "your operator key); the explainer says if a call can work."),
    ("Traces", "every traced envelope. / filter (node: type: outcome: text), p pause, f follow, "
               "o order, Enter envelope, c follow call, R replay, C open as call. A chunked message is one row "
               "(▸N): Enter shows its chunks; reliable sends show retransmissions and the final outcome."),
    ("Replay", "per-node replay state and the outcome of the console's replays."),
    ("Analytics", "run the trace pipeline and show its summary."),
    ("Audit", "the operator's actions with equivalent `speed` commands; call history (r re-run, y copy)."),
    ("Security", "threat scores per receiver and sender (quota): score, state, rejections over five minutes, "
                 "last reasons; l lifts a quarantine at one of this console's in-process nodes."),
    ("Durable", "what waits in durable outboxes (target state, age, expiry) and inboxes; r reads them again "
                "(`speed outbox`), v verifies a node's receipt chains (`speed receipts NAME`). ◈ in Leases marks "
                "durable nodes."),
    ("Time travel", "@ (in Traces: at the selected record): the registry and traffic at a past moment, from the "
                    "journals and this console's registry scans; [ ] step, { } previous/next event, + - step "
                    "size, @ pick a moment, Esc back to live."),
    ("Logs", "L: stdout, stderr and health lines of the nodes this console started, followed live; s picks a "
             "node, / searches (n / N next and previous match), f follows, Esc closes."),
]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def __init__(self, bindings: list[tuple[str, str, str]], config_path: str) -> None:
        super().__init__()
        self.bindings_list = bindings
        self.config_path = config_path

    def compose(self) -> ComposeResult:
        views = Table(box=None, show_header=False, padding=(0, 1), expand=True)
        views.add_column(style="bold", no_wrap=True)
        views.add_column()
        for name, text in VIEW_HELP:
            views.add_row(name, text)
        keys = Table(box=None, padding=(0, 1), expand=True)
        keys.add_column("key", style="bold cyan", no_wrap=True)
        keys.add_column("action")
        keys.add_column("binding id (config)", style="dim")
        for key, desc, bid in self.bindings_list:
            keys.add_row(key, desc, bid)
        cfg = Text.assemble(("Key bindings are configurable: ", ""), (self.config_path, "bold"),
                            ('  e.g. {"keys": {"app.traces": "f5"}}', "dim"))
        with Vertical(classes="dialog", id="help-dialog"):
            yield Static("SPEED console — help (Esc closes)", classes="dialog-title")
            with VerticalScroll():
                yield Static(views)
                yield Static(keys)
                yield Static(cfg)
