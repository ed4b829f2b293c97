"""The pure part of the chunks extension: the binary and chunk layouts (core/chunks.py) and the
reassembly state machine (core/reassembly.py), without files, threads or clocks."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from speed_runtime.core import envelope
from speed_runtime.core import chunks
from speed_runtime.core.chunks import FLAG_BINARY, FLAG_CHUNK
from speed_runtime.core.envelope import EnvelopeType
from speed_runtime.core.errors import EnvelopeError
from speed_runtime.core.reassembly import COMPLETE, REFUSED, STORED, Reassembly
from speed_runtime.core import reliable

MSG, REQ, RESP = EnvelopeType.MESSAGE, EnvelopeType.SPC_REQUEST, EnvelopeType.SPC_RESPONSE
BOTH = FLAG_BINARY | FLAG_CHUNK
MiB = 1 << 20


def test_the_flag_bits_are_the_ones_allocated_to_the_extensions():
    assert (chunks.FLAG_BINARY, chunks.FLAG_CHUNK, reliable.FLAG_RELIABLE) == \
        (envelope.FLAG_BINARY, envelope.FLAG_CHUNK, envelope.FLAG_RELIABLE)
    assert envelope.FLAGS[FLAG_BINARY] == envelope.FLAGS[FLAG_CHUNK] == "chunks" \
        and envelope.FLAGS[reliable.FLAG_RELIABLE] == "reliable"


# ------------------------------------------------------------------------------ layouts
def test_binary_layout_carries_raw_bytes_after_a_json_header_and_a_zero_byte():
    raw = bytes(range(256)) * 3
    plaintext = chunks.binary_plaintext({"from": "a", "to": "b", "body": "bytes"}, raw)
    assert plaintext == b'{"from":"a","to":"b","body":"bytes"}\x00' + raw
    payload, piece = chunks.decode(plaintext, MSG, FLAG_BINARY)
    assert payload["data"] == raw and piece is None
    payload, _ = chunks.decode(chunks.binary_plaintext({"from": "a", "to": "b", "body": "json"}, b'{"k":[1,"\xc3\xa9"]}'),
                               MSG, FLAG_BINARY)
    assert payload["data"] == {"k": [1, "é"]}


def test_the_v1_layout_is_decoded_as_v1_whatever_the_reliable_bit():
    text = b'{"from":"a","to":"b","data":[1],"messageId":"m"}'
    assert chunks.decode(text, MSG, 0) == ({"from": "a", "to": "b", "data": [1], "messageId": "m"}, None)
    assert chunks.decode(text, MSG, reliable.FLAG_RELIABLE)[0]["data"] == [1]


@pytest.mark.parametrize("plaintext,etype,flags,why", [
    (b'{"from":"a","to":"b","body":"bytes"}', MSG, FLAG_BINARY, "0x00"),                 # no separator
    (b'{"from":"a","to":"b","body":"bytes"}\x00x', EnvelopeType.EVENT, FLAG_BINARY, "cannot use"),
    (b'{"from":"a","to":"b","data":1}', MSG, FLAG_CHUNK, "binary layout"),                # chunk without binary
    (b'[1]\x00x', MSG, FLAG_BINARY, "object"),
    (b'{"from":"a","to":"b","body":"text"}\x00x', MSG, FLAG_BINARY, "body"),
    (b'{"from":"a","to":"b","body":"json"}\x00{bad', MSG, FLAG_BINARY, "JSON"),
    (b'{"from":"a","to":"b","body":"bytes","requestId":"r","service":"s","callerNode":"a"}\x00{}', REQ,
     FLAG_BINARY, "json"),                                                                   # arguments are JSON
    (b'{"from":"a","to":"b","body":"json","requestId":"r","service":"s","callerNode":"x"}\x00{}', REQ,
     FLAG_BINARY, "callerNode"),
    (b'{"from":"a","to":"b","body":"json","requestId":"r","status":"ERROR"}\x00{}', RESP, FLAG_BINARY, "SUCCESS"),
    (b'{"from":"a","to":"b","messageId":"m/1","chunkIndex":0,"chunkCount":2,"messageSize":4,"body":"bytes"}\x00ab',
     MSG, BOTH, "messageId"),
    (b'{"from":"a","to":"b","messageId":"m","chunkIndex":2,"chunkCount":2,"messageSize":4,"body":"bytes"}\x00ab',
     MSG, BOTH, "below"),
    (b'{"from":"a","to":"b","messageId":"m","chunkIndex":1,"chunkCount":2,"messageSize":4}\x00ab', MSG, BOTH,
     "chunkPrev"),
    (b'{"from":"a","to":"b","messageId":"m","chunkIndex":0,"chunkCount":2,"messageSize":4,"body":"bytes",'
     b'"chunkPrev":"' + b"0" * 32 + b'"}\x00ab', MSG, BOTH, "first chunk"),
    (b'{"from":"a","to":"b","messageId":"m","chunkIndex":0,"chunkCount":2,"messageSize":4,"body":"bytes",'
     b'"chunkPrev":null}\x00ab', MSG, BOTH, "first chunk"),  # present at all: the C node's reading too
    (b'{"from":"a","to":"b","messageId":"m","chunkIndex":1,"chunkCount":2,"messageSize":4,'
     b'"chunkPrev":"' + b"0" * 64 + b'"}\x00ab', MSG, BOTH, "32 lowercase"),
    (b'{"from":"a","to":"b","messageId":"m","chunkIndex":0,"chunkCount":2,"messageSize":-4,"body":"bytes"}\x00ab',
     MSG, BOTH, "messageSize"),
    (b'{"from":"a","to":"b","messageId":"m","chunkIndex":true,"chunkCount":2,"messageSize":4,"body":"bytes"}\x00ab',
     MSG, BOTH, "chunkIndex"),
])
def test_malformed_extension_payloads_are_bad_payload(plaintext, etype, flags, why):
    with pytest.raises(EnvelopeError) as info:
        chunks.decode(plaintext, etype, flags)
    assert info.value.reason == "bad_payload" and why in info.value.detail


def test_a_header_is_found_only_within_its_bound():
    header = b'{"from":"a","to":"b","body":"bytes","pad":"' + b"x" * chunks.MAX_HEADER + b'"}'
    with pytest.raises(EnvelopeError):
        chunks.decode(header + b"\x00raw", MSG, FLAG_BINARY)


def tag(plaintext: bytes) -> str:
    """A stand-in for the tag of the envelope that would carry `plaintext` (32 hex digits): the
    reassembly only compares chain values."""
    return hashlib.md5(plaintext).hexdigest()


def _split(body: bytes, limit: int = 4096, chunk_size: int = MiB, first=None, mid="m1"):
    """(index, count, plaintext) of each chunk, chained as a sender chains them."""
    cutter = chunks.Chunker(first or {"from": "a", "to": "b", "body": "bytes"}, mid, body, limit, chunk_size)
    out, prev = [], None
    for index in range(cutter.count):
        plaintext = cutter.plaintext(index, prev)
        prev = tag(plaintext)
        out.append((index, cutter.count, plaintext))
    return out


def test_chunks_fit_the_limit_are_chained_and_carry_the_type_fields_only_first():
    body = os.urandom(20_000)
    parts = _split(body, limit=4096)
    assert len(parts) == parts[0][1] == 6 and all(len(p) <= 4096 for _, _, p in parts)
    prev = None
    for index, count, plaintext in parts:
        header, piece = chunks.decode(plaintext, MSG, BOTH)
        assert (header["chunkIndex"], header["chunkCount"], header["messageSize"]) == (index, count, len(body))
        assert header.get("chunkPrev") == prev and ("body" in header) == (index == 0)
        prev = tag(plaintext)
    assert b"".join(chunks.decode(p, MSG, BOTH)[1].data for _, _, p in parts) == body
    assert len(_split(body, limit=4096, chunk_size=1000)) == 20  # the configured chunk size bounds pieces too


def test_a_body_that_needs_too_many_chunks_is_refused_before_anything():
    with pytest.raises(ValueError):
        _split(b"x" * 70_000, limit=600, chunk_size=1)


# ------------------------------------------------------------------------------ reassembly
def feed_all(r: Reassembly, parts, key=b"k", sender="a", etype=MSG, flags=BOTH, now=0):
    steps = []
    for _, _, plaintext in parts:
        header, piece = chunks.decode(plaintext, etype, flags)
        steps.append(r.feed(key, sender, etype, flags, header, piece, tag(plaintext), len(plaintext) + 92, now))
    return steps


def fresh(**kw) -> Reassembly:
    args = dict(max_message=64 * MiB, budget_total=256 * MiB, budget_per_sender=128 * MiB, timeout_ms=30_000)
    args.update(kw)
    return Reassembly(**args)


def test_a_whole_message_completes_once_with_its_fields_and_releases_its_budget():
    r, body = fresh(), os.urandom(50_000)
    first = {"from": "a", "to": "b", "body": "json", "requestId": "r1", "service": "echo", "callerNode": "a"}
    value = {"blob": body.hex()}
    steps = feed_all(r, _split(json.dumps(value).encode(), first=first), etype=REQ)
    assert [s.kind for s in steps[:-1]] == [STORED] * (len(steps) - 1) and steps[-1].kind == COMPLETE
    done = steps[-1]
    assert done.payload["arguments"] == value and done.payload["requestId"] == "r1" and "body" not in done.payload
    assert done.payload["messageId"] == "m1" and done.message.file_bytes == sum(len(p) + 92 for *_, p in
                                                                                 _split(json.dumps(value).encode(),
                                                                                        first=first))
    # reserved until its handling ends: for a JSON body what its decoding costs (its text as a str,
    # then the value), at least twice its size
    assert r.reserved_total == done.message.reserved >= 2 * done.message.size and not r.partials
    r.release("a", done.message.reserved)
    assert r.reserved_total == 0 and r.reserved == {}


def _mutated(parts, index, **fields):
    """Chunk `index` re-encoded with changed header fields (as a key holder could seal it)."""
    header, piece = chunks.decode(parts[index][2], MSG, BOTH)
    header.update(fields)
    return (index, parts[index][1], chunks.binary_plaintext(header, piece.data))


def _sequence(case: str, parts, other, body_len: int):
    return {
        "missing": lambda: parts[:2] + parts[3:],
        "reordered": lambda: [parts[0], parts[2], parts[1]] + parts[3:],
        "duplicated": lambda: parts[:2] + [parts[1]] + parts[2:],
        "forged": lambda: parts[:2] + [_mutated(parts, 2, chunkPrev="0" * 32)] + parts[3:],
        "foreign": lambda: parts[:2] + [other[2]] + parts[3:],
        "count": lambda: parts[:2] + [_mutated(parts, 2, chunkCount=99)] + parts[3:],
        "size": lambda: parts[:2] + [_mutated(parts, 2, messageSize=1)] + parts[3:],
        "short": lambda: _rechained(parts, messageSize=body_len + 5),   # chained, but declares more than it has
        "long": lambda: _rechained(parts, messageSize=body_len - 5),
    }[case]()


@pytest.mark.parametrize("case,reason", [
    ("missing", "chunk_missing"), ("reordered", "chunk_missing"), ("duplicated", "chunk_missing"),
    ("forged", "chunk_chain"), ("foreign", "chunk_chain"), ("count", "chunk_invalid"), ("size", "chunk_invalid"),
    ("short", "chunk_invalid"), ("long", "chunk_invalid"),
])
def test_a_missing_reordered_duplicated_or_forged_chunk_voids_the_message(case, reason):
    body = os.urandom(30_000)
    parts, other = _split(body), _split(os.urandom(30_000))  # `other`: same id, pieces that do not chain
    r = fresh()
    steps = feed_all(r, _sequence(case, parts, other, len(body)))
    assert all(s.kind != COMPLETE for s in steps), "never a corrupt delivery"
    refused = [s for s in steps if s.kind == REFUSED]
    assert refused and refused[0].reason == reason and refused[0].voided is not None
    assert all(s.reason == reason for s in refused), "later chunks of a voided message keep its reason"
    assert r.reserved_total == 0 and not r.partials


def _rechained(parts, **fields):
    """The message's chunks with changed fields, chained again (what a careful but wrong sender makes)."""
    out, prev = [], None
    for index, count, plaintext in parts:
        header, piece = chunks.decode(plaintext, MSG, BOTH)
        header.update(fields)
        if prev is not None:
            header["chunkPrev"] = prev
        again = chunks.binary_plaintext(header, piece.data)
        prev = tag(again)
        out.append((index, count, again))
    return out


def test_a_new_message_voids_the_one_it_interrupts():
    r = fresh()
    first, second = _split(os.urandom(10_000), mid="one"), _split(os.urandom(10_000), mid="two")
    feed_all(r, first[:2])
    steps = feed_all(r, second)
    assert steps[0].voided.message_id == "one" and steps[0].voided_reason == "chunk_missing"
    assert steps[-1].kind == COMPLETE and steps[-1].payload["messageId"] == "two"
    late = feed_all(r, first[2:3])[0]
    assert late.kind == REFUSED and late.reason == "chunk_missing"


def test_instances_are_independent():
    r = fresh()
    a, b = _split(os.urandom(9000), mid="x"), _split(os.urandom(9000), mid="x")
    for pa, pb in zip(a, b):
        sa, sb = feed_all(r, [pa], key=b"1"), feed_all(r, [pb], key=b"2")
    assert sa[0].kind == sb[0].kind == COMPLETE


def test_limits_and_budgets_refuse_at_the_first_chunk_with_a_reason():
    body = os.urandom(20_000)
    assert feed_all(fresh(max_message=10_000), _split(body))[0].reason == "message_too_large"
    r = fresh(budget_per_sender=30_000, budget_total=50_000)
    feed_all(r, _split(body)[:1], key=b"1", sender="a")
    assert feed_all(r, _split(body, mid="m2")[:1], key=b"2", sender="a")[0].reason == "reassembly_full"
    feed_all(r, _split(body, mid="m3")[:1], key=b"3", sender="c")
    full = feed_all(r, _split(body, mid="m4")[:1], key=b"4", sender="d")[0]
    assert full.reason == "reassembly_full" and "50000" in full.detail
    assert r.reserved == {"a": 20_000, "c": 20_000}
    rest = feed_all(r, _split(body, mid="m4")[1:], key=b"4", sender="d")
    assert {s.reason for s in rest} == {"reassembly_full"}


def test_a_senders_replaced_instances_give_their_room_to_its_registered_one():
    """An instance that died mid-message kept its reservation until the message expired: its
    successor's messages did not fit meanwhile (`reassembly_full`). `supersede` voids the sender's
    other instances' messages only; the caller asks once it found the instance registered."""
    body = os.urandom(20_000)
    r = fresh(budget_per_sender=30_000)
    feed_all(r, _split(body, mid="dead")[:2], key=b"old", sender="a")
    feed_all(r, _split(body, mid="other")[:2], key=b"c1", sender="c")
    assert feed_all(r, _split(body, mid="new")[:1], key=b"new", sender="a")[0].reason == "reassembly_full"
    gone = r.supersede("a", b"new")
    assert [p.message_id for p in gone] == ["dead"] and r.reserved == {"c": 20_000}
    steps = feed_all(r, _split(body, mid="new"), key=b"new", sender="a")
    assert steps[-1].kind == COMPLETE and steps[-1].payload["messageId"] == "new"
    assert r.supersede("a", b"new") == [] and [p.message_id for p in r.partials.values()] == ["other"]
    late = feed_all(r, _split(body, mid="dead")[2:3], key=b"old", sender="a")[0]
    assert late.kind == REFUSED and late.reason == "chunk_missing"


def test_partial_messages_expire_and_give_back_their_budget():
    r = fresh(timeout_ms=1000)
    parts = _split(os.urandom(9000))
    feed_all(r, parts[:1], now=0)
    feed_all(r, parts[1:2], now=900)
    assert r.expire(1800) == [] and r.next_expiry_ms() == 1900
    expired = r.expire(1901)
    assert [p.message_id for p in expired] == ["m1"] and r.reserved_total == 0
    assert feed_all(r, parts[2:3])[0].reason == "chunk_expired"


def test_remembered_voids_are_bounded():
    from speed_runtime.core import reassembly
    r = fresh()
    for i in range(reassembly.MAX_REMEMBERED_VOIDS + 50):
        feed_all(r, _split(b"xy" * 600, limit=600, mid=f"m{i}")[1:2], key=i)  # a second chunk without a first
    assert len(r._void) == reassembly.MAX_REMEMBERED_VOIDS


# ------------------------------------------------------------------------------ purity
PROBE = r'''
import json, sys, time
def trap(*_a, **_k):
    raise AssertionError("the core read a clock")
for name in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "clock_gettime", "sleep"):
    setattr(time, name, trap)
from speed_runtime.core import chunks, reassembly, reliable
touched = []
sys.addaudithook(lambda event, args: touched.append(event) if event.split(".")[0] in ("open", "os", "shutil") else None)
cutter = chunks.Chunker({"from": "a", "to": "b", "body": "bytes"}, "m", b"x" * 5000, 2048, 1 << 20)
r = reassembly.Reassembly(1 << 20, 1 << 22, 1 << 21, 1000)
prev = None
for i in range(cutter.count):
    h, piece = chunks.decode(cutter.plaintext(i, prev), 1, 6)
    prev = chunks.chain_value(b"\x00" * 80 + bytes([i]) * 16)
    step = r.feed(b"k", "a", 1, 6, h, piece, prev, 1, 0)
assert step.kind == "complete"
d = reliable.Deliveries(4)
assert d.begin("a", "m")[0] == "new"
print(json.dumps({"modules": sorted(m for m in sys.modules if m.split(".")[0] in ("threading", "logging", "speedtui")
                                    or (m.startswith("speed_runtime.") and not m.startswith("speed_runtime.core"))),
                  "touched": touched}))
'''


def test_the_pure_parts_read_no_clock_start_no_thread_and_touch_no_file():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"modules": [], "touched": []}
