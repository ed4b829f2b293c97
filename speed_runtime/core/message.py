"""What an application receives."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Message:
    sender: str
    data: Any          # JSON value, or bytes when the sender sent raw bytes
    seq: int
    timestamp_ms: int  # when the sender sealed it
    size: int          # envelope file size in bytes (of all its chunks when it was chunked)
    message_id: str | None = None  # a chunked or reliable message's id (extensions chunks, reliable)
    durable_id: int | None = None  # durable extension: the message's id in its sender's stream
    redelivered: bool = False      # durable: a handler was entered for it before and did not return (a crash)
