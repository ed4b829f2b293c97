"""The `speedtui` command line: defaults, clear one-sentence errors (exit 2), keygen."""

import json
import os
import subprocess
import sys


from speedtui.__main__ import check_root, main
from speedtui.paths import Paths, default_key


def run(args, tmp_path, env_extra=None):
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "xdg-config"), XDG_DATA_HOME=str(tmp_path / "xdg-data"),
               HOME=str(tmp_path / "home"))
    env.pop("SPEED_KEY", None)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "speedtui", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def test_missing_key_is_one_sentence_exit_2(tmp_path):
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    p = run(["--dir", str(root), "--key", str(tmp_path / "nope.key")], tmp_path)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "does not exist" in p.stderr


def test_insecure_key_is_refused(tmp_path):
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    k = tmp_path / "k.key"
    assert run(["keygen", str(k)], tmp_path).returncode == 0
    os.chmod(k, 0o644)
    p = run(["--dir", str(root), "--key", str(k)], tmp_path)
    assert p.returncode == 2 and "chmod 600" in p.stderr and "Traceback" not in p.stderr


def test_bad_key_content(tmp_path):
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    k = tmp_path / "k.key"
    k.write_text("SPEED-KEY-V1\nnot-base64!!\n")
    os.chmod(k, 0o600)
    p = run(["--dir", str(root), "--key", str(k)], tmp_path)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_missing_dir(tmp_path):
    p = run(["--dir", str(tmp_path / "absent"), "--key", str(tmp_path / "k")], tmp_path)
    assert p.returncode == 2 and "does not exist" in p.stderr and "Traceback" not in p.stderr


def test_world_writable_dir_and_symlink(tmp_path):
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    assert "writable by others" in check_root(d)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "root2")
    assert "symbolic link" in check_root(link)


def test_keygen_default_location_and_never_overwrites(tmp_path):
    p = run(["keygen"], tmp_path)
    assert p.returncode == 0, p.stderr
    key = tmp_path / "xdg-config" / "speedtui" / "speed.key"
    assert key.exists() and (key.stat().st_mode & 0o777) == 0o600
    assert "fingerprint" in p.stdout and key.read_text().split()[1] not in p.stdout
    again = run(["keygen"], tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr


def test_key_default_prefers_env(tmp_path):
    paths = Paths(tmp_path / "c", tmp_path / "d")
    assert default_key(paths, {"SPEED_KEY": "/x/y.key"}).as_posix() == "/x/y.key"
    assert default_key(paths, {}) == tmp_path / "c" / "speed.key"


# $SPEED_DIR and $SPEED_KEY are honoured as by `speed`
def test_speed_dir_and_key_from_the_environment(tmp_path):
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "c"), XDG_DATA_HOME=str(tmp_path / "d"),
               SPEED_DIR=str(tmp_path / "from-env"), SPEED_KEY=str(tmp_path / "env.key"))
    p = subprocess.run([sys.executable, "-m", "speedtui"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2 and str(tmp_path / "from-env") in p.stderr and "/dev/shm/speed " not in p.stderr


def test_pipeline_subcommands_are_wired():
    from speedtui.__main__ import build_parser

    p = build_parser()
    sub = next(a for a in p._actions if a.dest == "command")
    import speedtui.pipeline.commands  # noqa: F401
    assert {"analyze", "simulate-traces", "keygen"} <= set(sub.choices)


def test_main_in_process_missing_key(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SPEED_KEY", raising=False)
    root = tmp_path / "r"
    root.mkdir(mode=0o700)
    assert main(["--dir", str(root), "--key", str(tmp_path / "absent.key")]) == 2
    assert "speedtui:" in capsys.readouterr().err


# ---------------------------------------------------------------------------- on a real terminal
CRASH_AT_START = ("import sys\nfrom speedtui.ui.app import SpeedApp\n"
                  "def boom(self): raise RuntimeError('a crash at start')\n"
                  "SpeedApp.on_mount = boom\nfrom speedtui.__main__ import main\nsys.exit(main(sys.argv[1:]))\n")


def in_terminal(argv, tmp_path, until: bytes, keys: bytes = b"q", timeout: float = 90.0) -> tuple[int, bytes, bool]:
    """Run ``argv`` on a pseudo-terminal of 120x36 as an operator would; once ``until`` is drawn
    (or the process ended), type ``keys``. Returns (exit status, all it wrote, whether it was still
    running when the keys were typed)."""
    import fcntl
    import pty
    import select
    import struct
    import termios
    import time

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 36, 120, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", XDG_CONFIG_HOME=str(tmp_path / "xdg-config"),
               XDG_DATA_HOME=str(tmp_path / "xdg-data"), HOME=str(tmp_path / "home"))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    out = bytearray()

    def read(until_done) -> None:
        deadline = time.monotonic() + timeout
        while not until_done() and time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    out.extend(os.read(master, 1 << 16))
                except OSError:  # the process ended and closed the terminal
                    return

    try:
        read(lambda: until in out or proc.poll() is not None)
        running = proc.poll() is None
        if running:
            os.write(master, keys)
        read(lambda: proc.poll() is not None)
        read(lambda: False) if proc.poll() is not None else None  # what is left to read, until EOF
        return proc.wait(30), bytes(out), running
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def test_a_journal_link_named_as_markup_is_reported_and_the_console_runs(tmp_path):
    """The reproduction of issue 26: a link in speed_traces/ named `[a="]x.jsonl` (and an entry's
    host setting the terminal's title) ended `speedtui` at every start with a MarkupError, exit 0."""
    from speedtui.environments.fixture import build

    from .hostile import TITLE, terminal_problems

    root, key = build(tmp_path / "root")
    os.symlink(root / "speed_traces" / "billing.jsonl", root / "speed_traces" / '[a="]x.jsonl')
    entry = json.loads((root / "speed_registry" / "billing.node").read_text())
    (root / "speed_registry" / "billing.node").write_text(json.dumps({**entry, "host": TITLE}))
    status, out, running = in_terminal([sys.executable, "-m", "speedtui", "--dir", str(root), "--key", str(key)],
                                       tmp_path, until=b"skipped")
    text = out.decode("utf-8", "replace")
    assert running and status == 0, text[-2000:]
    assert "MarkupError" not in text and 'x.jsonl skipped' in text
    assert terminal_problems(text) == []


def test_a_crash_ends_speedtui_with_a_failure_status(tmp_path):
    from speedtui.environments.fixture import build

    root, key = build(tmp_path / "root")
    status, out, _ = in_terminal([sys.executable, "-c", CRASH_AT_START, "--dir", str(root), "--key", str(key)],
                                 tmp_path, until=b"a crash at start")
    assert status == 1 and b"a crash at start" in out


def test_the_help_names_every_environment_variable_the_defaults_read():
    """`speedtui --help` did not mention $SPEED_DIR, which chooses ROOT as it does for `speed`."""
    import inspect
    import re

    from speedtui import paths
    from speedtui.__main__ import build_parser

    read = set(re.findall(r'"(SPEED_[A-Z_]+)"', inspect.getsource(paths)))
    assert {"SPEED_DIR", "SPEED_KEY"} <= read
    text = " ".join(build_parser().format_help().split())
    assert not [v for v in read if f"${v}" not in text]
