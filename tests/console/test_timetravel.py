"""Time travel's model (models/timetravel.py): a past moment as a pure function of the records and
of the registry as the console's scans saw it. No Textual, no files, no clock."""

import time

import pytest

from speedtui.models.registry import build_row
from speedtui.models.timetravel import (GONE, LEFT, ONLINE, STALE, UNKNOWN, RegistryHistory, event_times, neighbour,
                                        parse_moment, reconstruct)
from speedtui.models.traces import parse_record

from .conftest import entry_record, node_id

T0 = 1_000_000.0


def lease(ts, node, subject, event):
    return parse_record({"kind": "lease", "ts": ts, "node": node, "subject": subject, "event": event})


def health(ts, node, event, detail=""):
    return parse_record({"kind": "health", "ts": ts, "node": node, "event": event, "detail": detail})


def envelope(ts, node, peer, seq=1, direction="out", outcome="sent"):
    return parse_record({"kind": "envelope", "ts": ts, "node": node, "dir": direction, "peer": peer,
                         "type": "MESSAGE", "seq": seq, "size": 100, "outcome": outcome})


def row(name, now, allow=(), status="online", age=1.0, groups=()):
    return build_row(entry_record(name, {"name": name, "id": node_id(name), "lastHeartbeat": now - age,
                                         "leaseSeconds": 30, "status": status, "allow": list(allow),
                                         "groups": list(groups)}), now)


def by_name(moment):
    return {n.name: n for n in moment.nodes}


LIFE = [
    lease(T0 + 0, "a", "a", "registered"),
    lease(T0 + 5, "b", "b", "registered"),
    lease(T0 + 6, "b", "a", "observed_join"),
    lease(T0 + 100, "b", "a", "observed_expiry"),
    lease(T0 + 200, "b", "b", "deregistered"),
    lease(T0 + 300, "c", "a", "reaped"),
]


def test_each_node_takes_the_state_its_newest_lease_record_gives():
    assert {n: p.state for n, p in by_name(reconstruct(T0 + 50, LIFE, [])).items()} == \
        {"a": ONLINE, "b": ONLINE, "c": UNKNOWN}
    at = by_name(reconstruct(T0 + 150, LIFE, []))
    assert at["a"].state == STALE and at["a"].evidence == "observed_expiry by b" and at["a"].since == T0 + 100
    assert by_name(reconstruct(T0 + 250, LIFE, []))["b"].state == LEFT
    later = by_name(reconstruct(T0 + 350, LIFE, []))
    assert later["a"].state == GONE
    assert later["c"].state == ONLINE and later["c"].evidence == "it journaled reaped"  # c wrote, so it ran
    early = by_name(reconstruct(T0 - 1, LIFE, []))
    assert early["a"].state == UNKNOWN and early["a"].since is None  # nothing said about it yet
    assert early["a"].allow is None  # and no scan: grants unknown


def test_a_peer_that_starts_later_moves_no_since_and_revives_no_node_that_left():
    """A peer that starts journals `observed_join` of every entry it finds: an online node's
    "since" moved to that moment, and a node that had left by its own word (its entry found
    behind, or found by a slow scan) was online again, for minutes, by that later record."""
    life = [
        lease(T0 + 0, "billing", "billing", "registered"),
        lease(T0 + 10, "cli", "cli", "registered"),
        lease(T0 + 11, "cli", "cli", "deregistered"),
        lease(T0 + 60, "sleeper", "sleeper", "registered"),
        lease(T0 + 61, "sleeper", "billing", "observed_join"),
        lease(T0 + 61, "sleeper", "cli", "observed_join"),
    ]
    at = by_name(reconstruct(T0 + 120, life, []))
    assert at["billing"].state == ONLINE and at["billing"].since == T0 and at["billing"].evidence == "registered (itself)"
    assert at["cli"].state == LEFT and at["cli"].since == T0 + 11
    again = life + [lease(T0 + 90, "cli", "cli", "registered")]     # its own word brings it back
    assert by_name(reconstruct(T0 + 120, again, []))["cli"].state == ONLINE
    quiet = [lease(T0 + 5, "gw", "untraced", "observed_leave"), lease(T0 + 50, "gw", "untraced", "observed_join")]
    assert by_name(reconstruct(T0 + 120, quiet, []))["untraced"].state == ONLINE   # peers' word alone: as before


def test_grants_come_from_the_newest_registry_scan_at_or_before_the_moment():
    h = RegistryHistory()
    h.observe(T0 + 10, [row("a", T0 + 10, allow=["b"]), row("b", T0 + 10)])
    h.observe(T0 + 20, [row("a", T0 + 20, allow=["b"]), row("b", T0 + 20)])  # nothing changed: not kept
    h.observe(T0 + 30, [row("a", T0 + 30, allow=["b", "c"]), row("b", T0 + 30)])
    h.observe(T0 + 40, [row("a", T0 + 40, allow=["b", "c"])])  # b's entry gone
    assert len(h._nodes["a"]) == 2 and h.first == T0 + 10
    assert by_name(reconstruct(T0 + 25, [], [], h))["a"].allow == ("b",)
    a = by_name(reconstruct(T0 + 35, [], [], h))["a"]
    assert a.allow == ("b", "c") and a.grants_from == T0 + 30 and not a.grants_later
    assert a.evidence == "its registry entry" and a.state == ONLINE
    assert by_name(reconstruct(T0 + 45, [], [], h))["b"].state == GONE
    before = by_name(reconstruct(T0 + 5, [], [], h))["a"]  # before the first scan: a hint, marked as such
    assert before.allow == ("b",) and before.grants_later and before.state == UNKNOWN


def test_the_newest_evidence_wins_between_a_scan_and_a_lease_record():
    h = RegistryHistory()
    h.observe(T0 + 50, [row("a", T0 + 50, allow=["b"])])
    at = by_name(reconstruct(T0 + 150, LIFE, [], h))["a"]
    assert at.state == STALE and at.allow == ("b",)  # the expiry (T0+100) is newer than the scan
    h.observe(T0 + 120, [row("a", T0 + 120, age=60)])  # the console saw it stale too, later
    assert by_name(reconstruct(T0 + 150, LIFE, [], h))["a"].evidence == "its registry entry"


def test_a_node_that_journaled_traffic_after_its_expiry_was_running():
    traffic = [envelope(T0 + 148, "a", "b")]
    at = by_name(reconstruct(T0 + 150, LIFE, traffic))["a"]
    assert at.state == ONLINE and at.evidence == "it journaled traffic" and at.sent == 1


def test_traffic_around_the_moment_is_bounded_and_nearest_first():
    traffic = [envelope(T0 + i / 100, "a", "b", seq=i) for i in range(2000)]  # 20 s of traffic
    m = reconstruct(T0 + 10, LIFE, traffic, window=5.0, limit=100)
    assert m.traffic_total == 1001  # T0+5 … T0+15
    assert len(m.traffic) == 100 and [r.seq for r in m.traffic] == list(range(950, 1050))
    assert by_name(m)["a"].sent == 1001
    assert [r.event for r in m.events] == ["registered", "observed_join"]  # lease records in the window


def test_health_problems_at_the_moment():
    life = LIFE + [health(T0 + 10, "a", "receiving_failed", "inbox gone"), health(T0 + 20, "a", "receiving_recovered"),
                   health(T0 + 400, "a", "stopped_renewing"), lease(T0 + 410, "a", "a", "registered")]
    assert by_name(reconstruct(T0 + 15, life, []))["a"].health == "receiving_failed: inbox gone"
    assert by_name(reconstruct(T0 + 25, life, []))["a"].health == ""
    assert by_name(reconstruct(T0 + 405, life, []))["a"].health == "stopped_renewing"
    assert by_name(reconstruct(T0 + 415, life, []))["a"].health == ""  # a new instance registered since


def test_registry_history_is_bounded():
    h = RegistryHistory(per_node=3, max_nodes=10)
    for i in range(20):
        h.observe(T0 + i, [row(f"n{j}", T0 + i, allow=[f"x{i}"]) for j in range(i % 15)])
    assert len(h.names()) <= 10 and all(len(s) <= 3 for s in h._nodes.values())
    snap = h.snapshot()
    h.observe(T0 + 99, [])
    assert snap.last == T0 + 19  # the snapshot does not move with the history


def test_stepping_from_event_to_event():
    h = RegistryHistory()
    h.observe(T0 + 50, [row("a", T0 + 50)])
    times = event_times(LIFE, h)
    assert times == [T0, T0 + 5, T0 + 6, T0 + 50, T0 + 100, T0 + 200, T0 + 300]
    assert neighbour(T0 + 50, times, 1) == T0 + 100 and neighbour(T0 + 50, times, -1) == T0 + 6
    assert neighbour(T0 + 300, times, 1) is None and neighbour(T0, times, -1) is None


def test_moments_as_the_operator_types_them(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    now = 1767225600.0 + 12 * 3600 + 30  # 2026-01-01 12:00:30 UTC
    assert parse_moment("now", now) == now
    assert parse_moment("-90s", now) == now - 90
    assert parse_moment("-1h30m", now) == now - 5400
    assert parse_moment("5m ago", now) == now - 300
    assert parse_moment("11:59:00.250", now) == now - 90 + 0.25
    assert parse_moment("12:10", now) == now - 30 + 600 - 86400  # still to come today: yesterday's
    assert parse_moment("2026-01-01 00:00:00", now) == 1767225600.0
    for bad in ("yesterday", "-5x", "25:00", "2026-13-01 00:00"):
        with pytest.raises(ValueError):
            parse_moment(bad, now)
