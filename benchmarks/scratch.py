"""A benchmark run's scratch environment. Nothing of the runtime is imported here: a run may
measure another checkout's runtime (`--checkout`), whose own `speed keygen` makes the key."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile


def scratch_environment(prefix: str, checkout: str) -> tuple[str, str, str]:
    """A private directory on /dev/shm (where nodes keep ROOT; else the default temporary one), the
    path of ROOT in it and of a key made there by `checkout`'s `speed keygen`: (work, root, key).
    The caller removes `work` (shutil.rmtree) when the run ends."""
    work = tempfile.mkdtemp(prefix=prefix, dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    os.chmod(work, 0o700)
    root, key = os.path.join(work, "env"), os.path.join(work, "speed.key")
    try:
        subprocess.run([sys.executable, "-m", "speed_runtime", "keygen", key], check=True, capture_output=True,
                       cwd=checkout, env={**os.environ, "PYTHONPATH": checkout})
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return work, root, key
