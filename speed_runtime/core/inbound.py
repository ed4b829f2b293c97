"""The inbound path of a node as a state machine without I/O (sans-IO, as h11's Connection): a
file's name, what the opened file's facts and bytes are, the sender's registry entry and the time
go in; verdicts and actions come out, which the receiver (node/receiver.py) and an extension's
own directory (ext/control.py) carry out. It reads no clock, touches no path and starts no thread;
the receiver does the listing, opening, reading, removing and handing over.

The order of checks, written once (docs/PROTOCOL.md "Order of checks"), cheapest and
unauthenticated first, and only then anything that counts against a sender:

  0. room (`Holding`): a file is taken only while its sender, and all senders together, have room
     in the read-ahead — in files and in what the held payloads cost decoded. Files are taken in
     turns, one per sender per turn, and a pass, a listing's slice or the removal of junk lasts at
     most SLICE_SECONDS (the receiver's scheduling: node/receiver.py, node/inbox.py).
  1. the name (`admit`): an envelope name whose sender is allowed now; then each extension's
     `admit` (quota: a quarantined sender). Nothing is read. A name refused when first seen is junk,
     removed after the senders' files, a slice per pass.
  2. the opened file's facts (`core.receiving.judge_file`, applied by `transport.read_inbox_file`
     to the descriptor it opened without following links): regular, a trusted owner, one link (two
     young links: deferred), the size; only then is it read (`refused_file`).
  3.–5. the envelope (`judge`): framing, tag, payload, identities against the sender's entry as its
     file is now, timestamp, nonce, sequence; a sender that departed since the file arrived is
     judged as the instance it was; an extension may accept what it defines differently
     (`rejudge`: durable copies). The replay state records an envelope only once accepted.
  6. by type (`route`): a MESSAGE runs on its sender's lane, a request goes to the callee, an answer
     to whoever awaits it — one that nothing awaits is `unexpected_response` (`unexpected`) — probes
     are answered, a `leave` event is a registry hint.

Principles (issue 26), and where this path keeps them:
  (a) Only what authenticates as a sender counts against it: a `Reject`'s `counts_against_sender`
      is True only after step 3's tag passed under the key and the header named the sender's
      registered instance (`Verdict.attributable`), or for step 6 and extensions' rejections of an
      envelope that passed 1–5. Steps 0–2 never count, whatever the name claims; neither does a
      refusal because of the receiver's own grants.
  (b) Memory is accounted as what it costs decoded: the decoder returns each payload's cost
      (`Verdict.cost`, payloads.json_cost) and `Holding` bounds the held cost, so the read-ahead
      holds at most `bytes_total` plus one envelope: a bound on resident memory.
  (c) Persistent writes are not on this path (the registry, the journal, durable's ledger are).
  (d) O(1) per file and bounded: each step costs O(1) per file; names and junk are bounded
      (node/inbox.py); no state is kept for a name a file merely claims.
  (e) One envelope moves nothing beyond a documented bound: the replay window and sequence move
      only for an accepted envelope, by at most `max_gap`.
  (f) What members write is data: names, reasons and bytes are carried as data into records.
"""
from __future__ import annotations

from typing import Callable, Iterable, NamedTuple, Sequence

from .entry import RegistryEntry
from .envelope import EnvelopeType
from .keys import Key
from .receiving import Decoder, Identity, Verdict, decode_v1, judge_envelope, spc_deadline_ms, stale_source
from .replay import ReplayGuard

# the most of one kind of work the protocol thread does before it looks for events again: a slice of
# a listing, a pass of taking files in turns, removing junk. Another sender's file waits for about three.
SLICE_SECONDS = 0.002
CLOCK_EVERY = 16  # files between two looks at the clock within a slice

_MESSAGE, _SPC_REQUEST, _SPC_RESPONSE, _ACK = (int(t) for t in (EnvelopeType.MESSAGE, EnvelopeType.SPC_REQUEST,
                                                                EnvelopeType.SPC_RESPONSE, EnvelopeType.ACK))
_ERROR, _HEARTBEAT, _EVENT = int(EnvelopeType.ERROR), int(EnvelopeType.HEARTBEAT), int(EnvelopeType.EVENT)

# extension hooks the machine calls at their steps (node/hooks.py: Extension.admit, rejudge)
Admit = Callable[[str, str], "str | None"]                        # (sender, name) -> reason to refuse unread
Rejudge = Callable[[Verdict, str, bytes, int], Verdict]           # (verdict, sender, data, arrived_ms)
Judge = Callable[["RegistryEntry | None", int, str, bytes], Verdict]  # (entry, arrived_ms, sender, data)


# ============================================================================ actions
class Reject(NamedTuple):
    """Remove the file and record `reason` (contract §8). Only when `counts_against_sender` may
    anything kept per sender hear of it (the extensions' `on_rejected`: threat scores)."""

    name: str
    sender: str
    seq: int
    reason: str
    size: int = 0
    type: str = "UNKNOWN"
    data: bytes | None = None
    counts_against_sender: bool = False
    detail: str = ""


class RunHandler(NamedTuple):
    """A MESSAGE: hold its file (`cost`, what its value costs decoded) and run the handler on the
    sender's lane; the file is removed when the handler starts. `size`: what the Message reports."""

    size: int
    cost: int


class SubmitRequest(NamedTuple):
    """An SPC_REQUEST: hold its file and hand it to the callee (§5.6), with its deadline (Unix ms)."""

    deadline_ms: int | None
    cost: int


class ResolveCall(NamedTuple):
    """An SPC_RESPONSE for the caller's pending call `request_id` (if still awaited from that instance)."""

    request_id: str


class SettleAck(NamedTuple):
    """An ACK, or an ERROR naming `seq`, for the sender's awaited acknowledgement; `error` the
    failure an ERROR reports."""

    seq: int
    error: str | None


class AnswerProbe(NamedTuple):
    """A HEARTBEAT probe: answer it if the prober allows us."""


class RegistryHint(NamedTuple):
    """A `leave` event: look at the sender's registry entry now."""

    file_name: str


class Settled(NamedTuple):
    """Anything else accepted: removed and recorded, nothing more to do."""


Route = RunHandler | SubmitRequest | ResolveCall | SettleAck | AnswerProbe | RegistryHint | Settled


# ============================================================================ the machine
class Inbound:
    """The inbound judgement of one node instance: its identity, the key, its replay state, the
    payload limit, the payload decoder of its extensions and their hooks."""

    def __init__(self, me: Identity, key: Key, replay: ReplayGuard, max_payload: int, decode: Decoder = decode_v1,
                 admit: Sequence[Admit] = (), rejudge: Sequence[Rejudge] = ()):
        self.me, self.key, self.replay, self.max_payload = me, key, replay, max_payload
        self.decode = decode
        self._admit, self._rejudge = tuple(admit), tuple(rejudge)

    def use(self, decode: Decoder, admit: Iterable[Admit], rejudge: Iterable[Rejudge]) -> None:
        """The enabled extensions' payload layouts and hooks (§9), once they are loaded."""
        self.decode, self._admit, self._rejudge = decode, tuple(admit), tuple(rejudge)

    # ------------------------------------------------------------------ step 1
    def admit(self, name: str, sender: str, seq: int, allowed: frozenset[str]) -> Reject | None:
        """Step 1 as grants stand now, then the extensions' admission: a Reject to remove the file
        unread, or None to open it. Never counts against the sender: nothing was read, and a
        sender not allowed now is the receiver's own decision (principle a)."""
        if sender not in allowed:
            return Reject(name, sender, seq, "unauthorized")
        for admit in self._admit:
            reason = admit(sender, name)
            if reason:
                return Reject(name, sender, seq, reason)
        return None

    def junk(self, name: str, sender: str, seq: int) -> Reject:
        """A name refused when first seen (not an envelope name, or its sender not allowed then)."""
        return Reject(name, sender, seq, "unauthorized")

    # ------------------------------------------------------------------ step 2
    @staticmethod
    def refused_file(name: str, sender: str, seq: int, reason: str, size: int, etype: str) -> Reject:
        """Step 2 refused the opened file on its facts (or its read): it authenticates as nobody."""
        return Reject(name, sender, seq, reason, size, etype)

    # ------------------------------------------------------------------ steps 3–5
    def judge(self, sender: str, data: bytes, arrived_ms: int, entry: RegistryEntry | None,
              departed: Callable[[], RegistryEntry | None], judge: Judge | None = None) -> Verdict:
        """Steps 3–5 at the file's arrival (`arrived_ms`, on this runtime's clock), against the
        sender's entry as its file is now; `departed()` gives the instance that had delivered it
        when that entry has gone since (asked only then: docs/PROTOCOL.md reading 22); then each
        extension may accept what it defines differently. `judge` replaces steps 3–5 (an
        extension's own directory: `control`)."""
        judge = judge or self._judge_v1
        verdict = judge(entry, arrived_ms, sender, data)
        if verdict.reason is None:
            return verdict
        if stale_source(verdict):  # a sender that has gone since it delivered this file
            earlier = departed()
            if earlier is not None:
                verdict = judge(earlier, arrived_ms, sender, data)
        if verdict.reason is not None:  # §9: an extension may accept what it defines differently (durable)
            for rejudge in self._rejudge:
                verdict = rejudge(verdict, sender, data, arrived_ms)
        return verdict

    def _judge_v1(self, entry: RegistryEntry | None, arrived_ms: int, sender: str, data: bytes) -> Verdict:
        return judge_envelope(sender, data, self.key, self.me, entry, self.replay, arrived_ms, self.max_payload,
                              self.decode)

    @staticmethod
    def rejected(name: str, sender: str, seq: int, verdict: Verdict, data: bytes) -> Reject:
        """A rejection at steps 3–5: it counts against the sender only if the envelope
        authenticated as it (`Verdict.attributable`, principle a)."""
        return Reject(name, sender, seq, verdict.reason, len(data), verdict.type, data, verdict.attributable,
                      verdict.detail)

    # ------------------------------------------------------------------ step 6
    @staticmethod
    def route(verdict: Verdict, size: int, assembled: bool) -> Route:
        """Where an accepted envelope goes, by type (§5.5 step 6). `size` is what its Message
        reports (its chunks' when `assembled`); an assembled value's memory is the reassembly's
        until its handling ended, so it holds no read-ahead cost."""
        header, payload = verdict.header, verdict.payload
        etype = header.type
        if etype == _MESSAGE:
            return RunHandler(size, 0 if assembled else verdict.cost)
        if etype == _SPC_REQUEST:
            return SubmitRequest(spc_deadline_ms(header, payload), 0 if assembled else verdict.cost)
        if etype == _SPC_RESPONSE:
            return ResolveCall(payload["requestId"])
        if etype == _ACK:
            return SettleAck(payload["ackSeq"], None)
        if etype == _ERROR and isinstance(payload.get("refSeq"), int):
            return SettleAck(payload["refSeq"], f"{payload['errorCode']}: {payload['errorMessage']}")
        if etype == _HEARTBEAT and payload["reply"] is False:
            return AnswerProbe()
        if etype == _EVENT and payload["event"] == "leave":
            return RegistryHint(payload["from"] + ".node")
        return Settled()

    @staticmethod
    def unexpected(name: str, sender: str, verdict: Verdict, data: bytes, late: bool) -> Reject:
        """An answer that nothing awaits from that instance (§5.5 step 6): it authenticated as its
        sender, so it counts (`late`: it answers nothing still pending — the asker gave up first)."""
        return Reject(name, sender, verdict.header.sequence, "unexpected_response", len(data), verdict.type, data,
                      True, "late" if late else "")


# ============================================================================ step 0: room
class Holding:
    """The read-ahead's bounds (principle b): at most `per_sender` accepted envelopes of one sender
    and `total` of all senders wait for (or are in) their handler, and no file is taken while
    what they cost decoded is `bytes_per_sender` (one sender) or `bytes_total` (all) or more: what
    is held never exceeds `bytes_total` plus the cost of one envelope (docs/PROTOCOL.md reading 24).
    The rest stays in the inbox, unread: the inbox is the queue.

    Who waits for room is woken at a low-water mark (half of a bound), not at the first release,
    so that a pass takes several files and hands them to the lane at once. Pure arithmetic: the
    caller (node/readahead.py) holds the lock and does the wake-up."""

    def __init__(self, per_sender: int, total: int, bytes_per_sender: int = 1 << 62, bytes_total: int = 1 << 62):
        self.per_sender, self.total = per_sender, total
        self.bytes_per_sender, self.bytes_total = bytes_per_sender, bytes_total
        self._in_hand: dict[str, int] = {}  # per sender
        self._in_hand_total = 0
        self._cost: dict[str, int] = {}     # per sender: what its held envelopes cost decoded
        self.cost_total = 0
        self._at_bound: set[str] = set()    # senders that reached their bound since the last wake-up
        self._total_at_bound = False

    def full(self) -> bool:
        return self._in_hand_total >= self.total or self.cost_total >= self.bytes_total

    def has_room(self, sender: str) -> bool:
        return self._in_hand_total < self.total and self.cost_total < self.bytes_total \
            and self._in_hand.get(sender, 0) < self.per_sender and self._cost.get(sender, 0) < self.bytes_per_sender

    def room_for_any(self, senders: Iterable[str]) -> bool:
        if self.full():
            return False
        return any(self._in_hand.get(s, 0) < self.per_sender and self._cost.get(s, 0) < self.bytes_per_sender
                   for s in senders)

    def empty(self) -> bool:
        return self._in_hand_total == 0

    def add(self, sender: str, cost: int) -> None:
        """One more held envelope of `sender`, costing `cost` bytes decoded."""
        count = self._in_hand[sender] = self._in_hand.get(sender, 0) + 1
        self._in_hand_total += 1
        held = self._cost[sender] = self._cost.get(sender, 0) + cost
        self.cost_total += cost
        if count >= self.per_sender or held >= self.bytes_per_sender:
            self._at_bound.add(sender)
        if self.full():
            self._total_at_bound = True

    def remove(self, sender: str, cost: int) -> bool:
        """One of `sender`'s held envelopes (of `cost`, as held) is done. True when whoever waits
        for room should be woken: the sender, or all senders, back at half of a bound they reached."""
        count = self._in_hand.get(sender, 0) - 1
        if count > 0:
            self._in_hand[sender] = count
        else:
            self._in_hand.pop(sender, None)
        self._in_hand_total -= 1
        held = self._cost.get(sender, 0) - cost
        if held > 0 and count > 0:
            self._cost[sender] = held
        else:
            self._cost.pop(sender, None)
        self.cost_total = max(0, self.cost_total - cost)
        wake = False
        if sender in self._at_bound and count <= self.per_sender // 2 and held <= self.bytes_per_sender // 2:
            self._at_bound.discard(sender)
            wake = True
        if self._total_at_bound and self._in_hand_total <= self.total // 2 and self.cost_total <= self.bytes_total // 2:
            self._total_at_bound = False
            wake = True
        return wake
