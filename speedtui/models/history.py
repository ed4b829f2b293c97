"""Records of the operator's actions (audit entries) and of SPC calls (pure data; the file that
keeps each kind is ``services/history.py: HistoryLog``). Both quote what members wrote (names, a
service's error text): read back from a file, their strings are as ``core.visible`` shows them (a
call's arguments and result stay JSON values, drawn with ``visible_json``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from speed_runtime.core.visible import visible


@dataclass(frozen=True)
class AuditEntry:
    ts: float
    action: str
    detail: str
    command: str  # the equivalent `speed` command ("" if none)
    ok: bool = True
    result: str = ""

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "AuditEntry | None":
        """The entry a line of the audit log holds (None: not one)."""
        try:
            return cls(ts=float(d["ts"]), action=visible(str(d["action"])), detail=visible(str(d.get("detail", ""))),
                       command=visible(str(d.get("command", ""))), ok=bool(d.get("ok", True)),
                       result=visible(str(d.get("result", ""))))
        except (KeyError, TypeError, ValueError):
            return None


_CALL_TEXTS = ("caller", "target", "service", "status", "error_code", "error_message")


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
    unanswered: bool = False  # no answer came at all (the caller's own deadline), not an answer of TIMEOUT

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "CallRecord | None":
        """The call a line of the call history holds (None: not one)."""
        try:
            return cls(**{k: visible(d[k]) if k in _CALL_TEXTS and isinstance(d[k], str) else d[k]
                          for k in cls.__dataclass_fields__ if k in d})
        except TypeError:
            return None
