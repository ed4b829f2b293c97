"""The controller without a Textual app: a fake port records what it would show (notifications,
dialogs with their callbacks, messages) and runs its thread workers inline. The actions are real:
a real ActionService on a real ROOT, with live runtime Nodes in this process."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Callable

import pytest

import speed_runtime
from speed_runtime.demo import DEMO_SERVICES
from speedtui.models.commands import NodeSpec
from speedtui.services.actions import ActionService
from speedtui.services.bridge import Bridge
from speedtui.services.clock import SystemClock
from speedtui.services.history import AuditLog, CallHistory
from speedtui.services.operator import OperatorChoice
from speedtui.ui import messages as msg
from speedtui.ui.controller import Controller
from speedtui.ui.screens.confirm import ConfirmScreen
from speedtui.ui.screens.forms import GrantScreen, PickScreen
from speedtui.ui.state import ConsoleState


class FakeView:
    def __init__(self) -> None:
        self.refreshed = 0

    def refresh_view(self, force: bool = False) -> None:
        self.refreshed += 1


class FakePort:
    """What the controller may ask of the UI (``ui.port.UiPort``), recorded."""

    def __init__(self) -> None:
        self.notes: list[tuple[str, str]] = []  # (severity, text)
        self.dialogs: list[tuple[Any, Callable[[Any], None] | None]] = []
        self.messages: list[Any] = []
        self.shown: list[str] = []
        self.clipboard: list[str] = []
        self.views: dict[str, FakeView] = {}
        self.screen: Any = None

    def notify(self, message: str, *, title: str = "", severity: str = "information",
               timeout: float | None = None) -> None:
        self.notes.append((severity, message))

    def push_screen(self, screen: Any, callback: Callable[[Any], None] | None = None) -> None:
        self.dialogs.append((screen, callback))

    def answer(self, kind: type, value: Any) -> None:
        """The operator closes the last dialog (of type ``kind``) with ``value``."""
        screen, callback = self.dialogs[-1]
        assert isinstance(screen, kind), screen
        assert callback is not None
        callback(value)

    def run_worker(self, work: Callable[[], None], *, thread: bool, group: str, name: str) -> None:
        assert thread  # the UI thread never blocks on an action
        work()

    def post_message(self, message: Any) -> bool:
        self.messages.append(message)
        return True

    def call_from_thread(self, callback: Callable[..., Any], *args: Any) -> Any:
        return callback(*args)

    def call_after_refresh(self, callback: Callable[..., Any], *args: Any) -> bool:
        callback(*args)
        return True

    def copy_to_clipboard(self, text: str) -> None:
        self.clipboard.append(text)

    def active_view(self) -> str:
        return "leases"

    def view_widget(self, vid: str) -> FakeView:
        return self.views.setdefault(vid, FakeView())

    def action_show(self, vid: str) -> None:
        self.shown.append(vid)


@pytest.fixture
def console(live_env):
    root, key, paths = live_env
    audit, calls = AuditLog(paths.audit_log(root)), CallHistory(paths.call_history(root))
    actions = ActionService(root, key, Bridge(), audit, calls, SystemClock(),
                            own_operator_key=paths.env_dir(root) / "operator.key")
    port, looked = FakePort(), []

    def build(readonly: bool = False) -> Controller:
        state = ConsoleState.build(root, str(root), key, actions, audit, calls, SystemClock().time, 1000,
                                   readonly=readonly)
        return Controller(port, state, actions, root=root, key=key, readonly=readonly, operator=OperatorChoice(),
                          audit=audit, exports_folder=paths.env_dir(root) / "exports", now=SystemClock().time,
                          confirm_send=False, look_again=lambda: looked.append(True))

    try:
        yield build, port, actions, looked
    finally:
        actions.stop_all()


def done(port: FakePort) -> msg.ActionDone:
    m = port.messages[-1]
    assert isinstance(m, msg.ActionDone), m
    return m


def test_a_grant_chosen_in_its_dialog_changes_the_node_and_is_told(console):
    build, port, actions, looked = console
    controller = build()
    actions.launch(NodeSpec("ops"))
    controller.grants.open("ops", "billing")
    screen, _ = port.dialogs[-1]
    assert isinstance(screen, GrantScreen)
    port.answer(GrantScreen, ("ops", "billing", True))
    m = done(port)
    assert (m.action, m.ok, m.text) == ("grant", True, "ops now allows billing")
    assert actions.own.node("ops").allowed == ["billing"]
    controller.runner.done(m)  # the app routes the message back: told, and the environment looked at again
    assert port.notes[-1] == ("information", "ops now allows billing")
    assert looked and port.view_widget("audit").refreshed == 1
    assert [e.action for e in actions.audit.entries()][-1] == "grant"


def test_stop_asks_which_node_then_confirms_then_stops_it(console):
    build, port, actions, _ = console
    controller = build()
    actions.launch(NodeSpec("ops"))
    controller.nodes.stop()
    picker, _ = port.dialogs[-1]
    assert isinstance(picker, PickScreen)
    port.answer(PickScreen, "ops")
    port.answer(ConfirmScreen, False)  # declined: nothing happens
    assert actions.own.alive() == ["ops"] and not port.messages
    port.answer(ConfirmScreen, True)
    assert (done(port).action, done(port).ok, done(port).text) == ("stop", True, "ops stopped")
    assert actions.own.alive() == []
    controller.nodes.stop()  # nothing left to stop: one sentence, no dialog
    assert port.notes[-1][0] == "warning" and "no node to stop" in port.notes[-1][1]


def test_a_call_comes_back_as_its_record_and_is_told(console, live_env):
    root, key, _ = live_env
    build, port, actions, _ = console
    controller = build()
    actions.launch(NodeSpec("ops"))
    with speed_runtime.Node(str(root), key.runtime_key, "billing", allow=["ops"]) as billing:
        billing.register("calculateTax", DEMO_SERVICES["calculateTax"])
        controller.calls.call("ops", "billing", "calculateTax", {"amount": 100}, 10.0, grant_first=True)
    finished = port.messages[-1]
    assert isinstance(finished, msg.CallFinished), finished
    rec = finished.record
    assert (rec.caller, rec.target, rec.service, rec.status) == ("ops", "billing", "calculateTax", "SUCCESS")
    controller.calls.finished(rec)
    severity, text = port.notes[-1]
    assert severity == "information" and text.startswith("ops → billing.calculateTax: ")
    assert port.view_widget("audit").refreshed == 1
    assert actions.calls.entries()[-1].status == "SUCCESS"


def test_a_read_only_console_refuses_every_action_in_one_sentence(console):
    build, port, actions, _ = console
    controller = build(readonly=True)
    controller.grants.open()
    controller.nodes.stop()
    controller.calls.open()
    assert not port.dialogs and not port.messages
    assert port.notes == [("warning", "read-only console: actions are disabled (--readonly)")] * 3


def test_a_call_or_request_never_answered_blames_the_key_only_when_traces_fail_it(console, live_env, tmp_path):
    """A node refuses what a key other than the environment's sealed without a word: the call
    times out, a control request "may have been applied". When the traced envelopes already fail
    the console's key, the failure says that is the likely cause (red team: it did not)."""
    from speed_runtime.core.envelope import Header, seal
    from speed_runtime.control import generate_operator_key
    from speed_runtime.core.errors import ControlTimeoutError, SpcError
    from speed_runtime.keyfile import generate_key_file
    from speedtui.models.keycheck import UNANSWERED_WITH_WRONG_KEY
    from speedtui.services.actions import ActionError
    from speedtui.services.operator import ControlRequests

    root, _, _ = live_env
    build, port, actions, _ = console
    controller = build()
    actions.launch(NodeSpec("ops"))
    other = generate_key_file(tmp_path / "other.key")  # billing runs under another environment's key
    with speed_runtime.Node(str(root), str(tmp_path / "other.key"), "billing", allow=["ops"]) as billing:
        billing.register("calculateTax", DEMO_SERVICES["calculateTax"])
        controller.calls.call("ops", "billing", "calculateTax", {"amount": 1}, 1.0, grant_first=True)
        first = port.messages[-1].record
        assert first.error_code == "TIMEOUT" and UNANSWERED_WITH_WRONG_KEY not in first.error_message
        # three traced envelopes sealed under billing's key: the console's key fails every tag; what
        # the console's own node sealed (with the console's key) proves nothing and is not looked at
        def traced(sender: str, key) -> object:
            sealed = seal(Header(1, 1, 0, 2, b"\0" * 16, b"\1" * 16, 0), b"{}", key, b"\0" * 12)
            return type("Traced", (), {"envelope": sealed, "sender": sender, "dir": "out", "outcome": "sent"})()
        keycheck = controller.grants.state.keycheck
        keycheck.observe([traced("billing", other)] * 3 + [traced("ops", actions.key.runtime_key)] * 3)
        assert keycheck.wrong_key
        controller.calls.call("ops", "billing", "calculateTax", {"amount": 1}, 1.0, grant_first=True)
        second = port.messages[-1].record
        assert second.error_code == "TIMEOUT" and second.error_message.endswith(UNANSWERED_WITH_WRONG_KEY)
    # a control request the target took and never answered: the same sentence is added
    runner = controller.runner
    taken = ActionError("node billing took the request but did not answer within 10 s; it may have been applied",
                        unanswered=True)
    assert runner.failure_text(taken) == str(taken) + UNANSWERED_WITH_WRONG_KEY
    assert runner.failure_text(ActionError("node billing refused it")) == "node billing refused it"
    # a TIMEOUT the callee answered proves it opened the request: the key is not blamed
    answered = SpcError("TIMEOUT", "service 'slow' exceeded its time limit of 0.5 s")
    assert UNANSWERED_WITH_WRONG_KEY not in runner.failure_text(answered)
    assert runner.failure_text(SpcError("TIMEOUT", "no answer", unanswered=True)).endswith(UNANSWERED_WITH_WRONG_KEY)
    # ControlRequests says which of its failures were taken and never answered
    requests = ControlRequests(root, actions.key, OperatorChoice(key=generate_operator_key(tmp_path / "op.key")),
                               actions.audit, actions.describe)

    def unanswered(withdrawn: bool) -> bool:
        class Unanswering:
            def allow(self, target, peer):
                raise ControlTimeoutError("no answer", withdrawn=withdrawn)
        requests._operator = lambda: nullcontext(Unanswering())  # the runtime's Operator, as it fails
        try:
            requests.request("allow", "billing", "ops")
        except ActionError as exc:
            return exc.unanswered
        raise AssertionError("no failure")
    assert unanswered(False) is True and unanswered(True) is False


def test_two_starts_of_the_console_node_at_once_start_one(console):
    """Red team: "Start console-…" pressed from the call and the message dialog at once left the
    console with two nodes, the second told its name was "held by another live process" (itself)."""
    import threading

    from speedtui.services.processes import console_node_name

    _, _, actions, _ = console
    started: list = []
    go = threading.Barrier(2)

    def start() -> None:
        go.wait()
        started.append(actions.start_console_node().spec.name)

    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert started == [console_node_name()] * 2
    assert actions.own.in_process() == [console_node_name()]
