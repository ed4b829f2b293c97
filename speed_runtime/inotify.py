"""Raw inotify through ctypes: one instance per node, watching its inbox and the registry
directory (the default limit is 128 instances per user, so a node must not take two). Events are
hints only: callers rescan on overflow and on a timer. watchdog's observer drops events under
bursts and takes an instance per watch, so the node does not use it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import resource
import select
import struct
import threading
from typing import Hashable

from .fsutil import write_keeping_gil

IN_MODIFY = 0x00000002
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

INBOX_EVENTS = IN_CREATE | IN_MOVED_TO | IN_MOVE_SELF | IN_DELETE_SELF
# An entry is written as a temporary file renamed over `<name>.node` (§4): the temporary file's
# creation and close are of no interest, and with N nodes on a host each of them woke N threads.
# An entry written in place (not per §4) is found by the periodic rescan.
REGISTRY_EVENTS = IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE

_EVENT = struct.Struct("iIII")
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.inotify_init1.argtypes = [ctypes.c_int]
_libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
_libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]


def _proc_limit(name: str) -> str:
    try:
        with open(f"/proc/sys/fs/inotify/{name}", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return "?"


def _init_error(err: int) -> OSError:
    """One sentence naming the limit that was hit and how to raise it."""
    if err == errno.EMFILE:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        try:
            open_fds = len(os.listdir("/proc/self/fd"))
        except OSError:
            open_fds = 0
        if soft != resource.RLIM_INFINITY and open_fds >= soft - 1:
            return OSError(err, f"cannot create an inotify instance: this process has {open_fds} of its {soft} "
                                "file descriptors open (raise it with `ulimit -n`)")
        return OSError(err, "cannot create an inotify instance: this user has reached the limit of "
                            f"fs.inotify.max_user_instances = {_proc_limit('max_user_instances')} (each SPEED node "
                            "uses one); raise it with `sysctl fs.inotify.max_user_instances=1024`")
    if err == errno.ENFILE:
        return OSError(err, "cannot create an inotify instance: the system-wide limit of open files is reached")
    return OSError(err, f"inotify_init1 failed: {os.strerror(err)}")


class Watch:
    """One inotify instance with several watched directories, plus a self-pipe so another
    thread can wake the waiter. `wait` returns (key, name) pairs, the key given to `add`."""

    def __init__(self) -> None:
        fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise _init_error(ctypes.get_errno())
        self.fd = fd
        self._closing = threading.Lock()
        self._keys: dict[int, Hashable] = {}
        self._wds: dict[Hashable, int] = {}
        try:
            self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            os.close(fd)
            raise
        self._poll = select.poll()
        self._poll.register(self.fd, select.POLLIN)
        self._poll.register(self._wake_r, select.POLLIN)

    def add(self, path: str, mask: int, key: Hashable) -> None:
        """Watch `path`; events for it are reported with `key`. Re-adding a key replaces its watch."""
        self.remove(key)
        wd = _libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            err = ctypes.get_errno()
            if err == errno.ENOSPC:
                raise OSError(err, f"cannot watch {path}: this user has reached the limit of "
                                   f"fs.inotify.max_user_watches = {_proc_limit('max_user_watches')}; raise it with "
                                   "`sysctl fs.inotify.max_user_watches=65536`")
            raise OSError(err, f"cannot watch {path}: {os.strerror(err)}")
        self._keys[wd] = key
        self._wds[key] = wd

    def remove(self, key: Hashable) -> None:
        wd = self._wds.pop(key, None)
        if wd is not None:
            self._keys.pop(wd, None)
            _libc.inotify_rm_watch(self.fd, wd)  # EINVAL when the directory is already gone: fine

    def wait(self, timeout: float | None) -> tuple[list[tuple[Hashable, str]], bool]:
        """Block up to `timeout` seconds; returns ((key, name) of each event, overflowed).
        A watched directory moved or deleted reports (key, "") so its owner can look again."""
        ready = self._poll.poll(None if timeout is None else max(0, int(timeout * 1000)))
        events: list[tuple[Hashable, str]] = []
        overflow = False
        for fd, _ in ready:
            if fd == self._wake_r:
                _drain(self._wake_r)
            else:
                overflow |= self._read_events(events)
        return events, overflow

    def _read_events(self, events: list[tuple[Hashable, str]]) -> bool:
        overflow = False
        while True:
            try:
                buf = os.read(self.fd, 256 * 1024)
            except BlockingIOError:
                return overflow
            pos, end = 0, len(buf)
            while pos + _EVENT.size <= end:
                wd, mask, _cookie, length = _EVENT.unpack_from(buf, pos)
                pos += _EVENT.size
                key = self._keys.get(wd)
                if mask & IN_Q_OVERFLOW:
                    overflow = True
                elif key is not None:
                    if mask & (IN_MOVE_SELF | IN_DELETE_SELF | IN_IGNORED):
                        events.append((key, ""))
                    elif length:
                        events.append((key, os.fsdecode(buf[pos:pos + length].rstrip(b"\0"))))
                pos += length

    def wake(self) -> None:
        with self._closing:  # never write to a descriptor number that close() gave back
            if self._wake_w < 0:
                return
            try:
                write_keeping_gil(self._wake_w, b"x")  # called by handler lanes: see fsutil
            except (BlockingIOError, OSError):
                pass  # a wake-up is already pending

    def close(self) -> None:
        """Close the descriptors once (a second call must not close numbers reused meanwhile)."""
        with self._closing:
            fds, (self.fd, self._wake_r, self._wake_w) = (self.fd, self._wake_r, self._wake_w), (-1, -1, -1)
        for fd in fds:
            if fd < 0:
                continue
            try:
                os.close(fd)
            except OSError as exc:
                if exc.errno != errno.EBADF:
                    raise
        self._keys.clear()
        self._wds.clear()


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass
