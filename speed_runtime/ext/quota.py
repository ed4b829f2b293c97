"""The `quota` extension on a node (docs/PROTOCOL.md "Extensions (§9)" › `quota`): flow control
and threat scores. The arithmetic is pure, in core/quota.py and core/threat.py; this is the glue.

As a receiver the node publishes its per-sender limits in its registry entry (`"quota": {...}`)
and keeps a threat score per sender, raised only by envelopes that authenticated as that sender
(the receiver calls `on_rejected` for nothing else): a sender whose score reaches the threshold is
quarantined (its files are removed unread, journaled `quarantined`) until the score decays below
the release level or the operator lifts it (`Node.lift_quarantine`).

As a sender, towards every target whose entry advertises `quota`, it never has more of its
envelopes in that target's inbox than the target allows: before a MESSAGE or an SPC_REQUEST it
prunes its ledger (one `stat` of the oldest file it delivered, by name) and waits, releasing the
link's lock, until there is room — at most the send's timeout, not at all for a non-blocking send.
Its own pacing (`send_rate`, per target `targets`) and a rate the target publishes are token
buckets: a send waits for a token, it is never dropped.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from ..core.entry import RegistryEntry
from ..core.envelope import EnvelopeType, parse_filename
from ..core.errors import NodeUnavailableError
from ..core.names import is_valid_name
from ..core.quota import (FEATURE, PENDING, PENDING_BYTES, RATE, Ledger, Limits, QuotaExceededError,
                          QuotaSettings, TokenBucket, entry_limits)
from ..core.records import ThreatTrace
from ..core.threat import LATE_RESPONSE, QUARANTINED, ThreatPolicy, ThreatState, ThreatTable
from ..node.context import ExtensionHost
from ..node.hooks import Extension

log = logging.getLogger("speed_runtime")

QUARANTINED_REASON = "quarantined"
PUBLISHED_THREATS = 32        # names in the entry's counters (quarantined first, then the highest scores)
_GATED = (int(EnvelopeType.MESSAGE), int(EnvelopeType.SPC_REQUEST))  # what may wait; answers never do
_FIRST_PAUSE, _LONGEST_PAUSE = 0.0005, 0.01   # a waiting send looks again after these (doubling)
_FULL_PRUNE_SECONDS = 0.05    # while waiting, every ledger name is looked up at most this often


class Quota(Extension):
    name = FEATURE

    def __init__(self, host: ExtensionHost):
        super().__init__(host)
        self.settings = QuotaSettings.from_options(host.config.quota)
        self.gate = SendGate(host, self.settings)
        self.guard = Quarantine(host, ThreatPolicy.from_options(host.config.threat))
        # in the counters from the node's first entry on (extensions start after it registered)
        host.telemetry.sections["threat"] = self.guard.published

    # -------------------------------------------------------------- hooks

    def entry_fields(self) -> dict[str, Any]:
        return {"quota": self.settings.published()}

    def admit(self, sender: str, name: str) -> str | None:
        return self.guard.admit(sender)

    def on_rejected(self, sender: str, name: str, reason: str, detail: str) -> None:
        self.guard.rejected(sender, name, reason, detail)

    def admit_send(self, target: str, entry: RegistryEntry, etype: int, size: int, wait: float | None,
                   lock: threading.Lock) -> RegistryEntry:
        if wait is None or etype not in _GATED:
            return entry
        return self.gate.admit(target, entry, size, wait, lock)

    def delivered(self, target: str, entry: RegistryEntry, filename: str, size: int) -> None:
        self.gate.delivered(target, entry, filename, size)

    # -------------------------------------------------------------- API
    def threats(self) -> list[ThreatState]:
        """Every sender name with a score, quarantined first, then by score."""
        return self.guard.states()

    def lift(self, sender: str) -> bool:
        return self.guard.lift(sender)

    def pending(self, target: str) -> tuple[int, int]:
        """(envelopes, bytes) of ours that may still be in `target`'s inbox, as last looked up."""
        return self.gate.pending(target)


# ============================================================================ sending
class SendGate:
    """Per target: the ledger of our files in its inbox, and the token buckets of its published
    rate and of our own pacing. Called with the target's link lock held, so one thread at a time
    works on one target's state."""

    def __init__(self, host: ExtensionHost, settings: QuotaSettings):
        self.settings = settings
        self._host, self._name, self._root, self._telemetry = host, host.name, host.root, host.telemetry
        self._lock = threading.Lock()
        self._ledgers: dict[str, Ledger] = {}
        self._buckets: dict[tuple[str, str], TokenBucket] = {}   # (target, "published" | "own")
        self._limits: dict[str, tuple[RegistryEntry, Limits | None]] = {}
        self._pruned_all: dict[str, float] = {}

    def _limits_of(self, target: str, entry: RegistryEntry) -> Limits | None:
        cached = self._limits.get(target)
        if cached is not None and cached[0] is entry:
            return cached[1]
        limits = entry_limits(entry.features, entry.extra, self._name)
        self._limits[target] = (entry, limits)
        return limits

    def _ledger(self, target: str) -> Ledger:
        ledger = self._ledgers.get(target)
        if ledger is None:
            with self._lock:
                ledger = self._ledgers.setdefault(target, Ledger())
        return ledger

    def _present(self, target: str):
        inbox = os.path.join(self._root, target, "inbox")

        def present(name: str) -> bool:
            try:
                os.stat(os.path.join(inbox, name), follow_symlinks=False)
            except FileNotFoundError:
                return False
            except OSError:
                return True  # cannot tell: count it (a wait is bounded, an overrun is not)
            return True
        return present

    def admit(self, target: str, entry: RegistryEntry, size: int, wait: float, lock: threading.Lock) -> RegistryEntry:
        deadline = time.monotonic() + wait
        pause, waited = _FIRST_PAUSE, False
        while True:
            now = time.monotonic()
            limits = self._limits_of(target, entry)
            blocked, delay = self._room(target, limits, size, now)
            if blocked is None:
                if waited:
                    self._telemetry.count("quotaWaits")
                return entry
            if now >= deadline:
                self._telemetry.count("quotaRefusals")
                raise QuotaExceededError(self._refusal(target, limits, blocked, size, wait), target=target,
                                         limit=blocked)
            waited = True
            lock.release()  # other threads may send to other targets, or find room first
            try:
                time.sleep(min(deadline - now, max(pause, delay)))
            finally:
                lock.acquire()
            pause = min(2 * pause, _LONGEST_PAUSE)
            current = self._host.live_entry(target)   # refuses a target that left or died meanwhile
            if current.id != entry.id:
                raise NodeUnavailableError(target, "it restarted while this send waited for room in its inbox; "
                                                   "nothing was sent")
            self._host.check_grant(target, current)
            entry = current

    def _room(self, target: str, limits: Limits | None, size: int, now: float) -> tuple[str | None, float]:
        """(None, 0) and a token taken when the envelope may go now; else (the limit, seconds to
        wait at least)."""
        if limits is not None:
            ledger = self._ledger(target)
            blocked = ledger.blocking_limit(limits, size)
            if blocked is not None:
                present = self._present(target)
                ledger.prune_front(present)
                blocked = ledger.blocking_limit(limits, size)
                if blocked is not None and now - self._pruned_all.get(target, -1.0) >= _FULL_PRUNE_SECONDS:
                    self._pruned_all[target] = now
                    ledger.prune_all(present)
                    blocked = ledger.blocking_limit(limits, size)
                if blocked is not None:
                    return blocked, 0.0
        buckets = self._buckets_for(target, limits)
        now_ms = now * 1000.0
        delay_ms = max((bucket.delay_ms(now_ms) for bucket in buckets), default=0.0)
        if delay_ms > 0:
            return RATE, delay_ms / 1000.0
        for bucket in buckets:
            bucket.take(now_ms)
        return None, 0.0

    def _buckets_for(self, target: str, limits: Limits | None) -> list[TokenBucket]:
        out = []
        for source, pace in (("published", limits and limits.rate and (limits.rate, limits.burst)),
                             ("own", self.settings.pacing(target))):
            key = (target, source)
            bucket = self._buckets.get(key)
            if not pace:
                if bucket is not None:
                    del self._buckets[key]
                continue
            if bucket is None:
                bucket = self._buckets[key] = TokenBucket(*pace)
            elif (bucket.rate, bucket.burst) != pace:
                bucket.retune(*pace)
            out.append(bucket)
        return out

    def delivered(self, target: str, entry: RegistryEntry, filename: str, size: int) -> None:
        limits = self._limits_of(target, entry)
        if limits is None:
            return  # a v1-only target (or one that publishes no limits): nothing to account for
        ledger = self._ledger(target)
        ledger.add(filename, size)
        if len(ledger) > limits.pending:  # answers never wait, but their names must not pile up
            ledger.prune_front(self._present(target))

    def pending(self, target: str) -> tuple[int, int]:
        ledger = self._ledgers.get(target)
        return (0, 0) if ledger is None else (len(ledger), ledger.bytes)

    def _refusal(self, target: str, limits: Limits | None, limit: str, size: int, wait: float) -> str:
        me = self._name
        how = f"waited {wait:.3g} s" if wait > 0 else "non-blocking send"
        if limit == PENDING:
            why = (f"{limits.pending} envelopes from {me} are still in its inbox, the most {target} allows "
                   f"(quota limit 'pending')")
        elif limit == PENDING_BYTES:
            ledger = self._ledger(target)
            why = (f"{len(ledger)} envelopes from {me} holding {ledger.bytes} bytes are still in its inbox and "
                   f"this one has {size}; {target} allows {limits.pending_bytes} bytes (quota limit 'pendingBytes')")
        else:
            rates = [f"{target} allows {limits.rate:g} envelopes per second"] if limits and limits.rate else []
            own = self.settings.pacing(target)
            if own:
                rates.append(f"this node paces its sends to {target} at {own[0]:g} per second")
            why = f"{' and '.join(rates)} (quota limit 'rate')"
        return f"cannot send to {target} now: {why}; nothing was sent ({how})"


# ============================================================================ receiving: threat scores
class Quarantine:
    """The receiver's threat table, its reports (journal, observers, log) and its release timer."""

    def __init__(self, host: ExtensionHost, policy: ThreatPolicy):
        self._host, self._name, self._telemetry = host, host.name, host.telemetry
        self.table = ThreatTable(policy)
        self._lock = threading.Lock()
        self._release_at: float | None = None

    def admit(self, sender: str) -> str | None:
        """On the protocol thread, before an allowed sender's file is opened."""
        with self._lock:
            quarantined, change = self.table.check(sender, time.monotonic())
        if change is not None:
            self._report([change])
        return QUARANTINED_REASON if quarantined else None

    def rejected(self, sender: str, name: str, reason: str, detail: str) -> None:
        """An envelope that authenticated as `sender` was rejected (the receiver's `on_rejected`)."""
        if reason == QUARANTINED_REASON or not is_valid_name(sender):
            return  # unread files are no evidence (and a name that cannot be a sender never authenticates)
        if reason == "unexpected_response" and detail == "late":
            reason = LATE_RESPONSE
        parsed = parse_filename(name)
        with self._lock:
            changes = self.table.rejected(sender, parsed.id8 if parsed else "", reason, time.monotonic())
        self._report(changes)

    def lift(self, sender: str) -> bool:
        with self._lock:
            change = self.table.lift(sender, time.monotonic())
        if change is None:
            return False
        self._report([change])
        return True

    def states(self) -> list[ThreatState]:
        with self._lock:
            return self.table.states(time.monotonic())

    def published(self) -> dict[str, Any]:
        """The `threat` part of the counters in the registry entry."""
        with self._lock:
            states = self.table.states(time.monotonic(), PUBLISHED_THREATS)
        return {state.name: state.to_json() for state in states}

    def _report(self, changes: list) -> None:
        telemetry, policy = self._telemetry, self.table.policy
        for change in changes:
            if change.event == QUARANTINED:
                telemetry.count("quarantines")
                log.warning("node %s: quarantined sender %s (threat score %.0f after %s, threshold %g): its files "
                            "are removed unread until the score decays below %g", self._name, change.name,
                            change.score, change.reason, policy.threshold, policy.release)
                self._schedule_release()
            elif change.event in ("released", "lifted"):
                log.warning("node %s: sender %s is no longer quarantined (%s)", self._name, change.name,
                            "the operator lifted it" if change.event == "lifted" else "its score decayed")
            if telemetry.observers:  # stamped with when it happened (the table's clock is time.monotonic)
                ts = time.time() - max(0.0, time.monotonic() - change.at)
                telemetry.emit(ThreatTrace(ts, self._name, change.name, change.event, change.score,
                                           change.instance, change.reason))

    def _schedule_release(self) -> None:
        """Have the deadline thread end each quarantine when its score has decayed, even if the
        sender sends nothing more."""
        with self._lock:
            at = self.table.next_release()
            if at is None or (self._release_at is not None and self._release_at <= at):
                return
            self._release_at = at
        self._host.at(at, self._release_due)

    def _release_due(self) -> None:
        with self._lock:
            self._release_at = None
            changes = self.table.release_due(time.monotonic())
        self._report(changes)
        self._schedule_release()


EXTENSION = Quota
