"""The SPEED console application.  ``make_app(...)`` builds it (the CLI and the tests use it)."""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Iterable

from textual import events, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.containers import Horizontal
from textual.widgets import Button, Input, TabbedContent, TabPane

from ..services import runtime as rt
from ..services.actions import ActionError, ActionService
from ..services.bridge import Bridge
from ..services.clock import Clock, SystemClock
from ..services.config import Config
from .gc_pacer import CollectorPacer
from .messages import ActionDone, CallFinished, PipelineFinished, PipelineProgress
from ..models.access import AccessGraph
from ..models.commands import NodeSpec, speed_call_command
from ..models.history import AuditEntry
from ..models.registry import RegistryModel
from ..models.traces import TraceRecord, TraceStore
from ..paths import Paths
from .screens.calllink import CallLinkScreen
from .screens.confirm import ConfirmScreen
from .screens.envelope import EnvelopeScreen
from .screens.forms import CallScreen, GrantScreen, LaunchScreen, PickScreen, SendScreen
from .screens.help import HelpScreen
from ..services.history import AuditLog, CallHistory
from ..services.registry import host_facts
from ..services.sources import JournalTailer, RegistrySource
from .themes import load_themes, resolve_theme_name
from .views.access import AccessView
from .views.analytics import AnalyticsView
from .views.audit import AuditView
from .views.fabrics import FabricsView
from .views.leases import LeasesView
from .views.replay import ReplayView
from .views.traces import TracesView
from .widgets.footer import SpeedFooter
from .widgets.fast_table import FastTable
from .widgets.header import SpeedHeader

VIEWS = [("leases", "Leases"), ("fabrics", "Fabrics"), ("access", "Access"), ("traces", "Traces"),
         ("replay", "Replay"), ("analytics", "Analytics"), ("audit", "Audit")]
REPLAY_VERDICT_SECONDS = 10.0


@dataclass
class PendingReplay:
    ts: float
    sender: str
    receiver: str
    type: str
    seq: int
    outcome: str = "pending"
    reason: str = ""
    # the receiver's published per-reason rejection counts before the replay, for receivers that
    # keep no journal: a count that rises is their verdict (at their next heartbeat)
    rejected_before: dict | None = None
    deadline: float = 0.0  # when "no verdict" is concluded (set from the receiver's heartbeat)


class SpeedApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "SPEED console"
    BINDINGS = [
        *[Binding(str(i + 1), f"show('{vid}')", label, id=f"app.{vid}", show=False) for i, (vid, label) in enumerate(VIEWS)],
        Binding("question_mark,f1", "help", "Help", id="app.help"),
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
        self.registry = RegistryModel()
        self.traces = TraceStore(capacity=trace_capacity or self.config.trace_buffer)
        self.audit = AuditLog(self.paths.audit_log)
        self.calls = CallHistory(self.paths.call_history)
        self.actions = None if key is None else ActionService(self.root, key, self.bridge, self.audit, self.calls,
                                                               self.clock, readonly)
        self.fabric: str | None = None
        self.replays: list[PendingReplay] = []
        self._replay_baselines: dict[str, dict | None] = {}
        self.sources: list = []
        self._themes = load_themes([self.paths.config_dir / "themes"])
        self._requested_theme = resolve_theme_name(theme) if theme else None
        self._audit_cache: tuple[int, list] = (-1, [])
        self._dirty = True
        self._reg_dirty = True
        self._stopped = False
        self.gc_pacer = CollectorPacer() if pace_gc else None

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield SpeedHeader(self.dir_label, self.key.fingerprint if self.key else "no key", self.readonly,
                          self.demo is not None)
        with TabbedContent(initial=self.initial_view, id="views"):
            with TabPane("1 Leases", id="leases"):
                yield LeasesView(id="view-leases")
            with TabPane("2 Fabrics", id="fabrics"):
                yield FabricsView(id="view-fabrics")
            with TabPane("3 Access", id="access"):
                yield AccessView(id="view-access")
            with TabPane("4 Traces", id="traces"):
                yield TracesView(id="view-traces")
            with TabPane("5 Replay", id="replay"):
                yield ReplayView(id="view-replay")
            with TabPane("6 Analytics", id="analytics"):
                yield AnalyticsView(id="view-analytics")
            with TabPane("7 Audit", id="audit"):
                yield AuditView(id="view-audit")
        if not self.readonly:
            with Horizontal(id="actionbar"):
                for bid, label in (("launch", "Launch node (n)"), ("stop_node", "Stop node (d)"),
                                   ("grant", "Grant (g)"), ("call", "Call (F)"), ("send", "Message (m)"),
                                   ("help", "Help (?)")):
                    yield Button(label, id=f"act-{bid}", compact=True, classes="actbtn")
        yield SpeedFooter()

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

    # ------------------------------------------------------------------ data flow
    def drain(self) -> None:
        if self._stopped or not self.is_running:
            return
        d = self.bridge.drain()
        now = self.clock.time()
        if d.registry is not None:
            self.registry.update(d.registry, now, host_facts(self.clock.boottime()))
            self._reg_dirty = True
        if d.records:
            self.traces.add(d.records)
            self._match_replays(d.records)
            self._dirty = True
        if d.bad_lines:
            self.traces.bad_lines += d.bad_lines
        if d.dropped:
            self.traces.dropped += d.dropped
        for note in d.notes:
            if isinstance(note, tuple) and note and note[0] == "error":
                self.log.warning(note[1])
        if d.registry is not None:
            self._match_published_counters()
        self._expire_replays()
        if getattr(self._views["leases"], "_pending", False) and self.active_view() == "leases":
            self._reg_dirty = True
        if self._reg_dirty or self._dirty:
            self.refresh_active(registry=self._reg_dirty)
            self._reg_dirty = self._dirty = False

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
        w = self.view_widget(vid)
        if vid == "traces":
            w.refresh_view()
        elif registry or vid == "replay":
            w.refresh_view()
        self.update_header()

    def update_header(self) -> None:
        paused = self.view_widget("traces").paused
        self._header.update_info(self.registry.counts(), self.traces.rate_series(self.clock.time()),
                                                paused, self.fabric)

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if self._stopped or not self.is_running or not hasattr(self, "_views"):
            return
        vid = event.pane.id or "leases"
        self.view_widget(vid).refresh_view(force=True)
        self.focus_view(vid)

    def focus_view(self, vid: str) -> None:
        w = self.view_widget(vid)
        target = {"fabrics": "#fabrics-tree", "access": "#access-matrix"}.get(vid)
        try:
            (w.query_one(target) if target else w.query(FastTable).first()).focus()
        except Exception:  # noqa: BLE001 - views without a table (analytics)
            try:
                w.query("Button").first().focus()
            except Exception:  # noqa: BLE001
                pass

    # ------------------------------------------------------------------ fabric filter
    def fabric_nodes(self) -> frozenset[str] | None:
        if self.fabric is None:
            return None
        return frozenset(r.name for r in self.registry.rows if self.registry.in_fabric(r))

    def set_fabric(self, fabric: str | None) -> None:
        self.fabric = fabric
        self.registry.fabric = fabric
        self.view_widget("traces").apply_filter()
        self.view_widget(self.active_view()).refresh_view(force=True)
        self.update_header()
        self.notify(f"fabric filter: {fabric or '(ungrouped)'}" if fabric is not None else "showing all fabrics")

    def show_node(self, name: str) -> None:
        self.action_show("leases")
        self.view_widget("leases").refresh_view(force=True)
        self.view_widget("leases").query_one(FastTable).move_to_key(name)

    # ------------------------------------------------------------------ replay bookkeeping
    def _match_replays(self, records: Iterable[TraceRecord]) -> None:
        pending = [p for p in self.replays if p.outcome == "pending"]
        if not pending:
            return
        for r in records:
            if r.dir != "in" or r.outcome not in ("accepted", "rejected"):
                continue
            for p in pending:
                if (p.outcome == "pending" and r.node == p.receiver and r.peer == p.sender and r.seq == p.seq
                        and r.ts >= p.ts - 1.0):
                    p.outcome, p.reason = r.outcome, r.reason
                    if r.outcome == "rejected":
                        self.notify(f"{p.receiver} rejected the replayed envelope: {r.reason}", title="replay")
                    else:
                        self.notify(f"{p.receiver} ACCEPTED a replayed envelope", severity="error", title="replay")

    def _published_rejections(self, name: str) -> dict | None:
        row = self.registry.by_name().get(name)
        counts = row.counters.get("rejected") if row is not None and isinstance(row.counters, dict) else None
        return dict(counts) if isinstance(counts, dict) else None

    def _verdict_window(self, name: str) -> float:
        """Long enough for a journal line, or for two of the receiver's heartbeats."""
        row = self.registry.by_name().get(name)
        hb = row.raw.get("heartbeatSeconds") if row is not None and isinstance(row.raw, dict) else None
        hb = hb if isinstance(hb, (int, float)) and 0 < hb <= 60 else 5.0
        return max(REPLAY_VERDICT_SECONDS, 2 * hb + 1)

    def _match_published_counters(self) -> None:
        for p in self.replays:
            if p.outcome != "pending" or p.rejected_before is None:
                continue
            now_counts = self._published_rejections(p.receiver) or {}
            risen = sorted(k for k, v in now_counts.items()
                           if isinstance(v, int) and v > p.rejected_before.get(k, 0))
            if risen:
                p.outcome = "rejected"
                p.reason = "/".join(risen) + " (from its published counters: it keeps no journal)"
                self.notify(f"{p.receiver} rejected the replayed envelope: {'/'.join(risen)}", title="replay")

    def _expire_replays(self) -> None:
        now = time.time()
        for p in self.replays:
            if p.outcome == "pending" and now > p.deadline:
                p.outcome = "no verdict"
                p.reason = (f"{p.receiver} neither journaled a verdict nor published a new rejection "
                            f"within {now - p.ts:.0f}s")

    def replay_state_for(self, name: str) -> dict[str, Any]:
        st = self.traces.replay_state(name)
        st["source"] = "journals"
        if self.actions is not None:
            own = self.actions.own_replay_state(name)
            if own is not None:
                st["source"] = "journals + live node state"
                senders = own.get("senders")
                if isinstance(senders, dict):
                    # the runtime keys its state by sender instance id: {"sender", "lastSeq", ...}
                    names = [v.get("sender") for v in senders.values() if isinstance(v, dict)]
                    for k, v in senders.items():
                        if not isinstance(v, dict):
                            continue
                        seq = v.get("lastSeq", v.get("last_seq"))
                        who = str(v.get("sender") or k)
                        if names.count(v.get("sender")) > 1:
                            who = f"{who} #{str(k)[:8]}"
                        if isinstance(seq, int):
                            st["last_accepted"][who] = seq
        return st

    # ------------------------------------------------------------------ history caches
    def audit_entries(self):
        return self.audit.entries()

    def call_entries(self):
        return self.calls.entries()

    # ------------------------------------------------------------------ actions
    def _actions_or_warn(self):
        if self.readonly:
            self.notify("read-only console: actions are disabled (--readonly)", severity="warning")
            return None
        if self.actions is None:
            self.notify("no key loaded: actions are disabled", severity="warning")
            return None
        return self.actions

    def graph(self) -> AccessGraph:
        return AccessGraph(self.registry.rows)

    def action_show(self, vid: str) -> None:
        self._tabs.active = vid
        self.focus_view(vid)  # at once: keys typed right after the switch go to the new view

    def action_help(self) -> None:
        rows = []
        seen = set()
        for (_node, binding, enabled, tooltip) in self.screen.active_bindings.values():
            if binding.id and binding.id not in seen:
                seen.add(binding.id)
                rows.append((self.get_key_display(binding), binding.description or binding.action, binding.id))
        for vid, label in VIEWS:
            w = self.view_widget(vid)
            for b in w.BINDINGS:
                if isinstance(b, Binding) and b.id and b.id not in seen:
                    seen.add(b.id)
                    rows.append((self.get_key_display(b), f"{label}: {b.description}", b.id))
        self.push_screen(HelpScreen(rows, str(self.paths.config_file)))

    def action_next_theme(self) -> None:
        names = [n for n in self._themes]
        cur = self.theme if self.theme in names else names[0]
        self.theme = names[(names.index(cur) + 1) % len(names)]
        self.notify(f"theme: {self.theme}")

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
            self.notify("this console has not started any node", severity="warning")
            return
        self.push_screen(PickScreen("Stop which of this console's nodes?", items), self._stop_chosen)

    def _stop_chosen(self, name: str | None) -> None:
        if name:
            self._run_action("stop", lambda: self.actions.stop(name), f"{name} stopped")

    def action_grant(self) -> None:
        self.open_grant()

    def open_grant(self, node: str | None = None, peer: str | None = None) -> None:
        acts = self._actions_or_warn()
        if acts is None:
            return
        own = acts.own_alive()
        if not own:
            self.notify("grants change on nodes this console started: launch one first (n)", severity="warning")
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

    def open_call_from_trace(self, rec: TraceRecord) -> None:
        if rec.type not in ("SPC_REQUEST", "SPC_RESPONSE"):
            self.notify("only SPC requests and responses open as a call", severity="warning")
            return
        link = self.traces.call_link(rec)
        caller, target = (link.caller, link.callee) if link else (rec.sender, rec.receiver)
        args: Any = {}
        req = next((r for r in (link.records if link else (rec,)) if r.type == "SPC_REQUEST" and r.envelope), None)
        if req is not None and self.key is not None:
            dec = rt.decode_envelope(base64.b64decode(req.envelope), self.key.secret)
            if isinstance(dec.payload, dict) and isinstance(dec.payload.get("arguments"), dict):
                args = dec.payload["arguments"]
        self.open_call(caller, target, (link.service if link else rec.service), args)

    @work(thread=True, group="call")
    def run_call(self, caller: str, target: str, service: str, arguments: dict, timeout: float) -> None:
        try:
            rec = self.actions.call(caller, target, service, arguments, timeout)
        except ActionError as exc:
            self.post_message(ActionDone("call", False, str(exc)))
            return
        self.post_message(CallFinished(rec))

    def on_call_finished(self, msg: CallFinished) -> None:
        if self._stopped or not self.is_running:
            return
        rec = msg.record
        if isinstance(self.screen, CallScreen):
            self.screen.show_result(rec)
        else:
            detail = (json.dumps(rec.result, ensure_ascii=False)[:80] if rec.status == "SUCCESS"
                      else f"{rec.error_code} {rec.error_message}")
            self.notify(f"{rec.caller} → {rec.target}.{rec.service}: {rec.status} {detail} "
                        f"({rec.latency_ms:.1f} ms)", severity="information" if rec.status == "SUCCESS" else "error")
        self.view_widget("audit").refresh_view(force=True)

    def rerun_call(self, c) -> None:
        acts = self._actions_or_warn()
        if acts is None:
            return
        if c.caller not in acts.own_in_process():
            self.notify(f"{c.caller} is not running in this console: edit the call (e) to pick a caller",
                        severity="warning")
            return
        self.notify(f"re-running {c.caller} → {c.target}.{c.service}…")
        self.run_call(c.caller, c.target, c.service, c.arguments, c.timeout)

    def copy_call_command(self, caller: str, target: str, service: str, arguments: dict, timeout: float) -> None:
        cmd = speed_call_command(target, service, arguments, caller, self.root, self.key.path if self.key else "KEY",
                                 timeout)
        self.copy_to_clipboard(cmd)
        self.notify(cmd, title="copied to the clipboard", timeout=8)

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

    def request_replay(self, rec: TraceRecord) -> None:
        if self._actions_or_warn() is None:
            return
        if not rec.envelope:
            self.notify("this record carries no sealed envelope to replay", severity="warning")
            return
        self._replay_baselines[rec.receiver] = self._published_rejections(rec.receiver)
        self._run_action("replay", lambda: self.actions.replay(rec), "")

    def open_envelope(self, rec: TraceRecord) -> None:
        self.push_screen(EnvelopeScreen(rec, self.key.secret if self.key else None),
                         partial(self._envelope_closed, rec))

    def _envelope_closed(self, rec: TraceRecord, choice: str | None) -> None:
        if choice == "replay":
            self.request_replay(rec)
        elif choice == "call":
            self.open_call_link(rec)
        elif choice == "ascall":
            self.open_call_from_trace(rec)

    def open_call_link(self, rec: TraceRecord) -> None:
        link = self.traces.call_link(rec)
        if link is None:
            self.notify("this record is not part of an SPC call", severity="warning")
            return
        self.push_screen(CallLinkScreen(link))

    @work(thread=True, group="actions")
    def _run_action(self, action: str, fn, success: str) -> None:
        try:
            result = fn()
        except ActionError as exc:
            self.post_message(ActionDone(action, False, str(exc)))
            return
        except Exception as exc:  # noqa: BLE001 - show, never crash the console
            self.post_message(ActionDone(action, False, f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(ActionDone(action, True, success, result))

    def on_action_done(self, msg: ActionDone) -> None:
        if self._stopped or not self.is_running:
            return
        if msg.action == "replay" and msg.ok:
            r = msg.payload
            now = time.time()
            before = self._replay_baselines.pop(r.receiver, None)
            self.replays.append(PendingReplay(now, r.sender, r.receiver, r.type, r.seq, rejected_before=before,
                                              deadline=now + self._verdict_window(r.receiver)))
            self.notify(f"replayed {r.type} seq {r.seq} into {r.receiver}'s inbox; waiting for its verdict…")
            self.action_show("replay")
        elif msg.ok:
            self.notify(msg.text or f"{msg.action} done")
        else:
            self.notify(msg.text, title=f"{msg.action} failed", severity="error", timeout=8)
        for s in self.sources:
            s.poke()
        self.view_widget("audit").refresh_view(force=True)

    # ------------------------------------------------------------------ analytics
    @work(thread=True, exclusive=True, group="analytics")
    def run_analysis(self) -> None:
        try:
            from ..pipeline.job import run_pipeline
        except Exception as exc:  # noqa: BLE001 - pyspark missing etc.
            self.post_message(PipelineFinished(False, None, f"the analytics pipeline is not available: {exc}"))
            return
        out = self.paths.analytics_dir
        try:
            summary = run_pipeline([str(self.root / "speed_traces")], str(out),
                                   progress=lambda f, t: self.post_message(PipelineProgress(float(f), str(t))))
        except Exception as exc:  # noqa: BLE001
            self.post_message(PipelineFinished(False, None, str(exc).splitlines()[0] if str(exc) else repr(exc)))
            return
        self.post_message(PipelineFinished(True, summary))

    def on_pipeline_progress(self, msg: PipelineProgress) -> None:
        if self._stopped or not self.is_running:
            return
        self.view_widget("analytics").progress(msg.fraction, msg.text)

    def on_pipeline_finished(self, msg: PipelineFinished) -> None:
        if self._stopped or not self.is_running:
            return
        self.view_widget("analytics").finished(msg.ok, msg.summary, msg.error)
        self.audit.record(AuditEntry(
            ts=time.time(), action="analyze", detail=f"journals in {self.root / 'speed_traces'}",
            command=f"speedtui analyze {self.root / 'speed_traces'} --out {self.paths.analytics_dir}",
            ok=msg.ok, result="" if msg.ok else msg.error))

    # ------------------------------------------------------------------ command palette
    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for vid, label in VIEWS:
            yield SystemCommand(f"View: {label}", f"Show the {label} view", partial(self.action_show, vid))
        for name in self._themes:
            yield SystemCommand(f"Theme: {name}", "Switch theme (remembered across runs)",
                                partial(setattr, self, "theme", name))
        yield SystemCommand("Help", "Views, keys and the config file", self.action_help)
        yield SystemCommand("Pause/resume traces", "Freeze the traces view", self._toggle_pause)
        yield SystemCommand("All fabrics", "Clear the fabric filter", partial(self.set_fabric, None))
        if not self.readonly and self.actions is not None:
            yield SystemCommand("Launch node", "Start a node in this console or as a `speed node` process",
                                self.action_launch)
            yield SystemCommand("Stop node", "Stop a node this console started", self.action_stop_node)
            yield SystemCommand("Grant or revoke", "Change allow entries of this console's nodes", self.action_grant)
            yield SystemCommand("Fire SPC call", "Call a service from one of this console's nodes", self.action_call)
            yield SystemCommand("Send message", "Send a MESSAGE from one of this console's nodes", self.action_send)
            yield SystemCommand("Reap stale entry", "Remove the selected stale registry entry",
                                lambda: self.view_widget("leases").action_reap())
            yield SystemCommand("Replay selected envelope", "Re-deliver the selected traced envelope",
                                lambda: self.view_widget("traces").action_replay())
            yield SystemCommand("Run analytics", "Analyse the journals with the Spark pipeline",
                                lambda: (self.action_show("analytics"), self.view_widget("analytics").action_run()))

    def _toggle_pause(self) -> None:
        self.view_widget("traces").action_pause()

    # ------------------------------------------------------------------ shutdown
    def shutdown(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        for s in self.sources:
            s.stop()
        if self.demo is not None:
            self.demo.stop()  # its traffic driver first, then its processes
        if self.actions is not None:
            self.actions.stop_all()
        if self.gc_pacer is not None:
            self.gc_pacer.stop()

    def on_unmount(self) -> None:
        self.shutdown()


def make_app(root: Path | str, key: rt.KeyInfo | None, **kwargs: Any) -> SpeedApp:
    """Build the console; tests pass ``clock``, ``paths``, ``dir_label``, ``start_sources``."""
    return SpeedApp(Path(root), key, **kwargs)
