"""The operator's actions as the console runs them: which dialog, which confirmation, which
thread worker.  The app routes requests here; results come back to it as typed messages
(``ActionDone``, ``ReplayInjected``, ``CallFinished``).  Nothing here blocks the UI."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Callable

from speed_runtime.core.visible import visible_json, visible_lines

from ..models.commands import NodeSpec, speed_call_command
from ..models.history import AuditEntry, CallRecord
from ..models.traces import TraceRecord
from ..services import runtime as rt
from ..services.actions import ActionError, ActionService, ReplayResult
from ..services.processes import console_node_name
from ..services.exports import write_export
from . import messages as msg
from .screens.calllink import CallLinkScreen
from .screens.confirm import ConfirmScreen
from .screens.envelope import EnvelopeScreen
from .screens.calls import CallScreen, SendScreen
from .screens.forms import GrantScreen, LaunchScreen, PickScreen

if TYPE_CHECKING:
    from .app import SpeedApp


class Operations:
    def __init__(self, app: "SpeedApp") -> None:
        self.app = app
        self.state = app.state

    # ------------------------------------------------------------------ helpers
    def actions_or_warn(self) -> ActionService | None:
        app = self.app
        if app.readonly:
            app.notify("read-only console: actions are disabled (--readonly)", severity="warning")
            return None
        if app.actions is None:
            app.notify("no key loaded: actions are disabled", severity="warning")
            return None
        return app.actions

    def run_action(self, action: str, fn: Callable[[], Any], success: str,
                   after: Callable[[], None] | None = None) -> None:
        """``fn`` in a thread worker; its outcome comes back as a message (never a traceback)."""
        app = self.app

        def work() -> None:
            try:
                result = fn()
            except ActionError as exc:
                app.post_message(msg.ActionDone(action, False, str(exc)))
                return
            except Exception as exc:  # noqa: BLE001 - show, never crash the console
                text = app.actions.describe(exc) if app.actions is not None else str(exc)
                app.post_message(msg.ActionDone(action, False, text))
                return
            if isinstance(result, ReplayResult):
                app.post_message(msg.ReplayInjected(result))
            else:
                app.post_message(msg.ActionDone(action, True, success))
            if after is not None:
                app.call_from_thread(after)

        app.run_worker(work, thread=True, group="actions", name=action)

    # ------------------------------------------------------------------ nodes
    def launch(self) -> None:
        app = self.app
        if self.actions_or_warn() is None:
            return
        fabrics = sorted({g for r in self.state.registry.rows for g in r.groups})
        app.push_screen(LaunchScreen(str(app.root), self.state.key_path, self.state.graph().names, fabrics),
                        self._launch_chosen)

    def _launch_chosen(self, spec: NodeSpec | None) -> None:
        if spec is not None:
            self.app.notify(f"launching {spec.name}…")
            self.run_action("launch", lambda: self.app.actions.launch(spec), f"{spec.name} is running")

    def start_console_node(self, then: str) -> None:
        if self.actions_or_warn() is None:
            return
        name = console_node_name()
        again = {"call": self.open_call, "send": self.send}.get(then)
        self.app.notify(f"starting {name}…")
        self.run_action("launch", lambda: self.app.actions.start_console_node(name), f"{name} is running",
                        after=again)

    def stop(self) -> None:
        acts = self.actions_or_warn()
        if acts is None:
            return
        own = acts.own.stoppable()
        items = [(n, f"{n} ({acts.own[n].kind})") for n in own]
        items += [(n, f"{n} (operator key)") for n in self.state.administered() if n not in own]
        if not items:
            self.app.notify("no node to stop: this console started none, and none trusts its operator key"
                            + ("" if self.app.operator.key else " (none is loaded: speedtui --operator-key PATH)"),
                            severity="warning")
            return
        self.app.push_screen(PickScreen("Stop which node?", items), self._stop_chosen)

    def _stop_chosen(self, name: str | None) -> None:
        if name:
            how = ("" if name in self.app.actions.own.stoppable() else
                   " (a stop request signed with the operator key: it drains its inbox, then deregisters)")
            self.app.push_screen(ConfirmScreen("Stop node", f"Stop {name}{how}? It deregisters and its inbox stops "
                                               "being read; calls to it fail until it is started again.",
                                               yes="Stop"), partial(self._stop_confirmed, name))

    def _stop_confirmed(self, name: str, yes: bool | None) -> None:
        if yes:
            self.app.notify(f"stopping {name}…", timeout=3)
            self.run_action("stop", lambda: self.app.actions.stop(name), f"{name} stopped")

    def cannot_change(self, node: str, peer: str | None = None) -> str:
        """Why the console cannot change ``node``'s grants, and what to do (one sentence)."""
        op = self.app.operator
        if op.key is None:
            return self.app.actions.no_operator_sentence(node) if self.app.actions else "no key loaded"
        row = self.state.registry.by_name().get(node)
        if row is None:
            return f"{node} is not in the registry"
        why = "it accepts no control requests" if not row.operators else "it trusts other operators only"
        return (f"{node} does not trust this console's operator key {op.fingerprint} ({why}): restart it with "
                f"`speed node --name {node} ... --operator {op.key.public_text}`"
                + (f" (or with --allow {peer})" if peer else ""))

    def reap(self, name: str | None) -> None:
        if self.actions_or_warn() is None or not name:
            return
        row = self.state.registry.by_name().get(name)
        if row is None or row.status != "stale":
            self.app.notify(f"{name} is not stale: only stale entries can be reaped", severity="warning")
            return
        self.app.push_screen(ConfirmScreen("Reap stale entry", f"Remove the stale registry entry of {name} "
                                           f"(pid {row.pid}, host {row.host})?\nThe runtime re-checks staleness "
                                           "under the registry lock and never removes a live entry.", yes="Reap"),
                             partial(self._reap_confirmed, name))

    def _reap_confirmed(self, name: str, yes: bool | None) -> None:
        if yes:
            self.run_action("reap", lambda: self.app.actions.reap(name), f"{name}'s stale entry removed")

    # ------------------------------------------------------------------ grants
    def grant(self, node: str | None = None, peer: str | None = None, revoke: bool = False) -> None:
        acts = self.actions_or_warn()
        if acts is None:
            return
        own = acts.own.alive()
        nodes = own + [n for n in self.state.administered() if n not in own]
        note = self.cannot_change(node, peer) if node and node not in nodes else None
        if not nodes:
            self.app.notify(note or ("this console may change no node's grants: launch one (n), or load an "
                                     "operator key that nodes trust (speedtui --operator-key PATH)"),
                            severity="warning", timeout=10)
            return
        self.app.push_screen(GrantScreen(nodes, self.state.graph(), node, peer, revoke=revoke, note=note),
                             self._grant_chosen)

    def _grant_chosen(self, choice: tuple[str, str, bool] | None) -> None:
        if choice:
            node, peer, grant = choice
            self.run_action("grant" if grant else "revoke", lambda: self.app.actions.set_allow(node, peer, grant),
                            f"{node} {'now allows' if grant else 'no longer allows'} {peer}")

    # ------------------------------------------------------------------ calls and messages
    def open_call(self, caller: str | None = None, target: str = "", service: str = "",
                  arguments: dict | None = None, timeout: float = 5.0) -> None:
        acts = self.actions_or_warn()
        if acts is None:
            return
        self.app.push_screen(CallScreen(acts.own.in_process(), self.state.graph(), str(self.app.root),
                                        self.state.key_path, caller, target, service, arguments, timeout,
                                        self.state.administered(), self.cannot_change,
                                        self.app.operator.key is not None))

    def run_call(self, m: msg.RunCall) -> None:
        acts = self.actions_or_warn()
        if acts is None:
            return
        if m.caller not in acts.own.in_process():
            self.app.notify(f"{m.caller} is not running in this console: edit the call (e) to pick a caller",
                            severity="warning")
            return
        if not isinstance(self.app.screen, CallScreen):
            self.app.notify(f"calling {m.caller} → {m.target}.{m.service}…")
        self.app.run_call(m.caller, m.target, m.service, m.arguments, m.timeout, m.grant_first, m.revoke_after)

    def call_from_trace(self, rec: TraceRecord, copy_only: bool = False) -> None:
        if rec.type not in ("SPC_REQUEST", "SPC_RESPONSE"):
            self.app.notify("only SPC requests and responses open as a call", severity="warning")
            return
        link = self.state.traces.call_link(rec)
        caller, target = (link.caller, link.callee) if link else (rec.sender, rec.receiver)
        args: dict = {}
        req = next((r for r in (link.records if link else (rec,)) if r.type == "SPC_REQUEST" and r.envelope), None)
        key = self.app.key
        if req is not None and key is not None:
            dec = rt.decode_envelope(req.envelope, key.secret)
            if isinstance(dec.payload, dict) and isinstance(dec.payload.get("arguments"), dict):
                args = dec.payload["arguments"]
        service = link.service if link else rec.service
        if copy_only:
            line = speed_call_command(target, service, args, caller, self.app.root, self.state.key_path)
            self.copy(line, "the `speed call` line")
            return
        self.open_call(caller, target, service, args)

    def send(self) -> None:
        acts = self.actions_or_warn()
        if acts is None:
            return
        graph = self.state.graph()
        self.app.push_screen(SendScreen(acts.own.in_process(), graph.names, self.app.config.confirm_send, graph,
                                        self.state.administered(), self.cannot_change,
                                        self.app.operator.key is not None), self._send_chosen)

    def _send_chosen(self, choice: tuple[str, str, Any, bool, bool, bool] | None) -> None:
        if choice:
            sender, to, data, confirm, grant, revoke = choice
            self.run_action("send", lambda: self.app.actions.send(sender, to, data, confirm, grant_first=grant,
                                                                  revoke_after=revoke),
                            f"message {sender} → {to} delivered" + (" and confirmed" if confirm else ""))

    # ------------------------------------------------------------------ traces: envelope, call, replay
    def replay(self, rec: TraceRecord) -> None:
        if self.actions_or_warn() is None:
            return
        if not rec.envelope:
            self.app.notify("this record carries no sealed envelope to replay", severity="warning")
            return
        self.state.replays.note_baseline(self.state.registry.by_name().get(rec.receiver), rec.receiver)
        self.run_action("replay", lambda: self.app.actions.replay(rec), "")

    def replay_injected(self, r: ReplayResult) -> None:
        self.state.replays.start(self.app.clock.time(), r.sender, r.receiver, r.type, r.seq,
                                 self.state.registry.by_name().get(r.receiver))
        self.app.notify(f"replayed {r.type} seq {r.seq} into {r.receiver}'s inbox; waiting for its verdict…")
        self.app.action_show("replay")

    def envelope(self, rec: TraceRecord) -> None:
        key = self.app.key
        self.app.push_screen(EnvelopeScreen(rec, key.secret if key else None), partial(self._envelope_closed, rec))

    def _envelope_closed(self, rec: TraceRecord, choice: str | None) -> None:
        if choice == "replay":
            self.replay(rec)
        elif choice == "call":
            self.call_link(rec)
        elif choice == "ascall":
            self.call_from_trace(rec)

    def call_link(self, rec: TraceRecord) -> None:
        link = self.state.traces.call_link(rec)
        if link is None:
            self.app.notify("this record is not part of an SPC call", severity="warning")
            return
        self.app.push_screen(CallLinkScreen(link))

    # ------------------------------------------------------------------ copy and export
    def copy(self, text: str, what: str) -> None:
        # what members wrote reaches the clipboard (and the shell it is pasted into) as data
        text = visible_lines(text)
        self.app.copy_to_clipboard(text)  # OSC 52: works over SSH too
        self.app.notify(text if len(text) <= 300 else text[:300] + "…", title=f"copied {what}", timeout=8)

    def export(self, m: msg.ExportRows) -> None:
        app = self.app
        now = app.clock.time()
        try:
            path = write_export(app.paths.env_dir(app.root) / "exports", m.kind, m.suffix, m.lines, now)
        except OSError as exc:
            app.notify(f"the export could not be written: {exc.strerror or exc}", severity="error")
            return
        app.audit.record(AuditEntry(ts=now, action="export", detail=m.detail, command=f"# wrote {path}",
                                    result=f"{len(m.lines)} lines"))
        app.notify(str(path), title=f"exported {m.detail}", timeout=10)
        app.view_widget("audit").refresh_view(force=True)

    # ------------------------------------------------------------------ results of workers
    def call_finished(self, rec: CallRecord) -> None:
        app = self.app
        if isinstance(app.screen, CallScreen):
            app.screen.show_result(rec)
        else:
            detail = (visible_json(rec.result)[:80] if rec.status == "SUCCESS"
                      else f"{rec.error_code or 'failed'}: {rec.error_message}")
            app.notify(f"{rec.caller} → {rec.target}.{rec.service}: {detail} ({rec.latency_ms:.1f} ms)",
                       severity="information" if rec.status == "SUCCESS" else "error")
        app.view_widget("audit").refresh_view(force=True)

    def action_done(self, m: msg.ActionDone) -> None:
        app = self.app
        if m.action == "call" and not m.ok and isinstance(app.screen, CallScreen):
            app.screen.show_failure(m.text)  # e.g. the grant before the call was refused
        if m.ok:
            app.notify(m.text or f"{m.action} done")
        else:
            app.notify(m.text, title=f"{m.action} failed", severity="error", timeout=8)
        self.after_action()

    def after_action(self) -> None:
        """Look at the environment now (the readers' next pass would be later) and show the audit."""
        for source in self.app.sources:
            source.poke()
        self.app.view_widget("audit").refresh_view(force=True)

    def pipeline_finished(self, m: msg.PipelineFinished) -> None:
        app = self.app
        app.view_widget("analytics").finished(m.ok, m.summary, m.error)
        app.audit.record(AuditEntry(
            ts=app.clock.time(), action="analyze", detail=f"journals in {app.root / 'speed_traces'}",
            command=f"speedtui analyze --dir {app.root}", ok=m.ok, result="" if m.ok else m.error))
