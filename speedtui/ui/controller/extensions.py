"""The Security and Durable views' requests (the `quota` and `durable` extensions): lift a
quarantine, list what waits in the durable outboxes, verify a node's receipt chains. Every read
runs in a thread worker; its result goes back to the view that shows it as a typed message."""

from __future__ import annotations

from pathlib import Path
from ...services import extensions as ext
from ...services import runtime as rt
from ...services.history import AuditLog
from .. import messages as msg
from ..screens.forms import PickScreen
from ..state import ConsoleState
from .runner import ActionRunner


class ExtensionRequests:
    def __init__(self, runner: ActionRunner, state: ConsoleState, root: Path, key: rt.KeyInfo | None,
                 audit: AuditLog) -> None:
        self.runner = runner
        self.port = runner.port
        self.state = state
        self.root = root
        self.key = key
        self.audit = audit
        self.listing = False  # one outbox listing at a time

    # ------------------------------------------------------------------ Security: lift a quarantine
    def lift(self, receiver: str, sender: str) -> None:
        acts = self.runner.actions
        if self.runner.readonly or acts is None:
            self.port.notify("read-only console (or no key): a quarantine cannot be lifted from here",
                             severity="warning")
            return
        if receiver not in acts.own.in_process() and receiver not in self.state.administered():
            self.port.notify(f"{receiver} is neither this console's node nor one that trusts its operator key: "
                             f"{ext.NO_REMOTE_LIFT}.", title="lift quarantine", severity="warning", timeout=10)
            return
        self.runner.run("lift", lambda: acts.lift(receiver, sender), f"{sender}'s quarantine at {receiver} lifted")

    # ------------------------------------------------------------------ Durable: outboxes and receipts
    def list_outboxes(self, explicit: bool) -> None:
        if self.listing:
            return
        self.listing = True
        view, root, audit = self.port.view_widget("durable"), self.root, self.audit

        def work() -> None:
            try:
                items, pending = ext.read_outboxes(root)
            except ext.ExtensionError as exc:
                view.post_message(msg.OutboxesListed([], [], str(exc)))
                return
            finally:
                self.listing = False
            if explicit:
                ext.audit_outboxes(audit, root, items)
            view.post_message(msg.OutboxesListed(items, pending))

        self.port.run_worker(work, thread=True, group="outboxes", name="outbox")

    def verify_receipts(self, name: str | None) -> None:
        key = self.key
        if key is None:
            self.port.notify("no key loaded: receipts cannot be verified", severity="warning")
            return
        if not name:
            names = sorted(r.name for r in self.state.registry.rows if "durable" in r.features)
            if not names:
                self.port.notify("no durable node in the registry: select an outbox row to verify its target's "
                                 "receipts", severity="warning")
                return
            self.port.push_screen(PickScreen("Verify the receipts which durable node issued?",
                                             [(n, n) for n in names]),
                                  self._receipts_chosen)
            return
        port, view, root, audit = self.port, self.port.view_widget("durable"), self.root, self.audit

        def work() -> None:
            try:
                reports = ext.check_receipts(root, key.secret, name)
            except ext.ExtensionError as exc:
                view.post_message(msg.ReceiptsVerified(name, [], str(exc)))
                return
            ok, text = ext.receipts_summary(name, reports)
            ext.audit_receipts(audit, root, key.path, name, ok, text)
            view.post_message(msg.ReceiptsVerified(name, reports))
            port.post_message(msg.ActionDone("receipts", ok, f"receipts issued by {name}: {text}"))

        self.port.run_worker(work, thread=True, group="receipts", name="receipts")

    def _receipts_chosen(self, name: str | None) -> None:
        if name:
            self.verify_receipts(name)
