"""Every setting of a Node, with its default and its bounds, checked once at construction."""
from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, fields
from typing import Any

from ..core.envelope import DEFAULT_MAX_PAYLOAD
from ..core.errors import ConfigError
from ..core.liveness import MAX_LEASE_SECONDS
from ..core.names import validate_name
from ..core.quota import QuotaSettings
from ..core.replay import DEFAULT_MAX_GAP
from ..core.threat import ThreatPolicy


@dataclass(frozen=True)
class NodeConfig:
    groups: tuple[str, ...] = ()
    allow: tuple[str, ...] = ()
    lease_seconds: float = 30.0
    heartbeat_seconds: float = 5.0
    trace: bool = False
    journal_max_bytes: int = 64 * 1024 * 1024
    max_payload: int = DEFAULT_MAX_PAYLOAD
    replay_window: float = 60.0
    max_gap: int = DEFAULT_MAX_GAP             # §5.5 step 5: larger sequence jumps are bad_sequence
    rescan_seconds: float = 1.0                # inbox rescan, the backstop of inotify
    registry_rescan_seconds: float = 5.0       # registry rescan: one stat per entry, reads only changes
    orphan_seconds: float = 30.0               # temporaries older than this are a crashed writer's
    reap_stale: bool = True                    # remove other nodes' stale entries…
    reap_grace_seconds: float = 60.0           # …once they have been stale this long
    trusted_uids: frozenset[int] | None = None  # owners of inbox files we read (default: our euid)
    lane_workers: int = 4                      # threads running message handlers (one sender at a time each)
    spc_workers: int = 16                      # services running at once, in all
    service_concurrency: int = 4               # services running at once, per service
    read_ahead: int = 32                       # envelopes taken from the inbox per sender before handled
    read_ahead_total: int = 256                # … and from all senders together
    read_ahead_bytes: int = 64 * 1024 * 1024   # what they cost decoded (payloads.decoded_cost), from all senders…
    read_ahead_bytes_per_sender: int = 16 * 1024 * 1024  # …and per sender
    spc_waiting_bytes: int = 64 * 1024 * 1024  # what the requests waiting for a service's worker cost decoded
    linger_seconds: float = 10.0               # on close: wait for receivers to take what we delivered
    drain_seconds: float = 30.0                # on close: the most time spent handling what is left in the inbox
    stop_grace_seconds: float = 5.0            # on close: the most time to wait for running services
    lock_timeout: float = 10.0                 # registry lock wait (§4.2)
    observe_registry: bool = True              # follow every entry (joins, expiries); off for one-shot CLI nodes
    temporary: bool = False                    # remove the node's home directory on close (CLI nodes)
    features: tuple[str, ...] = ()             # extensions of the contract (§9) this node enables
    operators: tuple[str, ...] = ()            # control: trusted operator public keys (enables `control`)
    # chunks (ext/chunks.py, docs/PROTOCOL.md "### chunks")
    max_message: int = 64 * 1024 * 1024        # largest message, SPC argument or result sent or accepted
    chunk_size: int = 1024 * 1024              # most body bytes per chunk (the receiver's envelope limit bounds it too)
    chunk_timeout: float = 30.0                # a message whose next chunk does not come within this is voided
    reassembly_bytes: int = 256 * 1024 * 1024  # reserved for messages being reassembled or handled, in all…
    reassembly_bytes_per_sender: int = 128 * 1024 * 1024  # …and per sender
    # reliable (ext/reliable.py, docs/PROTOCOL.md "### reliable")
    ack_timeout: float = 5.0                   # acknowledgementTimeoutMs: first wait for an acknowledgement
    max_retransmissions: int = 5               # then send-error
    retransmission_backoff: float = 2.0        # each wait this many times the one before…
    max_retransmission_interval: float = 30.0  # …up to this
    reliable_pending_bytes: int = 256 * 1024 * 1024  # unacknowledged bytes kept for retransmission (sends wait)…
    reliable_window: int = 1024                # …and unacknowledged messages (so a queue never outgrows the schedule)
    reliable_remember: int = 100_000           # reliable message ids a receiver remembers (duplicate suppression)
    quota: QuotaSettings | None = None         # `quota`: limits published, own pacing (core/quota.py)
    threat: ThreatPolicy | None = None         # `quota`: threat scores and quarantine (core/threat.py)
    durable: bool = False                      # enable the `durable` extension (same as features=["durable"])
    durable_on_tmpfs: bool = False             # durable on tmpfs anyway (a loud warning: lost at reboot)
    durable_ttl: float = 86_400.0              # durable: default time-to-live of a message
    durable_retry_seconds: float = 2.0         # durable: first retry of a copy without receipt (doubling, ≤ 60 s)
    outbox_limit: int = 10_000                 # durable: messages waiting in this node's outbox, at most
    outbox_max_bytes: int = 256 * 1024 * 1024  # durable: … and their payload bytes
    durable_open_ledgers: int = 32             # durable: senders' ledger logs open at once (least recently used closed)

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> "NodeConfig":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise ConfigError(f"unknown Node option {unknown[0]!r}; the options are: {', '.join(sorted(names))}")
        values = dict(options)
        for key in ("groups", "allow", "features", "operators"):
            if key in values:
                values[key] = tuple(dict.fromkeys(values[key]))
        if values.get("operators"):  # trusting an operator is the `control` extension
            values["features"] = tuple(dict.fromkeys((*values.get("features", ()), "control")))
        if values.get("durable") and "durable" not in values.get("features", ()):
            values["features"] = (*values.get("features", ()), "durable")
        if values.get("trusted_uids") is not None:
            values["trusted_uids"] = frozenset(values["trusted_uids"])
        if values.get("quota") is not None:
            values["quota"] = QuotaSettings.from_options(values["quota"])
        if values.get("threat") is not None:
            values["threat"] = ThreatPolicy.from_options(values["threat"])
        config = cls(**values)
        config.validate()
        return config

    def validate(self) -> None:
        _positive("lease_seconds", self.lease_seconds, MAX_LEASE_SECONDS)
        _positive("heartbeat_seconds", self.heartbeat_seconds, MAX_LEASE_SECONDS)
        if not self.heartbeat_seconds < self.lease_seconds:
            raise ConfigError("the heartbeat interval must be shorter than the lease")
        for name in ("replay_window", "rescan_seconds", "registry_rescan_seconds", "orphan_seconds",
                     "lock_timeout", "chunk_timeout", "ack_timeout", "max_retransmission_interval",
                     "durable_retry_seconds"):
            _positive(name, getattr(self, name), 86_400.0)
        for name in ("reap_grace_seconds", "linger_seconds", "drain_seconds", "stop_grace_seconds"):
            _non_negative(name, getattr(self, name))
        _positive("durable_ttl", self.durable_ttl, 30 * 86_400.0)
        for name in ("max_payload", "lane_workers", "spc_workers", "service_concurrency", "read_ahead",
                     "read_ahead_total", "read_ahead_bytes", "read_ahead_bytes_per_sender", "spc_waiting_bytes",
                     "journal_max_bytes", "max_message", "chunk_size", "reassembly_bytes",
                     "reassembly_bytes_per_sender", "reliable_pending_bytes", "reliable_remember", "reliable_window",
                     "outbox_limit", "outbox_max_bytes", "durable_open_ledgers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, not {value!r}")
        for name in ("max_gap", "max_retransmissions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be a non-negative integer, not {value!r}")
        _positive("retransmission_backoff", self.retransmission_backoff, 100.0)
        if self.retransmission_backoff < 1:
            raise ConfigError(f"retransmission_backoff must be at least 1, not {self.retransmission_backoff!r}")
        for name in self.allow:
            validate_name(name)
        for name in ("quota", "threat"):
            if getattr(self, name) is not None and "quota" not in self.features:
                raise ConfigError(f"{name} settings belong to the quota extension: add features=['quota']")

    @functools.cached_property
    def uids(self) -> frozenset[int]:
        """The owners whose inbox files are read (§5.5 step 2); asked for every file, so computed once."""
        return self.trusted_uids if self.trusted_uids is not None else frozenset({os.geteuid()})


def _positive(name: str, value: Any, most: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 < value <= most:
        raise ConfigError(f"{name} must be a number of seconds above 0 and at most {most:g}, not {value!r}")


def _non_negative(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name} must be a finite number of seconds, 0 or more, not {value!r}")

