"""The `reliable` extension of the wire contract (§9; docs/PROTOCOL.md "### reliable"). Pure.

A reliable MESSAGE carries the flag `FLAG_RELIABLE` and a `messageId` (in its payload, or in the
header of every chunk when it is chunked). The receiver hands it to its handler once per
`messageId` and sender within its instance, and answers with an ACK envelope that carries the
same flag, `ackSeq` (the sequence number of the message's envelope, its last chunk's when
chunked), the `messageId` and `status` (`handled`, or `failed` with `error` when the handler
raised). The sender retransmits the whole message, sealed anew for the target's current
instance, when no ACK came within the acknowledgement timeout, with backoff, up to
`maxRetransmissions` times, and then reports a send-error.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Hashable, NamedTuple

from .chunks import MESSAGE_ID
from .envelope import FLAG_RELIABLE  # noqa: F401  (the extension's bit, for its users; the table is envelope.py)
from .errors import EnvelopeError

ACK_TIMEOUT = 5.0          # acknowledgementTimeoutMs 5,000 (the Reliable Channel API's default)
MAX_RETRANSMISSIONS = 5
BACKOFF = 2.0              # each wait is this many times the one before…
MAX_INTERVAL = 30.0        # …but never longer than this
STATUSES = ("handled", "failed")
NEW, IN_PROGRESS, DONE = "new", "in_progress", "done"
MAX_ACKS = 1024            # acknowledgements in one ACK envelope
EVENTS_OUT = ("sent", "retransmitted", "received", "send-error")
EVENTS_IN = ("delivered", "duplicate")


class Delivered(NamedTuple):
    """What a reliable send's handle resolves to once the receiver acknowledged it."""

    message_id: str
    transmissions: int     # 1 when the first transmission was acknowledged
    seq: int               # the acknowledged envelope's sequence number (its last chunk's)


def waits(ack_timeout: float, retransmissions: int, backoff: float = BACKOFF,
          max_interval: float = MAX_INTERVAL) -> list[float]:
    """The wait after each transmission before the next one (and, after the last, before giving
    up): `retransmissions + 1` waits, growing by `backoff` up to `max_interval`."""
    cap = max(max_interval, ack_timeout)
    return [min(ack_timeout * backoff ** k, cap) for k in range(retransmissions + 1)]


def message_id(payload: dict[str, Any]) -> str:
    value = payload.get("messageId")
    if not isinstance(value, str) or not MESSAGE_ID.fullmatch(value):
        raise EnvelopeError("bad_payload", "a reliable message needs a 'messageId' of 1 to 64 letters, digits, "
                                           "'_' or '-'")
    return value


def ack(sender: str, target: str, seq: int, mid: str, status: str, error: str | None = None) -> dict[str, Any]:
    payload = {"from": sender, "to": target, "ackSeq": seq, "messageId": mid, "status": status}
    if error is not None:
        payload["error"] = error
    return payload


def ack_batch(sender: str, target: str, entries: list[tuple[int, str, str, str | None]]) -> dict[str, Any]:
    """One ACK for several messages of `target` (seq, messageId, status, error): the first at the
    top level, the others in `acks`."""
    (seq, mid, status, error), rest = entries[0], entries[1:]
    payload = ack(sender, target, seq, mid, status, error)
    if rest:
        payload["acks"] = [ack_entry(*entry) for entry in rest]
    return payload


def ack_entry(seq: int, mid: str, status: str, error: str | None = None) -> dict[str, Any]:
    entry = {"ackSeq": seq, "messageId": mid, "status": status}
    if error is not None:
        entry["error"] = error
    return entry


def read_ack(payload: dict[str, Any]) -> tuple[str, str, str | None]:
    """(messageId, status, error) of one acknowledgement, or EnvelopeError('bad_payload')."""
    mid = message_id(payload)
    status = payload.get("status")
    if status not in STATUSES:
        raise EnvelopeError("bad_payload", f"a reliable ACK's status is one of {', '.join(STATUSES)}")
    error = payload.get("error")
    return mid, status, error if isinstance(error, str) else None


def read_acks(payload: dict[str, Any]) -> list[tuple[str, str, str | None, int]]:
    """Every acknowledgement of a reliable ACK: (messageId, status, error, ackSeq), the top level's
    first, then those of `acks`; anything malformed is EnvelopeError('bad_payload')."""
    more = payload.get("acks", [])
    if not isinstance(more, list) or len(more) > MAX_ACKS:
        raise EnvelopeError("bad_payload", f"'acks' must be a list of at most {MAX_ACKS} acknowledgements")
    out = [(*read_ack(payload), payload["ackSeq"])]
    for entry in more:
        if not isinstance(entry, dict) or isinstance(entry.get("ackSeq"), bool) or \
                not isinstance(entry.get("ackSeq"), int) or entry["ackSeq"] < 0:
            raise EnvelopeError("bad_payload", "each of 'acks' is an object with an integer 'ackSeq'")
        out.append((*read_ack(entry), entry["ackSeq"]))
    return out


class Deliveries:
    """The receiver's memory of reliable messages it handed to its handler (one delivery per
    message within an instance): per (sender, messageId), in progress or done with its status.
    Bounded: beyond `capacity` finished ones are forgotten, oldest first (a retransmission of one
    of those would be delivered again). A sender can crowd the others out only down to an equal
    share: one holding more than `capacity` / (senders remembered) forgets its own oldest, never
    another's, so a flood of ids from one sender does not make another's copies delivered twice.
    O(1) per message (in-progress entries, which are skipped, are few: the read-ahead bounds them)."""

    def __init__(self, capacity: int = 100_000):
        self.capacity = capacity
        self._seen: "OrderedDict[Hashable, tuple[str, str | None, str | None]]" = OrderedDict()  # oldest first
        self._mine: dict[str, "OrderedDict[str, None]"] = {}  # per sender, its ids, oldest first
        self.in_progress = 0

    def begin(self, sender: str, mid: str) -> tuple[str, str | None, str | None]:
        """NEW (now in progress), IN_PROGRESS, or DONE with the status and error it was acked with."""
        key = (sender, mid)
        state = self._seen.get(key)
        if state is not None:
            self._seen.move_to_end(key)
            self._mine[sender].move_to_end(mid)
            return state
        self._add(sender, mid, (IN_PROGRESS, None, None))
        self.in_progress += 1
        self._trim(sender)
        return NEW, None, None

    def finish(self, sender: str, mid: str, status: str, error: str | None = None) -> None:
        key = (sender, mid)
        if key not in self._seen:  # forgotten meanwhile (it cannot be trimmed while in progress)
            self._add(sender, mid, (DONE, status, error))
            self._trim(sender)
            return
        if self._seen[key][0] == IN_PROGRESS:
            self.in_progress -= 1
        self._seen[key] = (DONE, status, error)

    def forget(self, sender: str, mid: str) -> None:
        """The message never reached the handler (withdrawn, the node stopping): a retransmission
        must be delivered."""
        state = self._drop(sender, mid)
        if state is not None and state[0] == IN_PROGRESS:
            self.in_progress -= 1

    def _add(self, sender: str, mid: str, state: tuple[str, str | None, str | None]) -> None:
        self._seen[(sender, mid)] = state
        self._mine.setdefault(sender, OrderedDict())[mid] = None

    def _drop(self, sender: str, mid: str) -> tuple[str, str | None, str | None] | None:
        state = self._seen.pop((sender, mid), None)
        mine = self._mine.get(sender)
        if mine is not None:
            mine.pop(mid, None)
            if not mine:
                del self._mine[sender]
        return state

    def _trim(self, sender: str) -> None:
        while len(self._seen) > self.capacity:
            mine = self._mine[sender]
            if len(mine) > self.capacity // len(self._mine):  # beyond its share: its own oldest go
                victim = next(((sender, mid) for mid in mine if self._seen[(sender, mid)][0] == DONE), None)
            else:
                victim = next((key for key, state in self._seen.items() if state[0] == DONE), None)
            if victim is None:
                return
            self._drop(*victim)

    def __len__(self) -> int:
        return len(self._seen)
