"""Calls and messages from the console's own nodes (`F`, `m`, a call opened or copied from a
traced SPC record, a call re-run from the Audit view): their dialogs, the thread workers that make
them, and their outcomes (in the call dialog when it is open, else a notification)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from speed_runtime.core.visible import visible_json

from ...models.commands import speed_call_command
from ...models.history import CallRecord
from ...models.traces import TraceRecord
from ...services import runtime as rt
from ...services.actions import ActionError
from .. import messages as msg
from ..screens.calls import CallScreen, GrantOffer, SendScreen
from ..state import ConsoleState
from .runner import ActionRunner


class CallActions:
    def __init__(self, runner: ActionRunner, state: ConsoleState, root: Path, key: rt.KeyInfo | None,
                 operator_loaded: bool, confirm_send: bool, cannot_change: Callable[..., str],
                 copy: Callable[[str, str], None]) -> None:
        self.runner = runner
        self.port = runner.port
        self.state = state
        self.root = root
        self.key = key
        self.operator_loaded = operator_loaded  # an operator key is loaded (the dialogs say what it allows)
        self.confirm_send = confirm_send  # the send dialog's default (config)
        self.cannot_change = cannot_change  # why a node's grants cannot be changed (GrantActions)
        self.copy = copy  # to the clipboard, told (Exports)
        self.unsent: tuple[str, str] | None = None  # (to, data as JSON) of a message not delivered yet

    def open(self, caller: str | None = None, target: str = "", service: str = "",
             arguments: dict | str | None = None, timeout: float = 5.0) -> None:
        """The call dialog, pre-filled (``arguments``: an object, or the text as typed)."""
        acts = self.runner.acts()
        if acts is None:
            return
        self.port.push_screen(CallScreen(acts.own.in_process(), self.state.graph(), str(self.root), self.state.key_path,
                                         caller, target, service, arguments, timeout, self.state.administered(),
                                         self.cannot_change, self.operator_loaded))

    def run(self, m: msg.RunCall) -> None:
        """A call asked for by the call dialog or the Audit view (re-run)."""
        acts = self.runner.acts()
        if acts is None:
            return
        if m.caller not in acts.own.in_process():
            self.port.notify(f"{m.caller} is not running in this console: edit the call (e) to pick a caller",
                             severity="warning")
            return
        if not isinstance(self.port.screen, CallScreen):
            self.port.notify(f"calling {m.caller} → {m.target}.{m.service}…")
        self.call(m.caller, m.target, m.service, m.arguments, m.timeout, m.grant_first, m.revoke_after)

    def call(self, caller: str, target: str, service: str, arguments: dict, timeout: float,
             grant_first: bool = False, revoke_after: bool = False) -> None:
        """The call in a thread worker; its record comes back as ``CallFinished`` (a refusal before
        it was made as ``ActionDone``)."""
        port, acts = self.port, self.runner.actions
        if acts is None:
            return

        def work() -> None:
            try:
                rec = acts.call(caller, target, service, arguments, timeout, grant_first, revoke_after,
                                warn=self.grant_left)
            except ActionError as exc:
                port.post_message(msg.ActionDone("call", False, self.runner.failure_text(exc)))
                return
            if rec.unanswered:
                rec = replace(rec, error_message=rec.error_message + self.runner.unanswered_hint())
            port.post_message(msg.CallFinished(rec))

        port.run_worker(work, thread=True, group="call", name="call")

    def grant_left(self, text: str) -> None:
        """From a worker: the revoke after a call or message failed and left a grant in place for
        good; a warning that stays long enough to be read (it names the grant and how to remove it)."""
        # (notify only posts a message, thread-safe: never call_from_thread, which waits on a closing app)
        self.port.notify(text, title="grant left in place", severity="warning", timeout=30)

    def finished(self, rec: CallRecord) -> None:
        screen = self.port.screen
        if isinstance(screen, CallScreen):
            screen.show_result(rec)
        else:
            detail = (visible_json(rec.result)[:80] if rec.status == "SUCCESS"
                      else f"{rec.error_code or 'failed'}: {rec.error_message}")
            self.port.notify(f"{rec.caller} → {rec.target}.{rec.service}: {detail} ({rec.latency_ms:.1f} ms)",
                             severity="information" if rec.status == "SUCCESS" else "error")
        self.port.view_widget("audit").refresh_view(force=True)

    def from_trace(self, rec: TraceRecord, copy_only: bool = False) -> None:
        """A traced SPC request or response as a call: its dialog, or its `speed call` line copied."""
        if rec.type not in ("SPC_REQUEST", "SPC_RESPONSE"):
            self.port.notify("only SPC requests and responses open as a call", severity="warning")
            return
        link = self.state.traces.call_link(rec)
        caller, target = (link.caller, link.callee) if link else (rec.sender, rec.receiver)
        args: dict = {}
        req = next((r for r in (link.records if link else (rec,)) if r.type == "SPC_REQUEST" and r.envelope), None)
        if req is not None and self.key is not None:
            dec = rt.decode_envelope(req.envelope, self.key.secret)
            if isinstance(dec.payload, dict) and isinstance(dec.payload.get("arguments"), dict):
                args = dec.payload["arguments"]
        service = link.service if link else rec.service
        if copy_only:
            self.copy(speed_call_command(target, service, args, caller, self.root, self.state.key_path),
                      "the `speed call` line")
            return
        self.open(caller, target, service, args)

    def follow_registry(self) -> None:
        """An open call or message dialog's checks follow the registry."""
        screen = self.port.screen
        if isinstance(screen, GrantOffer):
            screen.follow_registry(self.state.graph())

    def send(self, to: str = "", data: str | None = None) -> None:
        """The send dialog, to ``to`` (the highlighted node), with ``data`` (the text as typed) when
        given; a message that failed comes back in it, its target and data kept, when the dialog is
        opened again without a highlighted node."""
        acts = self.runner.acts()
        if acts is None:
            return
        graph = self.state.graph()
        unsent_to, unsent_data = self.unsent if self.unsent is not None else ("", None)
        self.port.push_screen(SendScreen(acts.own.in_process(), graph.names, self.confirm_send, graph,
                                         self.state.administered(), self.cannot_change, self.operator_loaded,
                                         to=to or unsent_to,
                                         data=data if data is not None
                                         else unsent_data if not to or to == unsent_to else None),
                              self._send_chosen)

    def _send_chosen(self, choice: tuple[str, str, Any, bool, bool, bool] | None) -> None:
        acts = self.runner.actions
        if choice and acts is not None:
            sender, to, data, confirm, grant, revoke = choice
            self.unsent = (to, json.dumps(data, ensure_ascii=False))  # until it is delivered

            def delivered() -> None:
                self.unsent = None

            self.runner.run("send", lambda: acts.send(sender, to, data, confirm, grant_first=grant,
                                                      revoke_after=revoke, warn=self.grant_left),
                            f"message {sender} → {to} delivered" + (" and confirmed" if confirm else ""),
                            after=delivered)
