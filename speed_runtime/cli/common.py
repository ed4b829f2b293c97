"""What every `speed` subcommand shares: exit codes, the communication directory, the key, the
registry-lock wait, and argument types."""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from contextlib import contextmanager
from typing import Any, Iterator, TextIO

from ..core.errors import ConfigError
from ..core.visible import visible_lines
from ..keyfile import load_key

EXIT_OK, EXIT_REMOTE, EXIT_CONFIG, EXIT_UNAVAILABLE, EXIT_TIMEOUT, EXIT_LEASE_LOST = 0, 1, 2, 3, 4, 5
EXIT_NOT_TRUSTED = 6  # the target does not trust this operator (control requests)
EXIT_CODES = ("0 ok, 1 remote error, 2 usage/config, 3 unavailable/access denied, 4 timeout, 5 lease lost, "
              "6 the target does not trust this operator")


def default_dir() -> str:
    if os.environ.get("SPEED_DIR"):
        return os.environ["SPEED_DIR"]
    if os.path.isdir("/dev/shm"):
        return "/dev/shm/speed"
    return os.path.join(os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/speed-{os.getuid()}", "speed")


def setting(text: str) -> tuple[str, Any]:
    """An argparse type: KEY=VALUE with a JSON value (a bare word is taken as a string)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0 and at most a day."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (0 < value <= 86_400):  # also refuses inf and nan
        raise argparse.ArgumentTypeError(f"{text!r} must be a number of seconds above 0 and at most 86400")
    return value


def add_common(p: argparse.ArgumentParser, key: bool = True) -> None:
    p.add_argument("--dir", default=default_dir(),
                   help="communication directory (default: $SPEED_DIR, else /dev/shm/speed)")
    if key:
        p.add_argument("--key", default=os.environ.get("SPEED_KEY"),
                       help="key file (default: $SPEED_KEY)")
        p.add_argument("--insecure-key-permissions", action="store_true",
                       help="accept a key file readable by group or others (not recommended)")


def add_lock_timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lock-timeout", type=seconds, default=10.0, metavar="SECONDS",
                   help="give up waiting for the registry lock after this long (default 10)")


def env_key(args: argparse.Namespace):
    if not args.key:
        raise ConfigError("no key file given: pass --key PATH or set SPEED_KEY (create one with `speed keygen PATH`)")
    return load_key(args.key, allow_insecure=args.insecure_key_permissions)


def json_arg(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{what} is not valid JSON ({exc.msg} at position {exc.pos}): {text[:80]!r}") from None


def log_to_stderr() -> None:
    """The runtime reports its own problems (a failing inbox, a held registry lock) through
    logging; a headless node shows them on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("speed: %(message)s"))
    logger = logging.getLogger("speed_runtime")
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)


class VisibleStream:
    """A text stream that writes every control character as an escape (``core.visible``), newlines
    excepted: what `speed` prints quotes what members wrote (names, file names, errors, answers),
    and none of it may act on the terminal (principle (f), docs/RELIABILITY.md)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(visible_lines(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding…: the stream's own
        return getattr(self._stream, name)


@contextmanager
def visible_output() -> Iterator[None]:
    """While it lasts, stdout and stderr (prints, logging, argparse) are ``VisibleStream``s."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = VisibleStream(out), VisibleStream(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
