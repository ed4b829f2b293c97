"""Cases 13 and 14 through the `speed` command in real processes: bad key files are refused with a
clear sentence, the key never appears in any output, journal or registry file; communication
directories made by someone else are refused; directories the runtime creates are 0700 whatever
the umask. tests/runtime/test_keyfile.py checks the parser and load_key in-process."""
import base64
import os
import stat
import subprocess

import pytest

from speed_runtime import DirectoryError, Node
from speed_runtime.keyfile import Key, format_key_text, load_key

from ..helpers.processes import SPEED
from ..helpers.wait import wait_until


def speed(*argv, timeout=60, umask=None):
    return subprocess.run(SPEED + list(argv), capture_output=True, text=True, timeout=timeout,
                          preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)


def forms(raw: bytes) -> list[bytes]:
    """Every text form in which key material could leak."""
    b64 = base64.b64encode(raw)
    return [b64, b64[:16], raw.hex().encode(), raw.hex().upper().encode(), raw.hex()[:16].encode(),
            base64.urlsafe_b64encode(raw)[:16], raw]


def assert_no_key(raw: bytes, *blobs, where=""):
    for blob in blobs:
        data = blob.encode("utf-8", "surrogateescape") if isinstance(blob, str) else blob
        for form in forms(raw):
            assert form not in data, f"key material {form[:8]!r}… appears in {where}"


def write(path, data, mode=0o600):
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
    return path


def test_bad_key_files_are_refused_with_a_clear_sentence_and_never_echoed(workdir, root):
    raw = os.urandom(32)
    b64 = base64.b64encode(raw)
    good = write(os.path.join(workdir, "good.key"), format_key_text(Key(raw)))
    os.symlink(good, os.path.join(workdir, "link.key"))
    cases = {
        "header.key": (write(os.path.join(workdir, "header.key"), b"SPEED-KEY-V2\n" + b64 + b"\n"),
                       "does not start with the line 'SPEED-KEY-V1'"),
        "base64.key": (write(os.path.join(workdir, "base64.key"), b"SPEED-KEY-V1\n" + b64[:-2] + b"!!\n"),
                       "not valid standard base64"),
        "length.key": (write(os.path.join(workdir, "length.key"), b"SPEED-KEY-V1\n" + base64.b64encode(raw[:31]) + b"\n"),
                       "holds 31 bytes of key; a SPEED key is exactly 32 bytes"),
        "open.key": (write(os.path.join(workdir, "open.key"), format_key_text(load_key(good)), 0o644),
                     "run `chmod 600"),
        "link.key": (os.path.join(workdir, "link.key"), "is a symbolic link"),
        "empty.key": (write(os.path.join(workdir, "empty.key"), b""), "is empty"),
        "extra.key": (write(os.path.join(workdir, "extra.key"), b"SPEED-KEY-V1\n" + b64 + b"\n" + b64 + b"\n"),
                      "exactly two lines"),
    }
    for name, (path, sentence) in cases.items():
        for argv in (["node", "--name", "k"], ["call", "anyone", "echo"]):
            done = speed(*argv, "--dir", root, "--key", path)
            assert done.returncode == 2, (name, argv, done.stderr)
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("speed: key file ") and sentence in lines[0], (name, lines)
            assert "Traceback" not in done.stderr and done.stdout == ""
            assert_no_key(raw, done.stdout, done.stderr, where=f"{name} {argv[0]}")
    assert speed("node", "--name", "k", "--dir", root, "--key", cases["open.key"][0], "--help").returncode == 0


def test_the_key_never_appears_in_any_output_journal_or_registry_file(procs, root, key_path, workdir):
    raw = load_key(key_path).raw
    keygen = speed("keygen", os.path.join(workdir, "second.key"))
    assert keygen.returncode == 0 and "fingerprint" in keygen.stdout
    assert_no_key(load_key(os.path.join(workdir, "second.key")).raw, keygen.stdout, keygen.stderr, where="keygen")
    svc = procs.start("svc", allow=["cli"], services=["echo", "fail"], trace=True, echo=True)
    outputs = [keygen.stdout]
    for argv in (["call", "svc", "echo", '{"a": 1}', "--as", "cli"], ["call", "svc", "fail", "{}", "--as", "cli"],
                 ["send", "svc", '"hello"', "--as", "cli", "--confirm"], ["registry"], ["registry", "--json"],
                 ["call", "nobody", "echo", "{}", "--as", "cli"], ["call", "svc", "echo", "[1]", "--as", "cli"]):
        done = speed(*argv, "--dir", root, "--key", key_path) if argv[0] != "registry" else speed(*argv, "--dir", root)
        outputs += [done.stdout, done.stderr]
    assert svc.messages(1)[0]["data"] == "hello"
    wait_until(lambda: os.path.exists(os.path.join(root, "speed_traces", "svc.jsonl")), what="the journal")
    svc.stop()
    outputs += ["".join(svc.stderr)]
    files = []
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    files.append((path, f.read()))
    assert any(p.endswith("svc.jsonl") for p, _ in files)
    assert_no_key(raw, *outputs, where="command output")
    for path, data in files:
        assert_no_key(raw, data, where=path)


@pytest.mark.parametrize("problem", ["foreign owner", "mode 0777", "group writable", "symlink", "not a directory"])
def test_a_communication_directory_made_by_someone_else_is_refused(workdir, key, key_path, problem):
    root = os.path.join(workdir, "shared")
    real = os.path.join(workdir, "real")
    os.mkdir(real, 0o700)
    expect = {"foreign owner": "is owned by uid 65534, not by you", "mode 0777": "run `chmod 700",
              "group writable": "writable by group or others (mode 0770)", "symlink": "is a symbolic link",
              "not a directory": "is not a directory"}[problem]
    if problem == "symlink":
        os.symlink(real, root)
    elif problem == "not a directory":
        write(root, b"x")
    else:  # a directory where nodes have run: `speed registry` and `speed reap` would find entries
        os.mkdir(root)
        os.mkdir(os.path.join(root, "speed_registry"), 0o700)
        write(os.path.join(root, "speed_registry", "old.node"), b"{}")
        os.chmod(root, {"foreign owner": 0o700, "mode 0777": 0o777, "group writable": 0o770}[problem])
        if problem == "foreign owner":
            os.chown(root, 65534, 65534)
    with pytest.raises(DirectoryError, match="communication directory") as info:
        Node(root, key, "n")
    assert expect in str(info.value)
    for argv in (["node", "--name", "n", "--key", key_path], ["send", "x", '"y"', "--key", key_path],
                 ["registry"], ["reap"]):
        done = speed(*argv, "--dir", root)
        assert done.returncode == 2 and expect in done.stderr and "Traceback" not in done.stderr, (argv, done.stderr)
    assert os.listdir(real) == []  # nothing was created through the symlink
    if os.path.isdir(os.path.join(root, "speed_registry")):
        assert os.listdir(os.path.join(root, "speed_registry")) == ["old.node"]  # `speed reap` removed nothing


@pytest.mark.parametrize("inner", ["speed_registry", "n", "n/inbox", "n/tmp", "speed_traces"])
def test_a_directory_inside_made_by_someone_else_is_refused(workdir, key, inner):
    root = os.path.join(workdir, "env")
    with Node(root, key, "n", trace=True):
        pass
    path = os.path.join(root, inner)
    os.chown(path, 65534, 65534)
    with pytest.raises(DirectoryError, match="owned by uid 65534"):
        with Node(root, key, "n", trace=True):
            pass
    os.chown(path, 0, 0)
    os.chmod(path, 0o777)
    with pytest.raises(DirectoryError, match="chmod 700"):
        with Node(root, key, "n", trace=True):
            pass


def test_directories_the_runtime_creates_are_0700_whatever_the_umask(workdir, key_path):
    root = os.path.join(workdir, "made", "by", "speed")
    proc = subprocess.Popen(SPEED + ["node", "--dir", root, "--key", key_path, "--name", "n", "--trace"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.umask(0))
    try:
        assert proc.stdout.readline().startswith("ready n")
        modes = {}
        for rel in ("", "speed_registry", "n", "n/inbox", "n/tmp", "speed_traces"):
            modes[rel or "."] = stat.S_IMODE(os.stat(os.path.join(root, rel)).st_mode)
        files = {rel: stat.S_IMODE(os.stat(os.path.join(root, rel)).st_mode)
                 for rel in ("speed_registry/.lock", "speed_registry/n.node", "speed_traces/n.jsonl")}
    finally:
        proc.terminate()
        proc.wait(30)
        proc.stdout.close()
        proc.stderr.close()
    assert modes == {k: 0o700 for k in modes}, modes
    assert files == {k: 0o600 for k in files}, files
    keygen = speed("keygen", os.path.join(workdir, "umask0.key"), umask=0)
    assert keygen.returncode == 0 and stat.S_IMODE(os.stat(os.path.join(workdir, "umask0.key")).st_mode) == 0o600


def test_a_root_moved_away_and_back_within_the_lease_keeps_its_nodes(procs, root, key_path):
    """`mv ROOT elsewhere` for longer than a heartbeat stopped every node for good ("the registry
    entry now belongs to nobody", exit 5). Now the node keeps its name and receives once ROOT is
    back within its lease; ROOT removed for good ends it after its lease, saying so."""
    import shutil

    from speed_runtime.cli.common import EXIT_LEASE_LOST
    rx = procs.start("rx", allow=["tx"], echo=True, lease=6, heartbeat=1)  # 4 s to spare on a busy machine
    os.rename(root, root + ".away")
    wait_until(lambda: any("cannot renew its lease: its registry directory" in line for line in rx.stderr), 10,
               "a renewal while ROOT is away")
    os.rename(root + ".away", root)
    with Node(root, key_path, "tx", allow=["rx"]) as tx:
        tx.send("rx", "after", confirm=True)
    assert rx.messages(1)[0]["data"] == "after" and rx.proc.poll() is None
    shutil.rmtree(root)
    assert rx.proc.wait(30) == EXIT_LEASE_LOST
    lost = wait_until(lambda: [line for line in rx.stderr if "lost its lease" in line], 10, "the reason on stderr")
    assert lost == [f"speed: node rx lost its lease: its registry directory {os.path.join(root, 'speed_registry')} "
                    "is gone, for longer than its lease (6 s); stopped\n"], lost
