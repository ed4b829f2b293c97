"""The SPEED console application: wiring and message routing.  ``make_app(...)`` builds it (the
CLI and the tests use it).  Views read the models in ``ConsoleState`` and post typed messages;
actions run in thread workers and report back with messages."""

from __future__ import annotations

import base64
import json
import shutil
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable

from textual import events, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Button, Input, Static, TabbedContent, TabPane

from ..models.commands import NodeSpec, speed_call_command
from ..models.history import AuditEntry
from ..models.keycheck import KeyCheck
from ..models.registry import RegistryModel
from ..models.replays import ReplayTracker
from ..models.traces import TraceStore
from ..paths import Paths
from ..services import runtime as rt
from ..services.actions import ActionError, ActionService, ReplayResult, console_node_name
from ..services.bridge import Bridge
from ..services.clock import Clock, SystemClock
from ..services.config import Config
from ..services.exports import write_export
from ..services.history import AuditLog, CallHistory
from ..services.registry import host_facts
from ..services.sources import JournalTailer, RegistrySource
from . import messages as msg
from .gc_pacer import CollectorPacer
from .palette import help_rows, palette_commands
from .screens.calllink import CallLinkScreen
from .screens.confirm import ConfirmScreen
from .screens.envelope import EnvelopeScreen
from .screens.forms import CallScreen, GrantScreen, LaunchScreen, PickScreen, SendScreen
from .screens.help import HelpScreen
from .screens.jump import JumpScreen, JumpTarget, jump_targets
from .state import ConsoleState
from .themes import load_themes, resolve_theme_name
from .views.access import AccessView
from .views.analytics import AnalyticsView
from .views.audit import AuditView
from .views.fabrics import FabricsView
from .views.leases import LeasesView
from .views.replay import ReplayView
from .views.traces import TracesView
from .widgets.fast_table import FastTable
from .widgets.footer import SpeedFooter
from .widgets.header import SpeedHeader

VIEWS = [("leases", "Leases"), ("fabrics", "Fabrics"), ("access", "Access"), ("traces", "Traces"),
         ("replay", "Replay"), ("analytics", "Analytics"), ("audit", "Audit")]
ACTIONS = ("launch", "stop_node", "grant", "call", "send")  # every one changes the environment


class SpeedApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "SPEED console"
    BINDINGS = [
        *[Binding(str(i + 1), f"show('{vid}')", label, id=f"app.{vid}", show=False) for i, (vid, label) in enumerate(VIEWS)],
        Binding("question_mark,f1", "help", "Help", id="app.help"),
        Binding("colon", "jump", "Jump", id="app.jump", show=False),
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
                 initial_view: str = "leases", steady: bool = False, pace_gc: bool = True) -> None:
        super().__init__()
        self.root = Path(root)
        self.key = key
        self.readonly = readonly
        self.clock = clock or SystemClock()
        self.paths = paths or Paths.default()
        self.config = config or Config.load(self.paths.config_file)
        self.demo = demo
        self.dir_label = dir_label or str(self.root)
        self.start_sources = start_sources
        self.refresh_interval = refresh_interval
        self.initial_view = initial_view
        self.steady = steady  # no blinking cursors or animations (snapshots, screenshots)
        if steady:
            self.animation_level = "none"
        self.bridge = Bridge()
        # the environment's own audit log and call history: another ROOT never shows (or re-runs) them
        self.audit = AuditLog(self.paths.audit_log(self.root))
        self.calls = CallHistory(self.paths.call_history(self.root))
        self.actions = None if key is None else ActionService(self.root, key, self.bridge, self.audit, self.calls,
                                                               self.clock, readonly)
        secret = key.secret if key is not None else None
        self.state = ConsoleState(
            root=self.root, root_label=self.dir_label, registry=RegistryModel(),
            traces=TraceStore(capacity=trace_capacity or self.config.trace_buffer), replays=ReplayTracker(),
            keycheck=KeyCheck(lambda data: rt.key_verifies(data, secret) if secret is not None else None),
            key_path=str(key.path) if key is not None else "KEY", readonly=readonly, steady=steady,
            audit_entries=self.audit.entries, call_entries=self.calls.entries,
            own_replay_state=self.actions.own_replay_state if self.actions else (lambda name: None),
            own_nodes=self.actions.own_alive if self.actions else list, now=self.clock.time)
        self.registry = self.state.registry
        self.traces = self.state.traces
        self.sources: list = []
        self._themes = load_themes([self.paths.config_dir / "themes"])
        self._requested_theme = resolve_theme_name(theme) if theme else None
        self._dirty = True
        self._reg_dirty = True
        self._stopped = False
        self._banner = ""
        self.gc_pacer = CollectorPacer() if pace_gc else None

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
                          self.demo is not None)
        yield Static(id="banner")
        views = {"leases": LeasesView, "fabrics": FabricsView, "access": AccessView, "traces": TracesView,
                 "replay": ReplayView, "audit": AuditView}
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

    def on_mount(self) -> None:
        self._header = self.query_one(SpeedHeader)
        self._tabs = self.query_one("#views", TabbedContent)
        self._views = {vid: self.query_one(f"#view-{vid}") for vid, _ in VIEWS}
        self.query_one("#banner").display = False
        for t in self._themes.values():
            self.register_theme(t)
        name = self._requested_theme or resolve_theme_name(self.config.theme)
        if name not in self.available_themes:
            if self.config.warning is None:
                self.notify(f"unknown theme {name!r}; using speed-dark", severity="warning")
            name = "speed-dark"
        self.theme = name
        if self.config.keys:
            self.set_keymap(self.config.keys)
        if self.config.warning:
            self.notify(self.config.warning, severity="warning")
        if self.start_sources:
            reg = RegistrySource(self.bridge, self.root)
            jt = JournalTailer(self.bridge, self.root)
            reg.step()  # first read synchronously: the first frame already shows the environment
            jt.step()
            self.sources = [reg, jt]
            for s in self.sources:
                s.start()
        if self.demo is not None and hasattr(self.demo, "attach"):
            self.demo.attach(self)
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

    def on_descendant_focus(self, event) -> None:
        if self.steady and isinstance(event.widget, Input):
            event.widget.cursor_blink = False

    def watch_theme(self, theme: str) -> None:
        if theme in self._themes and theme != self.config.theme:
            self.config.theme = theme
            try:
                self.config.save()
            except OSError:
                pass

    def theme_names(self) -> list[str]:
        return list(self._themes)

    # ------------------------------------------------------------------ data flow
    def _live(self) -> bool:
        return not self._stopped and self.is_running

    def drain(self) -> None:
        if not self._live():
            return
        d = self.bridge.drain()
        now = self.clock.time()
        replays = self.state.replays
        if d.registry is not None:
            self.registry.update(d.registry, now, host_facts(self.clock.boottime()))
            self._reg_dirty = True
        if d.records:
            self.traces.add(d.records)
            self._tell(replays.match_records(d.records))
            self.state.keycheck.observe(d.records)
            self._dirty = True
        self.traces.bad_lines += d.bad_lines
        self.traces.dropped += d.dropped
        for note in d.notes:
            if isinstance(note, tuple) and note and note[0] == "error":
                self.log.warning(note[1])
        if d.registry is not None:
            self._tell(replays.match_counters(self.registry.by_name()))
        replays.expire(now)
        self._show_banner(self.state.keycheck.banner())
        if self._reg_dirty or self._dirty:
            self.refresh_active(registry=self._reg_dirty)
            self._reg_dirty = self._dirty = False

    def _tell(self, notes) -> None:
        for n in notes:
            self.notify(n.text, title="replay", severity="error" if n.alarming else "information")

    def _show_banner(self, text: str) -> None:
        if text != self._banner:
            self._banner = text
            banner = self.query_one("#banner", Static)
            banner.update(f"⚠ {text}")
            banner.display = bool(text)

    def tick(self) -> None:
        """Once a second: lease countdowns and heartbeat ages move even without file events."""
        self.registry.refresh(self.clock.time(), host_facts(self.clock.boottime()))
        self._reg_dirty = True

    def active_view(self) -> str:
        return self._tabs.active or "leases"

    def view_widget(self, vid: str):
        return self._views[vid]

    def refresh_active(self, registry: bool = True) -> None:
        vid = self.active_view()
        if vid == "traces" or registry or vid == "replay":
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
        w = self.view_widget(vid)
        target = {"fabrics": "#fabrics-tree", "access": "#access-matrix", "audit": "#calls-table"}.get(vid)
        found = w.query(target) if target else w.query(FastTable)
        if not found:
            found = w.query("Button")
        if found:
            found.first().focus()

    def action_show(self, vid: str) -> None:
        self._tabs.active = vid
        self.focus_view(vid)  # at once: keys typed right after the switch go to the new view

    # ------------------------------------------------------------------ requests from views and dialogs
    def set_fabric(self, fabric: str | None) -> None:
        self.state.fabric = fabric
        self.registry.fabric = fabric
        self.view_widget("traces").apply_filter()
        self.view_widget(self.active_view()).refresh_view(force=True)
        self.update_header()
        self.notify(f"fabric filter: {fabric or '(ungrouped)'}" if fabric is not None else "showing all fabrics")

    def on_choose_fabric(self, m: msg.ChooseFabric) -> None:
        self.set_fabric(m.fabric)

    def show_node(self, name: str) -> None:
        self.action_show("leases")
        leases = self.view_widget("leases")
        leases.refresh_view(force=True)
        if not leases.query_one(FastTable).move_to_key(name):
            self.notify(f"{name} is not listed (a filter may hide it)", severity="warning")

    def on_show_node(self, m: msg.ShowNode) -> None:
        self.show_node(m.name)

    def on_traces_paused(self, m: msg.TracesPaused) -> None:
        self.update_header()

    def on_reap_requested(self, m: msg.ReapRequested) -> None:
        self.request_reap(m.name)

    def on_open_envelope(self, m: msg.OpenEnvelope) -> None:
        self.open_envelope(m.record)

    def on_open_call_link(self, m: msg.OpenCallLink) -> None:
        self.open_call_link(m.record)

    def on_replay_requested(self, m: msg.ReplayRequested) -> None:
        self.request_replay(m.record)

    def on_call_from_trace(self, m: msg.CallFromTrace) -> None:
        self.open_call_from_trace(m.record, copy_only=m.copy_only)

    def on_grant_requested(self, m: msg.GrantRequested) -> None:
        self.open_grant(m.node, m.peer)

    def on_call_requested(self, m: msg.CallRequested) -> None:
        self.open_call(m.caller, m.target, m.service, m.arguments, m.timeout)

    def on_run_call(self, m: msg.RunCall) -> None:
        acts = self._actions_or_warn()
        if acts is None:
            return
        if m.caller not in acts.own_in_process():
            self.notify(f"{m.caller} is not running in this console: edit the call (e) to pick a caller",
                        severity="warning")
            return
        if not isinstance(self.screen, CallScreen):
            self.notify(f"calling {m.caller} → {m.target}.{m.service}…")
        self.run_call(m.caller, m.target, m.service, m.arguments, m.timeout)

    def on_copy_text(self, m: msg.CopyText) -> None:
        self.copy_to_clipboard(m.text)  # OSC 52: works over SSH too
        self.notify(m.text if len(m.text) <= 300 else m.text[:300] + "…", title=f"copied {m.what}", timeout=8)

    def on_export_rows(self, m: msg.ExportRows) -> None:
        now = self.clock.time()
        try:
            path = write_export(self.paths.env_dir(self.root) / "exports", m.kind, m.suffix, m.lines, now)
        except OSError as exc:
            self.notify(f"the export could not be written: {exc.strerror or exc}", severity="error")
            return
        self.audit.record(AuditEntry(ts=now, action="export", detail=m.detail, command=f"# wrote {path}",
                                     result=f"{len(m.lines)} lines"))
        self.notify(str(path), title=f"exported {m.detail}", timeout=10)
        self.view_widget("audit").refresh_view(force=True)

    def on_start_console_node(self, m: msg.StartConsoleNode) -> None:
        if self._actions_or_warn() is None:
            return
        name = console_node_name()
        then = {"call": self.action_call, "send": self.action_send}.get(m.then)
        self.notify(f"starting {name}…")
        self._run_action("launch", lambda: self.actions.start_console_node(name), f"{name} is running",
                         after=then)

    # ------------------------------------------------------------------ dialogs and actions
    def _actions_or_warn(self) -> ActionService | None:
        if self.readonly:
            self.notify("read-only console: actions are disabled (--readonly)", severity="warning")
            return None
        if self.actions is None:
            self.notify("no key loaded: actions are disabled", severity="warning")
            return None
        return self.actions

    def graph(self):
        return self.state.graph()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(help_rows(self, VIEWS), str(self.paths.config_file)))

    def action_next_theme(self) -> None:
        names = self.theme_names()
        cur = self.theme if self.theme in names else names[0]
        self.theme = names[(names.index(cur) + 1) % len(names)]
        self.notify(f"theme: {self.theme}")

    def jump_targets(self) -> dict[str, JumpTarget]:
        rows = self.registry.rows
        return jump_targets(VIEWS, [r.name for r in rows], sorted({s for r in rows for s in r.services}))

    def action_jump(self) -> None:
        self.push_screen(JumpScreen(self.jump_targets()), lambda t: self.jump_to(t) if t else None)

    def jump_to(self, target: JumpTarget) -> None:
        if target.kind == "view":
            self.action_show(target.name)
        elif target.kind == "node":
            self.show_node(target.name)
        else:  # a service: the nodes offering it
            self.action_show("leases")
            self.view_widget("leases").query_one("#leases-filter", Input).value = target.name

    def action_launch(self) -> None:
        if self._actions_or_warn() is None:
            return
        fabrics = sorted({g for r in self.registry.rows for g in r.groups})
        self.push_screen(LaunchScreen(str(self.root), str(self.key.path), self.graph().names, fabrics),
                         self._launch_chosen)

    def _launch_chosen(self, spec: NodeSpec | None) -> None:
        if spec is not None:
            self.notify(f"launching {spec.name}…")
            self._run_action("launch", lambda: self.actions.launch(spec), f"{spec.name} is running")

    def action_stop_node(self) -> None:
        acts = self._actions_or_warn()
        if acts is None:
            return
        items = [(n, f"{n} ({acts.own[n].kind})") for n in acts.own_names()]
        if not items:
            self.notify("this console has not started any node it may stop", severity="warning")
            return
        self.push_screen(PickScreen("Stop which of this console's nodes?", items), self._stop_chosen)

    def _stop_chosen(self, name: str | None) -> None:
        if name:
            self.push_screen(ConfirmScreen("Stop node", f"Stop {name}? It deregisters and its inbox stops being "
                                           "read; calls to it fail until it is started again.", yes="Stop"),
                             partial(self._stop_confirmed, name))

    def _stop_confirmed(self, name: str, yes: bool | None) -> None:
        if yes:
            self._run_action("stop", lambda: self.actions.stop(name), f"{name} stopped")

    def action_grant(self) -> None:
        self.open_grant()

    def open_grant(self, node: str | None = None, peer: str | None = None) -> None:
        acts = self._actions_or_warn()
        if acts is None:
            return
        own = acts.own_alive()
        if not own:
            where = f" (the grant is needed on {node}, which it did not start)" if node else ""
            self.notify(f"this console has no node of its own to grant on{where}: launch one (n)",
                        severity="warning")
            return
        self.push_screen(GrantScreen(own, self.graph(), node, peer), self._grant_chosen)

    def _grant_chosen(self, choice) -> None:
        if choice:
            node, peer, grant = choice
            self._run_action("grant" if grant else "revoke", lambda: self.actions.set_allow(node, peer, grant),
                             f"{node} {'now allows' if grant else 'no longer allows'} {peer}")

    def action_call(self) -> None:
        self.open_call()

    def open_call(self, caller: str | None = None, target: str = "", service: str = "", arguments: Any = None,
                  timeout: float = 5.0) -> None:
        acts = self._actions_or_warn()
        if acts is None:
            return
        self.push_screen(CallScreen(acts.own_in_process(), self.graph(), str(self.root), str(self.key.path),
                                    caller, target, service, arguments, timeout))

    def open_call_from_trace(self, rec, copy_only: bool = False) -> None:
        if rec.type not in ("SPC_REQUEST", "SPC_RESPONSE"):
            self.notify("only SPC requests and responses open as a call", severity="warning")
            return
        link = self.traces.call_link(rec)
        caller, target = (link.caller, link.callee) if link else (rec.sender, rec.receiver)
        args: dict = {}
        req = next((r for r in (link.records if link else (rec,)) if r.type == "SPC_REQUEST" and r.envelope), None)
        if req is not None and self.key is not None:
            dec = rt.decode_envelope(base64.b64decode(req.envelope), self.key.secret)
            if isinstance(dec.payload, dict) and isinstance(dec.payload.get("arguments"), dict):
                args = dec.payload["arguments"]
        service = link.service if link else rec.service
        if copy_only:
            line = speed_call_command(target, service, args, caller, self.root, self.state.key_path)
            self.on_copy_text(msg.CopyText(line, "the `speed call` line"))
            return
        self.open_call(caller, target, service, args)

    @work(thread=True, group="call")
    def run_call(self, caller: str, target: str, service: str, arguments: dict, timeout: float) -> None:
        try:
            rec = self.actions.call(caller, target, service, arguments, timeout)
        except ActionError as exc:
            self.post_message(msg.ActionDone("call", False, str(exc)))
            return
        self.post_message(msg.CallFinished(rec))

    def on_call_finished(self, m: msg.CallFinished) -> None:
        if not self._live():
            return
        rec = m.record
        if isinstance(self.screen, CallScreen):
            self.screen.show_result(rec)
        else:
            detail = (json.dumps(rec.result, ensure_ascii=False)[:80] if rec.status == "SUCCESS"
                      else f"{rec.error_code or 'failed'}: {rec.error_message}")
            self.notify(f"{rec.caller} → {rec.target}.{rec.service}: {detail} ({rec.latency_ms:.1f} ms)",
                        severity="information" if rec.status == "SUCCESS" else "error")
        self.view_widget("audit").refresh_view(force=True)

    def action_send(self) -> None:
        acts = self._actions_or_warn()
        if acts is None:
            return
        self.push_screen(SendScreen(acts.own_in_process(), self.graph().names, self.config.confirm_send),
                         self._send_chosen)

    def _send_chosen(self, choice) -> None:
        if choice:
            sender, to, data, confirm = choice
            self._run_action("send", lambda: self.actions.send(sender, to, data, confirm),
                             f"message {sender} → {to} delivered" + (" and confirmed" if confirm else ""))

    def request_reap(self, name: str | None) -> None:
        if self._actions_or_warn() is None or not name:
            return
        row = self.registry.by_name().get(name)
        if row is None or row.status != "stale":
            self.notify(f"{name} is not stale: only stale entries can be reaped", severity="warning")
            return
        self.push_screen(ConfirmScreen("Reap stale entry", f"Remove the stale registry entry of {name} "
                                       f"(pid {row.pid}, host {row.host})?\nThe runtime re-checks staleness under "
                                       "the registry lock and never removes a live entry.", yes="Reap"),
                         partial(self._reap_confirmed, name))

    def _reap_confirmed(self, name: str, yes: bool | None) -> None:
        if yes:
            self._run_action("reap", lambda: self.actions.reap(name), f"{name}'s stale entry removed")

    def request_replay(self, rec) -> None:
        if self._actions_or_warn() is None:
            return
        if not rec.envelope:
            self.notify("this record carries no sealed envelope to replay", severity="warning")
            return
        self.state.replays.note_baseline(self.registry.by_name().get(rec.receiver), rec.receiver)
        self._run_action("replay", lambda: self.actions.replay(rec), "")

    def open_envelope(self, rec) -> None:
        self.push_screen(EnvelopeScreen(rec, self.key.secret if self.key else None),
                         partial(self._envelope_closed, rec))

    def _envelope_closed(self, rec, choice: str | None) -> None:
        if choice == "replay":
            self.request_replay(rec)
        elif choice == "call":
            self.open_call_link(rec)
        elif choice == "ascall":
            self.open_call_from_trace(rec)

    def open_call_link(self, rec) -> None:
        link = self.traces.call_link(rec)
        if link is None:
            self.notify("this record is not part of an SPC call", severity="warning")
            return
        self.push_screen(CallLinkScreen(link))

    @work(thread=True, group="actions")
    def _run_action(self, action: str, fn: Callable[[], Any], success: str,
                    after: Callable[[], None] | None = None) -> None:
        try:
            result = fn()
        except ActionError as exc:
            self.post_message(msg.ActionDone(action, False, str(exc)))
            return
        except Exception as exc:  # noqa: BLE001 - show, never crash the console
            self.post_message(msg.ActionDone(action, False, self.actions.describe(exc) if self.actions else str(exc)))
            return
        if isinstance(result, ReplayResult):
            self.post_message(msg.ReplayInjected(result))
        else:
            self.post_message(msg.ActionDone(action, True, success))
        if after is not None:
            self.call_from_thread(after)

    def on_replay_injected(self, m: msg.ReplayInjected) -> None:
        if not self._live():
            return
        r = m.result
        self.state.replays.start(self.clock.time(), r.sender, r.receiver, r.type, r.seq,
                                 self.registry.by_name().get(r.receiver))
        self.notify(f"replayed {r.type} seq {r.seq} into {r.receiver}'s inbox; waiting for its verdict…")
        self.action_show("replay")
        self._after_action()

    def on_action_done(self, m: msg.ActionDone) -> None:
        if not self._live():
            return
        if m.ok:
            self.notify(m.text or f"{m.action} done")
        else:
            self.notify(m.text, title=f"{m.action} failed", severity="error", timeout=8)
        self._after_action()

    def _after_action(self) -> None:
        for s in self.sources:
            s.poke()
        self.view_widget("audit").refresh_view(force=True)

    # ------------------------------------------------------------------ analytics
    @work(thread=True, exclusive=True, group="analytics")
    def run_analysis(self) -> None:
        try:
            from ..pipeline.job import run_pipeline
        except Exception as exc:  # noqa: BLE001 - pyspark missing etc.
            self.post_message(msg.PipelineFinished(False, None, f"the analytics pipeline is not available: {exc}"))
            return
        out = self.paths.analytics_dir
        try:
            summary = run_pipeline([str(self.root / "speed_traces")], str(out),
                                   progress=lambda f, t: self.post_message(msg.PipelineProgress(float(f), str(t))))
        except Exception as exc:  # noqa: BLE001
            self.post_message(msg.PipelineFinished(False, None, str(exc).splitlines()[0] if str(exc) else repr(exc)))
            return
        self.post_message(msg.PipelineFinished(True, summary))

    def on_pipeline_progress(self, m: msg.PipelineProgress) -> None:
        if self._live():
            self.view_widget("analytics").progress(m.fraction, m.text)

    def on_pipeline_finished(self, m: msg.PipelineFinished) -> None:
        if not self._live():
            return
        self.view_widget("analytics").finished(m.ok, m.summary, m.error)
        self.audit.record(AuditEntry(
            ts=self.clock.time(), action="analyze", detail=f"journals in {self.root / 'speed_traces'}",
            command=f"speedtui analyze {self.root / 'speed_traces'} --out {self.paths.analytics_dir}",
            ok=m.ok, result="" if m.ok else m.error))

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
