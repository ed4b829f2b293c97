"""Unit tests of the plain-Python models (no Textual)."""

import json

from speedtui.environments.fixture import FIXED_NOW, journal_records
from speedtui.models.access import AccessGraph, explain, grant_preview
from speedtui.models.fabrics import build_fabrics
from speedtui.models.commands import speed_call_command
from speedtui.models.history import AuditEntry, CallRecord
from speedtui.services.history import AuditLog, CallHistory
from speedtui.models.query import parse_query
from speedtui.models.liveness import HostFacts
from speedtui.models.registry import EXPIRING, RegistryModel, build_row, fmt_counters, fmt_duration
from speedtui.services.registry import read_registry
from speedtui.models.traces import TraceFilter, TraceStore, parse_record

from .conftest import entry_record, node_id


def entry(name, age=1.0, lease=30, status="online", groups=(), allow=(), services=(), **kw):
    d = {"name": name, "id": node_id(name), "pid": 1, "host": "elsewhere", "status": status,
         "startupTimestamp": 1000.0, "lastHeartbeat": 2000.0 - age, "leaseSeconds": lease,
         "groups": list(groups), "allow": list(allow), "services": list(services)}
    d.update(kw)
    return entry_record(name, d)


def test_status_online_leaving_stale():
    assert build_row(entry("a", age=1), 2000.0).status == "online"
    assert build_row(entry("a", age=1, status="leaving"), 2000.0).status == "leaving"
    r = build_row(entry("a", age=31), 2000.0)
    assert r.status == "stale" and r.remaining < 0


def test_bad_entry_is_stale_and_reported():
    r = build_row(entry_record("x", None, "not valid JSON"), 2000.0)
    assert r.status == "stale" and r.error == "not valid JSON"


def test_boottime_judges_staleness_on_same_boot():
    e = entry("a", age=100, bootId="B", bootTimeHeartbeat=50.0)
    assert build_row(e, 2000.0, HostFacts("", "B", 55.0, lambda p: True)).status == "online"
    assert build_row(e, 2000.0, HostFacts("", "C", 55.0, lambda p: True)).status == "stale"


def test_dead_pid_on_this_host_is_stale():
    e = entry("a", host="h")
    assert build_row(e, 2000.0, HostFacts("h", None, None, lambda p: False)).status == "stale"
    assert build_row(e, 2000.0, HostFacts("h", None, None, lambda p: True)).pid_alive is True
    assert build_row(e, 2000.0, HostFacts("other", None, None, lambda p: True)).pid_alive is None


def test_sort_filter_expiring():
    m = RegistryModel()
    m.update([entry("b", age=20, groups=["x"]), entry("a", age=1, services=["echo"]), entry("c", age=40)], 2000.0)
    assert [r.name for r in m.visible()] == ["a", "b", "c"]
    m.set_sort("name")
    assert [r.name for r in m.visible()] == ["c", "b", "a"]
    m.sort_column = EXPIRING
    m.sort_reverse = False
    assert [r.name for r in m.visible()] == ["b", "a", "c"]  # least lease first, stale last
    m.filter_text = "echo"
    assert [r.name for r in m.visible()] == ["a"]
    m.filter_text = ""
    m.fabric = "x"
    assert [r.name for r in m.visible()] == ["b"]
    m.fabric = ""
    assert sorted(r.name for r in m.visible()) == ["a", "c"]
    assert m.counts() == {"online": 2, "leaving": 0, "stale": 1}


def test_read_registry_tolerates_garbage(fixture_env):
    root, _, _ = fixture_env
    raw = read_registry(root)
    names = {r.name: r for r in raw}
    assert "broken" in names and names["broken"].error
    assert names["gateway"].entry.name == "gateway"


def test_format_helpers():
    assert fmt_duration(5.25) == "5.2s" or fmt_duration(5.25) == "5.3s"
    assert fmt_duration(3700) == "1h01m"
    assert fmt_duration(None) == "-"
    assert fmt_counters({"sent": 3, "rejected": {"bad_tag": 2, "x": 1}}) == "tx=3 rej=3"


def _store(cap=1000):
    s = TraceStore(capacity=cap)
    for recs in journal_records(FIXED_NOW).values():
        s.add([parse_record(r) for r in recs])
    return s


def test_parse_record_rejects_invalid():
    assert parse_record({"ts": "x", "node": "a"}) is None
    assert parse_record({"ts": 1.0}) is None
    assert parse_record({"ts": 1.0, "node": "a", "kind": "other"}) is None
    r = parse_record({"ts": 1.0, "node": "a", "dir": "in", "peer": "b", "type": "MESSAGE", "seq": 2,
                      "outcome": "rejected", "reason": "bad_tag"})
    assert r.sender == "b" and r.receiver == "a" and r.result == "rejected:bad_tag"


def test_ring_buffer_is_bounded_and_view_follows():
    s = TraceStore(capacity=10)
    recs = [parse_record({"ts": float(i), "node": "a", "dir": "out", "peer": "b", "type": "MESSAGE",
                          "seq": i, "outcome": "sent"}) for i in range(25)]
    s.add(recs)
    assert len(s.ring) == 10 and len(s.view) == 10 and s.total == 25
    s.set_filter(TraceFilter(text="b"))
    s.add(recs[:5])  # older than everything the full ring keeps (the ring is in time order)
    assert len(s.view) == 10 and [r.seq for r in s.view] == list(range(15, 25))
    newer = [parse_record({"ts": 100.0 + i, "node": "a", "dir": "out", "peer": "b", "type": "MESSAGE",
                           "seq": 100 + i, "outcome": "sent"}) for i in range(5)]
    s.add(newer)
    assert len(s.view) == 10 and [r.seq for r in s.view][-5:] == [100, 101, 102, 103, 104]


class _CountedTime(float):
    """A record's time that counts the comparisons made with it."""
    comparisons = 0

    def _count(op):
        def compare(self, other):
            _CountedTime.comparisons += 1
            return op(float(self), float(other))
        return compare

    __lt__, __le__, __gt__, __ge__ = (_count(float.__lt__), _count(float.__le__), _count(float.__gt__),
                                      _count(float.__ge__))


def test_journals_read_one_after_another_are_merged_in_time_order_at_a_cost_per_record():
    """The console reads each journal's tail a pass at a time, one journal after another: a pass
    is older than what the ring already holds. Each record once cost a walk back over the ring (the
    first read of sixteen 4 MiB tails held the console's main thread for minutes); the ring, the
    view and the request index must come out as if every record had been read in time order."""
    from speedtui.models.traces import TraceRecord
    journals, per_journal, per_pass, cap = 8, 600, 100, 1000
    records = {j: [TraceRecord(id=j * per_journal + i, ts=_CountedTime(1000.0 + i * (1 + j) + j * 0.25),
                               node=f"n{j}", kind="envelope", dir="out", peer="b" if i % 2 else "c",
                               type="SPC_REQUEST", seq=i, outcome="sent", request_id=f"r{j}-{i}")
                   for i in range(per_journal)] for j in range(journals)}
    s = TraceStore(capacity=cap)
    s.set_filter(TraceFilter(text="b"))
    _CountedTime.comparisons = 0
    for start in range(0, per_journal, per_pass):       # as the journal tailer reads them
        batch = [r for j in range(journals) for r in records[j][start:start + per_pass]]
        batch.sort(key=lambda r: r.ts)
        s.add(batch)
    every = sorted((r for rs in records.values() for r in rs), key=lambda r: (float(r.ts), r.id))
    newest = every[-cap:]
    assert [r.id for r in s.ring] == [r.id for r in newest]
    assert [r.id for r in s.view] == [r.id for r in newest if r.peer == "b"]
    assert set(s.by_request) == {r.request_id for r in newest}
    assert s.total == journals * per_journal
    assert _CountedTime.comparisons <= 30 * journals * per_journal, _CountedTime.comparisons


def test_filters_and_query_language():
    s = _store()
    s.set_filter(parse_query("outcome:rej"))
    assert {r.reason for r in s.view} == {"replayed_nonce", "unauthorized"}
    s.set_filter(parse_query("type:req node:billing"))
    assert s.view and all(r.type == "SPC_REQUEST" for r in s.view)
    s.set_filter(parse_query("is:error"))
    assert s.view and all(r.error_code == "INVALID_ARGUMENTS" for r in s.view)
    s.set_filter(parse_query("mallory"))
    assert len(s.view) == 1
    s.set_filter(parse_query("", nodes=frozenset({"ledger"})))
    assert len(s.view) == 0


def test_call_link_and_rtt():
    s = _store()
    req = next(r for r in s.ring if r.type == "SPC_REQUEST" and r.request_id == "req-0003" and r.dir == "out")
    link = s.call_link(req)
    assert link.caller == "gateway" and link.callee == "billing" and link.service == "calculateTax"
    assert link.status == "SUCCESS" and abs(link.rtt_ms - 5.55) < 1e-6
    assert len(link.records) == 4
    bad = s.call_link(next(r for r in s.ring if r.request_id == "req-0005"))
    assert bad.status == "ERROR" and bad.error_code == "INVALID_ARGUMENTS"


def test_lease_history_and_replay_state_and_rate():
    s = _store()
    hist = s.lease_history("ledger")
    assert [h.event for h in hist] == ["observed_expiry", "observed_join", "renewed_late"]
    st = s.replay_state("billing")
    assert st["last_accepted"] == {"gateway": 9}
    assert [r.reason for r in st["rejections"]] == ["replayed_nonce", "unauthorized"]
    series = s.rate_series(FIXED_NOW, 60)
    assert len(series) == 60 and sum(series) == len([r for r in s.ring if r.kind == "envelope"])  # the rate counts envelopes


def _lease(ts, node, subject, event):
    return parse_record({"kind": "lease", "ts": ts, "node": node, "subject": subject, "event": event})


def test_a_nodes_lease_history_survives_other_nodes_churn():
    """Issue 28: on a busy environment the shared lease ring was filled by short-lived CLI nodes'
    joins and leaves, and a traced node's detail said "none journaled"."""
    s = TraceStore()
    s.add([_lease(1.0, "billing", "billing", "registered"), _lease(2.0, "gateway", "billing", "observed_join")])
    for i in range(10_000):      # 20,000 records about 10,000 one-shot nodes, seen by gateway
        s.add([_lease(10.0 + i, "gateway", f"cli-{i}", "observed_join"),
               _lease(10.5 + i, "gateway", f"cli-{i}", "observed_leave")])
    own, seen = s.lease_history_split("billing")
    assert [r.event for r in own] == ["registered"]
    assert [(r.node, r.event) for r in seen] == [("gateway", "observed_join")]


def test_what_peers_observed_is_in_time_order_however_the_journals_are_read():
    s = TraceStore()
    s.add([_lease(30.0, "ledger", "billing", "observed_expiry"), _lease(50.0, "ledger", "billing", "observed_join")])
    s.add([_lease(10.0, "gateway", "billing", "observed_join"), _lease(40.0, "gateway", "billing", "observed_expiry")])
    _own, seen = s.lease_history_split("billing")
    assert [r.ts for r in seen] == [10.0, 30.0, 40.0, 50.0]
    assert [r.ts for r in s.lease_history("billing")] == [10.0, 30.0, 40.0, 50.0]


def test_the_lease_history_forgets_departed_nodes_first_and_is_bounded():
    from speedtui.models.lease_history import LeaseHistory

    log = LeaseHistory(per_node=4, max_nodes=3)
    log.add(_lease(1.0, "quiet", "quiet", "registered"))          # present, quiet the longest
    log.add(_lease(2.0, "a", "a", "registered"))
    log.add(_lease(3.0, "a", "a", "deregistered"))                  # gone
    log.add(_lease(4.0, "b", "b", "registered"))
    log.add(_lease(5.0, "c", "c", "registered"))                    # a fourth node: `a` goes, not `quiet`
    assert len(log) == 3 and log.of("a") == ([], []) and log.of("quiet")[0]
    log.add(_lease(6.0, "d", "d", "registered"))                    # nobody departed: the quietest goes
    assert log.of("quiet") == ([], []) and log.of("b")[0]
    for t in range(10):                                             # per node: the newest per_node
        log.add(_lease(10.0 + t, "d", "d", "renewed_late"))
    assert [r.ts for r in log.of("d")[0]] == [16.0, 17.0, 18.0, 19.0]
    log.add(_lease(0.5, "d", "d", "registered"))                   # older than all it keeps: not kept
    assert [r.ts for r in log.of("d")[0]] == [16.0, 17.0, 18.0, 19.0]


def test_an_unreadable_registry_file_is_no_node_of_the_access_graph_or_a_fabric():
    rows = [build_row(entry("gw", allow=["bill"], groups=["edge"]), 2000.0),
            build_row(entry_record("broken", None, "not JSON"), 2000.0)]
    assert rows[1].error                                    # Leases still lists it, as unreadable
    assert set(AccessGraph(rows).nodes) == {"gw"}
    assert [r.name for f in build_fabrics(rows) for r in f.nodes] == ["gw"]


def test_the_access_matrix_keeps_names_in_one_column_past_row_nine():
    from speedtui.ui.widgets.matrix import AccessMatrix

    names = [f"n{i:02d}" for i in range(12)]
    matrix = AccessMatrix()
    matrix.names, matrix.cells = names, [["·"] * 12 for _ in names]
    lines = matrix.render_grid().plain.splitlines()
    rows = [line for line in lines if line.strip()[:1].isdigit() and " n" in line]
    assert len(rows) == 12
    starts = {line.index(name) for name, line in zip(names, rows)}
    assert len(starts) == 1, rows


def _graph():
    rows = [build_row(e, 2000.0) for e in [
        entry("gw", allow=["bill"], services=["echo"], groups=["edge"]),
        entry("bill", allow=["gw"], services=["calculateTax"], groups=["fin"]),
        entry("rep", allow=["gw"], services=["echo"], groups=["fin"]),
        entry("dead", age=99, allow=["gw"]),
    ]]
    return AccessGraph(rows)


def test_access_relations_and_matrix():
    g = _graph()
    assert g.relation("gw", "bill") == "mutual"
    assert g.relation("gw", "rep") == "one-way"
    assert g.relation("bill", "rep") == "none"
    names = ["bill", "gw", "rep"]
    m = g.matrix(names)
    assert m[1][0] == "⇄" and m[1][2] == "→" and m[2][1] == "←" and m[0][2] == "·"


def test_explainer_says_exactly_what_is_missing():
    g = _graph()
    ok = explain(g, "gw", "bill", "calculateTax")
    assert ok.ok and not ok.missing
    v = explain(g, "gw", "rep", "echo")  # rep allows gw, gw does not allow rep
    assert not v.ok and len(v.missing) == 1 and v.missing[0].startswith("grant on gw: allow rep")
    v = explain(g, "rep", "gw", "echo")
    assert [m.split(":")[0] for m in v.missing] == ["grant on gw"]
    v = explain(g, "gw", "bill", "nope")
    assert len(v.missing) == 1 and "SERVICE_NOT_FOUND" in v.missing[0]
    v = explain(g, "gw", "dead")
    assert any("start node dead" in m for m in v.missing)


def test_grant_preview():
    g = _graph()
    assert "nothing changes" in grant_preview(g, "bill", "gw", True)[0]
    lines = grant_preview(g, "gw", "rep", True)
    assert lines[0].startswith("opens") and "mutual" in lines[1]
    assert grant_preview(g, "bill", "gw", False)[0].startswith("closes")


def test_fabrics_tree():
    rows = [build_row(e, 2000.0) for e in [entry("a", groups=["x", "y"]), entry("b", groups=["x"], age=99),
                                           entry("c")]]
    fabs = {f.name: f for f in build_fabrics(rows)}
    assert [f.label for f in build_fabrics(rows)] == ["x", "y", "(ungrouped)"]
    assert fabs["x"].health == "degraded" and fabs["y"].health == "healthy"
    assert [r.name for r in fabs[""].nodes] == ["c"]


def test_history_round_trip(tmp_path):
    log = AuditLog(tmp_path / "d" / "audit.jsonl")
    log.record(AuditEntry(1.0, "launch", "x", "speed node ..."))
    with open(log.path, "a") as fh:
        fh.write("garbage\n")
    assert [e.action for e in log.entries()] == ["launch"]
    assert (log.path.stat().st_mode & 0o777) == 0o600
    calls = CallHistory(tmp_path / "d" / "calls.jsonl")
    calls.record(CallRecord(2.0, "a", "b", "echo", {"x": 1}, 5.0, "SUCCESS", {"x": 1}, latency_ms=1.5))
    assert calls.entries()[0].arguments == {"x": 1}


def test_speed_call_command_quotes():
    cmd = speed_call_command("billing", "calculateTax", {"amount": 1}, "ops", "/r oot", "/k", 5.0)
    assert cmd == ("speed call billing calculateTax '{\"amount\":1}' --as ops --dir '/r oot' --key /k "
                   "--timeout 5")
    json.loads(cmd.split("'")[1])


def test_registry_reader_survives_hostile_entries(tmp_path):
    """Entries that broke the runtime's readers before (huge numbers, a name that is not the file's,
    non-objects) are shown as errors or with defaults; the reader and the rows never raise."""
    import json as _json
    import uuid as _uuid

    from speedtui.models.registry import RegistryModel
    from speedtui.services.registry import read_registry

    reg = tmp_path / "speed_registry"
    reg.mkdir()
    good = {"name": "big", "id": str(_uuid.uuid4()), "lastHeartbeat": 1000.0, "pid": 10 ** 400,
            "leaseSeconds": 10 ** 400, "counters": {"sent": 10 ** 400}}
    (reg / "big.node").write_text(_json.dumps(good))
    (reg / "other.node").write_text(_json.dumps({**good, "name": "someone"}))
    (reg / "list.node").write_text("[1, 2]")
    rows = {r.name: r for r in read_registry(tmp_path)}
    assert rows["big"].error is None and rows["other"].error and rows["list"].error
    model = RegistryModel()
    model.update(rows.values(), now=1001.0)
    assert {r.name for r in model.rows} == {"big", "other", "list"}


def test_control_records_are_kept_and_shown_as_data():
    """A target's control record (`kind: control`, the `control` extension) becomes a row of its
    own: who asked (requester, operator fingerprint), what, the outcome; it never counts as a
    rejected envelope (replay state), and what a member wrote in it is shown as data."""
    applied = parse_record({"kind": "control", "ts": FIXED_NOW, "node": "billing", "peer": "speed-cli-1a2b",
                            "operator": "16ccdefa00112233", "requestId": "r1", "command": "allow",
                            "arguments": {"peer": "gateway"}, "outcome": "applied"})
    refused = parse_record({"kind": "control", "ts": FIXED_NOW + 1, "node": "billing", "peer": "x\x1b]2;PWNED\x07",
                            "operator": None, "outcome": "rejected", "reason": "control_untrusted",
                            "detail": "key \x9b31m"})
    assert (applied.kind, applied.type, applied.sender, applied.receiver, applied.event, applied.detail,
            applied.subject, applied.outcome) == ("control", "CONTROL", "speed-cli-1a2b", "billing", "allow",
                                                  "gateway", "16ccdefa00112233", "applied")
    assert refused.peer == "x\\x1b]2;PWNED\\x07" and refused.detail == "key \\x9b31m" and refused.result == \
        "rejected:control_untrusted"
    store = TraceStore()
    store.add([applied, refused])
    assert list(store.controls) == [applied, refused] and list(store.view) == [applied, refused]
    assert store.control_version == 2 and store.replay_state("billing")["rejections"] == []


# error texts: the code once, no class names, the console's words
def test_call_errors_in_the_consoles_words():
    from speed_runtime import AccessDeniedError, NodeUnavailableError

    from speedtui.models.errors import describe_failure

    text = describe_failure(AccessDeniedError("node billing does not allow ops; grant it on billing (allow ops)"),
                            frozenset({"billing"}))
    assert text.count("ACCESS_DENIED") == 1 and "press g" in text and "allow(" not in text
    text = describe_failure(NodeUnavailableError("billing"))
    assert "Error" not in text and "billing" in text


def test_a_file_system_error_of_an_action_says_what_could_not_be_done():
    """A full environment directory made the whole message "[Errno 28] No space left on device"."""
    import errno

    from speedtui.models.errors import describe_failure
    text = describe_failure(OSError(errno.ENOSPC, "No space left on device", "/dev/shm/speed/speed_registry/x.tmp"))
    assert text == ("the environment's files could not be written or read (/dev/shm/speed/speed_registry/x.tmp): "
                    "No space left on device")
    assert describe_failure(OSError(errno.ENOSPC, "No space left on device")).endswith(": No space left on device")


def test_the_key_check_trusts_what_receivers_accepted_over_what_anyone_wrote():
    """The wrong-key banner came only when every envelope tried failed: a few matching ones (nodes
    started under the console's key beside the environment's) hid it. An envelope its receiver
    accepted proves the key it was sealed under; one that fails the console's key decides. Junk a
    member wrote (rejected, failing any key) never raises it."""
    from speedtui.models.keycheck import MIXED_KEYS, WRONG_KEY, KeyCheck
    from speedtui.models.traces import TraceRecord

    def record(i: int, good: bool, dir: str = "in", outcome: str = "accepted") -> TraceRecord:
        return TraceRecord(i, 0.0, "billing", "envelope", dir=dir, peer="gateway", outcome=outcome,
                           envelope=b"good" if good else b"bad")

    def check(records) -> KeyCheck:
        keys = KeyCheck(lambda data: data == b"good")
        keys.observe(records)
        return keys
    mixed = check([record(1, True), record(2, False), record(3, True), record(4, True)])
    assert mixed.wrong_key and mixed.banner() == MIXED_KEYS
    assert check([record(i, False) for i in range(3)]).banner() == WRONG_KEY
    right_key_under_junk = check([record(i, False, outcome="rejected") for i in range(20)] + [record(99, True)])
    assert not right_key_under_junk.wrong_key and right_key_under_junk.banner() == ""
    # nothing accepted traced (senders' journals only): every envelope tried must fail, as before
    assert check([record(i, False, "out", "sent") for i in range(3)]).banner() == WRONG_KEY
    assert check([record(1, False, "out", "sent"), record(2, True, "out", "sent")]).banner() == ""


def test_a_node_whose_entry_went_with_its_process_is_forgotten_not_shown_dead():
    """A `speed call` node that exits cleanly removes its entry, then its process ends: a build
    between the two showed it `stale` (process gone) for a fifth of a second, until the next scan.
    A row first found dead is kept only while its entry file is still there."""
    model = RegistryModel()
    alive = {"pid": True}
    facts = lambda: HostFacts("h", None, None, lambda p: alive["pid"])  # noqa: E731
    model.update([entry("cli", host="h"), entry("crashed", host="h")], 2000.0, facts())
    assert [r.status for r in model.rows] == ["online", "online"] and model.just_died == []
    alive["pid"] = False
    model.refresh(2001.0, facts())
    assert sorted(model.just_died) == ["cli", "crashed"]
    assert model.forget_removed(lambda name: name == "crashed") is True   # cli's file is gone, crashed's not
    assert [(r.name, r.status) for r in model.rows] == [("crashed", "stale")]
    assert [r.name for r in model.records] == ["crashed"] and "cli" not in model.by_name()
    model.refresh(2002.0, facts())  # already stale: not asked again
    assert model.just_died == [] and model.forget_removed(lambda name: False) is False


def test_the_access_graph_is_built_once_per_registry_change_not_per_question():
    """An open call or grant dialog asks for the graph at every redraw (five a second): it was
    built anew each time, sorting every node of the environment."""
    from speedtui.models.keycheck import KeyCheck
    from speedtui.models.replays import ReplayTracker
    from speedtui.ui.state import ConsoleState

    registry = RegistryModel()
    registry.update([entry("a", allow=("b",)), entry("b")], 2000.0)
    state = ConsoleState(root=None, root_label="", registry=registry, traces=TraceStore(10), replays=ReplayTracker(),
                         keycheck=KeyCheck(lambda data: None))
    first = state.graph()
    assert state.graph() is first and first.may_write("b", "a")
    registry.update([entry("a"), entry("b")], 2001.0)  # a revoked b
    assert state.graph() is not first and not state.graph().may_write("b", "a")
