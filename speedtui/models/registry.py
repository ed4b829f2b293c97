"""Registry table model: parse entries, judge liveness (SPEED-WIRE-V1 §4.1), sort, filter."""

from __future__ import annotations

import math
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from speed_runtime.core.entry import MAX_ENTRY_BYTES, RegistryEntry
from speed_runtime.core.errors import BadEntryError

REGISTRY_DIR = "speed_registry"
EXPIRING = "expiring"


def local_boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


LOCAL_HOST = socket.gethostname()


def pid_alive(pid: int) -> bool | None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, OSError, ValueError):
        return False
    return True


@dataclass(frozen=True)
class RawEntry:
    """One file of speed_registry/ as read: the JSON object, or an error."""

    name: str  # from the file name
    data: dict[str, Any] | None
    error: str | None = None


def read_registry(root: Path, cache: dict | None = None) -> list[RawEntry]:
    """Read every ``*.node`` file; never raises for a bad entry.

    With ``cache`` (a dict kept by the caller), a file whose (inode, size, mtime) did not change
    is not read again and keeps its RawEntry object (so models can cache per entry)."""
    reg = Path(root) / REGISTRY_DIR
    out: list[RawEntry] = []
    try:
        names = sorted(os.listdir(reg))
    except OSError:
        return out
    seen = set()
    for fn in names:
        if not fn.endswith(".node") or fn.startswith("."):
            continue
        name = fn[:-5]
        if cache is not None:
            try:
                st = os.stat(reg / fn, follow_symlinks=False)
            except OSError:
                continue
            sig = (st.st_ino, st.st_size, st.st_mtime_ns)
            seen.add(fn)
            hit = cache.get(fn)
            if hit is not None and hit[0] == sig:
                out.append(hit[1])
                continue
            entry = _read_one(reg, fn, name)
            if entry is not None:
                cache[fn] = (sig, entry)
                out.append(entry)
            continue
        entry = _read_one(reg, fn, name)
        if entry is not None:
            out.append(entry)
    if cache is not None:
        for fn in [k for k in cache if k not in seen]:
            del cache[fn]
    return out


def _read_one(reg: Path, fn: str, name: str) -> RawEntry | None:
    try:
        fd = os.open(reg / fn, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read(MAX_ENTRY_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return RawEntry(name, None, f"unreadable: {exc.strerror}")
    try:  # the runtime's reader: the same validation as every node (huge numbers, bad ids, names)
        entry = RegistryEntry.from_json(raw)
    except BadEntryError as exc:
        return RawEntry(name, None, str(exc))
    if entry.name != name:
        return RawEntry(name, None, f"the file holds an entry named {entry.name!r}")
    return RawEntry(name, entry.to_dict())


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
    remaining: float  # lease seconds left (negative when stale)
    hb_age: float | None
    pid: int | None
    pid_alive: bool | None  # None: other host / unknown
    host: str
    runtime: str
    uptime: float | None
    groups: tuple[str, ...]
    services: tuple[str, ...]
    allow: tuple[str, ...]
    counters: dict[str, Any]
    node_id: str
    lease_seconds: float
    raw: dict[str, Any] | None
    error: str | None = None

    @property
    def expiring_soon(self) -> bool:
        return self.status != "stale" and self.remaining < min(10.0, self.lease_seconds / 3)


def _static(raw: RawEntry) -> dict[str, Any]:
    """The parts of a row that depend on the entry only (cached per RawEntry)."""
    d = raw.data or {}
    pid = d.get("pid") if isinstance(d.get("pid"), int) and not isinstance(d.get("pid"), bool) else None
    return dict(
        lease=_num(d.get("leaseSeconds"), 30.0) or 30.0, hb=_num(d.get("lastHeartbeat")),
        bt=_num(d.get("bootTimeHeartbeat")), boot=d.get("bootId"), pid=pid, host=str(d.get("host", "")),
        start=_num(d.get("startupTimestamp")), leaving=d.get("status") == "leaving",
        name=str(d.get("name", raw.name)) if raw.error is None else raw.name, runtime=str(d.get("runtime", "")),
        groups=_strs(d.get("groups")), services=_strs(d.get("services")), allow=_strs(d.get("allow")),
        counters=d.get("counters") if isinstance(d.get("counters"), dict) else {}, node_id=str(d.get("id", "")),
    )


def build_row(raw: RawEntry, now: float, boot_id: str | None = None,
              boottime_now: float | None = None, host: str = LOCAL_HOST,
              check_pid: Callable[[int], bool | None] = pid_alive, static: dict[str, Any] | None = None) -> NodeRow:
    st = static if static is not None else _static(raw)
    lease, hb = st["lease"], st["hb"]
    age: float | None = None
    if hb is not None:
        age = now - hb
        if boot_id and st["boot"] == boot_id and st["bt"] is not None and boottime_now is not None:
            age = boottime_now - st["bt"]
    pid = st["pid"]
    alive: bool | None = None
    if pid is not None and st["host"] == host:
        alive = check_pid(pid)
    if raw.error is not None or age is None:
        status = "stale"
        remaining = -1.0
    else:
        remaining = lease - age
        if age > lease or alive is False:
            status = "stale"
        elif st["leaving"]:
            status = "leaving"
        else:
            status = "online"
    start = st["start"]
    return NodeRow(
        name=st["name"], status=status, remaining=remaining, hb_age=age, pid=pid, pid_alive=alive,
        host=st["host"], runtime=st["runtime"], uptime=(now - start) if start is not None else None,
        groups=st["groups"], services=st["services"], allow=st["allow"], counters=st["counters"],
        node_id=st["node_id"], lease_seconds=lease, raw=raw.data, error=raw.error,
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
    # key, label, width (the first eleven fit 120 columns; scroll right for the runtime)
    ("status", "STATUS", 9),
    ("name", "NAME", 13),
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
                    " ".join(row.services), str(row.pid or "")]).lower()
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

    def update(self, raw: Iterable[RawEntry], now: float, boot_id: str | None = None,
               boottime_now: float | None = None, host: str = LOCAL_HOST,
               check_pid: Callable[[int], bool | None] = pid_alive) -> None:
        self.raw = list(raw)
        self.refresh(now, boot_id, boottime_now, host, check_pid)

    def refresh(self, now: float, boot_id: str | None = None, boottime_now: float | None = None,
                host: str = LOCAL_HOST, check_pid: Callable[[int], bool | None] = pid_alive) -> None:
        cache = self._static_cache
        fresh: dict[int, tuple[RawEntry, dict]] = {}
        rows = []
        for r in self.raw:
            hit = cache.get(id(r))
            st = hit[1] if hit is not None and hit[0] is r else _static(r)
            fresh[id(r)] = (r, st)
            rows.append(build_row(r, now, boot_id, boottime_now, host, check_pid, static=st))
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
