"""The envelope codec: exact layout, round trips, and that no byte string escapes EnvelopeError."""
import os
import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speed_runtime.core.envelope import (HEADER_SIZE, OVERHEAD, EnvelopeType, Header, decode_header, envelope_filename,
                                    open_envelope, parse_filename, seal)
from speed_runtime.core.errors import EnvelopeError
from speed_runtime.keyfile import Key

KEY = Key(bytes(range(32)))
OTHER = Key(bytes(32))
SRC, DST = uuid.UUID(int=1).bytes, uuid.UUID(int=2).bytes


def make(payload=b'{"from":"a","to":"b","data":1}', etype=EnvelopeType.MESSAGE, seq=1, flags=0, nonce=b"\x07" * 12):
    return seal(Header(etype, seq, 1_700_000_000_000, len(payload), SRC, DST, flags), payload, KEY, nonce)


def test_layout_is_big_endian_and_64_bytes():
    payload = b'{"from":"a","to":"b","data":1}'
    data = make(payload, seq=0x0102030405060708, flags=1)
    assert len(data) == OVERHEAD + len(payload) == 64 + 12 + 30 + 16
    version, etype, flags, hlen, seq, ts, psize = struct.unpack(">BBHIQQQ", data[:32])
    assert (version, etype, flags, hlen, seq, ts, psize) == (1, 1, 1, 64, 0x0102030405060708, 1_700_000_000_000, 30)
    assert data[32:48] == SRC and data[48:64] == DST and data[64:76] == b"\x07" * 12


@given(st.binary(max_size=2048), st.integers(1, 8), st.integers(0, 2**64 - 1), st.binary(min_size=12, max_size=12))
@settings(max_examples=200, deadline=None)
def test_round_trip(payload, etype, seq, nonce):
    opened = open_envelope(make(payload, etype, seq, nonce=nonce), KEY)
    assert opened.payload == payload and opened.nonce == nonce
    assert (opened.header.type, opened.header.sequence, opened.header.payload_size) == (etype, seq, len(payload))


@given(st.binary(max_size=4096))
@settings(max_examples=500, deadline=None)
def test_arbitrary_bytes_only_raise_envelope_error(data):
    with pytest.raises(EnvelopeError):
        open_envelope(data, KEY)


@given(st.data())
@settings(max_examples=300, deadline=None)
def test_any_single_bit_flip_is_rejected(data):
    env = bytearray(make())
    bit = data.draw(st.integers(0, len(env) * 8 - 1))
    env[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(EnvelopeError) as info:
        open_envelope(bytes(env), KEY)
    offset = bit // 8
    expected = {0: "bad_version", 4: "bad_version", 5: "bad_version", 6: "bad_version", 7: "bad_version"}
    if offset in expected:
        assert info.value.reason == expected[offset]
    elif 24 <= offset < 32:
        assert info.value.reason in ("bad_size", "too_large")
    else:
        assert info.value.reason == "bad_tag"


def test_truncation_and_appended_bytes_are_bad_size():
    env = make()
    for cut in range(len(env)):
        with pytest.raises(EnvelopeError) as info:
            open_envelope(env[:cut], KEY)
        assert info.value.reason == "bad_size"
    with pytest.raises(EnvelopeError) as info:
        open_envelope(env + b"\0", KEY)
    assert info.value.reason == "bad_size"


def test_wrong_key_is_bad_tag_and_limits_apply():
    with pytest.raises(EnvelopeError) as info:
        open_envelope(make(), OTHER)
    assert info.value.reason == "bad_tag"
    big = make(b"x" * 2000)
    with pytest.raises(EnvelopeError) as info:
        open_envelope(big, KEY, max_payload=1000)
    assert info.value.reason == "too_large"


def test_unknown_type_is_bad_payload_only_after_the_tag_passes():
    env = make(etype=9)
    with pytest.raises(EnvelopeError) as info:
        open_envelope(env, KEY)
    assert info.value.reason == "bad_payload"


def test_size_is_judged_before_version():
    env = bytearray(make())
    env[0] = 2
    with pytest.raises(EnvelopeError) as info:
        open_envelope(bytes(env[:-1]), KEY)  # wrong size and wrong version: size comes first (§5.5 step 3)
    assert info.value.reason == "bad_size"


def test_header_decode_short_input():
    with pytest.raises(EnvelopeError):
        decode_header(b"\x01" * (HEADER_SIZE - 1))


def test_filename_round_trip_and_rejects():
    nonce = bytes.fromhex("deadbeef00112233aabbccdd")
    name = envelope_filename("billing", SRC, 42, nonce)
    assert name == f"billing.{SRC.hex()[:8]}.{42:020d}.deadbeef.env"
    parsed = parse_filename(name)
    assert (parsed.sender, parsed.sequence, parsed.nonce8) == ("billing", 42, "deadbeef")
    assert parse_filename(name.upper().replace("BILLING", "billing").replace(".ENV", ".env")).id8 == SRC.hex()[:8]
    for bad in ("x.env", ".billing.00000000.00000000000000000001.deadbeef.env", "../a.00000000.00000000000000000001.deadbeef.env",
                "a.00000000.99999999999999999999.deadbeef.env", "a.0000000g.00000000000000000001.deadbeef.env", "a.00000000.00000000000000000001.deadbeef.ENV"):
        assert parse_filename(bad) is None


def test_nonces_of_real_sends_differ():
    assert len({os.urandom(12) for _ in range(1000)}) == 1000
