"""The cost of a control request (the `control` extension) against the floor and a plain SPC call,
measured in the same run, in interleaved rounds (shuffled order), medians and p99 in µs.

    python benchmarks/bench_control.py            # 8 rounds of 200 requests per variant
    python benchmarks/bench_control.py --quick    # seconds: proves the benchmark works

Variants, each one round trip between this process and a `speed node` process:
- floor: seal, write tmp/, rename into the other end's inbox, inotify, open, echo back
  (benchmarks/run.py's floor, 64-byte payload);
- SPC call: `Node.call(target, "echo", {})`;
- control status: `Operator.status(target)` — sign, seal, deliver into control/, verify, answer;
- control allow/revoke: `Operator.allow` then `Operator.revoke` alternately, each also publishing
  the target's registry entry (under the registry lock) before it answers.

Then a flood: FLOOD junk files (50 bytes, named like envelopes) land in the target's control/
at once; measured: the time until all are judged (removed and journaled), the round trip of SPC
calls made meanwhile (the inbox is not starved: at most 32 control files per wake-up), and the
target's resident memory (VmRSS) before and after.

Prints one JSON object: the load average before and after, per variant the median, p99 and the
ratios of the medians to the floor and to the SPC call, and the flood's figures.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.run import Env, percentile, rtt_floor  # noqa: E402


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def measure_flood(root: str, pid: int, count: int, caller) -> dict:
    directory, staging = os.path.join(root, "target", "control"), os.path.join(root, "target", "tmp")
    before = rss_kb(pid)
    names = [f"junk.0badcafe.{i:020d}.01020304.env" for i in range(count)]
    for name in names:  # written whole in tmp/, then moved in, as writers deliver
        with open(os.path.join(staging, name), "wb") as f:
            f.write(b"\x01" * 50)
    started = time.perf_counter()
    for name in names:
        os.rename(os.path.join(staging, name), os.path.join(directory, name))
    calls = []
    while os.listdir(directory):
        t = time.perf_counter()
        caller.call("target", "echo", {})
        calls.append((time.perf_counter() - t) * 1e6)
    judged = time.perf_counter() - started
    return {"files": count, "judged_s": round(judged, 2), "files_per_s": round(count / judged),
            "calls_meanwhile": len(calls), "call_median_us": round(statistics.median(calls), 1) if calls else None,
            "call_max_us": round(max(calls), 1) if calls else None, "rss_kb_before": before,
            "rss_kb_after": rss_kb(pid)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds of 20")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("-n", type=int, default=200, help="requests per variant and round")
    parser.add_argument("--flood", type=int, default=10_000, help="junk files of the flood")
    args = parser.parse_args()
    rounds, n, flood = (2, 20, 1000) if args.quick else (args.rounds, args.n, args.flood)

    from speed_runtime import Node
    from speed_runtime.operator import Operator
    from speed_runtime.core.control import OperatorKey

    env = Env.make()
    root = env.root  # the floor takes fresh directories of its own (env.fresh_root)
    operator_key = OperatorKey.new()
    load_before = os.getloadavg()
    target = subprocess.Popen([sys.executable, "-m", "speed_runtime", "node", "--dir", root, "--key",
                               env.key_path, "--name", "target", "--service", "echo", "--allow", "caller",
                               "--operator", operator_key.public_text], stdout=subprocess.PIPE, text=True,
                              cwd=REPO)
    assert target.stdout.readline().startswith("ready target")
    samples: dict[str, list[float]] = {"floor": [], "SPC call": [], "control status": [],
                                       "control allow/revoke": []}
    try:
        with Node(root, env.key_path, "caller", allow=["target"]) as caller, \
                Operator(root, env.key_path, operator_key) as operator:
            operator.status("target")  # start the requester node outside the measurement
            caller.call("target", "echo", {})

            def timed(fn) -> list[float]:
                out = []
                for i in range(n):
                    t = time.perf_counter()
                    fn(i)
                    out.append((time.perf_counter() - t) * 1e6)
                return out

            variants = {
                "floor": lambda: rtt_floor(env, 64, n),
                "SPC call": lambda: timed(lambda i: caller.call("target", "echo", {})),
                "control status": lambda: timed(lambda i: operator.status("target")),
                "control allow/revoke": lambda: timed(
                    lambda i: (operator.allow if i % 2 == 0 else operator.revoke)("target", "guest")),
            }
            order = list(variants)
            for _ in range(rounds):
                random.shuffle(order)
                for name in order:
                    samples[name].extend(variants[name]())
            flooded = measure_flood(root, target.pid, flood, caller)
    finally:
        target.terminate()
        target.wait(60)
        shutil.rmtree(env.dir, ignore_errors=True)
    floor = statistics.median(samples["floor"])
    spc = statistics.median(samples["SPC call"])
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M"), "rounds": rounds, "perVariantAndRound": n,
        "loadavg": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]},
        "variants": {name: {"median_us": round(statistics.median(v), 1), "p99_us": round(percentile(v, 0.99), 1),
                            "vs_floor": round(statistics.median(v) / floor, 2),
                            "vs_spc_call": round(statistics.median(v) / spc, 2), "samples": len(v)}
                     for name, v in samples.items()},
        "flood": flooded,
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
