"""The compiled form of the per-envelope work (core/_compiled.c) against its pure-Python twins:
the same values, the same errors (type, reason, detail, text), on random and hostile input; and
the choice of the form (core/accel.py): automatic, forced pure by SPEED_PURE_PYTHON, pure when
the module is missing.

Run under either form: when the pure form runs (SPEED_PURE_PYTHON=1, or the module was not
installed) the module is built from its source here, as tests/interop builds the C node."""
from __future__ import annotations

import errno
import importlib.machinery
import importlib.util
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import uuid

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from speed_runtime.core import accel, aead, envelope, payloads, records
from speed_runtime.core.envelope import EnvelopeType, FileName, Header, OpenedEnvelope
from speed_runtime.core.errors import SPC_ERROR_CODES, EnvelopeError
from speed_runtime.keyfile import Key

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEY = Key(bytes(range(32)))
SRC, DST = uuid.UUID(int=1).bytes, uuid.UUID(int=2).bytes
MANY = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def build_from_source() -> object:
    """The module built from core/_compiled.c into a temporary directory, bound to the twins."""
    out = tempfile.mkdtemp(prefix="speed-compiled-")
    try:
        r = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", out, "--build-temp",
                            os.path.join(out, "tmp")], cwd=REPO, capture_output=True, text=True, timeout=300)
        built = [os.path.join(d, f) for d, _, files in os.walk(out) for f in files if f.startswith("_compiled.")
                 and f.endswith(".so")]
        if not built:
            pytest.fail("building the compiled form failed (are gcc, python3-dev and libsodium-dev installed?)\n"
                        + r.stdout + r.stderr)
        spec = importlib.util.spec_from_file_location("speed_runtime.core._compiled", built[0])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        shutil.rmtree(out, ignore_errors=True)  # a loaded shared object stays mapped
    for name, value in (("Header", Header), ("FileName", FileName), ("OpenedEnvelope", OpenedEnvelope),
                        ("EnvelopeError", EnvelopeError), ("SPC_ERROR_CODES", SPC_ERROR_CODES),
                        ("parse_filename", envelope.pure_parse_filename), ("seal", envelope.pure_seal),
                        ("open_envelope", envelope.pure_open_envelope), ("decode_payload", payloads.pure_decode_payload),
                        ("encode_payload", payloads.pure_encode_payload), ("encrypt", aead.pure_encrypt),
                        ("decrypt", aead.pure_decrypt), ("EnvelopeTrace", records.EnvelopeTrace),
                        ("envelope_line", records.pure_envelope_line)):
        module.bind(name, value)
    return module


@pytest.fixture(scope="module")
def compiled():
    return accel.compiled if accel.compiled is not None else build_from_source()


def outcome(fn, *args, **kwargs):
    """What a call gave: ("value", its type, its repr, the value) or ("error", its type, text,
    reason, detail). The repr tells 1 from 1.0 from True, and NaN equals itself there."""
    try:
        value = fn(*args, **kwargs)
    except Exception as exc:  # the comparison is the point: any exception must be the twin's
        return ("error", type(exc), str(exc), getattr(exc, "reason", None), getattr(exc, "detail", None))
    return ("value", type(value), repr(value), value)


def same(pure, fast, *args, **kwargs):
    expected = outcome(pure, *args, **kwargs)
    assert outcome(fast, *args, **kwargs)[:3] == expected[:3]
    return expected


# ------------------------------------------------------------------ file names
NAME_CHARS = st.sampled_from(list("abcXYZ09_-.") + ["é", "\0", "\n", " ", "٣", "Ａ"])
HEX = st.text(alphabet="0123456789abcdefABCDEFgx.", min_size=7, max_size=9)
DIGITS = st.one_of(st.text(alphabet="0123456789", min_size=19, max_size=21),
                   st.integers(2**64 - 3, 2**64 + 3).map(lambda n: f"{n:020d}"),
                   st.integers(0, 2**64 - 1).map(lambda n: f"{n:020d}"))


@st.composite
def file_names(draw):
    sender = draw(st.text(alphabet=NAME_CHARS, min_size=0, max_size=66))
    suffix = draw(st.sampled_from([".env", ".env", ".ENV", ".env\n", ".en", ".envx", ""]))
    return f"{sender}.{draw(HEX)}.{draw(DIGITS)}.{draw(HEX)}{suffix}"


@given(st.one_of(file_names(), st.text(max_size=120)))
@MANY
@example("a.01010101.18446744073709551615.0a0B0c0D.env")
@example("a.01010101.18446744073709551616.0a0b0c0d.env")
@example("-a.01010101.00000000000000000001.0a0b0c0d.env")
@example("a" * 64 + ".01010101.00000000000000000001.0a0b0c0d.env")
@example("a" * 65 + ".01010101.00000000000000000001.0a0b0c0d.env")
def test_file_names_parse_the_same(compiled, name):
    same(envelope.pure_parse_filename, compiled.parse_filename, name)


def test_a_file_name_gives_a_FileName_and_anything_else_is_the_twins_business(compiled):
    parsed = compiled.parse_filename("node-1.0A0b0C0d.00000000000000000042.FFFFFFFF.env")
    assert type(parsed) is FileName and parsed == ("node-1", "0a0b0c0d", 42, "ffffffff")
    for args, kwargs in [((b"a.01010101.00000000000000000001.0a0b0c0d.env",), {}), ((), {}), ((1,), {}),
                         ((), {"name": "a.01010101.00000000000000000001.0a0b0c0d.env"})]:
        same(envelope.pure_parse_filename, compiled.parse_filename, *args, **kwargs)


# ------------------------------------------------------------------ seal
U64 = st.integers(0, 2**64 - 1)
EDGY_INT = st.one_of(st.integers(-2, 2**64 + 2), st.sampled_from([True, False, EnvelopeType.ACK]))


@st.composite
def headers(draw):
    plain = draw(st.booleans())
    ints = (lambda top: st.integers(0, top)) if plain else (lambda top: st.one_of(st.integers(0, top), EDGY_INT))
    ids = st.binary(min_size=16, max_size=16) if plain else st.one_of(st.binary(min_size=15, max_size=17),
                                                                        st.just(bytearray(16)), st.just("x" * 16))
    return Header(draw(ints(255)), draw(ints(2**64 - 1)), draw(ints(2**64 - 1)), draw(st.integers(0, 9)),
                  draw(ids), draw(ids), draw(ints(65535)), draw(ints(255)), draw(ints(2**32 - 1)))


@given(headers(), st.one_of(st.binary(max_size=300), st.just(bytearray(b"xy"))),
       st.one_of(st.binary(min_size=12, max_size=12), st.binary(max_size=14)))
@MANY
def test_seal_gives_the_same_bytes_and_errors(compiled, header, payload, nonce):
    same(envelope.pure_seal, compiled.seal, header, payload, KEY, nonce)


def test_seal_of_a_large_payload_without_the_gil_is_the_same(compiled):
    header, payload, nonce = Header(1, 7, 1, 0, SRC, DST), os.urandom(700_000), os.urandom(12)
    assert compiled.seal(header, payload, KEY, nonce) == envelope.pure_seal(header, payload, KEY, nonce)


# ------------------------------------------------------------------ open
def sealed(payload=b'{"from":"a","to":"b","data":1}', etype=1, seq=1, flags=0):
    return envelope.pure_seal(Header(etype, seq, 1_700_000_000_000, 0, SRC, DST, flags), payload, KEY, b"\x07" * 12)


@st.composite
def hostile_envelopes(draw):
    data = bytearray(sealed(draw(st.binary(max_size=200)), draw(st.integers(0, 255)), draw(U64), draw(
        st.integers(0, 65535))))
    for _ in range(draw(st.integers(0, 3))):
        how = draw(st.sampled_from(["flip", "version", "hlen", "psize", "type", "cut", "grow"]))
        if how == "flip" and data:
            at = draw(st.integers(0, len(data) - 1))
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif how == "version" and len(data) > 1:
            data[0] = draw(st.integers(0, 255))
        elif how == "hlen":
            data[4:8] = struct.pack(">I", draw(st.sampled_from([0, 63, 64, 65, 2**32 - 1])))
        elif how == "psize":
            data[24:32] = struct.pack(">Q", draw(st.one_of(U64, st.integers(0, 300))))
        elif how == "type" and len(data) > 1:
            data[1] = draw(st.integers(0, 255))
        elif how == "cut":
            del data[draw(st.integers(0, len(data))):]
        elif how == "grow":
            data += draw(st.binary(min_size=1, max_size=40))
    return bytes(data)


MAX_PAYLOADS = st.one_of(st.just(None), st.integers(-100, 400), st.sampled_from([1 << 20, 2**63 - 1, 2**63, 2**70]))


@given(st.one_of(hostile_envelopes(), st.binary(max_size=400)), MAX_PAYLOADS,
       st.sampled_from([KEY, Key(bytes(32))]))
@MANY
def test_open_gives_the_same_envelope_or_the_same_rejection(compiled, data, max_payload, key):
    args = (data, key) if max_payload is None else (data, key, max_payload)
    kind, *rest = same(envelope.pure_open_envelope, compiled.open_envelope, *args)
    if kind == "value":
        opened = rest[2]
        assert type(opened) is OpenedEnvelope and type(opened.header) is Header


def test_open_takes_keywords_and_other_buffers_through_the_twin(compiled):
    data = sealed()
    for args, kwargs in [((data, KEY), {"max_payload": 10}), ((bytearray(data), KEY), {}),
                         ((memoryview(data), KEY, 100), {}), ((data, KEY, 1.5), {}), ((data, "key"), {}), ((data,), {})]:
        same(envelope.pure_open_envelope, compiled.open_envelope, *args, **kwargs)


def test_open_of_an_empty_and_of_a_large_payload_is_the_same(compiled):
    for payload in (b"", os.urandom(1 << 20)):
        data = sealed(payload)
        kind, _, _, opened = same(envelope.pure_open_envelope, compiled.open_envelope, data, KEY)
        assert kind == "value" and opened.payload == payload


# ------------------------------------------------------------------ ChaCha20-Poly1305 alone
@given(st.binary(max_size=300), st.binary(max_size=80), st.binary(min_size=11, max_size=13),
       st.binary(min_size=31, max_size=33), st.integers(0, 400))
@MANY
def test_encrypt_and_decrypt_are_the_same(compiled, message, ad, nonce, key, flip):
    if len(nonce) != 12 or len(key) != 32:  # the callers check sizes; both forms pass other sizes to the twin
        nonce, key = nonce[:12].ljust(12, b"\0"), key[:32].ljust(32, b"\0")
    ciphertext = same(aead.pure_encrypt, compiled.encrypt, message, ad, nonce, key)[3]
    same(aead.pure_decrypt, compiled.decrypt, ciphertext, ad, nonce, key)
    tampered = bytearray(ciphertext)
    tampered[flip % len(tampered)] ^= 1
    assert same(aead.pure_decrypt, compiled.decrypt, bytes(tampered), ad, nonce, key)[3] is None
    same(aead.pure_decrypt, compiled.decrypt, ciphertext[:15], ad, nonce, key)


# ------------------------------------------------------------------ the JSON payload
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False) | st.text(
    max_size=6), lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6)
FIELDS = ["from", "to", "data", "requestId", "service", "arguments", "callerNode", "status", "result", "errorCode",
          "errorMessage", "event", "reply", "ackSeq", "timeoutMs"]


@st.composite
def payload_objects(draw):
    obj = {}
    for field in draw(st.lists(st.sampled_from(FIELDS), unique=True)):
        obj[field] = draw(st.one_of(JSON_VALUES, st.sampled_from(["a", "b", "ERROR", "SUCCESS", *SPC_ERROR_CODES]),
                                    st.integers(-1, 2**70), st.booleans()))
    if draw(st.booleans()):
        obj.setdefault("from", "a")
        obj.setdefault("to", "b")
    if draw(st.booleans()) and "from" in obj:
        obj["callerNode"] = obj["from"]
    return obj


@st.composite
def payload_bytes(draw):
    text = json.dumps(draw(st.one_of(payload_objects(), JSON_VALUES)), ensure_ascii=draw(st.booleans()))
    how = draw(st.sampled_from(["plain", "plain", "spaces", "trailing", "cut", "bytes"]))
    if how == "spaces":
        text = draw(st.sampled_from([" ", "\t\n", "\r", "\x0b", "\u00a0"])) + text + draw(
            st.sampled_from(["", " ", "\n\r\t", "\x0c"]))
    elif how == "trailing":
        text += draw(st.sampled_from(["x", "{}", " 1", "\0"]))
    elif how == "cut":
        text = text[:draw(st.integers(0, len(text)))]
    data = text.encode()
    return draw(st.binary(max_size=40)) if how == "bytes" else data


ETYPES = st.one_of(st.integers(0, 9), st.sampled_from([-1, 2**70, True, EnvelopeType.SPC_RESPONSE]))


@given(payload_bytes(), ETYPES)
@MANY
@example(b'{"from":"a","to":"b","requestId":"r","status":"ERROR","errorCode":[]}', 3)
@example(b'{"from":"a","to":"b","requestId":"r","status":"ERROR","errorCode":"TIMEOUT","errorMessage":1}', 3)
@example(b'{"from":"a","to":"b","ackSeq":-1}', 8)
@example(b'{"from":"a","to":"b","ackSeq":true}', 8)
@example(b'\xff{"from":"a","to":"b"}', 1)
@example(b"[" * 100_000, 1)
@example(b'{"from":"a","to":"b","data":' + b"[" * 70 + b"]" * 70 + b"}", 1)
@example(b'{"from":"a","to":"b","data":"\\ud83d\\ude00 \\ud800 \\u00e9\\/\\b"}', 1)
@example(b'{"from":"a","to":"b","data":[-0, -0.0, 1E400, NaN, -Infinity, 1.5e-3, 123456789012345678901234567890]}', 1)
@example(b'{"from":"a","to":"b","data":"\xed\xa0\x80"}', 1)
@example(b'{"from":"a","to":"b","data":"tab\there"}', 1)
@example(b'{"from":"a","to":"b","from":"c","data":[1,]}', 1)
@example(b'\xef\xbb\xbf{"from":"a","to":"b","data":1}', 1)
@example(b' {"from":"a","to":"b","data":01}', 1)
@example(b"", 1)
def test_payloads_decode_to_the_same_object_or_the_same_rejection(compiled, data, etype):
    same(payloads.pure_decode_payload, compiled.decode_payload, data, etype)


def test_decode_payload_passes_other_arguments_to_the_twin(compiled):
    for args in [(bytearray(b'{"from":"a","to":"b"}'), 5), (b'{"from":"a","to":"b"}', "5"), (b"{}",)]:
        same(payloads.pure_decode_payload, compiled.decode_payload, *args)


class Text(str):
    pass


def nested(depth, leaf):
    for _ in range(depth):
        leaf = {"x": [leaf]}
    return leaf


def circular():
    loop: dict = {"from": "a"}
    loop["self"] = [loop]
    return loop


ODD_VALUES = st.sampled_from([float("nan"), float("inf"), -0.0, 1e300, 2**63, -2**63 - 1, 2**64, 10**30, (1, "t"),
                              "\ud800", "a\udfffb", Text("sub"), EnvelopeType.ACK, b"raw", bytearray(b"x"), 1.5,
                              "\x00\x1f\x7f\"\\\b\f\n\r\t/", "é€𝄞", "\u2028"])
ODD_KEYS = st.one_of(st.text(max_size=4), st.sampled_from([1, -2, 1.5, float("nan"), True, False, None, (1,), b"k",
                                                           Text("k"), "\ud800"]))
ENCODABLE = st.recursive(JSON_VALUES | ODD_VALUES, lambda inner: st.lists(inner, max_size=3) | st.lists(
    inner, max_size=2).map(tuple) | st.dictionaries(ODD_KEYS, inner, max_size=3), max_leaves=8)


@given(st.one_of(st.dictionaries(ODD_KEYS, ENCODABLE, max_size=4), payload_objects(), ENCODABLE))
@MANY
@example({"deep": nested(63, 1)})
@example({"deep": nested(70, "x")})
@example({"p": "x" * 100_000 + "\n" + "é" * 1000})
def test_payloads_encode_to_the_same_bytes_or_the_same_error(compiled, payload):
    same(payloads.pure_encode_payload, compiled.encode_payload, payload)


def test_encode_of_what_json_refuses_is_json_s_refusal(compiled):
    for payload in ({"loop": circular()}, {"n": float("nan")}, {"b": b"x"}, {"s": "\udc00"}, {(1, 2): 1}, {"i": 10**5000},
                    [1, 2], "text"):
        assert same(payloads.pure_encode_payload, compiled.encode_payload, payload)[0] == (
            "value" if isinstance(payload, (list, str)) else "error")


def doubles_near(value: float, count: int) -> list[float]:
    """`count` doubles on each side of `value`, one unit in the last place apart."""
    bits = struct.unpack("<q", struct.pack("<d", value))[0]
    return [struct.unpack("<d", struct.pack("<q", bits + i))[0] for i in range(-count, count + 1)]


def test_floats_are_written_as_repr_writes_them(compiled):
    """The compiled form finds repr's digits itself where that is plain (times and latencies): the
    same text as float.__repr__ for random doubles over its whole range, the times and latencies the
    journals write, and the cases where it hands over (powers of two, ties, boundaries, the ends of
    its range). A difference fails with the first doubles that differ."""
    import random

    rng = random.Random(20261127)
    values = [rng.uniform(1.7e9, 1.8e9) for _ in range(20000)]  # times
    values += [rng.uniform(0, 50) for _ in range(20000)] + [rng.expovariate(3.0) for _ in range(5000)]  # latencies
    values += [struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(20000)]
    values += [rng.uniform(1e-4, 1e-3) for _ in range(5000)] + [rng.uniform(2**52, 2**53) for _ in range(5000)]
    values += [round(rng.uniform(0, 1e6), rng.randrange(0, 8)) for _ in range(20000)]  # few digits
    for edge in (1e-4, 1e-3, 0.1, 0.5, 1.0, 2.0, 1764280009.0, 1764280009.00390625, 2.0**31, 2.0**52, 2.0**53,
                 9007199254740991.0, 1e15, 1e16, 0.1 + 0.2, 5e-5, 123456.7890123):
        values += doubles_near(edge, 40)
    values = [v for v in values if math.isfinite(v)]
    values += [-v for v in values[::7]]
    differ = [v for v in values if compiled.encode_payload({"f": v}) != b'{"f":%s}' % repr(v).encode()]
    assert not differ[:5], [(v.hex(), repr(v), compiled.encode_payload({"f": v})) for v in differ[:5]]
    line = compiled.envelope_line(records.EnvelopeTrace(1764280009.0039062, "a", "in", "b", "MESSAGE", 1, 2,
                                                         "accepted", latency_ms=0.0005312), 10)
    assert '"ts":1764280009.0039062,' in line and '"latencyMs":0.0005312' in line


def test_a_request_encodes_and_decodes_the_same_in_both_forms(compiled):
    request = payloads.spc_request("cli", "srv", "0" * 32, "echo", {"p": "x" * 64, "n": [1, 2.5, None, True]}, 3000)
    data = same(payloads.pure_encode_payload, compiled.encode_payload, request)[3]
    assert same(payloads.pure_decode_payload, compiled.decode_payload, data, EnvelopeType.SPC_REQUEST)[3] == request


# ------------------------------------------------------------------ the journal's envelope line
JOURNAL_TEXT = st.one_of(st.text(max_size=12), st.sampled_from(["\x7f", "\ud800", "a\udfffb", "é€𝄞", "\u2028",
                                                                 '"\\/\n\b\f\r\t\x00\x1f', Text("sub")]))
OPTIONAL_TEXT = st.one_of(st.none(), JOURNAL_TEXT, st.sampled_from([5, b"x"]))
COUNT = st.one_of(st.integers(0, 2**64 + 3), st.integers(-3, 3), st.sampled_from([True, 1.5, 2**63, -2**63 - 1]))


@st.composite
def envelope_events(draw):
    """EnvelopeTrace events as the nodes make them, and with what they never put in a field."""
    return records.EnvelopeTrace(
        draw(st.one_of(st.floats(), st.integers(0, 2**40))), draw(JOURNAL_TEXT), draw(st.sampled_from(["in", "out"])),
        draw(JOURNAL_TEXT), draw(JOURNAL_TEXT), draw(COUNT), draw(COUNT), draw(JOURNAL_TEXT),
        reason=draw(OPTIONAL_TEXT), request_id=draw(OPTIONAL_TEXT), service=draw(OPTIONAL_TEXT),
        status=draw(OPTIONAL_TEXT), error_code=draw(OPTIONAL_TEXT),
        latency_ms=draw(st.one_of(st.none(), st.floats(), st.integers(-5, 5), st.just(2**1100))),
        envelope=draw(st.one_of(st.none(), st.binary(max_size=70), st.just(bytearray(b"ab")))),
        file=draw(st.one_of(st.none(), JOURNAL_TEXT)), message_id=draw(OPTIONAL_TEXT),
        chunk=draw(st.one_of(st.none(), COUNT)), chunks=draw(st.one_of(st.none(), COUNT)))


@given(envelope_events(), st.sampled_from([0, 3, 64, 65536, 2**70]))
@MANY
@example(records.EnvelopeTrace(1764258000.123456, "billing", "in", "gateway", "MESSAGE", 7, 212, "accepted",
                               envelope=bytes(range(212)), file="x"), 65536)
def test_an_envelope_record_is_the_same_line_in_both_forms(compiled, event, limit):
    same(records.pure_envelope_line, compiled.envelope_line, event, limit)


def test_the_envelope_line_passes_other_arguments_to_the_twin(compiled):
    event = records.EnvelopeTrace(1.5, "a", "in", "b", "MESSAGE", 1, 2, "accepted")
    for args in [(event,), (tuple(event), 10), (event, "10"), (event, 10, 11)]:
        same(records.pure_envelope_line, compiled.envelope_line, *args)


# ------------------------------------------------------------------ the hot path's system calls
def test_the_compiled_rename_unlink_and_write_give_what_the_ctypes_calls_give(compiled, tmp_path):
    """rename_noreplace, unlinkat_keeping_gil and write_keeping_gil against transport's and
    fsutil's ctypes calls: the same outcome, 0 or the same errno, on the same cases."""
    import ctypes

    from speed_runtime import fsutil, transport

    def ctypes_unlink(fd, raw):
        return 0 if fsutil._UNLINKAT(fd, raw, 0) == 0 else ctypes.get_errno()

    def ctypes_write(fd, data):
        written = fsutil._WRITE(fd, data, len(data))
        return written if written >= 0 else -ctypes.get_errno()

    for form, (rename, unlink, write) in {
            "ctypes": (transport._ctypes_rename_noreplace, ctypes_unlink, ctypes_write),
            "compiled": (compiled.rename_noreplace, compiled.unlinkat_keeping_gil, compiled.write_keeping_gil)}.items():
        src, dst = tmp_path / form / "tmp", tmp_path / form / "inbox"
        src.mkdir(parents=True)
        dst.mkdir()
        (src / "a").write_bytes(b"1")
        (src / "b").write_bytes(b"2")
        (dst / "b").write_bytes(b"taken")
        (dst / "d").mkdir()
        sfd, dfd = os.open(src, os.O_RDONLY | os.O_DIRECTORY), os.open(dst, os.O_RDONLY | os.O_DIRECTORY)
        r, w = os.pipe()
        try:
            got = [rename(sfd, b"a", dfd), rename(sfd, b"b", dfd), rename(sfd, b"missing", dfd),
                   rename(-5, b"a", dfd), unlink(dfd, b"a"), unlink(dfd, b"a"), unlink(dfd, b"d"),
                   write(w, b"xyz"), write(-5, b"x")]
        finally:
            for fd in (sfd, dfd, r, w):
                os.close(fd)
        assert got == [0, errno.EEXIST, errno.ENOENT, errno.EBADF, 0, errno.ENOENT, errno.EISDIR, 3, -errno.EBADF], form
        assert (dst / "b").read_bytes() == b"taken" and (src / "b").exists() and not (dst / "a").exists()


def test_the_compiled_file_stamp_is_the_registry_s_stamp(compiled, tmp_path):
    """file_stamp against registry.py's os.stat form: a file, a rewritten one, a symlink (not
    followed), a FIFO, a directory, a missing name, a name in surrogate-escaped bytes, and
    modification times os.stat computes beyond 64 bits of nanoseconds or before 1970."""
    from speed_runtime import registry

    (tmp_path / "entry.node").write_bytes(b"{}")
    (tmp_path / "later.node").write_bytes(b"{}")
    os.utime(tmp_path / "later.node", ns=(0, 10**19 + 7))  # year 2286: beyond 2**63 nanoseconds
    (tmp_path / "early.node").write_bytes(b"x" * 5)
    os.utime(tmp_path / "early.node", ns=(0, -(10**9) * 86400 + 3))
    os.symlink(tmp_path / "entry.node", tmp_path / "link.node")
    os.mkfifo(tmp_path / "fifo.node")
    (tmp_path / "dir.node").mkdir()
    odd = os.fsdecode(b"odd-\xff.node")
    (tmp_path / odd).write_bytes(b"1")
    names = ["entry.node", "later.node", "early.node", "link.node", "fifo.node", "dir.node", "missing.node", odd]
    for name in names:
        path = str(tmp_path / name)
        same(registry._pure_file_stamp, compiled.file_stamp, path)
    assert compiled.file_stamp(str(tmp_path / "later.node"))[1] == 10**19 + 7
    assert compiled.file_stamp(str(tmp_path / "missing.node")) is None
    before = compiled.file_stamp(str(tmp_path / "entry.node"))
    (tmp_path / "new").write_bytes(b"{} ")
    os.replace(tmp_path / "new", tmp_path / "entry.node")  # as every registry write: a new file renamed in
    assert compiled.file_stamp(str(tmp_path / "entry.node")) != before
    same(registry._pure_file_stamp, compiled.file_stamp, str(tmp_path / "entry.node"))


# ------------------------------------------------------------------ which form runs
def form_in_a_fresh_interpreter(env: dict[str, str], prelude: str = "") -> dict:
    code = (prelude + "import json; from speed_runtime.core import accel, envelope, payloads, aead\n"
            "from speed_runtime.keyfile import Key\n"
            "h = envelope.Header(1, 1, 1, 0, b'\\x01' * 16, b'\\x02' * 16)\n"
            "data = envelope.seal(h, b'{\"from\":\"a\",\"to\":\"b\",\"data\":1}', Key(bytes(32)), b'\\x00' * 12)\n"
            "ok = payloads.decode_payload(envelope.open_envelope(data, Key(bytes(32))).payload, 1)['data'] == 1\n"
            "print(json.dumps({'form': accel.FORM, 'compiled': accel.compiled is not None, 'ok': ok,\n"
            "  'seal_is_pure': envelope.seal is envelope.pure_seal}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO,
                         env={**os.environ, **env})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_SPEED_PURE_PYTHON_forces_the_pure_form():
    report = form_in_a_fresh_interpreter({accel.PURE_ENV: "1"})
    assert report == {"form": "pure Python (SPEED_PURE_PYTHON is set)", "compiled": False, "ok": True,
                      "seal_is_pure": True}


def test_without_the_compiled_module_the_pure_form_runs():
    blocked = "import sys; sys.modules['speed_runtime.core._compiled'] = None  # as if it was never built\n"
    report = form_in_a_fresh_interpreter({accel.PURE_ENV: ""}, blocked)
    assert report == {"form": "pure Python (the compiled module is not built)", "compiled": False, "ok": True,
                      "seal_is_pure": True}


def test_the_compiled_form_runs_when_it_is_built_and_not_refused(compiled):
    # On disk, not in sys.modules: the module the fixture built for a checkout without one (not
    # installed) registers itself there, but a fresh interpreter cannot import it.
    importable = importlib.machinery.PathFinder.find_spec("speed_runtime.core._compiled",
                                                           [os.path.dirname(accel.__file__)]) is not None
    report = form_in_a_fresh_interpreter({accel.PURE_ENV: "0"})
    assert report["ok"] and report["compiled"] == importable and report["seal_is_pure"] is not importable
