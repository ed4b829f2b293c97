"""Delivery into inboxes: no temporaries left behind, removed directories fail loudly."""
import os
import shutil

import pytest

from speed_runtime.core.errors import DeliveryError
from speed_runtime.transport import DirectoryGone, NameTaken, TargetDirs, deliver, prepare_home


@pytest.fixture
def home(workdir):
    inbox, tmp = prepare_home(workdir, "t")
    dirs = TargetDirs(workdir, "t")
    yield inbox, tmp, dirs
    dirs.close()


def test_delivery_leaves_exactly_the_inbox_file(home):
    inbox, tmp, dirs = home
    deliver(dirs, "a.00000000.00000000000000000001.00000000.env", b"x" * 100)
    assert os.listdir(inbox) == ["a.00000000.00000000000000000001.00000000.env"] and os.listdir(tmp) == []
    assert os.stat(os.path.join(inbox, os.listdir(inbox)[0])).st_nlink == 1
    assert os.stat(os.path.join(inbox, os.listdir(inbox)[0])).st_mode & 0o777 == 0o600


def test_an_existing_name_is_never_replaced(home):
    inbox, tmp, dirs = home
    name = "a.00000000.00000000000000000001.00000000.env"
    deliver(dirs, name, b"first")
    with pytest.raises(NameTaken):
        deliver(dirs, name, b"second")
    assert open(os.path.join(inbox, name), "rb").read() == b"first" and os.listdir(tmp) == []


def test_a_removed_directory_fails_instead_of_writing_into_the_void(home, workdir):
    inbox, tmp, dirs = home
    shutil.rmtree(os.path.join(workdir, "t"))
    prepare_home(workdir, "t")  # recreated: the cached descriptors point at the removed ones
    with pytest.raises(DirectoryGone):
        deliver(dirs, "a.00000000.00000000000000000001.00000000.env", b"x")
    assert issubclass(DirectoryGone, DeliveryError)
    fresh = TargetDirs(workdir, "t")
    try:
        deliver(fresh, "a.00000000.00000000000000000001.00000000.env", b"x")
    finally:
        fresh.close()
    assert os.listdir(os.path.join(workdir, "t", "inbox")) == ["a.00000000.00000000000000000001.00000000.env"]
