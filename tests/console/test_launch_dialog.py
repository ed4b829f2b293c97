"""The launch dialog (`n`) as `speed node`: every option it has, the line it makes kept current,
bad input one sentence beside its field in `speed node`'s own words (its parser and the runtime's
settings, not a second parser), and a separate process started with exactly the line shown
(checked on the new node's registry entry and on the process's own argv)."""

import json
import os
import shlex
import subprocess

from speed_runtime.control import generate_operator_key

from speedtui.models.commands import NodeSpec, node_command
from speedtui.services.launch import check_spec
from speedtui.services.operator import resolve_operator_key
from speedtui.services.processes import speed_command
from speedtui.ui.app import make_app
from speedtui.ui.screens.forms import LaunchScreen

from .conftest import SIZE, fixture_app_at, run_async, wait_for


def entry(root, name):
    try:
        return json.loads((root / "speed_registry" / f"{name}.node").read_text())
    except (OSError, ValueError):
        return None


async def open_launch(pilot, app):
    await pilot.press("n")
    await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen) and app.screen.query("#ln-go"),
                   what="the launch dialog")
    return app.screen


def shown_line(screen) -> str:
    text = str(screen.query_one("#ln-preview").render())
    return text.split(": ", 1)[1].split("\n")[0]


def error(screen, field) -> str:
    w = screen.query_one(f"#ln-err-{field}")
    return str(w.render()) if w.display else ""


@run_async
async def test_a_process_is_started_with_exactly_the_line_shown(live_env, tmp_path):
    root, key, paths = live_env
    op = generate_operator_key(tmp_path / "operator.key")
    app = make_app(root, key, paths=paths, operator=resolve_operator_key(tmp_path / "operator.key"))
    async with app.run_test(size=SIZE) as pilot:
        scr = await open_launch(pilot, app)
        assert scr.query_one("#ln-operator").value  # the console's operator key is offered, ticked
        scr.query_one("#ln-name").value = "billing"
        scr.query_one("#ln-proc").value = True
        scr.query_one("#ln-groups").value = "finance, edge"
        scr.query_one("#ln-feat-quota").value = True
        scr.query_one("#ln-feat-chunks").value = True
        scr.query_one("#ln-quota").value = "rate=123 pending=7"
        scr.query_one("#ln-threat").value = "threshold=20"
        scr.query_one("#ln-durable").value = True
        scr.query_one("#ln-lease").value = "12"
        scr.query_one("#ln-heartbeat").value = "2"
        await pilot.pause()
        line = shown_line(scr)
        assert all(not error(scr, f) for f in LaunchScreen.FIELDS)
        for part in ("--name billing", "--group finance --group edge", "--feature chunks --feature quota",
                     "--quota rate=123 --quota pending=7", "--threat threshold=20", "--durable", "--lease 12",
                     "--heartbeat 2", f"--operator {op.public_text}"):
            assert part in line, part
        await pilot.click("#ln-go")
        await wait_for(pilot, lambda: entry(root, "billing") is not None and "billing" in app.actions.own,
                       timeout=90, what="billing's registry entry")
        e = entry(root, "billing")
        own = app.actions.own["billing"]
        # what it advertises is what the line asked for
        assert e["pid"] == own.proc.pid != os.getpid()
        assert e["groups"] == ["finance", "edge"] and e["leaseSeconds"] == 12 and e["heartbeatSeconds"] == 2
        assert {"quota", "chunks", "durable", "control"} <= set(e["features"])
        assert e["quota"]["rate"] == 123 and e["quota"]["pending"] == 7
        own_key = app.actions.own_operator_public()
        assert f"--operator {own_key}" in line  # the console's own key was in the line shown, too
        assert op.fingerprint in e["operators"] and len(e["operators"]) == 2
        # the process runs exactly the line shown, and the audit log records that line
        with open(f"/proc/{own.proc.pid}/cmdline", "rb") as f:
            argv = f.read().rstrip(b"\0").decode().split("\0")
        assert argv == [*speed_command(), *shlex.split(line)[1:]]
        # (the launch's worker records it just after it adds the node: wait for the record, not its absence)
        await wait_for(pilot, lambda: [e for e in app.audit.entries() if e.action == "launch"], what="the audit record")
        assert app.audit.entries()[-1].command == line


@run_async
async def test_bad_input_is_one_sentence_beside_its_field(tmp_path):
    root, paths, app = fixture_app_at(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        scr = await open_launch(pilot, app)
        assert not error(scr, "name")  # an empty name is said only once Launch is pressed
        scr.query_one("#ln-lease").value = "soon"
        scr.query_one("#ln-quota").value = "rate=5"
        scr.query_one("#ln-threat").value = "threshold"
        scr.query_one("#ln-allow").value = "ok, -bad"
        await pilot.pause()
        assert error(scr, "lease") == "'soon' is not a number of seconds"
        assert error(scr, "threat").startswith("'threshold' is not KEY=VALUE")
        assert error(scr, "allow").startswith("invalid node name '-bad': a name must match")
        scr.query_one("#ln-lease").value = "10"
        scr.query_one("#ln-heartbeat").value = "10"
        scr.query_one("#ln-threat").value = ""
        scr.query_one("#ln-allow").value = ""
        await pilot.pause()
        assert error(scr, "heartbeat") == "the heartbeat interval must be shorter than the lease"
        assert error(scr, "quota") == "--quota settings belong to the quota extension: add --feature quota"
        await pilot.click("#ln-go")
        await pilot.pause()
        assert isinstance(app.screen, LaunchScreen)  # nothing launched, nothing lost
        assert error(scr, "name") == "a node needs a name" and scr.query_one("#ln-quota").value == "rate=5"
        scr.query_one("#ln-feat-quota").value = True
        scr.query_one("#ln-heartbeat").value = "2"
        scr.query_one("#ln-quota").value = "rate=5 nonsense=1"
        await pilot.pause()
        assert not error(scr, "heartbeat") and error(scr, "quota").startswith("unknown quota setting 'nonsense'")


def test_the_sentences_are_the_ones_speed_node_prints(live_env):
    """One implementation: the dialog's sentence for a line is what `speed node` says of it."""
    root, key, paths = live_env
    for spec, field in ((NodeSpec("n", quota=("rate=5",)), "quota"),
                        (NodeSpec("n", lease_seconds=5, heartbeat_seconds=6), "heartbeat"),
                        (NodeSpec("n", features=("quota",), threat=("release=150",)), "threat")):
        said = check_spec(spec, root, str(key.path))[field]
        cmd = node_command(root, key.path, spec).exec_argv(speed_command())
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert run.returncode == 2 and run.stderr.strip() == f"speed: {said}"


@run_async
async def test_durable_on_tmpfs_is_said_beside_durable(tmp_path):
    root, paths, app = fixture_app_at(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        app.push_screen(LaunchScreen("/dev/shm", "/k", [], []))
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen) and app.screen.query("#ln-go"),
                       what="the dialog on tmpfs")
        scr = app.screen
        scr.query_one("#ln-name").value = "keeper"
        scr.query_one("#ln-tmpfs").value = True
        await pilot.pause()
        assert error(scr, "durable") == "--durable-on-tmpfs goes with --durable"
        scr.query_one("#ln-durable").value = True
        scr.query_one("#ln-tmpfs").value = False
        await pilot.pause()
        assert "is on tmpfs (memory)" in error(scr, "durable") and "--durable-on-tmpfs" in error(scr, "durable")
        scr.query_one("#ln-tmpfs").value = True
        await pilot.pause()
        assert not error(scr, "durable") and "--durable --durable-on-tmpfs" in shown_line(scr)


@run_async
async def test_what_only_a_process_has_is_said_in_this_console(tmp_path):
    root, paths, app = fixture_app_at(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        scr = await open_launch(pilot, app)
        note = scr.query_one("#ln-only-process")
        assert not scr.query("#ln-operator")  # no operator key loaded: nothing to trust is offered
        scr.query_one("#ln-name").value = "x"
        scr.query_one("#ln-echo").value = True
        await pilot.pause()
        assert note.display and "only a separate process" in str(note.render())
        assert "--echo-messages" not in shown_line(scr)
        scr.query_one("#ln-proc").value = True
        await pilot.pause()
        assert not note.display and "--echo-messages" in shown_line(scr)
        # at 80x24 the form scrolls and the buttons stay on screen
        button = scr.query_one("#ln-go")
        assert 0 <= button.region.y < 24 and scr.get_widget_at(button.region.x + 1, button.region.y)[0] is button


@run_async
async def test_an_in_process_node_gets_the_options_the_line_gives(live_env):
    root, key, paths = live_env
    app = make_app(root, key, paths=paths)
    async with app.run_test(size=SIZE) as pilot:
        scr = await open_launch(pilot, app)
        scr.query_one("#ln-name").value = "inside"
        scr.query_one("#ln-feat-quota").value = True
        scr.query_one("#ln-quota").value = "rate=77"
        scr.query_one("#ln-lease").value = "9"
        await pilot.pause()
        await pilot.click("#ln-go")
        await wait_for(pilot, lambda: entry(root, "inside") is not None, timeout=60, what="inside's entry")
        e = entry(root, "inside")
        assert e["pid"] == os.getpid() and e["quota"]["rate"] == 77 and e["leaseSeconds"] == 9
        assert "quota" in e["features"]
        app.actions.stop("inside")

