"""Pure core: replay window, lease arithmetic, registry entries, payloads, names, access."""
import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speed_runtime.core import payloads
from speed_runtime.core.access import explain_call, policy_allows
from speed_runtime.core.envelope import EnvelopeType
from speed_runtime.core.errors import EnvelopeError, InvalidNameError
from speed_runtime.core.entry import RegistryEntry
from speed_runtime.core.errors import BadEntryError
from speed_runtime.core.liveness import HostFacts, judge
from speed_runtime.core.liveness import heartbeat_age as _age
from speed_runtime.node.grants import AccessRegistry
from speed_runtime.core.names import validate_name
from speed_runtime.core.replay import ReplayGuard

SRC = b"\x01" * 16


# ---------------------------------------------------------------- replay
def test_replay_rules():
    g = ReplayGuard(window_ms=60_000)
    now = 1_000_000
    assert g.check(SRC, "a", 1, b"n1", now, now) == 0
    with pytest.raises(EnvelopeError, match="replayed_nonce"):
        g.check(SRC, "a", 2, b"n1", now, now)
    with pytest.raises(EnvelopeError, match="replayed_sequence"):
        g.check(SRC, "a", 1, b"n2", now, now)
    assert g.check(SRC, "a", 5, b"n3", now, now) == 3  # a gap is accepted and recorded
    assert g.senders[SRC].gaps == 1 and g.senders[SRC].missing == 3
    with pytest.raises(EnvelopeError, match="stale_timestamp"):
        g.check(SRC, "a", 6, b"n4", now - 60_001, now)
    with pytest.raises(EnvelopeError, match="stale_timestamp"):
        g.check(SRC, "a", 6, b"n4", now + 60_001, now)
    assert g.check(b"\x02" * 16, "a", 1, b"n5", now, now) == 0  # a new instance starts at 1


def test_replay_nonce_memory_is_bounded_by_the_window():
    g = ReplayGuard(window_ms=1000)
    for i in range(10_000):
        g.check(SRC, "a", i + 1, i.to_bytes(12, "big"), i, i)
    assert g.remembered_nonces <= 2002


@given(st.lists(st.tuples(st.integers(1, 50), st.integers(0, 20)), max_size=200))
@settings(max_examples=200, deadline=None)
def test_replay_accepts_exactly_the_increasing_fresh_envelopes(steps):
    g = ReplayGuard(window_ms=1000)
    last, seen = 0, set()
    for i, (seq, nonce_id) in enumerate(steps):
        nonce = nonce_id.to_bytes(12, "big")
        should = seq > last and nonce not in seen
        try:
            g.check(SRC, "a", seq, nonce, 500, 500)
            accepted = True
        except EnvelopeError:
            accepted = False
        assert accepted == should
        if accepted:
            last = seq
            seen.add(nonce)


# ---------------------------------------------------------------- lease
def _facts(boot_id, boottime_now):
    return None if boot_id is None else HostFacts("elsewhere", boot_id, boottime_now, lambda pid: True)


def lease_state(e, now, boot_id=None, boottime_now=None):
    return judge(e, now, _facts(boot_id, boottime_now)).state


def is_stale(e, now):
    return judge(e, now).stale


def remaining(e, now):
    return judge(e, now).remaining


def heartbeat_age(e, now, boot_id, boottime_now):
    return _age(e, now, _facts(boot_id, boottime_now))


def entry(**kw):
    base = dict(name="n", id=str(uuid.uuid4()), last_heartbeat=1000.0, lease_seconds=30.0)
    base.update(kw)
    return RegistryEntry(**base)


def test_staleness_by_wall_clock():
    e = entry()
    assert lease_state(e, 1030.0) == "online" and not is_stale(e, 1030.0)
    assert lease_state(e, 1030.01) == "stale"
    assert remaining(e, 1010.0) == pytest.approx(20.0)
    assert lease_state(entry(status="leaving"), 1001.0) == "leaving"


def test_same_boot_uses_boot_time_so_clock_steps_do_not_matter():
    e = entry(boot_id="B", boot_time_heartbeat=500.0)
    # the wall clock jumped an hour forward: still alive on the boot clock
    assert lease_state(e, 1000.0 + 3600, boot_id="B", boottime_now=510.0) == "online"
    # the wall clock jumped back: a dead node is not revived
    assert lease_state(e, 990.0, boot_id="B", boottime_now=531.0) == "stale"
    # another boot (or host): wall clock decides
    assert lease_state(e, 1000.0 + 3600, boot_id="C", boottime_now=510.0) == "stale"
    assert heartbeat_age(e, 2000.0, "B", 520.0) == pytest.approx(20.0)


def test_entry_round_trip_keeps_unknown_fields():
    e = entry(groups=("g",), allow=("x",), services=("echo",), boot_id="B", boot_time_heartbeat=1.5,
              extra={"counters": {"sent": 3}})
    back = RegistryEntry.from_json(e.to_json())
    assert back == e and back.extra == {"counters": {"sent": 3}}
    assert json.loads(e.to_json())["lastHeartbeat"] == 1000.0


def test_an_entrys_numbers_are_values_not_spellings():
    """docs/PROTOCOL.md §9 "Numbers": 4242.0 is the integer 4242 (a pid, the protocol), a number
    beyond a double's range is missing (the default), and booleans are never numbers."""
    ident = str(uuid.uuid4())
    text = ('{"name":"n","id":"%s","lastHeartbeat":1000,"pid":4.242e3,"protocol":1.0,"leaseSeconds":%s,'
            '"heartbeatSeconds":true,"bootTimeHeartbeat":1e400}' % (ident, "9" * 400))
    e = RegistryEntry.from_json(text.encode())
    assert (e.pid, e.protocol, e.lease_seconds, e.heartbeat_seconds) == (4242, 1, 30.0, 5.0)
    assert isinstance(e.pid, int) and e.boot_time_heartbeat is None and e.last_heartbeat == 1000.0
    assert RegistryEntry.from_json(text.replace("4.242e3", "4242.5").encode()).pid == 0  # not an integer
    with pytest.raises(BadEntryError):  # the one required number, beyond a double: the entry is unreadable
        RegistryEntry.from_json(text.replace('"lastHeartbeat":1000', '"lastHeartbeat":1' + "0" * 400).encode())


def test_an_entry_with_an_integer_too_long_for_int_reads_with_that_field_missing():
    """An integer of more digits than Python's int() converts (4,300) used to make json.loads raise
    ValueError, reported as "not UTF-8 JSON". It is beyond a double: missing (§9 "Numbers")."""
    ident = str(uuid.uuid4())
    nines = "9" * 5000
    text = ('{"name":"n","id":"%s","lastHeartbeat":1000,"pid":%s,"host":"h","leaseSeconds":-%s,"allow":["a"],'
            '"protocol":1}' % (ident, nines, nines))
    e = RegistryEntry.from_json(text.encode())
    assert (e.pid, e.lease_seconds) == (0, 30.0)  # missing: the defaults
    assert (e.name, e.id, e.last_heartbeat, e.host, e.allow, e.protocol) == ("n", ident, 1000.0, "h", ("a",), 1)
    with pytest.raises(BadEntryError, match="lacks a numeric 'lastHeartbeat'"):  # the required one: unreadable
        RegistryEntry.from_json(text.replace('"lastHeartbeat":1000', '"lastHeartbeat":' + nines).encode())
    with pytest.raises(BadEntryError, match="not UTF-8 JSON"):  # what is not JSON still is not
        RegistryEntry.from_json(text[:-1].encode())  # (cut short after the long integers)


@pytest.mark.parametrize("data", [b"", b"[]", b"{", b'{"name":"n","id":"x","lastHeartbeat":1}',
                                  b'{"name":"n.x","id":"' + str(uuid.uuid4()).encode() + b'","lastHeartbeat":1}',
                                  b'{"name":"n","id":"' + str(uuid.uuid4()).encode() + b'"}',
                                  b'{"name":"n","id":"' + str(uuid.uuid4()).encode() + b'","lastHeartbeat":true}',
                                  b"\xff\xfe", b"[" * 100000, b" " * 70000])
def test_bad_entries_raise_bad_entry_error(data):
    with pytest.raises(BadEntryError):
        RegistryEntry.from_json(data)


@given(st.recursive(st.none() | st.booleans() | st.floats() | st.text(max_size=10) | st.integers(),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c, max_size=6),
                    max_leaves=30))
@settings(max_examples=300, deadline=None)
def test_entry_reader_only_raises_its_own_error(obj):
    try:
        RegistryEntry.from_json(json.dumps(obj).encode())
    except BadEntryError:
        pass


# ---------------------------------------------------------------- payloads
def test_payload_validation():
    ok = payloads.encode_payload(payloads.spc_request("a", "b", "r1", "echo", {"x": 1}, 500))
    assert payloads.decode_payload(ok, EnvelopeType.SPC_REQUEST)["timeoutMs"] == 500
    for bad, etype in [(b"[]", 1), (b"{}", 1), (b'{"from":"a","to":"b"}', 1), (b"\xff", 1),
                       (b'{"from":"a","to":"b","requestId":"r","status":"ERROR","errorCode":"NOPE"}', 3),
                       (b'{"from":"a","to":"b","requestId":"r","status":"SUCCESS"}', 3),
                       (b'{"from":"a","to":"b","ackSeq":-1}', 8),
                       (b'{"from":"a","to":"b","requestId":"r","service":"s","arguments":{},"callerNode":"z"}', 2)]:
        with pytest.raises(EnvelopeError, match="bad_payload"):
            payloads.decode_payload(bad, etype)


_JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                            lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                            max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(), _JSON_VALUES, max_size=5))
def test_payload_codec_is_the_standard_librarys(obj):
    """encode_payload and decode_payload call json's C encoder and scanner directly: the same
    bytes, the same values and the same errors as json.dumps/json.loads with the payload settings."""
    std = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        expected = std.encode(obj).encode()
    except ValueError as exc:  # NaN or infinity
        with pytest.raises(ValueError, match=str(exc)):
            payloads.encode_payload(obj)
        return
    assert payloads.encode_payload(obj) == expected
    assert payloads._loads(expected.decode()) == json.loads(expected)


@pytest.mark.parametrize("text", ['{"a":1}', ' \n{"a":1}\t ', '{"a":1} x', "", "  ", "[1]", '{"a":NaN}',
                                  '\ufeff{"a":1}', '{"a":1}{"b":2}', '{"a":"\\ud800"}', '{"a":1e400}', "[" * 5000])
def test_payload_parse_accepts_and_refuses_what_json_loads_does(text):
    try:
        expected = repr(json.loads(text))
    except (ValueError, RecursionError) as exc:  # (decode_payload turns either into bad_payload)
        with pytest.raises(RecursionError if isinstance(exc, RecursionError) else ValueError):
            payloads._loads(text)
    else:
        assert repr(payloads._loads(text)) == expected


@pytest.mark.parametrize("decode", [payloads.pure_decode_payload, payloads.decode_payload])
def test_a_payload_integer_too_long_for_int_is_beyond_a_double_like_1e400(decode):
    """An integer of more digits than int() converts (4,300) is valid JSON: in an application's
    value it reads as 1e400 does (infinity); in a field meant as an integer it is out of range, and
    the field's own rule says bad_payload. It used to be "the payload is not UTF-8 JSON"."""
    nines = "9" * 5000
    message = ('{"from":"a","to":"b","data":[-%s,%s,1e400]}' % (nines, nines)).encode()
    assert decode(message, EnvelopeType.MESSAGE)["data"] == [float("-inf"), float("inf"), float("inf")]
    with pytest.raises(EnvelopeError, match="needs 'ackSeq'"):
        decode(('{"from":"a","to":"b","ackSeq":%s}' % nines).encode(), EnvelopeType.ACK)
    with pytest.raises(EnvelopeError, match="not UTF-8 JSON"):  # what is not JSON still is not
        decode(('{"from":"a","to":"b","data":%s' % nines).encode(), EnvelopeType.MESSAGE)


def test_other_readers_of_a_peers_json_take_a_too_long_integer_as_beyond_a_double():
    """The chunk headers and bodies (extension chunks) and an operator's signed control request:
    a 5,000-digit integer is not "not UTF-8 JSON", but a number too large (the field's own rule)."""
    from speed_runtime.core import chunks, control
    nines = "9" * 5000
    assert chunks.decode_json("[%s]" % nines) == [float("inf")]
    header = chunks._header(memoryview(('{"from":"a","to":"b","n":%s}' % nines).encode()))
    assert header == {"from": "a", "to": "b", "n": float("inf")}
    request = {"target": "t", "instance": str(uuid.uuid4()), "requestId": "r", "requester": "o", "command": "status",
               "issuedAt": 0, "expiresAt": 1}
    raw = json.dumps(request).replace('"issuedAt": 0', '"issuedAt": ' + nines).encode()
    assert control._parse_request(raw) == (None, "the signed request lacks an integer 'issuedAt' (Unix milliseconds)")


def test_payload_encoder_keeps_the_circular_reference_check():
    loop: dict = {}
    loop["self"] = loop
    for _ in range(2):  # and a failed encoding leaves nothing behind for the next
        with pytest.raises(ValueError, match="Circular reference"):
            payloads.encode_payload(loop)
    assert payloads.encode_payload({"a": [loop is loop]}) == b'{"a":[true]}'


def test_bytes_messages_are_base64():
    p = payloads.message("a", "b", b"\x00\xff")
    assert p["encoding"] == "base64" and p["data"] == "AP8="


# ---------------------------------------------------------------- names and access
@pytest.mark.parametrize("name", ["a", "A_b-c", "_x", "9" * 64])
def test_valid_names(name):
    assert validate_name(name) == name


@pytest.mark.parametrize("name", ["", "-a", "a.b", "a/b", "x" * 65, "speed_registry", "speed_traces", "é", None])
def test_invalid_names_quote_the_rule(name):
    with pytest.raises(InvalidNameError, match="must match|reserved"):
        validate_name(name)


def test_access_registry_and_policies():
    acl = AccessRegistry(["a"])
    assert "a" in acl and "b" not in acl
    assert acl.allow("b") and not acl.allow("b")
    assert acl.revoke("a") and not acl.revoke("a")
    assert acl.names() == ["b"]
    assert policy_allows(None, "x") and policy_allows({"x"}, "x") and not policy_allows({"y"}, "x")
    assert policy_allows(lambda c: c.startswith("x"), "xy") and not policy_allows(lambda c: False, "x")


def test_explain_call_names_each_missing_grant():
    assert explain_call("a", ["b"], "b", ["a"], ["echo"], "echo") == []
    problems = explain_call("a", [], "b", [], ["echo"], "nope")
    assert len(problems) == 3 and "allow a" in problems[0] and "allow b" in problems[1] and "nope" in problems[2]
    assert explain_call("a", [], "b", None, None, "echo") == ["node b is not online"]


# ---------------------------------------------------------------- journal lines
@given(st.builds(
    __import__("speed_runtime.core.records", fromlist=["EnvelopeTrace"]).EnvelopeTrace,
    ts=st.floats(0, 2e9), node=st.just("n"), dir=st.sampled_from(["in", "out"]), peer=st.text(max_size=20),
    type=st.sampled_from(["MESSAGE", "SPC_REQUEST"]), seq=st.integers(0, 2**64 - 1), size=st.integers(0, 10**6),
    outcome=st.sampled_from(["sent", "accepted", "rejected"]), reason=st.none() | st.just("bad_tag"),
    request_id=st.none() | st.text(max_size=20), service=st.none() | st.text(max_size=20),
    status=st.none() | st.just("ERROR"), error_code=st.none() | st.text(max_size=10),
    latency_ms=st.none() | st.floats(0, 1e6), envelope=st.none() | st.binary(max_size=200)))
@settings(max_examples=200, deadline=None)
def test_journal_line_encoder_writes_exactly_the_record(event):
    from speed_runtime.core.records import encode_line, parse_line
    line = encode_line(event, 64 * 1024)
    assert line.endswith("\n") and line.count("\n") == 1
    assert json.loads(line) == event.to_record()
    assert parse_line(line.encode()) is not None
