"""Operators of the `control` extension (docs/PROTOCOL.md "### control"): their key files and the
client that asks nodes to allow, revoke, stop or report their status.

    key = generate_operator_key()                 # ~/.config/speed/operator.key, mode 0600
    with Operator("/dev/shm/speed", "speed.key", key) as op:
        op.allow("billing", "gateway")            # -> {"command": "allow", "changed": True, "allow": [...], ...}
        op.status("billing")                      # -> {"name": "billing", "allow": [...], "counters": {...}, ...}

A request is refused before anything is written when the target is not available
(NodeUnavailableError, NodeLeavingError) or does not trust this operator (OperatorNotTrustedError,
whose message names the `speed node ... --operator PUBKEY` to use). Otherwise it is written into
the target's control/ directory by a temporary requester node (`speed-cli-XXXXXXXX`, closed with
the Operator) that allows each target it asked, so that answers can come back; the answer is the
target's result, or
ControlRefusedError (reason and sentence), or ControlTimeoutError (withdrawn: not applied).
"""
from __future__ import annotations

import os
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable

import platformdirs

from .core.control import (DEFAULT_LIFETIME_MS, OperatorKey, administers, arguments_problem,
                           format_operator_key_text, parse_operator_key_text, refusal_of, request_payload,
                           request_text)
from .core.entry import RegistryEntry
from .core.envelope import FLAG_CONTROL, EnvelopeType
from .core.errors import (CalleeGoneError, ConfigError, ControlRefusedError, ControlTimeoutError, NodeClosedError,
                          OperatorNotTrustedError, SpcError)
from .core.keys import Key
from .ext.control import CONTROL_DIR
from .keyfile import load_key, read_private_file, write_private_file
from .transport import TargetDirs, retract

if TYPE_CHECKING:  # pragma: no cover
    from .node import Node

__all__ = ["Operator", "OperatorKey", "default_operator_key_path", "generate_operator_key", "load_operator_key"]


# ============================================================================ key files
def default_operator_key_path() -> str:
    """$SPEED_OPERATOR_KEY, else `operator.key` in the user's configuration directory."""
    return os.environ.get("SPEED_OPERATOR_KEY") or os.path.join(platformdirs.user_config_dir("speed"), "operator.key")


def load_operator_key(path: str | os.PathLike | None = None, *, allow_insecure: bool = False) -> OperatorKey:
    """Read an operator key file (default: default_operator_key_path()); refused unless a regular
    file of mode 0600 (or stricter), never followed through a symlink."""
    path = os.fspath(path) if path is not None else default_operator_key_path()
    data = read_private_file(path, what="operator key file", create_with=f"speed operator keygen {path}",
                             allow_insecure=allow_insecure)
    try:
        return parse_operator_key_text(data)
    except ConfigError as exc:
        raise type(exc)(f"operator key file {path}: {exc}") from None


def generate_operator_key(path: str | os.PathLike | None = None, *, overwrite: bool = False) -> OperatorKey:
    """Create a new operator key file with mode 0600 (default: default_operator_key_path(), whose
    directory is created 0700 when missing); never replaces anything but a regular file."""
    if path is None:
        path = default_operator_key_path()
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    key = OperatorKey.new()
    write_private_file(os.fspath(path), format_operator_key_text(key), overwrite=overwrite, what="operator key file")
    return key


# ============================================================================ the client
class Operator:
    """Sends control requests to nodes that trust `operator_key`, as a temporary requester node
    of the environment at `root` (sealed with `env_key`). Thread-safe; close() (or `with`) ends
    the requester node. `timeout` bounds the wait for each answer."""

    def __init__(self, root: str | os.PathLike, env_key: Key | str | os.PathLike,
                 operator_key: OperatorKey | str | os.PathLike | None = None, *, timeout: float = 10.0,
                 lifetime: float = DEFAULT_LIFETIME_MS / 1000, lock_timeout: float = 10.0):
        self.root = os.fspath(root)
        self.env_key = env_key if isinstance(env_key, Key) else load_key(env_key)
        self.key = operator_key if isinstance(operator_key, OperatorKey) else load_operator_key(operator_key)
        self.timeout, self.lifetime_ms, self.lock_timeout = timeout, int(lifetime * 1000), lock_timeout
        self._lock = threading.Lock()
        self._node: "Node | None" = None
        self._seq = 0
        self._closing = False
        self._in_flight: dict[str, _InFlight] = {}  # request id -> its delivery (withdrawn on close)

    @property
    def fingerprint(self) -> str:
        return self.key.fingerprint

    def __enter__(self) -> "Operator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the requester node. A request still on its way is withdrawn first from the target's
        control/ (it must not be applied after its requester gave up: the request then fails with
        what the withdrawal found), and no request is sent after this."""
        with self._lock:
            self._closing = True
            node, self._node = self._node, None
            flights = list(self._in_flight.values())
        for flight in flights:
            flight.withdraw()
        if node is not None:
            node.close()

    # ------------------------------------------------------------------ commands
    def allow(self, target: str, peer: str, *, timeout: float | None = None) -> dict[str, Any]:
        """Have `target` allow `peer`; returns {"command", "peer", "changed", "published", "allow"}."""
        return self.request(target, "allow", {"peer": peer}, timeout=timeout)

    def revoke(self, target: str, peer: str, *, timeout: float | None = None) -> dict[str, Any]:
        return self.request(target, "revoke", {"peer": peer}, timeout=timeout)

    def stop(self, target: str, *, wait: bool = False, timeout: float | None = None) -> dict[str, Any]:
        """Have `target` stop gracefully; with `wait`, return only once its entry is gone (at most
        `timeout` more seconds, else ControlTimeoutError)."""
        entry = self.check(target)
        result = self.request(target, "stop", {}, timeout=timeout)
        if wait:
            self._wait_gone(target, entry.id, self.timeout if timeout is None else timeout)
        return result

    def status(self, target: str, *, timeout: float | None = None) -> dict[str, Any]:
        """The target's own account: name, id, status, allow, services, groups, operators, counters…"""
        return self.request(target, "status", {}, timeout=timeout)

    def lift(self, target: str, sender: str, *, timeout: float | None = None) -> dict[str, Any]:
        """End `sender`'s quarantine at `target` (the quota extension); returns {"command", "sender",
        "lifted", "scores"} ("scores" false: the target keeps no threat scores, so nothing to lift)."""
        return self.request(target, "lift", {"sender": sender}, timeout=timeout)

    def check(self, target: str):
        """The target's entry if this operator may send it requests now; else the error a request
        would raise, before anything is written."""
        entry = self._requester().live_entry(target)
        if not administers(entry, self.fingerprint):
            detail = ("it accepts no control requests (it was started without --operator)"
                      if "control" not in entry.features else "its entry does not list this operator's fingerprint")
            raise OperatorNotTrustedError(target, self.fingerprint, self.key.public_text, detail)
        return entry

    def request(self, target: str, command: str, arguments: dict[str, Any] | None = None, *,
                timeout: float | None = None) -> dict[str, Any]:
        """Send one signed request and return the target's result."""
        arguments = {} if arguments is None else arguments
        problem = arguments_problem(command, arguments)
        if problem:
            raise ConfigError(problem)
        timeout = self.timeout if timeout is None else timeout
        entry = self.check(target)
        node = self._requester()
        if target not in node.allowed:  # the answer is an ordinary envelope: allow it (published at once)
            node.allow(target)
        request_id = uuid.uuid4().hex
        issued = int(time.time() * 1000)
        text = request_text(target=target, instance=entry.id, request_id=request_id, requester=node.name,
                            command=command, arguments=arguments, issued_ms=issued, expires_ms=issued + self.lifetime_ms)
        body = request_payload(self.key, node.name, target, request_id, text)
        flight = _InFlight(TargetDirs(self.root, target, CONTROL_DIR))
        with self._lock:
            if self._closing:
                raise NodeClosedError("the operator was closed: nothing was sent")
            self._in_flight[request_id] = flight
        try:
            future = node.expect_response(request_id, target, entry.id_bytes, f"control {command}", timeout,
                                          lambda: flight.deliver(lambda: self._deliver(node, flight.dirs, target,
                                                                                       entry, body)))
            try:
                return future.result()
            except SpcError as exc:
                raise self._error(target, exc, flight.dirs, flight.delivered, timeout) from None
            except CalleeGoneError as exc:
                raise self._gone(target, exc, flight.dirs, flight.delivered) from None
            except NodeClosedError:
                if not (flight.closed and flight.delivered):
                    raise
                raise self._closed(target, flight.withdrawn) from None
        finally:
            with self._lock:
                self._in_flight.pop(request_id, None)
            flight.close()

    # ------------------------------------------------------------------ parts
    def _requester(self) -> "Node":
        from .node import Node  # (only when a request is made: key files need no node)

        with self._lock:
            if self._closing:
                raise NodeClosedError("the operator was closed: nothing was sent")
            if self._node is not None and not _holds_its_name(self._node):
                # it lost its lease (ROOT removed and recreated, its name taken): a new one asks
                stale, self._node = self._node, None
                threading.Thread(target=stale.close, name="speed-operator-stale", daemon=True).start()
            if self._node is None:
                node = Node(self.root, self.env_key, f"speed-cli-{uuid.uuid4().hex[:8]}", observe_registry=False,
                            temporary=True, linger_seconds=2.0, lock_timeout=self.lock_timeout,
                            lease_seconds=max(30.0, self.timeout + 10))
                # it takes answers only: it allows each target it asked (so that answers can come
                # back) for as long as it lives, and drops any message
                node.on_message(lambda message: None)
                self._node = node.start()
            return self._node

    def _deliver(self, node: "Node", dirs: TargetDirs, target: str, entry: RegistryEntry, body: bytes) -> str:
        """Seal (SPC_REQUEST with the control flag) and move into the target's control/, as the
        requester node delivers every envelope (withdrawn if the target stopped being that instance)."""
        with self._lock:
            self._seq += 1
            seq = self._seq
        return node.deliver_into(dirs, target, entry, EnvelopeType.SPC_REQUEST, seq, FLAG_CONTROL, body)

    def _error(self, target: str, exc: SpcError, dirs: TargetDirs, delivered: list[str],
               timeout: float) -> Exception:
        refusal = refusal_of(exc.message)
        if refusal is not None:
            reason, detail = refusal
            if reason == "control_untrusted":
                return OperatorNotTrustedError(target, self.fingerprint, self.key.public_text, detail)
            return ControlRefusedError(target, reason, detail)
        if exc.code != "TIMEOUT":
            return ControlRefusedError(target, exc.code, exc.message)
        return _unanswered(target, dirs, delivered, f"did not take the request within {timeout:g} s",
                           f"took the request but did not answer within {timeout:g} s")

    @staticmethod
    def _gone(target: str, exc: CalleeGoneError, dirs: TargetDirs, delivered: list[str]) -> ControlTimeoutError:
        return _unanswered(target, dirs, delivered, f"stopped before it took the request ({exc.detail})",
                           f"took the request but stopped before it answered ({exc.detail})")

    @staticmethod
    def _closed(target: str, withdrawn: bool) -> ControlTimeoutError:
        if withdrawn:
            return ControlTimeoutError(f"the requester closed before {target} answered; the request was withdrawn "
                                       "and not applied", withdrawn=True)
        return ControlTimeoutError(f"the requester closed before {target} answered, and {target} had taken the "
                                   f"request: it may have been applied (ask with `speed status {target}`)",
                                   withdrawn=False)

    def _wait_gone(self, target: str, instance: str, timeout: float) -> None:
        node = self._requester()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            entry = node.current_entry(target)
            if entry is None or entry.id != instance:
                return
            time.sleep(0.02)  # polling a file another process removes: no event to wait on here
        raise ControlTimeoutError(f"node {target} is stopping but still registered after {timeout:g} s "
                                  "(it drains its inbox first)", withdrawn=False)


def _unanswered(target: str, dirs: TargetDirs, delivered: list[str], not_taken: str, taken: str) -> ControlTimeoutError:
    """A request that got no answer: withdrawn if its target had not taken it (whoever unlinks
    first decides), else taken and maybe applied."""
    if delivered and retract(dirs, delivered[0]):
        return ControlTimeoutError(f"node {target} {not_taken}; it was withdrawn and not applied", withdrawn=True)
    return ControlTimeoutError(f"node {target} {taken}; it may have been applied (ask with `speed status {target}`)",
                               withdrawn=False)


def _holds_its_name(node: "Node") -> bool:
    """Whether the requester node still runs and its name's entry is still its own."""
    try:
        entry = node.current_entry(node.name)
    except Exception:  # noqa: BLE001 - an unreadable registry: it could not be answered there either
        return False
    return node.state == "running" and entry is not None and entry.id == node.id


class _InFlight:
    """One request's delivery into the target's control/, which `Operator.close` may withdraw:
    the two never overlap, and nothing is delivered once it was withdrawn."""

    def __init__(self, dirs: TargetDirs):
        self.dirs = dirs
        self.delivered: list[str] = []
        self.closed = False  # by Operator.close: nothing is delivered after it
        self.withdrawn = False  # … and the file delivered was still there: it is not applied
        self._lock = threading.Lock()

    def deliver(self, write: Callable[[], str]) -> None:
        with self._lock:
            if self.closed:
                raise NodeClosedError("the operator was closed before the request was written: nothing was sent")
            self.delivered.append(write())

    def withdraw(self) -> None:
        with self._lock:
            self.closed = True
            if self.delivered:
                self.withdrawn = retract(self.dirs, self.delivered[0])  # whoever unlinks first decides

    def close(self) -> None:
        with self._lock:
            self.dirs.close()
