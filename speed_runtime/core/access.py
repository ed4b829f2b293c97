"""Access control (RFC §9): deny-all grants, per-service policies, and the one explainer of
"can A call B?" that the runtime's errors and the console's views are rendered from. Pure.

A node's grants are an immutable frozenset; whoever changes them (the node) swaps in a new set
under its own lock, so readers on other threads never need one.
"""
from __future__ import annotations

from typing import Callable, Iterable, NamedTuple

from .names import validate_name

ServicePolicy = Callable[[str], bool]


def granted(allowed: frozenset[str], *names: str) -> frozenset[str]:
    """`allowed` with `names` added (each validated as a node name)."""
    return allowed | {validate_name(n) for n in names}


def revoked(allowed: frozenset[str], *names: str) -> frozenset[str]:
    return allowed - set(names)


def policy_allows(policy: ServicePolicy | Iterable[str] | None, caller: str) -> bool:
    """A service policy is None (everyone the node allows), a set of names, or a predicate."""
    if policy is None:
        return True
    if callable(policy):
        return bool(policy(caller))
    return caller in policy


class Check(NamedTuple):
    """One condition of a call: `kind` is online | grant | service; for a grant, `node` must
    allow `peer`; for online, `node` must be online; for service, `node` must offer `peer`."""

    ok: bool
    kind: str
    node: str
    peer: str = ""

    @property
    def text(self) -> str:
        """The runtime's wording of a failed check (errors, `speed` CLI)."""
        if self.kind == "online":
            return f"node {self.node} is not online"
        if self.kind == "service":
            return f"{self.node} does not advertise a service named {self.peer!r}"
        return f"{self.node} does not allow {self.peer}: grant it with `allow {self.peer}` on {self.node}"


class Explanation(NamedTuple):
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def missing(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.ok)


def explain(caller: str, caller_allow: Iterable[str] | None, target: str, target_allow: Iterable[str] | None,
            target_services: Iterable[str] | None, service: str | None) -> Explanation:
    """Every condition for `caller` to call `target.service` (or to send to `target` when
    `service` is None), in the order a call meets them. `*_allow` is None for a node that is
    not online; `target_services` None when unknown."""
    checks = [Check(caller_allow is not None, "online", caller), Check(target_allow is not None, "online", target)]
    if target_allow is not None:
        checks.append(Check(caller in set(target_allow), "grant", target, caller))  # the request
    if caller_allow is not None and service is not None:
        checks.append(Check(target in set(caller_allow), "grant", caller, target))  # the response
    if service is not None and target_services is not None:
        checks.append(Check(service in set(target_services), "service", target, service))
    return Explanation(tuple(checks))


def explain_call(caller: str, caller_allow: Iterable[str], target: str, target_allow: Iterable[str] | None,
                 target_services: Iterable[str] | None, service: str) -> list[str]:
    """What stops a running `caller` calling `target.service`, in the runtime's words; [] if nothing."""
    problems = []
    for check in explain(caller, caller_allow, target, target_allow, target_services, service).missing:
        if check.kind == "online":
            return [check.text]
        text = check.text
        if check.kind == "grant" and check.node == caller:
            text = (f"{caller} does not allow {target}, so the response cannot come back: "
                    f"grant it with `allow {target}` on {caller}")
        problems.append(text)
    return problems
