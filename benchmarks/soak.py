"""Soak: many nodes in separate processes exchange MESSAGEs and SPC calls while granting and
revoking each other at random; then every envelope is accounted for (issue 5, case 16).

  python benchmarks/soak.py --ci      # 8 nodes, 5,000 messages, 500 calls (the CI test runs this)
  python benchmarks/soak.py --long    # 50 nodes, 500,000 messages, 50,000 calls
  python benchmarks/soak.py --nodes 20 --messages 100000 --calls 10000 --revoke-every 300
  python benchmarks/soak.py --burst 100000   # case 12: 100,000 envelopes at once, inotify overflow

Each worker process runs one Node offering `echo`. It sends MESSAGEs {"k": i} to random peers and
calls `echo` on random peers (a few calls outstanding at a time), and now and then revokes a random
peer for a while. Every worker records what its node sent, accepted, rejected (and whether the
rejection was explained: `unauthorized` while the sender was not allowed), what its handler got
and how each call ended. The coordinator then checks, per (sender, receiver) link:

  zero lost        every envelope sent is accepted or rejected with a reason by its receiver
  zero duplicated  no envelope is accepted twice, no MESSAGE handed to the application twice
  order            accepted sequence numbers increase in arrival order; the handler sees them in order
  explained        every rejection is `unauthorized` while the receiver had the sender revoked; every
                   failed call overlaps a revoke between caller and callee
  integrity        every MESSAGE's data and every `echo` result is what was sent

and prints one JSON report (exit status 1 if any check fails).
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
from collections import Counter
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED
from concurrent.futures import wait as futures_wait

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from benchmarks.soak_check import check, message_keys  # noqa: E402  (after the path is set)


# ---------------------------------------------------------------- worker
def worker(args: argparse.Namespace) -> int:
    from speed_runtime import AccessDeniedError, EnvelopeTrace, Node, SpcError

    peers = args.peers.split(",")
    rng = random.Random(args.seed)
    lock = threading.Lock()
    sent, accepted, rejected, handled, calls, revokes, errors = [], [], [], [], [], [], []
    node = Node(args.root, args.key, args.name, allow=peers, lease_seconds=args.lease,
                heartbeat_seconds=args.heartbeat, lane_workers=4, spc_workers=4)

    def observe(e) -> None:
        if not isinstance(e, EnvelopeTrace):
            return
        if e.outcome != "rejected" and e.type not in ("MESSAGE", "SPC_REQUEST", "SPC_RESPONSE"):
            return  # rejections read unread have no type; EVENTs (leave) come only after the dump
        with lock:
            if e.outcome == "sent":
                sent.append((e.peer, e.type, e.seq, e.request_id))
            elif e.outcome == "accepted":
                accepted.append((e.peer, e.type, e.seq))
            else:
                # unauthorized: the sender was revoked; unexpected_response: a response that came after
                # its call had timed out (revokes make callers time out), contract 1.1 §5.5 step 6
                explained = ((e.reason == "unauthorized" and (e.peer not in node.allowed or _revoked_lately(e.peer)))
                             or (e.reason == "unexpected_response" and e.type == "SPC_RESPONSE"))
                rejected.append((e.peer, e.seq, e.reason, explained))

    def _revoked_lately(peer: str) -> bool:
        """The grant may come back between the check and this record: a revoke that ended less than
        a second ago explains the rejection too."""
        now = time.time()
        return any(r[0] == peer and (r[2] is None or r[2] >= now - 1.0) for r in revokes[-50:])

    def on_message(m) -> None:
        handled.append((m.sender, m.seq, m.data.get("k") if isinstance(m.data, dict) else None))

    node.add_observer(observe)
    node.on_message(on_message)
    node.register("echo", lambda arguments: arguments)
    node.start()
    print("started", flush=True)
    if sys.stdin.readline().strip() != "go":
        node.close()
        return 2
    deadline = time.monotonic() + 120
    while set(peers) - set(node.peers()) and time.monotonic() < deadline:
        time.sleep(0.05)  # wait (bounded) until every peer is visible in the registry cache

    revoked: dict[str, int] = {}  # peer -> op index at which to grant it again
    outstanding: list = []
    msg_k = 0
    total = args.messages + args.calls
    call_share = args.calls / total if total else 0
    calls_left, msgs_left = args.calls, args.messages

    def settle(block: bool) -> None:
        """Record finished calls; with block, wait until one finishes (or all, if block == 'all')."""
        if block and outstanding:
            futures_wait([o[0] for o in outstanding], return_when=ALL_COMPLETED if block == "all" else FIRST_COMPLETED)
        for entry in [o for o in outstanding if o[0].done()]:
            outstanding.remove(entry)
            future, rid, target, k, t0 = entry
            try:
                result = future.result()
                outcome = "ok" if result == {"k": k} else "mismatch"
            except SpcError as exc:
                outcome = f"error:{exc.code}"
            calls.append((target, k, outcome, t0, time.time()))

    for op in range(total):
        for peer, until in list(revoked.items()):
            if op >= until:
                node.allow(peer)
                del revoked[peer]
                revokes[-1 - next(i for i, r in enumerate(reversed(revokes)) if r[0] == peer)][2] = time.time()
        if args.revoke_every and rng.random() < 1 / args.revoke_every:
            peer = rng.choice(peers)
            if peer not in revoked:
                revokes.append([peer, time.time(), None])
                node.revoke(peer)
                revoked[peer] = op + rng.randint(5, 200)
        target = rng.choice(peers)
        do_call = calls_left and (not msgs_left or rng.random() < call_share)
        try:
            if do_call:
                calls_left -= 1
                while len(outstanding) >= args.window:
                    settle(True)
                t0 = time.time()
                future = node.call_async(target, "echo", {"k": op}, timeout=args.call_timeout)
                outstanding.append((future, None, target, op, t0))
            else:
                msgs_left -= 1
                node.send(target, {"k": msg_k})
                msg_k += 1
        except AccessDeniedError:
            calls.append((target, op, "denied", time.time(), time.time())) if do_call else errors.append(
                ["denied-send", target])
        except Exception as exc:  # anything else is unexplained
            errors.append([type(exc).__name__, str(exc)[:200]])
        settle(False)
    settle("all")
    for peer in list(revoked):
        node.allow(peer)
        revokes[-1 - next(i for i, r in enumerate(reversed(revokes)) if r[0] == peer)][2] = time.time()
    print("done", flush=True)

    if sys.stdin.readline().strip() != "dump":
        node.close()
        return 2
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the lanes hand accepted MESSAGEs to the handler a little later
        with lock:
            want = sum(1 for a in accepted if a[1] == "MESSAGE")
        if len(handled) >= want:
            break
        time.sleep(0.05)
    with lock:
        log = {"name": args.name, "sent": sent, "accepted": accepted, "rejected": rejected, "handled": handled,
               "calls": calls, "revokes": revokes, "errors": errors, "counters": node.counters()}
    with open(os.path.join(args.out, f"{args.name}.json"), "w") as f:
        json.dump(log, f)
    print("dumped", flush=True)
    sys.stdin.readline()
    node.close()
    return 0


# ---------------------------------------------------------------- inotify burst (case 12, long mode)
def burst_sender(args: argparse.Namespace) -> int:
    from speed_runtime import Node

    with Node(args.root, args.key, args.name, allow=["sink"], linger_seconds=60) as node:
        print("ready", flush=True)
        sys.stdin.readline()
        for i in range(args.messages):
            node.send("sink", {"n": i})
        print("done", flush=True)
        sys.stdin.readline()
    return 0


def burst(args: argparse.Namespace) -> int:
    """N envelopes from 4 sender processes at one in-process receiver whose inotify queue keeps the
    system's limit: count IN_Q_OVERFLOW wake-ups and measure how late the envelopes arrive."""
    from speed_runtime import Node, generate_key_file

    base = tempfile.mkdtemp(prefix="speed-burst-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    os.chmod(base, 0o700)
    root, key = os.path.join(base, "env"), os.path.join(base, "speed.key")
    generate_key_file(key)
    senders, per = 4, args.burst // 4
    arrivals, procs, overflows = [], [], 0
    with open("/proc/sys/fs/inotify/max_queued_events") as f:
        limit = int(f.read())
    try:
        with Node(root, key, "sink", allow=[f"b{i}" for i in range(senders)]) as sink:
            sink.on_message(lambda m: arrivals.append((m.sender, m.data["n"], time.time() * 1000 - m.timestamp_ms)))
            for i in range(senders):
                procs.append(subprocess.Popen(
                    [sys.executable, os.path.abspath(__file__), "burst-sender", "--root", root, "--key", key,
                     "--name", f"b{i}", "--messages", str(per)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}))
            for p in procs:
                assert p.stdout.readline().strip() == "ready"
            started = time.monotonic()
            for p in procs:
                p.stdin.write("go\n")
                p.stdin.flush()
            for p in procs:
                assert p.stdout.readline().strip() == "done"
            sent_s = time.monotonic() - started
            deadline = time.monotonic() + 600
            while len(arrivals) < senders * per and time.monotonic() < deadline:
                time.sleep(0.05)
            drain = time.monotonic() - started - sent_s
            for p in procs:
                p.stdin.write("bye\n")
                p.stdin.flush()
                p.wait(120)
            rejected = sink.counters()["rejected"]
            overflows = sink.counters().get("inotifyOverflows", 0)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(base, ignore_errors=True)
    order = {}
    for sender, n, _ in arrivals:
        order.setdefault(sender, []).append(n)
    delays = sorted(d for _, _, d in arrivals) or [0]
    report = {"burst": senders * per, "arrived": len(arrivals), "inotifyQueueLimit": limit,
              "overflows": overflows, "inOrderPerSender": all(v == list(range(per)) for v in order.values()),
              "sendSeconds": round(sent_s, 1), "drainAfterLastSendSeconds": round(drain, 2),
              "delayP50Ms": round(delays[len(delays) // 2]), "delayP99Ms": round(delays[int(len(delays) * .99)]),
              "delayMaxMs": round(delays[-1]), "rejected": rejected}
    report["ok"] = report["arrived"] == report["burst"] and report["inOrderPerSender"] and not rejected
    print(json.dumps(report, indent=1))
    return 0 if report["ok"] else 1


# ---------------------------------------------------------------- coordinator
def _inboxes_empty(root: str, names: list[str]) -> bool:
    return all(not any(f.endswith(".env") for f in os.listdir(os.path.join(root, n, "inbox"))) for n in names)


def coordinate(args: argparse.Namespace) -> int:
    from speed_runtime import generate_key_file

    names = [f"n{i:02d}" for i in range(args.nodes)]
    base = tempfile.mkdtemp(prefix="speed-soak-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    os.chmod(base, 0o700)
    root, key, out = os.path.join(base, "env"), os.path.join(base, "speed.key"), os.path.join(base, "logs")
    os.mkdir(out, 0o700)
    generate_key_file(key)
    rng = random.Random(args.seed)
    per_msgs = [args.messages // args.nodes + (1 if i < args.messages % args.nodes else 0) for i in range(args.nodes)]
    per_calls = [args.calls // args.nodes + (1 if i < args.calls % args.nodes else 0) for i in range(args.nodes)]
    procs: list[subprocess.Popen] = []
    phases = {}
    started = time.monotonic()
    try:
        for i, name in enumerate(names):
            peers = ",".join(n for n in names if n != name)
            cmd = [sys.executable, os.path.abspath(__file__), "worker", "--root", root, "--key", key, "--name", name,
                   "--peers", peers, "--messages", str(per_msgs[i]), "--calls", str(per_calls[i]),
                   "--seed", str(rng.getrandbits(32)), "--revoke-every", str(args.revoke_every),
                   "--window", str(args.window), "--call-timeout", str(args.call_timeout), "--out", out,
                   "--lease", str(args.lease), "--heartbeat", str(args.heartbeat)]
            procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                          env={**os.environ, "PYTHONUNBUFFERED": "1"}))

        def expect(word: str) -> None:
            for p, name in zip(procs, names):
                line = p.stdout.readline().strip()
                if line != word:
                    raise RuntimeError(f"worker {name} said {line!r} instead of {word!r} (exit {p.poll()})")

        def tell(word: str) -> None:
            for p in procs:
                p.stdin.write(word + "\n")
                p.stdin.flush()
        expect("started")
        phases["startSeconds"] = round(time.monotonic() - started, 1)
        t0 = time.monotonic()
        tell("go")
        expect("done")
        phases["trafficSeconds"] = round(time.monotonic() - t0, 1)
        t1 = time.monotonic()
        quiet_since = None
        while time.monotonic() - t1 < 300:
            if _inboxes_empty(root, names):
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 1.0:
                    break
            else:
                quiet_since = None
            time.sleep(0.1)
        phases["drainSeconds"] = round(time.monotonic() - t1, 1)
        tell("dump")
        expect("dumped")
        tell("exit")
        exits = [p.wait(120) for p in procs]
        logs = {}
        for name in names:
            with open(os.path.join(out, f"{name}.json")) as f:
                logs[name] = json.load(f)
        report = check(logs, message_keys(logs))
        report.update(phases)
        report["nodes"] = args.nodes
        report["workerExits"] = Counter(exits)
        report["seconds"] = round(time.monotonic() - started, 1)
        report["envelopesPerSecond"] = round(report["envelopes"] / max(phases["trafficSeconds"], 0.1))
        report["ok"] = (not any(report[k] for k in ("lost", "duplicated", "outOfOrder", "unexplained", "mismatched",
                                                     "phantom", "unexpectedErrors"))
                        and set(exits) == {0})
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(report, indent=1, default=list))
    return 0 if report["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command")
    w = sub.add_parser("worker")
    for flag, kind in (("--root", str), ("--key", str), ("--name", str), ("--peers", str), ("--messages", int),
                       ("--calls", int), ("--seed", int), ("--revoke-every", int), ("--window", int),
                       ("--call-timeout", float), ("--out", str), ("--lease", float), ("--heartbeat", float)):
        w.add_argument(flag, type=kind, required=True)
    b = sub.add_parser("burst-sender")
    for flag, kind in (("--root", str), ("--key", str), ("--name", str), ("--messages", int)):
        b.add_argument(flag, type=kind, required=True)
    p.add_argument("--burst", type=int, metavar="N",
                   help="instead of the soak: burst N envelopes from 4 processes at one receiver (inotify overflow)")
    p.add_argument("--ci", action="store_true", help="8 nodes, 5,000 messages, 500 calls, 10 s call timeout")
    p.add_argument("--long", action="store_true", help="50 nodes, 500,000 messages, 50,000 calls")
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--messages", type=int, default=5000)
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--revoke-every", type=int, default=100, help="each op revokes a peer with probability 1/N")
    p.add_argument("--window", type=int, default=16, help="outstanding calls per worker")
    p.add_argument("--call-timeout", type=float, default=20.0)
    p.add_argument("--lease", type=float, default=30.0)
    p.add_argument("--heartbeat", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--keep", action="store_true", help="keep the directory with the workers' logs")
    args = p.parse_args(argv)
    if args.command == "worker":
        return worker(args)
    if args.command == "burst-sender":
        return burst_sender(args)
    if args.burst:
        return burst(args)
    if args.long:
        args.nodes, args.messages, args.calls = 50, 500_000, 50_000
        args.revoke_every, args.call_timeout, args.lease = 1000, 120.0, 60.0
    elif args.ci:
        args.nodes, args.messages, args.calls, args.call_timeout = 8, 5000, 500, 10.0
    return coordinate(args)


if __name__ == "__main__":
    sys.exit(main())
