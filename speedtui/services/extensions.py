"""The extensions' state the console reads (issues 18 and 19), with the runtime's own readers:
durable outboxes and pending copies (``durable_store.list_outboxes``, ``list_pending``, the
readers of `speed outbox`) and receipt chains (``verify_receipts``, as `speed receipts`); a
quarantine is lifted by ``ActionService.lift``. Blocking: the console calls these from thread
workers; each failure is one sentence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from speed_runtime.core.errors import SpeedError
from speed_runtime.core.visible import visible
from speed_runtime.ext.durable_store import OutboxItem, PendingCopy, list_outboxes, list_pending, verify_receipts

from ..models.commands import outbox_command, receipts_command
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
    audit.note("outbox", "durable outboxes listed", outbox_command(root).shell(), result=f"{len(items)} waiting")


def audit_receipts(audit: AuditLog, root: Path, key_path: Any, name: str, ok: bool, result: str) -> None:
    audit.note("receipts", f"receipts issued by {name}", receipts_command(name, root, key_path).shell(), ok=ok,
               result=result)
