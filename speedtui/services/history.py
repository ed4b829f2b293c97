"""The console's history files: the audit log and the SPC call history, each a JSON-lines file
(mode 0600) of one record type, kept across runs in the environment's folder. One class keeps
both (``HistoryLog``); what a line holds, and how members' strings in it are shown, is the record
type's ``from_json`` (models/history.py)."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, ClassVar, Generic, Protocol, TypeVar

from ..models.history import AuditEntry, CallRecord


class _Record(Protocol):
    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Any: ...


R = TypeVar("R", bound=_Record)


class HistoryLog(Generic[R]):
    """Records of ``record_type`` appended one line each; ``entries`` reads the last ``limit``."""

    record_type: ClassVar[type]
    limit: ClassVar[int]

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def record(self, rec: R) -> None:
        line = json.dumps(asdict(rec), sort_keys=True, separators=(",", ":")) + "\n"  # type: ignore[call-overload]
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line.encode("utf-8"))
            finally:
                os.close(fd)

    def entries(self, limit: int | None = None) -> list[R]:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except OSError:
            return []
        out = []
        for ln in lines[-(limit or self.limit):]:
            try:
                obj = json.loads(ln)
            except ValueError:
                continue
            rec = self.record_type.from_json(obj) if isinstance(obj, dict) else None
            if rec is not None:
                out.append(rec)
        return out


class AuditLog(HistoryLog[AuditEntry]):
    """The operator's actions on one environment, each with its equivalent `speed` command."""

    record_type = AuditEntry
    limit = 1000

    def __init__(self, path: Path, now: Callable[[], float] = time.time) -> None:
        super().__init__(path)
        self.now = now  # the console's clock: when an action is noted

    def note(self, action: str, detail: str, command: str = "", ok: bool = True, result: str = "") -> None:
        self.record(AuditEntry(ts=self.now(), action=action, detail=detail, command=command, ok=ok, result=result))


class CallHistory(HistoryLog[CallRecord]):
    """The SPC calls fired in one environment (re-run and edited from the Audit view)."""

    record_type = CallRecord
    limit = 200
