"""The acknowledging thread of the `reliable` extension's receiver (ext/reliable.py): what is ready
for a sender when the thread gets to it goes out in one ACK envelope (at most core.reliable.MAX_ACKS
acknowledgements each), so a stream of small messages does not cost one ACK envelope each and no
handler's lane waits for an ACK to be written; idle, an ACK leaves at once."""
from __future__ import annotations

import threading
from typing import Callable

from ..core import reliable
from ..core.envelope import FLAG_RELIABLE, EnvelopeType


class Acknowledger:
    def __init__(self, name: str, reply: Callable[..., str | None]):
        self._name, self._reply = name, reply  # the node's name, and its way to send an answer
        self._ready: dict[str, list[tuple[int, str, str, str | None]]] = {}  # per sender
        self._changed = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"speed-{self._name}-acks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Send what is ready, then end (the handlers have ended: what they acknowledged goes out)."""
        with self._changed:
            self._stopping = True
            self._changed.notify()
        if self._thread is not None:
            self._thread.join()

    def add(self, target: str, seq: int, mid: str, status: str, error: str | None) -> None:
        with self._changed:
            self._ready.setdefault(target, []).append((seq, mid, status, error))
            self._changed.notify()

    def _run(self) -> None:
        me = self._name
        while True:
            with self._changed:
                while not self._ready and not self._stopping:
                    self._changed.wait()
                if not self._ready:
                    return
                ready, self._ready = self._ready, {}
            for target, entries in ready.items():
                for i in range(0, len(entries), reliable.MAX_ACKS):
                    part = entries[i:i + reliable.MAX_ACKS]
                    self._reply(target, EnvelopeType.ACK, reliable.ack_batch(me, target, part),
                               {"message_id": part[0][1]}, flags=FLAG_RELIABLE)
