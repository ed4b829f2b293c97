import os
import time
from pathlib import Path

import pytest

os.environ["TZ"] = "UTC"
time.tzset()

from speedtui.services import runtime as rt  # noqa: E402
from speedtui.services.clock import FrozenClock  # noqa: E402
from speedtui.environments.fixture import FIXED_NOW, build  # noqa: E402
from speedtui.paths import Paths  # noqa: E402

SIZE = (120, 36)


@pytest.fixture
def fixture_env(tmp_path):
    """The deterministic environment: (root, KeyInfo, Paths)."""
    root, key_path = build(tmp_path / "root")
    paths = Paths(tmp_path / "config", tmp_path / "data")
    return root, rt.load_key(key_path), paths


def fixture_app_at(tmp_path, name="root", paths=None, **kw):
    """(root, Paths, app) of the deterministic environment built under ``tmp_path / name``, with a
    frozen clock and the label the snapshots show."""
    from speedtui.ui.app import make_app

    root, key_path = build(tmp_path / name)
    paths = paths or Paths(tmp_path / "config", tmp_path / "data")
    kw.setdefault("clock", FrozenClock(FIXED_NOW))
    return root, paths, make_app(root, rt.load_key(key_path), paths=paths, dir_label="/fixture/speed",
                                 steady=True, **kw)


@pytest.fixture
def fixture_app(fixture_env):
    from speedtui.ui.app import make_app

    root, key, paths = fixture_env

    def make(**kw):
        kw.setdefault("clock", FrozenClock(FIXED_NOW))
        kw.setdefault("paths", paths)
        kw.setdefault("dir_label", "/fixture/speed")
        return make_app(root, key, **kw)

    return make


def run_async(fn):
    """Run an async test with asyncio.run (no async pytest plugin is installed)."""
    import asyncio
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


async def wait_for(pilot, cond, timeout: float = 60.0, step: float = 0.05, what: str = "condition"):
    """Poll ``cond`` between pilot pauses until true or the deadline passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        await pilot.pause(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture
def live_env(tmp_path):
    """An empty real ROOT (0700) and key for tests with live nodes: (root, KeyInfo, Paths)."""
    root = Path(tmp_path) / "root"
    root.mkdir(mode=0o700)
    key_path = tmp_path / "speed.key"
    rt.generate_key_file(key_path)
    return root, rt.load_key(key_path), Paths(tmp_path / "config", tmp_path / "data")


def node_id(name: str) -> str:
    """A fixed, valid instance id for a hand-written registry entry."""
    import uuid

    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"speed:{name}"))


def entry_record(name: str, data: dict | None, error: str | None = None):
    """A registry record as the runtime's reader returns it, from an entry's JSON object."""
    from speed_runtime.core.entry import RegistryEntry
    from speed_runtime.core.errors import BadEntryError
    from speed_runtime.registry import RegistryRecord

    if data is None:
        return RegistryRecord(name, None, error)
    try:
        return RegistryRecord(name, RegistryEntry.from_dict(data))
    except BadEntryError as exc:
        return RegistryRecord(name, None, str(exc))
