"""The registry at scale: with N entries (live-looking, never changing), how much CPU does an idle
`speed node` use, and how long does a whole `speed call` process take?

    python benchmarks/registry_scale.py --entries 10000
    python benchmarks/registry_scale.py --entries 10000 --checkout /path/to/an/older/checkout

`--checkout` runs another checkout's `speed` (PYTHONPATH) on the same data, for before/after
figures in one run. Prints one JSON object; medians over --repeat.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _speed(checkout: str) -> tuple[list[str], dict]:
    return [sys.executable, "-m", "speed_runtime"], {**os.environ, "PYTHONPATH": checkout}


def _fill(root: str, count: int) -> None:
    """`count` entries written as any runtime would, live-looking (this process's pid, this host)."""
    from speed_runtime.core.entry import RegistryEntry
    from speed_runtime.fsutil import HOSTNAME, prepare_root
    from speed_runtime.registry import Registry

    registry = Registry(prepare_root(root))
    with registry.locked():
        for i in range(count):
            registry._write(RegistryEntry(name=f"n{i:05d}", id=str(uuid.uuid4()), last_heartbeat=time.time(),
                                          pid=os.getpid(), host=HOSTNAME, lease_seconds=86_400.0))


def measure(checkout: str, entries: int, seconds: float, repeat: int) -> dict:
    from speed_runtime import generate_key_file

    work = tempfile.mkdtemp(prefix="speed-scale-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    procs: list[subprocess.Popen] = []
    try:
        root, key = os.path.join(work, "env"), os.path.join(work, "speed.key")
        generate_key_file(key)
        _fill(root, entries)
        cmd, env = _speed(checkout)
        common = ["--dir", root, "--key", key]
        for name, extra in (("idle", []), ("target", ["--service", "echo", "--allow", "caller"])):
            proc = subprocess.Popen(cmd + ["node", *common, "--name", name, *extra], stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True, env=env, cwd=work)
            procs.append(proc)
            if not proc.stdout.readline().startswith("ready"):
                raise RuntimeError(f"{name} did not start")
        idle = procs[0]
        time.sleep(2.0)  # past start-up (the first scan reads every entry once)
        cpu0, t0 = _cpu_seconds(idle.pid), time.monotonic()
        time.sleep(seconds)
        idle_share = (_cpu_seconds(idle.pid) - cpu0) / (time.monotonic() - t0)
        calls = []
        for _ in range(repeat):
            t = time.monotonic()
            done = subprocess.run(cmd + ["call", *common, "--as", "caller", "target", "echo", "{}"],
                                  capture_output=True, text=True, env=env, cwd=work, timeout=600)
            calls.append(time.monotonic() - t)
            if done.returncode != 0:
                raise RuntimeError(done.stderr)
        return {"checkout": checkout, "entries": entries, "idleCpuPercentOfOneCore": round(100 * idle_share, 1),
                "callSecondsMedian": round(statistics.median(calls), 3), "callSeconds": [round(c, 3) for c in calls]}
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=10.0, help="idle CPU is measured over this long")
    parser.add_argument("--repeat", type=int, default=5, help="`speed call` runs")
    parser.add_argument("--checkout", default=REPO, help="the checkout whose `speed` runs (default: this one)")
    args = parser.parse_args(argv)
    result = measure(os.path.abspath(args.checkout), args.entries, args.seconds, args.repeat)
    result["loadAverage"] = os.getloadavg()[0]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
