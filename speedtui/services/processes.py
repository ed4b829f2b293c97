"""Child processes of the console (`speed node` processes it owns, the demo's nodes): how to
start `speed`, read the "ready" line, keep stdout drained, stop them; and the console node's name."""

from __future__ import annotations

import getpass
import os
import select
import signal
import subprocess
import sys
import time


def console_node_name() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    clean = "".join(c if c.isalnum() or c in "-_" else "-" for c in user)[:40] or "operator"
    return f"console-{clean}"


def speed_command() -> list[str]:
    """How to start the runtime's `speed` CLI from this interpreter."""
    return [sys.executable, "-m", "speed_runtime"]


def _read_line(proc: subprocess.Popen, timeout: float) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    buf = b""
    fd = proc.stdout.fileno()
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], max(0.0, min(0.2, deadline - time.monotonic())))
        if r:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
            if b"\n" in buf:
                return buf.split(b"\n", 1)[0].decode(errors="replace").strip()
        elif proc.poll() is not None:
            break
    return buf.decode(errors="replace").strip()


def _drain(proc: subprocess.Popen, sink: list[str]) -> None:
    try:
        for line in proc.stdout or ():
            if len(sink) < 200:
                sink.append(line.rstrip())  # the pipe is opened in text mode
    except (OSError, ValueError):
        pass


def _terminate(proc: subprocess.Popen, timeout: float = 10.0, close: bool = True) -> None:
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        except ProcessLookupError:
            pass
    if close:
        _close_pipes(proc)


def _close_pipes(proc: subprocess.Popen) -> None:
    for f in (proc.stdout, proc.stderr):
        try:
            if f:
                f.close()
        except OSError:
            pass
