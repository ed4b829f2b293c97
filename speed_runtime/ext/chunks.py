"""The `chunks` extension on a node (docs/PROTOCOL.md "### chunks"): raw bytes without base64, and
messages, SPC arguments and results up to `max_message` (64 MiB) in chained chunks. The layouts
and the reassembly state machine are pure (core/chunks.py, core/reassembly.py); this is the glue.

Sending (`outbound`, towards a node whose entry advertises `chunks`): a value that fits one
envelope of the target's limit goes as v1 (a JSON value) or in the binary layout (raw bytes);
a larger one is cut into chunks sent consecutively on the link (a lock per target), all sealed for
the same target instance: if the target restarts or starts leaving mid-message, the rest is not
sent and the send fails, naming how many chunks were delivered.

Receiving (`on_envelope`): a chunk is removed from the inbox once its piece is kept (its bytes live
in memory, reserved against the reassembly budgets), except the last one, which stays until the
handler starts, like any v1 envelope (reading 24). So a kill -9 loses the message being
reassembled — the next instance refuses what is left of it as `wrong_target` — and a reliable
sender retransmits it whole to the new instance.
"""
from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from ..core import chunks
from ..core.chunks import BYTES_LIKE, VALUE_FIELD
from ..core.envelope import FLAG_BINARY, FLAG_CHUNK, FLAG_RELIABLE, EnvelopeType, type_name
from ..core.errors import NodeLeavingError, NodeUnavailableError, PayloadTooLargeError, SpeedError
from ..core import payloads
from ..core.payloads import encode_payload
from ..core.quota import QuotaExceededError
from ..core.reassembly import COMPLETE, REFUSED, Assembled, Partial, Reassembly, Step
from ..core.records import MessageTrace
from ..node.context import ExtensionHost
from ..node.hooks import Extension, Outbound, speaks

class ChunksExtension(Extension):
    name = "chunks"

    def __init__(self, host: ExtensionHost):
        super().__init__(host)
        cfg = host.config
        self._name, self._telemetry, self._max_payload = host.name, host.telemetry, cfg.max_payload
        self.max_message, self.chunk_size = cfg.max_message, cfg.chunk_size
        self._timeout = cfg.chunk_timeout
        self.reassembly = Reassembly(cfg.max_message, cfg.reassembly_bytes, cfg.reassembly_bytes_per_sender,
                                     int(cfg.chunk_timeout * 1000))
        self._lock = threading.Lock()
        self._links: dict[str, threading.Lock] = {}   # per target: a message's chunks go out consecutively
        self._expiry_due = False
        self._sent = threading.local()   # envelopes of this thread's latest outbound message

    def entry_fields(self) -> dict[str, Any]:
        return {"chunks": {"maxMessage": self.max_message, "maxEnvelopePayload": self._max_payload}}

    def stop(self) -> None:
        with self._lock:
            voided = self.reassembly.void_all()
        for partial in voided:
            self._voided(partial, "chunk_missing", "the node stopped before the message was complete")

    def partials(self) -> list[dict[str, Any]]:
        """The messages being reassembled now (for consoles and tests)."""
        with self._lock:
            return [p.info() for p in self.reassembly.partials.values()]

    def reserved(self) -> dict[str, Any]:
        with self._lock:
            return {"total": self.reassembly.reserved_total, "bySender": dict(self.reassembly.reserved)}

    # ================================================================== sending
    def last_envelopes(self) -> int:
        """How many envelopes this thread's latest message took (1, or its chunks)."""
        return getattr(self._sent, "count", 1)

    def outbound(self, out: Outbound) -> int | None:
        self._sent.count = 1
        field = VALUE_FIELD.get(out.etype)
        if field is None or field not in out.payload:
            return None
        entry = out.entry or self.host.live_entry(out.target)
        if not speaks(entry, "chunks"):
            return None
        out = out._replace(entry=entry)
        limit, most = self._limits(entry)
        value = out.payload[field]
        rest = {k: v for k, v in out.payload.items() if k != field}
        if isinstance(value, BYTES_LIKE):
            body, kind = chunks.encode_body(value)
        else:
            body, kind = encode_payload(value), "json"
            v1 = b"".join((encode_payload(rest)[:-1], b',"', field.encode(), b'":', body, b"}"))
            if len(v1) <= limit:  # small JSON goes as v1 (spliced: the value is encoded once)
                return self._send(out, v1, out.flags)
        if len(body) > most:
            raise PayloadTooLargeError(f"a {'message' if field == 'data' else field} of {len(body)} bytes exceeds "
                                       f"the limit of {most} bytes (this node's max_message and what {out.target} "
                                       "accepts); nothing was sent")
        header = {**rest, "body": kind}  # the type's fields (and a reliable message's id) and what the body is
        head = encode_payload(header)
        if len(head) + 1 + len(body) <= limit:
            return self._send(out, b"".join((head, chunks.SEPARATOR, body)), out.flags | FLAG_BINARY)
        first = {k: v for k, v in header.items() if k != "messageId"}  # chunks carry it as their own field
        return self._send_chunks(out, first, rest.get("messageId") or uuid.uuid4().hex, body, limit)

    def _limits(self, entry) -> tuple[int, int]:
        """(the target's envelope payload limit within ours, the largest message both accept)."""
        return chunks.target_limits(entry.extra.get("chunks"), self._max_payload, self.max_message)

    def _send(self, out: Outbound, body: bytes, flags: int) -> int:
        return self.host.send(out.target, out.etype, body, flags=flags, entry=out.entry,
                                     before_deliver=out.before_deliver, trace_extra=out.trace_extra, files=out.files,
                                     wait=out.wait)

    def _send_chunks(self, out: Outbound, first: dict, message_id: str, body, limit: int) -> int:
        target, entry = out.target, out.entry
        cutter = chunks.Chunker(first, message_id, body, limit, self.chunk_size)
        count, seq, prev, sealed = cutter.count, 0, None, []
        with self._links_lock(target):
            for index in range(count):
                if index:
                    entry = self._same_instance(target, entry, message_id, index, count)
                last = index == count - 1
                try:
                    seq = self.host.send(target, out.etype, cutter.plaintext(index, prev),
                                      flags=out.flags | FLAG_BINARY | FLAG_CHUNK, entry=entry,
                                      before_deliver=out.before_deliver if last else None, files=out.files,
                                      sealed=sealed, wait=out.wait,
                                      trace_extra={**(out.trace_extra or {}), "message_id": message_id,
                                                   "chunk": index, "chunks": count})
                except QuotaExceededError as exc:  # each chunk is admitted on its own: say what went
                    if not index:
                        raise
                    raise QuotaExceededError(str(exc).replace("nothing was sent", f"{index} of the {count} chunks of "
                                             f"message {message_id} were delivered, the rest was not sent"),
                                             target=target, limit=exc.limit) from None
                prev = chunks.chain_value(sealed.pop())  # the next chunk names this envelope by its tag
                self._telemetry.count("chunksSent")
        self._sent.count = count
        if not out.flags & FLAG_RELIABLE:  # the reliable extension records its own sends
            self._trace("out", target, message_id, "sent", out.etype, len(body), count, seq)
        return seq

    def _same_instance(self, target: str, entry, message_id: str, index: int, count: int):
        """Every chunk goes to the instance the first went to; else the rest is not sent."""
        done = f"{index} of the {count} chunks of message {message_id} were delivered, the rest was not sent"
        try:
            now = self.host.live_entry(target)
        except NodeLeavingError:
            raise NodeLeavingError(target, f"it began to leave during the message: {done}") from None
        except NodeUnavailableError as exc:
            raise NodeUnavailableError(target, f"{exc.detail}: {done}") from None
        if now.id != entry.id:
            raise NodeUnavailableError(target, f"it restarted during the message: {done}")
        return now

    def _links_lock(self, target: str) -> threading.Lock:
        lock = self._links.get(target)
        if lock is None:
            with self._lock:
                lock = self._links.setdefault(target, threading.Lock())
        return lock

    # ================================================================== receiving
    def decode(self, plaintext: bytes, etype: int, flags: int) -> tuple[dict, Any, int] | None:
        if not flags & (FLAG_BINARY | FLAG_CHUNK):
            return None
        return chunks.decode_with_cost(plaintext, etype, flags)

    def on_envelope(self, verdict, sender: str, data: bytes, name: str) -> bool:
        header, payload = verdict.header, verdict.payload
        if not header.flags & FLAG_CHUNK:
            return False
        host = self.host
        index, last = payload["chunkIndex"], payload["chunkIndex"] == payload["chunkCount"] - 1
        names = {"message_id": payload["messageId"], "chunk": index, "chunks": payload["chunkCount"]}
        if header.type == EnvelopeType.SPC_RESPONSE and index == 0 \
                and not host.expects_response(sender, header.source_id, payload):
            host.reject(name, sender, header.sequence, "unexpected_response", len(data), verdict.type, data,
                            extra=names)
            return True
        if not last and not host.remove(name):
            self._telemetry.count("withdrawn")  # its sender withdrew it (reading 23): the message stops here
            with self._lock:
                voided = self.reassembly.void(header.source_id)
            if voided is not None:
                self._voided(voided, "chunk_missing", f"chunk {index} was withdrawn by its sender")
            return True
        feed = (header.source_id, sender, header.type, header.flags, payload, verdict.body, chunks.chain_value(data),
                len(data), int(time.monotonic() * 1000))
        with self._lock:
            step = self.reassembly.feed(*feed)
        if step.reason == "reassembly_full" and index == 0 and self._registered(sender, header.source_id):
            with self._lock:  # the sender's earlier instances' messages yield to its registered one's
                superseded = self.reassembly.supersede(sender, header.source_id)
                if superseded:
                    step = self.reassembly.feed(*feed)
            for partial in superseded:
                self._voided(partial, "chunk_missing", f"message {partial.message_id} of an earlier instance of "
                                                       f"{sender} gave its room to message {payload['messageId']} "
                                                       f"of the instance registered now")
        if step.voided is not None:
            self._voided(step.voided, step.voided_reason, step.detail)
            if step.voided_reason == "message_too_large" and step.voided.etype == EnvelopeType.SPC_REQUEST:
                self._refuse_request(step.voided, step.detail)
        if step.out_of_memory:  # this node's problem, not the sender's: the operator hears of it
            self._telemetry.problem("out_of_memory", f"message {payload['messageId']} from {sender} voided: "
                                                         f"{step.detail}")
        if step.kind == REFUSED:
            host.reject(name, sender, header.sequence, step.reason, len(data), verdict.type, data, remove=last,
                            extra=names)
            return True
        self._telemetry.count("chunksReceived")
        host.accepted(verdict, sender, data, name, names)
        if step.kind == COMPLETE:
            self._complete(verdict, sender, data, name, step)
        else:
            self._schedule_expiry()
        return True

    def _registered(self, sender: str, source_id: bytes) -> bool:
        """Whether `source_id` is `sender`'s registered, live instance (its entry read now)."""
        try:
            return self.host.live_entry(sender).id_bytes == source_id
        except SpeedError:
            return False

    def _complete(self, verdict, sender: str, data: bytes, name: str, step: Step) -> None:
        message: Partial = step.message
        self._telemetry.count("messagesAssembled")
        reliable = bool(message.flags & FLAG_RELIABLE) and self.host.extension("reliable") is not None
        if not reliable:  # the reliable extension reports delivered or duplicate itself
            self._trace("in", sender, message.message_id, "delivered", message.etype, message.size, message.count,
                        verdict.header.sequence)
        released = threading.Event()

        def finished(handled: bool, error: BaseException | None) -> None:
            if not released.is_set():
                released.set()
                with self._lock:
                    self.reassembly.release(sender, message.reserved)
        whole = verdict._replace(header=verdict.header._replace(flags=verdict.header.flags & ~(FLAG_BINARY | FLAG_CHUNK)),
                                 payload=step.payload, body=Assembled(message.file_bytes, message.count, message.size),
                                 finished=finished, cost=message.reserved)
        self.host.dispatch(whole, sender, data, name)

    def _schedule_expiry(self) -> None:
        with self._lock:
            due = self.reassembly.next_expiry_ms()
            if due is None or self._expiry_due:
                return
            self._expiry_due = True
        self.host.at(due / 1000 + 0.01, self._expire)

    def _expire(self) -> None:
        with self._lock:
            self._expiry_due = False
            expired = self.reassembly.expire(int(time.monotonic() * 1000))
        for partial in expired:
            self._voided(partial, "chunk_expired", f"no chunk of message {partial.message_id} came for "
                                                   f"{self._timeout:g} s ({partial.next_index} of {partial.count} arrived)")
        self._schedule_expiry()

    def _refuse_request(self, message: Partial, detail: str) -> None:
        """A request that can never be taken (too large, or too costly decoded): the caller hears
        it now, as an ERROR response, rather than at its timeout."""
        rid, service = message.first.get("requestId"), message.first.get("service")
        if isinstance(rid, str):
            self.host.reply(message.sender, EnvelopeType.SPC_RESPONSE, payloads.spc_failure(
                self._name, message.sender, rid, "INVALID_ARGUMENTS",
                f"the request was refused (message_too_large): {detail}"[:500]),
                {"request_id": rid, "service": service, "status": "ERROR", "error_code": "INVALID_ARGUMENTS"})

    # ================================================================== records
    def _voided(self, partial: Partial, reason: str, detail: str) -> None:
        self._telemetry.count("messagesVoided")
        self._trace("in", partial.sender, partial.message_id, "voided", partial.etype, partial.size, partial.count, 0,
                    reason=reason, detail=detail, reliable=bool(partial.flags & FLAG_RELIABLE))

    def _trace(self, direction: str, peer: str, message_id: str, event: str, etype: int, size: int, count: int,
               seq: int, **extra: Any) -> None:
        self._telemetry.emit(MessageTrace(time.time(), self._name, direction, peer, message_id, event,
                                              type_name(etype), size, count, seq=seq, **extra))


EXTENSION = ChunksExtension
