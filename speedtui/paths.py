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

    @property
    def audit_log(self) -> Path:
        return self.data_dir / "audit.jsonl"

    @property
    def call_history(self) -> Path:
        return self.data_dir / "calls.jsonl"

    @property
    def analytics_dir(self) -> Path:
        return self.data_dir / "analytics"

    def env_dir(self, root: "os.PathLike[str] | str") -> Path:
        """Per-environment data (reports, stores, logs, histories), keyed by the absolute ROOT."""
        absolute = os.path.abspath(os.fspath(root))
        slug = "".join(c if c.isalnum() or c in "-_" else "_" for c in os.path.basename(absolute))[:32] or "root"
        digest = hashlib.sha256(absolute.encode("utf-8", "surrogateescape")).hexdigest()[:12]
        return self.data_dir / "envs" / f"{slug}-{digest}"


def default_root() -> Path:
    """/dev/shm/speed where /dev/shm exists, else the user's runtime directory."""
    if os.path.isdir("/dev/shm"):
        return Path("/dev/shm/speed")
    return Path(platformdirs.user_runtime_dir("speed"))


def default_key(paths: Paths, environ: dict | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("SPEED_KEY"):
        return Path(env["SPEED_KEY"])
    return paths.default_key_file
