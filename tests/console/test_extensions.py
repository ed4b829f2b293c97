"""The console's parts of the extensions (issues 17, 18, 19): the Security view (threat scores,
quarantines, lifting one at the console's own node), the Durable view (outboxes, pending copies,
receipts verified), durable nodes marked in Leases, chunked and reliable messages in Traces.
First on the deterministic fixture, then with real nodes writing real journals and outboxes."""

import asyncio
import json
import threading
import time

from speed_runtime import Node

from speedtui.environments.fixture import CHUNKED_ID, FIXED_NOW, NODES, RELIABLE_ID, entry, journal_records
from speedtui.models.query import parse_query
from speedtui.models.registry import RegistryModel
from speedtui.models.security import sparkline, threat_rows
from speedtui.models.traces import TraceStore, parse_record
from speedtui.models.commands import NodeSpec
from speedtui.models.traces import TraceRecord
from speedtui.services.actions import OwnNode
from speedtui.services.history import AuditLog
from speedtui.ui.app import make_app
from speedtui.ui.views.leases import DURABLE_MARK

from ..helpers.replay import send_and_replay
from .conftest import SIZE, entry_record, run_async, wait_for


def plain(cell) -> str:
    return cell if isinstance(cell, str) else cell.plain


def table_rows(view, table_id: str) -> list[tuple[str, ...]]:
    table = view.query_one(table_id)
    return [tuple(plain(c) for c in table.rows[i].cells) for i in range(len(table.rows))]


def capture_notes(app) -> list[str]:
    notes: list[str] = []
    notify = app.notify

    def record(message, *args, **kwargs):
        notes.append(str(message))
        return notify(message, *args, **kwargs)

    app.notify = record
    return notes


# ------------------------------------------------------------------ the models (pure)

def _fixture_store() -> TraceStore:
    store = TraceStore()
    for recs in journal_records(FIXED_NOW).values():
        store.add([parse_record(r) for r in recs])
    return store


def test_the_store_folds_chunks_routes_extension_records_and_counts_rejections():
    store = _fixture_store()
    assert len(store.threats) == 6 and len(store.durable) == 2
    assert not [r for r in store.leases if r.kind in ("threat", "durable", "message")]
    assert not [r for r in store.view if r.folded_chunk]  # six chunk envelopes wait under their message
    assert len([r for r in store.ring if r.folded_chunk]) == 6
    assert sum(store.rate_series(FIXED_NOW, 60)) == len([r for r in store.ring if r.kind == "envelope"])
    assert store.toggle_expanded(CHUNKED_ID) and len([r for r in store.view if r.folded_chunk]) == 6
    store.set_filter(parse_query("node:gateway"))  # a filter keeps the expansion
    assert sorted(r.chunk for r in store.view if r.folded_chunk) == [1, 1, 2, 2, 3, 3]
    assert not store.toggle_expanded(CHUNKED_ID) and not [r for r in store.view if r.folded_chunk]
    assert store.rejection_series("gateway", "eve", FIXED_NOW)[-7:] == [1, 1, 3, 0, 0, 0, 0]
    assert store.rejection_series("gateway", "eve", FIXED_NOW + 3600) == [0] * 30  # gone from the window


def test_threat_rows_prefer_the_published_state_and_keep_journal_only_pairs():
    store = _fixture_store()
    rows = RegistryModel()
    rows.update([entry_record(spec[0], entry(*spec)) for spec in NODES], FIXED_NOW)
    got = threat_rows(rows.rows, store, FIXED_NOW)
    assert [(t.receiver, t.sender, t.state, t.source) for t in got] == [
        ("gateway", "eve", "quarantined", "registry"), ("gateway", "billing", "ok", "registry"),
        ("billing", "gateway", "", "journal"), ("billing", "mallory", "", "journal")]
    # a receiver without quota keeps no score, but its journal says why it rejected (it drew "-")
    assert {(t.sender, t.reasons) for t in got if t.receiver == "billing"} == {
        ("gateway", ("replayed_nonce",)), ("mallory", ("unauthorized",))}
    # without gateway's entry, its journal's threat records stand in for it
    alone = threat_rows([], store, FIXED_NOW)
    eve = next(t for t in alone if t.sender == "eve")
    assert eve.state == "quarantined" and eve.score == 125.0 and eve.source == "journal"
    assert sparkline([0, 1, 2, 4]) == "·▂▄█" and sparkline([0, 0]) == "··"


# ------------------------------------------------------------------ on the fixture

@run_async
async def test_security_view_shows_scores_states_sparklines_and_reasons(fixture_app):
    app = fixture_app(steady=True)
    notes = capture_notes(app)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("8")
        view = app.view_widget("security")
        await wait_for(pilot, lambda: table_rows(view, "#security-table"), what="threat rows")
        rows = table_rows(view, "#security-table")
        eve = rows[0]  # quarantined first
        assert eve[:4] == ("gateway", "eve", "125", "QUARANTINED")
        assert len(eve[4]) == 30 and eve[4].count("·") == 27 and eve[4][-7:] == "▃▃█····"  # 1, 1, 3 rejections
        assert eve[5] == "5" and eve[6].startswith("unauthorized")
        assert ("gateway", "billing", "3", "ok") == rows[1][:4] and rows[1][6] == "late_response"
        # billing keeps no score (no quota) but rejected mallory: a row from its journal
        mallory = next(r for r in rows if r[1] == "mallory")
        assert mallory[:4] == ("billing", "mallory", "-", "no score") and mallory[5] == "1"
        detail = view.query_one("#security-detail").render().plain
        assert "quarantined  score 100" in detail and "does not trust its operator key" in detail
        # rejections that never count (bad_tag: not authenticated) at a receiver that keeps scores:
        # it said the receiver "does not enable quota" and asked whether it runs with --trace
        from speedtui.models.security import ThreatRow
        view.rows.append(ThreatRow("gateway", "stranger", None, "", ("bad_tag",), (0,) * 29 + (4,), 4, "journal"))
        view.show_detail(("gateway", "stranger"))
        detail = view.query_one("#security-detail").render().plain
        assert "no threat score: none of these rejections counts against stranger" in detail, detail
        assert "none of them was scored" in detail and "--trace" not in detail and "does not enable" not in detail
        view.show_detail(("billing", "mallory"))
        assert "billing keeps no threat score (it does not enable quota)" in \
            view.query_one("#security-detail").render().plain
        await pilot.press("l")  # gateway is not the console's node, nor trusts a key: one sentence, nothing sent
        await wait_for(pilot, lambda: any("nor one that trusts its operator key" in n and "--operator" in n
                                          for n in notes), what="the sentence")
        assert not [e for e in AuditLog(app.paths.audit_log(app.root)).entries() if e.action == "lift"]


@run_async
async def test_durable_view_lists_outboxes_with_target_state_age_and_expiry(fixture_app):
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("9")
        view = app.view_widget("durable")
        await wait_for(pilot, lambda: view.listed_at is not None, what="the outboxes")
        rows = table_rows(view, "#durable-outbox")
        # reports's ledger has receipted message 1 (billing exited before the receipt came): not "waiting"
        assert rows == [("billing", "reports", "leaving", "receipted", "abababab", "1", "56s", "23h59m", "42"),
                        ("billing", "reports", "leaving", "waiting", "abababab", "2", "40s", "23h59m", "118"),
                        ("ledger", "archive", "missing", "waiting", "cdcdcdcd", "7", "3h00m", "21h00m", "2048")]
        status = view.query_one("#durable-status").render().plain
        assert "3 in outboxes: 2 waiting, 1 receipted (receipt not taken) · 0 in inboxes" in status
        assert "durable nodes: billing, ledger, reports" in status
        assert view.query_one("#durable-history").render().plain.startswith(
            "billing → reports #1: receipted handled, receipt not taken by billing (it takes it the next time it runs)")
        await pilot.press("r")  # asked for: audited with the equivalent command
        await wait_for(pilot, lambda: [e for e in AuditLog(app.paths.audit_log(app.root)).entries()
                                       if e.action == "outbox"], what="the audit entry")
        entry = [e for e in AuditLog(app.paths.audit_log(app.root)).entries() if e.action == "outbox"][-1]
        assert entry.command == f"speed outbox --dir {app.root}" and entry.result == "3 waiting"
        await pilot.press("v")  # the selected row's target: reports's ledger holds the receipt billing lacks
        await wait_for(pilot, lambda: view.receipts is not None, what="the verification")
        assert "billing ← reports (stream abababab, ledger of reports): 1 receipts, 1 handled: verified" \
            in view.receipts.plain
        assert "1 of these receipts not taken by billing yet: their messages stay in its outbox" in view.receipts.plain
        entry = [e for e in AuditLog(app.paths.audit_log(app.root)).entries() if e.action == "receipts"][-1]
        assert entry.command.startswith("speed receipts reports --dir ") and "--key" in entry.command


@run_async
async def test_without_a_key_receipts_are_not_verified_and_the_console_says_why(fixture_env):
    from speedtui.services.clock import FrozenClock

    root, _key, paths = fixture_env
    app = make_app(root, None, paths=paths, clock=FrozenClock(FIXED_NOW), steady=True)
    notes = capture_notes(app)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("9")
        view = app.view_widget("durable")
        await wait_for(pilot, lambda: view.listed_at is not None, what="the outboxes (no key needed)")
        assert len(table_rows(view, "#durable-outbox")) == 3
        await pilot.press("v")
        await wait_for(pilot, lambda: "no key loaded: receipts cannot be verified" in notes, what="the sentence")
        assert view.receipts is None


@run_async
async def test_leases_mark_durable_nodes(fixture_app):
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        view = app.view_widget("leases")
        await wait_for(pilot, lambda: table_rows(view, "#leases-table"), what="rows")
        names = {r[0] for r in table_rows(view, "#leases-table")}
        assert {f"billing {DURABLE_MARK}", f"ledger {DURABLE_MARK}", f"reports {DURABLE_MARK}", "gateway"} <= names
        await pilot.press("slash", *"durable", "enter")
        await wait_for(pilot, lambda: len(table_rows(view, "#leases-table")) == 3, what="the durable filter")


def _rows_of(app) -> list[TraceRecord]:
    table = app.view_widget("traces").query_one("#traces-table")
    return [table.rows.record(i) for i in range(len(table.rows))]


@run_async
async def test_a_chunked_message_is_one_row_that_expands_to_its_chunks(fixture_app):
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        await wait_for(pilot, lambda: _rows_of(app), what="traces")
        chunked = [r for r in _rows_of(app) if r.message_id == CHUNKED_ID]
        assert [r.kind for r in chunked] == ["message"] * 3  # received, delivered, sent: the chunks folded
        view = app.view_widget("traces")
        table = view.query_one("#traces-table")
        sent = next(r for r in chunked if r.event == "sent")
        table.cursor = _rows_of(app).index(sent)
        assert plain(table.rows[table.cursor].cells[3]) == "MESSAGE ▸3"
        await pilot.press("enter")
        await wait_for(pilot, lambda: len([r for r in _rows_of(app) if r.message_id == CHUNKED_ID]) == 9,
                       what="the chunks shown")
        chunks = [r for r in _rows_of(app) if r.message_id == CHUNKED_ID and r.kind == "envelope"]
        assert sorted((r.node, r.chunk) for r in chunks) == sorted((n, i) for n in ("billing", "gateway")
                                                                   for i in (1, 2, 3))
        i = _rows_of(app).index(chunks[0])
        assert plain(table.rows[i].cells[3]).strip().startswith("└") and "/3" in plain(table.rows[i].cells[3])
        assert plain(table.rows[_rows_of(app).index(sent)].cells[3]) == "MESSAGE ▾3"
        await pilot.press("enter")  # the cursor stayed on the message's row: folded again
        await wait_for(pilot, lambda: len([r for r in _rows_of(app) if r.message_id == CHUNKED_ID]) == 3,
                       what="the chunks folded")


@run_async
async def test_a_reliable_send_shows_its_retransmission_and_final_outcome(fixture_app):
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        await wait_for(pilot, lambda: _rows_of(app), what="traces")
        table = app.view_widget("traces").query_one("#traces-table")
        outcomes = [plain(table.rows[i].cells[6]) for i, r in enumerate(_rows_of(app))
                    if r.message_id == RELIABLE_ID and r.kind == "message"]
        assert outcomes == ["received (2 tx)", "delivered", "retransmitted #2", "sent"]  # newest first
        failed = [plain(table.rows[i].cells[6]) for i, r in enumerate(_rows_of(app))
                  if r.kind == "message" and r.event == "send-error"]
        assert failed == ["send-error (2 tx): unacknowledged"]
        await pilot.press("slash", *"5eed", "enter")  # the message id finds all its records
        await wait_for(pilot, lambda: len(_rows_of(app)) == 7, what="the filter")


# ------------------------------------------------------------------ with real nodes

@run_async
async def test_a_replaying_sender_is_quarantined_and_lifted_at_the_consoles_node(live_env, tmp_path):
    root, key, paths = live_env
    guard = Node(root, key.path, "guard", features=["quota"], trace=True, allow=["mallory"],
                 heartbeat_seconds=0.5)
    guard.start()
    mallory = Node(root, key.path, "mallory", allow=["guard"], heartbeat_seconds=0.5)
    mallory.start()
    app = make_app(root, key, paths=paths)
    try:
        app.actions.own.add(OwnNode(spec=NodeSpec("guard"), node=guard, started=time.time()))
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("8")
            view = app.view_widget("security")
            for i in range(6):  # each copy is a replay (30 points): the fourth reaches the threshold of 100
                await asyncio.to_thread(send_and_replay, mallory, "guard", {"n": i})

            def guard_row():
                return next((r for r in table_rows(view, "#security-table") if r[:2] == ("guard", "mallory")), None)

            await wait_for(pilot, lambda: guard_row() and guard_row()[3] == "QUARANTINED", what="the quarantine")
            row = guard_row()
            assert float(row[2]) >= 100 and row[6].startswith("replayed_nonce")
            assert set(row[4]) - {"·"}, "rejections drawn in the sparkline"
            detail = view.query_one("#security-detail").render().plain
            assert "quarantined" in detail and "not this console's node" not in detail
            await pilot.press("l")
            await wait_for(pilot, lambda: guard.extensions["quota"].threats()[0].state != "quarantined",
                           what="the lift")
            await wait_for(pilot, lambda: guard_row() and guard_row()[3] == "ok", what="the row after the lift")
            await wait_for(pilot, lambda: "lifted" in view.query_one("#security-detail").render().plain,
                           what="the lifted record")
            lift = [e for e in AuditLog(paths.audit_log(root)).entries() if e.action == "lift"]
            assert lift and lift[-1].ok and lift[-1].detail == "mallory at guard"
    finally:
        mallory.close()
        guard.close()


@run_async
async def test_a_durable_message_waits_for_its_offline_target_and_its_receipts_verify(live_env):
    root, key, paths = live_env
    shipper = Node(root, key.path, "shipper", durable=True, durable_on_tmpfs=True, allow=["depot"], trace=True,
                   heartbeat_seconds=0.5)
    shipper.start()
    depot = None
    release = threading.Event()
    app = make_app(root, key, paths=paths)
    try:
        msg_id = await asyncio.to_thread(shipper.send, "depot", {"parcel": 1}, durable=True)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("9")
            view = app.view_widget("durable")
            await wait_for(pilot, lambda: [r for r in table_rows(view, "#durable-outbox")
                                           if r[:2] == ("shipper", "depot")], what="the waiting message")
            row = table_rows(view, "#durable-outbox")[0]
            assert row[2] == "missing" and row[3] == "waiting" and row[5] == str(msg_id)
            leases = app.view_widget("leases")
            await pilot.press("1")
            await wait_for(pilot, lambda: f"shipper {DURABLE_MARK}" in {r[0] for r in table_rows(leases,
                                                                                                "#leases-table")},
                           what="the durable mark")
            depot = Node(root, key.path, "depot", durable=True, durable_on_tmpfs=True, allow=["shipper"],
                         heartbeat_seconds=0.5)
            depot.on_message(lambda m: release.wait(30))  # handling: the copy stays in depot's inbox
            await asyncio.to_thread(depot.start)
            await pilot.press("9", "r")
            await wait_for(pilot, lambda: [r for r in table_rows(view, "#durable-pending")
                                           if r[:2] == ("depot", "shipper")], what="the copy in depot's inbox")
            release.set()
            await wait_for(pilot, lambda: not table_rows(view, "#durable-outbox") and view.listed_at is not None,
                           timeout=60, what="the outbox emptied once depot took the message")
            await pilot.press("v")  # no row selected: pick the durable node
            await wait_for(pilot, lambda: app.screen.__class__.__name__ == "PickScreen", what="the picker")
            await pilot.press("enter")  # depot, the first durable node
            await wait_for(pilot, lambda: view.receipts is not None and "verified" in view.receipts.plain,
                           timeout=30, what="the receipts verified")
            assert "shipper ← depot" in view.receipts.plain and "BROKEN" not in view.receipts.plain
            entry = [e for e in AuditLog(paths.audit_log(root)).entries() if e.action == "receipts"][-1]
            assert entry.ok and entry.command.startswith("speed receipts depot --dir ")
            # an altered receipt (one digit of its MAC) in the log shipper keeps: the first break is shown
            log = root / "shipper" / "durable" / "receipts" / "depot.log"
            lines = log.read_text().splitlines()
            i = next(n for n, line in enumerate(lines) if line.startswith('{"receipt"'))
            record = json.loads(lines[i])
            mac = record["receipt"]["mac"]
            record["receipt"]["mac"] = ("0" if mac[0] != "0" else "1") + mac[1:]
            lines[i] = json.dumps(record)
            log.write_text("\n".join(lines) + "\n")
            view.receipts = None
            await pilot.press("v", "enter")
            await wait_for(pilot, lambda: view.receipts is not None, timeout=30, what="the second verification")
            assert "BROKEN at receipt 1" in view.receipts.plain and "ledger of depot" in view.receipts.plain
            entry = [e for e in AuditLog(paths.audit_log(root)).entries() if e.action == "receipts"][-1]
            assert not entry.ok and "broken" in entry.result
    finally:
        release.set()
        if depot is not None:
            depot.close()
        shipper.close()


@run_async
async def test_a_chunked_reliable_send_of_3_mib_between_two_nodes(live_env):
    root, key, paths = live_env
    b = Node(root, key.path, "b", features=["chunks", "reliable"], trace=True, allow=["a"])
    b.start()
    a = Node(root, key.path, "a", features=["chunks", "reliable"], trace=True, allow=["b"])
    a.start()
    app = make_app(root, key, paths=paths)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("4")
            future = await asyncio.to_thread(a.send, "b", bytes(3 * 1024 * 1024), reliable=True, timeout=30)
            delivered = await asyncio.to_thread(future.result, 60)

            def of_message():
                return [r for r in _rows_of(app) if r.message_id == delivered.message_id]

            await wait_for(pilot, lambda: {r.event for r in of_message()} >= {"sent", "received", "delivered"},
                           what="the message's records")
            # its chunks are folded; the acknowledgement (an ACK envelope each way) is shown
            assert not [r for r in of_message() if r.chunk is not None]
            assert {(r.node, r.type) for r in of_message() if r.kind == "envelope"} == {("a", "ACK"), ("b", "ACK")}
            sent = next(r for r in of_message() if r.event == "sent")
            assert sent.chunks > 1
            table = app.view_widget("traces").query_one("#traces-table")
            app.view_widget("traces").follow = False
            table.cursor = _rows_of(app).index(sent)
            await pilot.press("enter")
            await wait_for(pilot, lambda: len([r for r in of_message() if r.chunk is not None]) == 2 * sent.chunks,
                           what="its chunks, sent and accepted")
            received = next(r for r in of_message() if r.event == "received")
            i = _rows_of(app).index(received)
            assert plain(table.rows[i].cells[6]) == f"received ({received.attempt} tx)"
    finally:
        a.close()
        b.close()


def test_a_threat_record_journaled_after_the_published_state_wins_until_the_next_heartbeat():
    """Right after a row turned QUARANTINED (from the receiver's journal), the next paint showed
    the receiver's older published "ok" again and `l` said there was nothing to lift."""
    from speedtui.models.traces import parse_record

    store = _fixture_store()
    rows = RegistryModel()
    rows.update([entry_record(spec[0], entry(*spec)) for spec in NODES], FIXED_NOW)
    gateway = rows.by_name()["gateway"]
    published_at = FIXED_NOW - gateway.hb_age

    def billing_at_gateway():
        return next(t for t in threat_rows(rows.rows, store, FIXED_NOW) if (t.receiver, t.sender) == ("gateway", "billing"))

    assert billing_at_gateway().state == "ok"
    store.add([parse_record({"kind": "threat", "ts": published_at - 1.0, "node": "gateway", "peer": "billing",
                             "event": "quarantined", "score": 101.0, "reason": "bad_tag"})])
    assert billing_at_gateway().state == "ok"                  # older than what gateway published since
    store.add([parse_record({"kind": "threat", "ts": published_at + 0.001, "node": "gateway", "peer": "billing",
                             "event": "quarantined", "score": 102.0, "reason": "bad_tag"})])
    row = billing_at_gateway()
    assert row.quarantined and row.score == 102.0 and row.source == "journal"
