"""The Security and Durable views' requests, as the console runs them (thread workers for every
read of the outboxes, receipts and nodes; results come back as typed messages to the view that
shows them). Kept apart from ``operations.py``: these belong to the extensions (issues 18, 19)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from ..services import extensions as ext
from . import messages as msg
from .screens.forms import PickScreen

if TYPE_CHECKING:
    from .app import SpeedApp


class ExtOperations:
    def __init__(self, app: "SpeedApp") -> None:
        self.app = app
        self.listing = False  # one outbox listing at a time

    # ------------------------------------------------------------------ Security: lift a quarantine
    def lift(self, receiver: str, sender: str) -> None:
        app = self.app
        if app.readonly or app.actions is None:
            app.notify("read-only console (or no key): a quarantine cannot be lifted from here", severity="warning")
            return
        if receiver not in app.actions.own.in_process() and receiver not in app.state.administered():
            app.notify(f"{receiver} is neither this console's node nor one that trusts its operator key: "
                       f"{ext.NO_REMOTE_LIFT}.", title="lift quarantine", severity="warning", timeout=10)
            return
        app.ops.run_action("lift", partial(app.actions.lift, receiver, sender),
                           f"{sender}'s quarantine at {receiver} lifted")

    # ------------------------------------------------------------------ Durable: outboxes and receipts
    def list_outboxes(self, explicit: bool) -> None:
        app = self.app
        if self.listing:
            return
        self.listing = True
        view = app.view_widget("durable")

        def work() -> None:
            try:
                items, pending = ext.read_outboxes(app.root)
            except ext.ExtensionError as exc:
                view.post_message(msg.OutboxesListed([], [], str(exc)))
                return
            finally:
                self.listing = False
            if explicit:
                ext.audit_outboxes(app.audit, app.root, items)
            view.post_message(msg.OutboxesListed(items, pending))

        app.run_worker(work, thread=True, group="outboxes", name="outbox")

    def verify_receipts(self, name: str | None) -> None:
        app = self.app
        if app.key is None:
            app.notify("no key loaded: receipts cannot be verified", severity="warning")
            return
        if not name:
            names = sorted(r.name for r in app.registry.rows if "durable" in r.features)
            if not names:
                app.notify("no durable node in the registry: select an outbox row to verify its target's receipts",
                           severity="warning")
                return
            app.push_screen(PickScreen("Verify the receipts which durable node issued?", [(n, n) for n in names]),
                            lambda n: self.verify_receipts(n) if n else None)
            return
        view, key = app.view_widget("durable"), app.key

        def work() -> None:
            try:
                reports = ext.check_receipts(app.root, key.secret, name)
            except ext.ExtensionError as exc:
                view.post_message(msg.ReceiptsVerified(name, [], str(exc)))
                return
            ok, text = ext.receipts_summary(name, reports)
            ext.audit_receipts(app.audit, app.root, key.path, name, ok, text)
            view.post_message(msg.ReceiptsVerified(name, reports))
            app.post_message(msg.ActionDone("receipts", ok, f"receipts issued by {name}: {text}"))

        app.run_worker(work, thread=True, group="receipts", name="receipts")

