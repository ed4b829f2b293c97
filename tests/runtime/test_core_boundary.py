"""The pure core is pure (docs/ARCHITECTURE.md): importing every module of it (found by walking the
package), and running every judgement of the contract through it, loads no threading, watchdog or
UI module and reads no clock, and the judgements touch no path. Checked in a fresh interpreter,
with the clocks replaced by traps before the import and an audit hook on every file-system event
after it."""
from __future__ import annotations

import json
import subprocess
import sys

PROBE = r'''
import json, sys, time

def trap(*_a, **_k):
    raise AssertionError("the core read a clock")
for name in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "clock_gettime", "sleep"):
    setattr(time, name, trap)

import importlib, pkgutil
import speed_runtime.core as core
every = [info.name for info in pkgutil.walk_packages(core.__path__, "speed_runtime.core.")]
for name in every:  # every module of the core, found by walking it (a new module is checked unlisted)
    importlib.import_module(name)
from speed_runtime.core import (access, control, entry, envelope, keys, liveness, payloads, receiving, records, replay,
                                services, visible)

# importing reads the modules' files; from here on, nothing may touch the file system
touched = []
def audit(event, args):
    if event.split(".")[0] in ("open", "os", "shutil", "glob", "fcntl", "socket", "subprocess"):
        touched.append(event)
sys.addaudithook(audit)

key = keys.Key(bytes(range(32)))
me = receiving.Identity("b", b"\x02" * 16)
peer = entry.RegistryEntry(name="a", id="01010101-0101-4101-8101-010101010101", last_heartbeat=1000.0)
body = payloads.encode_payload(payloads.message("a", "b", {"x": 1}))
data = envelope.seal(envelope.Header(1, 1, 1_000_000, len(body), peer.id_bytes, me.id_bytes), body, key,
                     b"\x07" * 12)
guard = replay.ReplayGuard()
assert receiving.judge_envelope("a", data, key, me, peer, guard, 1_000_000, 4096).accepted
assert receiving.judge_name("a.01010101.00000000000000000001.07070707.env", {"a"})[1] is None
assert receiving.judge_file(receiving.FileFacts(0o100600, 1, 0, len(data), 0.0), 1.0, 4096, {0}) is None
facts = liveness.HostFacts("h", "B", 10.0, lambda pid: False)
assert liveness.judge(peer, 1010.0, facts).state == "online"
assert access.explain("a", ["b"], "b", ["a"], ["echo"], "echo").ok
line = records.encode_line(records.LeaseTrace(1.0, "a", "b", "observed_join"))
assert records.parse_line(line.encode()) is not None
services.precheck(services.as_registered("echo", lambda a: a, None, None), "echo", "a", {})
op = control.OperatorKey(bytes(32))
text = control.request_text(target="b", instance=str(__import__("uuid").UUID(bytes=me.id_bytes)), request_id="r",
                            requester="a", command="status", arguments={}, issued_ms=1, expires_ms=2)
signed = json.loads(control.request_payload(op, "a", "b", "r", text))
assert control.judge_control(signed, me, {op.fingerprint: op.public_key}, control.RequestGuard(), 1).reason is None
assert visible.visible("\x1b]2;x\x07") == "\\x1b]2;x\\x07"
print(json.dumps({
    "modules": sorted(m for m in sys.modules if m.split(".")[0] in
                      ("threading", "_thread", "watchdog", "textual", "rich", "pyspark", "logging", "speedtui",
                       "concurrent", "asyncio", "selectors", "subprocess", "socket")),
    "runtime_io": sorted(m for m in sys.modules if m.startswith("speed_runtime.") and
                         not m.startswith("speed_runtime.core")),
    "touched": touched,
    "every": every,
}))
'''


def test_the_core_loads_no_threads_no_ui_and_touches_no_clock_or_path():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    # `_thread` is built into every interpreter; `threading` (a module that starts threads) is not loaded
    assert [m for m in report["modules"] if m != "_thread"] == [], report["modules"]
    assert report["runtime_io"] == [], report["runtime_io"]
    assert report["touched"] == [], report["touched"]
    assert {"speed_runtime.core.inbound", "speed_runtime.core.envelope"} <= set(report["every"])  # the walk found them
