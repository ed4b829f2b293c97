"""How every operator action runs: refused in a read-only console or without a key (one
sentence), then in a thread worker, its outcome back as a typed message (``ActionDone``,
``ReplayInjected``), shown as a notification; then the environment is looked at again at once."""

from __future__ import annotations

from typing import Any, Callable

from ...models.keycheck import UNANSWERED_WITH_WRONG_KEY
from ...services.actions import ActionError, ActionService, ReplayResult
from ...services.own_nodes import no_answer_came
from .. import messages as msg
from ..port import UiPort
from ..screens.calls import CallScreen


class ActionRunner:
    def __init__(self, port: UiPort, actions: ActionService | None, readonly: bool,
                 look_again: Callable[[], None], key_doubted: Callable[[], bool] = lambda: False) -> None:
        self.port = port
        self.actions = actions
        self.readonly = readonly
        self.look_again = look_again  # the readers' next pass, now
        self.key_doubted = key_doubted  # whether traced envelopes say the console's key is not the environment's

    def acts(self) -> ActionService | None:
        """The action service, or None (and the operator is told why) when nothing may be done."""
        if self.readonly:
            self.port.notify("read-only console: actions are disabled (--readonly)", severity="warning")
            return None
        if self.actions is None:
            self.port.notify("no key loaded: actions are disabled", severity="warning")
            return None
        return self.actions

    def run(self, action: str, fn: Callable[[], Any], success: str | Callable[[Any], str],
            after: Callable[[], None] | None = None) -> None:
        """``fn`` in a thread worker; its outcome comes back as a message (never a traceback).
        ``success``: what is said when it succeeds, or how to say it from what ``fn`` returned."""
        port = self.port

        def work() -> None:
            try:
                result = fn()
            except Exception as exc:  # noqa: BLE001 - show, never crash the console
                port.post_message(msg.ActionDone(action, False, self.failure_text(exc)))
                return
            if isinstance(result, ReplayResult):
                port.post_message(msg.ReplayInjected(result))
            else:
                port.post_message(msg.ActionDone(action, True, success if isinstance(success, str) else success(result)))
            if after is not None:
                port.call_from_thread(after)

        port.run_worker(work, thread=True, group="actions", name=action)

    def failure_text(self, exc: BaseException) -> str:
        """An action's failure in one sentence; a request or call that got no answer at all adds
        unanswered_hint."""
        if isinstance(exc, ActionError):
            text = str(exc)
        else:
            text = self.actions.describe(exc) if self.actions is not None else str(exc)
        return text + self.unanswered_hint() if no_answer_came(exc) else text

    def unanswered_hint(self) -> str:
        """Added to an unanswered request or call: nothing, or, while traced envelopes fail the
        console's key, that a target refuses what a wrong key sealed unread."""
        return UNANSWERED_WITH_WRONG_KEY if self.key_doubted() else ""

    def done(self, m: msg.ActionDone) -> None:
        """An action's outcome: a notification (in the call dialog too, for a call that failed)."""
        screen = self.port.screen
        if m.action == "call" and not m.ok and isinstance(screen, CallScreen):
            screen.show_failure(m.text)  # e.g. the grant before the call was refused
        if m.ok:
            self.port.notify(m.text or f"{m.action} done")
        else:
            self.port.notify(m.text, title=f"{m.action} failed", severity="error", timeout=8)
        self.after_action()

    def after_action(self) -> None:
        """Look at the environment now (the readers' next pass would be later) and show the audit."""
        self.look_again()
        self.port.view_widget("audit").refresh_view(force=True)
