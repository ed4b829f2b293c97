"""The inbound half of a Node: the protocol thread's loop, the checks of every inbox file
(wire contract §5.5), and the hand-off of what passed them. A mixin of Node: it uses the node's
state (inbox descriptor, access registry, replay guard, lanes) and never runs user code itself."""
from __future__ import annotations

import base64
import os
import time
from typing import Any, Callable

from . import payloads
from .envelope import OVERHEAD, EnvelopeType, Header, open_envelope, parse_filename, type_name
from .errors import DeliveryError, EnvelopeError, LeaseLostError
from .message import Message
from .spc import settle
from .trace import EnvelopeTrace
from .transport import NotReady, read_inbox_file, remove_entry

# plain ints for the per-envelope comparisons (an IntEnum attribute lookup costs more)
_MESSAGE, _SPC_REQUEST, _SPC_RESPONSE, _ACK = (int(t) for t in (EnvelopeType.MESSAGE, EnvelopeType.SPC_REQUEST,
                                                                EnvelopeType.SPC_RESPONSE, EnvelopeType.ACK))
_NO_EXTRA: dict[str, Any] = {}


class InboundMixin:
    def _protocol_loop(self) -> None:
        next_rescan = 0.0
        deferred: list[str] = []
        while True:
            wait = max(0.0, next_rescan - time.monotonic())
            names, overflow = self._watch.wait(0.002 if deferred else wait)
            stopping = self._stopping.is_set()
            if overflow:
                self._count("inotifyOverflows")  # events were lost; the rescan below finds the files
            if overflow or stopping or time.monotonic() >= next_rescan:
                names = os.listdir(self._inbox_path)
                next_rescan = time.monotonic() + self.rescan_seconds
            elif deferred:
                names = names + deferred
            if names and self._state in ("running", "closing"):
                if self._lease_valid():
                    try:
                        deferred = self._receive_batch(names)
                    except Exception:  # a defect must not stop reception: count it, rescan soon
                        self._count("protocolErrors")
                        deferred, next_rescan = [], time.monotonic()
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
        if not remove_entry(self._inbox_fd, self._inbox_path, name):
            return  # gone: an earlier look (a rescan before this late inotify event) already judged it
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

    def _answer_probe(self, sender: str) -> None:
        entry = self._monitor.get(sender) or self._monitor.refresh(sender)
        if entry is not None and self.name in entry.allow:
            self._reply(sender, EnvelopeType.HEARTBEAT, payloads.heartbeat(self.name, sender, True))

    def _settle_ack(self, sender: str, seq: int, error: Exception | None) -> None:
        with self._acks_lock:
            waiter = self._acks.pop((sender, seq), None)
        if waiter is not None:
            settle(waiter, seq, error)
