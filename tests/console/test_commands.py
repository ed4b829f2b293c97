"""The one builder of `speed` command lines, checked against `speed`'s own argparse parser: every
line the console runs or writes to its audit log means what it says."""

import shlex

from speed_runtime.cli import build_parser

from speedtui.models.commands import (NodeSpec, call_command, node_command, reap_command, send_command,
                                      speed_call_command)
from speedtui.services.processes import speed_command


def parsed(cmd):
    argv = shlex.split(cmd.shell())  # what a shell hands to `speed`: quoting survives the round trip
    assert argv[0] == "speed" and argv == list(cmd.argv)
    return build_parser().parse_args(argv[1:])


def test_node_command_parses_to_the_spec():
    spec = NodeSpec("bil ling", groups=("finance", "edge"), allow=("ops", "gate way"), services=("echo", "fail"),
                    trace=True, in_process=False, lease_seconds=8.0, heartbeat_seconds=0.5)
    ns = parsed(node_command("/r oot", "/k ey", spec, control_stdin=True))
    assert (ns.command, ns.dir, ns.key, ns.name) == ("node", "/r oot", "/k ey", "bil ling")
    assert ns.group == ["finance", "edge"] and ns.allow == ["ops", "gate way"] and ns.service == ["echo", "fail"]
    assert ns.trace and ns.control_stdin and ns.lease == 8.0 and ns.heartbeat == 0.5
    plain = parsed(node_command("/r", "/k", NodeSpec("x", trace=False)))
    assert not plain.trace and not plain.control_stdin and plain.allow == [] and plain.lease == 30.0


def test_node_command_runs_as_given():
    cmd = node_command("/r", "/k", NodeSpec("x"))
    assert cmd.exec_argv(speed_command()) == [*speed_command(), *cmd.argv[1:]]


def test_call_command_parses_with_its_json():
    args = {"amount": 100, "note": "it's \"quoted\" é"}
    ns = parsed(call_command("billing", "calculateTax", args, "ops", "/r oot", "/k", 2.5))
    assert (ns.command, ns.target, ns.service, ns.name, ns.dir, ns.timeout) == (
        "call", "billing", "calculateTax", "ops", "/r oot", 2.5)
    import json
    assert json.loads(ns.arguments) == args
    assert speed_call_command("billing", "calculateTax", args, "ops", "/r oot", "/k", 2.5) == \
        call_command("billing", "calculateTax", args, "ops", "/r oot", "/k", 2.5).shell()


def test_send_command_parses():
    import json
    ns = parsed(send_command("billing", [1, "two"], "ops", "/r", "/k", confirm=True))
    assert (ns.command, ns.target, ns.name, ns.confirm) == ("send", "billing", "ops", True)
    assert json.loads(ns.data) == [1, "two"]
    assert not parsed(send_command("b", {}, "ops", "/r", "/k")).confirm


def test_reap_command_parses():
    ns = parsed(reap_command(["ghost", "old one"], "/r oot"))
    assert (ns.command, ns.names, ns.dir) == ("reap", ["ghost", "old one"], "/r oot")


def test_node_command_carries_every_launch_option():
    """The launch dialog's options reach the line `speed node` reads, as `speed node` reads them."""
    spec = NodeSpec("n", features=("quota", "chunks"), quota=("rate=200", "pending=64"), threat=("threshold=20",),
                    durable=True, durable_on_tmpfs=True, echo_messages=True, operators=("PUB",))
    ns = parsed(node_command("/r", "/k", spec))
    assert ns.feature == ["quota", "chunks"] and ns.quota == [("rate", 200), ("pending", 64)]
    assert ns.threat == [("threshold", 20)] and ns.durable and ns.durable_on_tmpfs and ns.echo_messages
    assert ns.operator == ["PUB"]
    plain = parsed(node_command("/r", "/k", NodeSpec("n")))
    assert plain.feature == [] and not plain.durable and not plain.durable_on_tmpfs and not plain.echo_messages
