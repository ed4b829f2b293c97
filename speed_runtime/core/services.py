"""Services of Speed Procedure Calls (wire contract §5.6): what a service is, and the callee's
checks before it runs one, in contract order. Pure."""
from __future__ import annotations

import abc
import inspect
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


def precheck(service: RegisteredService | None, name: str, caller: str, arguments: Any) -> None:
    """The callee's checks after sender authorization, in contract order (§5.6)."""
    if service is None:
        raise SpcError("SERVICE_NOT_FOUND", f"no service named {name!r} is registered")
    if not policy_allows(service.policy, caller):
        raise SpcError("ACCESS_DENIED", f"service {name!r} does not admit caller {caller}")
    if not isinstance(arguments, dict):
        raise SpcError("INVALID_ARGUMENTS", "arguments must be a JSON object")
