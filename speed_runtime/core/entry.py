"""Registry entries (wire contract §4): the model, and its JSON form with the validation every
reader applies. Pure. Liveness is judged in `core.liveness`."""
from __future__ import annotations

import json
import math
import uuid
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .errors import BadEntryError
from .names import is_valid_name

PROTOCOL = 1
DEFAULT_LEASE_SECONDS = 30.0
DEFAULT_HEARTBEAT_SECONDS = 5.0
MAX_ENTRY_BYTES = 64 * 1024

_KNOWN = ("name", "id", "pid", "host", "status", "startupTimestamp", "lastHeartbeat", "leaseSeconds",
          "heartbeatSeconds", "protocol", "groups", "allow", "services", "runtime", "bootId",
          "bootTimeHeartbeat", "features")


@dataclass(frozen=True)
class RegistryEntry:
    name: str
    id: str
    last_heartbeat: float
    pid: int = 0
    host: str = ""
    status: str = "online"
    startup_timestamp: float = 0.0
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS
    protocol: int = PROTOCOL
    groups: tuple[str, ...] = ()
    allow: tuple[str, ...] = ()
    services: tuple[str, ...] = ()
    runtime: str = ""
    boot_id: str | None = None
    boot_time_heartbeat: float | None = None
    features: tuple[str, ...] = ()  # contract §9: extensions this node speaks
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @cached_property
    def id_bytes(self) -> bytes:
        return uuid.UUID(self.id).bytes

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        out.update({
            "name": self.name, "id": self.id, "pid": self.pid, "host": self.host, "status": self.status,
            "startupTimestamp": self.startup_timestamp, "lastHeartbeat": self.last_heartbeat,
            "leaseSeconds": self.lease_seconds, "heartbeatSeconds": self.heartbeat_seconds,
            "protocol": self.protocol, "groups": list(self.groups), "allow": list(self.allow),
            "services": list(self.services), "runtime": self.runtime,
        })
        if self.boot_id is not None:
            out["bootId"] = self.boot_id
        if self.boot_time_heartbeat is not None:
            out["bootTimeHeartbeat"] = self.boot_time_heartbeat
        if self.features:
            out["features"] = list(self.features)
        return out

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=1, allow_nan=False).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes) -> "RegistryEntry":
        if len(data) > MAX_ENTRY_BYTES:
            raise BadEntryError(f"registry entry of {len(data)} bytes is larger than {MAX_ENTRY_BYTES}")
        try:
            obj = json_loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise BadEntryError("registry entry is not UTF-8 JSON") from None
        return cls.from_dict(obj)

    @classmethod
    def from_dict(cls, obj: Any) -> "RegistryEntry":
        if not isinstance(obj, dict):
            raise BadEntryError("registry entry is not a JSON object")
        name, ident, beat = obj.get("name"), obj.get("id"), obj.get("lastHeartbeat")
        if not is_valid_name(name):
            raise BadEntryError("registry entry lacks a valid 'name'")
        try:
            ident = str(uuid.UUID(str(ident)))
        except ValueError:
            raise BadEntryError(f"registry entry {name} lacks a valid 'id'") from None
        if not _finite(beat):
            raise BadEntryError(f"registry entry {name} lacks a numeric 'lastHeartbeat'")
        return cls(
            name=name, id=ident, last_heartbeat=float(beat),
            pid=_int(obj.get("pid"), 0), host=_str(obj.get("host"), ""),
            status=_str(obj.get("status"), "online"),
            startup_timestamp=_num(obj.get("startupTimestamp"), 0.0),
            lease_seconds=_num(obj.get("leaseSeconds"), DEFAULT_LEASE_SECONDS),
            heartbeat_seconds=_num(obj.get("heartbeatSeconds"), DEFAULT_HEARTBEAT_SECONDS),
            protocol=_int(obj.get("protocol"), PROTOCOL),
            groups=_names(obj.get("groups")), allow=_names(obj.get("allow")),
            services=_names(obj.get("services")), runtime=_str(obj.get("runtime"), ""),
            boot_id=obj.get("bootId") if isinstance(obj.get("bootId"), str) else None,
            boot_time_heartbeat=float(obj["bootTimeHeartbeat"]) if _finite(obj.get("bootTimeHeartbeat")) else None,
            features=_names(obj.get("features")),
            extra={k: v for k, v in obj.items() if k not in _KNOWN},
        )


_INF = float("inf")


def long_int(text: str) -> int | float:
    """json's `parse_int` that never raises: an integer of more digits than Python converts
    (`sys.get_int_max_str_digits()`, 4,300) is far beyond a double, and reads as ±infinity, as
    `1e400` does: every reader of a number then takes it as too large (an entry's field as missing,
    docs/PROTOCOL.md §9 "Numbers"). Converting it exactly would cost time quadratic in its length."""
    try:
        return int(text)
    except ValueError:
        return -_INF if text.startswith("-") else _INF


def json_loads(text: str | bytes, **options: Any) -> Any:
    """json.loads(text, **options), except that a too long integer is ±infinity (`long_int`), not a
    ValueError that callers would report as text that is not JSON. Such a text is parsed twice:
    the usual one pays nothing."""
    try:
        return json.loads(text, **options)
    except json.JSONDecodeError:
        raise
    except ValueError:  # an integer beyond int()'s limit of digits
        return json.loads(text, parse_int=long_int, **options)


def entry_number(v: Any) -> float | None:
    """The one rule for a number read from a registry entry (docs/PROTOCOL.md §9 "Numbers"): a JSON
    number is its value, not its spelling; one beyond the range of a double (`1e400`, an integer of
    400 digits) counts as missing, as do booleans, strings and null."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    try:
        value = float(v)
    except OverflowError:  # a JSON integer too large for a double
        return None
    return value if math.isfinite(value) else None


def entry_integer(v: Any) -> int | None:
    """An entry's number with an integral value (`64`, `64.0` and `6.4e1` alike), else None."""
    value = entry_number(v)
    if value is None or value != math.floor(value):
        return None
    return v if isinstance(v, int) else int(value)


def _finite(v: Any) -> bool:
    return entry_number(v) is not None


def _num(v: Any, default: float) -> float:
    value = entry_number(v)
    return default if value is None else value


def _int(v: Any, default: int) -> int:
    value = entry_integer(v)
    return default if value is None else value


def _str(v: Any, default: str) -> str:
    return v if isinstance(v, str) else default


def _names(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list):
        return ()
    return tuple(x for x in v if isinstance(x, str))
