"""Issue 15, "Act on any node": the console with an operator key grants, revokes, calls, sends
and stops on real `speed node --operator` processes it did not start (checked on disk: registry
entries, journals `kind: control`, the audit log); a node that does not trust the key gets one
sentence; without an operator key F and m still open."""

import json
import os
from pathlib import Path

from speed_runtime.control import generate_operator_key
from speed_runtime.core.records import ControlTrace
from speed_runtime.journal import read_journal
from speedtui.paths import Paths
from speedtui.services import runtime as rt
from speedtui.services.history import AuditLog
from speedtui.services.operator import resolve_operator_key
from speedtui.services.processes import console_node_name
from speedtui.ui.app import make_app
from speedtui.ui.screens.calls import CallScreen, SendScreen
from speedtui.ui.screens.confirm import ConfirmScreen
from speedtui.ui.screens.forms import GrantScreen, PickScreen

from ..helpers.wait import wait_until
from .conftest import SIZE, run_async, wait_for


def allow_of(root, name):
    return json.loads((Path(root) / "speed_registry" / f"{name}.node").read_text()).get("allow", [])


def control_records(root, name):
    records = read_journal(os.path.join(root, "speed_traces", f"{name}.jsonl"))[0]
    return [(r.command, r.arguments, r.outcome) for r in records if isinstance(r, ControlTrace)]


def operator_app(root, key_path, tmp_path, op_path):
    paths = Paths(tmp_path / "config", tmp_path / "data")
    return paths, make_app(Path(root), rt.load_key(key_path), paths=paths, operator=resolve_operator_key(op_path))


async def open_call_dialog_with_the_console_node(pilot, app, me):
    """`F`, then the dialog's "Start console-…": the call dialog with the console's node as caller."""
    await pilot.press("F")
    await wait_for(pilot, lambda: app.screen.query("#start-console-node"), what="the offer")
    await pilot.click("#start-console-node")
    await wait_for(pilot, lambda: isinstance(app.screen, CallScreen) and app.screen.own == [me],
                   what="the call dialog with the console node")


def audit_commands(paths, root):
    return [(e.action, e.command, e.ok) for e in AuditLog(paths.audit_log(Path(root))).entries()]


@run_async
async def test_grant_revoke_and_stop_nodes_the_console_did_not_start(procs, root, key_path, tmp_path):
    op_path = tmp_path / "operator.key"
    op = generate_operator_key(op_path)
    billing = procs.start("billing", services=["echo"], trace=True, extra=["--operator", op.public_text])
    procs.start("gateway", trace=True, extra=["--operator", op.public_text])
    plain = procs.start("plain", trace=True)
    paths, app = operator_app(root, key_path, tmp_path, op_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: {"billing", "gateway", "plain"} <= set(app.registry.by_name()), what="nodes")
        await wait_for(pilot, lambda: f"op {op.fingerprint}" in str(app.query_one("#hdr-info").render()),
                       what="the fingerprint in the header")  # "operator" or, when narrow, "op"
        assert op.public_text not in str(app.query_one("#hdr-info").render())
        assert app.state.administered() == ["billing", "gateway"]
        # the access view marks the nodes this operator administers
        await pilot.press("3")
        await wait_for(pilot, lambda: "✱" in str(app.query_one("#access-matrix").render()), what="the marks")
        grid = str(app.query_one("#access-matrix").render()).splitlines()
        assert any("✱ billing" in ln for ln in grid) and any("✱ gateway" in ln for ln in grid)
        assert not any("✱ plain" in ln for ln in grid)

        # g on the matrix cell gateway → billing (row 2, column 1): the grant dialog on billing
        await pilot.press("down", "left", "g")
        await wait_for(pilot, lambda: isinstance(app.screen, GrantScreen), what="the grant dialog")
        assert app.screen.values() == ("billing", "gateway", True)
        assert "opens" in str(app.screen.query_one("#gr-preview").render())
        await pilot.click("#gr-go")
        await wait_for(pilot, lambda: allow_of(root, "billing") == ["gateway"], what="the grant on disk")
        await wait_for(pilot, lambda: any(a == "grant" and "speed allow billing gateway" in c and ok
                                          for a, c, ok in audit_commands(paths, root)), what="the audit entry")
        grant_cmd = next(c for a, c, _ in audit_commands(paths, root) if a == "grant")
        assert f"--operator-key {op_path}" in grant_cmd and f"--dir {root}" in grant_cmd

        # d on the same cell: revoke
        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, GrantScreen), what="the revoke dialog")
        assert app.screen.values() == ("billing", "gateway", False)
        await pilot.click("#gr-go")
        await wait_for(pilot, lambda: allow_of(root, "billing") == [], what="the revoke on disk")

        # a node that does not trust the operator: one sentence, never a crash
        app.controller.grants.open("plain", "gateway")
        await wait_for(pilot, lambda: isinstance(app.screen, GrantScreen) and app.screen.query("#gr-note"),
                       what="the grant dialog")
        note = str(app.screen.query_one("#gr-note").render())
        assert "plain does not trust" in note and f"--operator {op.public_text}" in note
        assert "plain" not in app.screen.own
        await pilot.press("escape")

        # stop billing: picked (in Traces, where no node is highlighted), confirmed, a stop request
        await pilot.press("4", "d")
        await wait_for(pilot, lambda: isinstance(app.screen, PickScreen) and app.screen.query("#pick-list"),
                       what="the pick")
        assert [k for k, _ in app.screen.items] == ["billing", "gateway"]  # both through the operator key
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation")
        assert "signed with the operator key" in app.screen.body and billing.proc.poll() is None
        await pilot.press("y")
        await wait_for(pilot, lambda: billing.proc.poll() is not None, what="billing's exit")
        assert billing.proc.wait(10) == 0
        assert not (Path(root) / "speed_registry" / "billing.node").exists() and plain.proc.poll() is None
        await wait_for(pilot, lambda: any(a == "stop" and "speed stop billing" in c and ok
                                          for a, c, ok in audit_commands(paths, root)), what="the stop entry")
        assert app.is_running
    assert control_records(root, "billing") == [("allow", {"peer": "gateway"}, "applied"),
                                                ("revoke", {"peer": "gateway"}, "applied"), ("stop", {}, "applied")]
    assert control_records(root, "plain") == []


@run_async
async def test_call_and_message_with_a_grant_first_and_a_revoke_after(procs, root, key_path, tmp_path):
    op_path = tmp_path / "operator.key"
    op = generate_operator_key(op_path)
    me = console_node_name()
    billing = procs.start("billing", services=["echo"], trace=True, echo=True, extra=["--operator", op.public_text])
    procs.start("plain", services=["echo"], trace=True)
    paths, app = operator_app(root, key_path, tmp_path, op_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "billing" in app.registry.by_name(), what="billing")
        await open_call_dialog_with_the_console_node(pilot, app, me)
        app.screen.query_one("#call-target").value = "billing"
        app.screen.query_one("#call-service").value = "echo"
        app.screen.query_one("#call-args").value = '{"n": 7}'
        await wait_for(pilot, lambda: app.screen.query_one("#call-grants").display, what="the grant offer")
        # (the target was kept from F on billing; the check follows the service typed after it)
        await wait_for(pilot, lambda: "choose a service" not in str(app.screen.query_one("#call-check").render()),
                       what="the check line with the service")
        check = str(app.screen.query_one("#call-check").render())
        assert f"billing does not allow {me}" in check
        # not "ready" beside a missing grant (it was): the call would be refused
        assert "✓ ready" not in check and "refused unless granted first" in check
        assert not app.screen.query_one("#call-grant").value  # an offer: nothing changes unless ticked
        app.screen.query_one("#call-grant").value = True
        # the check follows the tick (it did not)
        await wait_for(pilot, lambda: f"billing will allow {me} first" in str(app.screen.query_one("#call-check").render()),
                       what="the check line after ticking")
        assert "✓ ready" in str(app.screen.query_one("#call-check").render())
        await pilot.click("#call-go")
        await wait_for(pilot, lambda: "SUCCESS" in str(app.screen.query_one("#call-result").render()),
                       what="the answer")
        assert '"n": 7' in str(app.screen.query_one("#call-result").render())
        await wait_for(pilot, lambda: allow_of(root, "billing") == [], what="the revoke afterwards")
        # a target that does not trust the operator key: no offer, one sentence saying what to do
        app.screen.query_one("#call-target").value = "plain"
        await wait_for(pilot, lambda: "plain does not trust" in str(app.screen.query_one("#call-check").render()),
                       what="the sentence")
        assert f"--operator {op.public_text}" in str(app.screen.query_one("#call-check").render())
        assert not app.screen.query_one("#call-grants").display
        # no box to tick, so no line asks for one (they did: 'tick "grant first"', 'unless granted first')
        check = str(app.screen.query_one("#call-check").render())
        assert 'tick "grant first"' not in check and "unless granted first" not in check, check
        assert "✗ refused (a grant it needs cannot be made from here)" in check
        await pilot.press("escape")

        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(app.screen, SendScreen), what="the message dialog")
        app.screen.query_one("#snd-to").value = "billing"
        app.screen.query_one("#snd-data").value = '{"hello": "billing"}'
        await wait_for(pilot, lambda: app.screen.query_one("#snd-grants").display, what="the grant offer")
        check = str(app.screen.query_one("#snd-check").render())
        # a plain message needs no answer: the grant back was asked for (revoke afterwards is ticked
        # by default, and counted alone)
        assert f"billing does not allow {me}" in check and f"{me} does not allow billing" not in check, check
        app.screen.query_one("#snd-grant").value = True
        # a revoke follows the grant now: the send waits for its ACK, which needs the grant back
        await wait_for(pilot, lambda: f"{me} will allow billing first" in str(app.screen.query_one("#snd-check").render()),
                       what="the answer's grant with the revoke after")
        await pilot.click("#snd-go")
        # wait inside the event loop (the dialog's callback starts the worker): then read billing's output
        await wait_for(pilot, lambda: "send" in [a for a, _, _ in audit_commands(paths, root)], what="the send")
        assert billing.messages(1)[0]["data"] == {"hello": "billing"}
        await wait_for(pilot, lambda: [a for a, _, _ in audit_commands(paths, root)][-1:] == ["revoke"],
                       what="the revoke after the send")
        assert allow_of(root, "billing") == [] and app.is_running
    audit = audit_commands(paths, root)
    actions = [a for a, _, _ in audit]
    # the send waits for its ACK before the revoke (which could overtake it): the answer's grant too
    assert actions == ["launch", "grant", "grant", "call", "revoke", "revoke", "grant", "grant", "send", "revoke",
                       "revoke"], audit
    assert "--confirm" in next(c for a, c, _ in audit if a == "send")
    assert all(ok for _, _, ok in audit)
    assert any(f"speed allow billing {me}" in c and "--operator-key" in c for a, c, _ in audit if a == "grant")
    assert any(f"speed revoke billing {me}" in c for a, c, _ in audit if a == "revoke")
    commands = [c for c, _, _ in control_records(root, "billing")]
    assert commands == ["allow", "revoke", "allow", "revoke"]


@run_async
async def test_what_a_node_applied_is_shown_in_traces_and_audit(procs, root, key_path, tmp_path):
    """A target journals each control request it applies (`"kind": "control"`): the console shows
    it in Traces and in Audit, with who asked (the requester node and the operator key's
    fingerprint), what was applied and at which node."""
    op_path = tmp_path / "operator.key"
    op = generate_operator_key(op_path)
    procs.start("billing", trace=True, extra=["--operator", op.public_text])
    procs.start("gateway", trace=True)
    paths, app = operator_app(root, key_path, tmp_path, op_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: {"billing", "gateway"} <= set(app.registry.by_name()), what="the nodes")
        app.controller.grants.open("billing", "gateway")
        await wait_for(pilot, lambda: isinstance(app.screen, GrantScreen) and app.screen.query("#gr-go"),
                       what="the grant dialog")
        await pilot.click("#gr-go")
        await wait_for(pilot, lambda: allow_of(root, "billing") == ["gateway"], what="the grant on disk")

        await pilot.press("4")
        traces = app.view_widget("traces").query_one("#traces-table")

        def control_rows():
            rows = [[str(c) for c in traces.rows[i].cells] for i in range(len(traces.rows))]
            return [r for r in rows if r[3] == "CONTROL"]

        await wait_for(pilot, control_rows, what="the control request in Traces")
        when, journal, flow, kind, seq, size, outcome, who = control_rows()[0]
        requester = flow.split(" → ")[0]
        assert requester.startswith("speed-cli-") and flow == f"{requester} → billing"
        assert journal == "billing in" and outcome == "applied allow gateway" and who == f"op {op.fingerprint[:8]}"

        await pilot.press("7")
        table = app.view_widget("audit").query_one("#control-table")
        await wait_for(pilot, lambda: len(table.rows) == 1 and table.region.height > 0, what="the Audit row")
        _, node, asked_by, request = [str(c) for c in table.rows[0].cells]
        assert (node, asked_by, request) == ("billing", f"{requester} (operator {op.fingerprint[:8]})",
                                             "allow gateway: applied")
    assert control_records(root, "billing") == [("allow", {"peer": "gateway"}, "applied")]


@run_async
async def test_without_an_operator_key_every_dialog_says_what_is_missing(procs, root, key_path, tmp_path):
    procs.start("billing", services=["echo"], trace=True)
    paths, app = operator_app(root, key_path, tmp_path, tmp_path / "missing.key")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "billing" in app.registry.by_name(), what="billing")
        await wait_for(pilot, lambda: "key" in str(app.query_one("#hdr-info").render()), what="the header")
        assert "operator" not in str(app.query_one("#hdr-info").render())
        assert app.operator.problem and "missing.key" in app.operator.problem
        assert [n.title for n in app._notifications if n.message == app.operator.problem] == ["operator key"]
        for key, dialog_id in (("F", "#call-dialog"), ("m", "#send-dialog")):
            await pilot.press(key)
            await wait_for(pilot, lambda: app.screen.query(dialog_id), what=f"the dialog of {key}")
            text = str(app.screen.query_one(".no-own-node").render())
            assert "no node of its own" in text and "without an operator key" in text
            await pilot.press("escape")
        app.controller.grants.open("billing", "gateway")  # nothing the console may change: one sentence
        await wait_for(pilot, lambda: any("no operator key is loaded" in n.message for n in app._notifications),
                       what="the sentence")
        told = next(n.message for n in app._notifications if "no operator key is loaded" in n.message)
        assert told.startswith("billing was not started by this console") and "--operator-key" in told
        assert not isinstance(app.screen, GrantScreen) and app.is_running
        await pilot.press("d")
        await wait_for(pilot, lambda: any("no node to stop" in n.message for n in app._notifications),
                       what="the stop sentence")
        assert not isinstance(app.screen, PickScreen) and app.is_running


def test_which_operator_key_file_the_console_uses(tmp_path, monkeypatch):
    from speedtui.services.config import Config

    default = tmp_path / "default.key"
    monkeypatch.setenv("SPEED_OPERATOR_KEY", str(default))
    assert resolve_operator_key().key is None and resolve_operator_key().problem is None  # none: no word
    made = generate_operator_key(default)
    assert resolve_operator_key().fingerprint == made.fingerprint  # the default file, when present
    named = tmp_path / "named.key"
    other = generate_operator_key(named)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"operator_key": str(named)}))
    assert resolve_operator_key(None, Config.load(config).operator_key).fingerprint == other.fingerprint
    assert resolve_operator_key(default, str(named)).fingerprint == made.fingerprint  # the command line wins
    os.chmod(named, 0o644)
    loose = resolve_operator_key(named)
    assert loose.key is None and loose.problem.startswith("operator key not loaded:") and "chmod 600" in loose.problem
    assert len(loose.problem.splitlines()) == 1 and named.read_text().split()[1] not in loose.problem + repr(loose)
    assert "missing" in resolve_operator_key(tmp_path / "missing.key").problem


def test_speedtui_operator_key_option(tmp_path):
    from speedtui.__main__ import build_parser

    assert build_parser().parse_args(["--operator-key", "/x/op.key"]).operator_key == Path("/x/op.key")


@run_async
async def test_security_lifts_a_quarantine_at_a_node_trusting_the_key(procs, root, key_path, tmp_path):
    """Issue 18: `l` in the Security view lifts a quarantine at a `speed node` process the console
    did not start, through the control extension (`speed lift`), audited with that command."""
    from speed_runtime import Node

    from ..helpers.replay import send_and_replay

    op_path = tmp_path / "operator.key"
    op = generate_operator_key(op_path)
    procs.start("guard", allow=["mallory"], trace=True, heartbeat=0.5,
                extra=["--operator", op.public_text, "--feature", "quota", "--threat", "half_life=3600"])
    paths, app = operator_app(root, key_path, tmp_path, op_path)

    def threat_state():
        entry = json.loads((Path(root) / "speed_registry" / "guard.node").read_text())
        return entry["counters"]["threat"].get("mallory", {}).get("state")

    with Node(root, key_path, "mallory", allow=["guard"]) as mallory:
        for i in range(6):  # each copy is a replay (30 points): the fourth reaches the threshold of 100
            send_and_replay(mallory, "guard", i)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: threat_state() == "quarantined", timeout=30, what="the quarantine")
            await pilot.press("8")
            view = app.view_widget("security")
            table = view.query_one("#security-table")
            pair = ("guard", "mallory")
            await wait_for(pilot, lambda: any((t.receiver, t.sender) == pair and t.quarantined for t in view.rows),
                           timeout=30, what="the quarantined row")
            table.cursor = table._index_of(pair)
            await wait_for(pilot, lambda: view.selected() is not None and view.selected().sender == "mallory",
                           what="the row selected")
            view.show_detail(pair)
            assert "trusts this console's operator key" in view.query_one("#security-detail").render().plain
            await pilot.press("l")
            await wait_for(pilot, lambda: threat_state() != "quarantined", timeout=30, what="the lift on disk")
    lifts = [(e.action, e.command, e.ok) for e in AuditLog(paths.audit_log(Path(root))).entries() if e.action == "lift"]
    assert lifts and lifts[-1][2] and f"speed lift guard mallory --dir {root}" in lifts[-1][1]
    # guard publishes the lift, then journals it: the entry can show it a moment before the record is written
    wait_until(lambda: ("lift", {"sender": "mallory"}, "applied") in control_records(root, "guard"), 10,
               "guard's record of the lift")


@run_async
async def test_an_open_call_dialogs_checks_follow_the_registry(procs, root, key_path, tmp_path):
    """The target restarted with the grant while the call dialog was open: the dialog still said it
    was missing, and Call then failed on the grant back, which it offered no box for."""
    op_path = tmp_path / "operator.key"
    generate_operator_key(op_path)
    me = console_node_name()
    plain = procs.start("plain", services=["echo"], trace=True)
    paths, app = operator_app(root, key_path, tmp_path, op_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "plain" in app.registry.by_name(), what="plain")
        await open_call_dialog_with_the_console_node(pilot, app, me)
        app.screen.query_one("#call-target").value = "plain"
        app.screen.query_one("#call-service").value = "echo"
        check = lambda: str(app.screen.query_one("#call-check").render())  # noqa: E731
        await wait_for(pilot, lambda: f"plain does not allow {me}" in check(), what="the missing grant")
        plain.stop()
        procs.start("plain", services=["echo"], trace=True, extra=["--allow", me])
        await wait_for(pilot, lambda: f"plain does not allow {me}" not in check(), timeout=30,
                       what="the check following the registry")
        assert isinstance(app.screen, CallScreen)
