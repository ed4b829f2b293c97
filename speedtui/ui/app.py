"""The SPEED console application: wiring and message routing.  ``make_app(...)`` builds it (the
CLI and the tests use it).  Views read the models in ``ConsoleState`` and post typed messages;
actions run in thread workers and report back with messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from rich.text import Text
from speed_runtime.core.visible import visible, visible_lines
from textual import events
from textual.app import App, ComposeResult, SystemCommand
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Button, Input, Static, TabbedContent, TabPane

from ..paths import Paths
from ..services import runtime as rt
from ..services.clock import Clock
from ..services.console import ConsoleServices
from ..services.config import Config
from ..services.operator import OperatorChoice
from . import messages as msg
from .controller import Controller
from .feed import Feed
from .gc_pacer import CollectorPacer
from .navigation import Navigator
from . import keymap
from .keymap import VIEWS
from .palette import help_rows, palette_commands
from .screens.confirm import ConfirmScreen
from .screens.help import HelpScreen
from .screens.logs import LogsScreen
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

STEADY_NOTIFICATION_SECONDS = 3600.0  # a steady app's notifications (snapshots, screenshots) stay


class MainScreen(Screen):
    """The views' screen. With the action bar, it binds the bar's keys again, unshown: its footer
    shows the view's keys only (keymap.bar_bindings)."""

    def __init__(self, action_bar: bool) -> None:
        super().__init__()
        for binding in keymap.bar_bindings() if action_bar else ():
            for key in binding.key.split(","):  # new lists: the class's map shares its own
                self._bindings.key_to_bindings[key] = [*self._bindings.key_to_bindings.get(key, []), binding]


class SpeedApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "SPEED console"
    BINDINGS = keymap.bindings("app")

    def __init__(self, services: ConsoleServices, *, theme: str | None = None, dir_label: str | None = None,
                 start_sources: bool = True, refresh_interval: float = 0.1, trace_capacity: int | None = None,
                 initial_view: str = "leases", steady: bool = False, pace_gc: bool = True) -> None:
        super().__init__()
        self.services = services  # built by make_app; ended by shutdown
        # what the parts are handed (the app routes; it does not do)
        self.root, self.key, self.readonly = services.root, services.key, services.readonly
        self.clock, self.paths, self.config = services.clock, services.paths, services.config
        self.operator, self.demo = services.operator, services.demo  # the operator key for `control` requests
        self.bridge, self.audit, self.calls, self.actions = services.bridge, services.audit, services.calls, \
            services.actions
        self.dir_label = visible(dir_label or str(self.root))
        self.start_sources = start_sources
        self.refresh_interval = refresh_interval
        self.initial_view = initial_view
        self.steady = steady  # no blinking cursors or animations (snapshots, screenshots)
        if steady:
            self.animation_level = "none"
        self.state = ConsoleState.build(self.root, self.dir_label, self.key, self.actions, self.audit, self.calls,
                                        self.clock.time, trace_capacity or self.config.trace_buffer,
                                        readonly=self.readonly, steady=steady,
                                        operator_fingerprint=self.operator.fingerprint)
        self.registry = self.state.registry
        self.traces = self.state.traces
        self.sources: list = []
        self.theme_keeper = ThemeKeeper(self, self.config, [self.paths.config_dir / "themes"], theme)
        self._stopped = False
        # the data flow: bridge -> models -> the active view
        self.feed = Feed(self.bridge, self.state, self.clock, self, self.refresh_active, self.show_banner,
                         lambda text: self.log.warning(text))
        # views, focus, fabric filter, jumps, time travel
        self.nav = Navigator(self, self.state, VIEWS, self.root, self.clock.time, steady, self.update_header)
        self.gc_pacer = CollectorPacer() if pace_gc else None
        self.controller = Controller(self, self.state, self.actions, root=self.root, key=self.key,
                                     readonly=self.readonly,
                                     operator=self.operator, audit=self.audit,
                                     exports_folder=self.paths.env_dir(self.root) / "exports", now=self.clock.time,
                                     confirm_send=self.config.confirm_send, look_again=self.look_again)

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
                for bid, label in keymap.action_bar():
                    yield Button(label, id=f"act-{bid}", compact=True, classes="actbtn")
        yield SpeedFooter(show_command_palette=self.readonly)  # else the action bar has it

    def on_key(self, event: events.Key) -> None:
        """A printable key that came back up unhandled while a text field has the focus: it was
        sent to the widget focused before a dialog (or the filter) took the focus — keys typed in
        one burst after the key that opened it (a paste, `tmux send-keys`, typing ahead of a busy
        console) — since a text field takes every printable key it is sent. It goes to the field
        it was typed for, instead of being lost."""
        focused = self.focused
        if event.is_printable and isinstance(focused, Input) and not getattr(event, "typed_ahead", False):
            event.stop()
            again = events.Key(event.key, event.character)
            again.typed_ahead = True  # (sent on once: never again, whatever the field does with it)
            focused.post_message(again)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return keymap.offered("app", action, self.readonly)

    def get_default_screen(self) -> Screen:
        return MainScreen(action_bar=not self.readonly)

    def label_action_bar(self, screen: Screen) -> None:
        """A button's key is shown only while that key does what the button does (not while the
        focused view binds it to something else): no key is shown twice on the screen."""
        active = screen.active_bindings
        for k in keymap.bar_keys():
            found = active.get(k.keys.split(",")[0])
            label = keymap.bar_label(k, taken=found is not None and found.node not in (self, screen))
            for button in self.query(f"#act-{k.name}").results(Button):
                if str(button.label) != label:
                    button.label = label
                    button.refresh(layout=True)  # its width follows its label (a label alone only repaints)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        bid = event.button.id or ""
        if bid.startswith("act-"):
            event.stop()
            self.nav.focus_view(self.active_view())  # keys keep working in the view afterwards
            getattr(self, f"action_{bid[4:]}")()

    def on_resize(self, event) -> None:
        self.nav.label_tabs(getattr(self, "_tabs", None), event.size.width)

    def on_mount(self) -> None:
        self._header = self.query_one(SpeedHeader)
        self._tabs = self.query_one("#views", TabbedContent)
        self.nav.label_tabs(self._tabs, self.size.width)
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
        self.drain()
        self.set_interval(self.refresh_interval, self.drain, name="drain")
        self.set_interval(1.0, self.tick, name="tick")
        self.nav.focus_view(self.initial_view)
        if not self.readonly:
            self.screen.bindings_updated_signal.subscribe(self, self.label_action_bar)
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
        if self.steady:  # a snapshot shows the same notifications however long the machine took to draw it
            timeout = STEADY_NOTIFICATION_SECONDS
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
        if registry:
            self.controller.calls.follow_registry()
        self.update_header()

    def show_banner(self, text: str) -> None:
        """The banner's lines (a held registry lock, a key that verifies nothing); none: hidden."""
        banner = self.query_one("#banner", Static)
        banner.update(Text("\n".join(f"⚠ {visible(line)}" for line in text.splitlines())))
        banner.display = bool(text)

    def update_header(self) -> None:
        paused = self.view_widget("traces").paused
        self._header.update_info(self.registry.counts(), self.traces.rate_series(self.clock.time()),
                                 paused, self.state.fabric)

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if not self._live() or not hasattr(self, "_views"):
            return
        vid = event.pane.id or "leases"
        if vid != self._tabs.active:
            # a stale activation (two view keys at once: this one was overtaken by the next):
            # focusing its view would make it the active tab again (as in action_show), and the
            # two switched back and forth for ever (a core at 100 %, memory growing)
            return
        self.view_widget(vid).refresh_view(force=True)
        self.nav.focus_view(vid)

    def action_jump(self) -> None:
        self.nav.jump()

    def action_time_travel(self, at: float | None = None) -> None:
        """The registry and traffic at a past moment (the selected trace's time in Traces, else a
        minute ago)."""
        self.nav.time_travel(at)

    def action_show(self, vid: str) -> None:
        self._tabs.active = vid
        # before the tab's activation: keys typed right after the switch go to the new view. Only
        # if it is still the one shown when the focus is due: focusing a widget makes its pane the
        # active tab, so the focus of a view overtaken by the next key switched back to it
        self.call_later(self._focus_if_shown, vid)

    def _focus_if_shown(self, vid: str) -> None:
        if self.active_view() == vid:
            self.nav.focus_view(vid)

    # ------------------------------------------------------------------ requests from views and dialogs
    def on_choose_fabric(self, m: msg.ChooseFabric) -> None:
        self.nav.set_fabric(m.fabric)

    def on_show_node(self, m: msg.ShowNode) -> None:
        self.nav.show_node(m.name)

    def on_traces_paused(self, m: msg.TracesPaused) -> None:
        self.update_header()

    def on_reap_requested(self, m: msg.ReapRequested) -> None:
        self.controller.nodes.reap(m.name)

    def on_open_envelope(self, m: msg.OpenEnvelope) -> None:
        self.controller.traces.envelope(m.record, m.words)

    def on_open_call_link(self, m: msg.OpenCallLink) -> None:
        self.controller.traces.call_link(m.record)

    def on_replay_requested(self, m: msg.ReplayRequested) -> None:
        self.controller.traces.replay(m.record)

    def on_call_from_trace(self, m: msg.CallFromTrace) -> None:
        self.controller.calls.from_trace(m.record, copy_only=m.copy_only)

    def on_grant_requested(self, m: msg.GrantRequested) -> None:
        self.controller.grants.open(m.node, m.peer, revoke=m.revoke)

    def on_call_requested(self, m: msg.CallRequested) -> None:
        self.controller.calls.open(m.caller, m.target, m.service, m.arguments, m.timeout)

    def on_run_call(self, m: msg.RunCall) -> None:
        self.controller.calls.run(m)

    def on_copy_text(self, m: msg.CopyText) -> None:
        self.controller.exports.copy(m.text, m.what)

    def on_export_rows(self, m: msg.ExportRows) -> None:
        self.controller.exports.export(m)

    def on_start_console_node(self, m: msg.StartConsoleNode) -> None:
        self.controller.nodes.start_console_node(m.then, m.fill)

    def on_lift_quarantine(self, m: msg.LiftQuarantine) -> None:
        self.controller.extensions.lift(m.receiver, m.sender)

    def on_list_outboxes(self, m: msg.ListOutboxes) -> None:
        self.controller.extensions.list_outboxes(m.explicit)

    def on_verify_receipts(self, m: msg.VerifyReceipts) -> None:
        self.controller.extensions.verify_receipts(m.name)

    # ------------------------------------------------------------------ keys
    def action_launch(self) -> None:
        self.controller.nodes.launch()

    def highlighted_node(self) -> str | None:
        """The node under the cursor of the shown view (Leases, Fabrics), if any: the actions below
        act on it, and pick or ask only when nothing is highlighted."""
        selected = getattr(self.view_widget(self.active_view()), "selected_node", None)
        return selected() if selected is not None else None

    def action_stop_node(self) -> None:
        self.controller.nodes.stop(self.highlighted_node())

    def action_grant(self) -> None:
        self.controller.grants.open(self.highlighted_node())

    def action_call(self) -> None:
        self.controller.calls.open(target=self.highlighted_node() or "")

    def action_send(self) -> None:
        self.controller.calls.send(self.highlighted_node() or "")

    def action_quit(self) -> None:
        """q: quit; the console's nodes stop with it, so where some run as separate processes the
        operator is asked first (they were stopped without a word)."""
        processes = self.actions.separate_processes() if self.actions is not None else []
        if not processes:
            self.exit()
            return
        self.push_screen(ConfirmScreen(
            "Quit and stop the nodes this console launched?",
            f"{', '.join(processes)} {'runs' if len(processes) == 1 else 'run'} as separate `speed node` "
            "processes that this console started: quitting stops them (SIGTERM; they drain and deregister).",
            yes="Quit and stop them"), lambda yes: self.exit() if yes else None)

    def action_logs(self) -> None:
        """L: the logs of the nodes this console started."""
        self.push_screen(LogsScreen(self.actions.own.logs if self.actions is not None else None,
                                    readonly=self.readonly))

    def action_help(self) -> None:
        self.push_screen(HelpScreen(help_rows(self), str(self.paths.config_file)))

    def action_next_theme(self) -> None:
        self.theme_keeper.next()

    # ------------------------------------------------------------------ results of workers
    def on_call_finished(self, m: msg.CallFinished) -> None:
        if self._live():
            self.controller.calls.finished(m.record)

    def on_replay_injected(self, m: msg.ReplayInjected) -> None:
        if self._live():
            self.controller.traces.replay_injected(m.result)

    def on_action_done(self, m: msg.ActionDone) -> None:
        if self._live():
            self.controller.runner.done(m)

    def on_pipeline_progress(self, m: msg.PipelineProgress) -> None:
        if self._live():
            self.view_widget("analytics").progress(m.fraction, m.text)

    def on_pipeline_finished(self, m: msg.PipelineFinished) -> None:
        if self._live():
            self.view_widget("analytics").finished(m.ok, m.summary, m.error)
            self.controller.exports.analysis_finished(m)

    def look_again(self) -> None:
        """The readers' next pass, now (after an action: its effect shows at once)."""
        for source in self.sources:
            source.poke()

    # ------------------------------------------------------------------ command palette
    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield from palette_commands(self)

    # ------------------------------------------------------------------ shutdown
    def shutdown(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        for s in self.sources:
            s.stop()
        self.services.shutdown()  # the demo, then the nodes the console started
        if self.gc_pacer is not None:
            self.gc_pacer.stop()

    def on_unmount(self) -> None:
        self.shutdown()


def make_app(root: Path | str, key: rt.KeyInfo | None, *, readonly: bool = False, clock: Clock | None = None,
             paths: Paths | None = None, config: Config | None = None, operator: OperatorChoice | None = None,
             demo: Any = None, **options: Any) -> SpeedApp:
    """Build the console: its services (``ConsoleServices``: actions, bridge, histories, config,
    operator key), then the app on them. Tests pass ``clock``, ``paths``, ``dir_label``,
    ``start_sources``; the other ``options`` are SpeedApp's."""
    services = ConsoleServices.build(root, key, readonly=readonly, clock=clock, paths=paths, config=config,
                                     operator=operator, demo=demo)
    return SpeedApp(services, **options)
