"""Access graph (who may write to whom) and the call explainer (SPEED-WIRE-V1 §5.4, §5.6): the
runtime's ``core.access.explain`` checks, in the console's words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Iterable, Iterator

from speed_runtime.core.access import Check, Explanation
from speed_runtime.core.access import explain as explain_checks

from .liveness import LEAVING, ONLINE, STALE
from .registry import NodeRow

MUTUAL, ONE_WAY, NONE = "mutual", "one-way", "none"


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    kind: str  # mutual | one-way


class AccessGraph:
    def __init__(self, rows: Iterable[NodeRow]) -> None:
        # an unreadable registry file is no node: it grants nothing and nothing can reach it
        self.nodes: dict[str, NodeRow] = {r.name: r for r in rows if r.error is None}
        self.names = sorted(self.nodes)

    def administered(self, fingerprint: str | None) -> list[str]:
        """The nodes that trust the operator with this fingerprint (its `control` requests)."""
        return [n for n in self.names if fingerprint and fingerprint in self.nodes[n].operators]

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

    def _writes(self, among: Collection[str]) -> Iterator[tuple[str, str]]:
        """(src, dst) for every grant between two of ``among``: src may write to dst. From the
        grants themselves, not from every pair of nodes: an environment of 10,000 nodes has 50
        million pairs and a few grants each."""
        for dst in among:
            row = self.nodes.get(dst)
            if row is not None:
                yield from ((src, dst) for src in row.allow if src != dst and src in among)

    def edges(self, names: Iterable[str] | None = None) -> list[Edge]:
        """Every grant between two of ``names`` (all nodes by default), a mutual pair once, sorted
        by the pair."""
        writes = set(self._writes(set(names) if names is not None else self.nodes.keys()))
        out: list[Edge] = []
        for a, b in sorted({(min(p), max(p)) for p in writes}):
            ab, ba = (a, b) in writes, (b, a) in writes
            out.append(Edge(a, b, MUTUAL) if ab and ba else Edge(a, b, ONE_WAY) if ab else Edge(b, a, ONE_WAY))
        return out

    def writes_to(self, names: Iterable[str]) -> dict[str, list[str]]:
        """For each of ``names``: the nodes among them it may write to, sorted."""
        among = set(names)
        out: dict[str, list[str]] = {n: [] for n in among}
        for src, dst in self._writes(among):
            out[src].append(dst)
        return {n: sorted(v) for n, v in out.items()}

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
    checks: tuple[Check, ...] = ()  # the runtime's checks this renders


def checks_for(graph: AccessGraph, caller: str, target: str, service: str | None = None) -> Explanation:
    """The runtime's explanation (``speed_runtime.core.access.explain``) of a call from ``caller``
    to ``target`` as the registry shows them: a node's grants count only while it is online (a
    stale one is not; a leaving target refuses new deliveries, contract 1.1). Without a service
    it explains a call to any service (both grants; no service to look for)."""
    c, t = graph.nodes.get(caller), graph.nodes.get(target)
    caller_allow = c.allow if c is not None and c.status != STALE else None
    target_allow = t.allow if t is not None and t.status == ONLINE else None
    services = t.services if service and target_allow is not None else None
    return explain_checks(caller, caller_allow, target, target_allow, services, service or "")


def _state(row: NodeRow | None) -> str:
    return row.status if row is not None else "not in the registry"


def _render(check: Check, graph: AccessGraph, caller: str, target: str) -> tuple[str, str]:
    """One check in the console's words: (the line, what to do when it fails)."""
    row = graph.nodes.get(check.node)
    if check.kind == "online":
        if check.ok:
            return f"{check.node} is registered and {row.status if row else 'online'}", ""
        line = f"{check.node} is registered and online"
        if check.node != target:
            return line, f"start node {check.node} (it is {_state(row)})"
        if row is not None and row.status == LEAVING:
            return line, (f"wait for node {target} to start again (it is leaving): the call fails with "
                          f"'node {target} is leaving'")
        return line, (f"start node {target} (it is {_state(row)}): the call fails with "
                      f"'node {target} is not available'")
    if check.kind == "grant" and check.node == target:  # the request
        return (f"{target} allows {caller} (request {caller} → {target})",
                f"grant on {target}: allow {caller}  (else ACCESS_DENIED, nothing is sent)")
    if check.kind == "grant":  # the response
        return (f"{caller} allows {target} (response {target} → {caller})",
                f"grant on {caller}: allow {target}  (the response needs it; the caller fails at once with "
                f"ACCESS_DENIED naming this grant)")
    line = f"{target} advertises service {check.peer}"
    if check.ok:
        return line, ""
    return (f"{line} (it offers: {', '.join(row.services) if row and row.services else 'none'})",
            f"register service {check.peer} on {target}  (else SERVICE_NOT_FOUND)")


def explain(graph: AccessGraph, caller: str, target: str, service: str | None = None) -> Verdict:
    """Can ``caller`` call ``service`` on ``target``? If not, exactly what is missing: the
    runtime's checks, rendered in the console's words."""
    x = checks_for(graph, caller, target, service)
    lines, missing = [], []
    for check in x.checks:
        line, fix = _render(check, graph, caller, target)
        lines.append(("  ✓ " if check.ok else "  ✗ ") + line)
        if not check.ok:
            missing.append(fix)
    what = service or "a service"
    head = (f"✓ {caller} can call {what} on {target}" if x.ok
            else f"✗ {caller} cannot call {what} on {target}: {len(missing)} thing{'s' if len(missing) != 1 else ''} "
                 "missing")
    return Verdict(x.ok, (head, *lines), tuple(missing), x.checks)


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


def grants_needed(graph: AccessGraph, caller: str, target: str, service: str | None = None) -> list[tuple[str, str]]:
    """The allow entries a call ``caller`` → ``target`` still needs, as (node that grants, peer):
    the failed grant checks of the runtime's explanation (the target allowing the caller for the
    request, the caller allowing the target for the response). Never a node granting itself."""
    if caller == target:
        return []
    return [(c.node, c.peer) for c in checks_for(graph, caller, target, service).missing if c.kind == "grant"]
