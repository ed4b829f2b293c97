"""The `speed` command: keygen, node, call, send, registry, reap; operator keygen/show and the
control requests allow, revoke, stop, status.

Exit codes (stable, for scripts): 0 success; 1 the remote side answered with an error (SPC error,
message not confirmed, control request refused); 2 usage or configuration error (bad key,
directory, name, arguments); 3 the target is unavailable or a grant is missing; 4 timeout; 5 the
node lost its lease; 6 the target does not trust this operator (control requests); 141 standard
output was closed by its reader (`speed registry | head -1`), quietly, as for a process SIGPIPE ended.

    cli/common.py    exit codes, shared options     cli/node.py      speed node
    cli/clients.py   keygen call send registry reap cli/operator.py  operator keys, control requests
"""
from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
from typing import Sequence

from ..core.quota import QuotaExceededError
from ..core.errors import (AccessDeniedError, ConfigError, ControlTimeoutError, DeliveryTimeoutError, LeaseLostError,
                           NameInUseError, NodeUnavailableError, OperatorNotTrustedError, RegistryLockError,
                           SpcError, SpeedError)
from ..core.visible import visible
from . import clients, node, operator
from .common import (EXIT_CODES, ShowVersion, EXIT_CONFIG, EXIT_LEASE_LOST, EXIT_NOT_TRUSTED, EXIT_OK, EXIT_REMOTE, EXIT_TIMEOUT,
                     EXIT_UNAVAILABLE, default_dir, visible_output)

EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE  # what a shell reports for a process that SIGPIPE ended

__all__ = ["build_parser", "main", "default_dir", "EXIT_OK", "EXIT_REMOTE", "EXIT_CONFIG", "EXIT_UNAVAILABLE",
           "EXIT_TIMEOUT", "EXIT_LEASE_LOST", "EXIT_NOT_TRUSTED"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="speed", description="SPEED: encrypted process-to-process exchange "
                                     f"over the file system. Exit codes: {EXIT_CODES}.")
    parser.add_argument("--version", action=ShowVersion)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    clients.add_parsers(sub)
    node.add_parser(sub)
    operator.add_parsers(sub)
    return parser


# what each error means for a script (the first match counts; SpcError by its code)
_EXIT_CODES = ((DeliveryTimeoutError, EXIT_TIMEOUT), (ControlTimeoutError, EXIT_TIMEOUT),
               (QuotaExceededError, EXIT_TIMEOUT),  # a command's sends wait for room up to --timeout
               (OperatorNotTrustedError, EXIT_NOT_TRUSTED),
               ((NodeUnavailableError, NameInUseError, AccessDeniedError, RegistryLockError), EXIT_UNAVAILABLE),
               (LeaseLostError, EXIT_LEASE_LOST), (ConfigError, EXIT_CONFIG))


def exit_code(exc: SpeedError) -> int:
    if isinstance(exc, SpcError):
        return EXIT_TIMEOUT if exc.code == "TIMEOUT" else EXIT_REMOTE
    return next((code for kinds, code in _EXIT_CODES if isinstance(exc, kinds)), EXIT_REMOTE)


def main(argv: Sequence[str] | None = None) -> int:
    # what `speed` prints may quote members' strings: none of their control characters reaches the terminal
    with visible_output():
        return _run(argv)


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()  # here, where a closed pipe can still be answered quietly (not at exit)
        return code
    except BrokenPipeError:  # the reader left (`speed registry | head -1`): end quietly, as CLI tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush must not fail again
        return EXIT_BROKEN_PIPE
    except SpeedError as exc:
        print(f"speed: {visible(str(exc))}", file=sys.stderr)  # one line, even when a member's text holds newlines
        return exit_code(exc)
    except TimeoutError as exc:  # a builtin timeout (an OSError too): the exit code scripts wait for
        print(f"speed: {visible(str(exc) or 'timed out')}", file=sys.stderr)
        return EXIT_TIMEOUT
    except OSError as exc:  # the operating system refused: one sentence, never a traceback
        print(f"speed: {visible(_os_error(exc))}", file=sys.stderr)
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
