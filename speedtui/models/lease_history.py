"""Each node's lease and health history, kept per node so that other nodes' churn cannot evict it.

One shared ring of lease records (what the console kept before) was emptied, on a busy
environment, by the joins and leaves of short-lived CLI nodes: a traced node's detail then said
"none journaled". Here every node (the record's subject) keeps its newest own events and its
peers' observations of it, each in time order (journals are read one after another, so records
arrive out of order), and the number of nodes kept is bounded: past it, the node evicted first is
the one gone longest (its newest record a departure), then the one quiet longest."""

from __future__ import annotations

from bisect import insort
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

#: events after which a node is gone: its history is the first to be forgotten
DEPARTURES = frozenset({"deregistered", "observed_leave", "reaped"})


def _ts(record: Any) -> float:
    return record.ts


@dataclass
class NodeLeaseHistory:
    own: list = field(default_factory=list)    # the node's own lease events and health reports
    seen: list = field(default_factory=list)   # its peers' observations of it

    def newest(self) -> Any:
        return max((x[-1] for x in (self.own, self.seen) if x), key=_ts)


class LeaseHistory:
    """Lease and health records by subject: ``per_node`` own and ``per_node`` observed records for
    at most ``max_nodes`` nodes (memory: at most 2 * per_node * max_nodes references to records)."""

    def __init__(self, per_node: int = 32, max_nodes: int = 4096) -> None:
        self.per_node = per_node
        self.max_nodes = max_nodes
        self._present: OrderedDict[str, NodeLeaseHistory] = OrderedDict()   # least recently updated first
        self._departed: OrderedDict[str, NodeLeaseHistory] = OrderedDict()

    def __len__(self) -> int:
        return len(self._present) + len(self._departed)

    def add(self, record: Any) -> None:
        subject = record.subject
        if not subject:
            return
        hist = self._present.pop(subject, None) or self._departed.pop(subject, None) or NodeLeaseHistory()
        kept = hist.own if record.node == subject else hist.seen
        if len(kept) < self.per_node or record.ts >= kept[0].ts:
            insort(kept, record, key=_ts)
            if len(kept) > self.per_node:
                del kept[0]
        if not (hist.own or hist.seen):
            return
        gone = hist.newest().event in DEPARTURES
        (self._departed if gone else self._present)[subject] = hist
        while len(self) > self.max_nodes:
            (self._departed or self._present).popitem(last=False)

    def of(self, subject: str) -> tuple[list, list]:
        """The node's own records and its peers' observations, each oldest first."""
        hist = self._present.get(subject) or self._departed.get(subject)
        return (list(hist.own), list(hist.seen)) if hist is not None else ([], [])
