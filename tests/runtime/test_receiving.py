"""The receiver's judgement (contract §5.5 steps 1-5) as pure functions: every rejection reason,
without a file system, a thread or a clock."""
from __future__ import annotations

import stat
import uuid

import pytest

from speed_runtime.core import payloads
from speed_runtime.core.entry import RegistryEntry
from speed_runtime.core.envelope import HEADER_SIZE, EnvelopeType, Header, envelope_filename, seal
from speed_runtime.core.keys import Key
from speed_runtime.core.receiving import (DEFER, FileFacts, Identity, judge_envelope, judge_file, judge_name,
                                          spc_deadline_ms, stale_source)
from speed_runtime.core.replay import ReplayGuard

KEY = Key(bytes(range(32)))
ME = Identity("b", uuid.UUID(int=2, version=4).bytes)
A = RegistryEntry(name="a", id=str(uuid.UUID(int=1, version=4)), last_heartbeat=0.0)
NOW = 1_700_000_000_000
REG = stat.S_IFREG | 0o600


def envelope(*, etype=EnvelopeType.MESSAGE, seq=1, ts=NOW, src=None, dst=None, body=None, nonce=b"\x05" * 12,
             version=1, hlen=HEADER_SIZE, key=KEY):
    body = payloads.encode_payload(payloads.message("a", "b", 1) if body is None else body)
    header = Header(etype, seq, ts, len(body), src or A.id_bytes, dst or ME.id_bytes, 0, version, hlen)
    return seal(header, body, key, nonce)


def judge(data, *, sender="a", entry=A, guard=None, now=NOW):
    return judge_envelope(sender, data, KEY, ME, entry, guard or ReplayGuard(), now, 4096)


def test_step_1_names():
    name = envelope_filename("a", A.id_bytes, 1, b"\x05" * 4)
    assert judge_name(name, {"a"}) == (judge_name(name, {"a"})[0], None)
    assert judge_name(name, {"c"})[1] == "unauthorized"
    assert judge_name(".hidden", {"a"}) == (None, "unauthorized")
    assert judge_name("a.zz.1.x.env", {"a"}) == (None, "unauthorized")


@pytest.mark.parametrize("facts, now, expected", [
    (FileFacts(stat.S_IFIFO | 0o600, 1, 0, 100, 0.0), 1.0, "bad_file"),
    (FileFacts(stat.S_IFDIR | 0o700, 1, 0, 100, 0.0), 1.0, "bad_file"),
    (FileFacts(REG, 2, 0, 100, 0.0), 1.0, DEFER),        # link()+unlink() in progress
    (FileFacts(REG, 2, 0, 100, 0.0), 3.0, "bad_file"),   # … for too long
    (FileFacts(REG, 1, 65534, 100, 0.0), 1.0, "bad_file"),  # a foreign owner
    (FileFacts(REG, 2, 65534, 100, 0.0), 1.0, "bad_file"),  # … never deferred: its hard link would hold up
                                                             # the sender it names (issue 26, red team)
    (FileFacts(REG, 1, 0, 5000, 0.0), 1.0, "too_large"),
    (FileFacts(REG, 1, 0, 91, 0.0), 1.0, "bad_size"),
    (FileFacts(REG, 1, 0, 100, 0.0), 1.0, None),
])
def test_step_2_file_facts(facts, now, expected):
    assert judge_file(facts, now, 4096, {0}) == expected


def test_step_3_framing_tag_and_payload():
    good = envelope()
    assert judge(good).accepted
    assert judge(good[:-1]).reason == "bad_size"
    assert judge(envelope(version=2)).reason == "bad_version"
    assert judge(envelope(hlen=65)).reason == "bad_version"
    flipped = bytearray(good)
    flipped[HEADER_SIZE + 13] ^= 1
    assert judge(bytes(flipped)).reason == "bad_tag"
    assert judge(envelope(key=Key(bytes(32)))).reason == "bad_tag"
    assert judge(envelope(etype=99)).reason == "bad_payload"
    assert judge(envelope(body={"from": "a", "to": "b"})).reason == "bad_payload"  # a MESSAGE without data
    assert judge(envelope(etype=EnvelopeType.ACK, body={"from": "a", "to": "b", "ackSeq": -1})).reason == "bad_payload"


def test_a_rejected_envelope_keeps_its_headers_type():
    flipped = bytearray(envelope(etype=EnvelopeType.SPC_REQUEST, body=payloads.spc_request("a", "b", "r", "s", {}, 5)))
    flipped[-1] ^= 1
    verdict = judge(bytes(flipped))
    assert (verdict.reason, verdict.type) == ("bad_tag", "SPC_REQUEST")


def test_step_4_identities():
    assert judge(envelope(body=payloads.message("c", "b", 1))).reason == "unknown_sender"
    assert judge(envelope(body=payloads.message("a", "x", 1))).reason == "wrong_target"
    assert judge(envelope(dst=b"\x09" * 16)).reason == "wrong_target"
    stale = judge(envelope(src=b"\x08" * 16))
    assert stale.reason == "unknown_sender" and stale_source(stale)  # a fresher entry may turn it round
    assert stale_source(judge(envelope(), entry=None))


def test_step_5_replay_window_and_bounded_gaps():
    guard = ReplayGuard(window_ms=60_000, max_gap=65_536)
    assert judge(envelope(ts=NOW - 60_001), guard=guard).reason == "stale_timestamp"
    assert judge(envelope(ts=NOW + 60_001), guard=guard).reason == "stale_timestamp"
    assert judge(envelope(seq=1), guard=guard).accepted
    assert judge(envelope(seq=2), guard=guard).reason == "replayed_nonce"
    assert judge(envelope(seq=1, nonce=b"\x06" * 12), guard=guard).reason == "replayed_sequence"
    assert judge(envelope(seq=2**64 - 1, nonce=b"\x07" * 12), guard=guard).reason == "bad_sequence"
    verdict = judge(envelope(seq=65_538, nonce=b"\x08" * 12), guard=guard)  # 65,536 missing: the most allowed
    assert verdict.accepted and verdict.gap == 65_536
    fresh = ReplayGuard(max_gap=65_536)
    assert judge(envelope(seq=65_538), guard=fresh).reason == "bad_sequence"  # a first envelope counts from 0
    assert judge(envelope(seq=65_537), guard=fresh).accepted


def test_only_an_envelope_that_authenticates_as_the_sender_is_attributable_to_it():
    """docs/PROTOCOL.md "Order of checks": a rejection may count against the file name's sender only
    when the tag passed and the header names the sender's registered instance."""
    good = envelope()
    flipped = bytearray(good)
    flipped[-1] ^= 1
    unauthenticated = {
        "bad_size": good[:-1], "bad_version": envelope(version=2), "bad_tag": bytes(flipped),
        "too_large": envelope(body={"from": "a", "to": "b", "data": "x" * 5000}),
        "unknown_sender": envelope(src=b"\x08" * 16),   # sealed with the key, but not by a's registered instance
    }
    for reason, data in unauthenticated.items():
        verdict = judge(data)
        assert (verdict.reason, verdict.attributable) == (reason, False)
    assert not judge(good, entry=None).attributable    # no registered instance to authenticate as
    guard = ReplayGuard(window_ms=60_000, max_gap=65_536)
    assert judge(good, guard=guard).accepted
    authenticated = {
        "replayed_nonce": good, "replayed_sequence": envelope(nonce=b"\x06" * 12),
        "bad_sequence": envelope(seq=2**64 - 1, nonce=b"\x07" * 12),
        "stale_timestamp": envelope(ts=NOW - 60_001, nonce=b"\x09" * 12),
        "bad_payload": envelope(etype=99, nonce=b"\x0a" * 12),
        "unknown_sender": envelope(body=payloads.message("c", "b", 1), nonce=b"\x0b" * 12),  # `from` is not a
        "wrong_target": envelope(dst=b"\x09" * 16, nonce=b"\x0c" * 12),
    }
    for reason, data in authenticated.items():
        verdict = judge(data, guard=guard)
        assert (verdict.reason, verdict.attributable) == (reason, True)


def test_spc_deadline():
    header = Header(EnvelopeType.SPC_REQUEST, 1, NOW, 0, A.id_bytes, ME.id_bytes)
    assert spc_deadline_ms(header, {"timeoutMs": 500}) == NOW + 500
    assert spc_deadline_ms(header, {}) is None
    assert spc_deadline_ms(header, {"timeoutMs": True}) is None
    assert spc_deadline_ms(header, {"timeoutMs": -1}) is None
