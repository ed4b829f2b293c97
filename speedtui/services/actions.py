"""Operator actions: launch and stop nodes, grant and revoke, call, send, replay, reap, lift a
quarantine.

Plain Python, thread-safe, no Textual: the UI runs these in thread workers and gets results back
as return values; every action is written to the audit log with the equivalent `speed` command.

Grants change through one channel per node: directly at the console's own in-process nodes, and
by a control request (the `control` extension, ``operator.ControlRequests``) everywhere else —
signed with the console's own per-environment operator key at the `speed node` processes it
launched (they trust that key), with the operator's key at nodes someone else started.
"""

from __future__ import annotations

import re
import secrets
import shlex
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from speed_runtime.core.errors import NameInUseError, SpeedError
from speed_runtime.core.visible import visible

from ..models.commands import NodeSpec, call_command, node_command, operator_command, reap_command, send_command
from ..models.errors import describe_call_error, describe_failure
from ..models.history import CallRecord
from ..models.traces import TraceRecord
from . import runtime as rt
from .bridge import Bridge
from .clock import Clock, SystemClock
from .history import AuditLog, CallHistory
from .operator import ControlRequests, OperatorChoice, console_operator_key
from .own_nodes import (ActionError, NameTakenError, OwnNode, OwnNodes, launch_in_process, launch_process,
                        no_answer_came, stop_own)
from .processes import console_node_name

__all__ = ["ActionError", "ActionService", "NodeSpec", "OwnNode", "ReplayResult"]

DEMO_SERVICE_NAMES = ("echo", "calculateTax", "sleep", "fail")


@dataclass(frozen=True)
class ReplayResult:
    sender: str
    receiver: str
    type: str
    seq: int
    filename: str


class ActionService:
    def __init__(self, root: Path, key: rt.KeyInfo, bridge: Bridge, audit: AuditLog, calls: CallHistory,
                 clock: Clock | None = None, readonly: bool = False, operator: OperatorChoice | None = None,
                 own_operator_key: Path | None = None) -> None:
        self.root = Path(root)
        self.key = key
        self.bridge = bridge
        self.audit = audit
        self.calls = calls
        self.clock = clock or SystemClock()  # when calls are recorded (the audit log has it too)
        self.readonly = readonly
        self.own = OwnNodes()
        # the operator's key, for nodes the console did not start
        self.control = ControlRequests(self.root, key, operator or OperatorChoice(), audit, self.describe)
        # the console's own key, for the `speed node` processes it launches (beside the audit log)
        self._own_key_path = own_operator_key or audit.path.parent / "operator.key"
        self._own_control: ControlRequests | None = None
        self._lock = threading.Lock()
        self._console_node_lock = threading.Lock()  # one start of the console's node at a time

    # ------------------------------------------------------------------ helpers
    def _check_writable(self) -> None:
        if self.readonly:
            raise ActionError("the console runs with --readonly: actions are disabled")

    def describe(self, exc: BaseException) -> str:
        """A failure in the console's words (one sentence)."""
        return describe_failure(exc, frozenset(self.own))

    def no_operator_sentence(self, target: str | None = None) -> str:
        return self.control.no_key_sentence(target)

    def _own_requests(self) -> ControlRequests:
        """Control requests signed with the console's own key (made on first use)."""
        with self._lock:
            if self._own_control is None:
                choice = console_operator_key(self._own_key_path)
                if choice.key is None:
                    raise ActionError(choice.problem or "the console's own operator key cannot be used")
                self._own_control = ControlRequests(self.root, self.key, choice, self.audit, self.describe)
            return self._own_control

    # ------------------------------------------------------------------ launch / stop
    def node_command(self, spec: NodeSpec) -> str:
        """What the audit log records for ``spec``: the line a process node is started with."""
        return node_command(self.root, self.key.path, spec).shell()

    def launch(self, spec: NodeSpec, ready_timeout: float = 15.0) -> OwnNode:
        self._check_writable()
        where = "in-process" if spec.in_process else "process"
        cmd = self.node_command(spec)
        try:
            if self.own.running(spec.name):
                raise ActionError(f"this console already runs a node named {spec.name}")
            if not spec.in_process:  # its grants change through control requests with the console's key
                own_key = self.own_operator_public()
                if own_key not in spec.operators:
                    spec = replace(spec, operators=(*spec.operators, own_key))
                    cmd = self.node_command(spec)
            own = (launch_in_process(self.root, self.key, spec, self.bridge, self.own.logs) if spec.in_process
                   else launch_process(self.root, self.key, spec, ready_timeout, self.own.logs))
        except Exception as exc:  # noqa: BLE001
            msg = self.describe(exc)
            self.audit.note("launch", f"{spec.name} ({where})", cmd, ok=False, result=msg)
            raise (NameTakenError if isinstance(exc, NameInUseError) else ActionError)(msg) from None
        self.own.add(own)
        self.audit.note("launch", f"{spec.name} ({where})", cmd, result="ready")
        return own

    def own_operator_public(self) -> str:
        """The public key of the console's own operator key (made on first use), which every
        `speed node` process it launches trusts: the launch dialog shows it in the line."""
        return self._own_requests().choice.key.public_text

    def start_console_node(self, name: str | None = None) -> OwnNode:
        """A node of the console's own to call and send from (issue 15): ``console-<user>``, or,
        when another live process holds that name (any member may register it), the same name with
        a suffix nobody could have guessed (``console-<user>-3fa9c1``): the call and message
        dialogs, which offer no other name, must not be held up by a squatter."""
        name = name or console_node_name()
        with self._console_node_lock:  # two presses at once (the call and the message dialog) start one
            mine = [n for n in self.own.in_process() if re.fullmatch(re.escape(name) + r"(-[0-9a-f]{6})?", n)]
            if mine:
                return self.own[mine[0]]    # already started: the dialog comes back with it
            try:
                return self.launch(NodeSpec(name, groups=("console",), trace=True, in_process=True))
            except NameTakenError:
                other = f"{name}-{secrets.token_hex(3)}"
                return self.launch(NodeSpec(other, groups=("console",), trace=True, in_process=True))

    def stop(self, name: str) -> None:
        self._check_writable()
        own = self.own.pop(name)
        if own is None:
            self.control.request("stop", name, None)
            return
        stop_own(own, self.own.logs)
        self.audit.note("stop", f"{name} ({own.kind})",
                        f"kill -TERM {own.proc.pid}" if own.proc is not None else f"# close in-process node {name}")

    def separate_processes(self) -> list[str]:
        """The nodes the operator launched as separate processes that still run (quitting stops them)."""
        return self.own.processes()

    def stop_all(self) -> None:
        owns = self.own.pop_all()
        with self._lock:
            channels = [c for c in (self.control, self._own_control) if c is not None]
        for channel in channels:
            channel.close()
        threads = [threading.Thread(target=stop_own, args=(o, self.own.logs), name=f"stop-{o.spec.name}")
                   for o in owns]
        for t in threads:
            t.start()
        for t in threads:
            t.join()  # bounded by stop_own itself (SIGKILL after 10 s): none is left running behind us

    # ------------------------------------------------------------------ grants
    def set_allow(self, name: str, peer: str, grant: bool, *, audit_failure: bool = True) -> list[str]:
        """Have ``name`` allow (or no longer allow) ``peer``: directly at an in-process node of
        ours, else by a control request (our own key for our processes, the operator's for others).
        ``audit_failure=False``: the caller audits a failure itself (one row per event)."""
        self._check_writable()
        own = self.own.get(name)
        if own is None or own.node is None:
            channel = self.control if own is None else self._own_requests()
            allowed = list(channel.request("allow" if grant else "revoke", name, peer,
                                           audit_failure=audit_failure).get("allow", []))
            if own is not None:
                own.spec.allow = tuple(allowed)  # the line it would be started with now
            return allowed
        verb = "grant" if grant else "revoke"
        try:
            node = self.own.node(name)
            (node.allow if grant else node.revoke)(peer)
            allowed = list(node.allowed)
        except Exception as exc:  # noqa: BLE001
            msg = self.describe(exc)
            if audit_failure:
                self.audit.note(verb, f"{name} allow {peer}", "", ok=False, result=msg)
            raise ActionError(msg) from None
        own.spec.allow = tuple(allowed)
        self.audit.note(verb, f"{name} {'allows' if grant else 'no longer allows'} {peer}",
                        f"{self.node_command(own.spec)}  # equivalent node command line",
                        result="allow=" + ",".join(allowed))
        return allowed

    def grant_for(self, caller: str, target: str, answer: bool) -> list[tuple[str, str]]:
        """Before a call or send: have ``target`` allow ``caller`` (through the operator key) and,
        for an ``answer`` to come back, the console's ``caller`` allow ``target``.  Each step is
        audited; returns the (node, peer) grants that changed, for ``revoke_grants`` afterwards."""
        changed: list[tuple[str, str]] = []
        allowed = rt.read_allow(self.root, target)
        if allowed is None or caller not in allowed:
            self.set_allow(target, caller, True)  # its own node, else a control request
            changed.append((target, caller))
        if answer:
            node = self.own.node(caller)
            if target not in node.allowed:
                self.set_allow(caller, target, True)
                changed.append((caller, target))
        return changed

    def revoke_grants(self, grants: list[tuple[str, str]], warn: Callable[[str], None] | None = None) -> list[str]:
        """Undo ``grant_for``'s grants (each audited). A revoke that fails leaves a grant in place
        for good: each such grant is audited as a warning that names it and how to remove it, and
        said to ``warn`` (the UI's notification); returns those sentences."""
        left: list[str] = []
        for node, peer in reversed(grants):
            try:
                self.set_allow(node, peer, False, audit_failure=False)  # a failure is audited once, here
            except ActionError as exc:
                try:
                    allowed = rt.read_allow(self.root, node)
                except OSError:
                    allowed = None
                if allowed is not None and peer not in allowed:  # it answered too late, but its entry
                    self.audit.note("revoke", f"{node} no longer allows {peer}", "",  # shows the revoke applied
                                    result=f"applied (its entry shows it; the answer did not come: {exc})")
                    continue
                cmd, text = self._grant_left(node, peer, str(exc))
                self.audit.note("revoke", f"{node} still allows {peer}: the grant made for the call or message "
                                "was left in place", cmd, ok=False, result=text)
                left.append(text)
        if warn is not None:
            for text in left:
                try:
                    warn(text)
                except Exception:  # noqa: BLE001 - the console is closing: the audit log has it
                    pass
        return left

    def _grant_left(self, node: str, peer: str, why: str) -> tuple[str, str]:
        """(the command line that removes the grant, one sentence naming it and how to remove it)."""
        own = self.own.get(node)
        in_console = f"revoke it in the console (g on {node}, peer {peer}, revoke)"
        if own is not None and own.node is not None:  # the console's own in-process node
            return "", f"{node} still allows {peer} (the revoke afterwards failed: {why}): {in_console}"
        channel = self.control if own is None else self._own_requests()
        cmd = operator_command("revoke", node, peer, self.root, self.key.path, channel.choice.path).shell()
        return cmd, (f"{node} still allows {peer} (the revoke afterwards failed: {why}): {in_console} "
                     f"or run `{cmd}`")

    # ------------------------------------------------------------------ calls and messages
    def call(self, caller: str, target: str, service: str, arguments: dict, timeout: float = 5.0,
             grant_first: bool = False, revoke_after: bool = False,
             warn: Callable[[str], None] | None = None) -> CallRecord:
        """``warn``: told of each grant the revoke afterwards left in place (``revoke_grants``)."""
        self._check_writable()
        node = self.own.node(caller)
        granted = self.grant_for(caller, target, answer=True) if grant_first else []
        try:
            return self._call(node, caller, target, service, arguments, timeout)
        finally:
            if revoke_after:
                self.revoke_grants(granted, warn)

    def _call(self, node: Any, caller: str, target: str, service: str, arguments: dict, timeout: float) -> CallRecord:
        cmd = call_command(target, service, arguments, caller, self.root, self.key.path, timeout).shell()
        started = time.perf_counter()
        status, result, code, message, unanswered = "SUCCESS", None, "", "", False
        try:
            result = node.call(target, service, arguments, timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - SpcError has .code; others are local failures
            status, unanswered = "ERROR", no_answer_came(exc)
            code = str(getattr(exc, "code", "") or "")
            raw = str(getattr(exc, "message", "") or exc).strip()
            message = visible(describe_call_error(code, raw.splitlines()[0] if raw else "", frozenset(self.own))
                              if code else self.describe(exc))  # the callee's text: shown, stored, never acting
        latency = (time.perf_counter() - started) * 1000.0
        rec = CallRecord(ts=self.clock.time(), caller=caller, target=target, service=service, arguments=arguments,
                         timeout=timeout, status=status, result=result, error_code=code, error_message=message,
                         latency_ms=round(latency, 3), unanswered=unanswered)
        self.calls.record(rec)
        # a failure with no answer code (the console quit mid-call, the callee stopped) says why
        self.audit.note("call", f"{caller} → {target}.{service}", cmd, ok=status == "SUCCESS",
                        result=f"{code or status} {latency:.1f}ms" + (f": {message}" if message and not code else ""))
        return rec

    def send(self, sender: str, target: str, data: Any, confirm: bool = False, timeout: float = 5.0,
             grant_first: bool = False, revoke_after: bool = False,
             warn: Callable[[str], None] | None = None) -> int:
        """``warn``: told of each grant the revoke afterwards left in place (``revoke_grants``)."""
        self._check_writable()
        node = self.own.node(sender)
        # a revoke right after an unconfirmed send could overtake the message in the target's inbox
        # (it checks the grant when it reads it): with a revoke to follow, wait for its ACK first
        confirm = confirm or (grant_first and revoke_after)
        granted = self.grant_for(sender, target, answer=confirm) if grant_first else []
        try:
            return self._send(node, sender, target, data, confirm, timeout)
        finally:
            if revoke_after:
                self.revoke_grants(granted, warn)

    def _send(self, node: Any, sender: str, target: str, data: Any, confirm: bool, timeout: float) -> int:
        cmd = send_command(target, data, sender, self.root, self.key.path, confirm).shell()
        try:
            seq = node.send(target, data, confirm=confirm, timeout=timeout)
        except Exception as exc:  # noqa: BLE001
            msg = self.describe(exc)
            self.audit.note("send", f"{sender} → {target}", cmd, ok=False, result=msg)
            raise ActionError(msg, unanswered=no_answer_came(exc)) from None
        self.audit.note("send", f"{sender} → {target}", cmd, result=f"seq {seq}" + (" confirmed" if confirm else ""))
        return seq

    # ------------------------------------------------------------------ replay, reap, lift
    def replay(self, rec: TraceRecord) -> ReplayResult:
        self._check_writable()
        if not rec.envelope:
            raise ActionError("this record carries no sealed envelope (the node journals without envelopes)")
        data = rec.envelope
        dec = rt.decode_envelope(data, None)
        if dec.header is None:
            raise ActionError(f"the traced envelope is unreadable: {dec.problem}")
        sender, receiver = rec.sender, rec.receiver
        filename = rt.envelope_filename(sender, dec.header.source_id, dec.header.seq, dec.header.nonce)
        detail = f"{sender} → {receiver} {rec.type} seq {dec.header.seq}"
        cmd = f"# re-deliver {len(data)} sealed bytes as {shlex.quote(str(self.root / receiver / 'inbox' / filename))}"
        try:
            rt.inject(self.root, receiver, filename, data)
        except Exception as exc:  # noqa: BLE001
            msg = self.describe(exc)
            self.audit.note("replay", detail, cmd, ok=False, result=msg)
            raise ActionError(msg) from None
        self.audit.note("replay", detail, cmd, result="injected")
        return ReplayResult(sender, receiver, rec.type, dec.header.seq, filename)

    def reap(self, name: str) -> bool:
        self._check_writable()
        cmd = reap_command([name], self.root).shell()
        try:
            from speed_runtime.registry import Registry

            done = Registry(str(self.root), create=False).reap(name, self.clock.time())
        except Exception as exc:  # noqa: BLE001
            msg = self.describe(exc)
            self.audit.note("reap", name, cmd, ok=False, result=msg)
            raise ActionError(msg) from None
        self.audit.note("reap", name, cmd, ok=done, result="removed" if done else "not stale: left alone")
        if not done:
            raise ActionError(f"{name} is not stale (or already gone): the registry entry was left alone")
        return True

    def lift(self, receiver: str, sender: str) -> bool:
        """Lift ``sender``'s quarantine at ``receiver`` (extension `quota`): one of the console's
        in-process nodes directly, any other node that trusts the console's operator key with a
        control request (`speed lift`, audited with that command line). Raises ActionError when it
        was not quarantined."""
        self._check_writable()
        if receiver not in self.own.in_process():
            result = self.control.request("lift", receiver, sender)
            if not result.get("scores"):
                raise ActionError(f"{receiver} keeps no threat scores (it runs without --feature quota): "
                                  "nothing to lift")
            if not result.get("lifted"):
                raise ActionError(f"{sender} is not quarantined at {receiver}: nothing to lift")
            return True
        node = self.own.node(receiver)
        try:
            lifted = node.lift_quarantine(sender)
        except SpeedError as exc:
            self.audit.note("lift", f"{sender} at {receiver}", "", ok=False, result=str(exc))
            raise ActionError(str(exc)) from None
        self.audit.note("lift", f"{sender} at {receiver}", "", ok=lifted,
                        result="quarantine lifted" if lifted else "it was not quarantined")
        if not lifted:
            raise ActionError(f"{sender} is not quarantined at {receiver}: nothing to lift")
        return lifted
