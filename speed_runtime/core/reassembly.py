"""The receiver's reassembly of chunked messages (docs/PROTOCOL.md "### chunks", state machine).
Pure: time is an argument, memory is counted, nothing is read or written.

Per sender instance at most one message is in progress: the chunks of a message are consecutive
among that instance's chunk envelopes (other envelopes may come between them). Memory is reserved
against the sender's budget and the node's total for what the message costs once decoded, so the
budgets bound resident memory whatever senders claim or send (docs/PROTOCOL.md "### chunks",
Memory): the first chunk reserves the declared size (the body is assembled in one buffer that
grows with what arrived, up to that size, and is handed over without a second copy), or for a
JSON body the least its decoding can take; each piece of a JSON body adds what its structure may
cost (payloads.json_structure), and the whole body its width. A reservation that can never fit the budgets voids the message (`message_too_large`), one
that does not fit now voids it too (`reassembly_full`): a reliable sender retransmits it later.
The value is decoded only once its cost is reserved, and a MemoryError while decoding is this
node's, never the sender's (`reassembly_full`, not `bad_payload`). A reservation is released when
the message is voided or expires, or — for a completed message — when the caller says its
handling ended (`release`).

Every chunk is judged against the message in progress: the next index, the same type, flags,
count and size, and `chunkPrev` equal to the chain value (the authentication tag) of the envelope
that carried the chunk before. Any mismatch voids
the message (its pieces are dropped, its reservation released) and the chunks of that message
that still arrive are refused with the same reason, so one problem gives one reason.
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any, Hashable, NamedTuple

from .chunks import VALUE_FIELD, Piece, decode_json
from .errors import EnvelopeError
from .payloads import json_cost, json_structure, json_width

STORED, COMPLETE, REFUSED = "stored", "complete", "refused"
MAX_REMEMBERED_VOIDS = 4096


class Assembled(NamedTuple):
    """The `body` of a verdict that stands for a whole message assembled from `chunks` envelopes
    of `size` bytes in all (each already recorded as accepted); its body has `message_size` bytes."""

    size: int
    chunks: int
    message_size: int = 0


@dataclass
class Partial:
    message_id: str
    sender: str
    etype: int
    flags: int
    count: int
    size: int
    first: dict[str, Any]          # the first chunk's header: the type's fields
    started_ms: int
    last_ms: int
    next_index: int = 1
    prev: str = ""
    received: int = 0
    file_bytes: int = 0            # envelope files of its chunks, for the records
    buffer: io.BytesIO | None = field(default_factory=io.BytesIO)  # the body so far (_append)
    capacity: int = 0              # bytes the buffer has room for (at most `size`)
    json: bool = False             # the body is JSON text (first chunk's "body"), decoded when whole
    structure: tuple[int, int] = (0, 0)  # payloads.json_structure of the pieces so far
    reserved: int = 0              # bytes reserved for it against the budgets

    def info(self) -> dict[str, Any]:
        return {"messageId": self.message_id, "sender": self.sender, "type": self.etype, "chunks": self.count,
                "received": self.next_index, "size": self.size, "bytes": self.received, "reserved": self.reserved,
                "startedMs": self.started_ms, "lastMs": self.last_ms}

    def cost(self, width: int = 1) -> int:
        """What it reserves: its body, or what decoding the JSON body (as known so far) takes."""
        return json_cost(self.size, self.structure, width) if self.json else self.size


class Step(NamedTuple):
    """What one chunk did: `kind` STORED, COMPLETE (with `payload`: the first chunk's fields and the
    value) or REFUSED (with `reason`); `voided` is a message this chunk voided (with
    `voided_reason`), which may be the chunk's own message or an earlier one it interrupted."""

    kind: str
    message: Partial | None = None
    payload: dict[str, Any] | None = None
    reason: str | None = None
    detail: str = ""
    voided: Partial | None = None
    voided_reason: str | None = None
    out_of_memory: bool = False   # refused because this node could not allocate: its own problem


class Reassembly:
    def __init__(self, max_message: int, budget_total: int, budget_per_sender: int, timeout_ms: int):
        self.max_message, self.timeout_ms = max_message, timeout_ms
        self.budget_total, self.budget_per_sender = budget_total, budget_per_sender
        self.partials: dict[Hashable, Partial] = {}
        self._void: dict[Hashable, tuple[str, str]] = {}   # instance -> (message id, reason) refused lately
        self.reserved: dict[str, int] = {}
        self.reserved_total = 0

    # ------------------------------------------------------------------ one chunk
    def feed(self, key: Hashable, sender: str, etype: int, flags: int, header: dict[str, Any], piece: Piece,
             chain: str, file_size: int, now_ms: int) -> Step:
        """Judge one accepted chunk of `sender`'s instance `key` (its header checked by
        chunks.check_chunk_header); `chain` is its envelope's chain value (chunks.chain_value)."""
        mid, index = header["messageId"], header["chunkIndex"]
        partial = self.partials.get(key)
        if index == 0:
            self._void.pop(key, None)
            voided = self._drop(key) if partial is not None else None
            step = self._start(key, sender, etype, flags, header, piece, chain, file_size, now_ms)
            if voided is not None:
                return step._replace(voided=voided, voided_reason="chunk_missing",
                                     detail=step.detail or f"message {voided.message_id} was interrupted by "
                                                           f"message {mid} after {voided.next_index} of "
                                                           f"{voided.count} chunks")
            return step
        if partial is None or partial.message_id != mid:
            earlier = self._void.get(key)
            if partial is None and earlier is not None and earlier[0] == mid:
                return Step(REFUSED, reason=earlier[1], detail=f"message {mid} was already voided")
            voided = self._void_partial(key, "chunk_missing") if partial is not None else None
            self._mark(key, mid, "chunk_missing")
            return Step(REFUSED, reason="chunk_missing", voided=voided, voided_reason="chunk_missing" if voided else None,
                        detail=f"chunk {index} of message {mid} arrived without the chunks before it")
        if etype != partial.etype or flags != partial.flags or header["chunkCount"] != partial.count \
                or header["messageSize"] != partial.size:
            return self._refuse(key, "chunk_invalid", f"chunk {index} of message {mid} differs from its first "
                                                      "chunk (type, flags, count or size)")
        if index != partial.next_index:
            return self._refuse(key, "chunk_missing", f"chunk {index} of message {mid} arrived where chunk "
                                                      f"{partial.next_index} was expected")
        if header["chunkPrev"] != partial.prev:
            return self._refuse(key, "chunk_chain", f"chunk {index} of message {mid} does not follow chunk "
                                                    f"{index - 1} (chunkPrev differs)")
        return self._add(key, partial, piece, chain, file_size, now_ms)

    def _start(self, key, sender, etype, flags, header, piece, chain, file_size, now_ms) -> Step:
        mid, size, count = header["messageId"], header["messageSize"], header["chunkCount"]
        first = {k: v for k, v in header.items() if k not in ("messageId", "chunkIndex", "chunkCount", "messageSize")}
        partial = Partial(mid, sender, etype, flags, count, size, first, now_ms, now_ms, next_index=0,
                          json=first.get("body") == "json")
        if size > self.max_message:
            reason, detail = "message_too_large", f"message {mid} of {size} bytes exceeds this node's limit of " \
                                                  f"{self.max_message}"
        elif count > max(1, size):
            reason, detail = "chunk_invalid", f"message {mid}: {count} chunks for {size} bytes"
        else:
            refused = self._reserve(partial, partial.cost())
            if refused is None:
                self.partials[key] = partial
                return self._add(key, partial, piece, chain, file_size, now_ms)
            reason, detail = refused
        self._mark(key, mid, reason)  # refused at its first chunk: the message is voided before it began
        return Step(REFUSED, reason=reason, detail=detail, voided=partial, voided_reason=reason)

    def _reserve(self, partial: Partial, need: int) -> tuple[str, str] | None:
        """Raise the message's reservation to `need` bytes; (reason, detail) when it cannot be:
        `message_too_large` when it could never fit, `reassembly_full` when it does not fit now."""
        more = need - partial.reserved
        if more <= 0:
            return None
        sender, mid = partial.sender, partial.message_id
        mine = self.reserved.get(sender, 0)
        what = f"message {mid} of {partial.size} bytes" + (" needs" if not partial.json else
                                                            " needs, decoded as far as it is known,")
        if need > min(self.budget_per_sender, self.budget_total):
            return "message_too_large", (f"{what} {need} bytes of memory, more than the reassembly budget of "
                                         f"{min(self.budget_per_sender, self.budget_total)} bytes can ever hold")
        if mine + more > self.budget_per_sender or self.reserved_total + more > self.budget_total:
            return "reassembly_full", (f"{what} {need} bytes of memory, which do not fit the reassembly budget now "
                                       f"({mine} of {self.budget_per_sender} bytes reserved for {sender}, "
                                       f"{self.reserved_total} of {self.budget_total} in all)")
        self.reserved[sender] = mine + more
        self.reserved_total += more
        partial.reserved = need
        return None

    def _add(self, key, partial: Partial, piece: Piece, chain: str, file_size: int, now_ms: int) -> Step:
        size = len(piece.data)
        partial.received += size
        if partial.received > partial.size or (size == 0 and partial.size > 0):
            return self._refuse(key, "chunk_invalid", f"chunk {partial.next_index} of message {partial.message_id} "
                                                      f"does not fit its declared size of {partial.size} bytes")
        try:
            _append(partial, piece.data)
        except MemoryError:  # this node's: never held against the sender
            return self._refuse(key, "reassembly_full", _out_of_memory(partial, "assembling it"))._replace(
                out_of_memory=True)
        if partial.json:
            weight, quotes = json_structure(piece.source or bytes(piece.data))  # (its header too: only more)
            partial.structure = (partial.structure[0] + weight, partial.structure[1] + quotes)
            refused = self._reserve(partial, partial.cost())
            if refused is not None:
                return self._refuse(key, *refused)
        partial.prev, partial.last_ms = chain, now_ms
        partial.file_bytes += file_size
        partial.next_index += 1
        if partial.next_index < partial.count:
            return Step(STORED, partial)
        del self.partials[key]
        if partial.received != partial.size:
            self._release_partial(partial)
            self._mark(key, partial.message_id, "chunk_invalid")
            return Step(REFUSED, reason="chunk_invalid", voided=partial, voided_reason="chunk_invalid",
                        detail=f"message {partial.message_id} ended after {partial.received} of its "
                               f"{partial.size} bytes")
        return self._complete(key, partial)

    def _complete(self, key, partial: Partial) -> Step:
        body = partial.buffer.getvalue()  # the buffer's own bytes object: no copy
        partial.buffer = None
        payload = dict(partial.first)
        del payload["body"]
        try:
            if partial.json:
                refused = self._reserve(partial, partial.cost(json_width(body)))
                if refused is not None:
                    return self._void_whole(key, partial, *refused)
                try:
                    text = str(body, "utf-8")
                except UnicodeDecodeError:
                    raise EnvelopeError("bad_payload", "the body is not UTF-8 JSON") from None
                del body  # given back before the value is built (json_cost counts it anyway)
                value = decode_json(text)
                del text
            else:
                value = body  # raw bytes
        except EnvelopeError as exc:  # a body that is not the JSON it claims: the sender's fault
            return self._void_whole(key, partial, "bad_payload", exc.detail)
        except MemoryError:  # this node's: never held against the sender
            return self._void_whole(key, partial, "reassembly_full", _out_of_memory(partial, "decoding it"))._replace(
                out_of_memory=True)
        payload[VALUE_FIELD[partial.etype]] = value
        payload["messageId"] = partial.message_id
        return Step(COMPLETE, partial, payload)

    def _void_whole(self, key, partial: Partial, reason: str, detail: str) -> Step:
        """Void a message whose chunks all came (it is no longer in progress)."""
        self._release_partial(partial)
        self._mark(key, partial.message_id, reason)
        return Step(REFUSED, reason=reason, voided=partial, voided_reason=reason, detail=detail)

    # ------------------------------------------------------------------ voiding, expiry, budgets
    def _refuse(self, key, reason: str, detail: str) -> Step:
        voided = self._void_partial(key, reason)
        return Step(REFUSED, reason=reason, detail=detail, voided=voided, voided_reason=reason)

    def _void_partial(self, key, reason: str) -> Partial | None:
        partial = self._drop(key)
        if partial is not None:
            self._mark(key, partial.message_id, reason)
        return partial

    def _drop(self, key) -> Partial | None:
        partial = self.partials.pop(key, None)
        if partial is not None:
            self._release_partial(partial)
        return partial

    def _release_partial(self, partial: Partial) -> None:
        partial.buffer = None
        self.release(partial.sender, partial.reserved)
        partial.reserved = 0

    def release(self, sender: str, size: int) -> None:
        """Give back `size` reserved bytes of `sender`: a completed message's (its `reserved`) once
        its handling ended."""
        left = self.reserved.get(sender, 0) - size
        if left > 0:
            self.reserved[sender] = left
        else:
            self.reserved.pop(sender, None)
        self.reserved_total = max(0, self.reserved_total - size)

    def expire(self, now_ms: int) -> list[Partial]:
        """Void the messages whose next chunk has not come within the timeout."""
        late = [key for key, p in self.partials.items() if now_ms - p.last_ms > self.timeout_ms]
        out = []
        for key in late:
            partial = self._void_partial(key, "chunk_expired")
            if partial is not None:
                out.append(partial)
        return out

    def next_expiry_ms(self) -> int | None:
        return min((p.last_ms + self.timeout_ms for p in self.partials.values()), default=None)

    def void(self, key: Hashable, reason: str = "chunk_missing") -> Partial | None:
        """Void the message in progress of this instance (its next chunk was withdrawn, …)."""
        return self._void_partial(key, reason)

    def supersede(self, sender: str, key: Hashable) -> list[Partial]:
        """Void `sender`'s messages in progress from instances other than `key`, which the caller
        found to be `sender`'s registered instance now: their instances were replaced (a process
        that died mid-message and was started again), and what they reserved would keep the new
        instance's messages out (`reassembly_full`) until they expire. Asked only when a message
        of `key` does not fit. (Such a message may still complete from files in the inbox if its
        instance wrote them all and then went away, reading 22: it yields to the registered one.)"""
        return [p for k in [k for k, p in self.partials.items() if p.sender == sender and k != key]
                if (p := self._void_partial(k, "chunk_missing")) is not None]

    def void_all(self) -> list[Partial]:
        return [p for key in list(self.partials) if (p := self._void_partial(key, "chunk_missing")) is not None]

    def _mark(self, key, message_id: str, reason: str) -> None:
        """Remember that this instance's message was refused (bounded: instances come and go)."""
        self._void.pop(key, None)
        if len(self._void) >= MAX_REMEMBERED_VOIDS:
            del self._void[next(iter(self._void))]
        self._void[key] = (message_id, reason)


def _append(partial: Partial, data: memoryview) -> None:
    """Write a piece to the body's buffer. Its room grows as pieces arrive, doubling up to the
    declared size (never beyond: the size is reserved), so a first chunk that declares 64 MiB costs
    no more than its own piece, and the whole body, once written, is the buffer's own bytes object
    (getvalue() makes no copy)."""
    buffer = partial.buffer
    end = buffer.tell() + len(data)
    if end > partial.capacity:
        partial.capacity = min(partial.size, max(end, 2 * partial.capacity))
        at = buffer.tell()
        buffer.seek(partial.capacity - 1)
        buffer.write(b"\0")
        buffer.seek(at)
    buffer.write(data)


def _out_of_memory(partial: Partial, doing: str) -> str:
    return (f"this node ran out of memory {doing} (message {partial.message_id} of {partial.size} bytes, "
            f"{partial.reserved} reserved): not the sender's fault")
