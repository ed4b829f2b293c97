"""`speed keygen`, `call`, `send`, `outbox`, `receipts`, `registry`, `reap`: one-shot commands (a call or a message is
sent by a temporary node)."""
from __future__ import annotations

import argparse
import json
import sys
import time
import uuid

from typing import Any

from ..core.errors import ConfigError, DeliveryTimeoutError, SpeedError
from ..core.liveness import judge
from ..core.visible import visible, visible_json
from ..fsutil import FileRefused, local_facts, prepare_root, read_regular
from ..keyfile import generate_key_file
from ..registry import Registry
from .common import (EXIT_OK, EXIT_REMOTE, EXIT_UNAVAILABLE, add_common, add_durable_on_tmpfs, add_feature_options,
                     add_lock_timeout, env_key, json_arg, log_to_stderr, node_options, seconds)


def add_parsers(sub) -> None:
    p = sub.add_parser("keygen", help="create a new key file (mode 0600)")
    p.add_argument("path", help="where to write the key file")
    p.add_argument("--force", action="store_true", help="replace an existing file")
    p.set_defaults(func=cmd_keygen)

    p = sub.add_parser("call", help="call a service once as a temporary node; prints the result as JSON")
    add_common(p)
    add_lock_timeout(p)
    p.add_argument("target", help="the node that offers the service")
    p.add_argument("service", help="the service's name")
    p.add_argument("arguments", nargs="?", default="{}", help="JSON object (default {})")
    p.add_argument("--as", dest="name", default=None, help="caller node name (default: speed-cli-<random>)")
    p.add_argument("--timeout", type=seconds, default=10.0, metavar="SECONDS",
                   help="wait this long for the result, and for room in the target's inbox (default 10)")
    add_feature_options(p, one_shot=True)
    p.set_defaults(func=cmd_call)

    p = sub.add_parser("send", help="send one MESSAGE as a temporary node")
    add_common(p)
    add_lock_timeout(p)
    p.add_argument("target", help="the node the message is for")
    p.add_argument("data", nargs="?", help="JSON value (or --file)")
    p.add_argument("--file", metavar="PATH", help="send the raw bytes of this regular file (beyond about 750 KiB the "
                                                  "target must speak the chunks extension; up to 64 MiB)")
    p.add_argument("--as", dest="name", default=None, help="sender node name (default: speed-cli-<random>)")
    p.add_argument("--confirm", action="store_true", help="wait until the receiver's handler has run")
    p.add_argument("--reliable", action="store_true", help="wait for the acknowledgement, retransmitting meanwhile "
                                                           "(the reliable extension)")
    p.add_argument("--durable", action="store_true",
                   help="store the message in the outbox of --as NAME first (it waits there until TARGET takes it); "
                        "needs a persistent --dir, not tmpfs")
    add_durable_on_tmpfs(p)
    p.add_argument("--ttl", type=seconds, default=None, metavar="SECONDS",
                   help="with --durable: give up after this long (default a day)")
    p.add_argument("--timeout", type=seconds, default=10.0, metavar="SECONDS",
                   help="wait this long for room in the target's inbox and, with --confirm, --reliable or "
                        "--durable, for the answer (default 10)")
    add_feature_options(p, one_shot=True)
    p.set_defaults(func=cmd_send)

    p = sub.add_parser("outbox", help="list the durable messages waiting in outboxes, and where")
    add_common(p, key=False)
    p.add_argument("names", nargs="*", help="only these nodes' outboxes (default: every node)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_outbox)

    p = sub.add_parser("receipts", help="verify the chains of durable receipts that NAME issued")
    add_common(p)
    p.add_argument("name", help="the receiver whose receipts are verified")
    p.add_argument("--sender", action="append", default=[], metavar="S", help="only the chains to S (repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON instead of lines")
    p.set_defaults(func=cmd_receipts)

    p = sub.add_parser("registry", help="list registry entries with their lease state")
    add_common(p, key=False)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_registry)

    p = sub.add_parser("reap", help="remove stale (or unreadable) registry entries")
    add_common(p, key=False)
    add_lock_timeout(p)
    p.add_argument("names", nargs="*", help="only these names (default: every stale entry)")
    p.set_defaults(func=cmd_reap)


def cmd_keygen(args: argparse.Namespace) -> int:
    key = generate_key_file(args.path, overwrite=args.force)
    print(f"wrote {args.path} (mode 0600, fingerprint {key.fingerprint})")
    return EXIT_OK


def _temporary(args: argparse.Namespace):
    from ..node import Node

    log_to_stderr()  # the runtime's warnings (a held registry lock, a durable outbox on tmpfs), as `speed node`
    name = args.name or f"speed-cli-{uuid.uuid4().hex[:8]}"
    # a one-shot node: it follows no other entry than its target's, and its home goes with it
    return Node(args.dir, env_key(args), name, allow=[args.target], lease_seconds=max(30.0, args.timeout + 10),
                heartbeat_seconds=5.0, observe_registry=False, temporary=args.name is None, linger_seconds=2.0,
                lock_timeout=args.lock_timeout, **node_options(args))


def cmd_call(args: argparse.Namespace) -> int:
    arguments = json_arg(args.arguments, "the arguments")
    if not isinstance(arguments, dict):
        raise ConfigError("the arguments must be a JSON object, for example '{\"amount\": 100}'")
    with _temporary(args) as node:
        started = time.perf_counter()
        result = node.call(args.target, args.service, arguments, timeout=args.timeout)
        elapsed = (time.perf_counter() - started) * 1000
    print(visible_json(result))  # the service's answer: valid JSON, its control characters as \u escapes
    print(f"{args.service} on {args.target}: SUCCESS in {elapsed:.1f} ms", file=sys.stderr)
    return EXIT_OK


def cmd_send(args: argparse.Namespace) -> int:
    if (args.file is None) == (args.data is None):
        raise ConfigError("give the message either as a JSON value or as --file PATH")
    data = read_message_file(args.file) if args.file is not None else json_arg(args.data, "the message")
    if args.durable:
        if args.reliable:
            raise ConfigError("choose --durable or --reliable, not both")
        return _send_durable(args, data)
    if args.reliable and "reliable" not in node_options(args)["features"]:
        raise ConfigError("--reliable needs the reliable extension: add --feature reliable")
    with _temporary(args) as node:
        if args.reliable:
            delivered = node.send(args.target, data, confirm=args.confirm, timeout=args.timeout, reliable=True).result()
            print(f"message {delivered.message_id} to {args.target} acknowledged after {delivered.transmissions} "
                  "transmission(s)", file=sys.stderr)
            return EXIT_OK
        seq = node.send(args.target, data, confirm=args.confirm, timeout=args.timeout)
    print(f"sent message {seq} to {args.target}{' (confirmed)' if args.confirm else ''}", file=sys.stderr)
    return EXIT_OK


def _send_durable(args: argparse.Namespace, data: Any) -> int:
    """Durable: the message is stored in NAME's outbox (so --as NAME is needed: a one-shot name's
    home goes with it), delivered now if TARGET is online, and otherwise the next time NAME runs."""
    from ..node import Node

    if not args.name:
        raise ConfigError("a durable send needs --as NAME: the message waits in NAME's outbox until it is taken")
    log_to_stderr()
    with Node(args.dir, env_key(args), args.name, allow=[args.target], durable=True, observe_registry=False,
              linger_seconds=2.0, lock_timeout=args.lock_timeout, **node_options(args)) as node:
        try:
            msg_id = node.send(args.target, data, durable=True, ttl=args.ttl, confirm=True, timeout=args.timeout)
        except DeliveryTimeoutError:
            print(f"stored durable message in {args.name}'s outbox for {args.target}; not receipted within "
                  f"{args.timeout:g} s: it is delivered when both run, and a copy {args.target} takes later is receipted "
                  f"in its ledger; {args.name} takes the receipt the next time it runs (`speed outbox` lists it)",
                  file=sys.stderr)
            return EXIT_OK
    print(f"durable message {msg_id} to {args.target}: handled (receipted)", file=sys.stderr)
    return EXIT_OK


def cmd_outbox(args: argparse.Namespace) -> int:
    from ..ext.durable_store import list_outboxes

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
             "size": i.size, "receipted": i.receipted or None} for i in items]
    table = [("NODE", "TARGET", "TARGET STATE", "ID", "WAITING", "EXPIRES IN", "BYTES", "MESSAGE")]
    table += [(r["node"], r["target"], r["targetState"], str(r["id"]), f"{r['ageSeconds']:.1f}s",
               f"{r['expiresInSeconds']:.0f}s", str(r["size"]), i.state) for r, i in zip(rows, items)]
    code = print_rows(args.json, rows, table, f"no durable messages wait in the outboxes of {args.dir}")
    taken = sum(1 for i in items if i.receipted)
    if taken and not args.json:  # why a message its target took is still listed, once
        print(f"{taken} of {len(items)} already receipted by their target: each stays in its sender's outbox until "
              "the sender takes the receipt, the next time it runs", file=sys.stderr)
    return code



def cmd_receipts(args: argparse.Namespace) -> int:
    from ..ext.durable_store import verify_receipts

    prepare_root(args.dir, create=False)
    reports = verify_receipts(args.dir, env_key(args).raw, args.name, args.sender or None)
    if args.json:
        print(json.dumps([{"where": where, "receiver": r.receiver, "sender": r.sender, "stream": r.stream,
                           "receipts": r.count, "handled": r.handled, "ok": r.ok, "firstBreak": r.first_break,
                           "reason": r.reason} for where, r in reports], indent=1))
    elif not reports:
        print(f"no receipts issued by {args.name} were found in {args.dir}")
    for where, r in ([] if args.json else reports):
        verdict = "verified" if r.ok else f"BROKEN at receipt {r.first_break}: {r.reason}"
        print(visible(f"{r.sender} <- {r.receiver} (stream {r.stream[:8]}, {where}): {r.count} receipts, "
                      f"{r.handled} handled: {verdict}"))
    return EXIT_OK if all(r.ok for _, r in reports) else EXIT_REMOTE


MAX_FILE_MESSAGE = 64 * 1024 * 1024


def read_message_file(path: str) -> bytes:
    """The bytes of a regular file of at most 64 MiB (a FIFO or a device would block or never end)."""
    try:  # (a path the user named: a symbolic link to a regular file is followed)
        return read_regular(path, MAX_FILE_MESSAGE, follow=True)[0]
    except FileRefused as exc:
        if exc.reason == "not_regular":
            raise ConfigError(f"{path} is not a regular file; --file sends the bytes of a regular file") from None
        if exc.reason == "too_large":
            raise ConfigError(f"{path} has {exc.size} bytes; a message holds at most {MAX_FILE_MESSAGE} bytes") from None
        raise


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
    return print_rows(args.json, rows, table, f"no registry entries in {args.dir}")


def print_rows(as_json: bool, rows: list[dict], table: list[tuple], empty: str) -> int:
    """The rows as JSON, or the table (its first row the header) in aligned columns, or `empty`."""
    if as_json:
        print(json.dumps(rows, indent=1))
    elif not rows:
        print(empty)
    else:
        table = [tuple(visible(str(cell)) for cell in row) for row in table]  # names, hosts, errors: one line each
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        for row in table:
            print("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip())
    return EXIT_OK


def cmd_reap(args: argparse.Namespace) -> int:
    registry = Registry(args.dir, create=False, lock_timeout=args.lock_timeout)
    names = args.names or registry.names()
    reaped = [name for name in names if registry.reap(name, time.time(), local_facts())]
    for name in reaped:
        print(f"reaped {visible(name)}")
    kept = [n for n in args.names if n not in reaped]
    for name in kept:
        print(f"speed: {visible(name)} was not reaped: it is live or has no entry", file=sys.stderr)
    if not reaped and not args.names:
        print("no stale entries")
    return EXIT_OK if not kept else EXIT_UNAVAILABLE
