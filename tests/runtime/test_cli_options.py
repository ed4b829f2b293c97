"""The options of the `speed` and `speedtui` commands: one rule for the extensions' options on every
command that runs a node, and every option a message names exists on the command it means."""
from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess

import pytest

from speed_runtime.cli import build_parser as speed_parser
from speed_runtime.cli.node import node_settings
from speed_runtime.core.errors import ConfigError
from speed_runtime.ext.durable_store import list_outboxes
from speedtui.__main__ import build_parser as speedtui_parser

from ..helpers.processes import SPEED

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# `speed node ... --operator PUBKEY` / `speedtui analyze --rebuild`: the command a message names,
# up to the end of the quotation or parenthesis it stands in
NAMED = re.compile(r"\bspeed(tui)?\b(?![-/.])((?: [a-z][a-z-]*)*)([^`)]*)")

# The rule (docs README "The `speed` command"): which commands that run a node have which of
# `speed node`'s feature options.
FEATURE_OPTIONS = {
    "--feature": {"node", "send", "call"},
    "--quota": {"node", "send", "call"},
    "--threat": {"node"},              # how a receiver scores its senders: a temporary node receives only answers
    "--durable": {"node", "send"},     # a call is never durable
    "--durable-on-tmpfs": {"node", "send"},
    "--operator": {"node"},            # makes a node a target of control requests
}
NODE_COMMANDS = ("node", "send", "call")

KEYED = ("call", "send", "node", "receipts", "allow", "revoke", "stop", "status", "lift")
# Messages that name an option without naming the command: (module, option) -> the commands that
# print the message (or, for the console's hints about nodes, the command the hint is about).
PRINTED_BY = {
    ("speed_runtime/keyfile.py", "--force"): ["speed keygen", "speed operator keygen"],  # speedtui keygen rewords it
    ("speed_runtime/operator.py", "--operator"): ["speed node"],
    ("speed_runtime/cli/common.py", "--key"): [f"speed {c}" for c in KEYED],
    ("speed_runtime/cli/common.py", "--feature"): ["speed node", "speed send", "speed call"],
    ("speed_runtime/cli/common.py", "--durable"): ["speed node", "speed send"],
    ("speed_runtime/cli/common.py", "--durable-on-tmpfs"): ["speed node", "speed send"],
    ("speed_runtime/cli/node.py", "--durable-open-ledgers"): ["speed node"],
    ("speed_runtime/cli/node.py", "--durable"): ["speed node"],
    ("speed_runtime/cli/clients.py", "--file"): ["speed send"],
    ("speed_runtime/cli/clients.py", "--reliable"): ["speed send"],
    ("speed_runtime/cli/clients.py", "--feature"): ["speed send"],
    ("speed_runtime/cli/clients.py", "--durable"): ["speed send"],
    ("speed_runtime/cli/clients.py", "--as"): ["speed send"],
    ("speed_runtime/cli/operator.py", "--feature"): ["speed node"],  # why a target keeps no scores
    ("speed_runtime/ext/durable.py", "--durable"): ["speed node"],  # start the target with it
    ("speed_runtime/ext/durable_store.py", "--durable-on-tmpfs"): ["speed node", "speed send"],
    ("speed_runtime/ext/control.py", "--operator"): ["speed node"],
    ("speedtui/__main__.py", "--demo"): ["speedtui"],
    ("speedtui/ui/controller/runner.py", "--readonly"): ["speedtui"],
    ("speedtui/ui/controller/grants.py", "--allow"): ["speed node"],
    ("speedtui/ui/views/access.py", "--readonly"): ["speedtui"],
    ("speedtui/ui/views/leases.py", "--trace"): ["speed node"],
    ("speedtui/ui/views/traces.py", "--trace"): ["speed node"],
    ("speedtui/ui/views/security.py", "--trace"): ["speed node"],
    ("speedtui/ui/views/security.py", "--operator"): ["speed node"],
    ("speedtui/ui/screens/forms.py", "--allow"): ["speed node"],
    ("speedtui/services/actions.py", "--feature"): ["speed node"],  # why a quarantine cannot be lifted
    ("speedtui/services/actions.py", "--readonly"): ["speedtui"],
    ("speedtui/services/runtime.py", "--force"): [],  # the words replaced, never printed
    ("speedtui/models/errors.py", "--allow"): ["speed node"],
    ("speedtui/models/keycheck.py", "--key"): ["speedtui"],  # a call or request never answered, key doubted
    **{("speedtui/pipeline/commands.py", o): ["speedtui simulate-traces"]
       for o in ("--nodes", "--records", "--malformed", "--minutes")},
    **{("speedtui/pipeline/commands.py", o): ["speedtui analyze"]
       for o in ("--rebuild", "--store", "--traces", "--full", "--since", "--until", "--dir")},
    **{("speedtui/pipeline/job.py", o): ["speedtui analyze"] for o in ("--since", "--until", "--out")},
    **{("speedtui/pipeline/commands.py", o): ["speedtui analyze"] for o in ("--remote", "--master", "--embedded")},
    ("speedtui/pipeline/server.py", "--port"): ["speedtui analytics-server"],
}


def _parsers(parser: argparse.ArgumentParser, path: str):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


PARSERS = dict([*_parsers(speed_parser(), "speed"), *_parsers(speedtui_parser(), "speedtui")])


def _options_of(command: str) -> set[str]:
    return {o for action in PARSERS[command]._actions for o in action.option_strings}


def _command(words: str) -> str:
    """The longest command a message's `speed WORDS` names."""
    parts = words.split()
    while " ".join(parts) not in PARSERS:
        parts.pop()
    return " ".join(parts)


def _messages(path: str):
    """(line, text) of every string in a module that names an option, f-strings with {} for their
    values; docstrings and the option declarations of add_argument (their help is checked from
    the parsers) left out."""
    tree = ast.parse(open(os.path.join(REPO, path), encoding="utf-8").read())
    skip = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            skip.add(id(first.value))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            skip.update(id(sub) for sub in ast.walk(node))
        if isinstance(node, ast.JoinedStr):
            skip.update(id(value) for value in node.values)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and id(node) not in skip:
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            text = node.value
        else:
            continue
        if OPTION.search(text) and not OPTION.fullmatch(text.strip()):  # a bare "--dir" is an argument, not a message
            yield node.lineno, text


def _mentions():
    """(module:line, option, the commands it must exist on) for every option a message names."""
    for top in ("speed_runtime", "speedtui"):
        for folder, _, files in os.walk(os.path.join(REPO, top)):
            for file in sorted(f for f in files if f.endswith(".py")):
                path = os.path.relpath(os.path.join(folder, file), REPO)
                for line, text in _messages(path):
                    rest = text
                    for named in NAMED.finditer(text):
                        command = _command(f"speed{named.group(1) or ''}{named.group(2)}")
                        for option in OPTION.findall(named.group(2) + named.group(3)):
                            yield f"{path}:{line}", option, [command]
                        rest = rest.replace(named.group(0), "")
                    for option in OPTION.findall(rest):
                        yield f"{path}:{line}", option, PRINTED_BY.get((path, option))


def test_every_option_a_message_names_exists_on_the_command_it_means():
    unknown, wrong = [], []
    for where, option, commands in _mentions():
        if commands is None:
            unknown.append(f"{where} {option}")
            continue
        wrong += [f"{where}: {command} has no {option}" for command in commands if option not in _options_of(command)]
    assert not unknown, f"say in PRINTED_BY which commands print these messages: {unknown}"
    assert not wrong, wrong


def test_the_walk_sees_the_messages_it_must():
    """The walk is not vacuous: it finds the message of `speed send --durable` on tmpfs and the
    explicitly named `speed node ... --operator` of the control client."""
    found = {(where.split(":")[0], option, tuple(commands or ())) for where, option, commands in _mentions()}
    assert ("speed_runtime/ext/durable_store.py", "--durable-on-tmpfs", ("speed node", "speed send")) in found
    assert ("speed_runtime/core/errors.py", "--operator", ("speed node",)) in found
    assert ("speedtui/ui/controller/nodes.py", "--operator-key", ("speedtui",)) in found


@pytest.mark.parametrize("option", sorted(FEATURE_OPTIONS))
def test_speed_nodes_feature_options_exist_where_they_apply(option):
    have = {command for command in NODE_COMMANDS if option in _options_of(f"speed {command}")}
    assert have == FEATURE_OPTIONS[option]
    for command in have:
        action = next(a for a in PARSERS[f"speed {command}"]._actions if option in a.option_strings)
        assert action.help and len(action.help) > 20, (command, option)


def test_speed_send_durable_on_tmpfs_takes_the_option_its_refusal_names(workdir, key_path):
    """On tmpfs `speed send --durable` refuses, naming --durable-on-tmpfs; with it, the message is
    stored in the sender's outbox (its target is not running: it waits there)."""
    root = os.path.join(workdir, "env")  # workdir is on /dev/shm
    send = SPEED + ["send", "rx", '{"n": 1}', "--durable", "--as", "tx", "--timeout", "0.5", "--dir", root, "--key",
                    key_path]
    refused = subprocess.run(send, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "is on tmpfs (memory)" in refused.stderr
    assert "pass --durable-on-tmpfs" in refused.stderr and "Traceback" not in refused.stderr
    stored = subprocess.run([*send, "--durable-on-tmpfs"], capture_output=True, text=True, timeout=60)
    assert stored.returncode == 0 and "stored durable message in tx's outbox for rx" in stored.stderr, stored.stderr
    assert "WARNING" in stored.stderr and "tmpfs" in stored.stderr
    assert [(i.node, i.target, i.id) for i in list_outboxes(root)] == [("tx", "rx", 1)]
    alone = subprocess.run([*SPEED, "send", "rx", "1", "--durable-on-tmpfs", "--dir", root, "--key", key_path],
                           capture_output=True, text=True, timeout=60)
    assert alone.returncode == 2 and alone.stderr == "speed: --durable-on-tmpfs goes with --durable\n"


def test_feature_durable_is_durable_for_the_options_that_go_with_it(workdir, key_path):
    """`--feature durable` enables what `--durable` does (NodeConfig.durable): the tmpfs refusal
    names --durable-on-tmpfs, and adding it must not be refused as "goes with --durable" (a loop
    an operator could not leave; found on a real environment)."""
    root = os.path.join(workdir, "env")  # workdir is on /dev/shm
    node = [*SPEED, "node", "--name", "keeper", "--feature", "durable", "--dir", root, "--key", key_path]
    refused = subprocess.run(node, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "pass --durable-on-tmpfs" in refused.stderr
    for extra in (["--durable-on-tmpfs"], ["--durable-on-tmpfs", "--durable-open-ledgers", "4"]):
        settings = node_settings(speed_parser().parse_args([*node[len(SPEED):], *extra]))
        assert "durable" in settings["features"] and settings["durable_on_tmpfs"] is True
    alone = speed_parser().parse_args(["node", "--name", "keeper", "--durable-open-ledgers", "4"])
    with pytest.raises(ConfigError, match="--durable-open-ledgers goes with --durable"):
        node_settings(alone)
