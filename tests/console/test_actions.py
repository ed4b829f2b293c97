"""Pilot tests of the actions, checking the effect on disk (entry, grant, envelope, journal).

Live runtime Nodes run here; every Node and process is stopped in teardown (the app stops its
own on exit; the test's own nodes are context managers)."""

import json
import os
import time

import pytest

from speedtui.services import runtime as rt
from speedtui.services.actions import NodeSpec
from speedtui.ui.app import make_app
from speedtui.services.history import AuditLog, CallHistory
from speedtui.ui.screens.confirm import ConfirmScreen
from speedtui.ui.screens.calls import CallScreen, SendScreen
from speedtui.ui.screens.forms import GrantScreen, LaunchScreen

from ..helpers.wait import wait_until
from .conftest import SIZE, run_async, wait_for

import speed_runtime  # noqa: E402
from speed_runtime.demo import DEMO_SERVICES  # noqa: E402


def entry(root, name):
    try:
        return json.loads((root / "speed_registry" / f"{name}.node").read_text())
    except (OSError, ValueError):
        return None


def journal(root, name):
    p = root / "speed_traces" / f"{name}.jsonl"
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def billing_node(root, key, **kw):
    n = speed_runtime.Node(str(root), key.runtime_key, "billing", allow=["ops"], trace=True,
                           heartbeat_seconds=1, lease_seconds=10, **kw)
    n.register("calculateTax", DEMO_SERVICES["calculateTax"])
    n.register("echo", DEMO_SERVICES["echo"])
    return n


def app_for(live_env, **kw):
    root, key, paths = live_env
    return make_app(root, key, paths=paths, **kw)


async def launch_ops(pilot, app, root, allow="billing", in_process=True):
    await pilot.press("n")
    await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen) and app.screen.query("#ln-go"),
                   what="launch dialog")
    scr = app.screen
    scr.query_one("#ln-name").value = "ops"
    scr.query_one("#ln-groups").value = "ops-fabric"
    scr.query_one("#ln-allow").value = allow
    if not in_process:
        scr.query_one("#ln-proc").value = True
    await pilot.pause()
    await pilot.click("#ln-go")
    await wait_for(pilot, lambda: entry(root, "ops") is not None and "ops" in app.actions.own, timeout=90,
                   what="ops registry entry")


@run_async
async def test_launch_in_process_node_and_stop(live_env):
    root, key, paths = live_env
    app = app_for(live_env)
    async with app.run_test(size=SIZE) as pilot:
        await launch_ops(pilot, app, root)
        e = entry(root, "ops")
        assert e["groups"] == ["ops-fabric"] and e["allow"] == ["billing"] and e["pid"] == os.getpid()
        assert e["services"] == ["echo"]
        await wait_for(pilot, lambda: "ops" in app.registry.by_name(), what="ops in the leases view")
        audit = AuditLog(paths.audit_log(root)).entries()
        assert audit[-1].action == "launch" and "speed node" in audit[-1].command and "--name ops" in audit[-1].command
        # d on the highlighted node asks to confirm at once (no picker); declined, nothing stops
        table = app.view_widget("leases").query_one("#leases-table")
        table.focus()
        await wait_for(pilot, lambda: "ops" in [r.key for r in table.rows], what="ops in the table")
        table.cursor = [r.key for r in table.rows].index("ops")
        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation for ops")
        await pilot.press("n")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen), what="declined")
        assert entry(root, "ops") is not None
        # where nothing is highlighted (Traces), d offers the picker
        await pilot.press("4")
        await pilot.press("d")
        await wait_for(pilot, lambda: app.screen.query("#pick-list"), what="stop picker")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="stop confirmation")
        assert entry(root, "ops") is not None  # nothing is stopped before the confirmation
        await pilot.press("y")
        await wait_for(pilot, lambda: entry(root, "ops") is None, timeout=60, what="ops deregistered")
        # (the stop is recorded just after the node is gone, on the action's worker)
        await wait_for(pilot, lambda: [e for e in AuditLog(paths.audit_log(root)).entries() if e.action == "stop"],
                       what="the audit record")
        assert AuditLog(paths.audit_log(root)).entries()[-1].action == "stop"


@run_async
async def test_launch_separate_process_node(live_env):
    root, key, paths = live_env
    app = app_for(live_env)
    async with app.run_test(size=SIZE) as pilot:
        await launch_ops(pilot, app, root, in_process=False)
        e = entry(root, "ops")
        assert e["pid"] != os.getpid()
        own = app.actions.own["ops"]
        assert own.proc is not None and own.proc.poll() is None
        app.actions.stop("ops")
        assert own.proc.poll() is not None
        await wait_for(pilot, lambda: entry(root, "ops") is None, timeout=60, what="process deregistered")


@run_async
async def test_q_asks_before_it_stops_the_nodes_launched_as_separate_processes(live_env):
    """q stopped the console's separate `speed node` processes without a word (issue 28, item 9)."""
    root, key, paths = live_env
    app = app_for(live_env)
    async with app.run_test(size=SIZE) as pilot:
        await launch_ops(pilot, app, root, in_process=False)
        own = app.actions.own["ops"]
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
        assert "ops" in app.screen.body and "separate" in app.screen.body
        await pilot.press("n")                                  # stays, and so does ops
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen), what="declined")
        assert app.is_running and own.proc.poll() is None
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question again")
        await pilot.press("y")
        await wait_for(pilot, lambda: not app.is_running, what="the console to end")
    app.shutdown()
    assert own.proc.poll() is not None                          # stopped with the console


@pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "process"])
@run_async
async def test_grant_and_revoke_publish_allow(live_env, in_process):
    root, key, paths = live_env
    app = app_for(live_env)
    async with app.run_test(size=SIZE) as pilot:
        await launch_ops(pilot, app, root, allow="", in_process=in_process)
        assert app.actions.own["ops"].kind == ("in-process" if in_process else "process")
        await pilot.press("g")
        await wait_for(pilot, lambda: isinstance(app.screen, GrantScreen) and app.screen.query("#gr-go"),
                       what="grant dialog")
        app.screen.query_one("#gr-peer").value = "reports"
        await pilot.pause()
        assert "opens" in str(app.screen.query_one("#gr-preview").render())
        await pilot.click("#gr-go")
        await wait_for(pilot, lambda: (entry(root, "ops") or {}).get("allow") == ["reports"], what="grant on disk")
        await wait_for(pilot, lambda: app.registry.by_name()["ops"].allow == ("reports",), what="grant in the view")
        app.controller.grants.open("ops", "reports")
        await wait_for(pilot, lambda: isinstance(app.screen, GrantScreen) and app.screen.query("#gr-go"),
                       what="grant dialog again")
        app.screen.query_one("#gr-revoke").value = True
        await pilot.pause()
        assert "closes" in str(app.screen.query_one("#gr-preview").render())
        await pilot.click("#gr-go")
        await wait_for(pilot, lambda: (entry(root, "ops") or {}).get("allow") == [], what="revoke on disk")
        actions = [a.action for a in AuditLog(paths.audit_log(root)).entries()]
        assert actions[-2:] == ["grant", "revoke"]


@run_async
async def test_replay_verdict_from_a_receiver_that_keeps_no_journal(live_env):
    """billing does not trace: its verdict on the replay comes from its published counters."""
    root, key, paths = live_env
    n = speed_runtime.Node(str(root), key.runtime_key, "billing", allow=["ops"], trace=False,
                           heartbeat_seconds=1, lease_seconds=10)
    n.register("echo", DEMO_SERVICES["echo"])
    with n:
        app = app_for(live_env)
        async with app.run_test(size=SIZE) as pilot:
            await launch_ops(pilot, app, root)
            app.actions.call("ops", "billing", "echo", {"x": 1}, 10.0)
            await wait_for(pilot, lambda: any(r.type == "SPC_REQUEST" and r.node == "ops" and r.envelope
                                              for r in app.traces.ring), what="the journaled request")
            assert not (root / "speed_traces" / "billing.jsonl").exists()
            req = next(r for r in app.traces.ring if r.type == "SPC_REQUEST" and r.node == "ops" and r.envelope)
            app.controller.traces.replay(req)
            await wait_for(pilot, lambda: app.state.replays.replays and app.state.replays.replays[-1].outcome != "pending", timeout=20,
                           what="replay verdict")
            p = app.state.replays.replays[-1]
            assert p.outcome == "rejected", p.reason
            assert p.reason.split(" ")[0] in ("replayed_nonce", "replayed_sequence", "stale_timestamp")
            assert "published counters" in p.reason
            assert n.counters()["rejected"].get(p.reason.split(" ")[0]) == 1


@run_async
async def test_call_history_journal_and_replay(live_env):
    root, key, paths = live_env
    with billing_node(root, key):
        app = app_for(live_env)
        async with app.run_test(size=SIZE) as pilot:
            await launch_ops(pilot, app, root)
            app.controller.calls.open("ops", "billing", "calculateTax", {"amount": 200})
            await wait_for(pilot, lambda: isinstance(app.screen, CallScreen) and app.screen.query("#call-go"),
                           what="call dialog")
            await pilot.click("#call-go")
            await wait_for(pilot, lambda: CallHistory(paths.call_history(root)).entries(), timeout=60, what="call history")
            rec = CallHistory(paths.call_history(root)).entries()[-1]
            assert rec.status == "SUCCESS" and rec.result == {"tax": 36.0} and rec.latency_ms > 0
            assert "SUCCESS" in str(app.screen.query_one("#call-result").render())
            # (the call is audited just after its history record, on the action's worker)
            await wait_for(pilot, lambda: [e for e in AuditLog(paths.audit_log(root)).entries() if e.action == "call"],
                           what="the audit record")
            audit = AuditLog(paths.audit_log(root)).entries()[-1]
            assert audit.command.startswith("speed call billing calculateTax '{\"amount\":200}' --as ops")
            # the envelope is in ops's journal, and the console shows it
            await wait_for(pilot, lambda: any(r.get("type") == "SPC_REQUEST" and r.get("dir") == "out"
                                              for r in journal(root, "ops")), what="journaled request")
            await pilot.press("escape")
            await pilot.press("4")
            await wait_for(pilot, lambda: any(r.type == "SPC_REQUEST" and r.node == "ops" for r in app.traces.ring),
                           what="request in the traces view")
            # replay the request: billing must reject the exact same bytes
            req = next(r for r in app.traces.ring if r.type == "SPC_REQUEST" and r.node == "ops" and r.envelope)
            app.controller.traces.replay(req)
            await wait_for(pilot, lambda: app.state.replays.replays and app.state.replays.replays[-1].outcome != "pending", timeout=20,
                           what="replay verdict")
            assert app.state.replays.replays[-1].outcome == "rejected"
            assert app.state.replays.replays[-1].reason in ("replayed_nonce", "replayed_sequence", "stale_timestamp")
            assert any(r.get("outcome") == "rejected" and r.get("peer") == "ops" for r in journal(root, "billing"))
            assert AuditLog(paths.audit_log(root)).entries()[-1].action == "replay"
            st = app.state.replay_state_for("ops")  # live state of the console's own node, by sender name
            assert st["source"] == "journals + live node state" and st["last_accepted"].get("billing", 0) >= 1
            # the call history survives and re-runs with one key
            await pilot.press("7")
            await pilot.pause()
            app.view_widget("audit").query_one("#calls-table").focus()
            await pilot.press("r")
            await wait_for(pilot, lambda: len(CallHistory(paths.call_history(root)).entries()) == 2, timeout=60,
                           what="re-run call")
            assert CallHistory(paths.call_history(root)).entries()[-1].result == {"tax": 36.0}


@run_async
async def test_call_error_is_shown(live_env):
    root, key, paths = live_env
    with billing_node(root, key):
        app = app_for(live_env)
        async with app.run_test(size=SIZE) as pilot:
            await launch_ops(pilot, app, root)
            app.controller.calls.call("ops", "billing", "calculateTax", {"amount": "x"}, 5.0)
            await wait_for(pilot, lambda: CallHistory(paths.call_history(root)).entries(), timeout=60, what="call")
            rec = CallHistory(paths.call_history(root)).entries()[-1]
            assert rec.status == "ERROR" and rec.error_code == "INVALID_ARGUMENTS"


@run_async
async def test_send_with_confirmation(live_env):
    root, key, paths = live_env
    got = []
    with billing_node(root, key) as billing:
        billing.on_message(lambda m: got.append(m.data))
        app = app_for(live_env)
        async with app.run_test(size=SIZE) as pilot:
            await launch_ops(pilot, app, root)
            await pilot.press("m")
            await wait_for(pilot, lambda: isinstance(app.screen, SendScreen) and app.screen.query("#snd-go"),
                           what="send dialog")
            app.screen.query_one("#snd-to").value = "billing"
            app.screen.query_one("#snd-data").value = '{"hello": 1}'
            app.screen.query_one("#snd-confirm").value = True
            await pilot.pause()
            await pilot.click("#snd-go")
            await wait_for(pilot, lambda: got, timeout=60, what="message delivered")
            assert got == [{"hello": 1}]
            await wait_for(pilot, lambda: AuditLog(paths.audit_log(root)).entries()[-1].action == "send", what="audit")
            assert "confirmed" in AuditLog(paths.audit_log(root)).entries()[-1].result


@run_async
async def test_reap_stale_entry_with_confirmation(live_env):
    root, key, paths = live_env
    reg = root / "speed_registry"
    reg.mkdir(mode=0o700)
    stale = {"name": "ghost", "id": "77777777-7777-4777-8777-777777777777", "pid": 1, "host": "elsewhere",
             "status": "online", "startupTimestamp": time.time() - 500, "lastHeartbeat": time.time() - 300,
             "leaseSeconds": 30, "heartbeatSeconds": 5, "protocol": 1, "groups": [], "allow": [], "services": [],
             "runtime": "test"}
    (reg / "ghost.node").write_text(json.dumps(stale))
    os.chmod(reg / "ghost.node", 0o600)
    app = app_for(live_env)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "ghost" in app.registry.by_name(), what="ghost listed")
        await pilot.press("x")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirmation")
        assert (reg / "ghost.node").exists()  # nothing happens before the confirmation
        await pilot.press("y")
        await wait_for(pilot, lambda: not (reg / "ghost.node").exists(), what="entry reaped")
        await wait_for(pilot, lambda: "ghost" not in app.registry.by_name(), what="view updated")
        assert AuditLog(paths.audit_log(root)).entries()[-1].command.startswith("speed reap ghost")


@run_async
async def test_readonly_disables_actions(live_env):
    root, key, paths = live_env
    app = app_for(live_env, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n")
        await pilot.pause()
        assert not isinstance(app.screen, LaunchScreen)
        with pytest.raises(Exception):
            app.actions.launch(NodeSpec("x"))
    assert not paths.audit_log(root).exists()


@run_async
async def test_live_updates_without_refresh(live_env):
    """A node started outside the console appears and leaves on its own (watchdog + re-read)."""
    root, key, paths = live_env
    app = app_for(live_env)
    async with app.run_test(size=SIZE) as pilot:
        with billing_node(root, key):
            await wait_for(pilot, lambda: app.registry.by_name().get("billing") is not None, what="join")
            await wait_for(pilot, lambda: any(r.node == "billing" for r in app.traces.leases), what="lease journal")
        await wait_for(pilot, lambda: "billing" not in app.registry.by_name(), what="leave")


def test_failed_process_launch_reports_stderr(live_env):
    from speedtui.services.actions import ActionError, ActionService
    from speedtui.services.bridge import Bridge

    root, key, paths = live_env
    acts = ActionService(root, key, Bridge(), AuditLog(paths.audit_log(root)), CallHistory(paths.call_history(root)))
    with pytest.raises(ActionError) as err:
        acts.launch(NodeSpec("bad", services=("nope",), in_process=False))
    assert "did not start" in str(err.value) and "nope" in str(err.value)
    last = AuditLog(paths.audit_log(root)).entries()[-1]
    assert last.action == "launch" and not last.ok
    assert acts.own == {}


def test_a_call_that_ends_without_an_answer_code_is_audited_with_its_reason(live_env):
    """Quitting mid-call (the console's node closes under the call) audited the call as a bare
    `ERROR 2345.6ms`: the reason is in the row now."""
    import threading

    from speedtui.services.actions import ActionService
    from speedtui.services.bridge import Bridge

    root, key, paths = live_env
    with billing_node(root, key) as billing:
        billing.register("sleep", DEMO_SERVICES["sleep"])
        acts = ActionService(root, key, Bridge(), AuditLog(paths.audit_log(root)),
                             CallHistory(paths.call_history(root)))
        acts.launch(NodeSpec("ops", allow=("billing",)))
        calling = threading.Thread(target=lambda: acts.call("ops", "billing", "sleep", {"seconds": 5}, 30.0))
        calling.start()
        inbox = root / "billing" / "inbox"
        wait_until(lambda: billing.counters()["received"] >= 1 and not os.listdir(inbox), 30, "the call taken")
        acts.stop("ops")
        calling.join(30)
    row = [e for e in AuditLog(paths.audit_log(root)).entries() if e.action == "call"][-1]
    assert not row.ok and row.result.startswith("ERROR ") and "ms: " in row.result, row
    assert "closed" in row.result.split("ms: ", 1)[1], row


# d asks before stopping, and the demo's traffic driver is not offered
def test_demo_driver_is_not_stoppable(tmp_path):
    from speedtui.services.actions import ActionService, OwnNode
    from speedtui.services.bridge import Bridge
    from speedtui.models.commands import NodeSpec

    key_path = tmp_path / "k.key"
    rt.generate_key_file(key_path)
    acts = ActionService(tmp_path, rt.load_key(key_path), Bridge(), AuditLog(tmp_path / "a"), CallHistory(tmp_path / "c"))
    acts.own.add(OwnNode(spec=NodeSpec("ops"), stoppable=False))
    acts.own.add(OwnNode(spec=NodeSpec("mine")))
    assert acts.own.stoppable() == ["mine"]
