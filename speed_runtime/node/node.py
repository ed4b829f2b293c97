"""Node: one SPEED node, composed of its parts, and the public API.

    context   node/context.py   what the parts share (NodeContext), the node's state as they ask
                                about it (Lifecycle), all an extension may ask (ExtensionHost)
    receiver  node/receiver.py  the protocol thread: inbox and registry wake-ups, the inbound path
                                (core/inbound.py), dispatch by type
    sender    node/sender.py    links, sealing, delivery, retraction, acknowledgements
    caller    node/calls.py     SPC requests and their responses
    callee    node/calls.py     SPC services: checks, per-service concurrency, deadlines
    keeper    node/keeper.py    the registry entry, the lease and the registry thread
    telemetry node/telemetry.py counters, observers, health reports
    application node/application.py  the application's handlers and receive() queue
    host      node/host.py      the extensions' side of the node (node/hooks.py: the hooks)

Each part is given the context and the parts it uses; none holds the node. Threads: the protocol
thread, the registry thread, a deadline thread, message handlers (lanes on a daemon pool) and
service workers (a daemon pool).
"""
from __future__ import annotations

import os
import threading
import time
import uuid
from concurrent.futures import Future
from typing import Any, Callable, Iterable

from . import hooks as extensions
from .hooks import Outbound
from ..core import payloads
from ..core.entry import RegistryEntry
from ..core.envelope import FLAG_ACK_REQUESTED, EnvelopeType
from ..core.errors import (AccessDeniedError, ConfigError, DeliveryTimeoutError, LeaseLostError, NodeClosedError,
                           PayloadTooLargeError)
from ..core.keys import Key
from ..core.message import Message
from ..core.names import validate_name
from ..core.services import Service, ServicePolicy, as_registered
from ..fsutil import local_facts, prepare_root
from ..journal import JournalWriter
from ..keyfile import load_key
from ..monitor import RegistryMonitor
from ..registry import Registry
from ..transport import TargetDirs, remove_home
from .application import Application
from .calls import Callee, Caller, ServiceTable
from .config import NodeConfig
from .context import NodeContext
from .grants import AccessRegistry
from .host import NodeHost
from .keeper import LeaseKeeper
from .receiver import Receiver
from .sender import Sender
from .telemetry import Telemetry
from .threads import Deadlines, WorkerPool, settle

class Node:
    """One SPEED node. Use as a context manager, or call start() and close().

    `Node(root, key, name, **options)`: the options are the fields of NodeConfig (groups, allow,
    lease_seconds, heartbeat_seconds, trace, max_payload, read_ahead, …), or `config=NodeConfig(...)`.
    """

    def __init__(self, root: str | os.PathLike, key: Key | str | os.PathLike, name: str, *,
                 config: NodeConfig | None = None, **options: Any):
        self.name = validate_name(name)
        self.key = key if isinstance(key, Key) else load_key(key)
        if config is not None and options:
            raise ConfigError("pass either config= or keyword options, not both")
        self.config = cfg = config if config is not None else NodeConfig.from_options(options)
        self.root = prepare_root(os.fspath(root))
        self.id = str(uuid.uuid4())
        self.id_bytes = uuid.UUID(self.id).bytes
        self.groups = cfg.groups
        self.access = AccessRegistry(cfg.allow)
        self.telemetry = Telemetry(self.name)
        self.journal: JournalWriter | None = None
        self._state = "new"
        self._state_lock = threading.Lock()
        self.application = Application(self.telemetry)
        self.services = ServiceTable()
        self._registry = registry = Registry(self.root, lock_timeout=cfg.lock_timeout)
        self.monitor = RegistryMonitor(registry, self.name, self.telemetry.lease_event, local_facts)
        self.context = ctx = NodeContext(self.name, self.id, self.id_bytes, self.root, self.key, cfg, self.access,
                                         self.telemetry, registry, self.monitor, self.application, self.services)
        # the parts, each given what it uses; their threads start with the node
        self.lane_pool = WorkerPool(cfg.lane_workers, f"speed-{self.name}-lane", self.handler_failed)
        self.deadlines = Deadlines(f"speed-{self.name}-deadlines")
        self.keeper = LeaseKeeper(ctx, self)
        self.access.check = self.keeper.check_fits  # a grant the entry cannot carry is refused
        self.sender = Sender(self.root, self.name, self.id_bytes, self.key, cfg.max_payload, self.monitor,
                             local_facts, self.telemetry)
        self.caller = Caller(self.name, self.sender, self.access.__contains__, self.deadlines, self.telemetry,
                             self.deliver_payload)
        self.callee = Callee(self.name, self.services, self.access.__contains__, self.reply, self.deadlines,
                             self.telemetry, cfg.spc_workers, cfg.service_concurrency, cfg.spc_waiting_bytes)
        self.receiver = Receiver(ctx, self, self.keeper, self.sender, self.caller, self.callee, self.lane_pool,
                                 self.reply)
        host = NodeHost(ctx, self, self.sender, self.caller, self.receiver, self.keeper, self.deadlines,
                        self.deliver_payload, self.reply, self.close)
        self.extensions = host.extensions = extensions.load(cfg.features, host)
        self._extensions = tuple(self.extensions.values())
        for part in (self.sender, self.receiver, self.keeper):
            part.attach(self._extensions)

    # ----------------------------------------------------------------- lifecycle
    def __enter__(self) -> "Node":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Node({self.name!r}, id={self.id}, state={self._state})"

    @property
    def state(self) -> str:
        return self._state

    def _journal_problem(self, event: str, detail: str) -> None:
        if event == "journal_recovered":
            self.telemetry.recovered(event, detail)
        else:
            self.telemetry.problem(event, detail, key=event)  # at most one line a minute of each

    def start(self) -> "Node":
        with self._state_lock:
            if self._state != "new":
                raise ConfigError(f"node {self.name} was already started; create a new Node instead")
            self._state = "starting"
        cfg = self.config
        try:
            self.receiver.open(self._registry.dir if cfg.observe_registry else None)
            if cfg.trace:
                self.journal = JournalWriter(self.root, self.name, max_bytes=cfg.journal_max_bytes,
                                             on_problem=self._journal_problem, on_rare=self.keeper.wake)
                self.telemetry.add_observer(self.journal)
            reclaimed = self.keeper.register(time.time())
        except BaseException:
            self._release()
            self._state = "closed"
            raise
        self.telemetry.lease_event("reclaimed" if reclaimed else "registered", self.name)
        for extension in self._extensions:
            extension.start()
        self.deadlines.start()
        if cfg.observe_registry:
            self.monitor.rescan(time.time())
        self._state = "running"
        self.receiver.start()
        self.keeper.start(self.receiver, self.journal.flush if self.journal is not None else None)
        return self

    def close(self) -> None:
        """Leave gracefully (contract §4.2): publish `leaving`, tell the nodes that allow us, handle
        everything already in the inbox, wait (bounded) for handlers and services, linger until
        receivers took what we sent, deregister, stop every thread."""
        with self._state_lock:
            if self._state in ("new", "closed", "closing"):
                self._state = "closed" if self._state == "new" else self._state
                return
            was_lost = self._state == "lost"
            self._state = "closing"
        cfg = self.config
        start = time.monotonic()
        if not was_lost:
            self.keeper.publish("leaving")
            self._say_goodbye()
            self.receiver.drain(start + cfg.drain_seconds)
        stop_by = time.monotonic() + cfg.stop_grace_seconds
        handlers_done = self.lane_pool.wait_idle(stop_by)
        services_done = self.callee.stop(stop_by)
        if not (handlers_done and services_done):
            self.telemetry.problem("services_abandoned", "handlers or services still running after "
                                   f"{cfg.stop_grace_seconds:g} s were left behind; their results are dropped")
        for extension in self._extensions:
            extension.stop()
        if not was_lost:
            self.sender.linger(time.monotonic() + cfg.linger_seconds)
        self.receiver.stop()
        self.keeper.stop()
        self.lane_pool.stop(time.monotonic())
        self.deadlines.stop()
        if not was_lost and self.keeper.deregister():
            self.telemetry.lease_event("deregistered", self.name)
        self.caller.fail_all(NodeClosedError(f"node {self.name} closed before the response arrived"))
        for waiter in self.sender.pending_acks():
            settle(waiter, error=NodeClosedError(f"node {self.name} closed before the acknowledgement arrived"))
        self._release()
        if cfg.temporary:
            remove_home(self.root, self.name)
        self._state = "closed"

    def _say_goodbye(self) -> None:
        for name, entry in self.monitor.entries().items():
            if name != self.name and self.name in entry.allow:
                try:
                    self.sender.send(name, EnvelopeType.EVENT,
                                     payloads.encode_payload(payloads.event(self.name, name, "leave")))
                except Exception:  # best effort: a peer that went away cannot be told
                    pass

    def _release(self) -> None:
        if self.journal is not None:
            self.journal.close()
        self.receiver.close()
        self.sender.close()

    # ----------------------------------------------------------------- access and services
    def allow(self, *names: str) -> None:
        """Grant nodes the right to write to this node's inbox; published at once."""
        if self.access.allow(*names):
            self._publish()

    def revoke(self, *names: str) -> None:
        if self.access.revoke(*names):
            self._publish()

    @property
    def allowed(self) -> list[str]:
        return self.access.names()

    def register(self, service_name: str, service: Service | Callable, *,
                 policy: ServicePolicy | Iterable[str] | None = None, timeout: float | None = None) -> None:
        """Offer a service for SPC; a duplicate name raises ConfigError."""
        if not isinstance(service_name, str) or not service_name:
            raise ConfigError("a service name must be a non-empty string")
        registered = as_registered(service_name, service, policy, timeout)
        self.keeper.check_fits(services=[service_name])  # an entry too large to publish: refused first
        self.services.add(registered)
        self._publish()

    def unregister(self, service_name: str) -> None:
        if self.services.remove(service_name):
            self._publish()

    # ----------------------------------------------------------------- observation
    def add_observer(self, observer: Callable[[Any], None]) -> Callable[[], None]:
        """Call `observer(event)` for every trace event; returns a function that unsubscribes."""
        return self.telemetry.add_observer(observer)

    def on_message(self, handler: Callable[[Message], None]) -> None:
        """Handle MESSAGEs on the sender's lane; without a handler they queue for receive()."""
        self.application.on_message(handler)

    def on_lease_lost(self, handler: Callable[[LeaseLostError], None]) -> None:
        self.application.on_lease_lost(handler)

    def receive(self, timeout: float | None = None) -> Message:
        """Next queued MESSAGE (only used when no on_message handler is set)."""
        return self.application.receive(timeout)

    def counters(self) -> dict[str, Any]:
        return self.telemetry.snapshot()

    def replay_state(self) -> dict[str, Any]:
        replay = self.receiver.replay
        return {"senders": replay.snapshot(), "nonces": replay.remembered_nonces, "windowMs": replay.window_ms}

    def peers(self) -> dict[str, RegistryEntry]:
        return self.monitor.entries()

    def extension(self, name: str) -> Any:
        """The enabled extension `name` (its API), or ConfigError naming how to enable it."""
        found = self.extensions.get(name)
        if found is None:
            raise ConfigError(f"node {self.name} does not have the {name!r} extension enabled; "
                              f"create it with features=[{name!r}] (speed node --feature {name})")
        return found

    def threads(self) -> list[threading.Thread]:
        """The node's long-lived threads (protocol, registry, deadlines); worker threads come and go."""
        return [t for t in (self.receiver.thread, self.keeper.thread, self.deadlines.thread)
                if t is not None and t.ident is not None]

    # ----------------------------------------------------------------- sending
    def check_running(self) -> None:
        if self._state == "lost":
            raise LeaseLostError(f"node {self.name} lost its lease and can no longer send")
        if self._state not in ("running", "closing"):
            raise NodeClosedError(f"node {self.name} is not running; start it first")

    def send(self, target: str, data: Any, *, confirm: bool = False, timeout: float = 10.0,
             reliable: bool = False, block: bool = True, durable: bool = False, ttl: float | None = None) -> Any:
        """Send a MESSAGE (a JSON value, or raw bytes); returns its sequence number. With
        confirm=True, return only after the receiver's handler ran. With reliable=True (the
        `reliable` extension), return a Future at once that resolves when the receiver acknowledged
        it, retransmitting meanwhile (ext/reliable.py). durable=True (extension `durable`): return
        once it is on disk in this node's outbox, its message id; it is delivered when `target` is
        online, until `ttl` seconds have passed. Towards a node that publishes limits (extension
        `quota`) the send waits for room at most `timeout` seconds, or not at all with block=False;
        then it raises QuotaExceededError."""
        self.check_running()
        if reliable + durable > 1 or (reliable and confirm):
            raise ConfigError("choose one of confirm=True, reliable=True and durable=True "
                              "(durable may be combined with confirm)")
        if reliable:
            return self.extension("reliable").send(target, data, timeout)
        if durable:
            return self.extension("durable").send(target, data, ttl=ttl, confirm=confirm, timeout=timeout)
        payload = {"from": self.name, "to": target, "data": data}
        deadline = time.monotonic() + timeout
        wait = timeout if block else 0.0
        if not confirm:
            return self.deliver_payload(Outbound(target, EnvelopeType.MESSAGE, payload, wait=wait))
        entry = self.sender.live_entry(target)
        self.sender.check_grant(target, entry)
        if target not in self.access:  # as a call's and a reliable send's: else sent, handled, and "not acknowledged"
            raise AccessDeniedError(f"{self.name} does not allow {target}, so its acknowledgement could not come "
                                    f"back; grant it on {self.name} (allow {target}) first, or send without "
                                    "confirm", missing=(self.name, target))
        waiter: Future = Future()
        seq = self.deliver_payload(Outbound(
            target, EnvelopeType.MESSAGE, payload, FLAG_ACK_REQUESTED, entry, wait=wait,
            before_deliver=lambda s: self.sender.expect_ack(target, s, entry.id_bytes, waiter)))
        try:
            waiter.result(max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise DeliveryTimeoutError(f"{target} did not acknowledge message {seq} within {timeout:g} s "
                                       "(it may still be handled)") from None
        finally:
            self.sender.forget_ack(target, seq)
        return seq

    def call(self, target: str, service: str, arguments: Any = None, *, timeout: float = 10.0) -> Any:
        """Call `service` on `target` and return its result; errors raise SpcError with .code."""
        self.check_running()
        return self.caller.call(target, service, arguments, timeout)

    def call_async(self, target: str, service: str, arguments: Any = None, *, timeout: float = 10.0) -> Future:
        self.check_running()
        return self.caller.call_async(target, service, arguments, timeout)

    def live_entry(self, target: str) -> RegistryEntry:
        """`target`'s entry as its file holds it now, if it may receive (§5.4 step 1); else
        NodeUnavailableError or NodeLeavingError."""
        return self.sender.live_entry(target)

    def current_entry(self, name: str) -> RegistryEntry | None:
        """`name`'s entry as its file holds it now (one stat; read only when it changed), or None."""
        return self.monitor.current(name)

    def expect_response(self, request_id: str, target: str, target_id: bytes, what: str, timeout: float,
                        send: Callable[[], Any]) -> Future:
        """Wait for the SPC_RESPONSE `request_id` from instance `target_id` of `target` after
        `send()` wrote the request (a request of an extension such as `control`, written by
        `deliver_into`); the Future fails with SpcError TIMEOUT after `timeout` seconds."""
        self.check_running()
        return self.caller.expect(request_id, target, target_id, what, timeout, send)

    def deliver_into(self, dirs: TargetDirs, target: str, entry: RegistryEntry, etype: int, seq: int, flags: int,
                     body: bytes) -> str:
        """Seal `body` for `entry`'s instance and deliver it into `dirs` (a directory of an
        extension's, e.g. the target's `control/`), as every send is delivered: resealed on a name
        clash, withdrawn if the target stopped being that live instance meanwhile. Its file name."""
        return self.sender.deliver_into(dirs, target, entry, etype, seq, flags, body, "the request",
                                        "the request was withdrawn, nothing was applied")

    def lift_quarantine(self, sender: str) -> bool:
        """End the quarantine of `sender` (extension `quota`) now; False if it was not quarantined.
        For the operator (the console, the `control` extension)."""
        quota = self.extensions.get("quota")
        if quota is None:
            raise ConfigError(f"node {self.name} keeps no threat scores: it does not enable the quota extension")
        return quota.lift(sender)

    def reply(self, target: str, etype: EnvelopeType, payload: dict, trace_extra: dict | None = None,
              flags: int = 0) -> str | None:
        """Send an answer (response, ACK, ERROR, probe reply); a failure to deliver is counted, never
        raised. Returns why the payload cannot be sent at all (a value that is not JSON, or too
        large), None otherwise."""
        try:
            self.check_running()
            self.deliver_payload(Outbound(target, etype, payload, flags, trace_extra=trace_extra))
        except (TypeError, ValueError) as exc:
            return f"it is not JSON ({exc})"[:300]
        except PayloadTooLargeError as exc:
            return str(exc)
        except Exception:
            self.telemetry.count("undeliverable")
        return None

    def deliver_payload(self, out: Outbound) -> int:
        """Deliver one payload: in an extension's layout when one takes it (§9), else as v1."""
        for extension in self._extensions:
            seq = extension.outbound(out)
            if seq is not None:
                return seq
        body = payloads.encode_payload(payloads.v1_form(out.payload))
        return self.sender.send(out.target, out.etype, body, flags=out.flags, entry=out.entry,
                                before_deliver=out.before_deliver, trace_extra=out.trace_extra, files=out.files,
                                wait=out.wait)

    # ----------------------------------------------------------------- what the receiver calls
    def may_receive(self) -> bool:
        """Whether the protocol thread may take files now: running (or closing) and our lease is
        known to be ours (fencing by time, docs/PROTOCOL.md reading 3)."""
        if self._state not in ("running", "closing"):
            return False
        if self.keeper.lease_valid():
            return True
        self.keeper.wake()  # renew (or learn of the loss) before touching the inbox
        return False

    def name_taken(self) -> bool:
        """Whether another instance now holds our name (then we have lost our lease)."""
        try:
            current = self._registry.read(self.name)
        except Exception:
            return False
        if current is not None and current.id != self.id:
            self.lose_lease(LeaseLostError(f"node {self.name} lost its lease to pid {current.pid}"))
            return True
        return False

    def lose_lease(self, exc: LeaseLostError) -> None:
        with self._state_lock:
            if self._state != "running":
                return
            self._state = "lost"
        self.telemetry.lease_event("lost", self.name)
        self.caller.fail_all(exc)
        for waiter in self.sender.pending_acks():
            settle(waiter, error=exc)
        self.application.lease_lost(exc)

    def handler_failed(self, exc: BaseException) -> None:
        self.telemetry.count("handlerErrors")

    def _publish(self) -> None:
        if self._state in ("running", "starting", "closing"):
            self.keeper.publish()
