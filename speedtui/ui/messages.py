"""Messages that thread workers post back to the app (small dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message


@dataclass
class ActionDone(Message):
    """An action finished in a worker: show the outcome, refresh the views it touched."""

    action: str
    ok: bool
    text: str
    payload: Any = None


@dataclass
class CallFinished(Message):
    record: Any  # models.history.CallRecord


@dataclass
class PipelineProgress(Message):
    fraction: float
    text: str


@dataclass
class PipelineFinished(Message):
    ok: bool
    summary: Any
    error: str = ""
