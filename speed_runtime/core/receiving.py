"""The receiver's judgement of one inbox file (wire contract §5.5 steps 1–5), as pure functions
of the file name, the facts of the opened file, its bytes, the node's own identity, the sender's
registry entry, the replay state and the time. The node's protocol thread (`node/receiver.py`)
does the I/O around them: list, open, read, remove, dispatch.

Order (docs/PROTOCOL.md "Order of checks"); only a rejection after step 3's tag, of an envelope
whose header names the sender's registered instance, is `attributable` to the sender:
1. `judge_name`: a name that is not an envelope name, or a sender not in the Access Registry,
   is `unauthorized` and the file is removed unread.
2. `judge_file`: on the open descriptor's facts: not a regular file, foreign owner → `bad_file`;
   then two links and young → deferred (a link()+unlink() delivery in progress); larger than the
   limit → `too_large` (never read); shorter than any envelope → `bad_size`.
3.–5. `judge_envelope`: framing, tag, payload shape, `from`/`to`/IDs, timestamp window, nonce,
   sequence (bounded gaps).
"""
from __future__ import annotations

import stat
from typing import AbstractSet, Any, Callable, NamedTuple

from . import payloads
from .entry import RegistryEntry
from .envelope import (HEADER_SIZE, OVERHEAD, FileName, Header, decode_header, open_envelope, parse_filename,
                       type_name)
from .errors import EnvelopeError
from .keys import Key
from .replay import ReplayGuard

TWO_LINK_GRACE_SECONDS = 2.0
# what open_envelope decides before, or by, the tag: such a file authenticates as nobody
BEFORE_THE_TAG = frozenset({"bad_size", "too_large", "bad_version", "bad_tag"})
DEFER = "defer"  # judge_file's answer for a file to look at again shortly


class FileFacts(NamedTuple):
    """What fstat() on the opened descriptor says."""

    mode: int
    nlink: int
    uid: int
    size: int
    ctime: float


class Identity(NamedTuple):
    name: str
    id_bytes: bytes


class Verdict(NamedTuple):
    """`reason` None means accepted. `type` is the header's type name whenever the header could
    be read (also for rejections, contract §8)."""

    reason: str | None
    type: str
    header: Header | None = None
    payload: dict | None = None
    nonce: bytes = b""
    gap: int = 0
    detail: str = ""
    body: Any = None            # what a payload layout of an extension decoded besides the payload (§9)
    cost: int = 0               # what the decoded payload holds in memory (payloads.decoded_cost), bytes
    finished: Callable[[bool, BaseException | None], None] | None = None  # told when its handling ended
    # a rejection that may count against the file name's sender (threat scores, `quota`): the tag
    # passed and the header's source ID is the instance the sender's entry names (docs/PROTOCOL.md
    # "Order of checks"); False for everything decided before that, whoever the file name claims
    attributable: bool = False

    @property
    def accepted(self) -> bool:
        return self.reason is None


def judge_name(name: str, allowed: AbstractSet[str]) -> tuple[FileName | None, str | None]:
    """Step 1: (parsed name, None) when the file may be read, else (parsed or None, 'unauthorized')."""
    parsed = parse_filename(name)
    if parsed is None or parsed.sender not in allowed:
        return parsed, "unauthorized"
    return parsed, None


def judge_file(facts: FileFacts, now: float, max_size: int, trusted_uids: AbstractSet[int]) -> str | None:
    """Step 2: None when the file may be read; DEFER; or a rejection reason."""
    if not stat.S_ISREG(facts.mode):
        return "bad_file"
    # the owner before the links: a deferred file holds up its claimed sender's later files, and a
    # hard link made by an untrusted writer must not (one every 2 s named for a sender stalled it)
    if facts.uid not in trusted_uids:
        return "bad_file"
    if facts.nlink != 1:
        return DEFER if now - facts.ctime < TWO_LINK_GRACE_SECONDS else "bad_file"
    if facts.size > max_size:
        return "too_large"
    if facts.size < OVERHEAD:
        return "bad_size"
    return None


def header_type(data: bytes) -> str:
    """The header's (unauthenticated) type name, for the record of a rejected file."""
    return type_name(data[1]) if len(data) >= HEADER_SIZE else "UNKNOWN"


Decoder = Callable[[bytes, int, int], tuple[dict, Any, int]]


def decode_v1(plaintext: bytes, etype: int, flags: int) -> tuple[dict, Any, int]:
    return payloads.decode_payload(plaintext, etype), None, payloads.decoded_cost(plaintext)


def judge_envelope(sender: str, data: bytes, key: Key, me: Identity, sender_entry: RegistryEntry | None,
                   replay: ReplayGuard, now_ms: int, max_payload: int, decode: Decoder = decode_v1) -> Verdict:
    """Steps 3–5. On acceptance the replay state records the envelope (and only then).
    A caller whose cached `sender_entry` disagrees with the envelope's source ID (verdict
    `unknown_sender` with detail "source") may read the entry afresh and judge again.
    `decode(plaintext, type, flags)` gives the payload, anything else a payload layout selected
    by a flag bit carries (§9), and what the decoded payload costs in memory (the verdict's `cost`,
    which the receiver's read-ahead counts); the default is v1's, which ignores the flags."""
    etype = header_type(data)
    try:
        opened = open_envelope(data, key, max_payload)
        header = opened.header
        payload, body, cost = decode(opened.payload, header.type, header.flags)
        check_identities(sender, payload, header, me, sender_entry)
        gap = replay.check(header.source_id, sender, header.sequence, opened.nonce, header.timestamp_ms, now_ms)
    except EnvelopeError as exc:
        return Verdict(exc.reason, etype, detail=exc.detail,
                       attributable=exc.reason not in BEFORE_THE_TAG and from_registered_instance(data, sender_entry))
    return Verdict(None, etype, header, payload, opened.nonce, gap, body=body, cost=cost)


def from_registered_instance(data: bytes, sender_entry: RegistryEntry | None) -> bool:
    """Whether an envelope whose tag passed names, in its header, the instance the sender's
    registry entry names: it then authenticates as that sender, and only then can a rejection count
    against the sender."""
    return sender_entry is not None and decode_header(data).source_id == sender_entry.id_bytes


def check_identities(sender: str, payload: dict, header: Header, me: Identity,
                     sender_entry: RegistryEntry | None) -> None:
    """Step 4: `from` is the file name's sender, `to` and the target ID are ours, the source ID is
    the sender's registered instance; else EnvelopeError."""
    if payload["from"] != sender:
        raise EnvelopeError("unknown_sender", "the payload's sender differs from the file name")
    if payload["to"] != me.name or header.target_id != me.id_bytes:
        raise EnvelopeError("wrong_target", "the envelope is for another node or instance")
    if sender_entry is None or sender_entry.id_bytes != header.source_id:
        raise EnvelopeError("unknown_sender", "source")


def stale_source(verdict: Verdict) -> bool:
    """The rejection that a fresher registry entry of the sender might turn around."""
    return verdict.reason == "unknown_sender" and verdict.detail == "source"


def spc_deadline_ms(header: Header, payload: dict) -> int | None:
    """A request's deadline (§5.6): its timestamp plus its `timeoutMs`, Unix milliseconds."""
    timeout = payload.get("timeoutMs")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        return None
    return header.timestamp_ms + int(min(timeout, 2**53))
