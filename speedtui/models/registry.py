"""Registry table model: entries as rows (liveness from ``liveness.judge``), sort, filter.
Pure: the files are read by ``services/registry.py``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from .liveness import STALE, EntryFacts, HostFacts, judge

REGISTRY_DIR = "speed_registry"
EXPIRING = "expiring"


@dataclass(frozen=True)
class RawEntry:
    """One file of speed_registry/ as read: the JSON object, or an error."""

    name: str  # from the file name
    data: dict[str, Any] | None
    error: str | None = None


def _num(v: Any, default: float | None = None) -> float | None:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return default
    try:
        f = float(v)
    except OverflowError:  # an integer beyond any float (a hostile or broken entry)
        return default
    return f if math.isfinite(f) else default


def _strs(v: Any) -> tuple[str, ...]:
    return tuple(str(x) for x in v) if isinstance(v, list) else ()


@dataclass(frozen=True)
class NodeRow:
    name: str
    status: str  # online | leaving | stale
    remaining: float  # lease seconds left (negative once expired)
    hb_age: float | None
    pid: int | None
    pid_alive: bool | None  # None: other host / unknown
    host: str
    runtime: str
    uptime: float | None  # stops at the last heartbeat once the node is judged dead
    groups: tuple[str, ...]
    services: tuple[str, ...]
    allow: tuple[str, ...]
    counters: dict[str, Any]
    node_id: str
    lease_seconds: float
    raw: dict[str, Any] | None
    error: str | None = None
    reason: str = ""  # why the node is judged stale ("" when it is not)

    @property
    def expiring_soon(self) -> bool:
        return self.status != STALE and self.remaining < min(10.0, self.lease_seconds / 3)


def _static(raw: RawEntry) -> dict[str, Any]:
    """The parts of a row that depend on the entry only (cached per RawEntry)."""
    d = raw.data or {}
    pid = d.get("pid") if isinstance(d.get("pid"), int) and not isinstance(d.get("pid"), bool) else None
    host = str(d.get("host", ""))
    facts = EntryFacts(lease=_num(d.get("leaseSeconds"), 30.0) or 30.0, last_heartbeat=_num(d.get("lastHeartbeat")),
                       boottime_heartbeat=_num(d.get("bootTimeHeartbeat")), boot_id=d.get("bootId"), pid=pid,
                       host=host, leaving=d.get("status") == "leaving", startup=_num(d.get("startupTimestamp")))
    return dict(
        facts=facts, pid=pid, host=host,
        name=str(d.get("name", raw.name)) if raw.error is None else raw.name, runtime=str(d.get("runtime", "")),
        groups=_strs(d.get("groups")), services=_strs(d.get("services")), allow=_strs(d.get("allow")),
        counters=d.get("counters") if isinstance(d.get("counters"), dict) else {}, node_id=str(d.get("id", "")),
    )


def build_row(raw: RawEntry, now: float, boot_id: str | None = None, boottime_now: float | None = None,
              host: str | None = None, check_pid: Callable[[int], bool | None] | None = None,
              static: dict[str, Any] | None = None, facts: HostFacts | None = None) -> NodeRow:
    """One row; the host facts come as ``facts`` or as the separate arguments (no host: no pid judged)."""
    st = static if static is not None else _static(raw)
    if facts is None:
        facts = HostFacts(host=host, boot_id=boot_id, boottime=boottime_now, pid_alive=check_pid)
    v = judge(st["facts"], now, facts, raw.error)
    return NodeRow(
        name=st["name"], status=v.status, remaining=v.remaining, hb_age=v.hb_age, pid=st["pid"],
        pid_alive=v.pid_alive, host=st["host"], runtime=st["runtime"], uptime=v.uptime,
        groups=st["groups"], services=st["services"], allow=st["allow"], counters=st["counters"],
        node_id=st["node_id"], lease_seconds=st["facts"].lease, raw=raw.data, error=raw.error, reason=v.reason,
    )


def fmt_duration(sec: float | None) -> str:
    if sec is None:
        return "-"
    neg = sec < 0
    s = int(abs(sec))
    if s < 60:
        txt = f"{abs(sec):.1f}s" if s < 10 else f"{s}s"
    elif s < 3600:
        txt = f"{s // 60}m{s % 60:02d}s"
    elif s < 86400:
        txt = f"{s // 3600}h{(s % 3600) // 60:02d}m"
    else:
        txt = f"{s // 86400}d{(s % 86400) // 3600:02d}h"
    return "-" + txt if neg else txt


def fmt_counters(c: dict[str, Any]) -> str:
    """Published counters, condensed: tx rx rej calls err (other numeric fields after)."""
    if not c:
        return "-"
    short = {"sent": "tx", "received": "rx", "accepted": "rx", "rejected": "rej", "spcCalls": "calls",
             "spcErrors": "err", "sealed": "seal"}
    order = ["sent", "received", "accepted", "rejected", "spcCalls", "spcErrors"]
    parts = []
    for k in order + sorted(k for k in c if k not in order and k != "sealed"):
        if k not in c:
            continue
        v = c[k]
        if isinstance(v, dict):
            v = sum(x for x in v.values() if isinstance(x, (int, float)) and not isinstance(x, bool))
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if k not in order and not v:
                continue
            parts.append(f"{short.get(k, k)}={v:g}")
    return " ".join(parts) or "-"


COLUMNS: list[tuple[str, str, int]] = [
    # key, label, width (NAME and STATUS stay when the table scrolls right; the first eleven fit
    # 120 columns, COUNTERS takes what is left of wider screens)
    ("name", "NAME", 13),
    ("status", "STATUS", 9),
    ("remaining", "LEASE", 7),
    ("hb_age", "HB AGE", 6),
    ("pid", "PID", 7),
    ("host", "HOST", 10),
    ("uptime", "UPTIME", 6),
    ("groups", "FABRICS", 12),
    ("services", "SERVICES", 14),
    ("allow", "ALLOW", 5),
    ("counters", "COUNTERS", 20),
    ("runtime", "RUNTIME", 24),
]
FROZEN_COLUMNS = 2
FLEX_COLUMN = "counters"

_STATUS_ORDER = {"stale": 0, "leaving": 1, "online": 2}


def sort_key(column: str) -> Callable[[NodeRow], Any]:
    if column == EXPIRING:
        return lambda r: (r.status == "stale", r.remaining, r.name)
    if column == "status":
        return lambda r: (_STATUS_ORDER.get(r.status, 9), r.name)
    if column in ("remaining", "hb_age", "uptime", "pid"):
        return lambda r: (getattr(r, column) is None, getattr(r, column) or 0, r.name)
    if column in ("groups", "services"):
        return lambda r: (",".join(getattr(r, column)), r.name)
    if column == "allow":
        return lambda r: (len(r.allow), r.name)
    if column == "counters":
        return lambda r: (fmt_counters(r.counters), r.name)
    return lambda r: (str(getattr(r, column, "")).lower(), r.name)


def row_matches(row: NodeRow, text: str) -> bool:
    if not text:
        return True
    t = text.lower()
    hay = " ".join([row.name, row.status, row.host, row.runtime, " ".join(row.groups),
                    " ".join(row.services), str(row.pid or ""), row.reason]).lower()
    return all(part in hay for part in t.split())


@dataclass
class RegistryModel:
    """The current registry as the console sees it."""

    raw: list[RawEntry] = field(default_factory=list)
    rows: list[NodeRow] = field(default_factory=list)
    sort_column: str = "name"
    sort_reverse: bool = False
    filter_text: str = ""
    fabric: str | None = None  # fabric filter (None: all, "" : ungrouped)
    _static_cache: dict = field(default_factory=dict, repr=False)
    _by_name: dict | None = field(default=None, repr=False)

    def update(self, raw: Iterable[RawEntry], now: float, facts: HostFacts | None = None) -> None:
        self.raw = list(raw)
        self.refresh(now, facts)

    def refresh(self, now: float, facts: HostFacts | None = None) -> None:
        facts = facts if facts is not None else HostFacts()
        cache = self._static_cache
        fresh: dict[int, tuple[RawEntry, dict]] = {}
        rows = []
        for r in self.raw:
            hit = cache.get(id(r))
            st = hit[1] if hit is not None and hit[0] is r else _static(r)
            fresh[id(r)] = (r, st)
            rows.append(build_row(r, now, static=st, facts=facts))
        self._static_cache = fresh
        self.rows = rows
        self._by_name = None

    def by_name(self) -> dict[str, NodeRow]:
        if self._by_name is None:
            self._by_name = {r.name: r for r in self.rows}
        return self._by_name

    def counts(self) -> dict[str, int]:
        c = {"online": 0, "leaving": 0, "stale": 0}
        for r in self.rows:
            c[r.status] = c.get(r.status, 0) + 1
        return c

    def in_fabric(self, row: NodeRow) -> bool:
        if self.fabric is None:
            return True
        if self.fabric == "":
            return not row.groups
        return self.fabric in row.groups

    def visible(self) -> list[NodeRow]:
        rows = [r for r in self.rows if self.in_fabric(r) and row_matches(r, self.filter_text)]
        rows.sort(key=sort_key(self.sort_column), reverse=self.sort_reverse)
        return rows

    def set_sort(self, column: str) -> None:
        if self.sort_column == column:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_column = column
            self.sort_reverse = False
