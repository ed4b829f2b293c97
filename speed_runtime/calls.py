"""Speed Procedure Calls on a Node: the caller's side (requests, deadlines, responses) and the
callee's side (checks on the protocol thread, the service in the SPC pool, one response)."""
from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import Future
from typing import Any

from . import payloads
from .envelope import EnvelopeType
from .errors import AccessDeniedError, SpcError
from .spc import PendingCall, precheck, settle
from .trace import SpcTrace


class CallsMixin:
    def call(self, target: str, service: str, arguments: Any = None, *, timeout: float = 10.0) -> Any:
        """Call `service` on `target` and return its result; errors raise SpcError with .code."""
        return self.call_async(target, service, arguments, timeout=timeout).result()

    def call_async(self, target: str, service: str, arguments: Any = None, *, timeout: float = 10.0) -> Future:
        self._check_running()
        entry = self._peer(target)
        if self.name not in entry.allow:
            raise AccessDeniedError(f"node {target} does not allow {self.name}; "
                                    f"grant it on {target} (allow {self.name})")
        if target not in self._access:
            raise AccessDeniedError(f"{self.name} does not allow {target}, so the response "
                                    f"could not come back; run allow({target!r}) on {self.name} first")
        request_id = uuid.uuid4().hex
        future: Future = Future()
        self._pending.add(request_id, PendingCall(future, target, service, time.perf_counter()))
        timeout_ms = max(1, int(timeout * 1000))
        try:
            self._send(target, EnvelopeType.SPC_REQUEST,
                       payloads.spc_request(self.name, target, request_id, service,
                                            {} if arguments is None else arguments, timeout_ms),
                       trace_extra={"request_id": request_id, "service": service}, entry=entry)
        except BaseException:
            self._pending.pop(request_id)
            raise
        self._count("spcCalls")
        future.add_done_callback(lambda f: self._pending.pop(request_id) if f.cancelled() else None)
        self._deadlines.at(time.monotonic() + timeout, lambda: self._expire_call(request_id, timeout))
        return future

    def _expire_call(self, request_id: str, timeout: float) -> None:
        call = self._pending.pop(request_id)
        if call is None:
            return
        self._count("spcErrors")
        self._finish_call(call, request_id, "ERROR", "TIMEOUT")
        settle(call.future, error=SpcError("TIMEOUT", f"{call.target} did not answer {call.service} "
                                           f"within {timeout} s", request_id=request_id))

    def _finish_call(self, call: PendingCall, request_id: str, status: str, code: str | None) -> float:
        latency = (time.perf_counter() - call.started) * 1000
        self._emit(SpcTrace(time.time(), self.name, call.target, call.service, request_id, status, code, latency))
        return latency

    def _resolve_call(self, payload: dict) -> dict[str, Any]:
        request_id = payload["requestId"]
        call = self._pending.pop(request_id)
        extra = {"request_id": request_id, "status": payload["status"], "error_code": payload.get("errorCode")}
        if call is None:
            self._count("lateResponses")
            return extra
        status, code = payload["status"], payload.get("errorCode")
        extra["latency_ms"] = self._finish_call(call, request_id, status, code)
        extra["service"] = call.service
        if status == "SUCCESS":
            settle(call.future, payload["result"])
        else:
            self._count("spcErrors")
            settle(call.future, error=SpcError(code, payload.get("errorMessage", ""), request_id=request_id))
        return extra

    def _serve(self, payload: dict, caller: str) -> None:
        """Check one SPC request on the protocol thread; the service itself runs in the SPC pool."""
        request_id, name, arguments = payload["requestId"], payload["service"], payload["arguments"]
        answered = threading.Lock()

        def respond(result: Any = None, error: SpcError | None = None) -> None:
            if not answered.acquire(blocking=False):
                return  # already answered (result and deadline raced)
            encoded = None
            if error is None:
                try:  # encoded once, here, so that a result that is not JSON becomes an error response
                    body = payloads.spc_success(self.name, caller, request_id, result)
                    encoded = payloads.encode_payload(body)
                except (TypeError, ValueError):
                    error = SpcError("INTERNAL_ERROR", f"service {name!r} returned a value that is not JSON")
            if error is not None:
                body = payloads.spc_failure(self.name, caller, request_id, error.code, error.message)
            self._reply(caller, EnvelopeType.SPC_RESPONSE, body,
                        {"request_id": request_id, "service": name, "status": body["status"],
                         "error_code": body.get("errorCode")}, encoded)

        service = self._services.get(name)
        try:
            if caller not in self._access:
                raise SpcError("ACCESS_DENIED", f"{self.name} does not allow {caller}")
            precheck(service, name, caller, arguments)
        except SpcError as exc:
            respond(error=exc)
            return
        requested = payload.get("timeoutMs")
        requested = requested / 1000 if isinstance(requested, (int, float)) and requested > 0 else None
        limits = [t for t in (service.timeout, requested) if t]

        def run() -> None:
            try:
                result = service.run(arguments, caller)
            except SpcError as exc:
                respond(error=exc)
            except Exception as exc:
                respond(error=SpcError("EXECUTION_FAILED", f"{name} raised {type(exc).__name__}: {exc}"[:500]))
            else:
                respond(result)

        try:
            self._spc_pool.submit(run)
        except RuntimeError:  # the pool is shutting down with the node
            respond(error=SpcError("INTERNAL_ERROR", f"node {self.name} is shutting down"))
            return
        if limits:
            limit = min(limits)
            self._deadlines.at(time.monotonic() + limit, lambda: respond(
                error=SpcError("TIMEOUT", f"service {name!r} exceeded its time limit of {limit:g} s")))
