"""The extensions' state the console reads or changes (issues 18 and 19), with the runtime's own
readers: durable outboxes and pending copies (``durable_store.list_outboxes``, ``list_pending``,
the readers of `speed outbox`), receipt chains (``verify_receipts``, as `speed receipts`), and a
quarantine lifted at one of the console's in-process nodes (``Node.lift_quarantine``). Blocking:
the app calls these from thread workers; each failure is one sentence."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from speed_runtime.core.errors import SpeedError
from speed_runtime.core.visible import visible
from speed_runtime.ext.durable_store import OutboxItem, PendingCopy, list_outboxes, list_pending, verify_receipts

from ..models.commands import outbox_command, receipts_command
from ..models.history import AuditEntry
from .actions import ActionError, ActionService
from .history import AuditLog

NO_REMOTE_LIFT = ("start it trusting an operator key (speed node ... --operator PUBLIC-KEY) and run the console "
                  "with that key (speedtui --operator-key PATH) to lift it from here; else its score decays by itself")


class ExtensionError(Exception):
    """What could not be read or done, in one sentence."""


def _shown(item: Any) -> Any:
    """A listed item (a NamedTuple) with its strings as ``visible`` shows them: members name the
    directories and files these come from."""
    return item._replace(**{k: visible(v) for k, v in item._asdict().items() if isinstance(v, str)})


def read_outboxes(root: Path) -> tuple[list[OutboxItem], list[PendingCopy]]:
    """What waits in every node's outbox, and the durable copies waiting in inboxes."""
    try:
        return [_shown(i) for i in list_outboxes(str(root))], [_shown(p) for p in list_pending(str(root))]
    except (SpeedError, OSError) as exc:
        raise ExtensionError(visible(f"the outboxes of {root} cannot be read: {exc}")) from None


def check_receipts(root: Path, secret: bytes, name: str) -> list[tuple[str, Any]]:
    """(where, ChainReport) for every receipt chain ``name`` issued."""
    try:
        return [(visible(where), _shown(r)) for where, r in verify_receipts(str(root), secret, name)]
    except (SpeedError, OSError, ValueError) as exc:
        raise ExtensionError(visible(f"the receipts issued by {name} cannot be verified: {exc}")) from None


def receipts_summary(name: str, reports: list[tuple[str, Any]]) -> tuple[bool, str]:
    """(all verified, one line) for the audit log and the notification."""
    if not reports:
        return True, f"no receipts issued by {name} were found"
    broken = [(where, r) for where, r in reports if not r.ok]
    if not broken:
        return True, f"{len(reports)} chain{'s' if len(reports) != 1 else ''} verified"
    where, r = broken[0]
    return False, f"{len(broken)} of {len(reports)} chains broken; first: {r.sender} ({where}) at receipt " \
                  f"{r.first_break}: {r.reason}"


def audit_outboxes(audit: AuditLog, root: Path, items: list[OutboxItem]) -> None:
    audit.record(AuditEntry(time.time(), "outbox", "durable outboxes listed", outbox_command(root).shell(),
                            result=f"{len(items)} waiting"))


def audit_receipts(audit: AuditLog, root: Path, key_path: Any, name: str, ok: bool, result: str) -> None:
    audit.record(AuditEntry(time.time(), "receipts", f"receipts issued by {name}",
                            receipts_command(name, root, key_path).shell(), ok=ok, result=result))


def lift_quarantine(actions: ActionService, receiver: str, sender: str) -> bool:
    """Lift ``sender``'s quarantine at ``receiver``: one of the console's in-process nodes directly,
    any other node that trusts the console's operator key with a control request (`speed lift`,
    audited with that command line). Raises ActionError when it was not quarantined."""
    if receiver not in actions.own_in_process():
        result = actions._operator_request("lift", receiver, sender)
        if not result.get("scores"):
            raise ActionError(f"{receiver} keeps no threat scores (it runs without --feature quota): nothing to lift")
        if not result.get("lifted"):
            raise ActionError(f"{sender} is not quarantined at {receiver}: nothing to lift")
        return True
    node = actions.get_node(receiver)
    try:
        lifted = node.lift_quarantine(sender)
    except SpeedError as exc:
        actions._record("lift", f"{sender} at {receiver}", "", ok=False, result=str(exc))
        raise ActionError(str(exc)) from None
    actions._record("lift", f"{sender} at {receiver}", "", ok=lifted,
                    result="quarantine lifted" if lifted else "it was not quarantined")
    if not lifted:
        raise ActionError(f"{sender} is not quarantined at {receiver}: nothing to lift")
    return lifted
