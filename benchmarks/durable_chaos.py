"""Chaos for the durable extension: kill -9 a sender or the receiver at random moments, again and
again, while 1-4 senders send durable messages (and SPC calls), then check that nothing was lost,
nothing was handled twice, and every receipt chain verifies.

    python benchmarks/durable_chaos.py                      # 1,000 kills, 4 senders (the full run)
    python benchmarks/durable_chaos.py --kills 40 --senders 2 --quick
    python benchmarks/durable_chaos.py --dir /path/on/disk  # where the communication directory goes

Processes: the receiver is `speed node --durable --echo-messages --service echo` (each handled
message is one JSON line in its stdout file, written by the handler: the handler's effect); each
sender is this script in `--worker` mode: a durable Node that, for n = 1, 2, 3…, appends `a n` to
its log, sends {"s": NAME, "n": n} durably, and appends `c n` once send() returned (confirmed:
on disk in its outbox), with a plain SPC echo call every 10 messages, for as long as the kills go
on. A restarted worker goes on after the highest n it attempted.

Verdicts (printed as JSON, exit 1 if any fails):
- lost: confirmed messages no handler ever completed (must be 0);
- handled twice: messages whose handler completed twice without the second run being marked
  `redelivered` (must be 0); re-runs marked `redelivered` (a kill inside the handler's window,
  between its start and the receipt on disk) are counted separately;
- receipts: every message acknowledged once in the receiver's ledger, every chain (the ledger's and
  each sender's stored copy) verifies, every confirmed message has a `handled` receipt.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SPEED = [sys.executable, "-m", "speed_runtime"]


# ============================================================================ the sender worker
def worker(root: str, key: str, name: str, target: str, log_path: str, stop_path: str, quiet_path: str) -> int:
    from speed_runtime import Node
    from speed_runtime.core.errors import SpeedError

    if os.environ.get("DURABLE_CHAOS_NO_FSYNC") == "1":  # the power-loss run's negative control only
        from speed_runtime.ext import durable_store
        durable_store.Syncs.fsync = durable_store.Syncs.fdatasync = lambda self, fd: self.count(1)

    attempted = 0
    try:
        with open(log_path) as f:
            attempted = max((int(line.split()[1]) for line in f if line.startswith("a ")), default=0)
    except FileNotFoundError:
        pass
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with Node(root, key, name, allow=[target], durable=True, durable_retry_seconds=1.0) as node:
        print(f"ready {name} id={node.id} pid={os.getpid()}", flush=True)
        n = attempted
        while not os.path.exists(quiet_path):  # send for as long as the kills go on
            n += 1
            os.write(log, f"a {n}\n".encode())
            node.send(target, {"s": name, "n": n}, durable=True)
            os.write(log, f"c {n}\n".encode())
            if n % 10 == 0:
                try:
                    node.call(target, "echo", {"n": n}, timeout=2.0)
                    os.write(log, f"spc ok {n}\n".encode())
                except SpeedError:
                    os.write(log, f"spc err {n}\n".encode())
            time.sleep(random.uniform(0, 0.01))
        print("done", flush=True)
        while not os.path.exists(stop_path):  # stay up so that receipts come home
            time.sleep(0.05)
    return 0


# ============================================================================ the driver
class Proc:
    def __init__(self, name: str, cmd: list[str], out: str):
        self.name, self.cmd, self.out = name, cmd, out
        self.incarnation = 0
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.incarnation += 1
        with open(f"{self.out}.{self.incarnation}", "wb") as stdout:
            self.proc = subprocess.Popen(self.cmd, stdout=stdout, stderr=subprocess.DEVNULL, cwd=REPO)

    def ready(self, timeout: float = 60.0) -> bool:
        path = f"{self.out}.{self.incarnation}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(path, "rb") as f:
                if f.read(6) == b"ready ":
                    return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.01)
        return False

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
        if self.proc:
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()

    def lines(self) -> list[str]:
        out = []
        for i in range(1, self.incarnation + 1):
            try:
                with open(f"{self.out}.{i}", encoding="utf-8", errors="replace") as f:
                    out += f.read().splitlines()
            except FileNotFoundError:
                pass
        return out


def persistent_dir(requested: str | None) -> str:
    from speed_runtime.ext.durable_store import RAMFS_MAGIC, TMPFS_MAGIC, filesystem_type

    # the work tree first: shared temporary directories get cleaned by others during long runs
    for candidate in ([requested] if requested else [os.path.join(REPO, ".durable-runs"), tempfile.gettempdir()]):
        os.makedirs(candidate, exist_ok=True)
        if filesystem_type(candidate) not in (TMPFS_MAGIC, RAMFS_MAGIC):
            base = tempfile.mkdtemp(prefix="speed-chaos-", dir=candidate)
            os.chmod(base, 0o700)
            return base
    raise SystemExit("no persistent directory found: pass --dir on a disk file system")


def run(kills: int, senders: int, base: str | None = None, max_pause: float = 0.3,
        seed: int | None = None, settle_timeout: float = 300.0, keep: bool = False) -> dict:
    from speed_runtime import generate_key_file, load_key
    from speed_runtime.ext.durable_store import list_outboxes

    rng = random.Random(seed)
    base = persistent_dir(base)
    root, key = os.path.join(base, "env"), os.path.join(base, "speed.key")
    generate_key_file(key)
    stop_path, quiet_path = os.path.join(base, "stop"), os.path.join(base, "quiet")
    names = [f"s{i}" for i in range(1, senders + 1)]
    common = ["--dir", root, "--key", key]
    rx = Proc("rx", SPEED + ["node", *common, "--name", "rx", "--durable", "--echo-messages", "--service", "echo",
                             "--lease", "10", "--heartbeat", "1", *sum((["--allow", n] for n in names), [])],
              os.path.join(base, "rx.out"))
    workers = {n: Proc(n, [sys.executable, os.path.abspath(__file__), "--worker", root, key, n, "rx",
                           os.path.join(base, f"{n}.log"), stop_path, quiet_path], os.path.join(base, f"{n}.out"))
               for n in names}
    everyone = [rx, *workers.values()]
    started = time.monotonic()
    victims = {"rx": 0, "sender": 0}
    try:
        for p in everyone:
            p.start()
            if not p.ready():
                raise RuntimeError(f"{p.name} did not start: {p.lines()[-5:]}")
        for _ in range(kills):
            time.sleep(rng.uniform(0, max_pause))
            victim = rng.choice(everyone)
            victim.kill()
            victims["rx" if victim is rx else "sender"] += 1
            victim.start()
            if not victim.ready():
                raise RuntimeError(f"{victim.name} did not restart: {victim.lines()[-5:]}")
        chaos_seconds = time.monotonic() - started
        open(quiet_path, "w").close()  # the senders stop sending; wait until every outbox is empty
        deadline = time.monotonic() + settle_timeout
        while time.monotonic() < deadline:
            if all("done" in p.lines() for p in workers.values()) and not list_outboxes(root, names):
                break
            for p in everyone:
                if p.proc.poll() is not None and not (p is not rx and "done" in p.lines()):
                    p.start()
                    p.ready()
            time.sleep(0.2)
        pending = len(list_outboxes(root, names))
        open(stop_path, "w").close()
        for p in everyone:
            p.stop()
        result = check(root, load_key(key).raw, rx, workers, base)
        result.update(kills=kills, killed=victims, senders=senders,
                      chaosSeconds=round(chaos_seconds, 1), totalSeconds=round(time.monotonic() - started, 1),
                      pendingAtEnd=pending, dir=base)
        result["ok"] = (result["lost"] == 0 and result["handledTwice"] == 0 and result["chainsBroken"] == 0
                        and result["unreceipted"] == 0 and pending == 0 and result["confirmed"] > 0)
        return result
    finally:
        for p in everyone:
            p.kill()
        if not keep:
            shutil.rmtree(base, ignore_errors=True)


def check(root: str, key: bytes, rx: Proc, workers: dict[str, Proc], base: str) -> dict:
    from speed_runtime.ext.durable_store import verify_receipts

    runs: dict[tuple[str, int], list[bool]] = {}
    for line in rx.lines():
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
            data = rec["data"]
            runs.setdefault((data["s"], data["n"]), []).append(bool(rec.get("redelivered")))
        except (ValueError, KeyError, TypeError):
            continue
    confirmed, attempted, spc = set(), set(), {"ok": 0, "err": 0}
    for name in workers:
        with open(os.path.join(base, f"{name}.log")) as f:
            for line in f:
                parts = line.split()
                if parts[:1] == ["c"]:
                    confirmed.add((name, int(parts[1])))
                elif parts[:1] == ["a"]:
                    attempted.add((name, int(parts[1])))
                elif parts[:1] == ["spc"]:
                    spc[parts[1]] += 1
    lost = sorted(confirmed - set(runs))
    twice = sorted(k for k, flags in runs.items() if len(flags) > 1 and not all(flags[1:]))
    reruns = sum(len(flags) - 1 for flags in runs.values())
    reports = verify_receipts(root, key, "rx", list(workers))
    broken = [f"{where}: {r.sender}: {r.reason}" for where, r in reports if not r.ok]
    stored = {r.sender: r.handled for where, r in reports if where.startswith("stored by")}
    unreceipted = sum(max(0, sum(1 for c in confirmed if c[0] == n) - stored.get(n, 0)) for n in workers)
    return {"confirmed": len(confirmed), "attemptedNotConfirmed": len(attempted - confirmed),
            "handled": len(runs), "lost": len(lost), "lostSample": lost[:5], "handledTwice": len(twice),
            "handledTwiceSample": twice[:5], "redeliveredReruns": reruns,
            "extraHandledOfUnconfirmed": len(set(runs) - confirmed),
            "chains": len(reports), "chainsBroken": len(broken), "brokenSample": broken[:5],
            "unreceipted": unreceipted, "spcCalls": spc}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker(*argv[1:8])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=1000)
    p.add_argument("--senders", type=int, default=4, choices=range(1, 5))
    p.add_argument("--quick", action="store_true", help="40 kills unless --kills is given")
    p.add_argument("--dir", default=None, help="a directory on a persistent file system")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--keep", action="store_true", help="keep the run's directory")
    args = p.parse_args(argv)
    kills = 40 if args.quick and "--kills" not in argv else args.kills
    load = os.getloadavg()
    result = run(kills, args.senders, args.dir, seed=args.seed, keep=args.keep)
    result["load"] = [round(x, 2) for x in load] + [round(x, 2) for x in os.getloadavg()]
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(json.dumps(result, indent=1))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.path.insert(0, REPO)
    sys.exit(main())
