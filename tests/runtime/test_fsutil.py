"""fsutil's unlink that keeps the GIL: the same effect and the same errors as os.unlink."""
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
