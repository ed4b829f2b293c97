"""The one liveness verdict (contract 1.1 §4.1), pure: clamps, a heartbeat in the future, dead pids."""
from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from speed_runtime.core.entry import RegistryEntry
from speed_runtime.core.liveness import EXPIRED, FUTURE, PROCESS_GONE, HostFacts, judge

HERE = HostFacts("here", "BOOT", 500.0, pid_alive=lambda pid: pid == 42)


def entry(**kw) -> RegistryEntry:
    base = dict(name="n", id=str(uuid.uuid4()), last_heartbeat=1000.0, lease_seconds=30.0, pid=42, host="here")
    base.update(kw)
    return RegistryEntry(**base)


def test_a_live_entry_and_an_expired_one():
    assert judge(entry(), 1010.0, HERE).state == "online"
    assert judge(entry(status="leaving"), 1010.0, HERE).state == "leaving"
    assert judge(entry(), 1031.0, HERE)[:2] == ("stale", EXPIRED)


def test_a_heartbeat_in_milliseconds_is_stale_not_eternal():
    assert judge(entry(last_heartbeat=1000.0 * 1000), 1010.0, HERE)[:2] == ("stale", FUTURE)
    assert judge(entry(last_heartbeat=1029.0), 1000.0, HERE).state == "online"  # within a lease ahead: skew


def test_a_lease_of_1e300_is_clamped_to_a_day():
    assert judge(entry(lease_seconds=1e300, pid=7, host="elsewhere"), 1000.0 + 86_401, HERE)[:2] == ("stale", EXPIRED)
    assert judge(entry(lease_seconds=1e300, pid=7, host="elsewhere"), 1000.0 + 86_399, HERE).state == "online"


def test_a_dead_pid_on_this_host_is_stale_with_or_without_a_boot_id():
    assert judge(entry(pid=7), 1010.0, HERE)[:2] == ("stale", PROCESS_GONE)
    assert judge(entry(pid=7, boot_id="BOOT", boot_time_heartbeat=495.0), 1010.0, HERE)[:2] == ("stale", PROCESS_GONE)
    assert judge(entry(pid=7, host="elsewhere"), 1010.0, HERE).state == "online"  # not ours to ask about
    assert judge(entry(pid=7), 1010.0, HERE, check_pid=False).state == "online"


@given(beat=st.floats(-1e12, 1e15, allow_nan=False), lease=st.floats(-1e6, 1e300, allow_nan=False),
       now=st.floats(0, 1e10, allow_nan=False))
@settings(max_examples=300, deadline=None)
def test_no_entry_stays_online_longer_than_a_day_past_its_heartbeat(beat, lease, now):
    verdict = judge(entry(last_heartbeat=beat, lease_seconds=lease), now, HERE)
    if verdict.state != "stale":
        assert abs(now - beat) <= 86_400
