"""Access control (RFC §9): deny-all grants and per-service policies. Pure and thread-safe."""
from __future__ import annotations

import threading
from typing import Callable, Iterable

from .names import validate_name

ServicePolicy = Callable[[str], bool]


class AccessRegistry:
    """The set of node names that may write to this node's inbox."""

    def __init__(self, names: Iterable[str] = ()):
        self._lock = threading.Lock()
        self._names = {validate_name(n) for n in names}

    def allow(self, name: str) -> bool:
        """Grant `name`; True if this changed anything."""
        validate_name(name)
        with self._lock:
            if name in self._names:
                return False
            self._names.add(name)
            return True

    def revoke(self, name: str) -> bool:
        with self._lock:
            if name not in self._names:
                return False
            self._names.discard(name)
            return True

    def __contains__(self, name: object) -> bool:
        return name in self._names  # set membership is atomic under the GIL

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._names)


def policy_allows(policy: ServicePolicy | Iterable[str] | None, caller: str) -> bool:
    """A service policy is None (everyone the node allows), a set of names, or a predicate."""
    if policy is None:
        return True
    if callable(policy):
        return bool(policy(caller))
    return caller in policy


def explain_call(caller: str, caller_allow: Iterable[str], target: str, target_allow: Iterable[str] | None,
                 target_services: Iterable[str] | None, service: str) -> list[str]:
    """What stops `caller` calling `target.service`; an empty list means nothing does."""
    problems = []
    if target_allow is None:
        return [f"node {target} is not online"]
    if caller not in set(target_allow):
        problems.append(f"{target} does not allow {caller}: grant it with `allow {caller}` on {target}")
    if target not in set(caller_allow):
        problems.append(f"{caller} does not allow {target}, so the response cannot come back: "
                        f"grant it with `allow {target}` on {caller}")
    if target_services is not None and service not in set(target_services):
        problems.append(f"{target} does not advertise a service named {service!r}")
    return problems
