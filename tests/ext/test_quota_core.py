"""The pure parts of the `quota` extension: settings, the published field, the ledger, the token
bucket (core/quota.py) and threat scores (core/threat.py). No files, no clocks: time is an argument."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from speed_runtime.core.entry import RegistryEntry
from speed_runtime.core.errors import ConfigError
from speed_runtime.core.quota import (MAX_PENDING, Ledger, Limits, QuotaSettings, TokenBucket, entry_limits,
                                      limits_for)
from speed_runtime.core.threat import (DEFAULT_WEIGHTS, KNOWN_REASONS, LATE_RESPONSE, MAX_INSTANCES, NEVER_SCORED,
                                       QUARANTINED, ThreatPolicy, ThreatTable)


# ----------------------------------------------------------------------------- settings and the field
def test_published_field_round_trips_through_a_registry_entry():
    settings = QuotaSettings.from_options({"pending": 16, "pending_bytes": 65536, "rate": 50, "burst": 5,
                                           "senders": {"bulk": {"pending": 256, "rate": 500}}})
    entry = RegistryEntry(name="r", id="6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9", last_heartbeat=1.0,
                          features=("quota",), extra={"quota": settings.published()})
    back = RegistryEntry.from_json(entry.to_json())
    assert entry_limits(back.features, back.extra, "s") == Limits(16, 65536, 50.0, 5)
    # an override starts from the node's own limits and replaces what it names
    assert entry_limits(back.features, back.extra, "bulk") == Limits(256, 65536, 500.0, 500)


def test_defaults_publish_a_count_and_a_byte_limit_and_no_rate():
    assert QuotaSettings.from_options(None).published() == {"pending": 64, "pendingBytes": 4 * 1024 * 1024}


@pytest.mark.parametrize("options, words", [
    ({"pending": 0}, "pending must be a whole number"),
    ({"pending": MAX_PENDING + 1}, "pending must be a whole number"),
    ({"pending": True}, "pending must be a whole number"),
    ({"pending_bytes": 1.5}, "pending_bytes"),
    ({"rate": 0}, "rate must be a number"),
    ({"rate": float("inf")}, "rate must be a number"),
    ({"burst": 4}, "a burst needs a rate"),
    ({"rate": 5, "burst": 0}, "burst must be a whole number"),
    ({"pendin": 3}, "unknown quota setting 'pendin'"),
    ({"senders": {"b": {"pending": -1}}}, "quota for sender 'b'"),
    ({"senders": {"b": 3}}, "must be a mapping"),
    ({"targets": {"t": {"burst": 3}}}, "a burst needs a rate"),
    ({"targets": {"t": {}}}, "needs a rate"),
    ([1, 2], "must be a mapping"),
])
def test_bad_settings_are_one_sentence(options, words):
    with pytest.raises(ConfigError) as info:
        QuotaSettings.from_options(options)
    assert words in str(info.value)


def test_own_pacing_per_target_wins_over_the_node_wide_rate():
    settings = QuotaSettings.from_options({"send_rate": 100, "targets": {"slow": {"rate": 2, "burst": 1}}})
    assert settings.pacing("slow") == (2.0, 1)
    assert settings.pacing("other") == (100.0, 100)
    assert QuotaSettings.from_options({}).pacing("other") is None


def test_a_field_that_is_not_json_of_the_layout_sets_no_limits():
    assert limits_for(None, "s") is None
    assert limits_for({"pending": 4, "pendingBytes": float("nan")}, "s") is None
    assert limits_for({"pending": 10**30, "pendingBytes": 10**30}, "s") == Limits(MAX_PENDING, 2**53)


# ----------------------------------------------------------------------------- the ledger
def test_prune_front_stops_at_the_first_file_still_present():
    ledger = Ledger()
    for i, size in enumerate((100, 200, 300)):
        ledger.add(f"f{i}", size)
    asked = []
    ledger.prune_front(lambda name: asked.append(name) or name != "f0")
    assert asked == ["f0", "f1"] and ledger.names() == ["f1", "f2"] and ledger.bytes == 500
    ledger.prune_all(lambda name: name == "f2")
    assert ledger.names() == ["f2"] and ledger.bytes == 300


def test_blocking_limit_names_the_count_before_the_bytes():
    ledger = Ledger()
    ledger.add("a", 10)
    assert ledger.blocking_limit(Limits(1, 5), 10) == "pending"
    assert ledger.blocking_limit(Limits(2, 15), 10) == "pendingBytes"
    assert ledger.blocking_limit(Limits(2, 20), 10) is None


# ----------------------------------------------------------------------------- the token bucket
def test_a_retuned_bucket_keeps_its_tokens_within_the_new_burst():
    bucket = TokenBucket(10.0, 10)
    assert bucket.take(0.0)
    bucket.retune(1.0, 3)
    assert bucket.tokens == 3.0
    assert [bucket.take(0.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.delay_ms(0.0) == 1000


# ----------------------------------------------------------------------------- threat scores
def _table(**options) -> ThreatTable:
    return ThreatTable(ThreatPolicy.from_options({"half_life": 10.0, **options}))


def test_quarantine_starts_at_the_threshold_and_not_before():
    table = _table()
    changes = [table.rejected("m", "aaaaaaaa", "replayed_nonce", 0.0) for _ in range(4)]
    assert [[c.event for c in cs] for cs in changes] == [["raised"]] * 3 + [["raised", QUARANTINED]]
    assert changes[2][0].score == 90.0 and changes[3][1].score == 120.0
    assert table.check("m", 0.0) == (True, None)
    assert table.check("other", 0.0) == (False, None)   # never anyone else


def test_scores_halve_every_half_life_and_the_release_comes_when_computed():
    table = _table()
    for _ in range(4):
        table.rejected("m", "", "replayed_nonce", 0.0)
    release = table.next_release()
    assert release == pytest.approx(10.0 * math.log2(120 / 50), abs=0.01)
    assert table.check("m", release - 0.01)[0] is True
    quarantined, change = table.check("m", release)
    assert not quarantined and change.event == "released" and change.score < 50
    assert table.next_release() is None
    # released near the release level: a repeat offender is back in quarantine after two more
    assert [c.event for c in table.rejected("m", "", "replayed_nonce", release)] == ["raised"]
    assert QUARANTINED in [c.event for c in table.rejected("m", "", "replayed_nonce", release)]


def test_decay_between_rejections_can_keep_a_slow_offender_out():
    table = _table()
    for i in range(20):  # one bad tag per half life never adds up to 100
        assert [c.event for c in table.rejected("m", "", "replayed_nonce", 10.0 * i)] == ["raised"]
    assert table.states(200.0)[0].score < 60


def test_unread_and_unattributable_files_score_nothing():
    table = _table()
    assert table.rejected("m", "", "wrong_target", 0.0) == []
    assert table.rejected("m", "", "quarantined", 0.0) == []   # not a scored reason at all
    for reason in NEVER_SCORED:  # decided before the envelope authenticates as anyone
        assert table.rejected("m", "", reason, 0.0) == []
    assert len(table) == 0


def test_weights_are_configurable_and_checked():
    table = _table(weights={"stale_timestamp": 100})
    assert table.rejected("x", "", "stale_timestamp", 0.0)[-1].event == QUARANTINED
    assert DEFAULT_WEIGHTS["replayed_nonce"] > DEFAULT_WEIGHTS["bad_payload"] > DEFAULT_WEIGHTS[LATE_RESPONSE] > 0
    assert set(DEFAULT_WEIGHTS) | set(NEVER_SCORED) == set(KNOWN_REASONS)   # every reason is one or the other
    assert not set(DEFAULT_WEIGHTS) & set(NEVER_SCORED)
    # the advice of old (weights of 0 for the unauthenticated reasons) still starts a node
    assert ThreatPolicy.from_options({"weights": {"bad_tag": 0, "too_large": 0}}).weights == DEFAULT_WEIGHTS
    for options, words in (({"weights": {"bogus": 1}}, "no threat weight"),
                           ({"weights": {"replayed_nonce": -1}}, "at least 0"),
                           ({"weights": {"unauthorized": 1}}, "unauthorized cannot weigh against a sender"),
                           ({"weights": {"bad_tag": 30}}, "before the envelope authenticates"),
                           ({"release": 100}, "below threshold=100"), ({"half_life": 0}, "half_life"),
                           ({"threshold": "high"}, "threshold"), ({"quarantine": 1}, "true or false"),
                           ({"tresh": 1}, "unknown threat setting")):
        with pytest.raises(ConfigError, match=words):
            ThreatPolicy.from_options(options)


def test_the_release_level_defaults_to_half_the_threshold():
    """`--threat threshold=20` alone: the default release level (50) would lie above it, so the
    release follows the threshold (half of it, as the defaults 100 and 50); an explicit release that
    does not fit is named as the setting to change."""
    assert ThreatPolicy.from_options({"threshold": 20}).release == 10
    assert ThreatPolicy.from_options({}).release == 50 and ThreatPolicy.from_options({"threshold": 300}).release == 150
    assert ThreatPolicy.from_options({"threshold": 20, "release": 0}).release == 0
    with pytest.raises(ConfigError, match=r"^threat release=30 must be at least 0 and below threshold=20 "):
        ThreatPolicy.from_options({"threshold": 20, "release": 30})


def test_scores_only_without_quarantine():
    table = _table(quarantine=False)
    for _ in range(10):
        assert [c.event for c in table.rejected("m", "", "replayed_nonce", 0.0)] == ["raised"]
    assert table.check("m", 0.0) == (False, None) and table.states(0.0)[0].score == 300


def test_lift_ends_a_quarantine_and_forgets_the_score():
    table = _table()
    for _ in range(4):
        table.rejected("m", "aaaaaaaa", "replayed_nonce", 0.0)
    assert table.lift("n", 0.0) is None
    change = table.lift("m", 1.0)
    assert change.event == "lifted" and change.score == pytest.approx(120 * 2 ** -0.1)
    assert table.check("m", 1.0) == (False, None)
    assert table.lift("m", 1.0) is None
    state = table.states(1.0)[0]
    assert state.score == 0 and state.instances == {} and state.rejections == 4


def test_memory_is_bounded_and_a_quarantined_name_is_never_forgotten():
    table = _table(max_names=3)
    for _ in range(4):
        table.rejected("bad", "", "replayed_nonce", 0.0)
    for i in range(1000):  # a flood of invented names
        table.rejected(f"n{i}", "", "stale_timestamp", 0.0)
    assert len(table) == 3 and table.check("bad", 0.0)[0]
    for i in range(MAX_INSTANCES + 3):
        table.rejected("bad", f"{i:08x}", "replayed_nonce", 1.0)
    assert len(table.states(1.0)[0].instances) == MAX_INSTANCES
    full = _table(max_names=1)
    for _ in range(4):
        full.rejected("bad", "", "replayed_nonce", 0.0)
    assert full.rejected("other", "", "replayed_nonce", 0.0) == []   # all tracked names quarantined: waits for room


def test_states_list_quarantined_first_with_recent_counts_and_last_reasons():
    table = _table()
    table.rejected("a", "11111111", "stale_timestamp", 0.0)
    for reason in ("replayed_sequence", "replayed_sequence", "replayed_nonce", "bad_sequence"):
        table.rejected("b", "22222222", reason, 25.0)
    table.rejected("c", "", "bad_payload", 26.0)
    states = table.states(31.0)
    assert [s.name for s in states] == ["b", "c", "a"]
    b = states[0]
    assert b.state == QUARANTINED and b.since == 25.0
    assert b.last_reasons == ("replayed_sequence", "replayed_sequence", "replayed_nonce", "bad_sequence")
    assert b.recent[-2:] == (4, 0) and sum(b.recent) == 4 and len(b.recent) == 12
    assert json.loads(json.dumps(b.to_json()))["state"] == QUARANTINED


def test_a_full_table_costs_o1_amortized_per_new_name(monkeypatch):
    """Past `max_names` each new name used to look at every tracked score (1,024 per name): 25x the
    cost of junk on a v1 receiver. Counted, not timed: score look-ups per new name stay a few."""
    import speed_runtime.core.threat as threat
    looks = [0]
    original = threat._Decaying.now

    def counted(self, now, half_life):
        looks[0] += 1
        return original(self, now, half_life)
    monkeypatch.setattr(threat._Decaying, "now", counted)
    table = _table(max_names=1024)
    for i in range(20_000):
        table.rejected(f"n{i}", "", "stale_timestamp", float(i) / 1000)
    assert len(table) <= 1024
    assert looks[0] / 20_000 < 16, f"{looks[0] / 20_000:.0f} score look-ups per new name"


# ----------------------------------------------------------------------------- the core stays pure
PROBE = r'''
import json, sys, time
def trap(*_a, **_k):
    raise AssertionError("the core read a clock")
for name in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "clock_gettime", "sleep"):
    setattr(time, name, trap)
from speed_runtime.core import quota, threat
touched = []
sys.addaudithook(lambda event, args: touched.append(event) if event.split(".")[0] in
                 ("open", "os", "shutil", "glob", "fcntl", "socket", "subprocess") else None)
s = quota.QuotaSettings.from_options({"pending": 2, "rate": 5})
lim = quota.limits_for(s.published(), "a")
ledger = quota.Ledger(); ledger.add("x", 100); ledger.prune_all(lambda n: True)
assert ledger.blocking_limit(lim, 100) is None
bucket = quota.TokenBucket(5.0, 1); assert bucket.take(0.0) and not bucket.take(1.0)
table = threat.ThreatTable(threat.ThreatPolicy.from_options({"half_life": 1}))
for _ in range(4):
    table.rejected("m", "", "replayed_nonce", 0.0)
assert table.check("m", 0.5)[0] and table.next_release() and table.states(0.5)
print(json.dumps({"modules": sorted(m for m in sys.modules if m.split(".")[0] in ("threading", "logging", "socket",
                  "subprocess", "concurrent", "asyncio")),
                  "io": sorted(m for m in sys.modules if m.startswith("speed_runtime.") and
                               not m.startswith("speed_runtime.core")), "touched": touched}))
'''


def test_quota_and_threat_cores_read_no_clock_start_no_thread_and_touch_no_path():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"modules": [], "io": [], "touched": []}
