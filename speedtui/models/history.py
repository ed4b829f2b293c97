"""Records of the operator's actions (audit entries) and of SPC calls (pure data; the files that
keep them are ``services/history.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class AuditEntry:
    ts: float
    action: str
    detail: str
    command: str  # the equivalent `speed` command ("" if none)
    ok: bool = True
    result: str = ""


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
