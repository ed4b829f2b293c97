"""Node: the threads, the lifecycle, the registry and the sending half around the pure core.
The inbound half is in inbound.py, Speed Procedure Calls in calls.py (mixins of this class).

Threads of one node: the protocol thread (inbox wake-ups, checks, dispatch), the registry thread
(heartbeats, registry observations, journal flushes, orphan sweeps), watchdog's observer, a
deadline thread, the per-sender lanes and the SPC worker pool.
"""
from __future__ import annotations

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
from .calls import CallsMixin
from .envelope import DEFAULT_MAX_PAYLOAD, FLAG_ACK_REQUESTED, EnvelopeType, Header, envelope_filename, seal
from .errors import (AccessDeniedError, ConfigError, DeliveryError, LeaseLostError, NodeClosedError,
                     NodeUnavailableError, SpcError)
from .fsutil import BOOT_ID, HOSTNAME, boottime, prepare_root
from .inbound import InboundMixin
from .inotify import DirectoryWatch
from .journal import JournalWriter
from .keyfile import Key, load_key
from .lanes import SerialLanes
from .lease import DEFAULT_HEARTBEAT_SECONDS, DEFAULT_LEASE_SECONDS, RegistryEntry, lease_state
from .message import Message
from .monitor import RegistryMonitor
from .names import validate_name
from .registry import Registry, process_gone
from .replay import ReplayGuard
from .spc import Deadlines, PendingCalls, Service, ServiceTable, as_registered, settle
from .trace import EnvelopeTrace, LeaseTrace
from .transport import DirectoryGone, NameTaken, TargetDirs, deliver, prepare_home, sweep_orphans

RUNTIME = "speed_runtime-python/0.1"
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


class Node(InboundMixin, CallsMixin):
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
        except OSError:  # full or failing disk: keep running, the next heartbeat tries again
            self._count("registryWriteErrors")
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
                self._registry.sweep_temporaries(self.orphan_seconds)
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
        """The target's live entry as its registry file holds it now, so a grant published a
        moment ago is honoured (§4.2: "at once") and a restarted target gets its new instance ID."""
        entry = self._monitor.current(target)
        if entry is None:
            raise NodeUnavailableError(target)
        if _stale(entry):
            raise NodeUnavailableError(target, "its lease has expired")
        if process_gone(entry):  # crashed: do not fill an inbox nobody will read until the lease ends
            raise NodeUnavailableError(target, f"its process (pid {entry.pid}) has exited")
        return entry

    # ----------------------------------------------------------------- sending
    def _check_running(self) -> None:
        if self._state == "lost":
            raise LeaseLostError(f"node {self.name} lost its lease and can no longer send")
        if self._state not in ("running", "closing"):
            raise NodeClosedError(f"node {self.name} is not running; start it first")

    def _send(self, target: str, etype: EnvelopeType, payload: dict, flags: int = 0,
              before_deliver: Callable[[int], None] | None = None, trace_extra: dict | None = None,
              entry: RegistryEntry | None = None, body: bytes | None = None) -> int:
        """Deliver one envelope; `entry` is the target's entry when the caller has just judged it,
        `body` the payload already encoded."""
        self._check_running()
        if entry is None:
            entry = self._peer(target)
        if self.name not in entry.allow:
            raise AccessDeniedError(f"node {target} does not allow {self.name}; "
                                    f"grant it on {target} (allow {self.name}) before sending")
        if body is None:
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
            settle(waiter, error=exc)

    def _reply(self, target: str, etype: EnvelopeType, payload: dict, trace_extra: dict | None = None,
               body: bytes | None = None) -> None:
        try:
            self._send(target, etype, payload, trace_extra=trace_extra, body=body)
        except Exception:
            self._count("undeliverable")

    def _handler_failed(self, exc: BaseException) -> None:
        self._count("handlerErrors")
