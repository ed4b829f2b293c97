"""The application's side of a node: the handlers it gave for MESSAGEs and for a lost lease, and
the queue `receive()` reads when it gave none. The receiver's lanes and the durable extension hand
messages here; a handler that raises is counted and reported back, never fatal."""
from __future__ import annotations

import queue
from typing import Callable

from ..core.errors import LeaseLostError
from ..core.message import Message
from .telemetry import Telemetry


class Application:
    def __init__(self, telemetry: Telemetry):
        self._telemetry = telemetry
        self._handlers: list[Callable[[Message], None]] = []
        self._lease_lost_handlers: list[Callable[[LeaseLostError], None]] = []
        self._received: "queue.Queue[Message]" = queue.Queue()

    def on_message(self, handler: Callable[[Message], None]) -> None:
        self._handlers.append(handler)

    def on_lease_lost(self, handler: Callable[[LeaseLostError], None]) -> None:
        self._lease_lost_handlers.append(handler)

    def receive(self, timeout: float | None) -> Message:
        try:
            return self._received.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no message arrived within {timeout} s") from None

    def handle(self, message: Message) -> Exception | None:
        """Run the handlers (or queue the message for receive()); what one raised."""
        try:
            if self._handlers:
                for handler in list(self._handlers):
                    handler(message)
            else:
                self._received.put(message)
        except Exception as exc:
            self._telemetry.count("handlerErrors")
            return exc
        return None

    def lease_lost(self, exc: LeaseLostError) -> None:
        for handler in list(self._lease_lost_handlers):
            try:
                handler(exc)
            except Exception:
                self._telemetry.count("handlerErrors")
