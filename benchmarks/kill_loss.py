"""kill -9 of a receiver under a stream of messages, many times: how many envelopes that a send
reported as delivered are lost, i.e. neither handled nor still in the inbox (where the next
instance judges them with a reason)? Contract 1.1 §5.5: at most the envelopes being handled at
that moment; with one sender, one.

    python benchmarks/kill_loss.py --kills 200          # the long run quoted in docs/RELIABILITY.md
    python benchmarks/kill_loss.py --kills 10 --root R  # the CI test's short run

Prints one JSON object: kills, sent, handled, leftInInbox, lost per kill (max, total), handledTwice.
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
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def one_kill(root: str, key_path: str, node_cls, rng: random.Random, base: int) -> dict:
    from speed_runtime.core.envelope import parse_filename

    proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.scripted_node", root, key_path, "r", "--allow", "s",
                             "--delay-ms", "5"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            cwd=REPO)
    assert proc.stdout.readline().startswith("ready")
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    ok: dict[int, int] = {}  # seq -> n
    stop = threading.Event()
    with node_cls(root, key_path, "s", allow=["r"], linger_seconds=0) as s:
        def pump() -> None:
            n = base
            while not stop.is_set():
                try:
                    ok[s.send("r", {"n": n})] = n
                except Exception:
                    stop.wait(0.01)
                n += 1
        sender = threading.Thread(target=pump)
        sender.start()
        time.sleep(rng.uniform(0.2, 1.5))  # a random moment of the stream (this is the experiment, not a wait)
        proc.kill()
        proc.wait()
        stop.set()
        sender.join()
    reader.join(10)
    inbox = os.path.join(root, "r", "inbox")
    left = {parse_filename(f).sequence for f in os.listdir(inbox) if parse_filename(f)}
    handled = [json.loads(line)["data"]["n"] for line in lines if line.startswith("{")]
    lost = [n for seq, n in ok.items() if n not in set(handled) and seq not in left]
    for f in os.listdir(inbox):  # the next instance would judge these (wrong_target); start clean
        os.unlink(os.path.join(inbox, f))
    return {"sent": len(ok), "handled": len(handled), "left": len(left), "lost": len(lost),
            "twice": len(handled) - len(set(handled))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--root", help="communication directory (default: a new one under /dev/shm)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    from speed_runtime import Node, generate_key_file

    work = tempfile.mkdtemp(prefix="speed-kill-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        root = args.root or os.path.join(work, "env")
        key_path = os.path.join(work, "speed.key")
        generate_key_file(key_path)
        rng = random.Random(args.seed)
        runs = [one_kill(root, key_path, Node, rng, i * 1_000_000) for i in range(args.kills)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lost = [r["lost"] for r in runs]
    print(json.dumps({"kills": len(runs), "sent": sum(r["sent"] for r in runs),
                      "handled": sum(r["handled"] for r in runs), "leftInInbox": sum(r["left"] for r in runs),
                      "lostTotal": sum(lost), "maxLostPerKill": max(lost), "killsWithLoss": sum(1 for x in lost if x),
                      "handledTwice": sum(r["twice"] for r in runs)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
