"""The one builder of `speed` command lines.

The console launches `speed node` processes from these argument lists and writes the same
lines to the audit log as the "equivalent command", so what the operator reads is what ran.
``tests/console/test_commands.py`` parses every line with `speed`'s own argparse parser."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from speed_runtime.core.visible import visible_json


@dataclass
class NodeSpec:
    """A node the console is asked to start (in its own process or as a `speed node` process)."""

    name: str
    groups: tuple[str, ...] = ()
    allow: tuple[str, ...] = ()
    services: tuple[str, ...] = ()
    trace: bool = True
    in_process: bool = True
    lease_seconds: float | None = None
    heartbeat_seconds: float | None = None
    operators: tuple[str, ...] = ()  # operator public keys it trusts (`--operator`: the `control` extension)
    features: tuple[str, ...] = ()  # extensions it enables (`--feature`)
    quota: tuple[str, ...] = ()  # `--quota KEY=VALUE` settings, as typed (speed's own parser reads them)
    threat: tuple[str, ...] = ()  # `--threat KEY=VALUE` settings, likewise
    durable: bool = False
    durable_on_tmpfs: bool = False
    echo_messages: bool = False  # prints every received message on stdout: a separate process only


@dataclass(frozen=True)
class SpeedCommand:
    """A `speed` command line: ``argv[0]`` is ``"speed"``."""

    argv: tuple[str, ...]

    def shell(self) -> str:
        """The line an operator can paste into a shell."""
        return shlex.join(self.argv)

    def exec_argv(self, program: Sequence[str]) -> list[str]:
        """The same command run by ``program`` (e.g. ``[sys.executable, "-m", "speed_runtime"]``)."""
        return [*program, *self.argv[1:]]

    def __str__(self) -> str:
        return self.shell()


def _repeat(flag: str, values: Iterable[str]) -> list[str]:
    out: list[str] = []
    for v in values:
        out += [flag, str(v)]
    return out


def _json(value: Any) -> str:
    # arguments may hold what a member wrote (a payload opened as a call): the same JSON value,
    # with no control character in the line shown, copied and audited
    return visible_json(value, separators=(",", ":"))


def node_command(root: Any, key: Any, spec: NodeSpec, control_stdin: bool = False) -> SpeedCommand:
    argv = ["speed", "node", "--dir", str(root), "--key", str(key), "--name", spec.name,
            *_repeat("--group", spec.groups), *_repeat("--allow", spec.allow), *_repeat("--service", spec.services)]
    if spec.trace:
        argv.append("--trace")
    if spec.lease_seconds:
        argv += ["--lease", f"{spec.lease_seconds:g}"]
    if spec.heartbeat_seconds:
        argv += ["--heartbeat", f"{spec.heartbeat_seconds:g}"]
    argv += _repeat("--operator", spec.operators)
    argv += [*_repeat("--feature", spec.features), *_repeat("--quota", spec.quota), *_repeat("--threat", spec.threat)]
    argv += [flag for flag, on in (("--durable", spec.durable), ("--durable-on-tmpfs", spec.durable_on_tmpfs),
                                   ("--echo-messages", spec.echo_messages)) if on]
    if control_stdin:
        argv.append("--control-stdin")  # grants and revokes reach the process on its stdin
    return SpeedCommand(tuple(argv))


def call_command(target: str, service: str, arguments: Any, caller: str, root: Any, key: Any,
                 timeout: float | None = None) -> SpeedCommand:
    argv = ["speed", "call", target, service, _json(arguments), "--as", caller, "--dir", str(root),
            "--key", str(key)]
    if timeout is not None:
        argv += ["--timeout", f"{timeout:g}"]
    return SpeedCommand(tuple(argv))


def send_command(target: str, data: Any, sender: str, root: Any, key: Any, confirm: bool = False,
                 timeout: float | None = None) -> SpeedCommand:
    argv = ["speed", "send", target, _json(data), "--as", sender, "--dir", str(root), "--key", str(key)]
    if confirm:
        argv.append("--confirm")
    if timeout is not None:
        argv += ["--timeout", f"{timeout:g}"]
    return SpeedCommand(tuple(argv))


def operator_command(command: str, target: str, peer: str | None, root: Any, key: Any,
                     operator_key: Any) -> SpeedCommand:
    """`speed allow|revoke TARGET PEER`, `speed lift TARGET SENDER` or `speed stop TARGET --wait`: a
    control request signed with the operator key (README "## Operators")."""
    argv = ["speed", command, target, *([peer] if peer is not None else []), "--dir", str(root), "--key", str(key),
            "--operator-key", str(operator_key)]
    if command == "stop":
        argv.append("--wait")
    return SpeedCommand(tuple(argv))


def reap_command(names: Iterable[str], root: Any) -> SpeedCommand:
    return SpeedCommand(("speed", "reap", *names, "--dir", str(root)))


def speed_call_command(target: str, service: str, arguments: Any, caller: str, root: Any, key: Any,
                       timeout: float | None = None) -> str:
    """The `speed call` line as text (what the call dialog shows and `y` / ctrl+y copy)."""
    return call_command(target, service, arguments, caller, root, key, timeout).shell()


def outbox_command(root: Any, names: Iterable[str] = ()) -> SpeedCommand:
    return SpeedCommand(("speed", "outbox", *names, "--dir", str(root)))


def receipts_command(name: str, root: Any, key: Any) -> SpeedCommand:
    return SpeedCommand(("speed", "receipts", name, "--dir", str(root), "--key", str(key)))
