"""fsutil's system calls that keep the GIL: the same effects and errors as the os functions, and
where the receiver may use them."""
import os

import pytest

from speed_runtime import fsutil


def _unlink_os(dir_fd: int, name: str) -> None:
    os.unlink(name, dir_fd=dir_fd)


@pytest.fixture
def home(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield tmp_path, fd
    os.close(fd)


def test_libc_unlinkat_is_found_on_linux():
    assert fsutil._UNLINKAT is not None  # else unlink_keeping_gil is os.unlink and the rest proves little


@pytest.mark.parametrize("unlink", [fsutil.unlink_keeping_gil, _unlink_os], ids=["keeping_gil", "os"])
def test_removes_a_file_and_raises_what_os_unlink_raises(home, unlink):
    path, fd = home
    (path / "a").write_bytes(b"x")
    os.symlink("a", path / "link")
    (path / "dir").mkdir()
    unlink(fd, "link")                      # the link, never its target
    assert sorted(os.listdir(path)) == ["a", "dir"]
    unlink(fd, "a")
    assert os.listdir(path) == ["dir"]
    with pytest.raises(FileNotFoundError):
        unlink(fd, "a")
    with pytest.raises(IsADirectoryError):
        unlink(fd, "dir")
    (path / "f").write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        unlink(fd, "f/b")
    assert sorted(os.listdir(path)) == ["dir", "f"]


def test_in_memory_tells_tmpfs_from_other_file_systems(tmp_path):
    # the receiver keeps the GIL across its unlinks only for an inbox in memory (an unlink on a disk
    # may wait for the disk, and every thread of the node with it)
    shm = os.open("/dev/shm", os.O_RDONLY | os.O_DIRECTORY)
    proc = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert fsutil.in_memory(shm) is True
        assert fsutil.in_memory(proc) is False
    finally:
        os.close(shm)
        os.close(proc)
    assert fsutil.in_memory(-1) is False  # EBADF: unknown, so not in memory


def test_write_keeping_gil_writes_and_raises_what_os_write_raises():
    r, w = os.pipe2(os.O_NONBLOCK)
    try:
        assert fsutil.write_keeping_gil(w, b"xy") == 2
        assert os.read(r, 10) == b"xy"
        with pytest.raises(BlockingIOError):  # a full pipe: a wake-up is already pending
            while True:
                fsutil.write_keeping_gil(w, b"x" * 65536)
    finally:
        os.close(r)
        os.close(w)
    with pytest.raises(OSError) as raised:
        fsutil.write_keeping_gil(w, b"x")
    assert raised.value.errno == 9  # EBADF


# ---------------------------------------------------------------- the one safe regular-file reader
def test_read_regular_reads_a_regular_file_and_its_facts(tmp_path):
    (tmp_path / "f").write_bytes(b"abc")
    data, st = fsutil.read_regular(str(tmp_path / "f"), 3)
    assert data == b"abc" and st.st_size == 3


def test_read_regular_refuses_what_is_not_a_small_regular_file(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 11)
    os.symlink("big", tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")  # opened without blocking, never read
    (tmp_path / "dir").mkdir()
    reasons = {}
    for name in ("big", "link", "fifo", "dir"):
        with pytest.raises(fsutil.FileRefused) as caught:
            fsutil.read_regular(str(tmp_path / name), 10)
        reasons[name] = caught.value.reason
    assert reasons == {"big": "too_large", "link": "link", "fifo": "not_regular", "dir": "not_regular"}
    with pytest.raises(FileNotFoundError):
        fsutil.read_regular(str(tmp_path / "missing"), 10)
    assert fsutil.read_regular(str(tmp_path / "link"), 11, follow=True)[0] == b"x" * 11  # a path the user named


def test_read_regular_private_refuses_a_file_open_to_others(tmp_path):
    path = tmp_path / "key"
    path.write_bytes(b"k")
    os.chmod(path, 0o640)
    with pytest.raises(fsutil.FileRefused) as caught:
        fsutil.read_regular(str(path), 10, private=True)
    assert (caught.value.reason, caught.value.mode) == ("open_to_others", 0o640)
    os.chmod(path, 0o600)
    assert fsutil.read_regular(str(path), 10, private=True)[0] == b"k"


def test_read_regular_reads_at_most_limit_plus_one_bytes_of_a_file_that_grows(tmp_path, monkeypatch):
    # fstat says 1 byte; the file then holds more than the limit: refused, never read whole
    path = tmp_path / "grows"
    path.write_bytes(b"x")
    asked = []
    real_read, real_fstat = os.read, os.fstat

    def fstat_then_grow(fd):
        st = real_fstat(fd)
        path.write_bytes(b"y" * 100_000)
        return st

    def counting_read(fd, n):
        asked.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(fsutil.os, "fstat", fstat_then_grow)
    monkeypatch.setattr(fsutil.os, "read", counting_read)
    with pytest.raises(fsutil.FileRefused) as caught:
        fsutil.read_regular(str(path), 1000)
    assert caught.value.reason == "too_large"
    assert sum(asked) <= 1001 and asked[0] == 2  # the first read asks for what fstat promised
