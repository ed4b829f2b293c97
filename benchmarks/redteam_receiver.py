"""Attacks on a receiver's order of checks and its scheduling (docs/RELIABILITY.md, "Red team: quota
and the receiver's order of checks"), each printing one JSON line. Run one with the runtime of this
checkout, or of another one (`--checkout DIR`, e.g. a `git archive` of an older commit), to compare.

    python benchmarks/redteam_receiver.py churn [--sends 3000]   # revoke/allow every 5 ms during sends
    python benchmarks/redteam_receiver.py links                  # untrusted hard links named for a sender
    python benchmarks/redteam_receiver.py storm                  # files of invented names as fast as possible
    python benchmarks/redteam_receiver.py junk-rss --kind invented|symlink [--files N]

`churn` runs a real `speed node --feature quota --control-stdin` receiver and a sender process;
`links` (as root: the links are owned by uid 65534), `storm` and the steady sender run Nodes in
this process beside writer processes; `junk-rss` reports a stopped receiver process's time to
clear N junk files and its peak RSS.
"""
from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(checkout: str) -> tuple[str, str, str]:
    work = tempfile.mkdtemp(prefix="speed-redteam-", dir="/dev/shm")
    os.chmod(work, 0o711)  # (uid 65534 reaches its own directory inside: `links`)
    root, key = os.path.join(work, "env"), os.path.join(work, "speed.key")
    subprocess.run([sys.executable, "-m", "speed_runtime", "keygen", key], check=True, capture_output=True,
                   cwd=checkout)
    return work, root, key


def _percentiles(latencies: list[float]) -> dict:
    ordered = sorted(latencies)
    if not ordered:
        return {"p50": None, "p99": None}
    return {"p50": round(ordered[len(ordered) // 2], 1), "p99": round(ordered[int(0.99 * len(ordered))], 1)}


def churn(checkout: str, sends: int) -> dict:
    work, root, key = _env(checkout)
    procs = []
    try:
        r = subprocess.Popen([sys.executable, "-m", "speed_runtime", "node", "--dir", root, "--key", key, "--name", "r",
                              "--allow", "g", "--feature", "quota", "--control-stdin", "--trace"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             cwd=checkout)
        procs.append(r)
        assert r.stdout.readline().startswith("ready")
        g = subprocess.Popen([sys.executable, "-m", "tests.ext.quota_peer", root, key, "g", "r", "--count", str(sends),
                              "--timeout", "0.05", "--wait-go"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd=checkout)
        procs.append(g)
        assert g.stdout.readline().startswith("ready")
        stop, flips = threading.Event(), [0]

        def flip() -> None:
            allowed = True
            while not stop.wait(0.005):
                r.stdin.write("revoke g\n" if allowed else "allow g\n")
                r.stdin.flush()
                allowed, flips[0] = not allowed, flips[0] + 1
            r.stdin.write("allow g\n")
            r.stdin.flush()
        flipper = threading.Thread(target=flip)
        g.stdin.write("go\n")
        g.stdin.flush()
        flipper.start()
        done = next(d for d in map(json.loads, g.stdout) if "done" in d)
        stop.set()
        flipper.join()
        time.sleep(2.0)  # what was delivered last is judged
        g.stdin.write("\n")
        g.stdin.flush()
        g.wait()
        time.sleep(1.0)
        with open(os.path.join(root, "speed_traces", "r.jsonl"), encoding="utf-8") as f:
            records = [json.loads(line) for line in f]
        mine = [x for x in records if x.get("peer") == "g"]
        return {"attack": "churn", "flips": flips[0], "sent": done["done"], "refusedAtSender": done["refused"],
                "accepted": sum(1 for x in mine if x.get("outcome") == "accepted" and x.get("type") == "MESSAGE"),
                "rejected": dict(collections.Counter(x["reason"] for x in mine if x.get("outcome") == "rejected")),
                "threatRecords": sum(1 for x in records if x.get("kind") == "threat")}
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def links(checkout: str) -> dict:
    if os.geteuid() != 0:
        raise SystemExit("links: run as root (the hard links are owned by uid 65534)")
    sys.path.insert(0, checkout)
    from speed_runtime import Node

    work, root, key = _env(checkout)
    latencies: list[float] = []
    try:
        with Node(root, key, "r", allow=["s"]) as r, Node(root, key, "s", allow=["r"]) as s:
            r.on_message(lambda m: latencies.append((time.time() - m.data) * 1000))
            inbox, own = os.path.join(root, "r", "inbox"), os.path.join(work, "mallory")
            os.mkdir(own)
            stop = threading.Event()

            def attack() -> None:
                i = 0
                while not stop.is_set():
                    source = os.path.join(own, f"f{i}")
                    with open(source, "wb") as f:
                        f.write(b"x" * 200)
                    os.chown(source, 65534, 65534)
                    os.link(source, os.path.join(inbox, f"s.00000000.{i + 1:020d}.00000000.env"))
                    i += 1
                    stop.wait(1.5)
            attacker = threading.Thread(target=attack)
            attacker.start()
            for _ in range(100):
                s.send("r", time.time())
                time.sleep(0.02)
            time.sleep(3.0)
            stop.set()
            attacker.join()
            return {"attack": "links", "handled": len(latencies), **_percentiles(latencies),
                    "rejected": r.counters()["rejected"]}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _create_as_fast_as_possible(inbox: str, tag: int, until: float) -> None:
    i = 0
    while time.monotonic() < until:
        try:
            os.close(os.open(os.path.join(inbox, f"j{tag}x{i}.01234567.{1:020d}.89abcdef.env"),
                             os.O_CREAT | os.O_WRONLY, 0o600))
        except FileNotFoundError:
            return
        i += 1


def storm(checkout: str) -> dict:
    sys.path.insert(0, checkout)
    from speed_runtime import Node

    work, root, key = _env(checkout)
    latencies: list[float] = []
    try:
        with Node(root, key, "r", allow=["s"], features=["quota"]) as r, Node(root, key, "s", allow=["r"]) as s:
            r.on_message(lambda m: latencies.append((time.time() - m.data) * 1000))
            until = time.monotonic() + 6.0
            writers = [mp.get_context("fork").Process(target=_create_as_fast_as_possible,
                                                      args=(os.path.join(root, "r", "inbox"), t, until))
                       for t in range(2)]
            for writer in writers:
                writer.start()
            time.sleep(0.5)
            for _ in range(200):
                s.send("r", time.time())
                time.sleep(0.02)
            for writer in writers:
                writer.join()
            deadline = time.monotonic() + 60
            while len(latencies) < 200 and time.monotonic() < deadline:
                time.sleep(0.01)
            counters = r.counters()
            return {"attack": "storm", "handled": len(latencies), **_percentiles(latencies),
                    "overflows": counters["inotifyOverflows"], "junkRemoved": counters["rejected"].get("unauthorized", 0)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def junk_rss(checkout: str, kind: str, files: int) -> dict:
    sys.path.insert(0, checkout)
    from benchmarks import bench_quota

    work, root, key = _env(checkout)
    proc = subprocess.Popen([sys.executable, "-c", bench_quota.RECEIVER, root, key, json.dumps({"features": ["quota"]})],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=checkout)
    try:
        assert proc.stdout.readline().strip() == "ready"

        def peak() -> float:
            with open(f"/proc/{proc.pid}/status", encoding="ascii") as f:
                return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))
        base, inbox = peak(), os.path.join(root, "r", "inbox")
        proc.send_signal(signal.SIGSTOP)
        time.sleep(0.2)
        for i in range(files):
            if kind == "invented":
                open(os.path.join(inbox, f"j{i}.01234567.{1:020d}.89abcdef.env"), "wb").close()
            else:
                os.symlink("/dev/zero" if i % 2 else "/etc/passwd",
                           os.path.join(inbox, f"n0.0badcafe.{10**6 + i:020d}.{i:08x}.env"))
        started = time.monotonic()
        proc.send_signal(signal.SIGCONT)
        while (os.stat(inbox).st_size - 40) // 20 and time.monotonic() - started < 300:
            time.sleep(0.005)  # (tmpfs: 20 bytes of directory size per entry)
        return {"attack": "junk-rss", "kind": kind, "files": files, "seconds": round(time.monotonic() - started, 2),
                "baseMB": round(base, 1), "peakMB": round(peak(), 1)}
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("attack", choices=("churn", "links", "storm", "junk-rss"))
    parser.add_argument("--checkout", default=REPO)
    parser.add_argument("--sends", type=int, default=3000)
    parser.add_argument("--kind", choices=("invented", "symlink"), default="invented")
    parser.add_argument("--files", type=int, default=100_000)
    args = parser.parse_args(argv)
    checkout = os.path.abspath(args.checkout)
    if args.attack == "churn":
        result = churn(checkout, args.sends)
    elif args.attack == "links":
        result = links(checkout)
    elif args.attack == "storm":
        result = storm(checkout)
    else:
        result = junk_rss(checkout, args.kind, args.files)
    print(json.dumps({"checkout": checkout, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
