"""Idle nodes: what N nodes that send nothing cost the host, each renewing its lease every
`heartbeat_seconds` (5 s) and watching the registry, where every other node's heartbeat lands.

- `--mode process` (default): N nodes in one Python process (the console's own nodes, a test
  harness, an application hosting many names): the process's CPU share of one core over
  `--seconds`, how long the last node took to start, and how long closing them all took.
- `--mode processes`: N `speed node` processes; the CPU share of one core they take together.

    python benchmarks/idle_nodes.py --nodes 100
    python benchmarks/idle_nodes.py --nodes 100 --checkout /path/to/an/older/checkout
    python benchmarks/idle_nodes.py --mode processes --nodes 60

`--checkout` measures another checkout's runtime in the same run, alternately (A B B A over
`--repeat` pairs), and the ratio against it is printed. Prints one JSON object; medians.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from benchmarks.scratch import scratch_environment  # noqa: E402

IN_ONE_PROCESS = r'''
import json, os, resource, sys, time
from speed_runtime import Node
root, key, count, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
nodes, last_start = [], 0.0
for i in range(count):
    began = time.monotonic()
    nodes.append(Node(root, key, f"n{i}", allow=[]).start())
    last_start = time.monotonic() - began
time.sleep(6.0)  # every node has renewed once: the steady state
before, since = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
time.sleep(seconds)
after, until = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
began = time.monotonic()
for node in nodes:
    node.close()
print(json.dumps({"cpuShare": cpu / (until - since), "lastStartMs": last_start * 1000,
                  "closeAllS": time.monotonic() - began,
                  "switchesPerS": (after.ru_nvcsw - before.ru_nvcsw) / (until - since)}), flush=True)
'''


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _env(checkout: str) -> dict:
    return {**os.environ, "PYTHONPATH": checkout}


def one_run(checkout: str, mode: str, nodes: int, seconds: float) -> dict:
    work, root, key = scratch_environment("speed-bench-idle-", checkout)
    procs: list[subprocess.Popen] = []
    try:
        if mode == "process":
            out = subprocess.run([sys.executable, "-c", IN_ONE_PROCESS, root, key, str(nodes), str(seconds)],
                                 check=True, capture_output=True, text=True, cwd=checkout, env=_env(checkout))
            return json.loads(out.stdout.strip().splitlines()[-1])
        for i in range(nodes):
            procs.append(subprocess.Popen([sys.executable, "-m", "speed_runtime", "node", "--dir", root, "--key", key,
                                           "--name", f"n{i}"], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=checkout,
                                          env=_env(checkout)))
        registry = os.path.join(root, "speed_registry")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if os.path.isdir(registry) and sum(n.endswith(".node") for n in os.listdir(registry)) >= nodes:
                break
            time.sleep(0.2)
        else:
            raise RuntimeError(f"{nodes} nodes did not all register within 120 s")
        time.sleep(6.0)
        before, since = sum(_cpu_ticks(p.pid) for p in procs), time.monotonic()
        time.sleep(seconds)
        after, until = sum(_cpu_ticks(p.pid) for p in procs), time.monotonic()
        return {"cpuShare": (after - before) / os.sysconf("SC_CLK_TCK") / (until - since)}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--mode", choices=("process", "processes"), default="process")
    p.add_argument("--seconds", type=float, default=10.0, help="the idle window measured (default 10)")
    p.add_argument("--repeat", type=int, default=2, help="runs of each checkout (default 2)")
    p.add_argument("--checkout", help="another checkout to measure alternately, for a before/after ratio")
    args = p.parse_args(argv)
    order = ["this"] if not args.checkout else ["this", "other"]
    dirs = {"this": REPO, "other": os.path.abspath(args.checkout) if args.checkout else None}
    runs: dict[str, list[dict]] = {k: [] for k in order}
    for r in range(args.repeat):
        for which in (order if r % 2 == 0 else order[::-1]):  # A B, then B A
            runs[which].append(one_run(dirs[which], args.mode, args.nodes, args.seconds))
    result: dict = {"date": time.strftime("%Y-%m-%d %H:%M"), "mode": args.mode, "nodes": args.nodes,
                    "seconds": args.seconds, "load": os.getloadavg()}
    for which in order:
        result[which] = {key: round(statistics.median(run[key] for run in runs[which]), 3) for key in runs[which][0]}
        result[which]["runs"] = [round(run["cpuShare"], 3) for run in runs[which]]
    if args.checkout:
        result["cpuShareThisVsOther"] = round(result["this"]["cpuShare"] / result["other"]["cpuShare"], 3)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
