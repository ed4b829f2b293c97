"""The console shows a node written in C like any other node: live (a real C process, Pilot) and
as a snapshot (the entry the C node really wrote, with its volatile fields pinned)."""
import json
import os
from pathlib import Path

from speedtui.services import runtime as rt
from speedtui.ui.app import make_app
from speedtui.services.clock import FrozenClock
from speedtui.environments.fixture import FIXED_NOW, build
from speedtui.paths import Paths

from ..console.conftest import SIZE, run_async, wait_for
from .harness import c_node_bin, env, procs  # noqa: F401  (fixtures)


@run_async
async def test_console_lists_a_live_c_node_with_its_lease(procs, env, tmp_path):  # noqa: F811
    procs.c_node("cnode", allow=["py"], services=["echo", "calculateTax"], lease=12, heartbeat=0.5)
    app = make_app(env.root, rt.load_key(env.key_path), paths=Paths(tmp_path / "config", tmp_path / "data"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "cnode" in app.registry.by_name(), what="the C node's row")
        row = app.registry.by_name()["cnode"]
        assert row.status == "online" and row.runtime == "speed_c_node-c/0.1"
        assert set(row.services) == {"echo", "calculateTax"} and row.allow == ("py",)
        assert row.pid_alive is True and 0 < row.remaining <= 12


def c_entry_as_written(procs, env):  # noqa: F811
    """Run the real C node once and take the registry entry it wrote."""
    node = procs.c_node("cnode", allow=["gateway"], services=["echo", "calculateTax"], lease=30, heartbeat=5)
    entry = json.loads(Path(env.root, "speed_registry", "cnode.node").read_text())
    node.stop()
    return entry


def test_c_node_snapshot(snap_compare, procs, env, tmp_path):  # noqa: F811
    entry = c_entry_as_written(procs, env)
    assert entry["runtime"] == "speed_c_node-c/0.1" and entry["protocol"] == 1
    root, key_path = build(tmp_path / "root")
    pinned = {"id": "77777777-7777-4777-8777-777777777777", "pid": 4242, "host": "fixture-host",
              "startupTimestamp": FIXED_NOW - 600, "lastHeartbeat": FIXED_NOW - 3}
    entry.update(pinned)
    entry.pop("bootId", None)
    entry.pop("bootTimeHeartbeat", None)
    path = root / "speed_registry" / "cnode.node"
    path.write_text(json.dumps(entry, indent=1))
    os.chmod(path, 0o600)
    app = make_app(root, rt.load_key(key_path), clock=FrozenClock(FIXED_NOW), steady=True,
                   paths=Paths(tmp_path / "config", tmp_path / "data"), dir_label="/fixture/speed")
    assert snap_compare(app, terminal_size=SIZE)
