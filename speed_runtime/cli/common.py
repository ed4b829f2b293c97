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
              "6 the target does not trust this operator, 141 standard output closed by its reader")


class ShowVersion(argparse.Action):
    """--version: `PROG VERSION`, the installed distribution's version, read only when asked."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="print the version (of the installed package) and exit"):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        import speed_runtime

        print(f"{parser.prog} {speed_runtime.__version__}")
        parser.exit()


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


# The extensions' options follow one rule on every command that runs a node — `node`, and the
# temporary nodes of `send` and `call`: --feature and --quota wherever a node sends; --threat only on
# `node` (it tunes how a receiver scores the senders that write to it, and a temporary node receives
# nothing but the answers to itself); --durable and --durable-on-tmpfs on `node` and `send` (a call
# is never durable); --operator only on `node` (it makes a node a target of control requests).
NODE_FEATURES = ("chunks", "reliable", "quota", "control", "durable")
ONE_SHOT_FEATURES = ("chunks", "reliable", "quota")  # a temporary node honours the limits targets publish


def add_feature_options(p: argparse.ArgumentParser, *, one_shot: bool) -> None:
    """--feature, --quota and (on `node`) --threat."""
    if one_shot:
        p.add_argument("--feature", action="append", default=None, metavar="NAME", choices=ONE_SHOT_FEATURES,
                       help="an extension the temporary node speaks (repeatable: " + ", ".join(ONE_SHOT_FEATURES) +
                            "; default all three: it honours the limits a target publishes)")
        settings = (("quota", "send_rate=50, send_burst=5 (this node's own pace)"),)
    else:
        p.add_argument("--feature", action="append", default=[], metavar="NAME",
                       help="enable an extension of the contract (repeatable): " + ", ".join(NODE_FEATURES))
        settings = (("quota", "pending=64, pending_bytes=4194304, rate=200"),
                    ("threat", "threshold=100, release=50, half_life=60"))
    for name, example in settings:
        p.add_argument(f"--{name}", action="append", default=[], type=setting, metavar="KEY=VALUE",
                       help=f"a setting of the quota extension's {name} (repeatable; the value is JSON; needs "
                            f"--feature quota): {example}")


def add_durable_on_tmpfs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--durable-on-tmpfs", action="store_true",
                   help="with --durable: accept a communication directory on tmpfs (stored messages are lost at "
                        "a reboot)")


def node_options(args: argparse.Namespace) -> dict[str, Any]:
    """The Node(...) arguments of the options above: features, and the quota and threat settings."""
    features = list(args.feature if args.feature is not None else ONE_SHOT_FEATURES)
    options: dict[str, Any] = {"features": features}
    for name in ("quota", "threat"):
        values = getattr(args, name, None)
        if values:
            if "quota" not in features:
                raise ConfigError(f"--{name} settings belong to the quota extension: add --feature quota")
            options[name] = dict(values)
    if getattr(args, "durable_on_tmpfs", False):
        if not durable_asked(args):
            raise ConfigError("--durable-on-tmpfs goes with --durable")
        options["durable_on_tmpfs"] = True
    return options


def durable_asked(args: argparse.Namespace) -> bool:
    """--durable, or --feature durable (the same: NodeConfig.durable)."""
    return bool(getattr(args, "durable", False)) or "durable" in (getattr(args, "feature", None) or ())


def env_key(args: argparse.Namespace):
    if not args.key:
        raise ConfigError("no key file given: pass --key PATH or set SPEED_KEY (create one with `speed keygen PATH`)")
    return load_key(args.key, allow_insecure=args.insecure_key_permissions)


def json_arg(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{what} must be valid JSON ({exc.msg} at position {exc.pos}): {text[:80]!r}") from None


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
