"""Ending the console by a signal, on a real pseudo-terminal: SIGHUP (the terminal went away, as
`tmux kill-session` does), SIGTERM and SIGINT end `speedtui --demo` as `q` does — no process and
no demo directory left behind, and (where the terminal is still there) the terminal usable again.
Before, the default actions killed the console on the spot: six demo nodes kept running under
PID 1, the demo's directory and key stayed in /dev/shm, the terminal stayed in the alternate screen."""

import fcntl
import os
import pty
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time

import pytest

from ..helpers.proc import descendants, running

#: what Textual writes as it restores the terminal: leave the alternate screen, show the cursor
LEAVE_ALTERNATE_SCREEN = b"\x1b[?1049l"


def demo_dirs_of(pids: list[int]) -> set[str]:
    """The demo directories the console's nodes were started in (from their command lines; a glob
    of /dev/shm would also see other runs' demos)."""
    dirs = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        dirs.update("/dev/shm/" + a.split("/")[3] for a in args if a.startswith("/dev/shm/speed-demo-"))
    return dirs


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["SIGHUP", "SIGTERM", "SIGINT"])
def test_a_signal_ends_the_console_as_q_does(name, tmp_path):
    sig = getattr(signal, name)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 36, 120, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", XDG_CONFIG_HOME=str(tmp_path / "xdg-config"),
               XDG_DATA_HOME=str(tmp_path / "xdg-data"), HOME=str(tmp_path / "home"))
    proc = subprocess.Popen([sys.executable, "-m", "speedtui", "--demo"], stdin=slave, stdout=slave,
                            stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    out, nodes, demos, master_open = bytearray(), [], set(), True
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            if select.select([master], [], [], 0.2)[0]:
                out += os.read(master, 1 << 16)
            nodes = sorted(descendants(proc.pid))
            if b"Leases" in out and len(nodes) >= 6:    # drawn, the demo's six nodes running
                break
        assert proc.poll() is None and len(nodes) >= 6, f"the demo did not come up: {bytes(out[-300:])!r}"
        demos = demo_dirs_of(nodes)
        assert demos, "the demo's nodes name their directory"
        if sig == signal.SIGHUP:        # the terminal is gone first, as when tmux kills its session
            os.close(master)
            master_open = False
        proc.send_signal(sig)
        deadline = time.monotonic() + 120
        while master_open and proc.poll() is None and time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    out += os.read(master, 1 << 16)
                except OSError:
                    break
        assert proc.wait(120) == 128 + sig
        left = [pid for pid in nodes if running(pid)]
        assert not left, f"processes left behind: {left}"
        assert not any(os.path.exists(d) for d in demos), "the demo's directory is left behind"
        if master_open:
            assert LEAVE_ALTERNATE_SCREEN in out[-4096:], "the terminal stays in the alternate screen"
            lflag = termios.tcgetattr(master)[3]
            assert lflag & termios.ICANON and lflag & termios.ECHO, "the terminal is left in raw mode"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in nodes:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        for d in demos:
            shutil.rmtree(d, ignore_errors=True)
        if master_open:
            os.close(master)
