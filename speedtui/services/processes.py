"""Child processes of the console (`speed node` processes it owns, the demo's nodes): how to
start `speed`, read the "ready" line, follow stdout and stderr, stop them; and the console node's name."""

from __future__ import annotations

import getpass
import os
import select
import selectors
import signal
import subprocess
import sys
import time
from typing import Callable


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


PARTIAL_LINE_BYTES = 64 * 1024  # a longer run without a newline is taken as a line (bounded buffer)


def follow_output(proc: subprocess.Popen, on_line: Callable[[str, str], None],
                  on_end: Callable[[int | None], None]) -> None:
    """Read a child's stdout and stderr (binary pipes) until both end, handing each line to
    ``on_line(stream, text)``; then wait for the child and hand its return code to ``on_end``.
    Both pipes are read for as long as the child lives: a pipe nobody reads fills (64 KiB) and a
    chatty child blocks in its next write. Runs in a thread of its own."""
    streams = {f.fileno(): (name, f) for name, f in (("stdout", proc.stdout), ("stderr", proc.stderr)) if f}
    partial = {fd: b"" for fd in streams}
    with selectors.DefaultSelector() as sel:
        for fd in streams:
            sel.register(fd, selectors.EVENT_READ)
        while streams:
            events = sel.select(0.5)
            if not events and proc.poll() is not None:
                break  # it ended and nothing more comes (or its pipes were closed under us)
            for key, _ in events:
                fd = key.fd
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # closed by whoever stopped it: the end of this stream
                    chunk = b""
                name = streams[fd][0]
                if not chunk:  # the child closed it (ended)
                    if partial[fd]:
                        on_line(name, partial[fd].decode(errors="replace"))
                    sel.unregister(fd)
                    del streams[fd]
                    continue
                *lines, partial[fd] = (partial[fd] + chunk).split(b"\n")
                if len(partial[fd]) > PARTIAL_LINE_BYTES:
                    lines.append(partial[fd])
                    partial[fd] = b""
                for line in lines:
                    on_line(name, line.rstrip(b"\r").decode(errors="replace"))
    try:
        code = proc.wait(30)
    except subprocess.TimeoutExpired:  # it closed its pipes and lives on: it is stopped elsewhere
        code = None
    on_end(code)


def _terminate(proc: subprocess.Popen, timeout: float = 10.0, close: bool = True, signalled: bool = False) -> None:
    """SIGTERM (unless ``signalled``: sent already), then SIGKILL after ``timeout``. Never a second
    SIGTERM: one that comes while a `speed node` is ending after the first meets the default
    action (Python restores it as the interpreter finalizes) and the node "ended by SIGTERM"."""
    if proc.poll() is None:
        try:
            if not signalled:
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
