"""Registry table model: entries as rows (liveness is the runtime's verdict, ``liveness.py``
words it), sort, filter. Pure: the files are read by ``services/registry.py`` with the runtime's
reader, whose records (``speed_runtime.registry.RegistryRecord``: name, entry or error) come here.
Every string of a row is shown as ``core.visible`` writes it (members write the entries and name
the files); the entry itself (``raw``) stays as it was, for JSON views (``visible_json``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol

from speed_runtime.core.control import trusted_operators
from speed_runtime.core.entry import RegistryEntry
from speed_runtime.core.visible import visible, visible_data

from .liveness import STALE, HostFacts, Liveness, judge, lease_seconds, pid_alive, reason_text, uptime
from .rates import RateTracker, Reading



class RegistryRecord(Protocol):
    """A record of the runtime's registry reader (``speed_runtime.registry.RegistryRecord``), read
    by its shape: the I/O module is not imported by a pure model."""

    name: str
    entry: RegistryEntry | None
    error: str | None

EXPIRING = "expiring"


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
    reason: str = ""  # why the node is judged stale ("" when it is not), in the console's words
    verdict: Liveness | None = None  # the runtime's verdict the row shows (None: unreadable entry)
    health: str = ""  # the node's latest report of a problem with itself (a health record), if any
    features: tuple[str, ...] = ()  # extensions of the contract it speaks (§9): durable, quota, chunks…
    operators: tuple[str, ...] = ()  # fingerprints of the operators it trusts (the `control` extension)
    rate: float | None = None  # envelopes per second between its last two heartbeats (models/rates.py)
    rates: tuple[float, ...] = ()  # its recent rates, oldest first

    @property
    def durable(self) -> bool:
        return "durable" in self.features

    @property
    def expiring_soon(self) -> bool:
        return self.status != STALE and self.remaining < min(10.0, self.lease_seconds / 3)


def _static(rec: "RegistryRecord") -> dict[str, Any]:
    """The parts of a row that depend on the entry only (cached per record object)."""
    e: RegistryEntry | None = rec.entry
    if e is None:
        return dict(raw=None, counters={})
    counters = e.extra.get("counters")
    return dict(raw=e.to_dict(), counters=visible_data(counters) if isinstance(counters, dict) else {},
                operators=visible_data(trusted_operators(e)), host=visible(e.host), runtime=visible(e.runtime),
                groups=visible_data(e.groups), services=visible_data(e.services), allow=visible_data(e.allow),
                features=visible_data(e.features))


def build_row(rec: "RegistryRecord", now: float, facts: HostFacts | None = None,
              static: dict[str, Any] | None = None, health: str = "", rate: float | None = None,
              rates: tuple[float, ...] = ()) -> NodeRow:
    """One row: the runtime's verdict on the record's entry, now, with this host's facts
    (without facts only the wall-clock rules apply: no pid is judged); ``rate``: its envelope
    rate (left out once it is stale: a dead node's last rate is not its rate)."""
    st = static if static is not None else _static(rec)
    e = rec.entry
    if e is None:  # its name is the file's: anything a member chose
        error = visible(rec.error or "unreadable")
        return NodeRow(name=visible(rec.name), status=STALE, remaining=-1.0, hb_age=None, pid=None, pid_alive=None,
                       host="", runtime="", uptime=None, groups=(), services=(), allow=(), counters={}, node_id="",
                       lease_seconds=0.0, raw=None, error=error, reason=f"unreadable entry: {error}", health=health)
    v = judge(e, now, facts)
    return NodeRow(
        name=e.name, status=v.state, remaining=v.remaining, hb_age=v.age, pid=e.pid,
        pid_alive=pid_alive(v, e, facts), host=st["host"], runtime=st["runtime"], uptime=uptime(v, e, now),
        groups=st["groups"], services=st["services"], allow=st["allow"], counters=st["counters"], node_id=e.id,
        lease_seconds=lease_seconds(e), raw=st["raw"], reason=visible(reason_text(v, e)), verdict=v, health=health,
        features=st["features"], operators=st["operators"],
        rate=None if v.state == STALE else rate, rates=() if v.state == STALE else rates,
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
    # key, label, width: the least each column has (NAME and STATUS stay when the table scrolls
    # right; the first eleven fit 120 columns; where there is room, cut columns widen to fit
    # their cells, then COUNTERS takes what is left)
    ("name", "NAME", 13),
    ("status", "STATUS", 9),
    ("remaining", "LEASE", 7),
    ("hb_age", "HB AGE", 6),
    ("rate", "RATE", 13),
    ("pid", "PID", 7),
    ("host", "HOST", 10),
    ("uptime", "UPTIME", 6),
    ("groups", "FABRICS", 12),
    ("services", "SERVICES", 14),
    ("allow", "ALLOW", 5),
    ("counters", "COUNTERS", 10),
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
    if column == "rate":  # the busiest first, nodes without a rate last
        return lambda r: (r.rate is None, -(r.rate or 0.0), r.name)
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
                    " ".join(row.services), str(row.pid or ""), row.reason, row.health, " ".join(row.features)]).lower()
    return all(part in hay for part in t.split())


@dataclass
class RegistryModel:
    """The current registry as the console sees it."""

    records: list = field(default_factory=list)  # RegistryRecord, as the runtime's reader returned them
    rows: list[NodeRow] = field(default_factory=list)
    sort_column: str = "name"
    sort_reverse: bool = False
    filter_text: str = ""
    fabric: str | None = None  # fabric filter (None: all, "" : ungrouped)
    health: Mapping[str, str] = field(default_factory=dict)  # node → its latest unresolved health problem
    problem: str | None = None  # why the registry directory cannot be read (removed, refused), as shown
    rates: RateTracker = field(default_factory=RateTracker, repr=False)
    _static_cache: dict = field(default_factory=dict, repr=False)
    _by_name: dict | None = field(default=None, repr=False)
    just_died: list[str] = field(default_factory=list, repr=False)  # names the last build first found dead

    def update(self, records: Iterable["RegistryRecord"], now: float, facts: HostFacts | None = None) -> None:
        """A new scan: the rows of the records that changed (the reader returns the same record
        object for an unchanged file) are built again, the others kept as the last refresh made
        them — their countdowns move with the next `refresh`. In an environment of 10,000 nodes
        heartbeating, a scan changes a few hundred records: building every row at every scan
        took the UI thread a quarter of a second each time."""
        self.records = list(records)
        readings = []
        for r in self.records:
            counters = r.entry.extra.get("counters") if r.entry is not None else None
            if isinstance(counters, dict):
                readings.append(Reading(r.name, r.entry.last_heartbeat, r.entry.startup_timestamp, counters))
        self.rates.observe(readings)
        self._build(now, facts, keep=True)

    def refresh(self, now: float, facts: HostFacts | None = None) -> None:
        """Every row as of ``now`` (countdowns, ages, status; health marks and rates)."""
        self._build(now, facts, keep=False)

    def _build(self, now: float, facts: HostFacts | None, keep: bool) -> None:
        cache = self._static_cache
        fresh: dict[int, tuple[Any, dict, NodeRow]] = {}
        rows = []
        health = self.health
        for r in self.records:
            hit = cache.get(id(r))
            if hit is not None and hit[0] is r:
                if keep:
                    fresh[id(r)] = hit
                    rows.append(hit[2])
                    continue
                st = hit[1]
            else:
                st = _static(r)
            row = build_row(r, now, facts, static=st, health=health.get(r.name, ""),
                            rate=self.rates.rate(r.name), rates=self.rates.series(r.name))
            fresh[id(r)] = (r, st, row)
            rows.append(row)
        self._static_cache = fresh
        # a node that exits cleanly removes its entry, then its process ends: a build between the
        # two (the next scan is up to a fifth of a second away) found it "stale, process gone"
        dead = [r for r in rows if r.pid_alive is False and r.status == "stale"]
        before = self.by_name() if dead else {}  # the previous rows, looked up only when needed
        self.just_died = [r.name for r in dead if (was := before.get(r.name)) is not None and was.status != "stale"]
        self.rows = rows
        self._by_name = None

    def forget_removed(self, still_there: Callable[[str], bool]) -> bool:
        """Drop the rows of `just_died` whose entry file is gone (`still_there(name)` False): a
        clean exit, not a death. True when a row was dropped (the next scan agrees)."""
        gone = {name for name in self.just_died if not still_there(name)}
        self.just_died = []
        if not gone:
            return False
        self.records = [r for r in self.records if r.name not in gone]
        self.rows = [r for r in self.rows if r.name not in gone]
        self._by_name = None
        return True

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

    def empty_text(self) -> str:
        """What an empty Leases table says: an empty registry, or how many entries the filter and
        the fabric leave out (Traces says "0 of N" likewise)."""
        if not self.rows:
            return f"no registry entries: {self.problem}" if self.problem else "no registry entries"
        why = [f"the filter \"{visible(self.filter_text)}\""] if self.filter_text else []
        if self.fabric is not None:
            why.append(f"fabric {visible(self.fabric)}" if self.fabric else "the ungrouped nodes")
        return (f"none of {len(self.rows):,} registry entries matches {' and '.join(why) or 'the view'}"
                + (": Esc clears the filter" if self.filter_text else ""))

    def set_sort(self, column: str) -> None:
        if self.sort_column == column:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_column = column
            self.sort_reverse = False


def lock_banner(pid: int | None, seconds: float, problem: str = "") -> str:
    """What the console says about the registry lock ("" when there is nothing to say)."""
    if problem:
        return f"{problem}: nodes cannot register or renew"
    if pid is None:
        return ""
    return (f"registry lock held by pid {pid} for {seconds:.0f} s: nodes cannot register or renew "
            f"(is it stopped? `kill -CONT {pid}`)")
