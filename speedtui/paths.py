"""Where the console keeps its files (config, data) and its defaults for --dir and --key."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP_NAME = "speedtui"


@dataclass(frozen=True)
class Paths:
    config_dir: Path
    data_dir: Path

    @classmethod
    def default(cls) -> "Paths":
        return cls(
            config_dir=Path(platformdirs.user_config_dir(APP_NAME)),
            data_dir=Path(platformdirs.user_data_dir(APP_NAME)),
        )

    @property
    def config_file(self) -> Path:
        return self.config_dir / "config.json"

    @property
    def default_key_file(self) -> Path:
        return self.config_dir / "speed.key"

    def audit_log(self, root: "os.PathLike[str] | str") -> Path:
        """The operator's actions on the environment at ``root``."""
        return self.env_dir(root) / "audit.jsonl"

    def call_history(self, root: "os.PathLike[str] | str") -> Path:
        """The SPC calls fired in the environment at ``root`` (re-run there, never elsewhere)."""
        return self.env_dir(root) / "calls.jsonl"

    def env_dir(self, root: "os.PathLike[str] | str") -> Path:
        """Per-environment data (reports, stores, logs, histories), keyed by the absolute ROOT."""
        absolute = os.path.abspath(os.fspath(root))
        slug = "".join(c if c.isalnum() or c in "-_" else "_" for c in os.path.basename(absolute))[:32] or "root"
        digest = hashlib.sha256(absolute.encode("utf-8", "surrogateescape")).hexdigest()[:12]
        return self.data_dir / "envs" / f"{slug}-{digest}"


def default_root(environ: dict | None = None) -> Path:
    """$SPEED_DIR (as `speed` reads it), else /dev/shm/speed where /dev/shm exists, else the
    user's runtime directory."""
    env = os.environ if environ is None else environ
    if env.get("SPEED_DIR"):
        return Path(env["SPEED_DIR"])
    if os.path.isdir("/dev/shm"):
        return Path("/dev/shm/speed")
    return Path(platformdirs.user_runtime_dir("speed"))


def default_key(paths: Paths, environ: dict | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("SPEED_KEY"):
        return Path(env["SPEED_KEY"])
    return paths.default_key_file
