"""Fixtures shared by every test: private directories, keys, real node processes, and a guard
that fails any test leaving a thread behind (as watchdog's suite does)."""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time

import pytest

from speed_runtime import generate_key_file

from .helpers.processes import NodeProcesses
from .helpers.wait import wait_until

SHM = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


@pytest.fixture
def workdir():
    path = tempfile.mkdtemp(prefix="speedtest-", dir=SHM)
    os.chmod(path, 0o700)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def root(workdir):
    """A fresh communication directory (created by the runtime on first use)."""
    return os.path.join(workdir, "env")


@pytest.fixture
def key_path(workdir):
    path = os.path.join(workdir, "speed.key")
    generate_key_file(path)
    return path


@pytest.fixture
def key(key_path):
    from speed_runtime import load_key

    return load_key(key_path)


@pytest.fixture
def procs(root, key_path):
    """Start real `speed node` processes; all are stopped (then killed) at teardown."""
    group = NodeProcesses(root, key_path)
    yield group
    group.stop_all()


_IGNORED_THREADS = ("pydevd", "Dummy-", "asyncio_", "ThreadPoolExecutor-")


def _process_lifetime(thread: threading.Thread) -> bool:
    """py4j (under PySpark) keeps its gateway's finalizer thread for the life of the process, by
    design, once any SparkSession has started; it is not ours to stop."""
    return type(thread).__module__.startswith("py4j.")


@pytest.fixture(autouse=True)
def no_leaked_threads(request):
    before = set(threading.enumerate())
    yield
    if request.node.get_closest_marker("allow_thread_leak"):
        return

    def leaked():
        return [t for t in threading.enumerate() if t not in before and t.is_alive()
                and not t.name.startswith(_IGNORED_THREADS) and not _process_lifetime(t)]

    try:
        wait_until(lambda: not leaked(), timeout=10, what="threads to finish")
    except TimeoutError:
        pytest.fail(f"test leaked threads: {[t.name for t in leaked()]}")


def pytest_configure(config):
    config.addinivalue_line("markers", "allow_thread_leak: the test owns threads that outlive it on purpose")
