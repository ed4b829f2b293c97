"""The audit log and the SPC call history: JSON lines (mode 0600) kept across runs. Both quote what
members wrote (names, a service's error text): read back, their strings are as ``core.visible``
shows them (a call's arguments and result stay JSON values, drawn with ``visible_json``)."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

from speed_runtime.core.visible import visible

from ..models.history import AuditEntry, CallRecord


def _append(path: Path, obj: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    line = json.dumps(obj, sort_keys=True, separators=(",", ":")) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)


def _read(path: Path, limit: int) -> list[dict[str, Any]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    out = []
    for ln in lines[-limit:]:
        try:
            obj = json.loads(ln)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


class AuditLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def record(self, entry: AuditEntry) -> None:
        with self._lock:
            _append(self.path, asdict(entry))

    def entries(self, limit: int = 1000) -> list[AuditEntry]:
        out = []
        for d in _read(self.path, limit):
            try:
                out.append(AuditEntry(ts=float(d["ts"]), action=visible(str(d["action"])),
                                      detail=visible(str(d.get("detail", ""))),
                                      command=visible(str(d.get("command", ""))), ok=bool(d.get("ok", True)),
                                      result=visible(str(d.get("result", "")))))
            except (KeyError, TypeError, ValueError):
                continue
        return out


_CALL_TEXTS = ("caller", "target", "service", "status", "error_code", "error_message")


class CallHistory:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def record(self, rec: CallRecord) -> None:
        with self._lock:
            _append(self.path, asdict(rec))

    def entries(self, limit: int = 200) -> list[CallRecord]:
        out = []
        for d in _read(self.path, limit):
            try:
                out.append(CallRecord(**{k: visible(d[k]) if k in _CALL_TEXTS and isinstance(d[k], str) else d[k]
                                         for k in CallRecord.__dataclass_fields__ if k in d}))
            except TypeError:
                continue
        return out
