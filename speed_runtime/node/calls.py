"""Speed Procedure Calls on a node (wire contract §5.6): the caller's side (requests, its own
deadline, responses accepted only from the instance called) and the callee's side (checks,
per-service concurrency, deadlines honoured before a service starts, one response).

Callee scheduling: at most `service_concurrency` requests of one service run at once and at most
`spc_workers` in all, so one slow service cannot take every worker; a request that cannot start
before its deadline (the request's timestamp + timeoutMs) is answered TIMEOUT at the deadline and
never runs, so a caller that retries after a TIMEOUT does not execute it twice. A request waiting
for its service gives its sender's read-ahead slot back (so the same caller's requests to other
services are not held up behind it); the waiting queues are bounded (WAITING_PER_SERVICE,
WAITING_TOTAL, and `waiting_bytes` of what their arguments cost decoded, counted until the request
finished), and a request beyond them is answered TIMEOUT at once, never run.
"""
from __future__ import annotations

import os
import re
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

from ..core import payloads
from ..core.envelope import EnvelopeType
from ..core.errors import (AccessDeniedError, CalleeGoneError, ConfigError, NodeLeavingError, NodeUnavailableError,
                           SpcError, SpeedError)
from ..core.records import SpcTrace
from ..core.services import RegisteredService, precheck
from .hooks import Outbound
from .sender import Sender
from .telemetry import Telemetry
from .threads import Deadlines, Waiter, WorkerPool, settle

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# while calls wait, how often the caller looks whether the instances they wait on still live (one
# stat per target); a call fails at the second look that finds its callee gone, so that an answer
# written just before the callee stopped, and not yet taken from this node's inbox, still counts
CALLEE_CHECK_SECONDS = 1.0


# ============================================================================ the caller's side
@dataclass
class PendingCall:
    future: Future | Waiter  # a Waiter for a synchronous call (`Caller.call`), else a Future
    target: str
    target_id: bytes   # the instance the request went to: only it may answer
    service: str
    started: float     # time.perf_counter() when sent
    deadline: float    # time.monotonic() after which any response is late
    timeout: float
    gone: str | None = None  # why its callee looked gone at the last look (None: it looked alive)


class Caller:
    def __init__(self, name: str, sender: Sender, allows: Callable[[str], bool], deadlines: Deadlines,
                 telemetry: Telemetry, deliver: Callable[[Outbound], int]):
        self.name, self._sender, self._allows, self._deliver = name, sender, allows, deliver
        self._deadlines, self._telemetry = deadlines, telemetry
        self._lock = threading.Lock()
        self._pending: dict[str, PendingCall] = {}
        self._looking = False  # a look at the callees is scheduled

    def call(self, target: str, service: str, arguments: Any, timeout: float) -> Any:
        """Call and wait for the result (errors raise SpcError): `call_async` with a Waiter in place
        of the Future, the cheaper hand-off when the calling thread waits anyway."""
        waiter = Waiter()
        self._request(target, service, arguments, timeout, waiter)
        return waiter.result()

    def call_async(self, target: str, service: str, arguments: Any, timeout: float) -> Future:
        future: Future = Future()
        self._request(target, service, arguments, timeout, future)
        return future

    def _request(self, target: str, service: str, arguments: Any, timeout: float, future: Future | Waiter) -> None:
        entry = self._sender.live_entry(target)
        self._sender.check_grant(target, entry)
        if not self._allows(target):
            raise AccessDeniedError(f"{self.name} does not allow {target}, so the response could not come back; "
                                    f"grant it on {self.name} (allow {target}) first", missing=(self.name, target))
        request_id = os.urandom(16).hex()  # unique per caller (§5.2); uuid4() costs a dozen Python calls
        payload = payloads.spc_request(self.name, target, request_id, service, {} if arguments is None else arguments,
                                       max(1, int(timeout * 1000)))
        self.expect(request_id, target, entry.id_bytes, service, timeout, lambda: self._deliver(Outbound(
            target, EnvelopeType.SPC_REQUEST, payload, entry=entry, wait=timeout,
            trace_extra={"request_id": request_id, "service": service})), future)

    def expect(self, request_id: str, target: str, target_id: bytes, service: str, timeout: float,
               send: Callable[[], Any], future: Future | Waiter | None = None) -> Future | Waiter:
        """Wait for the SPC_RESPONSE `request_id` from instance `target_id` of `target` after `send()`
        wrote the request (an SPC call, or a request of an extension such as `control`); `future`
        (a new Future when not given) is settled with its result."""
        if future is None:
            future = Future()
        call = PendingCall(future, target, target_id, service, time.perf_counter(), time.monotonic() + timeout,
                           timeout)
        with self._lock:
            self._pending[request_id] = call
        try:
            send()
        except BaseException:
            self._pop(request_id)
            raise
        self._telemetry.count("spcCalls")
        if isinstance(future, Future):  # a Future may be cancelled by its owner; a Waiter cannot
            future.add_done_callback(lambda f: self._pop(request_id) if f.cancelled() else None)
        self._deadlines.at(call.deadline, lambda: self._expire(request_id))
        self._look_later()
        return future

    def _look_later(self) -> None:
        with self._lock:
            if self._looking or not self._pending:
                return
            self._looking = True
        self._deadlines.at(time.monotonic() + CALLEE_CHECK_SECONDS, self._look_at_callees)

    def _look_at_callees(self) -> None:
        """Fail the calls whose callee instance stopped or restarted (found so at two looks in a
        row) instead of letting them wait out their timeout: no answer can come from it."""
        with self._lock:
            self._looking = False
            calls = list(self._pending.items())
        verdicts: dict[tuple[str, bytes], str | None] = {}
        for request_id, call in calls:
            key = (call.target, call.target_id)
            if key not in verdicts:
                verdicts[key] = self._callee_gone(*key)
            gone, call.gone = call.gone, verdicts[key]
            if gone is None or call.gone is None or self._pop(request_id) is None:
                continue
            self._telemetry.count("spcErrors")
            self._finish(call, request_id, "ERROR", None)
            settle(call.future, error=CalleeGoneError(call.target, call.gone, call.service))
        self._look_later()

    def _callee_gone(self, target: str, instance: bytes) -> str | None:
        """Why that instance of `target` can no longer answer, or None while it may (a leaving one
        still takes its inbox; an entry that cannot be read proves nothing)."""
        try:
            entry = self._sender.live_entry(target)
        except NodeLeavingError:
            return None
        except NodeUnavailableError as exc:
            return exc.detail
        except (SpeedError, OSError):
            return None
        return None if entry.id_bytes == instance else "it restarted (another instance holds its name now)"

    def _pop(self, request_id: str) -> PendingCall | None:
        with self._lock:
            return self._pending.pop(request_id, None)

    def _expire(self, request_id: str) -> None:
        call = self._pop(request_id)
        if call is None:
            return
        self._telemetry.count("spcErrors")
        self._finish(call, request_id, "ERROR", "TIMEOUT")
        settle(call.future, error=SpcError("TIMEOUT", f"{call.target} did not answer {call.service} "
                                           f"within {call.timeout:g} s", request_id=request_id, unanswered=True))

    def _finish(self, call: PendingCall, request_id: str, status: str, code: str | None) -> float:
        latency = (time.perf_counter() - call.started) * 1000
        self._telemetry.emit(SpcTrace(time.time(), self.name, call.target, call.service, request_id, status, code,
                                      latency))
        return latency

    def expects(self, sender: str, source_id: bytes, payload: dict) -> bool:
        """Whether this response answers a pending call to exactly that node instance, in time. A
        response after the call's deadline is late whether or not the deadline thread has run yet."""
        request_id = payload["requestId"]
        call = self._pending.get(request_id)
        if call is None or call.target != sender or call.target_id != source_id:
            return False
        if time.monotonic() >= call.deadline:
            self._expire(request_id)
            return False
        return True

    def pending(self, request_id: str) -> bool:
        return request_id in self._pending

    def resolve(self, payload: dict) -> dict[str, Any]:
        """Settle the call a response answers (checked with `expects` first); returns trace fields."""
        request_id = payload["requestId"]
        call = self._pop(request_id)
        extra: dict[str, Any] = {"request_id": request_id, "status": payload["status"],
                                 "error_code": payload.get("errorCode")}
        if call is None:  # expired between the check and now
            self._telemetry.count("lateResponses")
            return extra
        status, code = payload["status"], payload.get("errorCode")
        extra["latency_ms"] = self._finish(call, request_id, status, code)
        extra["service"] = call.service
        if status == "SUCCESS":
            settle(call.future, payload["result"])
        else:
            self._telemetry.count("spcErrors")
            settle(call.future, error=SpcError(code, payload.get("errorMessage", ""), request_id=request_id))
        return extra

    def fail_all(self, error: Exception) -> None:
        with self._lock:
            calls, self._pending = list(self._pending.values()), {}
        for call in calls:
            settle(call.future, error=error)


# ============================================================================ the callee's side
class ServiceTable:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._services: dict[str, RegisteredService] = {}

    def add(self, service: RegisteredService) -> None:
        with self._lock:
            if service.name in self._services:
                raise ConfigError(f"a service named {service.name!r} is already registered on this node")
            self._services[service.name] = service

    def remove(self, name: str) -> bool:
        with self._lock:
            return self._services.pop(name, None) is not None

    def get(self, name: str) -> RegisteredService | None:
        return self._services.get(name)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._services)


@dataclass
class Request:
    caller: str
    request_id: str
    service_name: str
    arguments: Any
    deadline: float | None         # monotonic; None when the request carries no timeoutMs
    take: Callable[[], bool]       # remove the request's file; False when its sender withdrew it
    done: Callable[[], None]       # the receiver may read ahead again (called once, by release)
    cost: int = 0                  # what its arguments hold in memory (Verdict.cost)
    answered: threading.Lock = field(default_factory=threading.Lock)
    state: str = "waiting"         # waiting | running | finished
    released: bool = False
    queued_cost: int = 0           # its cost counted against the callee's waiting budget (once queued)

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.done()


Reply = Callable[[str, EnvelopeType, dict, dict], "str | None"]  # Node.reply: why it cannot be sent, or None
WAITING_PER_SERVICE = 16
WAITING_TOTAL = 64


class Callee:
    def __init__(self, name: str, services: ServiceTable, allows: Callable[[str], bool], reply: Reply,
                 deadlines: Deadlines, telemetry: Telemetry, workers: int, per_service: int,
                 waiting_bytes: int = 64 << 20):
        self.name, self.services, self._allows, self._reply = name, services, allows, reply
        self._deadlines, self._telemetry = deadlines, telemetry
        self._per_service = per_service
        self._waiting_bytes = waiting_bytes
        self.waiting_cost = 0  # what the queued requests (and those started from the queue) hold
        self._pool = WorkerPool(workers, f"speed-{name}-spc", lambda exc: telemetry.count("handlerErrors"))
        self._workers = workers
        self._lock = threading.Lock()
        self._running: dict[str, int] = {}
        self._total = 0
        self._waiting: dict[str, deque[Request]] = {}

    def submit(self, request: Request) -> None:
        """A request that passed the receiver's checks: check it as a callee, then run or queue it."""
        service = self.services.get(request.service_name)
        try:
            if not self._allows(request.caller):
                raise SpcError("ACCESS_DENIED", f"{self.name} does not allow {request.caller}")
            precheck(service, request.service_name, request.caller, request.arguments)
        except SpcError as exc:
            if request.take():
                self._respond(request, error=exc)
            self._finish(request)
            return
        with self._lock:
            if self._room(request.service_name):
                self._start(request, service)
                return
            queue = self._waiting.setdefault(request.service_name, deque())
            full = len(queue) >= WAITING_PER_SERVICE or sum(map(len, self._waiting.values())) >= WAITING_TOTAL
            costly = self.waiting_cost + request.cost > self._waiting_bytes
            if not (full or costly):
                queue.append(request)
                request.queued_cost = request.cost
                self.waiting_cost += request.cost
        if full or costly:
            request.state = "finished"
            if request.take():
                self._telemetry.count("servicesTimedOutUnstarted")
                why = "too many requests wait for it" if full else \
                    f"the requests waiting for a worker would hold more than {self._waiting_bytes} bytes"
                self._respond(request, error=SpcError("TIMEOUT", f"service {request.service_name!r} is saturated "
                                                                 f"({why}); it was not run"))
            request.release()
            return
        request.release()  # waiting here, not in the sender's read-ahead: its other requests go on
        if request.deadline is not None:
            self._deadlines.at(request.deadline, lambda: self._expire_waiting(request))

    def _room(self, service_name: str) -> bool:
        return self._total < self._workers and self._running.get(service_name, 0) < self._per_service

    def _start(self, request: Request, service: RegisteredService) -> None:
        """Under the lock: mark running and hand to a worker."""
        request.state = "running"
        self._running[request.service_name] = self._running.get(request.service_name, 0) + 1
        self._total += 1
        try:
            self._pool.submit(lambda: self._run(request, service))
        except RuntimeError:  # the pool stopped with the node
            self._running[request.service_name] -= 1
            self._total -= 1
            self._unqueue(request)
            threading.Thread(target=self._refuse_stopping, args=(request,), daemon=True).start()

    def _refuse_stopping(self, request: Request) -> None:
        if request.take():
            self._respond(request, error=SpcError("INTERNAL_ERROR", f"node {self.name} is shutting down"))
        request.release()

    def _run(self, request: Request, service: RegisteredService) -> None:
        try:
            now = time.monotonic()
            if request.deadline is not None and now >= request.deadline:
                if request.take():
                    self._late(request)
                return
            if not request.take():
                self._telemetry.count("withdrawn")
                return
            if service.timeout:  # a running service is bounded by its own limit; the deadline bounds its start
                limit = service.timeout
                self._deadlines.at(now + limit, lambda: self._respond(request, error=SpcError(
                    "TIMEOUT", f"service {request.service_name!r} exceeded its time limit of {limit:g} s")))
            try:
                result = service.run(request.arguments, request.caller)
            except SpcError as exc:
                self._respond(request, error=exc)
            except Exception as exc:
                self._respond(request, error=SpcError(
                    "EXECUTION_FAILED", f"{request.service_name} raised {type(exc).__name__}: {exc}"[:500]))
            else:
                self._respond(request, result)
        finally:
            self._finish(request, running=True)

    def _unqueue(self, request: Request) -> None:
        """Under the lock: the request is finished; what it held against the waiting budget is free."""
        request.state = "finished"
        self.waiting_cost -= request.queued_cost
        request.queued_cost = 0

    def _finish(self, request: Request, running: bool = False) -> None:
        nxt: list[tuple[Request, RegisteredService]] = []
        with self._lock:
            self._unqueue(request)
            if running:
                self._running[request.service_name] -= 1
                self._total -= 1
            for name in [request.service_name, *self._waiting]:  # the same service first, then the others
                queue = self._waiting.get(name)
                while queue and self._room(name):
                    waiting = queue.popleft()
                    service = self.services.get(name)
                    if service is None:
                        self._unqueue(waiting)
                        nxt.append((waiting, None))
                        continue
                    self._start(waiting, service)
                if queue is not None and not queue:
                    self._waiting.pop(name, None)
        request.release()
        for waiting, _ in nxt:  # unregistered while it waited
            if waiting.take():
                self._respond(waiting, error=SpcError("SERVICE_NOT_FOUND",
                                                      f"no service named {waiting.service_name!r} is registered"))
            waiting.release()

    def _expire_waiting(self, request: Request) -> None:
        with self._lock:
            if request.state != "waiting":
                return
            self._unqueue(request)
            queue = self._waiting.get(request.service_name)
            if queue is not None:
                try:
                    queue.remove(request)
                except ValueError:
                    pass
        if request.take():
            self._late(request)
        request.release()

    def _late(self, request: Request) -> None:
        self._telemetry.count("servicesTimedOutUnstarted")
        self._respond(request, error=SpcError("TIMEOUT", f"service {request.service_name!r} could not start "
                                                         "before the request's deadline; it was not run"))

    def _respond(self, request: Request, result: Any = None, error: SpcError | None = None) -> None:
        if not request.answered.acquire(blocking=False):
            return  # already answered (result and deadline raced)
        caller, name, request_id = request.caller, request.service_name, request.request_id
        trace = {"request_id": request_id, "service": name, "status": "SUCCESS", "error_code": None}
        if error is None:  # a result that cannot be sent (not JSON, too large) becomes an error response
            unsendable = self._reply(caller, EnvelopeType.SPC_RESPONSE,
                                     payloads.spc_success(self.name, caller, request_id, result), trace)
            if unsendable is None:
                return
            error = SpcError("INTERNAL_ERROR", f"service {name!r} returned a result that cannot be sent: {unsendable}")
        trace = {**trace, "status": "ERROR", "error_code": error.code}
        # a lone surrogate cannot be written as UTF-8 (the wire's encoding): shown as U+FFFD, not
        # dropped with the whole answer (the caller then waited its whole timeout)
        message = _LONE_SURROGATE.sub("\ufffd", str(error.message))
        unsendable = self._reply(caller, EnvelopeType.SPC_RESPONSE,
                                 payloads.spc_failure(self.name, caller, request_id, error.code, message), trace)
        if unsendable is not None:  # e.g. an error text beyond the target's limit: the caller still hears
            self._reply(caller, EnvelopeType.SPC_RESPONSE, payloads.spc_failure(
                self.name, caller, request_id, "INTERNAL_ERROR",
                f"service {name!r} failed with an error that cannot be sent: {unsendable}"[:500]),
                {**trace, "error_code": "INTERNAL_ERROR"})

    def start_waiting(self) -> None:
        """Start a worker for requests that could get no thread before (threads.WorkerPool)."""
        self._pool.start_waiting()

    def busy(self) -> bool:
        with self._lock:
            return bool(self._total or any(self._waiting.values()))

    def stop(self, deadline: float) -> bool:
        """Let running and waiting requests finish until `deadline`; then answer what still waits
        and leave what runs (its thread is a daemon; its result is dropped). False if any was left."""
        while self.busy() and time.monotonic() < deadline:
            time.sleep(0.01)
        with self._lock:
            left = [r for queue in self._waiting.values() for r in queue]
            self._waiting.clear()
            for r in left:
                self._unqueue(r)
        for request in left:
            if request.take():
                self._respond(request, error=SpcError("INTERNAL_ERROR", f"node {self.name} is shutting down"))
            request.release()
        return self._pool.stop(deadline) and not left
