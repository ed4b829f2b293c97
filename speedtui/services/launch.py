"""What a launch means, read by `speed node`'s own code: the launch dialog's line is parsed with
`speed node`'s parser and turned into Node options by the function `speed node` itself uses
(``speed_runtime.cli.node``), then checked with the runtime's Node settings, so the console has
no second parser, and an in-process node gets the options the line gives a process. What is
wrong is one sentence per field of the dialog."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

from speed_runtime.cli.common import NODE_FEATURES, seconds, setting
from speed_runtime.cli.node import node_parser
from speed_runtime.cli.node import node_settings as _settings_of
from speed_runtime.core.control import parse_public_key
from speed_runtime.core.errors import SpeedError
from speed_runtime.core.names import validate_name
from speed_runtime.ext.durable_store import check_persistent
from speed_runtime.node.config import NodeConfig

from ..models.commands import NodeSpec, SpeedCommand, node_command

# the extensions the dialog ticks; `durable` is its own box (--durable), as `control` comes with --operator too
LAUNCH_FEATURES = tuple(f for f in NODE_FEATURES if f != "durable")

__all__ = ["LAUNCH_FEATURES", "LaunchError", "check_spec", "node_settings", "parse_seconds", "parse_settings"]

# which field of the dialog a sentence of the runtime is about (the first word found wins)
_FIELD_WORDS = (("--name", "name"), ("--group", "groups"), ("--allow", "allow"), ("threat", "threat"),
                ("quota", "quota"), ("heartbeat", "heartbeat"), ("lease", "lease"), ("tmpfs", "durable"),
                ("durable", "durable"), ("operator", "operator"), ("node name", "allow"), ("feature", "features"))


class LaunchError(Exception):
    """A line `speed node` would refuse; the message is its one sentence."""


def _parse(cmd: SpeedCommand) -> argparse.Namespace:
    parser = node_parser()

    def refuse(message: str):  # argparse would print the usage and exit: the console shows a sentence
        raise LaunchError(message)

    parser.error = refuse  # type: ignore[method-assign]
    return parser.parse_args(list(cmd.argv[2:]))


def node_settings(cmd: SpeedCommand) -> dict[str, Any]:
    """The Node(...) keyword arguments of a `speed node` line, as `speed node` makes them."""
    return _settings_of(_parse(cmd))


def parse_seconds(text: str) -> float | None:
    """A lease or heartbeat field ("" is the default) with `speed`'s own type; LaunchError if bad."""
    if not text.strip():
        return None
    try:
        return seconds(text.strip())
    except argparse.ArgumentTypeError as exc:
        raise LaunchError(str(exc)) from None


def parse_settings(text: str) -> tuple[str, ...]:
    """`KEY=VALUE` settings typed in one field (comma or space separated), each checked with the
    type `speed`'s --quota and --threat use; kept as typed (the line passes them on)."""
    items = tuple(p for p in text.replace(",", " ").split() if p)
    for item in items:
        try:
            setting(item)
        except argparse.ArgumentTypeError as exc:
            raise LaunchError(f"{exc}: write KEY=VALUE, e.g. rate=200") from None
    return items


def check_spec(spec: NodeSpec, root: Path | str, key_path: str) -> dict[str, str]:
    """What `speed node` would refuse in ``spec`` (on ROOT), as one sentence per dialog field
    (``name``, ``allow``, ``lease``, ``heartbeat``, ``quota``, ``threat``, ``durable``, ``operator``,
    or ``line`` when no field is named); empty when the line would start a node."""
    problems: dict[str, str] = {}
    try:
        validate_name(spec.name) if spec.name else None
    except SpeedError as exc:
        problems["name"] = str(exc)
    if not spec.name:
        problems["name"] = "a node needs a name"
    for peer in spec.allow:
        try:
            validate_name(peer)
        except SpeedError as exc:
            problems.setdefault("allow", str(exc))
    for _ in range(len(_NEUTRAL) + 1):  # a field found wrong is set aside, and the rest checked again
        field = _line_problem(spec, root, key_path, problems)
        if field is None or field not in _NEUTRAL:
            break
        spec = replace(spec, **_NEUTRAL[field])
    return problems


# what a field is set to once it was found wrong, so the others are still checked
_NEUTRAL: dict[str, dict[str, Any]] = {
    "groups": {"groups": ()}, "allow": {"allow": ()}, "quota": {"quota": ()}, "threat": {"threat": ()},
    "durable": {"durable": False, "durable_on_tmpfs": False}, "operator": {"operators": ()},
    "lease": {"lease_seconds": None}, "heartbeat": {"heartbeat_seconds": None}, "features": {"features": ()}}


def _line_problem(spec: NodeSpec, root: Path | str, key_path: str, problems: dict[str, str]) -> str | None:
    """The first thing `speed node` would refuse in ``spec``'s line, noted in ``problems``; its field."""
    try:
        for public in spec.operators:
            parse_public_key(public)
        NodeConfig.from_options(_settings_of(_parse(node_command(root, key_path, spec))))
        if spec.durable:
            check_persistent(str(root), spec.durable_on_tmpfs)
    except (LaunchError, SpeedError) as exc:
        text = str(exc)
        field = next((f for word, f in _FIELD_WORDS if word in text.lower()), "line")
        problems.setdefault(field, text)
        return field
    except OSError as exc:  # the directory cannot be looked at (yet): the node says so when it starts
        if spec.durable:
            problems.setdefault("durable", f"{root} cannot be checked: {exc.strerror or exc}")
            return "durable"
    return None
