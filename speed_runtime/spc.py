"""Speed Procedure Calls: services, the callee's checks, pending calls and deadlines."""
from __future__ import annotations

import abc
import heapq
import inspect
import itertools
import threading
import time
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from .access import ServicePolicy, policy_allows
from .errors import ConfigError, SpcError


class Service(abc.ABC):
    """A service object, as in the RFC: `invoke(arguments, caller)` returns a JSON value.

    Raise SpcError("INVALID_ARGUMENTS", ...) for bad arguments; any other exception becomes
    EXECUTION_FAILED. `timeout` (seconds) bounds one invocation; `policy` restricts callers.
    """

    timeout: float | None = None
    policy: ServicePolicy | Iterable[str] | None = None

    @abc.abstractmethod
    def invoke(self, arguments: dict, caller: str) -> Any: ...


@dataclass
class RegisteredService:
    name: str
    run: Callable[[dict, str], Any]
    policy: ServicePolicy | Iterable[str] | None
    timeout: float | None


def as_registered(name: str, service: Service | Callable, policy, timeout) -> RegisteredService:
    if isinstance(service, Service):
        return RegisteredService(name, service.invoke, policy if policy is not None else service.policy,
                                 timeout if timeout is not None else service.timeout)
    if not callable(service):
        raise ConfigError(f"service {name!r} must be a Service or a callable")
    return RegisteredService(name, _adapt(service), policy, timeout)


def _adapt(fn: Callable) -> Callable[[dict, str], Any]:
    """Plain callables take (arguments) or (arguments, caller)."""
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    except (TypeError, ValueError):
        return fn
    if len(params) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params):
        return fn
    return lambda arguments, caller: fn(arguments)


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


def precheck(service: RegisteredService | None, name: str, caller: str, arguments: Any) -> None:
    """The callee's checks after sender authorization, in contract order (§5.6)."""
    if service is None:
        raise SpcError("SERVICE_NOT_FOUND", f"no service named {name!r} is registered")
    if not policy_allows(service.policy, caller):
        raise SpcError("ACCESS_DENIED", f"service {name!r} does not admit caller {caller}")
    if not isinstance(arguments, dict):
        raise SpcError("INVALID_ARGUMENTS", "arguments must be a JSON object")


def settle(future: Future, result: Any = None, error: BaseException | None = None) -> None:
    """Complete `future` unless its owner already cancelled it (or another path completed it)."""
    if future.done():
        return
    try:
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)
    except InvalidStateError:  # cancelled between the check and the set
        pass


@dataclass
class PendingCall:
    future: Future
    target: str
    service: str
    started: float  # time.perf_counter() when sent


class PendingCalls:
    """Calls waiting for a response, keyed by request id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[str, PendingCall] = {}

    def add(self, request_id: str, call: PendingCall) -> None:
        with self._lock:
            self._calls[request_id] = call

    def pop(self, request_id: str) -> PendingCall | None:
        with self._lock:
            return self._calls.pop(request_id, None)

    def fail_all(self, error: Exception) -> None:
        with self._lock:
            calls, self._calls = list(self._calls.values()), {}
        for call in calls:
            settle(call.future, error=error)


class Deadlines:
    """One thread runs callbacks at deadlines (time.monotonic seconds), at most `resolution`
    seconds late. Wake-ups are coalesced: a call that completes early costs no wake-up at all,
    its stale entry is skipped when its time comes."""

    def __init__(self, name: str, resolution: float = 0.05):
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._counter = itertools.count()
        self._stopped = False
        self._resolution = resolution
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def at(self, when: float, callback: Callable[[], None]) -> None:
        with self._cond:
            earliest = not self._heap or when < self._heap[0][0]
            heapq.heappush(self._heap, (when, next(self._counter), callback))
            if earliest:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                now = time.monotonic()
                due = []
                while self._heap and self._heap[0][0] <= now:
                    due.append(heapq.heappop(self._heap)[2])
                if not due:
                    wait = None if not self._heap else max(self._heap[0][0] - now, self._resolution)
                    self._cond.wait(wait)
                    continue
            for callback in due:
                try:
                    callback()
                except Exception:  # a deadline callback must never kill the thread
                    pass

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join()
