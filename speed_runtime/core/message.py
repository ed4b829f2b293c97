"""What an application receives, and how an accepted envelope becomes it."""
from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .receiving import Verdict


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


def message_of(verdict: "Verdict", sender: str, size: int) -> Message:
    """The Message of an accepted MESSAGE envelope (or of a message assembled from chunks):
    base64 data is decoded when the payload says so and it is valid base64."""
    payload, header = verdict.payload, verdict.header
    data = payload["data"]
    if payload.get("encoding") == "base64" and isinstance(data, str):
        try:
            data = base64.b64decode(data, validate=True)
        except ValueError:
            pass  # not valid base64 after all: hand over the text as sent
    message_id = payload.get("messageId")
    return Message(sender, data, header.sequence, header.timestamp_ms, size,
                   message_id if isinstance(message_id, str) else None)
