"""The console's operator keys (the `control` extension, README "## Operators"): which file, one
sentence when it cannot be used, and the control requests signed with it. The key itself is never
shown: only its fingerprint.

The operator's key: ``speedtui --operator-key PATH``, else ``"operator_key"`` in the console's
config file, else the runtime's default operator key file (``$SPEED_OPERATOR_KEY``, else
``~/.config/speed/operator.key``) when it exists. The console's own key (``console_operator_key``):
one per environment, made by the console, trusted by the `speed node` processes it launches."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable

from speed_runtime.control import OperatorKey, default_operator_key_path, generate_operator_key, load_operator_key
from speed_runtime.core.errors import SpeedError

from ..models.commands import operator_command
from .history import AuditLog
from .own_nodes import ActionError


@dataclass(frozen=True)
class OperatorChoice:
    """The operator key the console acts with (None: none), its file, and why it is missing."""

    key: OperatorKey | None = None
    path: Path | None = None
    problem: str | None = None  # one sentence when a key was named but cannot be used

    @property
    def fingerprint(self) -> str | None:
        return self.key.fingerprint if self.key is not None else None

    def __repr__(self) -> str:  # never the key
        return f"OperatorChoice(path={str(self.path)!r}, fingerprint={self.fingerprint!r})"


def resolve_operator_key(cli_path: str | os.PathLike | None = None,
                         config_path: str | os.PathLike | None = None) -> OperatorChoice:
    """The operator key named on the command line, else in the config file, else the default
    file if present; a missing or bad file is one sentence in ``problem`` (the console runs on)."""
    named = cli_path if cli_path is not None else config_path
    if named is not None:
        path = Path(os.path.expanduser(os.fspath(named)))
    else:
        path = Path(default_operator_key_path())
        if not path.exists() and not path.is_symlink():
            return OperatorChoice()
    try:
        key = load_operator_key(path)
    except SpeedError as exc:  # the runtime's sentence names the file and the fix, never the key
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "unreadable"
        return OperatorChoice(path=path, problem=f"operator key not loaded: {first}")
    except OSError as exc:
        return OperatorChoice(path=path, problem=f"operator key not loaded: {path}: {exc.strerror or exc}")
    return OperatorChoice(key=key, path=path)



def console_operator_key(path: Path) -> OperatorChoice:
    """The operator key the console makes for itself, per environment (``path``, mode 0600): the
    `speed node` processes it launches trust it, so their grants change through control requests
    like any other node's. Made on first use; one sentence in ``problem`` when it cannot be."""
    try:
        if not path.exists() and not path.is_symlink():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            return OperatorChoice(key=generate_operator_key(path), path=path)
        return OperatorChoice(key=load_operator_key(path), path=path)
    except SpeedError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "unreadable"
        return OperatorChoice(path=path, problem=f"the console's own operator key cannot be used: {first}")
    except OSError as exc:
        return OperatorChoice(path=path, problem=f"the console's own operator key cannot be made: {path}: "
                                                 f"{exc.strerror or exc}")


class ControlRequests:
    """Control requests (`speed allow|revoke|stop|lift`) signed with one operator key, through the
    runtime's ``Operator`` (a temporary requester node, started on the first request and kept
    until ``close``); each is audited with its equivalent command line. Blocking: called from
    thread workers."""

    def __init__(self, root: Path, env_key: Any, choice: OperatorChoice, audit: AuditLog,
                 describe: Callable[[BaseException], str]) -> None:
        self.root = Path(root)
        self.env_key = env_key  # the environment's key (runtime.KeyInfo)
        self.choice = choice
        self.audit = audit
        self.describe = describe  # a failure in the console's words
        self._client: Any = None
        self._closed = False
        self._lock = threading.Lock()
        self._on_their_way = 0  # requests not yet audited (close waits for them)
        self._audited = threading.Condition(self._lock)

    def no_key_sentence(self, target: str | None = None) -> str:
        where = f"{target} was not started by this console and " if target else ""
        why = f" ({self.choice.problem})" if self.choice.problem else ""
        return (f"{where}no operator key is loaded{why}: create one with `speed operator keygen`, start nodes "
                "with `speed node ... --operator PUBLIC-KEY` and run `speedtui --operator-key PATH`")

    @contextmanager
    def _operator(self) -> Iterator[Any]:
        """The requester, started on the first request. After `close` (a revoke the console makes
        on its way out, when a call's worker ends after it) a requester of its own, closed once
        its request is done: one started then was never closed, and its registry entry stayed,
        stale, for every console that quit during such a call."""
        from speed_runtime.control import Operator

        def started() -> Any:
            return Operator(str(self.root), self.env_key.runtime_key or str(self.env_key.path), self.choice.key)
        with self._lock:
            if not self._closed and self._client is None:
                self._client = started()
            client = None if self._closed else self._client
        if client is not None:
            yield client
            return
        client = started()
        try:
            yield client
        finally:
            client.close()

    def request(self, command: str, target: str, peer: str | None, *, audit_failure: bool = True) -> dict[str, Any]:
        """``speed allow|revoke|stop|lift``, audited with that command line (its result, or its
        failure in one sentence — unless ``audit_failure`` is False —: then ActionError)."""
        verb = {"allow": "grant", "revoke": "revoke", "stop": "stop", "lift": "lift"}[command]
        detail = (f"{peer}'s quarantine at {target}" if command == "lift" else
                  f"{target} {'allows' if command == 'allow' else 'no longer allows'} {peer}" if peer is not None
                  else f"{target} (operator)")
        if self.choice.key is None:
            msg = self.no_key_sentence(target)
            if audit_failure:
                self.audit.note(verb, detail, "", ok=False, result=msg)
            raise ActionError(msg)
        cmd = operator_command(command, target, peer, self.root, self.env_key.path, self.choice.path).shell()
        with self._lock:
            self._on_their_way += 1
        try:
            return self._request(command, target, peer, verb, detail, cmd, audit_failure)
        finally:
            with self._lock:
                self._on_their_way -= 1
                self._audited.notify_all()

    def _request(self, command: str, target: str, peer: str | None, verb: str, detail: str,
                 cmd: str, audit_failure: bool) -> dict[str, Any]:
        try:
            with self._operator() as op:
                if command == "stop":
                    result = op.stop(target, wait=True)
                elif command == "lift":
                    result = op.lift(target, peer)
                else:
                    result = (op.allow if command == "allow" else op.revoke)(target, peer)
        except Exception as exc:  # noqa: BLE001 - the runtime's sentence (never key material)
            msg = self.describe(exc)
            if audit_failure:
                self.audit.note(verb, detail, cmd, ok=False, result=msg)
            raise ActionError(msg, unanswered=getattr(exc, "withdrawn", None) is False) from None
        if command == "lift":
            summary = ("quarantine lifted" if result.get("lifted") else "it was not quarantined"
                       if result.get("scores") else f"{target} keeps no threat scores")
            self.audit.note(verb, detail, cmd, ok=bool(result.get("lifted")), result=summary)
            return result
        summary = ("stopped" if command == "stop" else
                   ("allow=" + ",".join(result.get("allow", [])) + ("" if result.get("changed", True)
                                                                     else " (unchanged)")))
        self.audit.note(verb, detail, cmd, result=summary)
        return result

    def close(self, wait: float = 10.0) -> None:
        """End the requester: a request still on its way is withdrawn from its target (the runtime's
        Operator.close: not applied after the console is gone) and fails with what the withdrawal
        found, which is audited before this returns (at most `wait` seconds more)."""
        with self._lock:
            client, self._client, self._closed = self._client, None, True
        if client is not None:
            client.close()
        with self._lock:
            self._audited.wait_for(lambda: self._on_their_way == 0, wait)
