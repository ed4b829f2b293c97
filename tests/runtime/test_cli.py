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
from speed_runtime.fsutil import prepare_root
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


@pytest.mark.parametrize("argv", [["receipts", "../other/rx"], ["receipts", "rx/../rx"], ["receipts", ""],
                                  ["receipts", "rx", "--sender", "../tx"], ["outbox", "../other/tx"], ["outbox", ""]])
def test_a_node_name_that_is_a_path_is_refused_by_receipts_and_outbox(workdir, key_path, argv):
    """`speed receipts NAME` read NAME's ledger by path: `../other/rx` one outside ROOT, and
    `rx/../rx` rx's own, whose valid receipts it then called forged ("wrong key or altered")."""
    root = os.path.join(workdir, "env")
    ledger = os.path.join(workdir, "other", "rx", "durable", "ledger")
    os.makedirs(ledger)
    with open(os.path.join(ledger, "tx.log"), "w") as f:
        f.write("{}\n")
    os.makedirs(os.path.join(root, "rx", "durable", "ledger"))
    result = speed(*argv, "--dir", root, *(["--key", key_path] if argv[0] == "receipts" else []))
    assert result.returncode == 2 and result.stdout == "", (result.stdout, result.stderr)
    assert result.stderr.startswith("speed: invalid node name") and len(result.stderr.splitlines()) == 1


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


# what a member would write to act on the operator's terminal (ESC, OSC title and clipboard, CSI, C1 CSI)
TITLE, CLIPBOARD, CLEAR, C1 = "\x1b]2;PWNED\x07", "\x1b]52;c;cHduZWQ=\x07", "\x1b[2J", "\u009b31m"
HOSTILE = TITLE + CLIPBOARD + CLEAR + C1 + "\x7f"


def acting(text: str) -> list[str]:
    """The characters of `text` a terminal would act on (newlines aside)."""
    return [c for c in text if c != "\n" and (ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f)]


def test_registry_and_reap_print_members_strings_escaped(root, key):
    prepare_root(root)
    registry = Registry(root)
    with registry.locked():
        registry._write(RegistryEntry(name="hostile", id="00000000-0000-4000-8000-000000000003", pid=1,
                                      last_heartbeat=time.time() - 100, lease_seconds=5, host=HOSTILE,
                                      runtime="rt\n" + HOSTILE, groups=(HOSTILE,), services=(C1,), allow=(CLEAR,)))
    for name in (TITLE, "=2+5+cmd|' -c calc'!A0"):  # file names no node may take: unreadable entries
        with open(os.path.join(registry.dir, name + ".node"), "w") as f:
            f.write("{torn")
    table = speed("registry", "--dir", root)
    assert table.returncode == 0, table.stderr
    assert acting(table.stdout + table.stderr) == []
    assert "\\x1b]2;PWNED\\x07\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\\x9b31m\\x7f" in table.stdout
    assert len(table.stdout.splitlines()) == 4  # the header and one line per entry: a newline in a field is one too
    rows = {r["name"]: r for r in json.loads(speed("registry", "--dir", root, "--json").stdout)}
    assert rows["hostile"]["host"] == HOSTILE and rows[TITLE]["state"] == "unreadable"  # JSON keeps the data whole
    reaped = speed("reap", "--dir", root)
    assert reaped.returncode == 0 and acting(reaped.stdout + reaped.stderr) == []
    assert "reaped \\x1b]2;PWNED\\x07" in reaped.stdout.splitlines()


def test_call_prints_a_hostile_services_answer_and_error_escaped(root, key, key_path):
    from speed_runtime.core.errors import SpcError

    answer = {"title": TITLE, "c1": C1, "nested": [{"del": "\x7f", "clear": CLEAR}], "word": "héllo"}

    def fail(arguments):
        raise SpcError("EXECUTION_FAILED", HOSTILE + "\nspeed: SUCCESS (forged)")

    with Node(root, key, "hostile", allow=["caller"]) as node:
        node.register("answer", lambda arguments: answer)
        node.register("fail", fail)
        ok = speed("call", "hostile", "answer", "--as", "caller", "--dir", root, "--key", key_path)
        failed = speed("call", "hostile", "fail", "--as", "caller", "--dir", root, "--key", key_path)
    assert ok.returncode == 0, ok.stderr
    assert acting(ok.stdout + ok.stderr) == [] and json.loads(ok.stdout) == answer  # valid JSON, the same value
    assert "\\u009b31m" in ok.stdout and "héllo" in ok.stdout
    assert failed.returncode == 1 and acting(failed.stderr) == []
    assert failed.stderr.splitlines() == [
        "speed: EXECUTION_FAILED: \\x1b]2;PWNED\\x07\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\\x9b31m\\x7f\\x0aspeed: SUCCESS (forged)"]
