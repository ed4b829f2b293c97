"""Raw inotify through ctypes: the inbox wake-up (watchdog's observer drops events under bursts,
see shared/BASELINES.md). Events are hints only; callers rescan on overflow and on a timer."""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import select
import struct

IN_CREATE = 0x00000100
IN_MOVED_TO = 0x00000080
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

_EVENT = struct.Struct("iIII")
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.inotify_init1.argtypes = [ctypes.c_int]
_libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]


class DirectoryWatch:
    """inotify on one directory plus a self-pipe so another thread can wake the waiter."""

    def __init__(self, path: str, mask: int = IN_CREATE | IN_MOVED_TO):
        fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1 failed: {os.strerror(err)}")
        self.fd = fd
        if _libc.inotify_add_watch(fd, os.fsencode(path), mask) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, f"cannot watch {path}: {os.strerror(err)}")
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._poll = select.poll()
        self._poll.register(self.fd, select.POLLIN)
        self._poll.register(self._wake_r, select.POLLIN)

    def wait(self, timeout: float | None) -> tuple[list[str], bool]:
        """Block up to `timeout` seconds; returns (names created or moved in, overflowed)."""
        ready = self._poll.poll(None if timeout is None else max(0, int(timeout * 1000)))
        if not ready:
            return [], False
        names: list[str] = []
        overflow = False
        for fd, _ in ready:
            if fd == self._wake_r:
                _drain(self._wake_r)
            else:
                overflow |= self._read_events(names)
        return names, overflow

    def _read_events(self, names: list[str]) -> bool:
        overflow = False
        while True:
            try:
                buf = os.read(self.fd, 256 * 1024)
            except BlockingIOError:
                return overflow
            pos, end = 0, len(buf)
            while pos + _EVENT.size <= end:
                _wd, mask, _cookie, length = _EVENT.unpack_from(buf, pos)
                pos += _EVENT.size
                if mask & IN_Q_OVERFLOW:
                    overflow = True
                elif length:
                    raw = buf[pos:pos + length].rstrip(b"\0")
                    names.append(os.fsdecode(raw))
                pos += length

    def wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass  # a wake-up is already pending

    def close(self) -> None:
        for fd in (self.fd, self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError as exc:
                if exc.errno != errno.EBADF:
                    raise


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass
