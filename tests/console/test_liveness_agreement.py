"""`speed registry` and the console never disagree about a node (issue 14 item 1, issue 13 item 9):
the same hand-written entries, judged by the CLI in its own process and by the running console
(the real app, this host's facts), get the same state and the same reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from speed_runtime.fsutil import BOOT_ID, HOSTNAME, REGISTRY_DIR, boottime

from speedtui.paths import Paths
from speedtui.services import runtime as rt
from speedtui.ui.app import make_app

from .conftest import SIZE, node_id, run_async, wait_for


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def entries(now: float, gone: int) -> dict[str, dict]:
    me = os.getpid()
    base = {"pid": me, "host": HOSTNAME, "status": "online", "startupTimestamp": now - 600, "lastHeartbeat": now,
            "leaseSeconds": 30, "heartbeatSeconds": 5}
    specs = {
        "online": {},
        "stale-lease": {"lastHeartbeat": now - 100, "host": "other-host"},
        "heartbeat-in-ms": {"lastHeartbeat": now * 1000, "host": "other-host"},
        "ms-and-huge-lease": {"lastHeartbeat": now * 1000, "leaseSeconds": 1e300},
        "huge-lease-old-beat": {"lastHeartbeat": now - 2 * 86400, "leaseSeconds": 1e300},
        "huge-lease-dead-pid": {"leaseSeconds": 1e300, "pid": gone},
        "dead-pid-with-boot-id": {"pid": gone, "bootId": BOOT_ID or "boot", "bootTimeHeartbeat": boottime()},
        "dead-pid-without-boot-id": {"pid": gone},
        "dead-pid-elsewhere": {"pid": gone, "host": "other-host"},
        "leaving": {"status": "leaving"},
    }
    return {name: {**base, **extra, "name": name, "id": node_id(name)} for name, extra in specs.items()}


@run_async
async def test_speed_registry_and_the_console_judge_every_entry_alike(tmp_path):
    root = tmp_path / "env"
    (root / REGISTRY_DIR).mkdir(parents=True, mode=0o700)
    os.chmod(root, 0o700)
    key_path = rt.generate_key_file(tmp_path / "speed.key")
    written = entries(time.time(), dead_pid())
    for name, data in written.items():
        (root / REGISTRY_DIR / f"{name}.node").write_text(json.dumps(data))
    (root / REGISTRY_DIR / "unreadable.node").write_text("{not json")
    out = subprocess.run([sys.executable, "-m", "speed_runtime", "registry", "--dir", str(root), "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    cli = {r["name"]: r for r in json.loads(out.stdout)}
    app = make_app(Path(root), rt.load_key(key_path), paths=Paths(tmp_path / "config", tmp_path / "data"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: len(app.registry.rows) == len(written) + 1, what="every entry listed")
        rows = app.registry.by_name()
        console_states = {n: ("unreadable" if r.error else r.status) for n, r in rows.items()}
        assert console_states == {n: r["state"] for n, r in cli.items()}
        assert {n: r.verdict.reason for n, r in rows.items() if r.verdict is not None} == \
            {n: r["reason"] for n, r in cli.items() if r["state"] != "unreadable"}
    # and what that means, so that agreeing on a wrong verdict would fail too
    assert {n for n, r in cli.items() if r["state"] == "online"} == {"online", "dead-pid-elsewhere"}
    assert cli["leaving"]["state"] == "leaving"
    assert cli["heartbeat-in-ms"]["state"] == cli["ms-and-huge-lease"]["state"] == "stale"
    assert cli["huge-lease-old-beat"]["state"] == "stale"  # a lease of 1e300 is clamped to a day
    assert all(cli[n]["state"] == "stale" for n in ("huge-lease-dead-pid", "dead-pid-with-boot-id",
                                                    "dead-pid-without-boot-id"))
