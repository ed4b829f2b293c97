"""File-system safety (wire contract §1) and the facts about this host: its clocks, boot id,
host name and processes."""
from __future__ import annotations

import ctypes
import errno
import os
import resource
import socket
import stat
import sys
import time

from .core import accel
from .core.errors import DirectoryError
from .core.liveness import HostFacts

REGISTRY_DIR = "speed_registry"
TRACES_DIR = "speed_traces"


def check_private_dir(path: str, *, shared_group: bool = False, what: str = "directory") -> None:
    """Refuse a symlink, a foreign owner or a directory writable by others (§1)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise DirectoryError(f"{what} {path} does not exist") from None
    if stat.S_ISLNK(st.st_mode):
        raise DirectoryError(f"{what} {path} is a symbolic link; pass the real directory instead")
    if not stat.S_ISDIR(st.st_mode):
        raise DirectoryError(f"{what} {path} is not a directory")
    if st.st_uid != os.geteuid():
        raise DirectoryError(f"{what} {path} is owned by uid {st.st_uid}, not by you (uid {os.geteuid()}); "
                             "use a directory of your own")
    loose = 0o002 if shared_group else 0o022
    if st.st_mode & loose:
        raise DirectoryError(f"{what} {path} is writable by {'others' if shared_group else 'group or others'} "
                             f"(mode {stat.S_IMODE(st.st_mode):04o}); run `chmod 700 {path}`")


def ensure_private_dir(path: str, *, shared_group: bool = False, what: str = "directory") -> str:
    """Create `path` with mode 0700 if missing (never widening what exists), then check it."""
    mode = 0o770 if shared_group else 0o700
    try:
        os.mkdir(path, mode)
        os.chmod(path, mode)  # the umask must not decide our permissions
    except FileExistsError:
        pass
    except FileNotFoundError:
        raise DirectoryError(f"cannot create {what} {path}: its parent does not exist") from None
    except PermissionError:
        raise DirectoryError(f"cannot create {what} {path}: permission denied") from None
    check_private_dir(path, shared_group=shared_group, what=what)
    return path


def prepare_root(root: str, *, create: bool = True, shared_group: bool = False) -> str:
    """Check (and create, with its parents) the communication directory and its registry."""
    root = os.path.abspath(os.fspath(root))
    if create and not os.path.lexists(root):
        parent = os.path.dirname(root)
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as exc:
            raise DirectoryError(f"cannot create communication directory {root}: {exc.strerror}") from None
    if create:
        ensure_private_dir(root, shared_group=shared_group, what="communication directory")
        ensure_private_dir(os.path.join(root, REGISTRY_DIR), shared_group=shared_group, what="registry directory")
    else:
        check_private_dir(root, shared_group=shared_group, what="communication directory")
    return root


def read_boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            return f.read(64).decode("ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def boottime() -> float:
    """CLOCK_BOOTTIME seconds: immune to wall-clock steps, counts suspend."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def file_time_uncertainty() -> float:
    """How far a file's change time may lie before the moment it was really set: the kernel stamps
    files from its coarse clock, which moves once per tick (4 ms here). Two ticks, to be safe."""
    try:
        return 2 * time.clock_getres(getattr(time, "CLOCK_REALTIME_COARSE", 5))
    except OSError:
        return 0.02


FILE_TIME_UNCERTAINTY = file_time_uncertainty()
HOSTNAME = socket.gethostname()
BOOT_ID = read_boot_id()


def pid_exists(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # OverflowError: no process can have such a pid
        return False
    except PermissionError:
        return True
    return True


def local_facts() -> HostFacts:
    """This host's facts now, for `core.liveness.judge`."""
    return HostFacts(HOSTNAME, BOOT_ID, boottime(), pid_exists)


def descriptor_budget(most: int) -> int:
    """How many of one kind of descriptor a node keeps open at once (a target's directories, a
    sender's ledger): at most `most`, and within an eighth of what this process may open, so that
    the kinds together leave room for inboxes, journals, sockets… under a low `ulimit -n`."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return most
    return max(1, min(most, soft // 8))


def close_quietly(*fds: int) -> None:
    """Close descriptors that are open (>= 0), ignoring errors: for clean-up paths, whose callers
    set their own copies to -1 first so that nothing is ever closed twice."""
    for fd in fds:
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


# ============================================================================ reading a regular file safely
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class FileRefused(OSError):
    """What a safe reader refuses to read: `reason` is `link` (a symbolic link), `not_regular` (a
    FIFO, a directory, a device, …), `too_large`, `open_to_others` (a private file readable or
    writable by group or others: `mode`), or `unreadable` (reading failed: `detail`)."""

    def __init__(self, reason: str, detail: str = "", *, size: int = 0, mode: int = 0):
        super().__init__(reason if not detail else f"{reason}: {detail}")
        self.reason, self.detail, self.size, self.mode = reason, detail, size, mode


def open_regular(path: str, flags: int = os.O_RDONLY, mode: int = 0o600, *, dir_fd: int | None = None,
                 follow: bool = False) -> tuple[int, os.stat_result]:
    """Open `path` without following a symbolic link (unless `follow`: a path the user named) and
    without blocking on a FIFO, and refuse anything but a regular file (FileRefused); the
    descriptor and what fstat says of it. A missing path is FileNotFoundError, any other failure
    to open the OSError itself."""
    try:
        fd = os.open(path, flags | _OPEN_FLAGS if not follow else flags | os.O_NONBLOCK | os.O_CLOEXEC, mode,
                     dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise FileRefused("link") from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO without a reader, a directory opened to write
            raise FileRefused("not_regular") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise FileRefused("not_regular")
    return fd, st


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data`: a short write (a file-size limit reached, a full disk) is continued, and
    the write that cannot continue raises (EFBIG, ENOSPC…)."""
    view, written = memoryview(data), 0
    while written < len(data):
        n = os.write(fd, view[written:])
        if n <= 0:  # a regular file never does this; never loop on it
            raise OSError(errno.EIO, "the write made no progress")
        written += n


def why_not_written(exc: OSError) -> str:
    """Why a write failed, as the operator reads it: the limit to raise when it is one."""
    if exc.errno == errno.EFBIG:
        return "the file-size limit of this process: `ulimit -f`"
    return exc.strerror or type(exc).__name__


def read_regular(path: str, limit: int, *, dir_fd: int | None = None, follow: bool = False,
                 private: bool = False) -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file of at most `limit` bytes (open_regular), and its fstat; with
    `private`, refused when group or others may read or write it. Never reads more than limit + 1
    bytes, whatever the file claims or becomes meanwhile."""
    fd, st = open_regular(path, dir_fd=dir_fd, follow=follow)
    try:
        if private and st.st_mode & 0o077:
            raise FileRefused("open_to_others", mode=stat.S_IMODE(st.st_mode))
        if st.st_size > limit:
            raise FileRefused("too_large", size=st.st_size)
        # The first read asks for what fstat promised (os.read allocates what it is asked for, and a
        # limit may be large); later ones, for what a file that grew may still add, in slices.
        chunks, left, ask = [], limit + 1, st.st_size + 1
        while left > 0:
            chunk = os.read(fd, min(left, ask))
            ask = 1 << 16
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except FileRefused:
        raise
    except OSError as exc:
        raise FileRefused("unreadable", exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise FileRefused("too_large", size=len(data))
    return data, st


# Two system calls made through ctypes.PyDLL (or, cheaper, the compiled form's twins: core/_compiled.c),
# which keeps the GIL across the call. A handler lane
# removes each accepted file just before its handler runs (§5.5 step 6) and wakes the protocol
# thread when its read-ahead has room again, while the protocol thread reads and judges the next
# files. os.unlink and os.write release the GIL, and a thread that released it waits to take it
# back until the other releases it too: the two threads then traded the GIL at every system call,
# and the receiver's CPU per message grew by half (docs/BENCHMARKS.md, "receiver CPU"). Removing a
# name from a local directory and writing a byte to a non-blocking pipe take microseconds, less
# than two hand-offs of the GIL. The unlink only where that holds: on a file system backed by a
# disk it may wait for the disk, and every thread of the node (its lease renewal too) would wait
# with it, so the receiver keeps the GIL only for an inbox in memory (tmpfs or ramfs: /dev/shm, the
# default root; `in_memory`). Where libc lacks these functions, the os ones are used.
_FS_ENCODING = sys.getfilesystemencoding()
_MEMORY_FILE_SYSTEMS = (0x01021994, 0x858458F6)  # TMPFS_MAGIC, RAMFS_MAGIC (linux/magic.h)
try:
    _LIBC = ctypes.PyDLL(None, use_errno=True)
    _UNLINKAT, _WRITE, _FSTATFS = _LIBC.unlinkat, _LIBC.write, _LIBC.fstatfs
    _UNLINKAT.argtypes, _UNLINKAT.restype = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int), ctypes.c_int
    _WRITE.argtypes, _WRITE.restype = (ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t), ctypes.c_ssize_t
    _FSTATFS.argtypes, _FSTATFS.restype = (ctypes.c_int, ctypes.c_void_p), ctypes.c_int
except (OSError, AttributeError):
    _UNLINKAT = _WRITE = _FSTATFS = None
_COMPILED = accel.compiled  # the same two calls in the compiled form (core/_compiled.c), when built


def in_memory(fd: int) -> bool:
    """Whether the open directory `fd` is on tmpfs or ramfs (fstatfs(2); False when unknown)."""
    if _FSTATFS is None:
        return False
    buf = ctypes.create_string_buffer(256)  # struct statfs: 120 bytes on 64-bit Linux, f_type first
    if _FSTATFS(fd, buf) != 0:
        return False
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF in _MEMORY_FILE_SYSTEMS


def unlink_keeping_gil(dir_fd: int, name: str) -> None:
    """os.unlink(name, dir_fd=dir_fd), with the same errors, without releasing the GIL (above)."""
    if _COMPILED is not None:  # one a received file: a tenth of the ctypes call's cost
        err = _COMPILED.unlinkat_keeping_gil(dir_fd, name.encode(_FS_ENCODING, "surrogateescape"))
        if err:
            _raise_errno(err, name)
    elif _UNLINKAT is None:
        os.unlink(name, dir_fd=dir_fd)
    elif _UNLINKAT(dir_fd, name.encode(_FS_ENCODING, "surrogateescape"), 0) != 0:  # os.fsencode, inline
        _raise_errno(ctypes.get_errno(), name)


def write_keeping_gil(fd: int, data: bytes) -> int:
    """os.write(fd, data) for a descriptor that never blocks (a non-blocking pipe), with the same
    errors, without releasing the GIL (above)."""
    if _COMPILED is not None and type(data) is bytes:
        written = _COMPILED.write_keeping_gil(fd, data)
        if written < 0:
            _raise_errno(-written, None)
        return written
    if _WRITE is None:
        return os.write(fd, data)
    written = _WRITE(fd, data, len(data))
    if written < 0:
        _raise_errno(ctypes.get_errno(), None)
    return written


def _raise_errno(err: int, name: str | None):
    raise OSError(err, os.strerror(err), *((name,) if name is not None else ()))  # OSError picks the subclass
