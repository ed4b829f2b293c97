"""The `speed` command: keygen, node, call, send, registry, reap; operator keygen/show and the
control requests allow, revoke, stop, status.

Exit codes (stable, for scripts): 0 success; 1 the remote side answered with an error (SPC error,
message not confirmed, control request refused); 2 usage or configuration error (bad key,
directory, name, arguments); 3 the target is unavailable or a grant is missing; 4 timeout; 5 the
node lost its lease; 6 the target does not trust this operator (control requests).

    cli/common.py    exit codes, shared options     cli/node.py      speed node
    cli/clients.py   keygen call send registry reap cli/operator.py  operator keys, control requests
"""
from __future__ import annotations

import argparse
import errno
import sys
from typing import Sequence

from .. import __version__
from ..core.errors import (AccessDeniedError, ConfigError, ControlTimeoutError, DeliveryTimeoutError, LeaseLostError,
                           NameInUseError, NodeUnavailableError, OperatorNotTrustedError, RegistryLockError,
                           SpcError, SpeedError)
from . import clients, node, operator
from .common import (EXIT_CODES, EXIT_CONFIG, EXIT_LEASE_LOST, EXIT_NOT_TRUSTED, EXIT_OK, EXIT_REMOTE, EXIT_TIMEOUT,
                     EXIT_UNAVAILABLE, default_dir)

__all__ = ["build_parser", "main", "default_dir", "EXIT_OK", "EXIT_REMOTE", "EXIT_CONFIG", "EXIT_UNAVAILABLE",
           "EXIT_TIMEOUT", "EXIT_LEASE_LOST", "EXIT_NOT_TRUSTED"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="speed", description="SPEED: encrypted process-to-process exchange "
                                     f"over the file system. Exit codes: {EXIT_CODES}.")
    parser.add_argument("--version", action="version", version=f"speed {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    clients.add_parsers(sub)
    node.add_parser(sub)
    operator.add_parsers(sub)
    return parser


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
    except OperatorNotTrustedError as exc:
        print(f"speed: {exc}", file=sys.stderr)
        return EXIT_NOT_TRUSTED
    except ControlTimeoutError as exc:
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
