"""Envelopes per second per node, from the counters each node publishes in its registry entry
(sent + received + rejected, renewed with every heartbeat), for the Leases view's RATE column.

Pure: readings in (a node's name, the heartbeat time its entry carries, when it started, its
counters), rates out. A rate is measured between two publications of the same run of a node, over
the node's own heartbeat times: the console's reading cadence does not enter it, and a node the
console did not start is measured like its own. A node that restarted (a new start time, or
counters that went down) starts a new baseline: never a negative rate, nor one made of a whole
run's count. Memory is SAMPLES rates per node, and a node gone from the registry is forgotten."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

SAMPLES = 8  # rates kept per node (the sparkline)
MIN_INTERVAL = 1.0  # seconds between two readings a rate is measured over (a rewrite of the entry
# between two heartbeats would make a rate of a few envelopes over milliseconds)
COUNTED = ("sent", "received", "rejected")  # the envelopes a node sent, accepted and rejected


def envelope_total(counters: Mapping[str, Any]) -> int | None:
    """The envelopes a node's counters account for (None when they hold no count at all);
    ``rejected`` is a count per reason."""
    total, seen = 0, False
    for key in COUNTED:
        v = counters.get(key)
        if isinstance(v, Mapping):
            v = sum(x for x in v.values() if isinstance(x, (int, float)) and not isinstance(x, bool))
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0:
            total += int(v)
            seen = True
    return total if seen else None


@dataclass
class _Track:
    started: float
    at: float  # heartbeat time of the baseline reading
    total: int
    rates: deque = field(default_factory=lambda: deque(maxlen=SAMPLES))


@dataclass(frozen=True)
class Reading:
    name: str
    heartbeat: float  # the entry's lastHeartbeat: when the node wrote these counters
    started: float  # the entry's startupTimestamp: a new one is a new run of the node
    counters: Mapping[str, Any]


class RateTracker:
    """Each node's recent envelope rates."""

    def __init__(self) -> None:
        self._tracks: dict[str, _Track] = {}

    def observe(self, readings: Iterable[Reading]) -> None:
        """The registry as read now: every node's latest reading (nodes absent are forgotten)."""
        fresh: dict[str, _Track] = {}
        for r in readings:
            total = envelope_total(r.counters)
            if total is None:
                continue
            track = self._tracks.get(r.name)
            if track is None or track.started != r.started or total < track.total or r.heartbeat < track.at:
                track = _Track(r.started, r.heartbeat, total)  # a new run (or a clock that went back)
            elif r.heartbeat - track.at >= MIN_INTERVAL:
                track.rates.append((total - track.total) / (r.heartbeat - track.at))
                track.at, track.total = r.heartbeat, total
            fresh[r.name] = track
        self._tracks = fresh

    def rate(self, name: str) -> float | None:
        track = self._tracks.get(name)
        return track.rates[-1] if track is not None and track.rates else None

    def series(self, name: str) -> tuple[float, ...]:
        track = self._tracks.get(name)
        return tuple(track.rates) if track is not None else ()

    def __len__(self) -> int:
        return len(self._tracks)


def fmt_rate(rate: float | None) -> str:
    """Envelopes per second in six characters at most: ``0/s``, ``3.5/s``, ``120/s``, ``1.2k/s``."""
    if rate is None:
        return "-"
    if rate >= 1000:
        return f"{rate / 1000:.1f}k/s" if rate < 9950 else f"{rate / 1000:.0f}k/s"
    if rate >= 9.95 or rate == 0:
        return f"{rate:.0f}/s"
    return f"{rate:.1f}/s"
