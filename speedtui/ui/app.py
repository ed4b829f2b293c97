"""The SPEED console application: wiring and message routing.  ``make_app(...)`` builds it (the
CLI and the tests use it).  Views read the models in ``ConsoleState`` and post typed messages;
actions run in thread workers and report back with messages."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Iterable

from speed_runtime.core.visible import visible, visible_lines
from textual import events, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Button, Input, Static, TabbedContent, TabPane

from ..models.access import AccessGraph
from ..models.traces import TraceRecord
from ..paths import Paths
from ..services import runtime as rt
from ..services.actions import ActionError, ActionService
from ..services.bridge import Bridge
from ..services.clock import Clock, SystemClock
from ..services.config import Config
from ..services.history import AuditLog, CallHistory
from ..services.journal_history import JournalHistory
from ..services.operator import OperatorChoice
from . import messages as msg
from .feed import Feed
from .gc_pacer import CollectorPacer
from .navigation import Navigator
from .ext_operations import ExtOperations
from .operations import Operations
from .palette import help_rows, palette_commands
from .screens.help import HelpScreen
from .screens.jump import JumpTarget
from .state import ConsoleState
from .themes import ThemeKeeper
from .views.access import AccessView
from .views.analytics import AnalyticsView
from .views.audit import AuditView
from .views.durable import DurableView
from .views.fabrics import FabricsView
from .views.leases import LeasesView
from .views.replay import ReplayView
from .views.security import SecurityView
from .views.traces import TracesView
from .widgets.footer import SpeedFooter
from .widgets.header import SpeedHeader

VIEWS = [("leases", "Leases"), ("fabrics", "Fabrics"), ("access", "Access"), ("traces", "Traces"),
         ("replay", "Replay"), ("analytics", "Analytics"), ("audit", "Audit"), ("security", "Security"),
         ("durable", "Durable")]
ACTIONS = ("launch", "stop_node", "grant", "call", "send")  # every one changes the environment


class SpeedApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "SPEED console"
    BINDINGS = [
        *[Binding(str(i + 1), f"show('{vid}')", label, id=f"app.{vid}", show=False) for i, (vid, label) in enumerate(VIEWS)],
        Binding("question_mark,f1", "help", "Help", id="app.help"),
        Binding("colon", "jump", "Jump", id="app.jump", show=False),
        Binding("at", "time_travel", "Time travel", id="app.past", show=False),
        Binding("n", "launch", "Launch node", id="app.launch"),
        Binding("d", "stop_node", "Stop node", id="app.stop"),
        Binding("g", "grant", "Grant", id="app.grant"),
        Binding("F", "call", "Call", id="app.call"),
        Binding("m", "send", "Message", id="app.send"),
        Binding("t", "next_theme", "Theme", id="app.theme", show=False),
        Binding("q", "quit", "Quit", id="app.quit"),
    ]

    def __init__(self, root: Path, key: rt.KeyInfo | None, *, readonly: bool = False, theme: str | None = None,
                 clock: Clock | None = None, paths: Paths | None = None, config: Config | None = None,
                 demo: Any = None, dir_label: str | None = None, start_sources: bool = True,
                 refresh_interval: float = 0.1, trace_capacity: int | None = None,
                 initial_view: str = "leases", steady: bool = False, pace_gc: bool = True,
                 operator: OperatorChoice | None = None) -> None:
        super().__init__()
        self.operator = operator or OperatorChoice()  # the operator key for `control` requests, if any
        self.root = Path(root)
        self.key = key
        self.readonly = readonly
        self.clock = clock or SystemClock()
        self.paths = paths or Paths.default()
        self.config = config or Config.load(self.paths.config_file)
        self.demo = demo
        self.dir_label = visible(dir_label or str(self.root))
        self.start_sources = start_sources
        self.refresh_interval = refresh_interval
        self.initial_view = initial_view
        self.steady = steady  # no blinking cursors or animations (snapshots, screenshots)
        if steady:
            self.animation_level = "none"
        self.bridge = Bridge()
        # the environment's own audit log and call history: another ROOT never shows (or re-runs) them
        self.audit = AuditLog(self.paths.audit_log(self.root), now=self.clock.time)
        self.calls = CallHistory(self.paths.call_history(self.root))
        self.actions = None if key is None else ActionService(self.root, key, self.bridge, self.audit, self.calls,
                                                               self.clock, readonly, operator=self.operator,
                                                               own_operator_key=self.paths.env_dir(self.root) / "operator.key")
        self.state = ConsoleState.build(self.root, self.dir_label, key, self.actions, self.audit, self.calls,
                                        self.clock.time, trace_capacity or self.config.trace_buffer,
                                        readonly=readonly, steady=steady,
                                        operator_fingerprint=self.operator.fingerprint)
        self.registry = self.state.registry
        self.traces = self.state.traces
        self.sources: list = []
        self.theme_keeper = ThemeKeeper(self, self.config, [self.paths.config_dir / "themes"], theme)
        self._stopped = False
        self.feed = Feed(self)  # the data flow: bridge -> models -> the active view
        self.nav = Navigator(self, VIEWS)  # views, focus, fabric filter, jumps, time travel
        self.gc_pacer = CollectorPacer() if pace_gc else None
        self.journal_history: JournalHistory | None = None  # time travel's reader, kept between trips
        self.ops = Operations(self)
        self.ext_ops = ExtOperations(self)  # the Security and Durable views' requests

    @property
    def replays(self):
        return self.state.replays.replays

    @property
    def fabric(self) -> str | None:
        return self.state.fabric

    def replay_state_for(self, name: str) -> dict[str, Any]:
        return self.state.replay_state_for(name)

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield SpeedHeader(self.dir_label, self.key.fingerprint if self.key else "no key", self.readonly,
                          self.demo is not None, self.operator.fingerprint)
        yield Static(id="banner")
        views = {"leases": LeasesView, "fabrics": FabricsView, "access": AccessView, "traces": TracesView,
                 "replay": ReplayView, "audit": AuditView, "security": SecurityView, "durable": DurableView}
        with TabbedContent(initial=self.initial_view, id="views"):
            for i, (vid, label) in enumerate(VIEWS):
                with TabPane(f"{i + 1} {label}", id=vid):
                    # the analytics view is another engineer's and reads the app itself
                    yield AnalyticsView(id="view-analytics") if vid == "analytics" else \
                        views[vid](self.state, id=f"view-{vid}")
        if not self.readonly:
            with Horizontal(id="actionbar"):
                for bid, label in (("launch", "n Launch"), ("stop_node", "d Stop"), ("grant", "g Grant"),
                                   ("call", "F Call"), ("send", "m Message"), ("jump", ": Jump"),
                                   ("help", "? Help")):
                    yield Button(label, id=f"act-{bid}", compact=True, classes="actbtn")
        yield SpeedFooter()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ACTIONS and self.readonly:
            return None  # not offered at all: footer, help and palette leave them out
        return True

    def on_button_pressed(self, event: Button.Pressed) -> None:
        bid = event.button.id or ""
        if bid.startswith("act-"):
            event.stop()
            self.focus_view(self.active_view())  # keys keep working in the view afterwards
            getattr(self, f"action_{bid[4:]}")()

    def on_resize(self, event) -> None:
        self.nav.label_tabs(event.size.width)

    def on_mount(self) -> None:
        self._header = self.query_one(SpeedHeader)
        self._tabs = self.query_one("#views", TabbedContent)
        self.nav.label_tabs(self.size.width)
        self._views = {vid: self.query_one(f"#view-{vid}") for vid, _ in VIEWS}
        self.query_one("#banner").display = False
        self.theme_keeper.apply()
        if self.config.keys:
            self.set_keymap(self.config.keys)
        if self.config.warning:
            self.notify(self.config.warning, severity="warning")
        if self.operator.problem:
            self.notify(self.operator.problem, title="operator key", severity="warning", timeout=10)
        if self.start_sources:
            self.sources = self.feed.start_readers()
        if self.demo is not None and self.actions is not None:
            self.demo.hand_over(self.actions.own)  # its traffic driver calls and sends for the console
        self.drain()
        self.set_interval(self.refresh_interval, self.drain, name="drain")
        self.set_interval(1.0, self.tick, name="tick")
        self.focus_view(self.initial_view)
        if self.gc_pacer is not None:
            # a second in, the widget tree and styles are built: freeze them out of the collector's walk
            self.set_timer(1.0, self.gc_pacer.start, name="gc-start")
            self.set_interval(0.25, self.gc_pacer.tick, name="gc-pacer")

    async def on_event(self, event: events.Event) -> None:
        if self.gc_pacer is not None and isinstance(event, (events.Key, events.MouseDown, events.MouseScrollDown,
                                                            events.MouseScrollUp)):
            self.gc_pacer.input_seen()
        await super().on_event(event)

    def notify(self, message: str, *, title: str = "", severity: str = "information", timeout: float | None = None,
               markup: bool = False) -> None:
        """Every notification is plain text with its control characters written out, whatever its
        caller asks: many quote what members wrote (names, file names, errors, entries), and markup
        there would be theirs (a `[@click=...]` link runs any action of the app when clicked)."""
        super().notify(visible_lines(str(message)), title=visible(str(title)), severity=severity, timeout=timeout,
                       markup=False)

    def on_descendant_focus(self, event) -> None:
        if self.steady and isinstance(event.widget, Input):
            event.widget.cursor_blink = False

    def watch_theme(self, theme: str) -> None:
        self.theme_keeper.remember(theme)

    def theme_names(self) -> list[str]:
        return self.theme_keeper.names()

    # ------------------------------------------------------------------ data flow
    def _live(self) -> bool:
        return not self._stopped and self.is_running

    def drain(self) -> None:
        if self._live():
            self.feed.drain()

    def tick(self) -> None:
        self.feed.tick()

    def active_view(self) -> str:
        return self._tabs.active or "leases"

    def view_widget(self, vid: str):
        return self._views[vid]

    def refresh_active(self, registry: bool = True) -> None:
        vid = self.active_view()
        if registry or vid in ("traces", "replay", "security"):
            self.view_widget(vid).refresh_view()
        self.update_header()

    def update_header(self) -> None:
        paused = self.view_widget("traces").paused
        self._header.update_info(self.registry.counts(), self.traces.rate_series(self.clock.time()),
                                 paused, self.fabric)

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if not self._live() or not hasattr(self, "_views"):
            return
        vid = event.pane.id or "leases"
        self.view_widget(vid).refresh_view(force=True)
        self.focus_view(vid)

    def focus_view(self, vid: str) -> None:
        self.nav.focus_view(vid)

    def set_fabric(self, fabric: str | None) -> None:
        self.nav.set_fabric(fabric)

    def show_node(self, name: str) -> None:
        self.nav.show_node(name)

    def jump_targets(self) -> dict[str, JumpTarget]:
        return self.nav.jump_targets()

    def jump_to(self, target: JumpTarget) -> None:
        self.nav.jump_to(target)

    def action_jump(self) -> None:
        self.nav.jump()

    def action_time_travel(self, at: float | None = None) -> None:
        """The registry and traffic at a past moment (the selected trace's time in Traces, else a
        minute ago)."""
        self.nav.time_travel(at)

    def action_show(self, vid: str) -> None:
        self._tabs.active = vid
        self.focus_view(vid)  # at once: keys typed right after the switch go to the new view

    # ------------------------------------------------------------------ requests from views and dialogs
    def on_choose_fabric(self, m: msg.ChooseFabric) -> None:
        self.set_fabric(m.fabric)

    def on_show_node(self, m: msg.ShowNode) -> None:
        self.show_node(m.name)

    def on_traces_paused(self, m: msg.TracesPaused) -> None:
        self.update_header()

    def on_reap_requested(self, m: msg.ReapRequested) -> None:
        self.ops.reap(m.name)

    def on_open_envelope(self, m: msg.OpenEnvelope) -> None:
        self.ops.envelope(m.record)

    def on_open_call_link(self, m: msg.OpenCallLink) -> None:
        self.ops.call_link(m.record)

    def on_replay_requested(self, m: msg.ReplayRequested) -> None:
        self.ops.replay(m.record)

    def on_call_from_trace(self, m: msg.CallFromTrace) -> None:
        self.ops.call_from_trace(m.record, copy_only=m.copy_only)

    def on_grant_requested(self, m: msg.GrantRequested) -> None:
        self.ops.grant(m.node, m.peer, revoke=m.revoke)

    def on_call_requested(self, m: msg.CallRequested) -> None:
        self.ops.open_call(m.caller, m.target, m.service, m.arguments, m.timeout)

    def on_run_call(self, m: msg.RunCall) -> None:
        self.ops.run_call(m)

    def on_copy_text(self, m: msg.CopyText) -> None:
        self.ops.copy(m.text, m.what)

    def on_export_rows(self, m: msg.ExportRows) -> None:
        self.ops.export(m)

    def on_start_console_node(self, m: msg.StartConsoleNode) -> None:
        self.ops.start_console_node(m.then)

    def on_lift_quarantine(self, m: msg.LiftQuarantine) -> None:
        self.ext_ops.lift(m.receiver, m.sender)

    def on_list_outboxes(self, m: msg.ListOutboxes) -> None:
        self.ext_ops.list_outboxes(m.explicit)

    def on_verify_receipts(self, m: msg.VerifyReceipts) -> None:
        self.ext_ops.verify_receipts(m.name)

    # ------------------------------------------------------------------ keys and what tests drive
    def action_launch(self) -> None:
        self.ops.launch()

    def action_stop_node(self) -> None:
        self.ops.stop()

    def action_grant(self) -> None:
        self.ops.grant()

    def action_call(self) -> None:
        self.ops.open_call()

    def action_send(self) -> None:
        self.ops.send()

    def open_grant(self, node: str | None = None, peer: str | None = None, revoke: bool = False) -> None:
        self.ops.grant(node, peer, revoke=revoke)

    def open_call(self, caller: str | None = None, target: str = "", service: str = "",
                  arguments: dict | None = None, timeout: float = 5.0) -> None:
        self.ops.open_call(caller, target, service, arguments, timeout)

    def request_replay(self, rec: TraceRecord) -> None:
        self.ops.replay(rec)

    def graph(self) -> AccessGraph:
        return self.state.graph()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(help_rows(self, VIEWS), str(self.paths.config_file)))

    def action_next_theme(self) -> None:
        self.theme_keeper.next()

    # ------------------------------------------------------------------ results of workers
    @work(thread=True, group="call")
    def run_call(self, caller: str, target: str, service: str, arguments: dict, timeout: float,
                 grant_first: bool = False, revoke_after: bool = False) -> None:
        try:
            rec = self.actions.call(caller, target, service, arguments, timeout, grant_first, revoke_after)
        except ActionError as exc:
            self.post_message(msg.ActionDone("call", False, str(exc)))
            return
        self.post_message(msg.CallFinished(rec))

    def on_call_finished(self, m: msg.CallFinished) -> None:
        if self._live():
            self.ops.call_finished(m.record)

    def on_replay_injected(self, m: msg.ReplayInjected) -> None:
        if self._live():
            self.ops.replay_injected(m.result)
            self.ops.after_action()

    def on_action_done(self, m: msg.ActionDone) -> None:
        if self._live():
            self.ops.action_done(m)

    def on_pipeline_progress(self, m: msg.PipelineProgress) -> None:
        if self._live():
            self.view_widget("analytics").progress(m.fraction, m.text)

    def on_pipeline_finished(self, m: msg.PipelineFinished) -> None:
        if self._live():
            self.ops.pipeline_finished(m)

    # ------------------------------------------------------------------ command palette
    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield from palette_commands(self, VIEWS)

    # ------------------------------------------------------------------ shutdown
    def shutdown(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        for s in self.sources:
            s.stop()
        if self.demo is not None:
            self.demo.stop()  # its traffic driver first, then its processes
            # the demo's environment is gone: so is what the console kept about it
            shutil.rmtree(self.paths.env_dir(self.root), ignore_errors=True)
        if self.actions is not None:
            self.actions.stop_all()
        if self.gc_pacer is not None:
            self.gc_pacer.stop()

    def on_unmount(self) -> None:
        self.shutdown()


def make_app(root: Path | str, key: rt.KeyInfo | None, **kwargs: Any) -> SpeedApp:
    """Build the console; tests pass ``clock``, ``paths``, ``dir_label``, ``start_sources``."""
    return SpeedApp(Path(root), key, **kwargs)
