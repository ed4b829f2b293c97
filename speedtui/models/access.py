"""Access graph (who may write to whom) and the call explainer (SPEED-WIRE-V1 §5.4, §5.6)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .registry import NodeRow

MUTUAL, ONE_WAY, NONE = "mutual", "one-way", "none"


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    kind: str  # mutual | one-way


class AccessGraph:
    def __init__(self, rows: Iterable[NodeRow]) -> None:
        self.nodes: dict[str, NodeRow] = {r.name: r for r in rows}
        self.names = sorted(self.nodes)

    def may_write(self, src: str, dst: str) -> bool:
        d = self.nodes.get(dst)
        return d is not None and src in d.allow

    def relation(self, a: str, b: str) -> str:
        ab, ba = self.may_write(a, b), self.may_write(b, a)
        if ab and ba:
            return MUTUAL
        if ab or ba:
            return ONE_WAY
        return NONE

    def edges(self, names: Iterable[str] | None = None) -> list[Edge]:
        names = sorted(set(names) if names is not None else self.names)
        out: list[Edge] = []
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                ab, ba = self.may_write(a, b), self.may_write(b, a)
                if ab and ba:
                    out.append(Edge(a, b, MUTUAL))
                elif ab:
                    out.append(Edge(a, b, ONE_WAY))
                elif ba:
                    out.append(Edge(b, a, ONE_WAY))
        return out

    def dangling(self) -> list[tuple[str, str]]:
        """Grants that name nodes not in the registry: (granting node, unknown name)."""
        return sorted((n, a) for n, r in self.nodes.items() for a in r.allow if a not in self.nodes)

    def matrix(self, names: list[str] | None = None) -> list[list[str]]:
        """cell [i][j]: '→' i may write j only, '⇄' both, '←' j may write i only, '·' none."""
        names = names if names is not None else self.names
        sym = []
        for a in names:
            row = []
            for b in names:
                if a == b:
                    row.append(" ")
                    continue
                ab, ba = self.may_write(a, b), self.may_write(b, a)
                row.append("⇄" if ab and ba else "→" if ab else "←" if ba else "·")
            sym.append(row)
        return sym

    def by_fabric(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for n in self.names:
            gs = self.nodes[n].groups or ("",)
            for g in gs:
                groups.setdefault(g, []).append(n)
        return dict(sorted(groups.items(), key=lambda kv: (kv[0] == "", kv[0])))


@dataclass(frozen=True)
class Verdict:
    ok: bool
    lines: tuple[str, ...]  # first line: the conclusion; then each check ✓/✗
    missing: tuple[str, ...]  # exactly what to fix, one item each


def explain(graph: AccessGraph, caller: str, target: str, service: str | None = None) -> Verdict:
    """Can ``caller`` call ``service`` on ``target``? If not, exactly what is missing."""
    checks: list[tuple[bool, str]] = []
    missing: list[str] = []
    c = graph.nodes.get(caller)
    t = graph.nodes.get(target)
    if c is None or c.status == "stale":
        checks.append((False, f"{caller} is registered and online"))
        missing.append(f"start node {caller} (it is {'stale' if c else 'not in the registry'})")
    else:
        checks.append((True, f"{caller} is registered and {c.status}"))
    if t is None or t.status == "stale":
        checks.append((False, f"{target} is registered and online"))
        missing.append(f"start node {target} (it is {'stale' if t else 'not in the registry'}): "
                       f"the call fails with 'node {target} is not available'")
    else:
        checks.append((True, f"{target} is registered and {t.status}"))
    if t is not None:
        if caller in t.allow:
            checks.append((True, f"{target} allows {caller} (request {caller} → {target})"))
        else:
            checks.append((False, f"{target} allows {caller} (request {caller} → {target})"))
            missing.append(f"grant on {target}: allow {caller}  (else ACCESS_DENIED, nothing is sent)")
    if c is not None:
        if target in c.allow:
            checks.append((True, f"{caller} allows {target} (response {target} → {caller})"))
        else:
            checks.append((False, f"{caller} allows {target} (response {target} → {caller})"))
            missing.append(f"grant on {caller}: allow {target}  (the response needs it; the caller "
                           f"fails at once with ACCESS_DENIED naming this grant)")
    if service:
        if t is not None and service in t.services:
            checks.append((True, f"{target} advertises service {service}"))
        elif t is not None:
            adv = ", ".join(t.services) or "none"
            checks.append((False, f"{target} advertises service {service} (it offers: {adv})"))
            missing.append(f"register service {service} on {target}  (else SERVICE_NOT_FOUND)")
    ok = not missing
    head = (f"✓ {caller} can call {service or 'a service'} on {target}" if ok
            else f"✗ {caller} cannot call {service or 'a service'} on {target}: "
                 f"{len(missing)} thing{'s' if len(missing) != 1 else ''} missing")
    lines = [head] + [("  ✓ " if good else "  ✗ ") + text for good, text in checks]
    return Verdict(ok, tuple(lines), tuple(missing))


def grant_preview(graph: AccessGraph, node: str, peer: str, grant: bool) -> list[str]:
    """What allowing (or revoking) ``peer`` on ``node`` opens or closes."""
    before_in = graph.may_write(peer, node)
    before_out = graph.may_write(node, peer)
    lines = []
    if grant:
        if before_in:
            return [f"{node} already allows {peer}: nothing changes"]
        lines.append(f"opens: {peer} may send messages and SPC requests to {node}")
        if before_out:
            lines.append(f"opens: SPC calls {node} → {peer} can now get their response "
                         f"(link becomes mutual)")
        else:
            lines.append(f"link becomes one-way {peer} → {node}; calls {peer} → {node} "
                         f"still need {peer} to allow {node}")
    else:
        if not before_in:
            return [f"{node} does not allow {peer}: nothing changes"]
        lines.append(f"closes: {peer} can no longer write to {node} (its envelopes are discarded unread)")
        if before_out:
            lines.append(f"closes: SPC calls {node} → {peer} lose their response path "
                         f"({node} fails them with ACCESS_DENIED)")
    return lines


def grants_needed(graph: AccessGraph, caller: str, target: str) -> list[tuple[str, str]]:
    """The allow entries a call ``caller`` → ``target`` still needs, as (node that grants, peer):
    the target must allow the caller (the request), the caller the target (the response).
    Never a node granting itself."""
    needed = []
    t, c = graph.nodes.get(target), graph.nodes.get(caller)
    if caller != target:
        if t is not None and caller not in t.allow:
            needed.append((target, caller))
        if c is not None and target not in c.allow:
            needed.append((caller, target))
    return needed
