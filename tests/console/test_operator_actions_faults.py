"""Operator actions when the environment misbehaves (red team findings), on real `speed node
--operator` processes and the real console:

- quitting with a grant on its way withdraws the request from the target's control/ (it was
  applied after the console had gone, while the audit log said it failed);
- a revoke after a call that fails says which grant was left in place and how to remove it (it
  was swallowed: the temporary grant stayed for good without a word);
- a requester node that lost its lease (ROOT removed and recreated) is replaced (every operator
  request failed until the console restarted)."""

import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from speed_runtime.control import Operator, generate_operator_key
from speedtui.paths import Paths
from speedtui.services import runtime as rt
from speedtui.services.history import AuditLog
from speedtui.services.operator import resolve_operator_key
from speedtui.services.processes import console_node_name
from speedtui.ui.app import make_app
from speedtui.ui.screens.forms import GrantScreen

from ..helpers.processes import REPO
from .conftest import SIZE, run_async, wait_for


def allow_of(root, name):
    import json

    try:
        return json.loads((Path(root) / "speed_registry" / f"{name}.node").read_text()).get("allow", [])
    except (OSError, ValueError):
        return None


def requests_in_control(root, name):
    """The request files waiting in ``name``'s control/ directory (not the runtime's dot files)."""
    folder = Path(root) / name / "control"
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) if folder.is_dir() else []


def operator_app(root, key_path, tmp_path, op_path):
    paths = Paths(tmp_path / "config", tmp_path / "data")
    return paths, make_app(Path(root), rt.load_key(key_path), paths=paths, operator=resolve_operator_key(op_path))


def audit(paths, root):
    return AuditLog(paths.audit_log(Path(root))).entries()


async def grant_by_dialog(pilot, app, node, peer):
    app.controller.grants.open(node, peer)
    await wait_for(pilot, lambda: isinstance(app.screen, GrantScreen) and app.screen.query("#gr-go"),
                   what="the grant dialog")
    await pilot.click("#gr-go")


def status_of(root, key_path, op_path, name):
    """``name``'s own account, asked by a control request: once it answers, it has read its
    control/ directory since it was resumed (a request left there would have been applied)."""
    with Operator(root, key_path, op_path) as op:
        return op.status(name)


@run_async
async def test_quitting_with_a_grant_on_its_way_withdraws_it_and_the_audit_says_so(procs, root, key_path, tmp_path):
    op_path = tmp_path / "operator.key"
    op = generate_operator_key(op_path)
    billing = procs.start("billing", trace=True, lease=120, extra=["--operator", op.public_text])
    paths, app = operator_app(root, key_path, tmp_path, op_path)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: "billing" in app.registry.by_name(), what="billing")
            billing.signal(signal.SIGSTOP)  # it reads its control/ no more: the grant stays on its way
            await grant_by_dialog(pilot, app, "billing", "gateway")
            await wait_for(pilot, lambda: requests_in_control(root, "billing"), what="the request in billing's control/")
            app.exit()
        app.shutdown()  # (run_test's unmount did already: once)
        assert requests_in_control(root, "billing") == []  # withdrawn: nothing left to apply
        grants = [e for e in audit(paths, root) if e.action == "grant"]
        assert len(grants) == 1 and not grants[0].ok, grants
        assert "closed before billing answered" in grants[0].result and "withdrawn and not applied" in grants[0].result, grants[0]
        assert "speed allow billing gateway" in grants[0].command
    finally:
        billing.signal(signal.SIGCONT)
    assert status_of(root, key_path, op_path, "billing")["allow"] == []  # it answered: nothing was applied
    assert allow_of(root, "billing") == []


@run_async
async def test_a_revoke_after_a_call_that_fails_names_the_grant_left_and_how_to_remove_it(procs, root, key_path,
                                                                                            tmp_path):
    op_path = tmp_path / "operator.key"
    op = generate_operator_key(op_path)
    me = console_node_name()
    billing = procs.start("billing", services=["sleep"], trace=True, lease=120, extra=["--operator", op.public_text])
    paths, app = operator_app(root, key_path, tmp_path, op_path)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: "billing" in app.registry.by_name(), what="billing")
            app.actions.start_console_node()
            # the call sleeps at billing: it stops answering once the grant is applied (before the revoke)
            app.controller.calls.call(me, "billing", "sleep", {"seconds": 5}, 2.0, grant_first=True, revoke_after=True)
            await wait_for(pilot, lambda: allow_of(root, "billing") == [me], what="the grant before the call")
            billing.signal(signal.SIGSTOP)

            def warnings():
                return [n for n in app._notifications if n.severity == "warning" and "still allows" in n.message]

            await wait_for(pilot, warnings, timeout=60, what="the warning about the grant left in place")
            text = warnings()[0].message
            assert f"billing still allows {me}" in text and "revoke" in text
            line = text.split("run `", 1)[1].rstrip("`")
            assert line.startswith(f"speed revoke billing {me} ") and f"--operator-key {op_path}" in line
            entries = audit(paths, root)
            left = [e for e in entries if e.action == "revoke" and "left in place" in e.detail]
            assert len(left) == 1 and not left[0].ok and left[0].command == line, entries
            assert [e for e in entries if e.action == "revoke" and e.detail.startswith("billing ")] == left  # one row
            assert f"billing still allows {me}" in left[0].result
            # the call itself: its TIMEOUT, as before
            await wait_for(pilot, lambda: any(e.action == "call" for e in audit(paths, root)), what="the call")
    finally:
        billing.signal(signal.SIGCONT)
    assert status_of(root, key_path, op_path, "billing")["allow"] == [me]  # the grant was indeed left
    argv = shlex.split(line)
    done = subprocess.run([sys.executable, "-m", "speed_runtime", *argv[1:]], capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr  # the line said removes it
    assert allow_of(root, "billing") == []


@run_async
async def test_a_requester_that_lost_its_lease_is_replaced_on_the_next_request(procs, root, key_path, tmp_path):
    op_path = tmp_path / "operator.key"
    op = generate_operator_key(op_path)
    billing = procs.start("billing", trace=True, extra=["--operator", op.public_text])
    paths, app = operator_app(root, key_path, tmp_path, op_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "billing" in app.registry.by_name(), what="billing")
        await grant_by_dialog(pilot, app, "billing", "gateway")
        await wait_for(pilot, lambda: allow_of(root, "billing") == ["gateway"], what="the first grant")
        requesters = [p.name for p in (Path(root) / "speed_registry").glob("speed-cli-*.node")]
        assert len(requesters) == 1
        # the environment removed and recreated, its target restarted: the requester's lease is gone
        billing.stop()
        shutil.rmtree(root)
        billing = procs.start("billing", trace=True, extra=["--operator", op.public_text])
        assert allow_of(root, "billing") == []
        await grant_by_dialog(pilot, app, "billing", "reports")
        await wait_for(pilot, lambda: len([e for e in audit(paths, root) if e.action == "grant"]) == 2, timeout=60,
                       what="the second grant's outcome")
        second = [e for e in audit(paths, root) if e.action == "grant"][-1]
        assert second.ok, second
        assert allow_of(root, "billing") == ["reports"]
        now = [p.name for p in (Path(root) / "speed_registry").glob("speed-cli-*.node")]
        assert len(now) == 1 and now != requesters  # a new requester node


def test_a_request_made_after_the_console_closed_its_requester_leaves_no_entry(procs, root, key_path, tmp_path):
    """Quitting during a call with "revoke afterwards": the call's worker ends after the console
    closed its requester, and the revoke it makes on the way out started another requester that
    nothing closed: its entry stayed in the registry, stale, after every such quit. The revoke is
    still made, by a requester closed as soon as it is done."""
    from speedtui.services.operator import ControlRequests, OperatorChoice

    op_path = tmp_path / "operator.key"
    op = generate_operator_key(op_path)
    procs.start("billing", trace=True, extra=["--operator", op.public_text])
    paths = Paths(tmp_path / "config", tmp_path / "data")
    requests = ControlRequests(Path(root), rt.load_key(key_path), OperatorChoice(key=op, path=op_path),
                               AuditLog(paths.audit_log(Path(root))), str)
    assert requests.request("allow", "billing", "gateway")["allow"] == ["gateway"]
    requesters = lambda: sorted(p.name for p in (Path(root) / "speed_registry").glob("speed-cli-*.node"))  # noqa: E731
    assert len(requesters()) == 1
    requests.close()
    assert requesters() == []
    assert requests.request("revoke", "billing", "gateway")["allow"] == []    # on the way out
    assert requesters() == [] and allow_of(root, "billing") == []
