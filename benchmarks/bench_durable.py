"""What durable delivery costs: durable against plain sends, on the real disk (ext4 here) and on
tmpfs, with the floor of each file system measured in the same run.

    python benchmarks/bench_durable.py            # 2,000 messages per variant, 5 rounds
    python benchmarks/bench_durable.py --quick    # 200 messages, 2 rounds (proves it runs)
    python benchmarks/bench_durable.py --disk /var/tmp --json

Per variant and round: one receiver process (`speed node --echo-messages`, with `--durable` for the
durable variants) and a sender Node in this process. The sender sends N 64-byte messages as fast as
send() returns; the time runs from the first send until the receiver printed the last one and, for
durable, until every receipt is stored (the outbox is empty). Figures:
- messages/s end to end, and the rate at which send() returns (durable: stored with 2 fsyncs);
- fsyncs per message, counted by the runtime (sender's `fsyncs` counter + the receiver's, as its
  registry entry publishes them);
- floors, per file system: the v1 delivery floor (write a file, rename it) and the durable store
  floor (write, fsync, rename, fsync the directory), in a loop in this process.
Variants run interleaved, round after round, in shuffled order; figures are medians over rounds.
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
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from speed_runtime import Node, generate_key_file  # noqa: E402
from speed_runtime.ext.durable_store import RAMFS_MAGIC, TMPFS_MAGIC, filesystem_type  # noqa: E402
from speed_runtime.registry import Registry  # noqa: E402

SPEED = [sys.executable, "-m", "speed_runtime"]
PAYLOAD = "x" * 40  # with {"from","to","data"}: a 64-byte payload


def floor(dir_path: str, n: int, durable: bool) -> float:
    """Messages per second of the bare file operations a send needs on this file system."""
    d = tempfile.mkdtemp(dir=dir_path)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    data = b"\0" * 156
    started = time.perf_counter()
    for i in range(n):
        f = os.open(f"t{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=fd)
        os.write(f, data)
        if durable:
            os.fsync(f)
        os.close(f)
        os.rename(f"t{i}", f"m{i}", src_dir_fd=fd, dst_dir_fd=fd)
        if durable:
            os.fsync(fd)
    elapsed = time.perf_counter() - started
    os.close(fd)
    shutil.rmtree(d)
    return n / elapsed


def run_variant(base: str, on_tmpfs: bool, durable: bool, n: int) -> dict:
    work = tempfile.mkdtemp(prefix="bench-durable-", dir=base)
    os.chmod(work, 0o700)
    root, key = os.path.join(work, "env"), os.path.join(work, "k.key")
    generate_key_file(key)
    cmd = SPEED + ["node", "--dir", root, "--key", key, "--name", "rx", "--allow", "tx", "--echo-messages",
                   "--heartbeat", "0.2", "--lease", "5"]
    if durable:
        cmd += ["--durable"] + (["--durable-on-tmpfs"] if on_tmpfs else [])
    rx = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO)
    try:
        assert rx.stdout.readline().startswith("ready rx")
        time.sleep(0.5)  # a renewal publishes the counters of the receiver's start (its directories, instance)
        rx_start = Registry(root, create=False).read("rx").extra["counters"]["fsyncs"]
        opts = {"durable": True, "durable_on_tmpfs": on_tmpfs} if durable else {}
        with Node(root, key, "tx", allow=["rx"], **opts) as tx:
            started = time.perf_counter()
            for _ in range(n):
                tx.send("rx", PAYLOAD, durable=durable)
            sent = time.perf_counter() - started
            for _ in range(n):
                rx.stdout.readline()
            if durable:
                while tx.extension("durable").outbox_items():
                    time.sleep(0.001)
            elapsed = time.perf_counter() - started
            tx_fsyncs = tx.counters()["fsyncs"]
        rx_fsyncs = 0
        if durable:  # the receiver publishes its counters with every renewal (every 0.2 s)
            time.sleep(0.5)
            entry = Registry(root, create=False).read("rx")
            rx_fsyncs = entry.extra["counters"]["fsyncs"] - rx_start
        return {"rate": n / elapsed, "sendRate": n / sent, "fsyncsPerMessage": (tx_fsyncs + rx_fsyncs) / n,
                "senderFsyncsPerMessage": tx_fsyncs / n, "receiverFsyncsPerMessage": rx_fsyncs / n}
    finally:
        rx.terminate()
        rx.wait(30)
        rx.stdout.close()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--messages", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--disk", default=tempfile.gettempdir(), help="a directory on the disk file system")
    p.add_argument("--tmpfs", default="/dev/shm", help="a directory on tmpfs")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    n = args.messages or (200 if args.quick else 2000)
    rounds = args.rounds or (2 if args.quick else 5)
    if filesystem_type(args.disk) in (TMPFS_MAGIC, RAMFS_MAGIC):
        raise SystemExit(f"{args.disk} is not on a disk file system: pass --disk")
    places = {"disk": args.disk, "tmpfs": args.tmpfs}
    variants = [(place, durable) for place in places for durable in (False, True)]
    results: dict[str, list[dict]] = {}
    floors: dict[str, list[float]] = {}
    load_before = os.getloadavg()
    for _ in range(rounds):
        random.shuffle(variants)
        for place, durable in variants:
            label = f"{'durable' if durable else 'plain'}, {place}"
            results.setdefault(label, []).append(run_variant(places[place], place == "tmpfs", durable, n))
        for place, path in places.items():
            floors.setdefault(f"floor write+rename, {place}", []).append(floor(path, n, False))
            floors.setdefault(f"floor write+fsync+rename+fsync dir, {place}", []).append(floor(path, n, True))
    med = {label: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for label, runs in results.items()}
    fl = {label: statistics.median(v) for label, v in floors.items()}
    out = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "messages": n, "rounds": rounds,
           "load": [round(x, 2) for x in load_before] + [round(x, 2) for x in os.getloadavg()],
           "disk": f"{args.disk} ({'ext4' if filesystem_type(args.disk) == 0xEF53 else hex(filesystem_type(args.disk))})",
           "variants": med, "floors": fl}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"# durable vs plain sends: {n} messages of 64 B per variant, {rounds} rounds, medians "
          f"({out['date']}, load {out['load']})")
    print("| variant | messages/s end to end | send() returns/s | fsyncs per message | vs plain, same fs |"
          " vs fsync floor, same fs |")
    print("| --- | --- | --- | --- | --- | --- |")
    for place in places:
        plain = med[f"plain, {place}"]["rate"]
        dfloor = fl[f"floor write+fsync+rename+fsync dir, {place}"]
        for kind in ("plain", "durable"):
            m = med[f"{kind}, {place}"]
            print(f"| {kind}, {place} | {m['rate']:,.0f} | {m['sendRate']:,.0f} | {m['fsyncsPerMessage']:.2f} "
                  f"({m['senderFsyncsPerMessage']:.2f} + {m['receiverFsyncsPerMessage']:.2f}) | "
                  f"{m['rate'] / plain:.2f}× | {m['rate'] / dfloor:.2f}× |")
    for label, value in fl.items():
        print(f"| {label} | {value:,.0f} | | {1 if 'fsync' in label else 0}-2 | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
