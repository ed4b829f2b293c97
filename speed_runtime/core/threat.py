"""Threat scores and quarantine (docs/PROTOCOL.md "Extensions (§9)" › `quota` › threat scores).
Pure: `now` is an argument (seconds on any monotonic clock).

A receiver keeps a score per sender name, and per instance (the 8 hex digits of the instance ID
in the file name). Only a rejection of an envelope that *authenticated* as that sender (its tag
passed under the key and its header names the sender's registered instance) is scored: the caller
(node/receiver.py) never passes anything else, and the reasons decided before authentication have
no weight here at all (NEVER_SCORED: a name in a file name proves nothing). Each scored rejection
adds its reason's weight; scores halve every `half_life` seconds. When a name's score reaches
`threshold` the name is quarantined: its files are removed unread (decided on the file name, like
`unauthorized`) and journaled as `quarantined`, until its score has decayed below `release`. Files
removed while quarantined add nothing (they were not judged), so a quarantine ends by itself; a
sender that misbehaves again after its release starts near `release` and is quarantined again
quickly.

Memory is bounded and every call is O(1) amortized: at most `max_names` names (when full, the
lowest scores are forgotten, an eighth of the table at once, never a quarantined one),
`MAX_INSTANCES` instances per name, `LAST_REASONS` reasons and `BUCKETS` counts of recent
rejections each; the quarantined names are kept apart, so a release looks at them alone.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple

from .errors import ConfigError
from .records import REJECT_REASONS

LATE_RESPONSE = "late_response"  # an unexpected_response answering nothing still pending (late, or unknown)
KNOWN_REASONS = REJECT_REASONS + (LATE_RESPONSE,)  # each is in DEFAULT_WEIGHTS or NEVER_SCORED
DEFAULT_WEIGHTS: Mapping[str, float] = {
    # impossible for a correct sender: tampering, replay or forgery by a key holder
    "bad_sequence": 30.0, "replayed_nonce": 30.0, "replayed_sequence": 30.0, "unexpected_response": 30.0,
    # sealed by the sender's instance, but not a payload of the type's shape
    "bad_payload": 20.0,
    # the payload's `from` is not the name of the sender whose instance sealed it
    "unknown_sender": 5.0,
    # usually innocent: a skewed clock, a caller that gave up
    "stale_timestamp": 2.0, LATE_RESPONSE: 2.0,
    # addressed to a previous instance of ours (left over after our restart): not the sender's fault
    "wrong_target": 0.0,
}
# Decided before the envelope authenticates as anyone (on the file name, the file's facts, the
# framing or the tag), or by the receiver's own state (its grants): anyone who can write into the
# inbox, or an operator's revoke, could make them, so they never count against the named sender.
NEVER_SCORED = ("unauthorized", "bad_file", "too_large", "bad_size", "bad_version", "bad_tag")
EVICT_FRACTION = 8  # a full table forgets the lowest eighth of its names at once (O(1) amortized)
MAX_INSTANCES = 4
LAST_REASONS = 5
BUCKET_SECONDS = 10.0
BUCKETS = 12
NORMAL, QUARANTINED = "normal", "quarantined"
RELEASE_MARGIN = 0.001  # a release is looked for this long after the computed moment (rounding)


@dataclass(frozen=True)
class ThreatPolicy:
    threshold: float = 100.0
    release: float = 50.0
    half_life: float = 60.0        # seconds for a score to halve
    weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    quarantine: bool = True        # False: scores only
    max_names: int = 1024

    @classmethod
    def from_options(cls, options: Any) -> "ThreatPolicy":
        if isinstance(options, ThreatPolicy):
            return options
        if options is None:
            return cls()
        if not isinstance(options, Mapping):
            raise ConfigError("threat settings must be a mapping such as {'threshold': 100, 'half_life': 60}")
        known = ("threshold", "release", "half_life", "weights", "quarantine", "max_names")
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ConfigError(f"unknown threat setting {unknown[0]!r}; the settings are: {', '.join(known)}")
        values = {k: options[k] for k in known if k in options}
        weights = dict(DEFAULT_WEIGHTS)
        for reason, weight in (values.pop("weights", None) or {}).items():
            if reason not in DEFAULT_WEIGHTS and reason not in NEVER_SCORED:
                raise ConfigError(f"no threat weight for {reason!r}; the reasons are: {', '.join(DEFAULT_WEIGHTS)}")
            if not _number(weight) or weight < 0:
                raise ConfigError(f"the threat weight of {reason} must be a number of at least 0, not {weight!r}")
            if reason in NEVER_SCORED:
                if weight:
                    raise ConfigError(f"{reason} cannot weigh against a sender: it is decided before the envelope "
                                      f"authenticates as anyone (only 0 is accepted); the reasons with a weight "
                                      f"are: {', '.join(DEFAULT_WEIGHTS)}")
                continue
            weights[reason] = float(weight)
        if "release" not in values and _number(values.get("threshold")):
            values["release"] = values["threshold"] / 2  # as the defaults (100, 50): a threshold alone is enough
        policy = cls(weights=weights, **values)
        policy.validate()
        return policy

    def validate(self) -> None:
        if not _number(self.threshold) or self.threshold <= 0:
            raise ConfigError(f"the threat threshold must be a number above 0, not {self.threshold!r}")
        if not _number(self.release) or not 0 <= self.release < self.threshold:
            raise ConfigError(f"threat release={self.release!r} must be at least 0 and below threshold="
                              f"{self.threshold:g} (leave release out and it is half the threshold)")
        if not _number(self.half_life) or not 0 < self.half_life <= 86_400:
            raise ConfigError(f"half_life must be a number of seconds above 0 and at most 86400, "
                              f"not {self.half_life!r}")
        if not isinstance(self.quarantine, bool):
            raise ConfigError(f"quarantine must be true or false, not {self.quarantine!r}")
        if isinstance(self.max_names, bool) or not isinstance(self.max_names, int) or self.max_names < 1:
            raise ConfigError(f"max_names must be a positive whole number, not {self.max_names!r}")


def _number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


class ThreatChange(NamedTuple):
    """A change to report (journal, observers): `raised` by a rejection, `quarantined`,
    `released` (decayed below the release level), `lifted` (by the operator)."""

    name: str
    instance: str
    event: str
    score: float
    reason: str = ""
    at: float = 0.0  # when it happened, on the table's clock (a report made later still says when)


class ThreatState(NamedTuple):
    """One sender name as the receiver sees it now (scores decayed to `now`)."""

    name: str
    score: float
    state: str                      # "normal" | "quarantined"
    since: float | None             # when the quarantine began (the table's clock)
    instances: dict[str, float]     # claimed instance (8 hex digits) -> score
    last_reasons: tuple[str, ...]   # newest last
    rejections: int                 # scored rejections in all
    recent: tuple[int, ...]         # rejections per BUCKET_SECONDS, oldest first, the current bucket last

    def to_json(self) -> dict[str, Any]:
        return {"score": round(self.score, 1), "state": self.state,
                "instances": {k: round(v, 1) for k, v in self.instances.items()},
                "last": list(self.last_reasons), "rejections": self.rejections, "recent": list(self.recent)}


class _Decaying:
    __slots__ = ("value", "at")

    def __init__(self) -> None:
        self.value, self.at = 0.0, 0.0

    def now(self, now: float, half_life: float) -> float:
        return self.value * 2.0 ** (-max(0.0, now - self.at) / half_life) if self.value else 0.0

    def add(self, weight: float, now: float, half_life: float) -> float:
        self.value, self.at = self.now(now, half_life) + weight, now
        return self.value


@dataclass
class _Sender:
    score: _Decaying = field(default_factory=_Decaying)
    instances: dict[str, _Decaying] = field(default_factory=dict)
    quarantined_at: float | None = None
    last: deque = field(default_factory=lambda: deque(maxlen=LAST_REASONS))
    rejections: int = 0
    recent: deque = field(default_factory=lambda: deque(maxlen=BUCKETS))  # [bucket index, count]


class ThreatTable:
    def __init__(self, policy: ThreatPolicy | None = None):
        self.policy = policy or ThreatPolicy()
        self._senders: dict[str, _Sender] = {}
        self._quarantined: set[str] = set()  # names whose quarantined_at is set

    def rejected(self, name: str, instance: str, reason: str, now: float) -> list[ThreatChange]:
        """Score one rejection of an envelope that authenticated as `name` (and `instance`); the
        changes to report."""
        policy = self.policy
        weight = policy.weights.get(reason, 0.0)
        if weight <= 0:
            return []
        sender = self._senders.get(name) or self._track(name, now)
        if sender is None:
            return []  # every tracked name is quarantined: this one waits for room
        half = policy.half_life
        score = sender.score.add(weight, now, half)
        self._score_instance(sender, instance, weight, now)
        sender.last.append(reason)
        sender.rejections += 1
        bucket = int(now // BUCKET_SECONDS)
        if sender.recent and sender.recent[-1][0] == bucket:
            sender.recent[-1][1] += 1
        else:
            sender.recent.append([bucket, 1])
        changes = [ThreatChange(name, instance, "raised", score, reason, now)]
        if policy.quarantine and sender.quarantined_at is None and score >= policy.threshold:
            sender.quarantined_at = now
            self._quarantined.add(name)
            changes.append(ThreatChange(name, instance, QUARANTINED, score, reason, now))
        return changes

    def _track(self, name: str, now: float) -> _Sender | None:
        limit = self.policy.max_names
        if len(self._senders) >= limit:
            # forget the lowest scores, an eighth of the table at once: one pass over the table per
            # max_names/8 new names, never one per name (a flood of new names must cost O(1) each)
            half = self.policy.half_life
            candidates = sorted((s.score.now(now, half), n) for n, s in self._senders.items()
                                if s.quarantined_at is None)
            if not candidates:
                return None
            for _, forgotten in candidates[:max(1, limit // EVICT_FRACTION)]:
                del self._senders[forgotten]
        sender = self._senders[name] = _Sender()
        return sender

    def _score_instance(self, sender: _Sender, instance: str, weight: float, now: float) -> None:
        half = self.policy.half_life
        score = sender.instances.get(instance)
        if score is None:
            if len(sender.instances) >= MAX_INSTANCES:
                lowest = min(sender.instances, key=lambda k: sender.instances[k].now(now, half))
                del sender.instances[lowest]
            score = sender.instances[instance] = _Decaying()
        score.add(weight, now, half)

    def check(self, name: str, now: float) -> tuple[bool, ThreatChange | None]:
        """Whether files claiming `name` are quarantined now; ends a quarantine whose score has
        decayed below the release level (then the change says so)."""
        sender = self._senders.get(name)
        if sender is None or sender.quarantined_at is None:
            return False, None
        score = sender.score.now(now, self.policy.half_life)
        if score >= self.policy.release:
            return True, None
        sender.quarantined_at = None
        self._quarantined.discard(name)
        return False, ThreatChange(name, "", "released", score, "", now)

    def release_due(self, now: float) -> list[ThreatChange]:
        changes = []
        for name in list(self._quarantined):
            change = self.check(name, now)[1]
            if change is not None:
                changes.append(change)
        return changes

    def next_release(self) -> float | None:
        """The earliest moment (the table's clock) at which a quarantine can end."""
        policy = self.policy
        moments = []
        for name in self._quarantined:
            s = self._senders[name]
            if policy.release <= 0:
                moments.append(s.score.at + policy.half_life * 64)  # 2**-64 of any score: gone
            else:
                ratio = max(1.0, s.score.value / policy.release)
                moments.append(s.score.at + policy.half_life * math.log2(ratio) + RELEASE_MARGIN)
        return min(moments, default=None)

    def lift(self, name: str, now: float) -> ThreatChange | None:
        """The operator ends a quarantine (and forgets the score): None if `name` was not quarantined."""
        sender = self._senders.get(name)
        if sender is None or sender.quarantined_at is None:
            return None
        score = sender.score.now(now, self.policy.half_life)
        sender.quarantined_at = None
        self._quarantined.discard(name)
        sender.score = _Decaying()
        sender.instances.clear()
        return ThreatChange(name, "", "lifted", score, "", now)

    def states(self, now: float, limit: int | None = None) -> list[ThreatState]:
        """Every tracked name, quarantined first, then by score (highest first); at most `limit`."""
        half = self.policy.half_life
        current = int(now // BUCKET_SECONDS)
        out = []
        for name, s in self._senders.items():
            counts = {index: count for index, count in s.recent}
            out.append(ThreatState(
                name, s.score.now(now, half), QUARANTINED if s.quarantined_at is not None else NORMAL,
                s.quarantined_at, {k: v.now(now, half) for k, v in s.instances.items()}, tuple(s.last),
                s.rejections, tuple(counts.get(i, 0) for i in range(current - BUCKETS + 1, current + 1))))
        out.sort(key=lambda t: (t.state != QUARANTINED, -t.score, t.name))
        return out if limit is None else out[:limit]

    def __len__(self) -> int:
        return len(self._senders)
