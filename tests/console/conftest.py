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


async def tables_settled(pilot) -> None:
    """Until every table on screen scrolls as wide as its columns, and stays so for three pauses.
    A table measures its columns from the rows on screen in the room it has, and learns its width
    only as it draws; a scrollbar that a wider table brings changes that room. A picture taken
    before that settles shows a scrollbar's thumb a cell or two off, by how fast the machine drew
    (Security, Durable and time travel at 80x24 in clean-clone runs). The widths are asked for
    here in the room the table has now, as its next drawing would."""
    from speedtui.ui.widgets.fast_table import FastTable

    def tables():
        return [t for t in pilot.app.screen.query(FastTable) if t.region.area]

    def state():
        return tuple((t.widths(), t.virtual_size, t.scrollable_content_region.size) for t in tables())

    deadline, seen, steady = time.monotonic() + 60.0, None, 0
    while steady < 3:
        assert time.monotonic() < deadline, "timed out waiting for the tables' columns to settle"
        await pilot.pause(0.02)
        now = state()
        fitted = all(t.virtual_size.width == t._total_width() for t in tables())
        steady = steady + 1 if fitted and now == seen else 0
        seen = now


@pytest.fixture
def snap_compare(snap_compare):
    """The snapshot plugin's compare, the picture taken once the tables on screen have settled
    (after ``run_before`` and the key presses, as the plugin does them)."""
    def compare(app, press=(), terminal_size=(80, 24), run_before=None):
        async def before(pilot):
            if run_before is not None:
                result = run_before(pilot)
                if result is not None:
                    await result
            await pilot.pause()
            await pilot.press(*press)
            await tables_settled(pilot)

        return snap_compare(app, terminal_size=terminal_size, run_before=before)

    return compare


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
