"""Operator actions (launch/stop nodes, grant/revoke, call, send, replay, reap).

Grants, revokes and stops on nodes the console did not start go through the operator key (the
`control` extension: ``speed_runtime.control.Operator``), when those nodes trust it.

Plain Python, thread-safe, no Textual: the app runs these in thread workers and gets results
back as return values; every action is written to the audit log with the equivalent `speed`
command.  Observer events of the console's own nodes go to the Bridge.
"""

from __future__ import annotations

import shlex
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speed_runtime.core.visible import visible

from ..models.errors import describe_call_error, describe_failure
from ..models.commands import NodeSpec, call_command, node_command, operator_command, reap_command, send_command
from ..models.history import AuditEntry, CallRecord
from ..models.traces import TraceRecord
from . import runtime as rt
from .bridge import Bridge
from .clock import Clock, SystemClock
from .history import AuditLog, CallHistory
from .operator import OperatorChoice
from .own_nodes import ActionError, OwnNode, launch_in_process, launch_process, stop_own
from .processes import console_node_name

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
                 clock: Clock | None = None, readonly: bool = False, operator: OperatorChoice | None = None) -> None:
        self.root = Path(root)
        self.operator = operator or OperatorChoice()
        self._operator_client: Any = None  # speed_runtime.control.Operator, made on first use
        self.key = key
        self.bridge = bridge
        self.audit = audit
        self.calls = calls
        self.clock = clock or SystemClock()
        self.readonly = readonly
        self.own: dict[str, OwnNode] = {}
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ helpers
    def _check_writable(self) -> None:
        if self.readonly:
            raise ActionError("the console runs with --readonly: actions are disabled")

    def _record(self, action: str, detail: str, command: str, ok: bool = True, result: str = "") -> None:
        self.audit.record(AuditEntry(ts=time.time(), action=action, detail=detail, command=command, ok=ok,
                                     result=result))

    def own_alive(self) -> list[str]:
        """Every running node this console started, in-process or process."""
        with self._lock:
            return sorted(n for n, o in self.own.items() if o.alive)

    def own_in_process(self) -> list[str]:
        with self._lock:
            return sorted(n for n, o in self.own.items() if o.node is not None and o.alive)

    def own_names(self) -> list[str]:
        """The nodes the operator may stop."""
        with self._lock:
            return sorted(n for n, o in self.own.items() if o.stoppable)

    def _own_set(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self.own)

    def describe(self, exc: BaseException) -> str:
        """A failure in the console's words (one sentence)."""
        return describe_failure(exc, self._own_set())

    def get_node(self, name: str):
        with self._lock:
            o = self.own.get(name)
        if o is None or o.node is None:
            raise ActionError(f"{name} is not one of this console's in-process nodes")
        if not o.alive:
            raise ActionError(f"{name} is not running")
        return o.node

    # ------------------------------------------------------------------ launch / stop
    def node_command(self, spec: NodeSpec) -> str:
        """What the audit log records for ``spec``: the line a process node is started with."""
        return node_command(self.root, self.key.path, spec, control_stdin=not spec.in_process).shell()

    def launch(self, spec: NodeSpec, ready_timeout: float = 15.0) -> OwnNode:
        self._check_writable()
        cmd = self.node_command(spec)
        where = "in-process" if spec.in_process else "process"
        try:
            with self._lock:
                if spec.name in self.own and self.own[spec.name].alive:
                    raise ActionError(f"this console already runs a node named {spec.name}")
            own = (launch_in_process(self.root, self.key, spec, self.bridge) if spec.in_process
                   else launch_process(self.root, self.key, spec, ready_timeout))
        except Exception as exc:  # noqa: BLE001
            msg = self.describe(exc)
            self._record("launch", f"{spec.name} ({where})", cmd, ok=False, result=msg)
            raise ActionError(msg) from None
        with self._lock:
            self.own[spec.name] = own
        self._record("launch", f"{spec.name} ({where})", cmd, result="ready")
        return own

    def start_console_node(self, name: str | None = None) -> OwnNode:
        """A node of the console's own to call and send from (issue 15): ``console-<user>``."""
        return self.launch(NodeSpec(name or console_node_name(), groups=("console",), trace=True, in_process=True))

    def stop(self, name: str) -> None:
        self._check_writable()
        with self._lock:
            own = self.own.pop(name, None)
        if own is None:
            self._operator_request("stop", name, None)
            return
        stop_own(own)
        self._record("stop", f"{name} ({own.kind})",
                     f"kill -TERM {own.proc.pid}" if own.proc is not None else f"# close in-process node {name}")

    def stop_all(self) -> None:
        with self._lock:
            owns, self.own = list(self.own.values()), {}
            client, self._operator_client = self._operator_client, None
        if client is not None:
            client.close()
        threads = [threading.Thread(target=stop_own, args=(o,)) for o in owns]
        for t in threads:
            t.start()
        for t in threads:
            t.join(15)

    # ------------------------------------------------------------------ grants
    def set_allow(self, name: str, peer: str, grant: bool) -> list[str]:
        self._check_writable()
        verb = "grant" if grant else "revoke"
        with self._lock:
            own = self.own.get(name)
        if own is None:  # a node someone else started: a control request, if it trusts our operator key
            result = self._operator_request("allow" if grant else "revoke", name, peer)
            return list(result.get("allow", []))
        try:
            if own is not None and own.proc is not None:
                allowed = self._set_allow_process(own, peer, grant)
            else:
                node = self.get_node(name)
                (node.allow if grant else node.revoke)(peer)
                allowed = list(node.allowed)
        except Exception as exc:  # noqa: BLE001
            msg = self.describe(exc)
            self._record(verb, f"{name} allow {peer}", "", ok=False, result=msg)
            raise ActionError(msg) from None
        with self._lock:
            own = self.own.get(name)
            if own is not None:
                own.spec.allow = tuple(allowed)
                cmd = self.node_command(own.spec)
            else:
                cmd = ""
        self._record(verb, f"{name} {'allows' if grant else 'no longer allows'} {peer}",
                     f"{cmd}  # equivalent node command line", result="allow=" + ",".join(allowed))
        return allowed

    def _set_allow_process(self, own: OwnNode, peer: str, grant: bool, timeout: float = 10.0) -> list[str]:
        """A `speed node` process of ours: its control channel, then its registry entry as the proof."""
        rt.validate_name(peer)
        if not own.alive or own.proc.stdin is None:
            raise ActionError(f"{own.spec.name} is not running")
        try:
            own.proc.stdin.write(f"{'allow' if grant else 'revoke'} {peer}\n")
            own.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise ActionError(f"{own.spec.name} no longer reads its control channel") from None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            allowed = rt.read_allow(self.root, own.spec.name)
            if allowed is not None and (peer in allowed) == grant:
                return allowed
            time.sleep(0.02)
        raise ActionError(f"{own.spec.name} did not publish the change within {timeout:g} s")

    # ------------------------------------------------------------------ the operator key (control requests)
    def operator_client(self):
        """The runtime's control client for the console's operator key (one, kept until stop_all)."""
        if self.operator.key is None:
            raise ActionError(self.no_operator_sentence())
        from speed_runtime.control import Operator

        with self._lock:
            if self._operator_client is None:
                self._operator_client = Operator(str(self.root), self.key.runtime_key or str(self.key.path),
                                                 self.operator.key)
            return self._operator_client

    def no_operator_sentence(self, target: str | None = None) -> str:
        where = f"{target} was not started by this console and " if target else ""
        why = f" ({self.operator.problem})" if self.operator.problem else ""
        return (f"{where}no operator key is loaded{why}: create one with `speed operator keygen`, start nodes "
                "with `speed node ... --operator PUBLIC-KEY` and run `speedtui --operator-key PATH`")

    def _operator_request(self, command: str, target: str, peer: str | None) -> dict[str, Any]:
        """``speed allow|revoke|stop`` through the operator key, audited with that command line."""
        self._check_writable()
        verb = {"allow": "grant", "revoke": "revoke", "stop": "stop", "lift": "lift"}[command]
        detail = (f"{peer}'s quarantine at {target}" if command == "lift" else
                  f"{target} {'allows' if command == 'allow' else 'no longer allows'} {peer}" if peer is not None
                  else f"{target} (operator)")
        if self.operator.key is None:
            msg = self.no_operator_sentence(target)
            self._record(verb, detail, "", ok=False, result=msg)
            raise ActionError(msg)
        cmd = operator_command(command, target, peer, self.root, self.key.path, self.operator.path).shell()
        try:
            op = self.operator_client()
            if command == "stop":
                result = op.stop(target, wait=True)
            elif command == "lift":
                result = op.lift(target, peer)
            else:
                result = (op.allow if command == "allow" else op.revoke)(target, peer)
        except Exception as exc:  # noqa: BLE001 - the runtime's sentence (never key material)
            msg = self.describe(exc)
            self._record(verb, detail, cmd, ok=False, result=msg)
            raise ActionError(msg) from None
        if command == "lift":
            summary = ("quarantine lifted" if result.get("lifted") else "it was not quarantined"
                       if result.get("scores") else f"{target} keeps no threat scores")
            self._record(verb, detail, cmd, ok=bool(result.get("lifted")), result=summary)
            return result
        summary = ("stopped" if command == "stop" else
                   ("allow=" + ",".join(result.get("allow", [])) + ("" if result.get("changed", True)
                                                                     else " (unchanged)")))
        self._record(verb, detail, cmd, result=summary)
        return result

    # ------------------------------------------------------------------ calls and messages
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
            node = self.get_node(caller)
            if target not in node.allowed:
                self.set_allow(caller, target, True)
                changed.append((caller, target))
        return changed

    def revoke_grants(self, grants: list[tuple[str, str]]) -> None:
        """Undo ``grant_for``'s grants (each audited; a failure is audited and left at that)."""
        for node, peer in reversed(grants):
            try:
                self.set_allow(node, peer, False)
            except ActionError:
                pass

    def call(self, caller: str, target: str, service: str, arguments: dict, timeout: float = 5.0,
             grant_first: bool = False, revoke_after: bool = False) -> CallRecord:
        self._check_writable()
        node = self.get_node(caller)
        granted = self.grant_for(caller, target, answer=True) if grant_first else []
        try:
            return self._call(node, caller, target, service, arguments, timeout)
        finally:
            if revoke_after:
                self.revoke_grants(granted)

    def _call(self, node: Any, caller: str, target: str, service: str, arguments: dict, timeout: float) -> CallRecord:
        cmd = call_command(target, service, arguments, caller, self.root, self.key.path, timeout).shell()
        started = time.perf_counter()
        status, result, code, message = "SUCCESS", None, "", ""
        try:
            result = node.call(target, service, arguments, timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - SpcError has .code; others are local failures
            status = "ERROR"
            code = str(getattr(exc, "code", "") or "")
            raw = str(getattr(exc, "message", "") or exc).strip()
            message = visible(describe_call_error(code, raw.splitlines()[0] if raw else "", self._own_set()) if code
                              else self.describe(exc))  # the callee's text: shown, stored, never acting
        latency = (time.perf_counter() - started) * 1000.0
        rec = CallRecord(ts=time.time(), caller=caller, target=target, service=service, arguments=arguments,
                         timeout=timeout, status=status, result=result, error_code=code, error_message=message,
                         latency_ms=round(latency, 3))
        self.calls.record(rec)
        self._record("call", f"{caller} → {target}.{service}", cmd, ok=status == "SUCCESS",
                     result=f"{code or status} {latency:.1f}ms")
        return rec

    def send(self, sender: str, target: str, data: Any, confirm: bool = False, timeout: float = 5.0,
             grant_first: bool = False, revoke_after: bool = False) -> int:
        self._check_writable()
        node = self.get_node(sender)
        # a revoke right after an unconfirmed send could overtake the message in the target's inbox
        # (it checks the grant when it reads it): with a revoke to follow, wait for its ACK first
        confirm = confirm or (grant_first and revoke_after)
        granted = self.grant_for(sender, target, answer=confirm) if grant_first else []
        try:
            return self._send(node, sender, target, data, confirm, timeout)
        finally:
            if revoke_after:
                self.revoke_grants(granted)

    def _send(self, node: Any, sender: str, target: str, data: Any, confirm: bool, timeout: float) -> int:
        cmd = send_command(target, data, sender, self.root, self.key.path, confirm).shell()
        try:
            seq = node.send(target, data, confirm=confirm, timeout=timeout)
        except Exception as exc:  # noqa: BLE001
            msg = self.describe(exc)
            self._record("send", f"{sender} → {target}", cmd, ok=False, result=msg)
            raise ActionError(msg) from None
        self._record("send", f"{sender} → {target}", cmd, result=f"seq {seq}" + (" confirmed" if confirm else ""))
        return seq

    # ------------------------------------------------------------------ replay and reap
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
            self._record("replay", detail, cmd, ok=False, result=msg)
            raise ActionError(msg) from None
        self._record("replay", detail, cmd, result="injected")
        return ReplayResult(sender, receiver, rec.type, dec.header.seq, filename)

    def reap(self, name: str) -> bool:
        self._check_writable()
        cmd = reap_command([name], self.root).shell()
        try:
            from speed_runtime.registry import Registry

            done = Registry(str(self.root), create=False).reap(name, time.time())
        except Exception as exc:  # noqa: BLE001
            msg = self.describe(exc)
            self._record("reap", name, cmd, ok=False, result=msg)
            raise ActionError(msg) from None
        self._record("reap", name, cmd, ok=done, result="removed" if done else "not stale: left alone")
        if not done:
            raise ActionError(f"{name} is not stale (or already gone): the registry entry was left alone")
        return True

    def own_replay_state(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            o = self.own.get(name)
        if o is None or o.node is None or not o.alive:
            return None
        try:
            return o.node.replay_state()
        except Exception:  # noqa: BLE001
            return None
