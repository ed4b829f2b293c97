"""Write SVG screenshots of every view and the main dialogs into screenshots/.

    python screenshots/make_screenshots.py            # deterministic fixture (stable output)
    python screenshots/make_screenshots.py --demo     # a live --demo environment

The fixture run is what the README shows: same input, same pictures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

os.environ.setdefault("TZ", "UTC")
time.tzset()
os.environ["SPEED_ANALYTICS_PREWARM"] = "0"   # the pictures' reports would pre-warm a Spark child

from speedtui.services import runtime as rt  # noqa: E402
from speedtui.ui.app import make_app  # noqa: E402
from speedtui.services.clock import FrozenClock  # noqa: E402
from speedtui.environments.fixture import FIXED_NOW, build, node_logs, sample_summary  # noqa: E402
from speedtui.models.history import AuditEntry, CallRecord
from speedtui.services.history import AuditLog, CallHistory  # noqa: E402
from speedtui.paths import Paths  # noqa: E402
from speedtui.ui.screens.calls import CallScreen  # noqa: E402
from speedtui.ui.screens.forms import GrantScreen, LaunchScreen  # noqa: E402
from speedtui.services.registry import LockState  # noqa: E402

SIZE = (120, 36)

SHOTS = [
    # file, keys, extra setup (coroutine taking pilot)
    ("leases.svg", ["down", "down"], None),
    ("fabrics.svg", ["2"], None),
    ("access.svg", ["3"], "explain"),
    ("traces.svg", ["4"], None),
    ("envelope.svg", ["4", "down", "down", "down", "enter"], None),
    ("follow-call.svg", ["4", "down", "down", "down", "down", "c"], None),
    ("replay.svg", ["5", "down", "down"], None),
    ("analytics.svg", ["6"], None),
    ("audit.svg", ["7"], None),
    ("security.svg", ["8"], None),
    ("durable.svg", ["9"], "durable"),
    ("chunked-message.svg", ["4"], "chunked"),
    ("help.svg", ["question_mark"], None),
    ("call-dialog.svg", [], "call"),
    ("grant-dialog.svg", [], "grant"),
    ("launch-dialog.svg", [], "launch"),
    ("call-without-node.svg", [], "call0"),
    ("jump.svg", ["colon", "b", "i", "l"], None),
    ("time-travel.svg", ["down"], "past"),
    ("lock-holder.svg", [], "lock"),
    ("logs.svg", ["L", "slash", *"amount", "enter", "n"], "logs"),
    ("search.svg", ["slash", *"finance", "enter", "n"], None),
    ("cells.svg", ["down", "down", "i"], None),
    ("theme-light.svg", ["4"], "light"),
    ("theme-high-contrast.svg", [], "high-contrast"),
]


def sample_logs():
    """What two nodes the console started wrote: a `speed node` process and an in-process node."""
    logs = node_logs(messages=4)
    logs.add("billing", "stderr", "speed: node billing: slow handler: 1 message waited 2.1 s")
    logs.add("ops", "health", "lease renewed late (0.4 s)")
    return logs


def seed_history(paths: Paths, root: Path) -> None:
    log = AuditLog(paths.audit_log(root))
    log.record(AuditEntry(FIXED_NOW - 60, "launch", "ops (in-process)",
                          "speed node --dir /dev/shm/speed --key speed.key --name ops --allow billing --trace"))
    log.record(AuditEntry(FIXED_NOW - 30, "call", "ops → billing.calculateTax",
                          "speed call billing calculateTax '{\"amount\":100}' --as ops --dir /dev/shm/speed "
                          "--key speed.key --timeout 5", result="SUCCESS 4.2ms"))
    log.record(AuditEntry(FIXED_NOW - 20, "replay", "gateway → billing MESSAGE seq 9",
                          "# re-deliver 154 sealed bytes", result="injected"))
    CallHistory(paths.call_history(root)).record(CallRecord(FIXED_NOW - 30, "ops", "billing", "calculateTax",
                                                      {"amount": 100}, 5.0, "SUCCESS", {"tax": 18.0}, latency_ms=4.2))
    reports = paths.env_dir(root) / "analytics"  # where the analytics view keeps the environment's last report
    reports.mkdir(parents=True, exist_ok=True)
    (reports / "summary.json").write_text(json.dumps(sample_summary()))


async def shoot(out: Path, name: str, keys: list[str], extra: str | None, demo: bool, work: Path) -> None:
    paths = Paths(work / f"cfg-{name}", work / f"data-{name}")
    theme = extra if extra in ("light", "high-contrast") else None
    if demo:
        from speedtui.environments.demo import DemoEnvironment

        env = DemoEnvironment(seed=7).start()
        seed_history(paths, env.root)
        app = make_app(env.root, rt.load_key(env.key_path), paths=paths, demo=env, theme=theme, steady=True,
                       dir_label="/dev/shm/speed (demo)")
    else:
        root, key_path = build(work / f"root-{name}")
        seed_history(paths, root)
        app = make_app(root, rt.load_key(key_path), paths=paths, clock=FrozenClock(FIXED_NOW), theme=theme,
                       steady=True, dir_label="/dev/shm/speed")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3 if not demo else 8.0)
        if extra == "explain":
            await pilot.press("3")
            app.view_widget("access").set_pair("reports", "gateway", "echo")
        elif extra == "past":  # half a minute back, the moment batch's lease was seen to expire
            app.action_time_travel(FIXED_NOW - 30.0)
            while getattr(app.screen, "moment", None) is None:
                await pilot.pause(0.05)
        elif extra == "lock":  # another process stopped while holding the registry lock
            app.bridge.push_lock(LockState(4242, 12.0))
            app.drain()
        elif extra == "logs":  # the logs of the nodes the console started
            app.actions.own.logs = sample_logs()
        for k in keys:
            await pilot.press(k)
        if extra == "durable":  # the outboxes are read by a worker
            while app.view_widget("durable").listed_at is None:
                await pilot.pause(0.05)
        elif extra == "chunked":  # the chunked message's sent row, expanded to its chunks
            from speedtui.environments.fixture import CHUNKED_ID

            table = app.view_widget("traces").query_one("#traces-table")
            rows = [table.rows.record(i) for i in range(len(table.rows))]
            table.cursor = next(i for i, r in enumerate(rows) if r.message_id == CHUNKED_ID and r.event == "sent")
            await pilot.press("enter", "down", "down", "down")
        g = app.state.graph()
        if extra == "call":
            app.push_screen(CallScreen(["gateway"], g, "/dev/shm/speed", "speed.key", "gateway", "billing",
                                       "calculateTax", {"amount": 250}))
        elif extra == "call0":  # a real environment: the console has no node of its own yet
            app.push_screen(CallScreen([], g, "/dev/shm/speed", "speed.key"))
        elif extra == "grant":
            app.push_screen(GrantScreen(["gateway"], g, "gateway", "reports"))
        elif extra == "launch":
            app.push_screen(LaunchScreen("/dev/shm/speed", "speed.key", g.names, ["analytics", "edge", "finance"]))
        await pilot.pause(0.3)
        app.save_screenshot(filename=name, path=str(out))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--demo", action="store_true", help="shoot a live demo environment instead of the fixture")
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name, keys, extra in SHOTS:
            asyncio.run(shoot(args.out, name, keys, extra, args.demo, Path(tmp)))
            print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
