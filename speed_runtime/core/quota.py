"""The `quota` extension's arithmetic (docs/PROTOCOL.md "Extensions (§9)" › `quota`). Pure: time,
entries and file facts are arguments.

A receiver that speaks `quota` publishes per-sender limits in its registry entry:

    "quota": {"pending": 64, "pendingBytes": 4194304, "rate": 200, "burst": 50,
              "senders": {"bulk": {"pending": 256}}}

and every sender that honours them keeps, per target, a ledger of the envelopes it delivered into
that target's inbox whose files may still be there. An envelope file that has left the inbox was
consumed (taken by its handler, rejected, withdrawn): the sender learns it by looking up the names
it wrote itself (never by listing the inbox). Before delivering a MESSAGE or an SPC_REQUEST the
sender requires room: fewer than `pending` of its envelopes in the inbox, and their bytes plus the
new envelope's within `pendingBytes` (one envelope always fits an empty ledger); and a token of the
rate's bucket when a rate is published. Answers (SPC_RESPONSE, ACK, ERROR, HEARTBEAT, EVENT) never
wait: they are bounded by the peer's own requests. They are recorded in the ledger like the rest.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple

from .entry import entry_integer, entry_number
from .errors import ConfigError, DeliveryError

FEATURE = "quota"
FIELD = "quota"                     # the registry field
MAX_PENDING = 65_536                # published values above these are clamped
MAX_PENDING_BYTES = 2 ** 53
MAX_RATE = 1_000_000.0
MAX_BURST = 65_536
DEFAULT_PENDING = 64
DEFAULT_PENDING_BYTES = 4 * 1024 * 1024
MAX_SENDER_OVERRIDES = 256          # keeps the entry well within its 64 KiB
PENDING, PENDING_BYTES, RATE = "pending", "pendingBytes", "rate"   # the limits, as errors name them


class QuotaExceededError(DeliveryError):
    """A send found no room under the target's published limits (or this node's own rate) in
    time, or at once in non-blocking mode; nothing was delivered. `limit` is "pending",
    "pendingBytes" or "rate"."""

    def __init__(self, message: str, *, target: str, limit: str):
        super().__init__(message)
        self.target, self.limit = target, limit


class Limits(NamedTuple):
    """What one sender may have in one target's inbox, and how fast it may add to it."""

    pending: int
    pending_bytes: int
    rate: float | None = None     # envelopes per second
    burst: int | None = None      # bucket size; set whenever rate is

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pending": self.pending, "pendingBytes": self.pending_bytes}
        if self.rate is not None:
            out["rate"], out["burst"] = self.rate, self.burst
        return out


# ----------------------------------------------------------------------------- reading an entry
def _integer(value: Any, cap: int) -> int | None:
    """An entry's integer (core.entry's rule: `64.0` is 64) of at least 1, clamped to cap; else None."""
    value = entry_integer(value)
    return None if value is None or value < 1 else min(value, cap)


def _rate(value: Any) -> float | None:
    value = entry_number(value)
    return min(value, MAX_RATE) if value is not None and value > 0 else None


def default_burst(rate: float) -> int:
    """One second's worth of envelopes, at least one."""
    return int(max(1, min(MAX_BURST, math.floor(rate))))


def limits_for(published: Any, sender: str) -> Limits | None:
    """The limits a receiver's `quota` field sets for `sender`; None when it sets none (the field
    is missing or not an object, or lacks a valid `pending` or `pendingBytes`)."""
    if not isinstance(published, dict):
        return None
    pending = _integer(published.get("pending"), MAX_PENDING)
    pending_bytes = _integer(published.get("pendingBytes"), MAX_PENDING_BYTES)
    if pending is None or pending_bytes is None:
        return None
    rate, burst = _rate(published.get("rate")), _integer(published.get("burst"), MAX_BURST)
    senders = published.get("senders")
    override = senders.get(sender) if isinstance(senders, dict) else None
    if isinstance(override, dict):
        pending = _integer(override.get("pending"), MAX_PENDING) or pending
        pending_bytes = _integer(override.get("pendingBytes"), MAX_PENDING_BYTES) or pending_bytes
        rate = _rate(override.get("rate")) or rate
        burst = _integer(override.get("burst"), MAX_BURST) or burst
    if rate is None:
        return Limits(pending, pending_bytes)
    return Limits(pending, pending_bytes, rate, burst if burst is not None else default_burst(rate))


def entry_limits(features: tuple[str, ...], extra: Mapping[str, Any], sender: str) -> Limits | None:
    """Limits of a registry entry (its `features` and unknown fields) for `sender`: only an entry
    that advertises `quota` sets any."""
    return limits_for(extra.get(FIELD), sender) if FEATURE in features else None


# ----------------------------------------------------------------------------- the ledger
class Ledger:
    """One sender's envelopes in one target's inbox that may not have been consumed yet, oldest
    first: (file name, file size). Pruned by asking `present(name)` about the names it holds."""

    def __init__(self) -> None:
        self._files: deque[tuple[str, int]] = deque()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._files)

    def names(self) -> list[str]:
        return [name for name, _ in self._files]

    def add(self, name: str, size: int) -> None:
        self._files.append((name, size))
        self.bytes += size

    def prune_front(self, present: Callable[[str], bool]) -> None:
        """Forget consumed files from the oldest on, up to the first still present: receivers
        take a sender's files in sequence order, so this is usually exact and costs one lookup."""
        files = self._files
        while files and not present(files[0][0]):
            self.bytes -= files.popleft()[1]

    def prune_all(self, present: Callable[[str], bool]) -> None:
        """Forget every consumed file (an SPC request still waiting for its service may keep an
        older file in the inbox while later ones are gone)."""
        kept = deque(item for item in self._files if present(item[0]))
        self._files, self.bytes = kept, sum(size for _, size in kept)

    def blocking_limit(self, limits: Limits, size: int) -> str | None:
        """None when one more envelope of `size` bytes fits; else the limit it would break."""
        if len(self._files) + 1 > limits.pending:
            return PENDING
        if self._files and self.bytes + size > limits.pending_bytes:
            return PENDING_BYTES
        return None


# ----------------------------------------------------------------------------- the rate
@dataclass
class TokenBucket:
    """`rate` tokens per second, at most `burst` saved; full at first use. Times are in
    milliseconds (any monotonic origin). Delays, never drops: `delay_ms` says how long to wait."""

    rate: float
    burst: int
    tokens: float = field(init=False)
    last_ms: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.tokens = float(self.burst)

    def _refill(self, now_ms: float) -> None:
        if self.last_ms is None:
            self.last_ms = now_ms
        elif now_ms > self.last_ms:
            self.tokens = min(float(self.burst), self.tokens + (now_ms - self.last_ms) * self.rate / 1000.0)
            self.last_ms = now_ms

    def delay_ms(self, now_ms: float) -> float:
        """0 when a token is there now, else how long until one is."""
        self._refill(now_ms)
        return 0.0 if self.tokens >= 1.0 else math.ceil((1.0 - self.tokens) * 1000.0 / self.rate)

    def take(self, now_ms: float) -> bool:
        """Take a token if there is one now."""
        if self.delay_ms(now_ms) > 0:
            return False
        self.tokens -= 1.0
        return True

    def retune(self, rate: float, burst: int) -> None:
        """New published values: keep the saved tokens (within the new burst)."""
        self.rate, self.burst = rate, burst
        self.tokens = min(self.tokens, float(burst))


# ----------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class QuotaSettings:
    """`Node(..., features=["quota"], quota={...})`. As a receiver: the limits published for every
    sender (`pending`, `pending_bytes`, optional `rate`/`burst`) and per-sender overrides
    (`senders`). As a sender: its own pacing towards every target (`send_rate`/`send_burst`) and
    per target (`targets`), applied on top of what receivers publish."""

    pending: int = DEFAULT_PENDING
    pending_bytes: int = DEFAULT_PENDING_BYTES
    rate: float | None = None
    burst: int | None = None
    senders: Mapping[str, Limits] = field(default_factory=dict)
    send_rate: float | None = None
    send_burst: int | None = None
    targets: Mapping[str, tuple[float, int]] = field(default_factory=dict)

    @classmethod
    def from_options(cls, options: Any) -> "QuotaSettings":
        if isinstance(options, QuotaSettings):
            return options
        if options is None:
            return cls()
        if not isinstance(options, Mapping):
            raise ConfigError("quota settings must be a mapping such as {'pending': 64, 'rate': 100}")
        known = ("pending", "pending_bytes", "rate", "burst", "senders", "send_rate", "send_burst", "targets")
        _no_unknown("quota", options, known)
        base = _limits("quota", options, Limits(DEFAULT_PENDING, DEFAULT_PENDING_BYTES))
        senders = options.get("senders") or {}
        if not isinstance(senders, Mapping) or len(senders) > MAX_SENDER_OVERRIDES:
            raise ConfigError(f"quota 'senders' must map at most {MAX_SENDER_OVERRIDES} node names to limits")
        overrides = {}
        for name, values in senders.items():
            if not isinstance(values, Mapping):
                raise ConfigError(f"quota limits for sender {name!r} must be a mapping")
            _no_unknown(f"quota for sender {name!r}", values, ("pending", "pending_bytes", "rate", "burst"))
            overrides[str(name)] = _limits(f"quota for sender {name!r}", values, base)
        send_rate, send_burst = _pace("quota", options.get("send_rate"), options.get("send_burst"))
        targets = {}
        for name, values in (options.get("targets") or {}).items():
            if not isinstance(values, Mapping):
                raise ConfigError(f"quota pacing for target {name!r} must be a mapping such as {{'rate': 10}}")
            _no_unknown(f"quota pacing for target {name!r}", values, ("rate", "burst"))
            rate, burst = _pace(f"quota pacing for target {name!r}", values.get("rate"), values.get("burst"))
            if rate is None:
                raise ConfigError(f"quota pacing for target {name!r} needs a rate")
            targets[str(name)] = (rate, burst)
        return cls(base.pending, base.pending_bytes, base.rate, base.burst, overrides, send_rate, send_burst, targets)

    def published(self) -> dict[str, Any]:
        """The registry field."""
        out = Limits(self.pending, self.pending_bytes, self.rate, self.burst).to_json()
        if self.senders:
            out["senders"] = {name: limits.to_json() for name, limits in self.senders.items()}
        return out

    def pacing(self, target: str) -> tuple[float, int] | None:
        """This node's own rate towards `target` (per target, else for every target), if any."""
        if target in self.targets:
            return self.targets[target]
        return None if self.send_rate is None else (self.send_rate, self.send_burst)


def _no_unknown(what: str, options: Mapping, known: tuple[str, ...]) -> None:
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ConfigError(f"unknown {what} setting {unknown[0]!r}; the settings are: {', '.join(known)}")


def _limits(what: str, options: Mapping, base: Limits) -> Limits:
    pending = options.get("pending", base.pending)
    pending_bytes = options.get("pending_bytes", base.pending_bytes)
    if _integer(pending, MAX_PENDING) != pending:
        raise ConfigError(f"{what}: pending must be a whole number from 1 to {MAX_PENDING}, not {pending!r}")
    if _integer(pending_bytes, MAX_PENDING_BYTES) != pending_bytes:
        raise ConfigError(f"{what}: pending_bytes must be a whole number of bytes of at least 1, "
                          f"not {pending_bytes!r}")
    if "rate" in options or "burst" in options:
        rate, burst = _pace(what, options.get("rate"), options.get("burst"))
    else:
        rate, burst = base.rate, base.burst
    return Limits(int(pending), int(pending_bytes), rate, burst)


def _pace(what: str, rate: Any, burst: Any) -> tuple[float | None, int | None]:
    if rate is None:
        if burst is not None:
            raise ConfigError(f"{what}: a burst needs a rate")
        return None, None
    if _rate(rate) != rate or rate > MAX_RATE:
        raise ConfigError(f"{what}: rate must be a number of envelopes per second above 0 and at most "
                          f"{MAX_RATE:g}, not {rate!r}")
    if burst is None:
        return float(rate), default_burst(rate)
    if _integer(burst, MAX_BURST) != burst:
        raise ConfigError(f"{what}: burst must be a whole number from 1 to {MAX_BURST}, not {burst!r}")
    return float(rate), int(burst)
