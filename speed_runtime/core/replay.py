"""Replay protection (wire contract §5.5 step 5). Pure: time is an argument.

State is kept per sender instance (the 16-byte source node ID): the last accepted sequence
number and the gaps seen. A gap (envelopes skipped over) is accepted and counted up to `max_gap`
(65,536 by default, contract 1.1); a larger jump is `bad_sequence`, so one forged envelope with a
huge sequence number cannot make a link's genuine envelopes look replayed. For a sender instance
not seen before, the last accepted sequence is 0. Nonces are remembered for as long as an envelope carrying them could
still pass the timestamp check, so memory is bounded by the accepted rate times twice the window.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from .errors import EnvelopeError

DEFAULT_WINDOW_MS = 60_000
DEFAULT_MAX_GAP = 65_536


@dataclass
class SenderState:
    sender: str
    last_seq: int = 0
    accepted: int = 0
    gaps: int = 0
    missing: int = 0  # envelopes skipped over by gaps


@dataclass
class ReplayGuard:
    window_ms: int = DEFAULT_WINDOW_MS
    max_gap: int = DEFAULT_MAX_GAP
    senders: dict[bytes, SenderState] = field(default_factory=dict)
    _nonces: "OrderedDict[bytes, int]" = field(default_factory=OrderedDict)
    _next_prune_ms: int = 0

    def check(self, source_id: bytes, sender: str, seq: int, nonce: bytes, timestamp_ms: int, now_ms: int) -> int:
        """Accept the envelope or raise EnvelopeError; returns the gap (0 when in order)."""
        self._check_time_and_nonce(nonce, timestamp_ms, now_ms)
        state = self.senders.get(source_id)
        last = state.last_seq if state else 0
        if seq <= last:
            raise EnvelopeError("replayed_sequence", f"sequence {seq} is not after {last}")
        gap = seq - last - 1
        if gap > self.max_gap:
            raise EnvelopeError("bad_sequence", f"sequence {seq} skips {gap} envelopes after {last} "
                                                f"(at most {self.max_gap} may be missing)")
        if state is None:
            state = self.senders[source_id] = SenderState(sender)
        if gap:
            state.gaps += 1
            state.missing += gap
        state.last_seq = seq
        state.accepted += 1
        self._remember(nonce, timestamp_ms, now_ms)
        return gap

    def check_window(self, nonce: bytes, timestamp_ms: int, now_ms: int) -> None:
        """The timestamp and nonce checks alone, for an envelope numbered for another receiver
        instance (the durable extension's carried-over copies): accept and remember, or raise."""
        self._check_time_and_nonce(nonce, timestamp_ms, now_ms)
        self._remember(nonce, timestamp_ms, now_ms)

    def _check_time_and_nonce(self, nonce: bytes, timestamp_ms: int, now_ms: int) -> None:
        if abs(now_ms - timestamp_ms) > self.window_ms:
            raise EnvelopeError("stale_timestamp",
                                f"timestamp is {(now_ms - timestamp_ms) / 1000:.1f} s from this node's clock")
        self._prune(now_ms)
        if nonce in self._nonces:
            raise EnvelopeError("replayed_nonce", "this nonce was seen within the replay window")

    def _remember(self, nonce: bytes, timestamp_ms: int, now_ms: int) -> None:
        self._nonces[nonce] = max(timestamp_ms, now_ms) + self.window_ms

    def _prune(self, now_ms: int) -> None:
        if now_ms < self._next_prune_ms:
            return  # at most once per 100 ms: an entry kept a little longer costs nothing
        self._next_prune_ms = now_ms + 100
        nonces = self._nonces
        while nonces:
            oldest, expiry = next(iter(nonces.items()))
            if expiry >= now_ms:
                break
            del nonces[oldest]

    @property
    def remembered_nonces(self) -> int:
        return len(self._nonces)

    def snapshot(self) -> dict[str, dict[str, int | str]]:
        return {
            src.hex(): {"sender": s.sender, "lastSeq": s.last_seq, "accepted": s.accepted,
                        "gaps": s.gaps, "missing": s.missing}
            for src, s in self.senders.items()
        }
