"""The durable extension's pure core: receipts and their chains, the durable fields, the ledger of
one stream, outbox entries, copies carried over a receiver's restart, its journal records."""
from __future__ import annotations

import json
import os
import uuid

import pytest

from speed_runtime.core import durable as d
from speed_runtime.core import payloads
from speed_runtime.core.envelope import EnvelopeType, Header, seal
from speed_runtime.core.errors import EnvelopeError
from speed_runtime.core.keys import Key
from speed_runtime.core.records import DurableTrace, encode_line, parse_line
from speed_runtime.core.replay import ReplayGuard

KEY = Key(bytes(range(32)))
RKEY = d.receipt_key(KEY.raw)
STREAM = "0123456789abcdef0123456789abcdef"


def chain(n: int, statuses=None) -> list[d.Receipt]:
    out, prev = [], d.ZERO_MAC
    for i in range(1, n + 1):
        r = d.make_receipt(RKEY, "rx", "tx", STREAM, i, i * 10, (statuses or {}).get(i, "handled"), 1000 + i, prev)
        out.append(r)
        prev = r.mac
    return out


def test_a_whole_chain_verifies_and_counts_what_was_handled():
    [report] = d.verify_chain(chain(5, {3: "failed"}), RKEY)
    assert report.ok and report.count == 5 and report.handled == 4 and report.first_break is None


@pytest.mark.parametrize("damage, position, words", [
    (lambda c: c[:2] + c[3:], 3, "missing"),
    (lambda c: c[:1] + [d.Receipt(**{**c[1].__dict__, "id": 999})] + c[2:], 2, "does not verify"),
    (lambda c: c[:2] + [d.make_receipt(RKEY, "rx", "tx", STREAM, 3, 30, "handled", 1003, d.ZERO_MAC)] + c[3:], 3,
     "does not chain"),
    (lambda c: c + [d.make_receipt(RKEY, "rx", "tx", STREAM, 6, 10, "handled", 9, c[-1].mac)], 6, "second time"),
    (lambda c: c + [d.make_receipt(RKEY, "rx", "tx", STREAM, 2, 20, "failed", 1002, c[0].mac)], 2, "two different"),
])
def test_the_first_break_of_a_chain_is_named(damage, position, words):
    [report] = d.verify_chain(damage(chain(5)), RKEY)
    assert not report.ok and report.first_break == position and words in report.reason


def test_a_receipt_made_with_another_key_does_not_verify():
    other = d.receipt_key(bytes(32))
    assert not d.verify_chain(chain(2), other)[0].ok


def test_a_compacted_chain_verifies_from_its_checkpoint():
    full = chain(6)
    [report] = d.verify_chain(full[3:], RKEY, {STREAM: (3, full[2].mac)})
    assert report.ok
    [broken] = d.verify_chain(full[3:], RKEY, {STREAM: (3, full[1].mac)})
    assert broken.first_break == 4
    # receipts a compacted ledger keeps at or below its checkpoint (to send again) count once: the
    # checkpoint stands for them (they were added to its index, 301 receipts reported as 557)
    [kept] = d.verify_chain(full[1:], RKEY, {STREAM: (3, full[2].mac)})
    assert kept.ok and kept.count == 3


def test_receipts_survive_their_json_form_and_refuse_malformed_ones():
    r = chain(1)[0]
    assert d.receipt_from_json(json.loads(json.dumps(r.to_json())), "rx", "tx") == r
    for bad in (None, [], {**r.to_json(), "status": "maybe"}, {**r.to_json(), "index": 0},
                {**r.to_json(), "mac": "00"}, {**r.to_json(), "stream": "XYZ"}, {**r.to_json(), "id": True}):
        with pytest.raises(ValueError):
            d.receipt_from_json(bad, "rx", "tx")


def test_durable_fields_are_checked_and_appended_to_a_compact_payload():
    body = payloads.encode_payload(payloads.message("tx", "rx", {"a": 1}))
    fields = d.DurableFields(STREAM, 7, 5, 1_700_000_000_000)
    obj = json.loads(d.add_fields(body, fields))
    assert obj["data"] == {"a": 1} and d.parse_fields(obj) == fields
    for bad in ({}, {"durable": {"stream": STREAM, "id": 0, "base": 1, "expiresAt": 1}},
                {"durable": {"stream": STREAM, "id": 3, "base": 4, "expiresAt": 1}},
                {"durable": {"stream": STREAM.upper(), "id": 3, "base": 1, "expiresAt": 1}},
                {"durable": {"stream": STREAM, "id": 2**63, "base": 1, "expiresAt": 1}}):
        with pytest.raises(EnvelopeError) as info:
            d.parse_fields(bad)
        assert info.value.reason == "bad_payload"


def test_a_stream_ledger_knows_what_was_handled_and_forgets_below_the_senders_base():
    ledger = d.StreamLedger(STREAM)
    assert ledger.seen(1) is False
    r1 = ledger.issue(RKEY, "rx", "tx", 1, "handled", 5)
    ledger.record(r1)
    r2 = ledger.issue(RKEY, "rx", "tx", 3, "handled", 6)
    ledger.record(r2)
    assert ledger.seen(1) == r1 and ledger.seen(3) == r2 and ledger.seen(2) is False
    assert r2.prev == r1.mac and r2.index == 2
    ledger.advance(3)          # the sender finished 1 and 2
    assert ledger.seen(1) is True and ledger.seen(2) is True and 1 not in ledger.receipts and ledger.seen(3) == r2


def test_the_ledger_log_replays_to_the_same_knowledge_and_compacts():
    ledger = d.StreamLedger(STREAM)
    lines = []
    for msg_id in (1, 2, 3):
        lines.append(d.ledger_line("claim", {"stream": STREAM, "id": msg_id}))
        r = ledger.issue(RKEY, "rx", "tx", msg_id, "handled", msg_id)
        ledger.record(r)
        lines.append(d.ledger_line("receipt", {**r.to_json(), "base": 2}))
    lines.append(d.ledger_line("claim", {"stream": STREAM, "id": 4}))   # a handler that never returned
    lines.append(b'{"receipt":{"stream":"' + STREAM.encode() + b'","ind')  # torn
    [again] = d.replay_ledger(lines, "rx", "tx").values()
    assert (again.index, again.mac, again.floor, again.claims) == (3, ledger.mac, 1, {4})
    assert again.seen(1) is True and again.seen(3).index == 3
    [compact] = d.replay_ledger(d.compacted({STREAM: again}).splitlines(), "rx", "tx").values()
    assert (compact.index, compact.mac, compact.floor, compact.claims, set(compact.receipts)) == \
        (again.index, again.mac, again.floor, again.claims, set(again.receipts))


def test_outbox_entries_keep_their_payload_sealed_and_their_metadata_readable():
    meta = {"target": "rx", "stream": STREAM, "id": 4, "created": 1.5, "expiresAt": 99, "size": 3}
    data = d.seal_outbox_entry(meta, b'{"secret":1}', KEY, bytes(12))
    assert b"secret" not in data and d.outbox_meta(data) == meta
    assert d.open_outbox_entry(data, KEY) == (meta, b'{"secret":1}')
    tampered = data.replace(b'"id":4', b'"id":5')
    with pytest.raises(ValueError):
        d.open_outbox_entry(tampered, KEY)
    with pytest.raises(ValueError):
        d.open_outbox_entry(data, Key(bytes(32)))
    with pytest.raises(ValueError):
        d.outbox_meta(b"not an entry")


RX_OLD, RX_NOW, TX = (uuid.uuid4().bytes for _ in range(3))


def durable_copy(target_id: bytes, seq: int, ts: int, *, flags: int = d.FLAG_DURABLE, to: str = "rx",
                 nonce: bytes | None = None) -> bytes:
    body = d.add_fields(payloads.encode_payload(payloads.message("tx", to, "hello")),
                        d.DurableFields(STREAM, 1, 1, ts + 60_000))
    return seal(Header(EnvelopeType.MESSAGE, seq, ts, len(body), TX, target_id, flags), body, KEY,
                nonce or os.urandom(12))


STARTED = 100_000   # when the current instance (RX_NOW) started: the copies below arrived before


def carried(data: bytes, replay: ReplayGuard, now: int = 10_000, senders=frozenset({TX})):
    return d.judge_carried("tx", data, KEY, "rx", RX_NOW, {RX_OLD, RX_NOW}, STARTED, senders.__contains__, replay,
                           now, 1 << 20)


def test_a_copy_sealed_for_an_earlier_instance_of_the_name_is_accepted_without_its_numbering():
    replay = ReplayGuard()
    replay.check(TX, "tx", 5, os.urandom(12), 10_000, 10_000)        # the link to this instance is at 5
    assert carried(durable_copy(RX_OLD, 900, 10_000), replay).accepted  # numbered for the old instance
    assert carried(durable_copy(RX_OLD, 1, 10_000), replay).accepted
    assert replay.senders[TX].last_seq == 5                            # the link's numbering is untouched


def test_carried_copies_still_meet_the_window_the_nonce_and_the_name():
    replay = ReplayGuard()
    nonce = os.urandom(12)
    assert carried(durable_copy(RX_OLD, 1, 10_000, nonce=nonce), replay).accepted
    assert carried(durable_copy(RX_OLD, 2, 10_000, nonce=nonce), replay).reason == "replayed_nonce"
    assert carried(durable_copy(RX_OLD, 3, 10_000), replay, now=10_000 + 61_000).reason == "stale_timestamp"
    assert carried(durable_copy(uuid.uuid4().bytes, 4, 10_000), replay).reason == "wrong_target"
    assert carried(durable_copy(RX_OLD, 5, 10_000, to="other"), replay).reason == "wrong_target"
    assert carried(durable_copy(RX_OLD, 6, 10_000, flags=0), replay).reason == "wrong_target"


def test_a_copy_sealed_for_an_earlier_instance_but_delivered_after_the_current_one_started_is_refused():
    replay = ReplayGuard()
    late = carried(durable_copy(RX_OLD, 1, STARTED + 5), replay, now=STARTED + 5)
    assert late.reason == "wrong_target" and "delivered after it" in late.detail
    assert carried(durable_copy(RX_OLD, 2, STARTED - 5), replay, now=STARTED - 5).accepted


def test_a_durable_copy_counts_only_from_an_instance_of_its_sender():
    replay = ReplayGuard()
    for target in (RX_OLD, RX_NOW):            # carried or current: the source is judged the same
        forged = carried(durable_copy(target, 1, 10_000), replay, senders=frozenset({uuid.uuid4().bytes}))
        assert (forged.reason, forged.detail) == ("unknown_sender", "source")
    assert not replay.senders                  # and it moved nothing


def test_a_copy_for_the_current_instance_keeps_the_links_replay_checks():
    replay = ReplayGuard()
    assert carried(durable_copy(RX_NOW, 1, 10_000), replay).accepted
    assert carried(durable_copy(RX_NOW, 1, 10_000), replay).reason == "replayed_sequence"


def test_durable_records_round_trip_through_the_journal():
    event = DurableTrace(1.5, "tx", "rx", "send_error", STREAM, 7, "expired", None, "its time-to-live ran out")
    assert parse_line(encode_line(event)) == event
    assert event.to_record()["kind"] == "durable"
    handled = DurableTrace(2.0, "rx", "tx", "handled", STREAM, 7, "handled", 3)
    assert parse_line(encode_line(handled)) == handled


def test_a_compacted_ledger_keeps_its_head_when_the_newest_receipt_is_below_the_floor():
    ledger = d.StreamLedger(STREAM)
    for msg_id in (5, 6, 2):                   # handled out of order: the head acknowledges id 2
        ledger.record(ledger.issue(RKEY, "rx", "tx", msg_id, "handled", msg_id))
    ledger.advance(4)                          # the sender finished 1-3: id 2's receipt is forgotten
    [again] = d.replay_ledger(d.compacted({STREAM: ledger}).splitlines(), "rx", "tx").values()
    assert (again.index, again.mac, again.handled) == (3, ledger.mac, 3)
    follow = again.issue(RKEY, "rx", "tx", 7, "handled", 7)
    assert follow.index == 4 and follow.prev == ledger.mac


def test_a_compacted_receipt_log_verifies_as_the_whole_and_keeps_breaks_and_the_highest_id():
    full = chain(6)
    lines = [d.ledger_line("receipt", r.to_json()) for r in (full[0], full[1], full[2], full[1], full[4], full[5])]
    lines.append(d.ledger_line("expired", {"stream": STREAM, "id": 99, "reason": "ttl", "time": 1}))
    compact = d.compact_receipt_log(lines).splitlines()
    kinds = [next(iter(json.loads(line))) for line in compact]
    assert kinds == ["checkpoint", "receipt", "receipt"]          # 1-3 folded; 4 is missing, 5 and 6 kept
    checkpoint = json.loads(compact[0])["checkpoint"]
    assert (checkpoint["index"], checkpoint["handled"], checkpoint["maxId"]) == (3, 3, 99)
    receipts = [d.receipt_from_json(json.loads(line)["receipt"], "rx", "tx") for line in compact[1:]]
    [report] = d.verify_chain(receipts, RKEY, {STREAM: (3, bytes.fromhex(checkpoint["mac"]))})
    assert report.first_break == 4 and "missing" in report.reason
    again = d.compact_receipt_log(compact + [d.ledger_line("receipt", full[3].to_json())])
    assert [next(iter(json.loads(line))) for line in again.splitlines()] == ["checkpoint"]
    assert json.loads(again.splitlines()[0])["checkpoint"]["index"] == 6


def take(ledger: d.StreamLedger, msg_id: int, base: int) -> bool:
    """What a receiver does with one authentic copy: the base first, then handled unless seen."""
    ledger.advance(base)
    if ledger.seen(msg_id):
        return False
    ledger.record(ledger.issue(RKEY, "rx", "tx", msg_id, "handled", 1))
    return True


def test_one_forged_base_never_finishes_an_id_the_sender_has_yet_to_send():
    ledger = d.StreamLedger(STREAM)
    assert all(take(ledger, i, i) for i in range(1, 6))         # the honest sender: ids 1-5
    assert take(ledger, d.MAX_ID, d.MAX_ID)                      # forged: id = base = 2^63-1 (handled)
    assert ledger.floor <= 5                                     # not above what was handled before it
    assert all(take(ledger, i, i) for i in range(6, 40))         # every later honest message is handled


def test_each_copy_moves_the_floor_by_at_most_the_step():
    ledger = d.StreamLedger(STREAM)
    assert all(take(ledger, i, i) for i in range(1, 6))
    floors = []
    for k in range(1, 5):                                        # forged copies one after another
        take(ledger, d.MAX_ID - k, d.MAX_ID - k)
        floors.append(ledger.floor)
    assert floors[-1] <= 4 + len(floors) * d.FLOOR_STEP
    assert all(b - a <= d.FLOOR_STEP for a, b in zip([4] + floors, floors))


def test_a_gap_of_messages_that_expired_unseen_is_crossed_in_steps_with_bounded_memory():
    ledger = d.StreamLedger(STREAM)
    assert all(take(ledger, i, i) for i in range(1, 4))
    for i in range(1001, 1400):                                  # 4-1000 expired at the sender, never sent
        assert take(ledger, i, i)
        assert len(ledger.runs) <= 2 and len(ledger.receipts) <= d.RECEIPTS_KEPT
    assert ledger.floor == 1398                                  # caught up, 16 ids per copy
    assert not take(ledger, 1100, 1100) and not take(ledger, 500, 500)


def test_a_flood_of_forged_ids_keeps_a_stream_bounded():
    ledger = d.StreamLedger(STREAM)
    for i in range(10_000):
        take(ledger, 10 + 3 * i, 1)                              # isolated ids, a base that moves nothing
    assert len(ledger.runs) == d.MAX_RUNS and len(ledger.receipts) <= d.RECEIPTS_KEPT
    assert ledger.seen(10) is True and ledger.seen(11) is False  # the lowest runs are the ones kept
    streams: dict = {}
    assert all(d.stream_of(streams, f"{i:032x}") for i in range(d.MAX_STREAMS))
    assert d.stream_of(streams, "f" * 32) is None and d.stream_of(streams, f"{0:032x}") is not None


def test_a_compacted_ledger_keeps_the_runs_and_the_highest_id():
    ledger = d.StreamLedger(STREAM)
    for i in (1, 2, 3, 7, 8, 20):
        take(ledger, i, 1)
    [again] = d.replay_ledger(d.compacted({STREAM: ledger}).splitlines(), "rx", "tx").values()
    assert (again.runs, again.high, again.floor) == ([[1, 3], [7, 8], [20, 20]], 20, 0)
    assert [again.seen(i) is not False for i in range(1, 22)] == [ledger.seen(i) is not False for i in range(1, 22)]


def test_a_lineage_line_counts_only_when_ended_by_a_newline():
    """A last line without 0x0A is a torn append, not a line (as the C node reads the file)."""
    from speed_runtime.core.durable import lineage_ids
    a, b = "a" * 32, "b" * 32
    assert lineage_ids(f"{a}\n{b}".encode(), 1024) == {bytes.fromhex(a)}
    assert lineage_ids(f"{a}\n{b}\n".encode(), 1024) == {bytes.fromhex(a), bytes.fromhex(b)}
    assert lineage_ids(f"{a}\n{'B' * 32}\n{b}\n".encode(), 2) == {bytes.fromhex(b)}  # skipped, yet one of the 2
