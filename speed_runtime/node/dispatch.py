"""Dispatching an accepted envelope by its type (wire contract §5.5 step 6), for the receiver.

MESSAGEs go to the sender's lane (the file is removed when the handler starts), SPC requests to
the callee, responses and acknowledgements to whoever waits for them, probes and `leave` events
are answered here. A response or acknowledgement that nothing awaits (late, or from another
instance) is rejected as `unexpected_response`. Extensions see every accepted envelope first (§9).
"""
from __future__ import annotations

import time
from typing import Any

from ..core.envelope import EnvelopeType
from ..core.errors import DeliveryError
from ..core.message import message_of
from ..core.reassembly import Assembled
from ..core.receiving import Verdict, spc_deadline_ms
from ..transport import remove_entry
from .calls import Request
from .threads import settle

_MESSAGE, _SPC_REQUEST, _SPC_RESPONSE, _ACK = (int(t) for t in (EnvelopeType.MESSAGE, EnvelopeType.SPC_REQUEST,
                                                                EnvelopeType.SPC_RESPONSE, EnvelopeType.ACK))
_ERROR, _HEARTBEAT, _EVENT = int(EnvelopeType.ERROR), int(EnvelopeType.HEARTBEAT), int(EnvelopeType.EVENT)


class Dispatcher:
    def __init__(self, receiver: Any):
        self.receiver = receiver
        self.node = receiver.node

    def dispatch(self, verdict: Verdict, sender: str, data: bytes, name: str) -> None:
        """An accepted envelope, or a message an extension assembled from several: every extension
        sees it first (§9), then `deliver`."""
        for extension in self.node.extensions.values():
            if extension.on_envelope(verdict, sender, data, name):
                return
        self.deliver(verdict, sender, data, name)

    def deliver(self, verdict: Verdict, sender: str, data: bytes, name: str) -> None:
        """Dispatch by type (§5.5 step 6). `name` is the inbox file that stays until the handler
        starts. A message assembled from chunks (`verdict.body` is an `Assembled`) has its size and
        its envelopes' records from them. `verdict.finished(handled, error)` is called once its
        handling ended."""
        header, payload = verdict.header, verdict.payload
        assembled = isinstance(verdict.body, Assembled)
        size, traced = (verdict.body.size, True) if assembled else (len(data), False)
        finished = verdict.finished or _nothing
        held = 0 if assembled else verdict.cost  # an assembled value's memory is the reassembly's until `finished`
        etype = header.type
        if etype == _MESSAGE:
            if not traced:
                mid = payload.get("messageId")
                self.receiver.accepted(verdict, sender, data, name, {"message_id": mid} if isinstance(mid, str) else None)
            if not self.receiver.run_on_lane(sender, name, lambda: self._run_message(verdict, sender, size, name), held):
                finished(False, None)
            return
        if etype == _SPC_REQUEST:
            self.receiver.read_ahead.hold(sender, name, self.receiver.inbox.fd, held)
            if not traced:
                self.receiver.accepted(verdict, sender, data, name,
                              {"request_id": payload["requestId"], "service": payload["service"]})
            deadline_ms = spc_deadline_ms(header, payload)
            deadline = None if deadline_ms is None else time.monotonic() + (deadline_ms - time.time() * 1000) / 1000

            def done() -> None:
                self.receiver.read_ahead.release(sender, cost=held)
                finished(True, None)
            # a request that waits for a worker gives its read-ahead slot and reservation back, and its
            # cost moves to the callee's waiting budget until it finished
            self.node.callee.submit(Request(sender, payload["requestId"], payload["service"], payload["arguments"],
                                            deadline, lambda: self.receiver.take(name), done, verdict.cost))
            return
        # everything else is settled here and now
        if etype in (_SPC_RESPONSE, _ACK) or (etype == _ERROR and isinstance(payload.get("refSeq"), int)):
            if not self._expected(etype, sender, header.source_id, payload):
                self.receiver.reject(name, sender, header.sequence, "unexpected_response", len(data), verdict.type, data,
                            detail="" if self._asked(etype, sender, payload) else "late")
                finished(False, None)
                return
        if not remove_entry(self.receiver.inbox.fd, self.receiver.inbox.path, name):
            self.node.telemetry.count("withdrawn")
            finished(False, None)
            return
        extra = self.node.caller.resolve(payload) if etype == _SPC_RESPONSE else None
        if not traced:
            self.receiver.accepted(verdict, sender, data, name, extra)
        finished(True, None)
        if etype == _ACK:
            self._settle_ack(sender, header.source_id, payload["ackSeq"], None)
        elif etype == _ERROR and isinstance(payload.get("refSeq"), int):
            self._settle_ack(sender, header.source_id, payload["refSeq"], DeliveryError(
                f"{sender} failed to handle message {payload['refSeq']}: {payload['errorCode']}: "
                f"{payload['errorMessage']}"))
        elif etype == _HEARTBEAT and payload["reply"] is False:
            self.node.answer_probe(sender)
        elif etype == _EVENT and payload["event"] == "leave":
            self.node.registry_hint(sender + ".node")

    def _expected(self, etype: int, sender: str, source_id: bytes, payload: dict) -> bool:
        if etype == _SPC_RESPONSE:
            if self.node.caller.expects(sender, source_id, payload):
                return True
            if not self.node.caller.pending(payload["requestId"]):
                self.node.telemetry.count("lateResponses")  # the caller gave up (timeout, cancel) first
            return False
        seq = payload["ackSeq"] if etype == _ACK else payload["refSeq"]
        return self.node.sender.awaits_ack(sender, source_id, seq)

    def _asked(self, etype: int, sender: str, payload: dict) -> bool:
        """Whether the answer's request (or message) still waits for an answer from `sender` at all:
        if not, the answer is late (or answers something never asked); if so, another instance sent it."""
        if etype == _SPC_RESPONSE:
            return self.node.caller.pending(payload["requestId"])
        return self.node.sender.ack_awaited(sender, payload["ackSeq"] if etype == _ACK else payload["refSeq"])

    def _settle_ack(self, sender: str, source_id: bytes, seq: int, error: Exception | None) -> None:
        waiter = self.node.sender.take_ack(sender, source_id, seq)
        if waiter is not None:
            settle(waiter, seq, error)

    def _run_message(self, verdict: Verdict, sender: str, size: int, name: str) -> None:
        handled, error = False, None
        try:
            if not self.receiver.take(name):
                self.node.telemetry.count("withdrawn")
                return
            handled = True
            error = self.node.deliver_message(message_of(verdict, sender, size), verdict.header)
        finally:
            if verdict.finished is not None:
                verdict.finished(handled, error)


def _nothing(handled: bool, error: BaseException | None) -> None:
    pass
