"""`speed operator keygen|show` and the control requests `speed allow|revoke|stop|status`
(the `control` extension; docs/PROTOCOL.md "### control"). A request goes only to a node whose
entry trusts this operator's key; every outcome is one sentence on stderr, the node's answer is
JSON on stdout."""
from __future__ import annotations

import argparse
import sys

from ..operator import Operator, default_operator_key_path, generate_operator_key, load_operator_key
from ..core.visible import visible, visible_json
from .common import EXIT_OK, add_common, add_lock_timeout, env_key, seconds


def add_parsers(sub) -> None:
    p = sub.add_parser("operator", help="operator keys for control requests (keygen, show)")
    keys = p.add_subparsers(dest="operator_command", required=True, metavar="ACTION")
    k = keys.add_parser("keygen", help="create an operator key pair; prints the public key to trust")
    k.add_argument("path", nargs="?", default=None,
                   help=f"where to write the secret key (mode 0600; default {default_operator_key_path()})")
    k.add_argument("--force", action="store_true", help="replace an existing file")
    k.set_defaults(func=cmd_operator_keygen)
    k = keys.add_parser("show", help="print the public key and fingerprint of an operator key")
    k.add_argument("path", nargs="?", default=None, help=f"operator key file (default {default_operator_key_path()})")
    k.set_defaults(func=cmd_operator_show)

    for name, helptext in (("allow", "have TARGET allow PEER (a control request)"),
                           ("revoke", "have TARGET revoke PEER's grant (a control request)"),
                           ("stop", "have TARGET stop gracefully (a control request)"),
                           ("status", "print TARGET's own account of itself as JSON (a control request)"),
                           ("lift", "end SENDER's quarantine at TARGET (quota extension; a control request)")):
        p = sub.add_parser(name, help=helptext)
        add_common(p)
        add_lock_timeout(p)
        p.add_argument("target", help="the node that receives the request (it must trust the operator key)")
        if name in ("allow", "revoke"):
            p.add_argument("peer", help="the node whose grant changes")
        if name == "lift":
            p.add_argument("sender", help="the sender whose quarantine ends")
        if name == "stop":
            p.add_argument("--wait", action="store_true", help="return once TARGET has deregistered")
        p.add_argument("--operator-key", default=None, metavar="PATH",
                       help=f"operator key file (default: $SPEED_OPERATOR_KEY, else {default_operator_key_path()})")
        p.add_argument("--timeout", type=seconds, default=10.0, metavar="SECONDS",
                       help="wait this long for the answer (default 10)")
        p.set_defaults(func=cmd_request, command=name)


def _show(path: str, key) -> None:
    print(f"operator key {path}\npublic key   {key.public_text}\nfingerprint  {key.fingerprint}\n"
          f"trust it with: speed node ... --operator {key.public_text}")


def cmd_operator_keygen(args: argparse.Namespace) -> int:
    key = generate_operator_key(args.path, overwrite=args.force)
    print("wrote the secret key (mode 0600); it is never printed", file=sys.stderr)
    _show(args.path or default_operator_key_path(), key)
    return EXIT_OK


def cmd_operator_show(args: argparse.Namespace) -> int:
    _show(args.path or default_operator_key_path(), load_operator_key(args.path))
    return EXIT_OK


def cmd_request(args: argparse.Namespace) -> int:
    with Operator(args.dir, env_key(args), load_operator_key(args.operator_key), timeout=args.timeout,
                  lock_timeout=args.lock_timeout) as operator:
        if args.command == "allow":
            result = operator.allow(args.target, args.peer)
        elif args.command == "revoke":
            result = operator.revoke(args.target, args.peer)
        elif args.command == "stop":
            result = operator.stop(args.target, wait=args.wait)
        elif args.command == "lift":
            result = operator.lift(args.target, args.sender)
        else:
            result = operator.status(args.target)
    print(visible_json(result))  # the node's answer: valid JSON, its control characters as \u escapes
    print(f"speed: {visible(_sentence(args, result))}", file=sys.stderr)
    return EXIT_OK


def _sentence(args: argparse.Namespace, result: dict) -> str:
    if args.command in ("allow", "revoke"):
        change = "" if result.get("changed") else " (no change)"
        return (f"{args.command} {args.peer} on {args.target}{change}: {args.target} allows "
                f"{', '.join(result.get('allow') or []) or 'nobody'}")
    if args.command == "stop":
        return f"{args.target} is {'gone' if args.wait else 'stopping'}"
    if args.command == "lift":
        if not result.get("scores"):
            return f"{args.target} keeps no threat scores (started without --feature quota): nothing to lift"
        return (f"{args.sender}'s quarantine at {args.target} lifted" if result.get("lifted")
                else f"{args.sender} was not quarantined at {args.target}")
    return f"status of {args.target}"
