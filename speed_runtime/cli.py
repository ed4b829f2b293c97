"""The `speed` command: keygen, node, call, send, registry, reap, outbox, receipts.

Exit codes (stable, for scripts): 0 success; 1 the remote side answered with an error (SPC error,
message not confirmed); 2 usage or configuration error (bad key, directory, name, arguments);
3 the target is unavailable or a grant is missing; 4 timeout; 5 the node lost its lease.
"""
from __future__ import annotations

import argparse
import base64
import errno
import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from typing import Any, Sequence

from . import __version__
from .core.errors import (AccessDeniedError, ConfigError, DeliveryTimeoutError, LeaseLostError, NameInUseError,
                          NodeUnavailableError, RegistryLockError, SpcError, SpeedError)
from .core.liveness import judge
from .demo import DEMO_SERVICES
from .fsutil import local_facts, prepare_root
from .keyfile import generate_key_file, load_key
from .registry import Registry

EXIT_OK, EXIT_REMOTE, EXIT_CONFIG, EXIT_UNAVAILABLE, EXIT_TIMEOUT, EXIT_LEASE_LOST = 0, 1, 2, 3, 4, 5


def default_dir() -> str:
    if os.environ.get("SPEED_DIR"):
        return os.environ["SPEED_DIR"]
    if os.path.isdir("/dev/shm"):
        return "/dev/shm/speed"
    return os.path.join(os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/speed-{os.getuid()}", "speed")


def _seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0 and at most a day."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (0 < value <= 86_400):  # also refuses inf and nan
        raise argparse.ArgumentTypeError(f"{text!r} must be a number of seconds above 0 and at most 86400")
    return value


def _common(p: argparse.ArgumentParser, key: bool = True) -> None:
    p.add_argument("--dir", default=default_dir(),
                   help="communication directory (default: $SPEED_DIR, else /dev/shm/speed)")
    if key:
        p.add_argument("--key", default=os.environ.get("SPEED_KEY"),
                       help="key file (default: $SPEED_KEY)")
        p.add_argument("--insecure-key-permissions", action="store_true",
                       help="accept a key file readable by group or others (not recommended)")


def _lock_timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lock-timeout", type=_seconds, default=10.0, metavar="SECONDS",
                   help="give up waiting for the registry lock after this long (default 10)")


def _key(args: argparse.Namespace):
    if not args.key:
        raise ConfigError("no key file given: pass --key PATH or set SPEED_KEY (create one with `speed keygen PATH`)")
    return load_key(args.key, allow_insecure=args.insecure_key_permissions)


def _json_arg(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{what} is not valid JSON ({exc.msg} at position {exc.pos}): {text[:80]!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="speed", description="SPEED: encrypted process-to-process exchange "
                                     "over the file system. Exit codes: 0 ok, 1 remote error, 2 usage/config, "
                                     "3 unavailable/access denied, 4 timeout, 5 lease lost.")
    parser.add_argument("--version", action="version", version=f"speed {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("keygen", help="create a new key file (mode 0600)")
    p.add_argument("path", help="where to write the key file")
    p.add_argument("--force", action="store_true", help="replace an existing file")
    p.set_defaults(func=cmd_keygen)

    p = sub.add_parser("node", help="run a headless node until SIGINT/SIGTERM")
    _common(p)
    _lock_timeout(p)
    p.add_argument("--name", required=True)
    p.add_argument("--group", action="append", default=[], metavar="G", help="fabric (repeatable)")
    p.add_argument("--allow", action="append", default=[], metavar="N", help="node that may write to us (repeatable)")
    p.add_argument("--service", action="append", default=[], metavar="S", choices=sorted(DEMO_SERVICES),
                   help="demo service to offer: " + ", ".join(sorted(DEMO_SERVICES)))
    p.add_argument("--feature", action="append", default=[], metavar="NAME",
                   help="enable an extension of the contract (repeatable): chunks, reliable, quota, control, durable")
    p.add_argument("--trace", action="store_true", help="write the trace journal to speed_traces/NAME.jsonl")
    p.add_argument("--durable", action="store_true",
                   help="enable durable delivery (feature `durable`): needs a persistent --dir, not tmpfs")
    p.add_argument("--durable-on-tmpfs", action="store_true",
                   help="with --durable: run on tmpfs anyway (stored messages are lost at a reboot)")
    p.add_argument("--lease", type=_seconds, default=30.0, metavar="SECONDS", help="lease duration (default 30)")
    p.add_argument("--heartbeat", type=_seconds, default=5.0, metavar="SECONDS",
                   help="renewal interval (default 5)")
    p.add_argument("--reap", action=argparse.BooleanOptionalAction, default=None,
                   help="remove other nodes' entries once they have been stale for a minute (default: on)")
    p.add_argument("--echo-messages", action="store_true",
                   help="print every received MESSAGE as a JSON line on stdout (this prints plaintext)")
    p.add_argument("--control-stdin", action="store_true",
                   help="read `allow NAME` and `revoke NAME` lines on stdin and apply them at once "
                        "(for the process that started this node, such as the console)")
    p.set_defaults(func=cmd_node)

    p = sub.add_parser("call", help="call a service once as a temporary node; prints the result as JSON")
    _common(p)
    _lock_timeout(p)
    p.add_argument("target")
    p.add_argument("service")
    p.add_argument("arguments", nargs="?", default="{}", help="JSON object (default {})")
    p.add_argument("--as", dest="name", default=None, help="caller node name (default: speed-cli-<random>)")
    p.add_argument("--timeout", type=_seconds, default=10.0, metavar="SECONDS")
    p.set_defaults(func=cmd_call)

    p = sub.add_parser("send", help="send one MESSAGE as a temporary node")
    _common(p)
    _lock_timeout(p)
    p.add_argument("target")
    p.add_argument("data", help="JSON value")
    p.add_argument("--as", dest="name", default=None, help="sender node name (default: speed-cli-<random>)")
    p.add_argument("--confirm", action="store_true", help="wait until the receiver's handler has run")
    p.add_argument("--durable", action="store_true",
                   help="store the message in the outbox of --as NAME first (it waits there until TARGET takes it)")
    p.add_argument("--ttl", type=_seconds, default=None, metavar="SECONDS",
                   help="with --durable: give up after this long (default a day)")
    p.add_argument("--timeout", type=_seconds, default=10.0, metavar="SECONDS")
    p.set_defaults(func=cmd_send)

    p = sub.add_parser("outbox", help="list the durable messages waiting in outboxes, and where")
    _common(p, key=False)
    p.add_argument("names", nargs="*", help="only these nodes' outboxes (default: every node)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_outbox)

    p = sub.add_parser("receipts", help="verify the chains of durable receipts that NAME issued")
    _common(p)
    p.add_argument("name", help="the receiver whose receipts are verified")
    p.add_argument("--sender", action="append", default=[], metavar="S", help="only the chains to S (repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON instead of lines")
    p.set_defaults(func=cmd_receipts)

    p = sub.add_parser("registry", help="list registry entries with their lease state")
    _common(p, key=False)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_registry)

    p = sub.add_parser("reap", help="remove stale (or unreadable) registry entries")
    _common(p, key=False)
    _lock_timeout(p)
    p.add_argument("names", nargs="*", help="only these names (default: every stale entry)")
    p.set_defaults(func=cmd_reap)
    return parser


def cmd_keygen(args: argparse.Namespace) -> int:
    key = generate_key_file(args.path, overwrite=args.force)
    print(f"wrote {args.path} (mode 0600, fingerprint {key.fingerprint})")
    return EXIT_OK


def _log_to_stderr() -> None:
    """The runtime reports its own problems (a failing inbox, a held registry lock) through
    logging; a headless node shows them on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("speed: %(message)s"))
    logger = logging.getLogger("speed_runtime")
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)


def cmd_node(args: argparse.Namespace) -> int:
    from .node import Node

    _log_to_stderr()
    stop = threading.Event()
    lost: list[LeaseLostError] = []
    options = {"reap_stale": args.reap} if args.reap is not None else {}
    node = Node(args.dir, _key(args), args.name, groups=args.group, allow=args.allow, trace=args.trace,
                lease_seconds=args.lease, heartbeat_seconds=args.heartbeat, lock_timeout=args.lock_timeout,
                features=args.feature, durable=args.durable, durable_on_tmpfs=args.durable_on_tmpfs, **options)
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
    """Apply `allow NAME` / `revoke NAME` lines; answer each on stderr, never stop the node."""
    for line in lines:
        words = line.split()
        if not words:
            continue
        try:
            if len(words) != 2 or words[0] not in ("allow", "revoke"):
                raise ConfigError(f"unknown control line {line.strip()[:80]!r}: use `allow NAME` or `revoke NAME`")
            (node.allow if words[0] == "allow" else node.revoke)(words[1])
            print(f"speed: {words[0]} {words[1]}: allow is now {','.join(node.allowed) or '(nobody)'}",
                  file=sys.stderr, flush=True)
        except SpeedError as exc:
            print(f"speed: {exc}", file=sys.stderr, flush=True)


def _temporary(args: argparse.Namespace):
    from .node import Node

    name = args.name or f"speed-cli-{uuid.uuid4().hex[:8]}"
    # a one-shot node: it follows no other entry than its target's, and its home goes with it
    return Node(args.dir, _key(args), name, allow=[args.target], lease_seconds=max(30.0, args.timeout + 10),
                heartbeat_seconds=5.0, observe_registry=False, temporary=args.name is None, linger_seconds=2.0,
                lock_timeout=args.lock_timeout)


def cmd_call(args: argparse.Namespace) -> int:
    arguments = _json_arg(args.arguments, "the arguments")
    if not isinstance(arguments, dict):
        raise ConfigError("the arguments must be a JSON object, for example '{\"amount\": 100}'")
    with _temporary(args) as node:
        started = time.perf_counter()
        result = node.call(args.target, args.service, arguments, timeout=args.timeout)
        elapsed = (time.perf_counter() - started) * 1000
    print(json.dumps(result, ensure_ascii=False))
    print(f"{args.service} on {args.target}: SUCCESS in {elapsed:.1f} ms", file=sys.stderr)
    return EXIT_OK


def cmd_send(args: argparse.Namespace) -> int:
    data = _json_arg(args.data, "the message")
    if args.durable:
        return _send_durable(args, data)
    with _temporary(args) as node:
        seq = node.send(args.target, data, confirm=args.confirm, timeout=args.timeout)
    print(f"sent message {seq} to {args.target}{' (confirmed)' if args.confirm else ''}", file=sys.stderr)
    return EXIT_OK


def _send_durable(args: argparse.Namespace, data: Any) -> int:
    """Durable: the message is stored in NAME's outbox (so --as NAME is needed: a one-shot name's
    home goes with it), delivered now if TARGET is online, and otherwise the next time NAME runs."""
    from .node import Node

    if not args.name:
        raise ConfigError("a durable send needs --as NAME: the message waits in NAME's outbox until it is taken")
    with Node(args.dir, _key(args), args.name, allow=[args.target], durable=True, observe_registry=False,
              linger_seconds=2.0, lock_timeout=args.lock_timeout) as node:
        try:
            msg_id = node.send(args.target, data, durable=True, ttl=args.ttl, confirm=True, timeout=args.timeout)
        except DeliveryTimeoutError:
            print(f"stored durable message in {args.name}'s outbox for {args.target}; not receipted within "
                  f"{args.timeout:g} s: it is delivered when both run (`speed outbox` lists it)", file=sys.stderr)
            return EXIT_OK
    print(f"durable message {msg_id} to {args.target}: handled (receipted)", file=sys.stderr)
    return EXIT_OK


def cmd_outbox(args: argparse.Namespace) -> int:
    from .ext.durable_store import list_outboxes

    prepare_root(args.dir, create=False)
    items = list_outboxes(args.dir, args.names or None)
    now, facts = time.time(), local_facts()
    registry = Registry(args.dir, create=False)
    states: dict[str, str] = {}
    for item in items:
        if item.target not in states:
            try:
                entry = registry.read(item.target)
            except SpeedError:
                entry = None
            states[item.target] = "missing" if entry is None else judge(entry, now, facts).state
    rows = [{"node": i.node, "target": i.target, "targetState": states[i.target], "stream": i.stream, "id": i.id,
             "ageSeconds": round(now - i.created, 1), "expiresInSeconds": round(i.expires_at - now, 1),
             "size": i.size} for i in items]
    if args.json:
        print(json.dumps(rows, indent=1))
        return EXIT_OK
    if not rows:
        print(f"no durable messages wait in the outboxes of {args.dir}")
        return EXIT_OK
    table = [("NODE", "TARGET", "TARGET STATE", "ID", "WAITING", "EXPIRES IN", "BYTES")]
    table += [(r["node"], r["target"], r["targetState"], str(r["id"]), f"{r['ageSeconds']:.1f}s",
               f"{r['expiresInSeconds']:.0f}s", str(r["size"])) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return EXIT_OK


def cmd_receipts(args: argparse.Namespace) -> int:
    from .ext.durable_store import verify_receipts

    prepare_root(args.dir, create=False)
    reports = verify_receipts(args.dir, _key(args).raw, args.name, args.sender or None)
    if args.json:
        print(json.dumps([{"where": where, "receiver": r.receiver, "sender": r.sender, "stream": r.stream,
                           "receipts": r.count, "handled": r.handled, "ok": r.ok, "firstBreak": r.first_break,
                           "reason": r.reason} for where, r in reports], indent=1))
    elif not reports:
        print(f"no receipts issued by {args.name} were found in {args.dir}")
    for where, r in ([] if args.json else reports):
        verdict = "verified" if r.ok else f"BROKEN at receipt {r.first_break}: {r.reason}"
        print(f"{r.sender} <- {r.receiver} (stream {r.stream[:8]}, {where}): {r.count} receipts, "
              f"{r.handled} handled: {verdict}")
    return EXIT_OK if all(r.ok for _, r in reports) else EXIT_REMOTE


def cmd_registry(args: argparse.Namespace) -> int:
    records = Registry(args.dir, create=False).scan()
    now, facts = time.time(), local_facts()
    rows = []
    for rec in records:
        if rec.entry is None:
            rows.append({"name": rec.name, "state": "unreadable", "error": rec.error})
            continue
        e = rec.entry
        verdict = judge(e, now, facts)
        rows.append({"name": e.name, "state": verdict.state, "reason": verdict.reason,
                     "leaseLeft": round(verdict.remaining, 1),
                     "heartbeatAge": round(verdict.age, 1), "pid": e.pid, "host": e.host,
                     "runtime": e.runtime, "groups": list(e.groups), "allow": list(e.allow),
                     "services": list(e.services), "id": e.id})
    if args.json:
        print(json.dumps(rows, indent=1))
        return EXIT_OK
    if not rows:
        print(f"no registry entries in {args.dir}")
        return EXIT_OK
    header = ("NAME", "STATE", "LEASE", "BEAT", "PID", "HOST", "RUNTIME", "FABRICS", "ALLOW", "SERVICES")
    table = [header]
    for r in rows:
        if r["state"] == "unreadable":
            table.append((r["name"], "unreadable", "-", "-", "-", "-", r["error"][:40], "", "", ""))
            continue
        state = f"stale ({r['reason']})" if r["reason"] else r["state"]
        table.append((r["name"], state, f"{r['leaseLeft']:.1f}s", f"{r['heartbeatAge']:.1f}s", str(r["pid"]),
                      r["host"], r["runtime"], ",".join(r["groups"]) or "-", ",".join(r["allow"]) or "-",
                      ",".join(r["services"]) or "-"))
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip())
    return EXIT_OK


def cmd_reap(args: argparse.Namespace) -> int:
    registry = Registry(args.dir, create=False, lock_timeout=args.lock_timeout)
    names = args.names or registry.names()
    reaped = [name for name in names if registry.reap(name, time.time(), local_facts())]
    for name in reaped:
        print(f"reaped {name}")
    kept = [n for n in args.names if n not in reaped]
    for name in kept:
        print(f"speed: {name} was not reaped: it is live or has no entry", file=sys.stderr)
    if not reaped and not args.names:
        print("no stale entries")
    return EXIT_OK if not kept else EXIT_UNAVAILABLE


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SpcError as exc:
        print(f"speed: {exc}", file=sys.stderr)
        return EXIT_TIMEOUT if exc.code == "TIMEOUT" else EXIT_REMOTE
    except DeliveryTimeoutError as exc:
        print(f"speed: {exc}", file=sys.stderr)
        return EXIT_TIMEOUT
    except (NodeUnavailableError, NameInUseError, AccessDeniedError, RegistryLockError) as exc:
        print(f"speed: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except LeaseLostError as exc:
        print(f"speed: {exc}", file=sys.stderr)
        return EXIT_LEASE_LOST
    except ConfigError as exc:
        print(f"speed: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except SpeedError as exc:
        print(f"speed: {exc}", file=sys.stderr)
        return EXIT_REMOTE
    except OSError as exc:  # the operating system refused: one sentence, never a traceback
        print(f"speed: {_os_error(exc)}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return 130


def _os_error(exc: OSError) -> str:
    text = exc.strerror or str(exc)
    if exc.filename:
        text += f": {exc.filename}"
    if exc.errno == errno.EMFILE and "ulimit" not in text:
        text += " (this process may open too few files; raise the limit with `ulimit -n`)"
    return text


if __name__ == "__main__":
    sys.exit(main())
