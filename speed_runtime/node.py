"""Node: the threads and the public methods around the pure core.

Threads of one node: the protocol thread (inbox wake-ups, checks, dispatch), the registry thread
(heartbeats, registry observations, journal flushes, orphan sweeps), watchdog's observer, a
deadline thread, the per-sender lanes and the SPC worker pool.
"""
from __future__ import annotations

import base64
import os
import queue
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from . import payloads
from .access import AccessRegistry, ServicePolicy
from .envelope import (DEFAULT_MAX_PAYLOAD, FLAG_ACK_REQUESTED, OVERHEAD, EnvelopeType, Header, open_envelope,
                       envelope_filename, parse_filename, seal, type_name)
from .errors import (AccessDeniedError, ConfigError, DeliveryError, EnvelopeError, LeaseLostError,
                     NodeClosedError, NodeUnavailableError, SpcError)
from .fsutil import BOOT_ID, HOSTNAME, boottime, prepare_root
from .journal import JournalWriter
from .keyfile import Key, load_key
from .lanes import SerialLanes
from .lease import DEFAULT_HEARTBEAT_SECONDS, DEFAULT_LEASE_SECONDS, RegistryEntry, lease_state
from .message import Message
from .monitor import RegistryMonitor
from .names import validate_name
from .registry import Registry
from .replay import ReplayGuard
from .inotify import DirectoryWatch
from .spc import Deadlines, PendingCall, PendingCalls, Service, ServiceTable, as_registered, precheck
from .trace import EnvelopeTrace, LeaseTrace, SpcTrace
from .transport import (DirectoryGone, NameTaken, NotReady, TargetDirs, deliver, prepare_home, read_inbox_file, remove_entry,
                        sweep_orphans)

RUNTIME = "speed_runtime-python/0.1"
# plain ints for the per-envelope comparisons (an IntEnum attribute lookup costs more)
_MESSAGE, _SPC_REQUEST, _SPC_RESPONSE, _ACK = (int(t) for t in (EnvelopeType.MESSAGE, EnvelopeType.SPC_REQUEST,
                                                                EnvelopeType.SPC_RESPONSE, EnvelopeType.ACK))
_NO_EXTRA: dict[str, Any] = {}
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_RESEAL_ATTEMPTS = 8


def _stale(entry: RegistryEntry) -> bool:
    """Lease judgement of contract §4.1: on CLOCK_BOOTTIME for entries of this boot, so that a step
    of the wall clock neither expires live peers nor revives dead ones."""
    return lease_state(entry, time.time(), BOOT_ID, boottime()) == "stale"


@dataclass
class _Link:
    """Outbound state per target name: the sequence counter and open target directories."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    next_seq: int = 1
    dirs: TargetDirs | None = None
    dirs_for: str | None = None  # target instance id the descriptors were opened for
    last_file: str | None = None  # newest envelope delivered on this link


class Node:
    """One SPEED node. Use as a context manager, or call start() and close()."""

    def __init__(self, root: str | os.PathLike, key: Key | str | os.PathLike, name: str, *,
                 groups: Iterable[str] = (), allow: Iterable[str] = (),
                 lease_seconds: float = DEFAULT_LEASE_SECONDS,
                 heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS,
                 trace: bool = False, journal_max_bytes: int = 64 * 1024 * 1024,
                 max_payload: int = DEFAULT_MAX_PAYLOAD, replay_window: float = 60.0,
                 rescan_seconds: float = 1.0, orphan_seconds: float = 30.0, reap_stale: bool = False,
                 trusted_uids: Iterable[int] | None = None, lane_workers: int = 4, spc_workers: int = 8,
                 linger_seconds: float = 10.0):
        self.name = validate_name(name)
        self.key = key if isinstance(key, Key) else load_key(key)
        if not 0 < heartbeat_seconds < lease_seconds:
            raise ConfigError("the heartbeat interval must be positive and shorter than the lease")
        self.root = prepare_root(os.fspath(root))
        self.groups = tuple(dict.fromkeys(groups))
        self.lease_seconds, self.heartbeat_seconds = float(lease_seconds), float(heartbeat_seconds)
        self.max_payload = max_payload
        self.rescan_seconds, self.orphan_seconds, self.reap_stale = rescan_seconds, orphan_seconds, reap_stale
        self.linger_seconds = linger_seconds
        self.trusted_uids = frozenset(trusted_uids if trusted_uids is not None else {os.geteuid()})
        self.id = str(uuid.uuid4())
        self._id_bytes = uuid.UUID(self.id).bytes
        self._file_prefix = envelope_filename(self.name, self._id_bytes, 0, b"\0" * 4).rsplit(".", 3)[0] + "."
        self._access = AccessRegistry(allow)
        self._services = ServiceTable()
        self._replay = ReplayGuard(int(replay_window * 1000))
        self._registry = Registry(self.root)
        self._monitor = RegistryMonitor(self._registry, self.name, self._observed, self._wake_registry)
        self._pending = PendingCalls()
        self._acks: dict[tuple[str, int], Future] = {}
        self._acks_lock = threading.Lock()
        self._links: dict[str, _Link] = {}
        self._links_lock = threading.Lock()
        self._observers: list[Callable[[Any], None]] = []
        self._handlers: list[Callable[[Message], None]] = []
        self._lease_lost_handlers: list[Callable[[LeaseLostError], None]] = []
        self._received: "queue.Queue[Message]" = queue.Queue()
        self._counters_lock = threading.Lock()
        self._counters: dict[str, Any] = {"sent": 0, "received": 0, "sealed": 0, "rejected": {},
                                          "spcCalls": 0, "spcErrors": 0, "lateResponses": 0,
                                          "handlerErrors": 0, "undeliverable": 0, "gaps": 0}
        self._trace = trace
        self._journal_max_bytes = journal_max_bytes
        self._journal: JournalWriter | None = None
        self._lane_workers, self._spc_workers = lane_workers, spc_workers
        self._state = "new"
        self._state_lock = threading.Lock()
        self._started_at = 0.0
        self._last_renew_bt = 0.0
        self._registry_wake = threading.Event()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

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

    def start(self) -> "Node":
        with self._state_lock:
            if self._state != "new":
                raise ConfigError(f"node {self.name} was already started; create a new Node instead")
            self._state = "starting"
        try:
            inbox, tmp = prepare_home(self.root, self.name)
            self._inbox_path, self._tmp_path = inbox, tmp
            self._inbox_fd = os.open(inbox, _DIR_FLAGS)
            self._watch = DirectoryWatch(inbox)  # before registering: nothing sent to us is missed
            if self._trace:
                self._journal = JournalWriter(self.root, self.name, max_bytes=self._journal_max_bytes)
                self._observers.append(self._journal)
            self._started_at = time.time()
            self._last_renew_bt = boottime()
            reclaimed = self._registry.register(self._entry(self._started_at), self._started_at)
        except BaseException:
            self._release_fds()
            if self._journal is not None:
                self._journal.close()
            self._state = "closed"
            raise
        self._lease_event("reclaimed" if reclaimed else "registered", self.name)
        self._deadlines = Deadlines(f"speed-{self.name}-deadlines")
        self._lanes = SerialLanes(self._lane_workers, f"speed-{self.name}-lane", self._handler_failed)
        self._spc_pool = ThreadPoolExecutor(self._spc_workers, thread_name_prefix=f"speed-{self.name}-spc")
        self._monitor.start()
        self._state = "running"
        for target, label in ((self._protocol_loop, "protocol"), (self._registry_loop, "registry")):
            thread = threading.Thread(target=target, name=f"speed-{self.name}-{label}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def close(self) -> None:
        """Leave gracefully: announce `leaving`, tell the nodes that allow us, deregister, join."""
        with self._state_lock:
            if self._state in ("new", "closed", "closing"):
                self._state = "closed" if self._state == "new" else self._state
                return
            was_lost = self._state == "lost"
            self._state = "closing"
        if not was_lost:
            self._say_goodbye()
            self._linger()
        self._stopping.set()
        self._watch.wake()
        self._registry_wake.set()
        for thread in self._threads:
            thread.join()
        self._lanes.shutdown()
        self._spc_pool.shutdown(wait=True)
        self._deadlines.stop()
        self._monitor.stop()
        if not was_lost and self._registry.deregister(self.name, self.id):
            self._lease_event("deregistered", self.name)
        self._pending.fail_all(NodeClosedError(f"node {self.name} closed before the response arrived"))
        self._fail_acks(NodeClosedError(f"node {self.name} closed before the acknowledgement arrived"))
        if self._journal is not None:
            self._journal.close()
        with self._links_lock:
            for link in self._links.values():
                if link.dirs is not None:
                    link.dirs.close()
        self._release_fds()
        self._state = "closed"

    def _say_goodbye(self) -> None:
        try:
            self._registry.renew(self._entry(time.time(), status="leaving"))
        except LeaseLostError:
            return
        for name, entry in self._monitor.entries().items():
            if name != self.name and self.name in entry.allow and not _stale(entry):
                try:
                    self._send(name, EnvelopeType.EVENT, payloads.event(self.name, name, "leave"))
                except Exception:  # best effort: a peer that went away cannot be told
                    pass

    def _linger(self) -> None:
        """Wait (bounded) until live receivers have taken in what we delivered: they check each
        envelope's source against our registry entry, which is about to disappear (§5.5 step 4).
        One file per link is enough, as every receiver reads a link in sequence order."""
        deadline = time.monotonic() + self.linger_seconds
        with self._links_lock:
            links = [(target, link) for target, link in self._links.items() if link.last_file and link.dirs]
        for target, link in links:
            while time.monotonic() < deadline:
                try:
                    os.stat(link.last_file, dir_fd=link.dirs.inbox_fd, follow_symlinks=False)
                except FileNotFoundError:
                    break
                entry = self._monitor.get(target)
                if entry is None or entry.id != link.dirs_for or _stale(entry):
                    break  # nobody live will read it; it stays for the operator to see
                time.sleep(0.002)

    def _release_fds(self) -> None:
        if getattr(self, "_watch", None) is not None:
            self._watch.close()
            self._watch = None
        if getattr(self, "_inbox_fd", None) is not None:
            os.close(self._inbox_fd)
            self._inbox_fd = None

    # ----------------------------------------------------------------- access and services
    def allow(self, *names: str) -> None:
        """Grant nodes the right to write to this node's inbox; published at once."""
        if any([self._access.allow(n) for n in names]):
            self._publish()

    def revoke(self, *names: str) -> None:
        if any([self._access.revoke(n) for n in names]):
            self._publish()

    @property
    def allowed(self) -> list[str]:
        return self._access.names()

    def register(self, service_name: str, service: Service | Callable, *,
                 policy: ServicePolicy | Iterable[str] | None = None, timeout: float | None = None) -> None:
        """Offer a service for SPC; a duplicate name raises ConfigError."""
        if not isinstance(service_name, str) or not service_name:
            raise ConfigError("a service name must be a non-empty string")
        self._services.add(as_registered(service_name, service, policy, timeout))
        self._publish()

    def unregister(self, service_name: str) -> None:
        if self._services.remove(service_name):
            self._publish()

    @property
    def services(self) -> list[str]:
        return self._services.names()

    # ----------------------------------------------------------------- observation
    def add_observer(self, observer: Callable[[Any], None]) -> Callable[[], None]:
        """Call `observer(event)` for every trace event; returns a function that unsubscribes."""
        self._observers.append(observer)
        return lambda: self._observers.remove(observer) if observer in self._observers else None

    def on_message(self, handler: Callable[[Message], None]) -> None:
        """Handle MESSAGEs on the sender's lane; without a handler they queue for receive()."""
        self._handlers.append(handler)

    def on_lease_lost(self, handler: Callable[[LeaseLostError], None]) -> None:
        self._lease_lost_handlers.append(handler)

    def receive(self, timeout: float | None = None) -> Message:
        """Next queued MESSAGE (only used when no on_message handler is set)."""
        try:
            return self._received.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no message arrived within {timeout} s") from None

    def counters(self) -> dict[str, Any]:
        with self._counters_lock:
            out = dict(self._counters)
            out["rejected"] = dict(out["rejected"])
            return out

    def replay_state(self) -> dict[str, Any]:
        return {"senders": self._replay.snapshot(), "nonces": self._replay.remembered_nonces,
                "windowMs": self._replay.window_ms}

    def peers(self) -> dict[str, RegistryEntry]:
        return self._monitor.entries()

    def _emit(self, event: Any) -> None:
        for observer in list(self._observers):
            try:
                observer(event)
            except Exception:
                self._count("observerErrors")

    def _count(self, key: str, n: int = 1) -> None:
        with self._counters_lock:
            self._counters[key] = self._counters.get(key, 0) + n

    def _lease_event(self, event: str, subject: str) -> None:
        self._emit(LeaseTrace(time.time(), self.name, subject, event))

    def _observed(self, event: str, subject: str) -> None:
        self._lease_event(event, subject)

    # ----------------------------------------------------------------- registry
    def _entry(self, now: float, status: str = "online") -> RegistryEntry:
        return RegistryEntry(
            name=self.name, id=self.id, last_heartbeat=now, pid=os.getpid(), host=HOSTNAME, status=status,
            startup_timestamp=self._started_at, lease_seconds=self.lease_seconds,
            heartbeat_seconds=self.heartbeat_seconds, groups=self.groups, allow=tuple(self._access.names()),
            services=tuple(self._services.names()), runtime=RUNTIME, boot_id=BOOT_ID,
            boot_time_heartbeat=boottime(), extra={"counters": self.counters()},
        )

    def _publish(self) -> None:
        if self._state not in ("running", "starting"):
            return
        bt = boottime()
        late = bt - self._last_renew_bt > self.lease_seconds
        try:
            self._registry.renew(self._entry(time.time()))
        except LeaseLostError as exc:
            self._lose_lease(exc)
            return
        self._last_renew_bt = bt
        if late:
            self._lease_event("renewed_late", self.name)

    def _lease_valid(self) -> bool:
        return boottime() - self._last_renew_bt <= self.lease_seconds

    def _lose_lease(self, exc: LeaseLostError) -> None:
        with self._state_lock:
            if self._state != "running":
                return
            self._state = "lost"
        self._lease_event("lost", self.name)
        self._pending.fail_all(exc)
        self._fail_acks(exc)
        for handler in list(self._lease_lost_handlers):
            try:
                handler(exc)
            except Exception:
                self._count("handlerErrors")

    def _wake_registry(self) -> None:
        self._registry_wake.set()

    def _registry_loop(self) -> None:
        next_beat = time.monotonic() + self.heartbeat_seconds
        next_scan = next_sweep = time.monotonic()
        while not self._stopping.is_set():
            self._registry_wake.wait(0.25)
            self._registry_wake.clear()
            if self._stopping.is_set():
                break
            now = time.monotonic()
            if self._state == "running" and (now >= next_beat or not self._lease_valid()):
                self._publish()
                next_beat = now + self.heartbeat_seconds
            if now >= next_scan:
                self._monitor.rescan()
                next_scan = now + self.rescan_seconds
            else:
                self._monitor.process_hints()
                self._monitor.judge(time.time())
            if self.reap_stale:
                self._reap_dead()
            if now >= next_sweep:
                sweep_orphans(self._tmp_path, self.orphan_seconds)
                next_sweep = now + max(1.0, self.orphan_seconds / 2)
            if self._journal is not None:
                self._journal.flush()

    def _reap_dead(self) -> None:
        now = time.time()
        for name, entry in self._monitor.entries().items():
            if name != self.name and _stale(entry) and self._registry.reap(name, now):
                self._lease_event("reaped", name)
                self._monitor.refresh(name)

    def _peer(self, target: str) -> RegistryEntry:
        """The target's live entry: from the cache, or read afresh when the cache has none."""
        entry = self._monitor.get(target)
        if entry is None or _stale(entry):
            entry = self._monitor.refresh(target)
        if entry is None:
            raise NodeUnavailableError(target)
        if _stale(entry):
            raise NodeUnavailableError(target, "its lease has expired")
        return entry

    def _granting_peer(self, target: str) -> RegistryEntry:
        """The target's live entry for the outbound check: a cached entry that lacks our grant is
        read afresh before we refuse, so a grant published a moment ago is honoured (§4.2: "at once")."""
        entry = self._peer(target)
        if self.name not in entry.allow:
            entry = self._monitor.refresh(target) or entry
        return entry

    # ----------------------------------------------------------------- sending
    def _check_running(self) -> None:
        if self._state == "lost":
            raise LeaseLostError(f"node {self.name} lost its lease and can no longer send")
        if self._state not in ("running", "closing"):
            raise NodeClosedError(f"node {self.name} is not running; start it first")

    def _send(self, target: str, etype: EnvelopeType, payload: dict, flags: int = 0,
              before_deliver: Callable[[int], None] | None = None, trace_extra: dict | None = None) -> int:
        self._check_running()
        entry = self._granting_peer(target)
        if self.name not in entry.allow:
            raise AccessDeniedError(f"node {target} does not allow {self.name}; "
                                    f"grant it on {target} (allow {self.name}) before sending")
        body = payloads.encode_payload(payload)
        if len(body) > self.max_payload:
            raise ConfigError(f"payload of {len(body)} bytes exceeds the limit of {self.max_payload}")
        link = self._links.get(target)
        if link is None:
            with self._links_lock:
                link = self._links.setdefault(target, _Link())
        with link.lock:
            seq = link.next_seq
            if before_deliver is not None:
                before_deliver(seq)
            data, filename = self._seal_and_deliver(link, target, entry, etype, seq, flags, body)
            link.next_seq, link.last_file = seq + 1, filename
        with self._counters_lock:
            self._counters["sent"] += 1
        if self._observers:
            extra = trace_extra or {}
            self._emit(EnvelopeTrace(time.time(), self.name, "out", target, etype.name, seq, len(data), "sent",
                                     envelope=data, file=filename, **extra))
        return seq

    def _seal_and_deliver(self, link: _Link, target: str, entry: RegistryEntry, etype: int, seq: int, flags: int,
                          body: bytes) -> tuple[bytes, str]:
        """Seal and deliver under the link's lock; reseal on a name clash, reopen a removed directory once."""
        reopened = False
        for _ in range(_RESEAL_ATTEMPTS):
            if link.dirs is None or link.dirs_for != entry.id:
                if link.dirs is not None:
                    link.dirs.close()
                link.dirs, link.dirs_for = TargetDirs(self.root, target), entry.id
            nonce = os.urandom(12)
            data = seal(Header(etype, seq, int(time.time() * 1000), len(body), self._id_bytes, entry.id_bytes, flags),
                        body, self.key, nonce)
            with self._counters_lock:
                self._counters["sealed"] += 1
            filename = f"{self._file_prefix}{seq:020d}.{nonce[:4].hex()}.env"
            try:
                deliver(link.dirs, filename, data)
                return data, filename
            except NameTaken:
                continue
            except DirectoryGone:
                if reopened:
                    raise
                reopened, link.dirs = True, None
        raise DeliveryError(f"could not find a free file name in {target}'s inbox")

    def send(self, target: str, data: Any, *, confirm: bool = False, timeout: float = 10.0) -> int:
        """Send a MESSAGE; with confirm=True, return only after the receiver's handler ran."""
        payload = payloads.message(self.name, target, data)
        if not confirm:
            return self._send(target, EnvelopeType.MESSAGE, payload)
        waiter: Future = Future()

        def remember(seq: int) -> None:
            with self._acks_lock:
                self._acks[(target, seq)] = waiter

        seq = self._send(target, EnvelopeType.MESSAGE, payload, FLAG_ACK_REQUESTED, before_deliver=remember)
        try:
            waiter.result(timeout)
        except TimeoutError:
            raise SpcError("TIMEOUT", f"{target} did not acknowledge message {seq} within {timeout} s") from None
        finally:
            with self._acks_lock:
                self._acks.pop((target, seq), None)
        return seq

    def _fail_acks(self, exc: Exception) -> None:
        with self._acks_lock:
            waiters, self._acks = list(self._acks.values()), {}
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(exc)

    def call(self, target: str, service: str, arguments: Any = None, *, timeout: float = 10.0) -> Any:
        """Call `service` on `target` and return its result; errors raise SpcError with .code."""
        return self.call_async(target, service, arguments, timeout=timeout).result()

    def call_async(self, target: str, service: str, arguments: Any = None, *, timeout: float = 10.0) -> Future:
        self._check_running()
        entry = self._granting_peer(target)
        if self.name not in entry.allow:
            raise AccessDeniedError(f"node {target} does not allow {self.name}; "
                                    f"grant it on {target} (allow {self.name})")
        if target not in self._access:
            raise AccessDeniedError(f"{self.name} does not allow {target}, so the response "
                                    f"could not come back; run allow({target!r}) on {self.name} first")
        request_id = uuid.uuid4().hex
        future: Future = Future()
        self._pending.add(request_id, PendingCall(future, target, service, time.perf_counter()))
        timeout_ms = max(1, int(timeout * 1000))
        try:
            self._send(target, EnvelopeType.SPC_REQUEST,
                       payloads.spc_request(self.name, target, request_id, service,
                                            {} if arguments is None else arguments, timeout_ms),
                       trace_extra={"request_id": request_id, "service": service})
        except BaseException:
            self._pending.pop(request_id)
            raise
        self._count("spcCalls")
        self._deadlines.at(time.monotonic() + timeout, lambda: self._expire_call(request_id, timeout))
        return future

    def _expire_call(self, request_id: str, timeout: float) -> None:
        call = self._pending.pop(request_id)
        if call is None:
            return
        self._count("spcErrors")
        self._finish_call(call, request_id, "ERROR", "TIMEOUT")
        call.future.set_exception(SpcError("TIMEOUT", f"{call.target} did not answer {call.service} "
                                           f"within {timeout} s", request_id=request_id))

    def _finish_call(self, call: PendingCall, request_id: str, status: str, code: str | None) -> float:
        latency = (time.perf_counter() - call.started) * 1000
        self._emit(SpcTrace(time.time(), self.name, call.target, call.service, request_id, status, code, latency))
        return latency

    # ----------------------------------------------------------------- receiving
    def _protocol_loop(self) -> None:
        next_rescan = 0.0
        deferred: list[str] = []
        while True:
            wait = max(0.0, next_rescan - time.monotonic())
            names, overflow = self._watch.wait(0.002 if deferred else wait)
            stopping = self._stopping.is_set()
            if overflow or stopping or time.monotonic() >= next_rescan:
                names = os.listdir(self._inbox_path)
                next_rescan = time.monotonic() + self.rescan_seconds
            elif deferred:
                names = names + deferred
            if names and self._state in ("running", "closing"):
                if self._lease_valid():
                    deferred = self._receive_batch(names)
                else:
                    self._wake_registry()  # renew (or learn of the loss) before touching the inbox
            if stopping:
                return

    def _receive_batch(self, names: list[str]) -> list[str]:
        """Receive files in sequence order per sender; returns the names to look at again.
        Application work of one batch goes to each sender's lane as one task."""
        batch = []
        for name in set(names):
            parsed = parse_filename(name)
            if parsed is None:  # no sender to find in the Access Registry (§5.5 step 1)
                self._reject_unread(name, "?", 0, "unauthorized")
            else:
                batch.append((parsed.sender, parsed.id8, parsed.sequence, name))
        batch.sort()
        deferred: list[str] = []
        waiting: set[str] = set()
        lanes: dict[str, list[Callable[[], None]]] = {}
        for sender, _, seq, name in batch:
            if self._state == "lost":
                break
            if sender in waiting or not self._receive_one(name, sender, seq, lanes):
                waiting.add(sender)  # keep this sender's later files behind the one not ready
                deferred.append(name)
        for sender, tasks in lanes.items():
            self._lanes.submit(sender, tasks[0] if len(tasks) == 1 else lambda tasks=tasks: self._run_all(tasks))
        return deferred

    def _run_all(self, tasks: list[Callable[[], None]]) -> None:
        for task in tasks:
            try:
                task()
            except Exception as exc:  # one bad task must not stop the sender's later ones
                self._handler_failed(exc)

    def _reject_unread(self, name: str, sender: str, seq: int, reason: str, size: int = 0,
                       etype: str = "UNKNOWN", data: bytes | None = None) -> None:
        remove_entry(self._inbox_fd, self._inbox_path, name)
        with self._counters_lock:
            rejected = self._counters["rejected"]
            rejected[reason] = rejected.get(reason, 0) + 1
        self._emit(EnvelopeTrace(time.time(), self.name, "in", sender, etype, seq, size, "rejected",
                                 reason=reason, envelope=data, file=name))

    def _receive_one(self, name: str, sender: str, file_seq: int,
                     lanes: dict[str, list[Callable[[], None]]]) -> bool:
        """Judge and dispatch one inbox file; False if it is not ready to be read yet."""
        if sender not in self._access:
            self._reject_unread(name, sender, file_seq, "unauthorized")
            return True
        try:
            data = read_inbox_file(self._inbox_fd, name, OVERHEAD + self.max_payload, self.trusted_uids)
        except FileNotFoundError:
            return True
        except NotReady:
            return False
        except EnvelopeError as exc:
            self._reject_unread(name, sender, file_seq, exc.reason)
            return True
        etype = "UNKNOWN"
        try:
            opened = open_envelope(data, self.key, self.max_payload)
            header = opened.header
            etype = type_name(header.type)
            payload = payloads.decode_payload(opened.payload, header.type)
            if payload["from"] != sender:
                raise EnvelopeError("unknown_sender", "the payload's sender differs from the file name")
            if payload["to"] != self.name or header.target_id != self._id_bytes:
                if self._name_taken():
                    return True  # the file belongs to the new owner of our name: leave it alone
                raise EnvelopeError("wrong_target", "the envelope is for another node or instance")
            self._check_source(sender, header.source_id)
            gap = self._replay.check(header.source_id, sender, header.sequence, opened.nonce,
                                     header.timestamp_ms, int(time.time() * 1000))
        except EnvelopeError as exc:
            self._reject_unread(name, sender, file_seq, exc.reason, len(data), etype, data)
            return True
        remove_entry(self._inbox_fd, self._inbox_path, name)
        self._count("received")
        if gap:
            self._count("gaps")
        self._dispatch(header, payload, sender, data, name, lanes)
        return True

    def _name_taken(self) -> bool:
        try:
            current = self._registry.read(self.name)
        except Exception:
            return False
        if current is not None and current.id != self.id:
            self._lose_lease(LeaseLostError(f"node {self.name} lost its lease to pid {current.pid}"))
            return True
        return False

    def _check_source(self, sender: str, source_id: bytes) -> None:
        entry = self._monitor.get(sender)
        if entry is None or entry.id_bytes != source_id:
            entry = self._monitor.refresh(sender)
        if entry is None or entry.id_bytes != source_id:
            raise EnvelopeError("unknown_sender", f"the source ID is not that of {sender}'s current entry")

    def _dispatch(self, header: Header, payload: dict, sender: str, data: bytes, name: str,
                  lanes: dict[str, list[Callable[[], None]]]) -> None:
        etype = header.type
        extra: dict[str, Any] = _NO_EXTRA
        if etype == _SPC_REQUEST:
            extra = {"request_id": payload["requestId"], "service": payload["service"]}
        elif etype == _SPC_RESPONSE:
            extra = self._resolve_call(payload)
        if self._observers:
            self._emit(EnvelopeTrace(time.time(), self.name, "in", sender, type_name(etype), header.sequence,
                                     len(data), "accepted", envelope=data, file=name, **extra))
        if etype == _MESSAGE:
            lanes.setdefault(sender, []).append(lambda: self._deliver_message(header, payload, sender, len(data)))
        elif etype == _SPC_REQUEST:
            self._serve(payload, sender)
        elif etype == _ACK:
            self._settle_ack(sender, payload["ackSeq"], None)
        elif etype == EnvelopeType.ERROR and isinstance(payload.get("refSeq"), int):
            self._settle_ack(sender, payload["refSeq"],
                             DeliveryError(f"{sender} failed to handle message {payload['refSeq']}: "
                                           f"{payload['errorCode']}: {payload['errorMessage']}"))
        elif etype == EnvelopeType.HEARTBEAT and payload["reply"] is False:
            self._answer_probe(sender)
        elif etype == EnvelopeType.EVENT and payload["event"] == "leave":
            self._monitor.hint(sender)

    def _deliver_message(self, header: Header, payload: dict, sender: str, size: int) -> None:
        data = payload["data"]
        if payload.get("encoding") == "base64" and isinstance(data, str):
            try:
                data = base64.b64decode(data, validate=True)
            except ValueError:
                pass  # not valid base64 after all: hand over the text as sent
        message = Message(sender, data, header.sequence, header.timestamp_ms, size)
        try:
            if self._handlers:
                for handler in list(self._handlers):
                    handler(message)
            else:
                self._received.put(message)
        except Exception as exc:
            self._count("handlerErrors")
            if header.ack_requested:
                self._reply(sender, EnvelopeType.ERROR,
                            {"from": self.name, "to": sender, "errorCode": "EXECUTION_FAILED",
                             "errorMessage": f"message handler failed: {type(exc).__name__}",
                             "refSeq": header.sequence})
            return
        if header.ack_requested:
            self._reply(sender, EnvelopeType.ACK, payloads.ack(self.name, sender, header.sequence))

    def _reply(self, target: str, etype: EnvelopeType, payload: dict, trace_extra: dict | None = None) -> None:
        try:
            self._send(target, etype, payload, trace_extra=trace_extra)
        except Exception:
            self._count("undeliverable")

    def _answer_probe(self, sender: str) -> None:
        entry = self._monitor.get(sender) or self._monitor.refresh(sender)
        if entry is not None and self.name in entry.allow:
            self._reply(sender, EnvelopeType.HEARTBEAT, payloads.heartbeat(self.name, sender, True))

    def _settle_ack(self, sender: str, seq: int, error: Exception | None) -> None:
        with self._acks_lock:
            waiter = self._acks.pop((sender, seq), None)
        if waiter is not None and not waiter.done():
            if error is None:
                waiter.set_result(seq)
            else:
                waiter.set_exception(error)

    def _resolve_call(self, payload: dict) -> dict[str, Any]:
        request_id = payload["requestId"]
        call = self._pending.pop(request_id)
        extra = {"request_id": request_id, "status": payload["status"], "error_code": payload.get("errorCode")}
        if call is None:
            self._count("lateResponses")
            return extra
        status, code = payload["status"], payload.get("errorCode")
        extra["latency_ms"] = self._finish_call(call, request_id, status, code)
        extra["service"] = call.service
        if status == "SUCCESS":
            call.future.set_result(payload["result"])
        else:
            self._count("spcErrors")
            call.future.set_exception(SpcError(code, payload.get("errorMessage", ""), request_id=request_id))
        return extra

    def _serve(self, payload: dict, caller: str) -> None:
        """Check one SPC request on the protocol thread; the service itself runs in the SPC pool."""
        request_id, name, arguments = payload["requestId"], payload["service"], payload["arguments"]
        answered = threading.Lock()

        def respond(result: Any = None, error: SpcError | None = None) -> None:
            if not answered.acquire(blocking=False):
                return  # already answered (result and deadline raced)
            if error is None:
                try:
                    body = payloads.spc_success(self.name, caller, request_id, result)
                    payloads.encode_payload(body)
                except (TypeError, ValueError):
                    error = SpcError("INTERNAL_ERROR", f"service {name!r} returned a value that is not JSON")
            if error is not None:
                body = payloads.spc_failure(self.name, caller, request_id, error.code, error.message)
            self._reply(caller, EnvelopeType.SPC_RESPONSE, body,
                        {"request_id": request_id, "service": name, "status": body["status"],
                         "error_code": body.get("errorCode")})

        service = self._services.get(name)
        try:
            if caller not in self._access:
                raise SpcError("ACCESS_DENIED", f"{self.name} does not allow {caller}")
            precheck(service, name, caller, arguments)
        except SpcError as exc:
            respond(error=exc)
            return
        requested = payload.get("timeoutMs")
        requested = requested / 1000 if isinstance(requested, (int, float)) and requested > 0 else None
        limits = [t for t in (service.timeout, requested) if t]

        def run() -> None:
            try:
                result = service.run(arguments, caller)
            except SpcError as exc:
                respond(error=exc)
            except Exception as exc:
                respond(error=SpcError("EXECUTION_FAILED", f"{name} raised {type(exc).__name__}: {exc}"[:500]))
            else:
                respond(result)

        try:
            self._spc_pool.submit(run)
        except RuntimeError:  # the pool is shutting down with the node
            respond(error=SpcError("INTERNAL_ERROR", f"node {self.name} is shutting down"))
            return
        if limits:
            limit = min(limits)
            self._deadlines.at(time.monotonic() + limit, lambda: respond(
                error=SpcError("TIMEOUT", f"service {name!r} exceeded its time limit of {limit:g} s")))

    def _handler_failed(self, exc: BaseException) -> None:
        self._count("handlerErrors")
