"""The user's config file (JSON): theme, key bindings and a few options.

Example ``~/.config/speedtui/config.json``::

    {
      "theme": "speed-dark",
      "keys": {"leases": "f2", "traces": "f5", "quit": "ctrl+q"},
      "trace_buffer": 20000,
      "confirm_send": true,
      "operator_key": "~/.config/speed/operator.key"
    }
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_THEME = "speed-dark"


@dataclass
class Config:
    theme: str = DEFAULT_THEME
    keys: dict[str, str] = field(default_factory=dict)
    trace_buffer: int = 20000
    confirm_send: bool = False
    operator_key: str | None = None  # the operator key file for `control` requests (README "## Operators")
    path: Path | None = None
    warning: str | None = None

    @classmethod
    def load(cls, path: Path) -> "Config":
        cfg = cls(path=path)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cfg
        except (OSError, ValueError) as exc:
            cfg.warning = f"config file {path} ignored: {exc}"
            return cfg
        if not isinstance(raw, dict):
            cfg.warning = f"config file {path} ignored: not a JSON object"
            return cfg
        if isinstance(raw.get("theme"), str):
            cfg.theme = raw["theme"]
        keys = raw.get("keys")
        if isinstance(keys, dict):
            cfg.keys = {str(k): str(v) for k, v in keys.items() if isinstance(v, str)}
        if isinstance(raw.get("trace_buffer"), int) and raw["trace_buffer"] > 0:
            cfg.trace_buffer = raw["trace_buffer"]
        if isinstance(raw.get("confirm_send"), bool):
            cfg.confirm_send = raw["confirm_send"]
        if isinstance(raw.get("operator_key"), str) and raw["operator_key"].strip():
            cfg.operator_key = raw["operator_key"].strip()
        return cfg

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "theme": self.theme,
            "keys": dict(self.keys),
            "trace_buffer": self.trace_buffer,
            "confirm_send": self.confirm_send,
        }
        if self.operator_key is not None:
            out["operator_key"] = self.operator_key
        return out

    def save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        data = self.to_json()
        # keep unknown fields the user wrote
        try:
            old = json.loads(self.path.read_text(encoding="utf-8"))
            if isinstance(old, dict):
                old.update(data)
                data = old
        except (OSError, ValueError):
            pass
        tmp = self.path.with_name(".config.json.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, self.path)
