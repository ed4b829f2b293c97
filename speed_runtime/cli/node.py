"""`speed node`: a headless node until SIGINT or SIGTERM (contract §7), or until an operator it
trusts asks it to stop (the `control` extension)."""
from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import sys
import threading
from typing import Any

from ..core.errors import ConfigError, LeaseLostError, SpeedError
from ..demo import DEMO_SERVICES
from .common import (EXIT_LEASE_LOST, EXIT_OK, add_common, add_durable_on_tmpfs, add_feature_options, add_lock_timeout,
                     durable_asked, env_key, log_to_stderr, node_options, seconds)


def add_parser(sub) -> None:
    p = sub.add_parser("node", help="run a headless node until SIGINT/SIGTERM")
    add_common(p)
    add_lock_timeout(p)
    p.add_argument("--name", required=True, help="the node's name: 1 to 64 of A-Z a-z 0-9 _ -, not starting with -")
    p.add_argument("--group", action="append", default=[], metavar="G", help="fabric (repeatable)")
    p.add_argument("--allow", action="append", default=[], metavar="N", help="node that may write to us (repeatable)")
    p.add_argument("--service", action="append", default=[], metavar="S", choices=sorted(DEMO_SERVICES),
                   help="demo service to offer: " + ", ".join(sorted(DEMO_SERVICES)))
    add_feature_options(p, one_shot=False)
    p.add_argument("--operator", action="append", default=[], metavar="PUBKEY",
                   help="trust this operator's public key for control requests (repeatable; enables the "
                        "control extension; `speed operator keygen` prints it)")
    p.add_argument("--trace", action="store_true", help="write the trace journal to speed_traces/NAME.jsonl")
    p.add_argument("--durable", action="store_true",
                   help="enable durable delivery (feature `durable`): needs a persistent --dir, not tmpfs")
    add_durable_on_tmpfs(p)
    p.add_argument("--durable-open-ledgers", type=int, default=None, metavar="N",
                   help="with --durable: senders' ledger logs kept open at once, the least recently used closed "
                        "first (default 32, and at most an eighth of `ulimit -n`; bounds the descriptors whatever "
                        "the number of senders)")
    p.add_argument("--lease", type=seconds, default=30.0, metavar="SECONDS", help="lease duration (default 30)")
    p.add_argument("--heartbeat", type=seconds, default=5.0, metavar="SECONDS",
                   help="renewal interval (default 5)")
    p.add_argument("--reap", action=argparse.BooleanOptionalAction, default=None,
                   help="remove other nodes' entries once they have been stale for a minute (default: on)")
    p.add_argument("--echo-messages", action="store_true",
                   help="print every received MESSAGE as a JSON line on stdout (this prints plaintext)")
    p.add_argument("--control-stdin", action="store_true",
                   help="read `allow NAME` and `revoke NAME` lines on stdin and apply them at once "
                        "(for the process that started this node, such as the console)")
    p.set_defaults(func=cmd_node)


def node_parser() -> argparse.ArgumentParser:
    """`speed node`'s own parser (the console checks and runs the lines it shows with it)."""
    sub = argparse.ArgumentParser(prog="speed").add_subparsers()
    add_parser(sub)
    return sub.choices["node"]


def node_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The Node(...) keyword arguments `speed node`'s options give (all but --dir, --key, --name)."""
    options: dict[str, Any] = {"reap_stale": args.reap} if args.reap is not None else {}
    if args.durable_open_ledgers is not None:
        if not durable_asked(args):
            raise ConfigError("--durable-open-ledgers goes with --durable")
        options["durable_open_ledgers"] = args.durable_open_ledgers
    return dict(groups=args.group, allow=args.allow, trace=args.trace, lease_seconds=args.lease,
                heartbeat_seconds=args.heartbeat, lock_timeout=args.lock_timeout, operators=args.operator,
                durable=args.durable, **options, **node_options(args))


def cmd_node(args: argparse.Namespace) -> int:
    from ..node import Node

    log_to_stderr()
    stop = threading.Event()
    lost: list[LeaseLostError] = []
    node = Node(args.dir, env_key(args), args.name, **node_settings(args))
    for service in dict.fromkeys(args.service):
        node.register(service, DEMO_SERVICES[service])
    ready = threading.Event()  # the `ready` line comes first, before any message a sender was quick to send
    if args.echo_messages:
        lock = threading.Lock()

        def echo(msg) -> None:
            data = msg.data if not isinstance(msg.data, bytes) else {"base64": base64.b64encode(msg.data).decode()}
            line = {"from": msg.sender, "seq": msg.seq, "data": data}
            if msg.durable_id is not None:
                line.update(durableId=msg.durable_id, redelivered=msg.redelivered)
            ready.wait()
            with lock:
                print(json.dumps(line), flush=True)

        node.on_message(echo)
    else:
        node.on_message(lambda msg: None)
    node.on_lease_lost(lambda exc: (lost.append(exc), stop.set()))
    if "control" in node.extensions:  # an operator's `speed stop` ends this process like SIGTERM
        node.extensions["control"].on_stop(stop.set)
    # Until the node runs, SIGTERM keeps its default (end the process: nothing is registered yet, and
    # the kernel drops a registry lock we might hold) and SIGINT raises KeyboardInterrupt, so a
    # start-up waiting for a held lock is never deaf to signals. Once it runs, both stop it gracefully.
    with node:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        print(f"ready {node.name} id={node.id} pid={os.getpid()}", flush=True)
        ready.set()
        if args.control_stdin:
            threading.Thread(target=_control, args=(node, sys.stdin), name="speed-control", daemon=True).start()
        while not stop.wait(0.5):
            pass
    if lost:
        print(f"speed: {lost[0]}; stopped", file=sys.stderr)
        return EXIT_LEASE_LOST
    return EXIT_OK


def _control(node, lines) -> None:
    """Apply `allow NAME` / `revoke NAME` lines; answer each on stderr, never stop the node. The
    answer is one line of bounded length: what changed and how many names are allowed now (not the
    whole list, which made a long run of grants cost stderr quadratic in their number)."""
    for line in lines:
        words = line.split()
        if not words:
            continue
        try:
            if len(words) != 2 or words[0] not in ("allow", "revoke"):
                raise ConfigError(f"unknown control line {line.strip()[:80]!r}: use `allow NAME` or `revoke NAME`")
            verb, name = words
            before = len(node.allowed)
            (node.allow if verb == "allow" else node.revoke)(name)  # (a name it accepts is a valid, short one)
            count = len(node.allowed)
            if verb == "allow":
                outcome = "allowed" if count != before else "already allowed"
            else:
                outcome = "revoked" if count != before else "was not allowed"
            print(f"speed: {verb} {name}: {outcome} ({count} {'name' if count == 1 else 'names'} allowed)",
                  file=sys.stderr, flush=True)
        except SpeedError as exc:
            print(f"speed: {exc}", file=sys.stderr, flush=True)
