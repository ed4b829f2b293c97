"""Power loss under the durable extension: what send() confirmed survives, and every receipt survives
with its ledger entry. Needs root, loop devices and FUSE (`apt-get install python3-fusepy`).

    sudo python benchmarks/durable_powerloss.py --cycles 20

Each cycle: a fresh ext4 file system on a loop device whose backing file is a FUSE file with a
volatile write cache (benchmarks/volatile_disk.py: a write reaches the durable image only when the
file system flushes, as with a disk's cache); a durable receiver (`speed node --durable`) and a
durable sender (benchmarks/durable_chaos.py's worker: it logs `c n` on the real disk once send()
returned) run on it; after a random 0.3-2.5 s the harness reads which sends were confirmed, then
cuts the power (nothing reaches the image any more, every unflushed write is lost), kills both,
and mounts what the image holds (ext4 replays its journal). Checks, on the recovered image:
1. every confirmed message is still in the sender's outbox or has its receipt in the sender's log;
2. every receipt chain verifies, and every receipt the sender stored is in the receiver's ledger;
3. after a restart of both nodes on the recovered image, every confirmed message is receipted
   `handled`, no message twice (the chains), and the outbox is empty.
`--control` runs the sender with its fsyncs turned into no-ops (in the worker process only): that
run must find confirmed messages lost, which shows that the cut really drops unflushed writes.
Handler runs repeated across the cut (handled, receipt not yet on disk) are counted, not failed:
the claim that marks them `redelivered` is not synced (docs/PROTOCOL.md, durable).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from speed_runtime import generate_key_file, load_key  # noqa: E402
from speed_runtime.ext.durable_store import list_outboxes, verify_receipts  # noqa: E402

SPEED = [sys.executable, "-m", "speed_runtime"]
SYSTEM_PYTHON = "/usr/bin/python3"


def sh(*cmd: str, check: bool = True) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r.stdout.strip()


def wait_for(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise RuntimeError(f"timed out waiting for {what}")


def start_nodes(root: str, key: str, work: str, tag: str, control: bool = False):
    rx_out = open(os.path.join(work, f"rx.{tag}.out"), "wb")
    rx = subprocess.Popen(SPEED + ["node", "--dir", root, "--key", key, "--name", "rx", "--durable", "--allow", "s1",
                                   "--echo-messages", "--service", "echo", "--lease", "5", "--heartbeat", "1"],
                          stdout=rx_out, stderr=subprocess.DEVNULL, cwd=REPO)
    tx = subprocess.Popen([sys.executable, os.path.join(HERE, "durable_chaos.py"), "--worker", root, key, "s1", "rx",
                           os.path.join(work, "s1.log"), os.path.join(work, "stop"), os.path.join(work, "quiet")],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO,
                          env={**os.environ, "DURABLE_CHAOS_NO_FSYNC": "1" if control else "0"})
    rx_out.close()
    return rx, tx


def confirmed(work: str) -> set[int]:
    try:
        with open(os.path.join(work, "s1.log")) as f:
            return {int(line.split()[1]) for line in f if line.startswith("c ")}
    except FileNotFoundError:
        return set()


def handler_runs(work: str) -> dict[int, int]:
    runs: dict[int, int] = {}
    for name in os.listdir(work):
        if name.startswith("rx.") and name.endswith(".out"):
            with open(os.path.join(work, name), errors="replace") as f:
                for line in f:
                    try:
                        n = json.loads(line)["data"]["n"]
                    except (ValueError, KeyError, TypeError):
                        continue
                    runs[n] = runs.get(n, 0) + 1
    return runs


def stored_receipts(root: str) -> tuple[dict[int, str], set[int]]:
    """The sender's receipt log: id -> status, and the ids it recorded as expired."""
    out, expired = {}, set()
    try:
        with open(os.path.join(root, "s1", "durable", "receipts", "rx.log")) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if "receipt" in rec:
                    out[rec["receipt"]["id"]] = rec["receipt"]["status"]
                elif "expired" in rec:
                    expired.add(rec["expired"]["id"])
    except FileNotFoundError:
        pass
    return out, expired


def ledger_macs(root: str) -> set[str]:
    macs = set()
    try:
        with open(os.path.join(root, "rx", "durable", "ledger", "s1.log")) as f:
            for line in f:
                try:
                    macs.add(json.loads(line)["receipt"]["mac"])
                except (ValueError, KeyError, TypeError):
                    pass
    except FileNotFoundError:
        pass
    return macs


def cycle(base: str, rng: random.Random, size_mb: int, control: bool = False) -> dict:
    work = tempfile.mkdtemp(prefix="cycle-", dir=base)
    fuse_dir, mnt, image = os.path.join(work, "fuse"), os.path.join(work, "mnt"), os.path.join(work, "durable.img")
    os.mkdir(fuse_dir)
    os.mkdir(mnt)
    key = os.path.join(work, "speed.key")
    generate_key_file(key)
    server = subprocess.Popen([SYSTEM_PYTHON, os.path.join(HERE, "volatile_disk.py"), fuse_dir, image, str(size_mb)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    loop = rx = tx = None
    try:
        wait_for(lambda: os.path.exists(os.path.join(fuse_dir, "disk.img")), 10, "the FUSE disk")
        loop = sh("losetup", "-f", "--show", os.path.join(fuse_dir, "disk.img"))
        sh("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", loop)
        sh("mount", loop, mnt)
        root = os.path.join(mnt, "env")
        rx, tx = start_nodes(root, key, work, "1", control)
        wait_for(lambda: len(confirmed(work)) >= 5, 60, "the first confirmed sends")
        time.sleep(rng.uniform(0.3, 2.5))
        before = confirmed(work)                       # read before the cut: all confirmed before it
        with open(os.path.join(fuse_dir, "ctl"), "w") as f:
            f.write("cut\n")                            # the power goes
        for p in (rx, tx):
            p.kill()
            p.wait()
        sh("umount", "-l", mnt)
        sh("losetup", "-d", loop)
        loop = None
        sh("umount", "-l", fuse_dir)
        server.wait(30)
        # the machine comes back: what the image holds, journal replayed by the mount
        loop = sh("losetup", "-f", "--show", image)
        sh("mount", loop, mnt)
        waiting = {i.id for i in list_outboxes(root, ["s1"])}
        receipts, expired = stored_receipts(root)
        lost = sorted(n for n in before if n not in waiting and n not in receipts and n not in expired)
        keyraw = load_key(key).raw
        reports = verify_receipts(root, keyraw, "rx", ["s1"])
        chains_ok = all(r.ok for _, r in reports)
        ledger = ledger_macs(root)
        sender_only = 0
        with open(os.path.join(root, "s1", "durable", "receipts", "rx.log")) as f:
            for line in f:
                rec = json.loads(line).get("receipt")
                if rec and rec["mac"] not in ledger:
                    sender_only += 1
        open(os.path.join(work, "quiet"), "w").close()  # no new sends after the restart
        rx, tx = start_nodes(root, key, work, "2")
        wait_for(lambda: not list_outboxes(root, ["s1"]), 120, "the outbox to empty after the restart")
        receipts, expired = stored_receipts(root)
        open(os.path.join(work, "stop"), "w").close()
        for p in (rx, tx):
            p.terminate()
            p.wait(60)
        rx = tx = None
        final = verify_receipts(root, keyraw, "rx", ["s1"])
        unhandled = sorted(n for n in before if receipts.get(n) != "handled")
        runs = handler_runs(work)
        return {"confirmedBeforeCut": len(before), "lost": len(lost), "lostSample": lost[:5],
                "chainsAfterCutVerify": chains_ok, "receiptsOnlyAtSender": sender_only,
                "chainsAtEndVerify": all(r.ok for _, r in final), "receipted": len(receipts),
                "confirmedNotHandled": len(unhandled), "handlerReruns": sum(c - 1 for c in runs.values() if c > 1)}
    finally:
        for p in (rx, tx):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        sh("umount", "-l", mnt, check=False)
        if loop:
            sh("losetup", "-d", loop, check=False)
        sh("umount", "-l", fuse_dir, check=False)
        if server.poll() is None:
            server.kill()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cycles", type=int, default=20)
    p.add_argument("--size-mb", type=int, default=64)
    p.add_argument("--dir", default=os.path.join(REPO, ".durable-runs"),
                   help="where the images go (a disk file system; default: .durable-runs in the work tree)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--control", action="store_true",
                   help="negative control: the sender skips every fsync (this run must find losses)")
    args = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the power-loss run needs root (loop devices, mount, FUSE)")
    rng = random.Random(args.seed)
    os.makedirs(args.dir, exist_ok=True)
    base = tempfile.mkdtemp(prefix="speed-powerloss-", dir=args.dir)
    results = []
    load = os.getloadavg()
    try:
        for i in range(args.cycles):
            r = cycle(base, rng, args.size_mb, args.control)
            results.append(r)
            print(json.dumps({"cycle": i + 1, **r}), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    total = {"cycles": len(results), "confirmedBeforeCuts": sum(r["confirmedBeforeCut"] for r in results),
             "lost": sum(r["lost"] for r in results),
             "chainsVerified": all(r["chainsAfterCutVerify"] and r["chainsAtEndVerify"] for r in results),
             "receiptsOnlyAtSender": sum(r["receiptsOnlyAtSender"] for r in results),
             "confirmedNotHandled": sum(r["confirmedNotHandled"] for r in results),
             "handlerReruns": sum(r["handlerReruns"] for r in results),
             "load": [round(x, 2) for x in load] + [round(x, 2) for x in os.getloadavg()],
             "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    total["control"] = args.control
    total["ok"] = (total["lost"] == 0 and total["chainsVerified"] and total["receiptsOnlyAtSender"] == 0
                   and total["confirmedNotHandled"] == 0)
    print(json.dumps(total, indent=1))
    return 0 if total["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
