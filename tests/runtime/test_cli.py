"""The `speed` command: help, key files, registry table, reaping, exit codes, no key material."""
import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from speed_runtime import Node
from speed_runtime.cli import build_parser
from speed_runtime.keyfile import load_key
from speed_runtime.core.entry import RegistryEntry
from speed_runtime.registry import Registry

SPEED = [sys.executable, "-m", "speed_runtime"]


def speed(*args, env=None):
    return subprocess.run(SPEED + list(args), capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("cmd", [[], ["keygen"], ["node"], ["call"], ["send"], ["registry"], ["reap"]])
def test_help_everywhere(cmd):
    result = speed(*cmd, "--help")
    assert result.returncode == 0 and "usage: speed" in result.stdout


def _options(parser, path=("speed",)):
    """(command words, argparse action) of every argument of every (sub)command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, (*path, name))
        else:
            yield path, action


def test_every_argument_of_every_command_has_help():
    missing = [f"{' '.join(path)} {action.option_strings or action.dest}" for path, action in _options(build_parser())
               if not (action.help or "").strip()]
    assert not missing, f"arguments without --help text: {missing}"


def test_a_closed_pipe_ends_the_command_quietly(workdir):
    """`speed operator show | head -1`: the reader left; the command ends as CLI tools do, with no
    message (the status a shell shows for a process ended by SIGPIPE)."""
    path = os.path.join(workdir, "operator.key")
    assert speed("operator", "keygen", path).returncode == 0
    reader, writer = os.pipe()
    os.close(reader)  # nobody will read: every write to the pipe fails with EPIPE
    try:
        result = subprocess.run(SPEED + ["operator", "show", path], stdout=writer, stderr=subprocess.PIPE, text=True,
                                timeout=60)
    finally:
        os.close(writer)
    assert result.stderr == "" and result.returncode == 128 + signal.SIGPIPE


def test_keygen_and_key_errors_never_print_the_key(workdir):
    path = os.path.join(workdir, "new.key")
    made = speed("keygen", path)
    assert made.returncode == 0 and "fingerprint" in made.stdout
    key = load_key(path)
    secrets = (base64.b64encode(key.raw).decode(), key.raw.hex())
    again = speed("keygen", path)
    assert again.returncode == 2 and "already exists" in again.stderr
    os.chmod(path, 0o644)
    refused = speed("call", "x", "echo", "--dir", os.path.join(workdir, "env"), "--key", path)
    assert refused.returncode == 2 and "chmod 600" in refused.stderr
    missing = speed("send", "x", "1", "--dir", os.path.join(workdir, "env"))
    assert missing.returncode == 2 and "SPEED_KEY" in missing.stderr
    for result in (made, again, refused, missing):
        assert not any(s in result.stdout + result.stderr for s in secrets)


def test_bad_json_arguments_are_one_sentence(workdir, key_path):
    result = speed("call", "x", "echo", "{not json", "--dir", os.path.join(workdir, "env"), "--key", key_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("speed: the arguments must be valid JSON (Expecting property name"), result.stderr
    result = speed("send", "x", "{not json", "--dir", os.path.join(workdir, "env"), "--key", key_path)
    assert result.returncode == 2 and result.stderr.startswith("speed: the message must be valid JSON"), result.stderr
    result = speed("call", "x", "echo", "[1]", "--dir", os.path.join(workdir, "env"), "--key", key_path)
    assert result.returncode == 2 and "JSON object" in result.stderr


def test_registry_table_json_and_reap(root, key):
    with Node(root, key, "alive", groups=["g1"], allow=["x"]) as node:
        registry = Registry(root)
        with registry.locked():
            registry._write(RegistryEntry(name="ghost", id="00000000-0000-4000-8000-000000000002",
                                          last_heartbeat=time.time() - 100, lease_seconds=5))
        with open(os.path.join(registry.dir, "broken.node"), "w") as f:
            f.write("{torn")
        table = speed("registry", "--dir", root)
        assert table.returncode == 0, table.stderr
        lines = {line.split()[0]: line for line in table.stdout.splitlines()[1:]}
        assert "online" in lines["alive"] and "g1" in lines["alive"] and str(os.getpid()) in lines["alive"]
        assert "stale" in lines["ghost"] and "unreadable" in lines["broken"]
        rows = {r["name"]: r for r in json.loads(speed("registry", "--dir", root, "--json").stdout)}
        assert rows["alive"]["state"] == "online" and rows["alive"]["allow"] == ["x"] and rows["ghost"]["leaseLeft"] < 0
        live = speed("reap", "alive", "--dir", root)
        assert live.returncode == 3 and "not reaped" in live.stderr
        reaped = speed("reap", "--dir", root)
        assert reaped.returncode == 0 and set(reaped.stdout.split()) == {"reaped", "ghost", "broken"}
        assert registry.names() == ["alive"] and registry.read("alive").id == node.id


def test_registry_of_a_directory_without_nodes(workdir):
    result = speed("registry", "--dir", workdir)
    assert result.returncode == 2 and "no SPEED node has run there" in result.stderr
