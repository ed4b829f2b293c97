"""What the operator does with a traced envelope: open it (its decoded header and payload), follow
the SPC call it belongs to, replay it into its receiver's inbox (`R`) and wait for the verdict."""

from __future__ import annotations

from functools import partial
from typing import Callable

from ...models.traces import TraceRecord
from ...services import runtime as rt
from ...services.actions import ReplayResult
from ..screens.calllink import CallLinkScreen
from ..screens.envelope import EnvelopeScreen
from ..state import ConsoleState
from .runner import ActionRunner


class TraceActions:
    def __init__(self, runner: ActionRunner, state: ConsoleState, key: rt.KeyInfo | None, now: Callable[[], float],
                 as_call: Callable[[TraceRecord], None]) -> None:
        self.runner = runner
        self.port = runner.port
        self.state = state
        self.key = key
        self.now = now
        self.as_call = as_call  # the record's call in the call dialog (CallActions.from_trace)

    def replay(self, rec: TraceRecord) -> None:
        acts = self.runner.acts()
        if acts is None:
            return
        if not rec.envelope:
            self.port.notify("this record carries no sealed envelope to replay", severity="warning")
            return
        self.state.replays.note_baseline(self.state.registry.by_name().get(rec.receiver), rec.receiver)
        self.runner.run("replay", lambda: acts.replay(rec), "")

    def replay_injected(self, r: ReplayResult) -> None:
        self.state.replays.start(self.now(), r.sender, r.receiver, r.type, r.seq,
                                 self.state.registry.by_name().get(r.receiver))
        self.port.notify(f"replayed {r.type} seq {r.seq} into {r.receiver}'s inbox; waiting for its verdict…")
        self.port.action_show("replay")
        self.runner.after_action()

    def envelope(self, rec: TraceRecord, words: tuple[str, ...] = ()) -> None:
        self.port.push_screen(EnvelopeScreen(rec, self.key.secret if self.key else None, words),
                              partial(self._envelope_closed, rec))

    def _envelope_closed(self, rec: TraceRecord, choice: str | None) -> None:
        if choice == "replay":
            self.replay(rec)
        elif choice == "call":
            self.call_link(rec)
        elif choice == "ascall":
            self.as_call(rec)

    def call_link(self, rec: TraceRecord) -> None:
        link = self.state.traces.call_link(rec)
        if link is None:
            self.port.notify("this record is not part of an SPC call", severity="warning")
            return
        self.port.push_screen(CallLinkScreen(link))
