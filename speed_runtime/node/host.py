"""The node's side of its extensions: `NodeHost`, the one object an extension is given
(node/context.py: ExtensionHost), made of the node's parts. Each method is the one call an
extension needs of one part, so no extension holds a part, let alone the node."""
from __future__ import annotations

import os
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable

from ..core.entry import RegistryEntry
from ..core.message import Message
from ..core.receiving import Verdict
from ..core.replay import ReplayGuard
from .context import Lifecycle, NodeContext

if TYPE_CHECKING:  # pragma: no cover
    from .calls import Caller
    from .hooks import Extension, Outbound
    from .keeper import LeaseKeeper
    from .receiver import Receiver
    from .sender import Sender
    from .threads import Deadlines

_CONTROL_LANE = ("control",)  # the lane of the worker pool that publishes and answers control requests


class NodeHost:
    def __init__(self, ctx: NodeContext, lifecycle: Lifecycle, sender: "Sender", caller: "Caller",
                 receiver: "Receiver", keeper: "LeaseKeeper", deadlines: "Deadlines",
                 deliver_payload: Callable[["Outbound"], int], reply: Callable[..., str | None],
                 close: Callable[[], None]):
        self.name, self.id, self.id_bytes, self.root = ctx.name, ctx.id, ctx.id_bytes, ctx.root
        self.key, self.config, self.telemetry, self.monitor = ctx.key, ctx.config, ctx.telemetry, ctx.monitor
        self._ctx, self._lifecycle = ctx, lifecycle
        self._access, self._application = ctx.access, ctx.application
        self._sender, self._caller, self._receiver, self._keeper = sender, caller, receiver, keeper
        self._deadlines = deadlines
        self.deliver_payload, self.reply, self.close = deliver_payload, reply, close
        self.extensions: dict[str, "Extension"] = {}  # set once loaded (node/node.py)

    # ---------------------------------------------------------------- sending
    def send(self, target: str, etype: int, body: bytes, **options: Any) -> int:
        return self._sender.send(target, etype, body, **options)

    def live_entry(self, target: str) -> RegistryEntry:
        return self._sender.live_entry(target)

    def check_grant(self, target: str, entry: RegistryEntry) -> None:
        self._sender.check_grant(target, entry)

    def allows(self, name: str) -> bool:
        return name in self._access.current

    def expect_ack(self, target: str, seq: int, source_id: bytes, waiter: Future) -> None:
        self._sender.expect_ack(target, seq, source_id, waiter)

    def forget_ack(self, target: str, seq: int) -> None:
        self._sender.forget_ack(target, seq)

    def expects_response(self, sender: str, source_id: bytes, payload: dict) -> bool:
        return self._caller.expects(sender, source_id, payload)

    def check_running(self) -> None:
        self._lifecycle.check_running()

    def at(self, when: float, callback: Callable[[], None]) -> None:
        self._deadlines.at(when, callback)

    # ---------------------------------------------------------------- receiving
    @property
    def replay(self) -> ReplayGuard:
        return self._receiver.replay

    def judge_as_delivered(self, sender: str, data: bytes, arrived: float,
                           judge: Callable[..., Verdict] | None = None) -> Verdict:
        return self._receiver.judge_as_delivered(sender, data, arrived, judge)

    def accepted(self, verdict: Verdict, sender: str, data: bytes, name: str, extra: dict | None = None) -> None:
        self._receiver.accepted(verdict, sender, data, name, extra)

    def reject(self, name: str, sender: str, seq: int, reason: str, size: int = 0, etype: str = "UNKNOWN",
               data: bytes | None = None, remove: bool = True, extra: dict | None = None, detail: str = "",
               attributable: bool = True) -> None:
        self._receiver.reject(name, sender, seq, reason, size, etype, data, remove, extra, detail, attributable)

    def remove(self, name: str) -> bool:
        return self._receiver.remove(name)

    def run_on_lane(self, sender: str, name: str, task: Callable[[], None], cost: int = 0) -> bool:
        return self._receiver.run_on_lane(sender, name, task, cost)

    def take(self, name: str) -> bool:
        return self._receiver.take(name)

    def dispatch(self, verdict: Verdict, sender: str, data: bytes, name: str) -> None:
        self._receiver.dispatch(verdict, sender, data, name)

    def dispatch_by_type(self, verdict: Verdict, sender: str, data: bytes, name: str) -> None:
        self._receiver.dispatch_by_type(verdict, sender, data, name)

    def handle(self, message: Message) -> Exception | None:
        return self._application.handle(message)

    def run_later(self, task: Callable[[], None]) -> None:
        self._receiver.run_later(_CONTROL_LANE, task)

    def watch(self, path: str, mask: int, key: str) -> None:
        self._receiver.watch_directory(path, mask, key)

    # ---------------------------------------------------------------- the node
    def publish(self) -> bool:
        return self._keeper.publish()

    def allow(self, name: str) -> bool:
        return self._access.allow(name)

    def revoke(self, name: str) -> bool:
        return self._access.revoke(name)

    def extension(self, name: str) -> "Extension | None":
        return self.extensions.get(name)

    def status(self) -> dict[str, Any]:
        ctx = self._ctx
        return {"name": ctx.name, "id": ctx.id, "status": "leaving" if self._lifecycle.state == "closing" else "online",
                "allow": ctx.access.names(), "services": ctx.services.names(), "groups": list(ctx.config.groups),
                "features": list(self.extensions), "pid": os.getpid(), "counters": ctx.telemetry.snapshot()}
