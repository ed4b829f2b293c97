"""The `reliable` extension on a node (docs/PROTOCOL.md "### reliable"): `send(..., reliable=True)`
returns a Future; the receiver acknowledges once its handler ran; the sender retransmits what is
not acknowledged, with backoff, then reports a send-error. The pure part is core/reliable.py.

Sender: a message stays pending (its value kept; at most `reliable_window` messages and
`reliable_pending_bytes` in all, a send waits for room) until an ACK comes from an instance it was sealed for. Each retransmission reads the
target's entry anew, so it is sealed for the instance that is there now — a restarted receiver
gets what its predecessor never acknowledged. A transmission whose last envelope is still in the
inbox of the instance it was sealed for is still queued there: nothing is retransmitted (a copy
would only lengthen the receiver's queue, and under a backlog such copies grow without end). A
retransmission that cannot be written (the target unavailable or leaving) is skipped, not
hurried: the schedule is fixed. When its last wait ends the sender withdraws what is still queued
(whoever unlinks first decides, reading 23) and reports a send-error: `withdrawn` when the message
certainly was not delivered, `unacknowledged` when the receiver took it. Towards a node that does
not advertise `reliable`, one v1 MESSAGE with the ACK flag goes out and is never retransmitted (a
v1 receiver would handle a copy twice).

Receiver: one delivery to the handler per (sender, messageId) within this instance
(core.reliable.Deliveries); a copy that comes while the first is in its handler is dropped (the
ACK follows when the handler ends); one that comes after is dropped and acknowledged again.
Acknowledgements are sent by one thread of their own (ext/reliable_acks.py), not by the
handler's lane.
"""
from __future__ import annotations

import os
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ..core import reliable
from ..core.envelope import FLAG_ACK_REQUESTED, FLAG_RELIABLE, EnvelopeType
from ..core.errors import AccessDeniedError, DeliveryError, DeliveryTimeoutError, EnvelopeError, NodeClosedError
from ..core.chunks import value_size
from ..core.reassembly import Assembled
from ..core.records import MessageTrace
from ..core.reliable import DONE, NEW, Delivered
from ..node.threads import Deadlines, settle
from ..node.context import ExtensionHost
from ..node.hooks import Extension, Outbound, speaks
from .reliable_acks import Acknowledger

_OVERHEAD = 1024  # bytes a pending message costs besides its value


@dataclass
class Pending:
    message_id: str
    target: str
    data: Any
    size: int
    future: Future
    started: float                  # time.monotonic()
    v1: bool = False                # the target speaks no `reliable`: one ACK-requested v1 send
    transmissions: int = 0
    wait: int = 0                   # index of the wait now running (core.reliable.waits)
    chunks: int = 1
    seq: int = 0                    # the latest transmission's (last) sequence number
    files: list[str] = field(default_factory=list)        # …and its envelope files
    sealed_id: bytes = b""                                 # …and the instance it was sealed for
    sealed_for: set[bytes] = field(default_factory=set)   # instances a transmission went to
    still_queued: int = 0           # retransmission times at which the last transmission was still queued
    last_error: str = ""

    def info(self) -> dict[str, Any]:
        return {"messageId": self.message_id, "target": self.target, "size": self.size,
                "transmissions": self.transmissions, "chunks": self.chunks, "v1": self.v1,
                "stillQueued": self.still_queued, "ageSeconds": round(time.monotonic() - self.started, 3),
                "lastError": self.last_error}


class ReliableExtension(Extension):
    name = "reliable"

    def __init__(self, host: ExtensionHost):
        super().__init__(host)
        cfg = host.config
        self._name, self._root, self._telemetry = host.name, host.root, host.telemetry
        self.waits = reliable.waits(cfg.ack_timeout, cfg.max_retransmissions, cfg.retransmission_backoff,
                                    cfg.max_retransmission_interval)
        self.deliveries = reliable.Deliveries(cfg.reliable_remember)
        self._budget, self._window = cfg.reliable_pending_bytes, cfg.reliable_window
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._pending: dict[str, Pending] = {}
        self._pending_bytes = 0
        self._timers: Deadlines | None = None
        self._acks = Acknowledger(host.name, host.reply)

    def start(self) -> None:
        self._timers = Deadlines(f"speed-{self._name}-reliable").start()
        self._acks.start()

    def stop(self) -> None:
        self._acks.stop()  # the handlers have ended (Node.close): what they acknowledged goes out first
        if self._timers is not None:
            self._timers.stop()
        with self._lock:
            left, self._pending, self._pending_bytes = list(self._pending.values()), {}, 0
            self._room.notify_all()
        for p in left:  # what is still queued is withdrawn: a failed send is not delivered later
            fate = "it was withdrawn" if self._withdraw(p) else "the receiver had taken it"
            self._give_up(p, "closed", f"node {self._name} closed before {p.target} acknowledged message "
                                       f"{p.message_id}; {fate}", NodeClosedError)

    def pending(self) -> list[dict[str, Any]]:
        """The reliable messages sent and not yet acknowledged (for consoles and tests)."""
        with self._lock:
            return [p.info() for p in self._pending.values()]

    # ================================================================== sending
    def send(self, target: str, data: Any, timeout: float = 10.0) -> Future:
        """Send `data` reliably; the Future resolves to core.reliable.Delivered, or raises
        DeliveryError (send-error). Refusals that need no retransmission to know (the target
        missing, a grant missing, too large) raise at once, nothing written."""
        host, me = self.host, self._name
        entry = host.live_entry(target)
        host.check_grant(target, entry)
        if not host.allows(target):
            raise AccessDeniedError(f"{me} does not allow {target}, so its acknowledgements could not come "
                                    f"back; grant it on {me} (allow {target}) first", missing=(me, target))
        size = value_size(data)
        p = Pending(uuid.uuid4().hex, target, data, size, Future(), time.monotonic())
        p.future.message_id = p.message_id  # type: ignore[attr-defined]  # the handle names its message
        deadline = time.monotonic() + timeout
        self._reserve(p, timeout)
        try:  # the first transmission may wait for room (quota) as a plain send does; retransmissions never
            self._transmit(p, entry, wait=max(0.0, deadline - time.monotonic()))
        except BaseException:
            self._drop(p.message_id)
            raise
        self._telemetry.count("reliableSent")
        return p.future

    def _reserve(self, p: Pending, timeout: float) -> None:
        need, deadline = p.size + _OVERHEAD, time.monotonic() + timeout
        with self._room:
            while self._pending and (self._pending_bytes + need > self._budget or len(self._pending) >= self._window):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DeliveryTimeoutError(f"{len(self._pending)} reliable messages ({self._pending_bytes} bytes) "
                                               f"wait for acknowledgements (reliable_window {self._window}, "
                                               f"reliable_pending_bytes {self._budget}); no room within "
                                               f"{timeout:g} s, nothing was sent")
                self._room.wait(left)
            self._pending_bytes += need
            self._pending[p.message_id] = p

    def _drop(self, message_id: str) -> Pending | None:
        with self._room:
            p = self._pending.pop(message_id, None)
            if p is not None:
                self._pending_bytes -= p.size + _OVERHEAD
                self._room.notify_all()
            return p

    def _transmit(self, p: Pending, entry=None, wait: float = 0.0) -> None:
        """One transmission, sealed for the target's instance of now (`entry` when the caller has
        just judged it), waiting at most `wait` for room in its inbox (quota); raises when nothing
        was written."""
        host = self.host
        host.check_running()  # a node that closed or lost its lease sends nothing more
        entry = entry or host.live_entry(p.target)
        with self._lock:
            p.sealed_for.add(entry.id_bytes)
            p.transmissions += 1
        payload, files = {"from": self._name, "to": p.target, "data": p.data}, []
        try:
            if speaks(entry, "reliable"):
                seq = host.deliver_payload(Outbound(p.target, EnvelopeType.MESSAGE, {**payload, "messageId": p.message_id},
                                                    FLAG_RELIABLE, entry, {"message_id": p.message_id}, files=files,
                                                    wait=wait))
            else:
                p.v1 = True
                waiter: Future = Future()
                seq = host.deliver_payload(Outbound(
                    p.target, EnvelopeType.MESSAGE, payload, FLAG_ACK_REQUESTED, entry, files=files, wait=wait,
                    before_deliver=lambda s: host.expect_ack(p.target, s, entry.id_bytes, waiter)))
                waiter.add_done_callback(lambda w: self._v1_answered(p, w))
        except BaseException:
            with self._lock:
                p.transmissions -= 1
            raise
        chunks = host.extension("chunks")
        p.chunks, p.seq, p.files, p.sealed_id = (chunks.last_envelopes() if chunks is not None else 1), seq, files, \
            entry.id_bytes
        self._trace(p, "sent" if p.transmissions == 1 else "retransmitted", seq)
        wait = sum(self.waits) if p.v1 else self.waits[p.wait]
        when, round_ = time.monotonic() + wait, p.wait
        self._timers.at(when, lambda: self._due(p.message_id, round_))

    def _due(self, message_id: str, round_: int) -> None:
        """A wait ended without an acknowledgement: retransmit, or give up after the last."""
        with self._lock:
            p = self._pending.get(message_id)
            if p is None or p.wait != round_:
                return
            last = p.v1 or p.wait >= len(self.waits) - 1
            if not last:
                p.wait += 1
        if last:
            withdrawn = self._withdraw(p)
            if p.v1:
                self.host.forget_ack(p.target, p.seq)
            if self._drop(message_id) is not None:
                why = (f"{p.target} did not acknowledge message {message_id} after {p.transmissions} transmissions "
                       f"in {time.monotonic() - p.started:.1f} s: ")
                why += ("it never took it from its inbox; the message was withdrawn and was not delivered" if withdrawn
                        else "it took the message, which may or may not have been handled")
                self._give_up(p, "withdrawn" if withdrawn else "unacknowledged",
                              why + (f" (last error: {p.last_error})" if p.last_error else ""), DeliveryTimeoutError)
            return
        if self._queued(p):  # the receiver has not reached it yet: a copy would only lengthen its queue
            with self._lock:
                p.still_queued += 1
            round_ = p.wait
            self._timers.at(time.monotonic() + self.waits[round_], lambda: self._due(message_id, round_))
            return
        try:
            self._transmit(p)
            self._telemetry.count("retransmissions")
        except Exception as exc:  # nothing written this time (unavailable, leaving, a full disk…): the schedule goes on
            p.last_error = str(exc)
            round_ = p.wait
            self._timers.at(time.monotonic() + self.waits[round_], lambda: self._due(message_id, round_))

    def _inbox(self, target: str) -> int:
        return os.open(os.path.join(self._root, target, "inbox"), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)

    def _queued(self, p: Pending) -> bool:
        """Whether the last transmission still waits in the inbox of the live instance it was sealed
        for (one stat of its last envelope)."""
        if not p.files:
            return False
        try:
            if self.host.live_entry(p.target).id_bytes != p.sealed_id:
                return False
            fd = self._inbox(p.target)
        except Exception:  # unavailable, leaving, restarted, no inbox: not queued there
            return False
        try:
            os.stat(p.files[-1], dir_fd=fd, follow_symlinks=False)
            return True
        except OSError:
            return False
        finally:
            os.close(fd)

    def _withdraw(self, p: Pending) -> bool:
        """Unlink this message's envelopes still in the target's inbox; True when its last one was
        there (then the receiver never took the message: it is certainly not delivered)."""
        try:
            fd = self._inbox(p.target)
        except OSError:
            return False
        withdrawn = []
        try:
            for name in reversed(p.files):
                try:
                    os.unlink(name, dir_fd=fd)
                    withdrawn.append(name)
                except OSError:
                    pass
        finally:
            os.close(fd)
        if withdrawn:
            self._telemetry.count("retracted", len(withdrawn))
        return bool(p.files) and p.files[-1] in withdrawn

    def _v1_answered(self, p: Pending, waiter: Future) -> None:
        if self._drop(p.message_id) is None:
            return
        error = waiter.exception()
        if error is None:
            self._acknowledged(p, "handled", None, waiter.result())
        elif isinstance(error, DeliveryError):  # the v1 receiver answered ERROR: its handler failed
            self._give_up(p, "handler_failed", str(error), DeliveryError)
        else:
            self._give_up(p, "closed", str(error), type(error))

    def _acknowledged(self, p: Pending, status: str, error: str | None, seq: int) -> None:
        self._telemetry.count("acknowledged")
        self._trace(p, "received", seq, reason=None if status == "handled" else "handler_failed", detail=error or "")
        if status == "handled":
            settle(p.future, Delivered(p.message_id, p.transmissions, seq))
        else:
            settle(p.future, error=DeliveryError(f"{p.target} received message {p.message_id} but its handler "
                                                 f"failed: {error}"))

    def _give_up(self, p: Pending, reason: str, detail: str, error: type[Exception]) -> None:
        self._telemetry.count("sendErrors")
        self._trace(p, "send-error", 0, reason=reason, detail=detail)
        settle(p.future, error=error(detail))

    # ================================================================== receiving
    def on_envelope(self, verdict, sender: str, data: bytes, name: str) -> bool:
        header = verdict.header
        if not header.flags & FLAG_RELIABLE or header.type not in (EnvelopeType.MESSAGE, EnvelopeType.ACK):
            return False
        host = self.host
        try:
            if header.type == EnvelopeType.ACK:
                acks = reliable.read_acks(verdict.payload)
            else:
                mid = reliable.message_id(verdict.payload)
        except EnvelopeError as exc:
            host.reject(name, sender, header.sequence, exc.reason, len(data), verdict.type, data)
            if verdict.finished is not None:
                verdict.finished(False, None)
            return True
        if header.type == EnvelopeType.ACK:
            self._on_ack(verdict, sender, data, name, acks)
        else:
            self._on_message(verdict, sender, data, name, mid)
        return True

    def _on_ack(self, verdict, sender: str, data: bytes, name: str, acks: list) -> None:
        """Settle each acknowledged message that is pending and went to this instance (§5.5 step 6:
        an ACK none of whose acknowledgements matches is unexpected_response)."""
        host, settled = self.host, []
        for mid, status, error, seq in acks:
            with self._lock:
                p = self._pending.get(mid)
                ours = p is not None and not p.v1 and p.target == sender and verdict.header.source_id in p.sealed_for
            if ours and self._drop(mid) is not None:
                settled.append((p, status, error, seq))
        if not settled:
            host.reject(name, sender, verdict.header.sequence, "unexpected_response", len(data), verdict.type, data)
            return
        if host.remove(name):
            host.accepted(verdict, sender, data, name, {"message_id": acks[0][0]})
        for p, status, error, seq in settled:
            self._acknowledged(p, status, error, seq)

    def _on_message(self, verdict, sender: str, data: bytes, name: str, mid: str) -> None:
        host, seq = self.host, verdict.header.sequence
        assembled = verdict.body if isinstance(verdict.body, Assembled) else None
        with self._lock:
            state, status, error = self.deliveries.begin(sender, mid)
        if state == NEW:
            host.dispatch_by_type(verdict._replace(finished=self._after_handler(verdict, sender, mid, assembled)),
                             sender, data, name)
            return
        # a copy of a message this instance has delivered (or is delivering): not again
        taken = host.remove(name)
        if taken and assembled is None:
            host.accepted(verdict, sender, data, name, {"message_id": mid})
        if verdict.finished is not None:
            verdict.finished(False, None)
        if not taken:
            return
        self._telemetry.count("duplicates")
        self._trace_in(sender, mid, "duplicate", verdict, assembled)
        if state == DONE:  # its ACK may have been lost: say it again
            self._acks.add(sender, seq, mid, status, error)

    def _after_handler(self, verdict, sender: str, mid: str, assembled: Assembled | None):
        before = verdict.finished

        def finished(handled: bool, exc: BaseException | None) -> None:
            if before is not None:
                before(handled, exc)
            if not handled:  # never reached the handler: a retransmission must be delivered
                with self._lock:
                    self.deliveries.forget(sender, mid)
                return
            status, error = ("handled", None) if exc is None else ("failed", f"{type(exc).__name__}: {exc}"[:300])
            with self._lock:
                self.deliveries.finish(sender, mid, status, error)
            self._trace_in(sender, mid, "delivered", verdict, assembled, reason=None if exc is None else "handler_failed")
            self._acks.add(sender, verdict.header.sequence, mid, status, error)
        return finished

    # ================================================================== records
    def _trace(self, p: Pending, event: str, seq: int, reason: str | None = None, detail: str = "") -> None:
        self._telemetry.emit(MessageTrace(time.time(), self._name, "out", p.target, p.message_id, event,
                                              "MESSAGE", p.size, p.chunks, p.transmissions, not p.v1, seq, reason,
                                              detail))

    def _trace_in(self, sender: str, mid: str, event: str, verdict, assembled: Assembled | None,
                  reason: str | None = None) -> None:
        size = assembled.message_size if assembled else value_size(verdict.payload.get("data"))
        self._telemetry.emit(MessageTrace(time.time(), self._name, "in", sender, mid, event, "MESSAGE",
                                              size, assembled.chunks if assembled else 1, 0, True,
                                              verdict.header.sequence, reason))


EXTENSION = ReliableExtension
