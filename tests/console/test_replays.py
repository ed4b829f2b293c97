"""Replay verdict bookkeeping (models/replays.py), on an injected time: a journal line is the
verdict; published counters are it for a receiver that keeps no journal, and stand in for one
whose journal line never comes."""

from speedtui.models.registry import build_row
from speedtui.models.replays import ReplayTracker
from speedtui.models.traces import parse_record

from .conftest import entry_record, node_id


def row(name, rejected):
    return build_row(entry_record(name, {"name": name, "id": node_id(name), "lastHeartbeat": 100.0, "leaseSeconds": 30,
                                     "heartbeatSeconds": 1, "counters": {"rejected": rejected}}), 101.0)


def rejection(ts):
    return parse_record({"ts": ts, "node": "billing", "dir": "in", "peer": "ops", "type": "SPC_REQUEST", "seq": 4,
                         "outcome": "rejected", "reason": "replayed_nonce"})


def started(tracker, now=100.0):
    tracker.note_baseline(row("billing", {}), "billing")
    return tracker.start(now, "ops", "billing", "SPC_REQUEST", 4, row("billing", {}))


def test_a_journaling_receiver_is_judged_by_its_journal_even_when_its_counters_come_first():
    t = ReplayTracker()
    p = started(t)
    assert t.match_counters({"billing": row("billing", {"replayed_nonce": 1})}, {"billing"}) == []
    assert p.outcome == "pending"
    notes = t.match_records([rejection(100.2)])
    assert p.outcome == "rejected" and p.reason == "replayed_nonce" and len(notes) == 1


def test_counters_are_the_verdict_of_a_receiver_without_journal():
    t = ReplayTracker()
    p = started(t)
    notes = t.match_counters({"billing": row("billing", {"replayed_nonce": 1})}, set())
    assert p.outcome == "rejected" and "published counters" in p.reason and len(notes) == 1


def test_counters_stand_in_when_the_journal_line_never_comes_and_time_is_the_callers():
    t = ReplayTracker()
    p = started(t, now=100.0)
    t.match_counters({"billing": row("billing", {"replayed_nonce": 1})}, {"billing"})
    assert t.expire(100.0 + 5) == [] and p.outcome == "pending"  # the window is the caller's clock
    notes = t.expire(100.0 + 11)
    assert p.outcome == "rejected" and "no journal line came" in p.reason and len(notes) == 1


def test_no_verdict_after_the_window():
    t = ReplayTracker()
    p = started(t)
    t.expire(111.0)
    assert p.outcome == "no verdict"


def test_the_verdict_names_the_check_that_fired():
    """A replay from a sender that has left is refused as unknown_sender: no nonce or sequence
    check ran, so the view must not say that replay protection works (it did, before)."""
    from speedtui.models.replays import replay_verdict

    text, proved = replay_verdict("replayed_nonce")
    assert proved and "nonce was seen" in text and "✓ replay protection works" in text
    assert replay_verdict("replayed_sequence/stale_timestamp (from its published counters: it keeps no journal)")[1]
    text, proved = replay_verdict("unknown_sender")
    assert not proved and "replay protection works" not in text
    assert "before any replay check" in text and "has left" in text
    assert not replay_verdict("bad_tag")[1]
