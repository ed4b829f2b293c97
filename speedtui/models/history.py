"""Audit log of the operator's actions and the SPC call history, JSON lines kept across runs."""

from __future__ import annotations

import json
import os
import shlex
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


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


@dataclass(frozen=True)
class AuditEntry:
    ts: float
    action: str
    detail: str
    command: str  # the equivalent `speed` command ("" if none)
    ok: bool = True
    result: str = ""


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
                out.append(AuditEntry(ts=float(d["ts"]), action=str(d["action"]), detail=str(d.get("detail", "")),
                                      command=str(d.get("command", "")), ok=bool(d.get("ok", True)),
                                      result=str(d.get("result", ""))))
            except (KeyError, TypeError, ValueError):
                continue
        return out


@dataclass(frozen=True)
class CallRecord:
    ts: float
    caller: str
    target: str
    service: str
    arguments: dict[str, Any] = field(default_factory=dict)
    timeout: float = 5.0
    status: str = ""  # SUCCESS | ERROR
    result: Any = None
    error_code: str = ""
    error_message: str = ""
    latency_ms: float | None = None


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
                out.append(CallRecord(**{k: d[k] for k in CallRecord.__dataclass_fields__ if k in d}))
            except TypeError:
                continue
        return out


def q(s: str) -> str:
    return shlex.quote(str(s))


def speed_call_command(target: str, service: str, arguments: dict, caller: str, root: Path | str,
                       key: Path | str, timeout: float | None = None) -> str:
    cmd = (f"speed call {q(target)} {q(service)} {q(json.dumps(arguments, separators=(',', ':')))} "
           f"--as {q(caller)} --dir {q(root)} --key {q(key)}")
    if timeout is not None:
        cmd += f" --timeout {timeout:g}"
    return cmd


def speed_node_command(root: Path | str, key: Path | str, name: str, groups=(), allow=(), services=(),
                       trace: bool = False) -> str:
    parts = ["speed", "node", "--dir", q(root), "--key", q(key), "--name", q(name)]
    for g in groups:
        parts += ["--group", q(g)]
    for a in allow:
        parts += ["--allow", q(a)]
    for s in services:
        parts += ["--service", q(s)]
    if trace:
        parts.append("--trace")
    return " ".join(parts)
