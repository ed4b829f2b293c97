"""Typed messages: thread workers report back to the app, and views and dialogs ask the app to do
something (they never reach into it).  Each payload has its own type."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textual.message import Message

from ..models.history import CallRecord
from ..models.timetravel import Moment
from ..models.traces import TraceRecord
from ..services.actions import ReplayResult


# ---------------------------------------------------------------- from workers

@dataclass
class ActionDone(Message):
    """An action finished in a worker: show the outcome, refresh the views it touched."""

    action: str
    ok: bool
    text: str


@dataclass
class ReplayInjected(Message):
    result: ReplayResult


@dataclass
class CallFinished(Message):
    record: CallRecord


@dataclass
class PipelineProgress(Message):
    fraction: float
    text: str


@dataclass
class PipelineFinished(Message):
    ok: bool
    summary: dict[str, Any] | None
    error: str = ""


# ---------------------------------------------------------------- requests from views and dialogs

@dataclass
class ShowNode(Message):
    name: str


@dataclass
class ChooseFabric(Message):
    fabric: str | None  # None: every fabric, "": the ungrouped nodes


@dataclass
class ReapRequested(Message):
    name: str


@dataclass
class OpenEnvelope(Message):
    record: TraceRecord
    words: tuple[str, ...] = ()  # the traces filter's words, highlighted in the inspector


@dataclass
class OpenCallLink(Message):
    record: TraceRecord


@dataclass
class ReplayRequested(Message):
    record: TraceRecord


@dataclass
class CallFromTrace(Message):
    record: TraceRecord
    copy_only: bool = False  # copy its `speed call` line instead of opening the dialog


@dataclass
class GrantRequested(Message):
    node: str | None = None
    peer: str | None = None
    revoke: bool = False  # open the dialog on "revoke"


@dataclass
class CallRequested(Message):
    """Open the call dialog, pre-filled."""

    caller: str | None = None
    target: str = ""
    service: str = ""
    arguments: dict[str, Any] | None = None
    timeout: float = 5.0


@dataclass
class RunCall(Message):
    """Fire the call now (from the dialog, or a re-run from the history)."""

    caller: str
    target: str
    service: str
    arguments: dict[str, Any]
    timeout: float
    grant_first: bool = False  # have the target allow the caller first (operator key or own node)
    revoke_after: bool = False  # and revoke those grants once the call is done


@dataclass
class StartConsoleNode(Message):
    then: str = ""  # "call" | "send": the dialog to open again once the node runs
    fill: dict[str, Any] = field(default_factory=dict)  # its fields as the operator left them


@dataclass
class CopyText(Message):
    text: str
    what: str  # what was copied, for the notification


@dataclass
class ExportRows(Message):
    """Write ``lines`` to a new file in the environment's export folder; shown and audited."""

    kind: str  # traces | access | lease-history
    suffix: str  # jsonl | csv | json
    lines: list[str]
    detail: str


@dataclass
class TracesPaused(Message):
    paused: bool  # the header says TRACES PAUSED


@dataclass
class PastReady(Message):
    """A past moment, reconstructed by a worker (time travel)."""

    moment: Moment
    event_times: list[float]


# ---------------------------------------------------------------- extensions (Security and Durable views)

@dataclass
class LiftQuarantine(Message):
    """End ``sender``'s quarantine at ``receiver`` (possible at one of the console's in-process nodes)."""

    receiver: str
    sender: str


@dataclass
class ListOutboxes(Message):
    """Read the durable outboxes and pending copies (a worker); ``explicit``: the operator asked (audited)."""

    explicit: bool = False


@dataclass
class VerifyReceipts(Message):
    """Verify the receipt chains ``name`` issued (None: ask which durable node)."""

    name: str | None = None


@dataclass
class OutboxesListed(Message):
    items: list[Any]  # speed_runtime.ext.durable_store.OutboxItem
    pending: list[Any]  # …PendingCopy
    error: str = ""


@dataclass
class ReceiptsVerified(Message):
    name: str
    reports: list[Any]  # (where, speed_runtime.core.durable.ChainReport)
    error: str = ""
