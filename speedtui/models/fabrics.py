"""Fabric tree: each group with its nodes and a rolled-up health."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .registry import NodeRow

UNGROUPED = ""


@dataclass(frozen=True)
class Fabric:
    name: str  # "" for ungrouped
    nodes: tuple[NodeRow, ...]

    @property
    def label(self) -> str:
        return self.name or "(ungrouped)"

    @property
    def health(self) -> str:
        n = len(self.nodes)
        online = sum(1 for r in self.nodes if r.status == "online")
        if n == 0:
            return "empty"
        if online == n:
            return "healthy"
        if online == 0:
            return "down"
        return "degraded"

    def summary(self) -> str:
        c = {"online": 0, "leaving": 0, "stale": 0}
        for r in self.nodes:
            c[r.status] = c.get(r.status, 0) + 1
        parts = [f"{c['online']}/{len(self.nodes)} online"]
        if c["leaving"]:
            parts.append(f"{c['leaving']} leaving")
        if c["stale"]:
            parts.append(f"{c['stale']} stale")
        return ", ".join(parts)


def build_fabrics(rows: Iterable[NodeRow]) -> list[Fabric]:
    groups: dict[str, list[NodeRow]] = {}
    for r in rows:
        if r.error is not None:     # an unreadable registry file is no node (Leases shows it)
            continue
        for g in (r.groups or (UNGROUPED,)):
            groups.setdefault(g, []).append(r)
    return [Fabric(name, tuple(sorted(nodes, key=lambda r: r.name)))
            for name, nodes in sorted(groups.items(), key=lambda kv: (kv[0] == UNGROUPED, kv[0]))]
