"""A key holder that replays: each message a Node sends is delivered a second time, the same sealed
bytes under another file name. The copy authenticates as that node (valid tag, its registered
instance) and is rejected as a replay (`replayed_nonce`): the misbehaviour that threat scores
(extension `quota`) count against a sender, unlike files that authenticate as nobody."""
from __future__ import annotations

from typing import Any

from speed_runtime import EnvelopeTrace
from speed_runtime.transport import inject

COPY_NONCE8 = "ffffffff"  # the copy's file name: the original's with these 8 hex digits of nonce


def send_and_replay(node: Any, target: str, data: Any, **send_options: Any) -> int:
    """`node.send(target, data, **send_options)`, then the copy; returns the sequence number."""
    sealed: list = []
    remove = node.add_observer(lambda e: sealed.append((e.file, e.envelope)) if isinstance(e, EnvelopeTrace)
                               and e.outcome == "sent" and e.type == "MESSAGE" else None)
    try:
        seq = node.send(target, data, **send_options)
    finally:
        remove()
    (file, envelope), = sealed
    inject(node.root, target, file[:-len(COPY_NONCE8 + ".env")] + COPY_NONCE8 + ".env", envelope)
    return seq
