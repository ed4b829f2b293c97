"""A receiver under junk: files in its inbox that authenticate as no sender (docs/PROTOCOL.md
"Order of checks"), on a v1 receiver against a `quota` receiver (which keeps threat scores), in the
same run. Two parts:

- `clear`: N junk files of one kind are made while the receiver process is stopped (SIGSTOP);
  the time from SIGCONT until its inbox is empty (tmpfs reports a directory's entries in its
  size: one `stat` per look, every 2 ms). Kinds: `invented names` (a new sender name per file:
  `unauthorized`), `framed, 1 byte` (named for an allowed sender, 1 byte: `bad_size`), `framed,
  random bytes` (300 random bytes: `bad_tag`), `FIFOs` (named for an allowed sender: `bad_file`),
  and as root `other owner` (1-byte files owned by uid 65534: `bad_file`). Per kind the
  receivers run in the order v1, quota, quota, v1 (A B B A), medians over rounds.
- `steady`: seven steady senders (25 messages/s each, handler 2 ms, as benchmarks/bench_quota.py)
  while a writer makes junk files of invented names at `--junk-rate` files/s; the steady senders'
  p50/p99 on a v1 and a `quota` receiver, with and without the junk, variants shuffled per round.

    python benchmarks/bench_junk.py             # 20,000 files per kind, 3 rounds; steady 3 rounds of 8 s
    python benchmarks/bench_junk.py --quick     # 500 files, 1 round; steady 1 round of 2 s
    python benchmarks/bench_junk.py --checkout DIR   # the runtime of another checkout (before/after)

Prints one JSON object. The goal (issue 26): a `quota` receiver within 3x of a v1 receiver.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from benchmarks import bench_quota  # noqa: E402  (the steady senders, their receiver and percentiles)
from benchmarks.scratch import scratch_environment  # noqa: E402

RECEIVERS = {"v1": {}, "quota": {"features": ["quota"]}}
KINDS = ("invented names", "framed, 1 byte", "framed, random bytes", "FIFOs", "other owner")
EMPTY_DIR_SIZE = 40  # tmpfs: 20 bytes per entry, "." and ".." included
FRAMED = "n0"       # an allowed sender of the receiver script (bench_quota.RECEIVER)


def _kinds() -> tuple[str, ...]:
    return KINDS if os.geteuid() == 0 else KINDS[:-1]


def make_junk(inbox: str, kind: str, count: int, sender: str = FRAMED, id8: str = "0badcafe",
              first_seq: int = 10**6) -> None:
    """`count` files of `kind` (KINDS) named for `sender` (but `invented names`), made whole in a
    directory beside the inbox and renamed in: what a writer without the key can make."""
    staging = os.path.join(os.path.dirname(os.path.dirname(inbox)), "staging")
    os.makedirs(staging, exist_ok=True)
    for i in range(count):
        if kind == "invented names":
            name = f"j{first_seq + i}.01234567.{1:020d}.89abcdef.env"
        else:
            name = f"{sender}.{id8}.{first_seq + i:020d}.{i % 2**32:08x}.env"
        path = os.path.join(staging, name)
        if kind == "FIFOs":
            os.mkfifo(path, 0o600)
        else:
            with open(path, "wb") as f:
                f.write(os.urandom(300) if kind == "framed, random bytes" else b"x")
        if kind == "other owner" and os.geteuid() == 0:
            os.chown(path, 65534, 65534)  # (not root: a one-byte file of ours)
        os.rename(path, os.path.join(inbox, name))


def _stopped(pid: int) -> bool:
    """Every thread of the process is stopped (SIGSTOP is delivered asynchronously)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/stat", encoding="ascii") as f:
            if f.read().rsplit(")", 1)[1].split()[0] != "T":
                return False
    return True


def _entries(inbox: str) -> int:
    return max(0, (os.stat(inbox).st_size - EMPTY_DIR_SIZE) // 20)


def clear_once(receiver: str, kind: str, count: int) -> dict:
    """Seconds for a receiver process to clear `count` junk files of `kind`."""
    work, root, key = scratch_environment("speed-bench-junk-", bench_quota.CHECKOUT["dir"])
    proc = None
    try:
        proc = subprocess.Popen([sys.executable, "-c", bench_quota.RECEIVER, root, key,
                                 json.dumps(RECEIVERS[receiver])], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, cwd=bench_quota.CHECKOUT["dir"], env=bench_quota._run_env())
        assert proc.stdout.readline().strip() == "ready"
        inbox = os.path.join(root, "r", "inbox")
        proc.send_signal(signal.SIGSTOP)
        while not _stopped(proc.pid):
            time.sleep(0.001)
        make_junk(inbox, kind, count)
        started = time.monotonic()
        proc.send_signal(signal.SIGCONT)
        while _entries(inbox) and time.monotonic() - started < 600:
            time.sleep(0.002)
        took = time.monotonic() - started
        return {"receiver": receiver, "kind": kind, "files": count, "seconds": took, "left": _entries(inbox)}
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def clear(rounds: int, count: int) -> dict:
    out = {}
    for kind in _kinds():
        times: dict[str, list[float]] = {"v1": [], "quota": []}
        for _ in range(rounds):
            for receiver in ("v1", "quota", "quota", "v1"):
                times[receiver].append(clear_once(receiver, kind, count)["seconds"])
        v1, quota = statistics.median(times["v1"]), statistics.median(times["quota"])
        out[kind] = {"v1Seconds": round(v1, 3), "quotaSeconds": round(quota, 3), "quotaVsV1": round(quota / v1, 2),
                     "v1FilesPerSecond": round(count / v1), "quotaFilesPerSecond": round(count / quota),
                     "raw": times}
    return out


def _junk_writer(inbox: str, rate: float, stop: threading.Event, made: list[int]) -> None:
    start, i = time.monotonic(), 0
    while not stop.is_set():
        due = start + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        try:
            with open(os.path.join(inbox, f"j{i}.01234567.{1:020d}.89abcdef.env"), "wb"):
                pass
        except FileNotFoundError:
            return
        i += 1
        made[0] = i


def steady_once(receiver: str, junk: bool, seconds: float, rate: float, junk_rate: float) -> dict:
    work, root, key = scratch_environment("speed-bench-junk-", bench_quota.CHECKOUT["dir"])
    procs: list[subprocess.Popen] = []
    stop, made = threading.Event(), [0]
    try:
        rec = subprocess.Popen([sys.executable, "-c", bench_quota.RECEIVER, root, key, json.dumps(RECEIVERS[receiver])],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               cwd=bench_quota.CHECKOUT["dir"], env=bench_quota._run_env())
        procs.append(rec)
        assert rec.stdout.readline().strip() == "ready"
        count = int(seconds * rate)
        steady = [bench_quota._peer(root, key, name, "--count", str(count), "--interval", str(1 / rate))
                  for name in bench_quota.STEADY]
        procs += steady
        writer = None
        if junk:
            writer = threading.Thread(target=_junk_writer, args=(os.path.join(root, "r", "inbox"), junk_rate, stop,
                                                                  made), daemon=True)
            writer.start()
            time.sleep(1.0)  # the junk is under way before the steady senders start
        started = time.monotonic()
        for proc in steady:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for proc in steady:
            json.loads(proc.stdout.readline())
        rec.stdin.write(f"stats {count * len(bench_quota.STEADY)}\n")
        rec.stdin.flush()
        stats = json.loads(rec.stdout.readline())
        elapsed = time.monotonic() - started
        stop.set()
        if writer is not None:
            writer.join()
        warm = int(rate * min(bench_quota.WARMUP_SECONDS, seconds / 4))
        latencies = [v for name in bench_quota.STEADY for v in stats["latencies"].get(name, [])[warm:]]
        handled = sum(len(stats["latencies"].get(name, [])) for name in bench_quota.STEADY)
        return {"receiver": receiver, "junk": junk, "p50": bench_quota._percentile(latencies, 0.5),
                "p99": bench_quota._percentile(latencies, 0.99), "steadyHandled": handled,
                "steadySent": count * len(bench_quota.STEADY), "junkPerSecond": made[0] / (elapsed + 1.0),
                "load": os.getloadavg()[0]}
    finally:
        stop.set()
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def steady(rounds: int, seconds: float, rate: float, junk_rate: float) -> dict:
    variants = [(r, j) for r in RECEIVERS for j in (False, True)]
    results: dict[tuple, list[dict]] = {v: [] for v in variants}
    rng = random.Random(26)
    for _ in range(rounds):
        order = list(variants)
        rng.shuffle(order)
        for variant in order:
            results[variant].append(steady_once(*variant, seconds, rate, junk_rate))
    out = {}
    for (receiver, junk), rows in results.items():
        label = f"{receiver} receiver, {'junk names' if junk else 'no junk'}"
        base = results[(receiver, False)]
        out[label] = {"p50Ms": round(statistics.median(r["p50"] for r in rows), 2),
                      "p99Ms": round(statistics.median(r["p99"] for r in rows), 2),
                      "p99VsNoJunkSameRound": round(statistics.median(r["p99"] / b["p99"] for r, b in zip(rows, base)),
                                                    2),
                      "steadyHandled": sum(r["steadyHandled"] for r in rows),
                      "steadySent": sum(r["steadySent"] for r in rows),
                      "junkPerSecond": round(statistics.median(r["junkPerSecond"] for r in rows))}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="500 files, 1 round; steady 1 round of 2 s")
    parser.add_argument("--files", type=int, default=20_000, help="junk files per kind in `clear`")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0, help="how long the steady senders send, per round")
    parser.add_argument("--rate", type=float, default=25.0, help="messages per second of each steady sender")
    parser.add_argument("--junk-rate", type=float, default=2000.0, help="junk files per second in `steady`")
    parser.add_argument("--only", choices=("clear", "steady"), help="one part only")
    parser.add_argument("--checkout", default=REPO, help="run the receivers with the runtime of this checkout")
    args = parser.parse_args(argv)
    if not os.path.isdir("/dev/shm"):
        parser.error("needs /dev/shm (tmpfs reports a directory's entries in its size)")
    bench_quota.CHECKOUT["dir"] = os.path.abspath(args.checkout)
    if args.quick:
        args.files, args.rounds, args.seconds = min(args.files, 500), 1, min(args.seconds, 2.0)
    load_before = os.getloadavg()
    report = {"date": datetime.datetime.now().isoformat(timespec="minutes"), "checkout": bench_quota.CHECKOUT["dir"],
              "files": args.files, "rounds": args.rounds, "loadBefore": [round(x, 2) for x in load_before]}
    if args.only != "steady":
        report["clear"] = clear(args.rounds, args.files)
    if args.only != "clear":
        report["steady"] = steady(args.rounds, args.seconds, args.rate, args.junk_rate)
        report.update(seconds=args.seconds, ratePerSender=args.rate, junkRate=args.junk_rate)
    report["loadAfter"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
