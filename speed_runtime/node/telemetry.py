"""What a node tells about itself: counters (published in its registry entry, always with the same
keys), trace events to observers (the journal, the console), and log lines for problems.

Problems go to the `speed_runtime` logger (which has a NullHandler: a library never writes to a
terminal on its own; the `speed` command attaches a stderr handler) and to observers as
HealthTrace events, so a journal and a console show them too.
"""
from __future__ import annotations

import errno
import logging
import resource
import threading
import time
from typing import Any, Callable

from ..core.records import HealthTrace, LeaseTrace
from ..fsutil import why_not_written

log = logging.getLogger("speed_runtime")
log.addHandler(logging.NullHandler())  # a library never prints on its own (logging's last resort would)

COUNTERS = ("sent", "received", "sealed", "spcCalls", "spcErrors", "lateResponses", "handlerErrors",
            "undeliverable", "gaps", "retracted", "withdrawn", "observerErrors", "protocolErrors",
            "inotifyOverflows", "registryWriteErrors", "servicesTimedOutUnstarted", "inboxRecoveries",
            "controlApplied", "controlRejected",
            # chunks: envelopes of chunked messages, whole messages delivered and voided
            "chunksSent", "chunksReceived", "messagesAssembled", "messagesVoided",
            # reliable: messages sent, retransmissions, acknowledgements, give-ups, duplicates suppressed
            "reliableSent", "retransmissions", "acknowledged", "sendErrors", "duplicates",
            # quota: sends that waited for the target's budget, refusals, senders quarantined
            "quotaWaits", "quotaRefusals", "quarantines",
            # the durable extension's (0 on nodes without it)
            "durableStored", "durableDelivered", "durableHandled", "durableDuplicates", "durableReceipts",
            "durableSendErrors", "durableStoreErrors", "fsyncs")


def failure_text(exc: BaseException) -> str:
    """An unexpected failure of one of the node's threads, as the operator reads it: a system
    error's text and file (with the limit to raise when it is the open-files or the file-size
    one), else the exception's type and text."""
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror + (f" ({exc.filename})" if exc.filename else "")
        if exc.errno == errno.EMFILE:
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            may = f" may open {soft}" if soft != resource.RLIM_INFINITY else " reached its limit of open files"
            text += f": this process{may} (raise it with `ulimit -n`)"
        elif exc.errno == errno.EFBIG:
            text += f" ({why_not_written(exc)})"
        return text
    return f"{type(exc).__name__}: {exc}"


class Telemetry:
    """Counters and observers of one node. Thread-safe."""

    def __init__(self, node: str):
        self.node = node
        self._lock = threading.Lock()
        self._counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self._rejected: dict[str, int] = {}
        # replaced, never changed in place: emit (once per envelope) iterates it without a copy
        self.observers: tuple[Callable[[Any], None], ...] = ()
        self._last_problem: dict[str, float] = {}
        self.sections: dict[str, Callable[[], Any]] = {}  # extensions' parts of the counters, by key

    def count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counters[key] += n

    def rejected(self, reason: str) -> None:
        with self._lock:
            self._rejected[reason] = self._rejected.get(reason, 0) + 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = dict(self._counters)
            out["rejected"] = dict(self._rejected)
        for key, section in list(self.sections.items()):  # outside the lock: sections take their own
            out[key] = section()
        return out

    def add_observer(self, observer: Callable[[Any], None]) -> Callable[[], None]:
        with self._lock:
            self.observers = (*self.observers, observer)
        return lambda: self._remove_observer(observer)

    def _remove_observer(self, observer: Callable[[Any], None]) -> None:
        with self._lock:
            if observer in self.observers:
                kept = list(self.observers)
                kept.remove(observer)
                self.observers = tuple(kept)

    def emit(self, event: Any) -> None:
        for observer in self.observers:
            try:
                observer(event)
            except Exception:
                self.count("observerErrors")

    def lease_event(self, event: str, subject: str) -> None:
        self.emit(LeaseTrace(time.time(), self.node, subject, event))

    def problem(self, event: str, detail: str, *, every: float = 60.0, key: str | None = None) -> None:
        """Report a problem of this node: a log line and a health event, at most once per `every`
        seconds for the same event and detail (a failing inbox must not flood the journal), or for
        the same event and `key` when details differ every time (an exception's text)."""
        now = time.monotonic()
        key = f"{event}:{detail if key is None else key}"
        with self._lock:
            if now - self._last_problem.get(key, -every) < every:
                return
            self._last_problem[key] = now
            if len(self._last_problem) > 256:
                self._last_problem.clear()
        log.warning("node %s: %s", self.node, detail)
        self.emit(HealthTrace(time.time(), self.node, event, detail))

    def recovered(self, event: str, detail: str) -> None:
        with self._lock:
            self._last_problem.clear()
        log.warning("node %s: %s", self.node, detail)
        self.emit(HealthTrace(time.time(), self.node, event, detail))
