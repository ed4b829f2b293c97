"""--demo: nodes in several fabrics, traffic in the journals, a killed lease, all cleaned up."""

import json
import os


from speedtui.environments.demo import DemoEnvironment, PROCESS_NODES

from .conftest import run_async, wait_for



def _names(root):
    return {p[:-5] for p in os.listdir(root / "speed_registry") if p.endswith(".node")}


def test_demo_environment_lifecycle():
    demo = DemoEnvironment(seed=3, period=0.3, kill_every=2.0)
    try:
        demo.start()
        root = demo.root
        assert (os.stat(demo.base).st_mode & 0o777) == 0o700 and (os.stat(root).st_mode & 0o777) == 0o700
        assert {n for n, *_ in PROCESS_NODES} | {"ops"} <= _names(root)
        groups = {json.loads((root / "speed_registry" / f"{n}.node").read_text())["name"]: 1 for n in _names(root)}
        assert groups
        from tests.helpers.wait import wait_until

        wait_until(lambda: demo.stats["calls"] >= 5, timeout=60, what="traffic")
        wait_until(lambda: any(json.loads(line).get("type") == "SPC_RESPONSE"
                               for line in (root / "speed_traces" / "ops.jsonl").read_text().splitlines()
                               if line.startswith("{")), timeout=60, what="journaled responses")
        wait_until(lambda: demo.stats["kills"] >= 1, timeout=60, what="a killed node")
        procs = list(demo.procs.values())
    finally:
        demo.stop()
    assert demo.base is None and not root.exists()
    assert all(p.poll() is not None for p in procs)


@run_async
async def test_demo_in_the_app(tmp_path):
    from speedtui.services import runtime as rt
    from speedtui.ui.app import make_app
    from speedtui.paths import Paths

    demo = DemoEnvironment(seed=4, period=0.3, kill_every=600)
    demo.start()
    root = demo.root
    app = make_app(demo.root, rt.load_key(demo.key_path), paths=Paths(tmp_path / "c", tmp_path / "d"), demo=demo)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: "ops" in app.actions.own.in_process(), what="driver adopted")
        await wait_for(pilot, lambda: len(app.registry.rows) >= 7, what="demo nodes listed")
        await wait_for(pilot, lambda: app.traces.total > 10, what="traffic traced")
    assert not root.exists()
