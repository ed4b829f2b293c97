"""A receiver's memory under hostile or heavy input; its peak resident memory (VmHWM) is read from
/proc. Contract 1.1 §5.5: the inbox is the queue, so memory must not follow the backlog; and
docs/PROTOCOL.md ("### chunks", reading 24): what the receiver holds is counted as what it costs
decoded, so its bounds are bounds on RSS.

Flood (the default): one sender pushes COUNT messages of SIZE bytes at a receiver whose handler
takes DELAY ms.

    python benchmarks/flood_memory.py --count 4000 --size 262144 --delay-ms 10

Shapes (`--shape`): a real `speed node` receiver, SENDERS senders of COUNT values each of SIZE bytes
of JSON text: `objects` (`[{},{},…]`, the costliest text per byte), `string` (`"xxx…"`) or `bytes`
(raw; with --chunks only). With `--chunks` the values go as chunked messages (extension chunks);
with `--blocked` the receiver's handler is blocked (it echoes each message to a pipe nobody reads)
until everything was sent and its read-ahead had time to fill (`--hold-seconds`), then released.

    python benchmarks/flood_memory.py --shape objects --size 67108864 --count 1 --chunks
    python benchmarks/flood_memory.py --shape objects --size 1048000 --count 40 --blocked
    python benchmarks/flood_memory.py --shape objects --size 1048000 --count 12 --senders 8 --blocked

    python benchmarks/flood_memory.py ... --checkout /path/to/an/older/checkout   # the receiver, before

`--ulimit-v MiB` runs the receiver under that address-space limit, `--threat` with the quota
extension (its threat scores are in the journal). Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1 << 20


def _rss(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


SENDER = """
import sys, time
from speed_runtime import Node
root, key, count, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
blob = "x" * (size - 64)
with Node(root, key, "s", allow=["r"], max_payload=max(1 << 20, size + 1024), linger_seconds=0) as s:
    t = time.monotonic()
    for n in range(count):
        s.send("r", {"n": n, "blob": blob})
    print(time.monotonic() - t, flush=True)
"""

RECEIVER = """
import sys, time, signal, threading
from speed_runtime import Node
root, key, delay, size = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
stop = threading.Event()
handled = [0]
def on(m):
    time.sleep(delay / 1000)
    handled[0] += 1
with Node(root, key, "r", allow=["s"], max_payload=max(1 << 20, size + 1024)) as node:
    node.on_message(on)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    while not stop.wait(0.2):
        print(handled[0], flush=True)
"""

# one sender of the shapes: COUNT values of SIZE bytes of JSON text (or raw bytes)
SHAPE_SENDER = """
import sys, time
from speed_runtime import Node
root, key, name, shape, size, count, chunked = sys.argv[1:8]
size, count = int(size), int(count)
if shape == "objects":
    value = [{}] * ((size - 2 + 1) // 3)        # [{},{},...]: 3 bytes per object
elif shape == "string":
    value = "x" * (size - 2)
else:
    value = bytes(size)
features = ["chunks"] if chunked == "1" else []
with Node(root, key, name, allow=["r"], features=features, linger_seconds=0) as s:
    for n in range(count):
        s.send("r", value)
print("sent", flush=True)
"""


def _journal(root: str) -> dict:
    """What the receiver's journal says: envelopes accepted per sender, messages by event and
    reason, rejections by reason."""
    out = {"accepted": {}, "rejected": {}, "messages": {}, "health": [], "threatScores": {}}
    try:
        with open(os.path.join(root, "speed_traces", "r.jsonl"), encoding="utf-8") as f:
            lines = f.readlines()
    except FileNotFoundError:
        return out
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("kind") == "health":
            out["health"].append(rec.get("event"))
        elif rec.get("kind") == "threat":
            out["threatScores"][rec.get("peer")] = rec.get("score")
        elif rec.get("kind") == "message" and rec.get("dir") == "in":
            key = rec["event"] + (f":{rec['reason']}" if rec.get("reason") else "")
            out["messages"][key] = out["messages"].get(key, 0) + 1
        elif rec.get("kind", "envelope") == "envelope" and rec.get("dir") == "in":
            accepted = rec.get("outcome") == "accepted"
            bucket = out["accepted" if accepted else "rejected"]
            key = rec.get("peer") if accepted else rec.get("reason")
            bucket[key] = bucket.get(key, 0) + 1
    return out


def shapes(args, env: dict, work: str) -> dict:
    root, key = os.path.join(work, "env"), os.path.join(work, "speed.key")
    here = {**os.environ, "PYTHONPATH": REPO}
    subprocess.run([sys.executable, "-m", "speed_runtime", "keygen", key], env=here, check=True, cwd=work,
                   capture_output=True)
    senders = [f"s{i}" for i in range(args.senders)]
    cmd = [sys.executable, "-m", "speed_runtime", "node", "--dir", root, "--key", key, "--name", "r", "--trace"]
    for name in senders:
        cmd += ["--allow", name]
    if args.chunks:
        cmd += ["--feature", "chunks"]
    if args.threat:
        cmd += ["--feature", "quota"]
    if args.blocked:
        cmd.append("--echo-messages")
    limit = args.ulimit_v * MiB if args.ulimit_v else None
    receiver = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=work,
                                preexec_fn=(lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
                                if limit else None)
    stderr: list[bytes] = []
    threading.Thread(target=lambda: stderr.extend(receiver.stderr), daemon=True).start()
    try:
        assert receiver.stdout.readline().startswith(b"ready"), b"".join(stderr)[-2000:]
        start = _rss(receiver.pid, "VmRSS")
        began = time.monotonic()
        sends = [subprocess.Popen([sys.executable, "-c", SHAPE_SENDER, root, key, name, args.shape, str(args.size),
                                   str(args.count), "1" if args.chunks else "0"], env=here, cwd=work,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for name in senders]
        failed = [p.communicate(timeout=3600)[1].decode()[-500:] for p in sends if p.wait(3600)]
        sent = time.monotonic() - began
        expected = args.senders * args.count
        if args.blocked:  # the read-ahead fills behind the blocked handler, then it is released
            time.sleep(args.hold_seconds)
            blocked_peak = _rss(receiver.pid, "VmHWM")
            handled = 0
            deadline = time.monotonic() + args.watch_seconds
            while handled < expected and time.monotonic() < deadline and receiver.stdout.readline():
                handled += 1
        else:
            blocked_peak = None
            deadline = time.monotonic() + args.watch_seconds
            while time.monotonic() < deadline:
                seen = _journal(root)["messages"]
                if sum(seen.values()) >= expected or (not args.chunks and sum(_journal(root)["accepted"].values())
                                                       >= expected):
                    break
                time.sleep(0.5)
            handled = None
        time.sleep(0.5)  # the journal is flushed every 250 ms
        report = {"checkout": args.checkout, "shape": args.shape, "sizeBytes": args.size, "count": args.count,
                  "senders": args.senders, "chunks": args.chunks, "blocked": args.blocked, "ulimitVMiB": args.ulimit_v,
                  "sendSeconds": round(sent, 2), "sendFailures": failed, "receiverStartMB": round(start, 1),
                  "receiverPeakMB": round(_rss(receiver.pid, "VmHWM"), 1),
                  "receiverPeakWhileBlockedMB": None if blocked_peak is None else round(blocked_peak, 1),
                  "handledAfterRelease": handled, "receiverAlive": receiver.poll() is None,
                  "journal": _journal(root), "loadAverage": os.getloadavg()[0]}
        return report
    finally:
        receiver.kill()
        receiver.wait()


def flood(args, env: dict, work: str) -> dict:
    root, key = os.path.join(work, "env"), os.path.join(work, "speed.key")
    subprocess.run([sys.executable, "-m", "speed_runtime", "keygen", key], env=env, check=True, cwd=work,
                   capture_output=True)
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER, root, key, str(args.delay_ms), str(args.size)],
                                stdout=subprocess.PIPE, text=True, env=env, cwd=work)
    try:
        assert receiver.stdout.readline().strip() == "ready"
        start = _rss(receiver.pid, "VmRSS")
        sender = subprocess.run([sys.executable, "-c", SENDER, root, key, str(args.count), str(args.size)],
                                capture_output=True, text=True, env=env, timeout=3600, cwd=work)
        if sender.returncode:
            raise RuntimeError(sender.stderr[-2000:])
        deadline = time.monotonic() + args.watch_seconds
        while time.monotonic() < deadline:
            receiver.stdout.readline()
        handled = int(receiver.stdout.readline())
        return {"checkout": args.checkout, "count": args.count, "sizeBytes": args.size, "delayMs": args.delay_ms,
                "sendSeconds": round(float(sender.stdout), 2), "receiverStartMB": round(start, 1),
                "receiverPeakMB": round(_rss(receiver.pid, "VmHWM"), 1), "handledAfterWatch": handled,
                "loadAverage": os.getloadavg()[0]}
    finally:
        receiver.kill()
        receiver.wait()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=4000)
    parser.add_argument("--size", type=int, default=256 * 1024)
    parser.add_argument("--delay-ms", type=float, default=10.0)
    parser.add_argument("--watch-seconds", type=float, default=20.0, help="how long to watch after the sends")
    parser.add_argument("--shape", choices=("objects", "string", "bytes"), help="the shapes mode (see above)")
    parser.add_argument("--senders", type=int, default=1)
    parser.add_argument("--chunks", action="store_true", help="send as chunked messages (extension chunks)")
    parser.add_argument("--blocked", action="store_true", help="block the receiver's handler while sending")
    parser.add_argument("--hold-seconds", type=float, default=10.0, help="with --blocked: how long it stays blocked")
    parser.add_argument("--ulimit-v", type=int, default=0, metavar="MiB", help="the receiver's address-space limit")
    parser.add_argument("--threat", action="store_true", help="the receiver enables quota (threat scores, journaled)")
    parser.add_argument("--checkout", default=REPO, help="the receiver's checkout (the senders run this one)")
    args = parser.parse_args(argv)
    env = {**os.environ, "PYTHONPATH": os.path.abspath(args.checkout)}
    work = tempfile.mkdtemp(prefix="speed-flood-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        print(json.dumps(shapes(args, env, work) if args.shape else flood(args, env, work)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
