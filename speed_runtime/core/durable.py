"""The `durable` extension's protocol logic (docs/PROTOCOL.md, "### durable"). Pure: bytes, names
and times in, values out; no clock, no path, no thread.

- the durable fields of a MESSAGE payload (`"durable": {"stream", "id", "base", "expiresAt"}`);
- the judgement of a durable envelope sealed for an earlier instance of the receiver's name
  (carried over a restart: bound to the name, numbered for another instance);
- receipts: a keyed BLAKE2b-256 chain per (receiver, sender, stream), its byte-exact input, and the
  verification that names the first break;
- the receiver's ledger of one stream (what was handled, what is only finished for the sender);
- outbox entries: a clear header line (what waits where) and the payload sealed under the key.
"""
from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass, field
import bisect
from typing import AbstractSet, Any, Callable, Iterable, NamedTuple

from nacl import bindings as _sodium

from . import aead, payloads
from .envelope import FLAG_DURABLE, EnvelopeType, open_envelope
from .errors import DeliveryError, EnvelopeError
from .keys import Key
from .receiving import Verdict, header_type
from .replay import ReplayGuard

STATUSES = {"handled": 1, "failed": 2, "expired": 3}
RECEIPT_KEY_CONTEXT = b"SPEED-DURABLE-RECEIPT-KEY-V1"
RECEIPT_DOMAIN = b"SPEED-RECEIPT-V1"
ZERO_MAC = bytes(32)
MAX_ID = (1 << 63) - 1           # ids and indexes stay exact in any JSON reader
_U64 = struct.Struct(">Q")


class OutboxFullError(DeliveryError):
    """The sender's outbox is at its limit: nothing was stored."""


class NotDurableError(DeliveryError):
    """The target's current entry does not advertise `durable`."""


# ----------------------------------------------------------------------------- payload fields
class DurableFields(NamedTuple):
    stream: str        # 32 lowercase hex digits: the sender's stream towards this receiver
    id: int            # the message id within the stream, from 1
    base: int          # every id below this is finished for the sender (receipted or expired)
    expires_at_ms: int  # Unix ms; no handler starts after it


def _uint(obj: dict, key: str, low: int = 0) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_ID:
        raise EnvelopeError("bad_payload", f"durable.{key} must be an integer from {low} to 2^63-1")
    return value


def is_stream(text: Any) -> bool:
    return isinstance(text, str) and len(text) == 32 and all(c in "0123456789abcdef" for c in text)


def parse_fields(payload: dict) -> DurableFields:
    d = payload.get("durable")
    if not isinstance(d, dict) or not is_stream(d.get("stream")):
        raise EnvelopeError("bad_payload", "a durable MESSAGE needs durable.stream (32 lowercase hex digits)")
    fields = DurableFields(d["stream"], _uint(d, "id", 1), _uint(d, "base", 1), _uint(d, "expiresAt"))
    if fields.base > fields.id:
        raise EnvelopeError("bad_payload", "durable.base lies above durable.id")
    return fields


def add_fields(body: bytes, fields: DurableFields) -> bytes:
    """A compact MESSAGE payload (`{...}`) with the durable fields appended."""
    d = (f'"durable":{{"stream":"{fields.stream}","id":{fields.id},"base":{fields.base},'
         f'"expiresAt":{fields.expires_at_ms}}}').encode()
    return body[:-1] + (b"," if len(body) > 2 else b"") + d + b"}"


# ----------------------------------------------------------------------------- judging copies
def judge_carried(sender: str, data: bytes, key: Key, me: str, current_id: bytes, instances: AbstractSet[bytes],
                  started_ms: int, sender_instance: Callable[[bytes], bool], replay: ReplayGuard, now_ms: int,
                  max_payload: int) -> Verdict:
    """Steps 3-5 for an envelope with the durable flag that the v1 checks refused for its identities
    (wrong_target, unknown_sender). A durable MESSAGE is bound to the receiver's name: its target may
    be the current instance (then the v1 replay checks apply) or an earlier instance of this name
    (`instances`, recorded by the receiver at each start) for a file that arrived (`now_ms`, the
    file's arrival) before this instance started (`started_ms`): then its timestamp and nonce are
    checked and its sequence is not (it was numbered for that instance). Its source must be an
    instance of the sender (`sender_instance(source_id)`: its registered instance, or one recorded
    in the sender's own lineage), like any envelope's: nothing else counts against that sender."""
    etype = header_type(data)
    try:
        opened = open_envelope(data, key, max_payload)
        header = opened.header
        if header.type != EnvelopeType.MESSAGE or not header.flags & FLAG_DURABLE:
            raise EnvelopeError("wrong_target", "not a durable MESSAGE")
        payload = payloads.decode_payload(opened.payload, header.type)
        parse_fields(payload)
        if payload["from"] != sender:
            raise EnvelopeError("unknown_sender", "the payload's sender differs from the file name")
        if payload["to"] != me:
            raise EnvelopeError("wrong_target", "the envelope is for another node")
        current = header.target_id == current_id
        if not current and (header.target_id not in instances or now_ms >= started_ms):
            raise EnvelopeError("wrong_target", "sealed for an instance this name never had here"
                                if header.target_id not in instances else
                                "sealed for an earlier instance of this name, but delivered after it")
        if not sender_instance(header.source_id):
            raise EnvelopeError("unknown_sender", "source")
        if current:
            gap = replay.check(header.source_id, sender, header.sequence, opened.nonce, header.timestamp_ms, now_ms)
        else:
            replay.check_window(opened.nonce, header.timestamp_ms, now_ms)
            gap = 0
    except EnvelopeError as exc:
        return Verdict(exc.reason, etype, detail=exc.detail)
    return Verdict(None, etype, header, payload, opened.nonce, gap)


def lineage_ids(text: bytes, limit: int) -> frozenset[bytes]:
    """The instance IDs of a `durable/instances` file (one of 32 lowercase hex digits per line; the
    last `limit` lines count, anything else is skipped). A line is ended by 0x0A: a last one
    without it is a torn append, not a line (the C node reads it so too)."""
    out = []
    for line in text.split(b"\n")[:-1][-limit:]:
        if len(line) == 32 and is_stream(line.decode("ascii", "replace")):
            out.append(bytes.fromhex(line.decode()))
    return frozenset(out)


def durable_flag(data: bytes) -> bool:
    """Whether the (unauthenticated) header carries the durable flag: a hint for listings only."""
    return len(data) >= 4 and bool(((data[2] << 8) | data[3]) & FLAG_DURABLE)


# ----------------------------------------------------------------------------- receipts
def receipt_key(env_key: bytes) -> bytes:
    """K_r = BLAKE2b-256(key = environment key, message = "SPEED-DURABLE-RECEIPT-KEY-V1")."""
    return hashlib.blake2b(RECEIPT_KEY_CONTEXT, key=env_key, digest_size=32).digest()


def _name_bytes(name: str) -> bytes:
    raw = name.encode("utf-8")
    if not 0 < len(raw) <= 64:
        raise ValueError("a node name is 1 to 64 bytes")
    return bytes([len(raw)]) + raw


def receipt_input(receiver: str, sender: str, stream: str, index: int, msg_id: int, status: str,
                  time_ms: int, prev: bytes) -> bytes:
    """The bytes a receipt's MAC covers (docs/PROTOCOL.md, durable, "Receipts")."""
    return b"".join((RECEIPT_DOMAIN, _name_bytes(receiver), _name_bytes(sender), bytes.fromhex(stream),
                     _U64.pack(index), _U64.pack(msg_id), bytes([STATUSES[status]]), _U64.pack(time_ms), prev))


@dataclass(frozen=True)
class Receipt:
    receiver: str
    sender: str
    stream: str
    index: int      # position in the chain, from 1
    id: int         # the message it acknowledges
    status: str     # handled | failed | expired
    time_ms: int
    prev: bytes     # the previous receipt's MAC (32 zero bytes for the first)
    mac: bytes

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.stream, "index": self.index, "id": self.id, "status": self.status,
                "time": self.time_ms, "prev": self.prev.hex(), "mac": self.mac.hex()}

    def valid(self, rkey: bytes) -> bool:
        want = receipt_mac(rkey, self.receiver, self.sender, self.stream, self.index, self.id, self.status,
                           self.time_ms, self.prev)
        return _sodium.sodium_memcmp(want, self.mac) if len(self.mac) == 32 else False


def receipt_mac(rkey: bytes, receiver: str, sender: str, stream: str, index: int, msg_id: int, status: str,
                time_ms: int, prev: bytes) -> bytes:
    data = receipt_input(receiver, sender, stream, index, msg_id, status, time_ms, prev)
    return hashlib.blake2b(data, key=rkey, digest_size=32).digest()


def make_receipt(rkey: bytes, receiver: str, sender: str, stream: str, index: int, msg_id: int, status: str,
                 time_ms: int, prev: bytes) -> Receipt:
    mac = receipt_mac(rkey, receiver, sender, stream, index, msg_id, status, time_ms, prev)
    return Receipt(receiver, sender, stream, index, msg_id, status, time_ms, prev, mac)


def receipt_from_json(obj: Any, receiver: str, sender: str) -> Receipt:
    """A receipt as carried in a payload or a log line; ValueError when malformed."""
    if not isinstance(obj, dict) or not is_stream(obj.get("stream")) or obj.get("status") not in STATUSES:
        raise ValueError("not a receipt")
    try:
        ints = [_uint(obj, k, 1 if k != "time" else 0) for k in ("index", "id", "time")]
        prev, mac = bytes.fromhex(obj["prev"]), bytes.fromhex(obj["mac"])
    except (EnvelopeError, KeyError, TypeError, ValueError):
        raise ValueError("not a receipt") from None
    if len(prev) != 32 or len(mac) != 32:
        raise ValueError("not a receipt")
    return Receipt(receiver, sender, obj["stream"], ints[0], ints[1], obj["status"], ints[2], prev, mac)


class ChainReport(NamedTuple):
    receiver: str
    sender: str
    stream: str
    count: int                   # receipts in the chain
    handled: int
    first_break: int | None      # the chain position where it first breaks (None: it verifies)
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.first_break is None


def verify_chain(receipts: Iterable[Receipt], rkey: bytes,
                 starts: dict[str, tuple[int, bytes]] | None = None) -> list[ChainReport]:
    """Verify each stream's chain: every MAC, positions 1, 2, 3… without a gap, each receipt chaining
    the previous one's MAC, one receipt per message id. A compacted ledger's chain starts after its
    checkpoint (`starts`: stream -> (position, MAC)). One report per stream, in order of first sight."""
    streams: dict[tuple[str, str, str], dict[int, Receipt]] = {}
    doubled: dict[tuple[str, str, str], int] = {}
    for r in receipts:
        chain = streams.setdefault((r.receiver, r.sender, r.stream), {})
        if chain.get(r.index, r) != r:
            doubled[(r.receiver, r.sender, r.stream)] = min(r.index, doubled.get((r.receiver, r.sender, r.stream), r.index))
        chain[r.index] = r
    out = []
    for k, chain in streams.items():
        first, prev = (starts or {}).get(k[2], (0, ZERO_MAC))
        # the receipts after the checkpoint: those a compacted ledger keeps at or below it (to send
        # again) are what the checkpoint already stands for, and counted twice otherwise
        count = sum(1 for index in chain if index > first)
        ids, handled, broken = set(), 0, None
        for position in range(first + 1, max(chain) + 1):
            r = chain.get(position)
            if doubled.get(k) == position:
                broken = f"two different receipts at position {position}"
            elif r is None:
                broken = f"receipt {position} is missing"
            elif not r.valid(rkey):
                broken = f"receipt {position} does not verify (wrong key or altered)"
            elif r.prev != prev:
                broken = f"receipt {position} does not chain receipt {position - 1}"
            elif r.id in ids:
                broken = f"receipt {position} acknowledges message {r.id} a second time"
            if broken:
                out.append(ChainReport(k[0], k[1], k[2], count, handled, position, broken))
                break
            prev, handled = r.mac, handled + (r.status == "handled")
            ids.add(r.id)
        else:
            out.append(ChainReport(k[0], k[1], k[2], count, handled, None))
    return out


# ----------------------------------------------------------------------------- the receiver's ledger
FLOOR_STEP = 16          # one copy's `base` raises a stream's floor by at most this many ids
RECEIPTS_KEPT = 256      # receipts kept per stream above its floor, to send again (the newest)
MAX_RUNS = 256           # separate runs of receipted ids kept per stream above its floor
MAX_STREAMS = 8          # streams a receiver keeps per sender


@dataclass
class StreamLedger:
    """What a receiver knows of one (sender, stream): the chain's head; the floor (every id at or
    below it is finished); the highest id receipted; the ids above the floor it receipted (`runs`, sorted disjoint [low, high]
    ranges) and the newest of their receipts (to send again when a copy comes back); the ids
    claimed by a handler that has not committed (a crash inside it).

    Bounded whatever a sender (or anyone holding the key and naming it) does: one copy's `base`
    moves the floor by at most FLOOR_STEP and never above `high` (docs/PROTOCOL.md, durable, "The
    receiver"), at most
    RECEIPTS_KEPT receipts and MAX_RUNS runs are kept (beyond, the oldest receipt and the highest
    run are forgotten)."""

    stream: str
    index: int = 0
    mac: bytes = ZERO_MAC
    floor: int = 0
    handled: int = 0     # receipts with status handled in the chain so far
    high: int = 0        # the highest id receipted in this stream
    receipts: dict[int, Receipt] = field(default_factory=dict)   # in chain order
    runs: list[list[int]] = field(default_factory=list)
    claims: set[int] = field(default_factory=set)

    def seen(self, msg_id: int) -> Receipt | bool:
        """A receipt (handled before), True (finished: at or below the floor, or receipted and its
        receipt no longer kept), or False (new)."""
        if msg_id <= self.floor:
            return True
        found = self.receipts.get(msg_id)
        if found is not None:
            return found
        at = bisect.bisect_right(self.runs, [msg_id, MAX_ID + 1]) - 1
        return at >= 0 and self.runs[at][1] >= msg_id

    def advance(self, base: int) -> None:
        """The sender says every id below `base` is finished: raise the floor towards base - 1, by at
        most FLOOR_STEP and never above the highest id receipted so far (so a forged base moves it
        no further, and one forged copy alone never reaches ids the sender has yet to send), and
        forget what lies below it."""
        floor = min(base - 1, self.floor + FLOOR_STEP, self.high)
        if floor <= self.floor:
            return
        self.floor = floor
        for msg_id in [i for i in self.receipts if i <= floor]:
            del self.receipts[msg_id]
        self.claims = {i for i in self.claims if i > floor}
        runs = self.runs
        while runs and runs[0][1] <= floor:
            runs.pop(0)
        if runs and runs[0][0] <= floor:
            runs[0][0] = floor + 1

    def issue(self, rkey: bytes, receiver: str, sender: str, msg_id: int, status: str, time_ms: int) -> Receipt:
        return make_receipt(rkey, receiver, sender, self.stream, self.index + 1, msg_id, status, time_ms, self.mac)

    def record(self, receipt: Receipt) -> None:
        if receipt.index > self.index:  # replaying a compacted log never moves the head back
            self.index, self.mac = receipt.index, receipt.mac
            self.handled += receipt.status == "handled"
        self.claims.discard(receipt.id)
        self.high = max(self.high, receipt.id)
        if receipt.id <= self.floor:
            return
        self.receipts[receipt.id] = receipt
        if len(self.receipts) > RECEIPTS_KEPT:
            del self.receipts[next(iter(self.receipts))]
        self._add_run(receipt.id)

    def _add_run(self, msg_id: int) -> None:
        runs = self.runs
        at = bisect.bisect_right(runs, [msg_id, MAX_ID + 1])   # runs[at - 1] starts at or below msg_id
        if at and runs[at - 1][1] >= msg_id:
            return
        joins_low = at > 0 and runs[at - 1][1] == msg_id - 1
        joins_high = at < len(runs) and runs[at][0] == msg_id + 1
        if joins_low and joins_high:
            runs[at - 1][1] = runs.pop(at)[1]
        elif joins_low:
            runs[at - 1][1] = msg_id
        elif joins_high:
            runs[at][0] = msg_id
        else:
            runs.insert(at, [msg_id, msg_id])
            if len(runs) > MAX_RUNS:  # the highest run goes: ids far ahead of the sender's are the forged ones
                low, high = runs.pop()
                for i in [i for i in self.receipts if low <= i <= high]:
                    del self.receipts[i]


def stream_of(ledgers: dict[str, "StreamLedger"], stream: str) -> "StreamLedger | None":
    """The ledger of `stream` among a sender's, created when there is room (MAX_STREAMS); None when
    the sender already has MAX_STREAMS other streams."""
    found = ledgers.get(stream)
    if found is None and len(ledgers) < MAX_STREAMS:
        found = ledgers[stream] = StreamLedger(stream)
    return found


def ledger_line(kind: str, obj: dict) -> bytes:
    return (json.dumps({kind: obj}, separators=(",", ":")) + "\n").encode()


def replay_ledger(lines: Iterable[bytes], receiver: str, sender: str,
                  damaged: list[int] | None = None) -> dict[str, StreamLedger]:
    """Rebuild a sender's stream ledgers from its ledger log (claims, receipts, checkpoints), in the
    order the receiver wrote them: each receipt's `base` (of the copy it answered) is applied
    before the receipt, as when it was committed. Lines that are not records (a torn last line)
    are skipped, their numbers (from 1) appended to `damaged`; streams beyond MAX_STREAMS are not
    kept."""
    out: dict[str, StreamLedger] = {}
    for number, line in enumerate(lines, 1):
        try:
            rec = json.loads(line)
            kind, obj = next(iter(rec.items()))
            if kind == "receipt":
                r = receipt_from_json(obj, receiver, sender)
                ledger = stream_of(out, r.stream)
                if ledger is not None:
                    ledger.advance(_uint(obj, "base", 1) if "base" in obj else 1)
                    ledger.record(r)
            elif kind == "claim" and is_stream(obj.get("stream")):
                ledger = stream_of(out, obj["stream"])
                if ledger is not None and _uint(obj, "id", 1) > ledger.floor:
                    ledger.claims.add(obj["id"])
            elif kind == "checkpoint" and is_stream(obj.get("stream")) and (obj["stream"] in out or
                                                                            len(out) < MAX_STREAMS):
                floor = _uint(obj, "floor")
                ledger = out[obj["stream"]] = StreamLedger(obj["stream"], _uint(obj, "index"),
                                                          bytes.fromhex(obj["mac"]), floor,
                                                          _uint(obj, "handled") if "handled" in obj else 0,
                                                          max(floor, _uint(obj, "high") if "high" in obj else 0))
                for low, high in obj.get("runs", [])[:MAX_RUNS]:
                    if isinstance(low, int) and isinstance(high, int) and ledger.floor < low <= high <= MAX_ID:
                        ledger.runs.append([low, high])
                ledger.runs.sort()
        except (ValueError, TypeError, KeyError, AttributeError, StopIteration, EnvelopeError):
            if damaged is not None:
                damaged.append(number)
    return out


def compacted(ledgers: dict[str, StreamLedger]) -> bytes:
    """A ledger log holding the same knowledge in fewer lines: per stream a checkpoint (with the
    runs of receipted ids above the floor), then the receipts kept and the open claims."""
    lines = []
    for ledger in ledgers.values():
        lines.append(ledger_line("checkpoint", {"stream": ledger.stream, "index": ledger.index,
                                                "mac": ledger.mac.hex(), "floor": ledger.floor,
                                                "handled": ledger.handled, "high": ledger.high,
                                                "runs": ledger.runs}))
        for r in sorted(ledger.receipts.values(), key=lambda r: r.index):
            lines.append(ledger_line("receipt", {**r.to_json(), "base": ledger.floor + 1}))
        for msg_id in sorted(ledger.claims):
            lines.append(ledger_line("claim", {"stream": ledger.stream, "id": msg_id}))
    return b"".join(lines)


def compact_receipt_log(lines: Iterable[bytes]) -> bytes:
    """A sender's receipt log in fewer lines, for `verify_chain` as good as the whole: per stream a
    checkpoint at the end of the prefix of receipts that follow each other (positions 1…k, each
    chaining the one before), with how many of them were `handled` and the highest id the log ever
    named (ids are never given twice), then every receipt after k. A break stays in the log."""
    streams: dict[str, dict] = {}
    for line in lines:
        try:
            kind, obj = next(iter(json.loads(line).items()))
            st = streams.setdefault(obj["stream"], {"index": 0, "mac": ZERO_MAC.hex(), "handled": 0, "maxId": 0,
                                                    "receipts": {}})
            if kind == "checkpoint":
                st.update(index=int(obj["index"]), mac=obj["mac"], handled=int(obj.get("handled", 0)))
                st["maxId"] = max(st["maxId"], int(obj.get("maxId", 0)))
            elif kind == "receipt":
                st["receipts"][int(obj["index"])] = obj
                st["maxId"] = max(st["maxId"], int(obj["id"]))
            elif kind == "expired":
                st["maxId"] = max(st["maxId"], int(obj["id"]))
        except (ValueError, TypeError, KeyError, AttributeError, StopIteration):
            continue
    out = []
    for stream, st in streams.items():
        receipts = st["receipts"]
        while st["index"] + 1 in receipts and receipts[st["index"] + 1].get("prev") == st["mac"]:
            r = receipts.pop(st["index"] + 1)
            st.update(index=r["index"], mac=r["mac"], handled=st["handled"] + (r.get("status") == "handled"))
        for index in [i for i in receipts if i <= st["index"]]:
            del receipts[index]  # the same receipt again
        out.append(ledger_line("checkpoint", {"stream": stream, "index": st["index"], "mac": st["mac"],
                                              "handled": st["handled"], "maxId": st["maxId"]}))
        out += [ledger_line("receipt", receipts[i]) for i in sorted(receipts)]
    return b"".join(out)


# ----------------------------------------------------------------------------- outbox entries
OUTBOX_MAGIC = b"SPEED-OUTBOX-V1\n"


def seal_outbox_entry(meta: dict, body: bytes, key: Key, nonce: bytes) -> bytes:
    """magic, one JSON line of metadata (readable without the key: what waits where), then the
    payload sealed with ChaCha20-Poly1305 (the metadata line is its associated data)."""
    line = json.dumps(meta, separators=(",", ":"), sort_keys=True).encode() + b"\n"
    sealed = aead.encrypt(body, OUTBOX_MAGIC + line, nonce, key.raw)
    return OUTBOX_MAGIC + line + nonce + sealed


def outbox_meta(data: bytes) -> dict:
    """The metadata line of an outbox entry; ValueError when it is not one."""
    if not data.startswith(OUTBOX_MAGIC):
        raise ValueError("not an outbox entry")
    end = data.find(b"\n", len(OUTBOX_MAGIC))
    if end < 0:
        raise ValueError("truncated outbox entry")
    meta = json.loads(data[len(OUTBOX_MAGIC):end])
    if not isinstance(meta, dict) or not is_stream(meta.get("stream")) or not isinstance(meta.get("id"), int):
        raise ValueError("not an outbox entry")
    return meta


def open_outbox_entry(data: bytes, key: Key) -> tuple[dict, bytes]:
    meta = outbox_meta(data)
    end = data.index(b"\n", len(OUTBOX_MAGIC)) + 1
    body = aead.decrypt(bytes(data[end + 12:]), bytes(data[:end]), bytes(data[end:end + 12]), key.raw)
    if body is None:
        raise ValueError("the outbox entry does not open with this key (altered, or another key)")
    return meta, body

