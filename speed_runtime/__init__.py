"""speed_runtime: a SPEED runtime (Secure Process to Process Encrypted Exchange and Delivery).

Public API only; see docs/ARCHITECTURE.md. This package never imports a UI library.

The names below are loaded on first use (PEP 562), so that importing the pure core
(`speed_runtime.core`) loads nothing else: no threads, no file system, no logging. `__version__`
is the installed distribution's version (pyproject.toml is its one source), read from the package
metadata when first asked: reading it costs tens of milliseconds that no node start should pay.
"""
from __future__ import annotations

import importlib
from typing import Any

DISTRIBUTION = "speedtui"  # the distribution (pyproject.toml) that installs speed_runtime and speedtui

_EXPORTS = {
    "RegistryEntry": ".core.entry", "Key": ".core.keys", "Message": ".core.message", "Service": ".core.services",
    "EnvelopeTrace": ".core.records", "HealthTrace": ".core.records", "LeaseTrace": ".core.records",
    "SpcTrace": ".core.records", "ControlTrace": ".core.records", "ThreatTrace": ".core.records",
    "QuotaExceededError": ".core.quota", "generate_key_file": ".keyfile",
    "load_key": ".keyfile", "Node": ".node", "Operator": ".operator", "OperatorKey": ".core.control",
    "NodeConfig": ".node",
    **dict.fromkeys((
        "AccessDeniedError", "BadEntryError", "CalleeGoneError", "ConfigError", "ControlRefusedError",
        "ControlTimeoutError", "DeliveryError", "DeliveryTimeoutError", "DirectoryError", "EntryTooLargeError",
        "OperatorNotTrustedError",
        "EnvelopeError", "InvalidNameError", "KeyFileError", "LeaseLostError", "NameInUseError", "NodeClosedError",
        "NodeLeavingError", "NodeUnavailableError", "PayloadTooLargeError", "RegistryLockError", "SpcError", "SpeedError"),
        ".core.errors"),
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name == "__version__":
        globals()[name] = _installed_version()
        return globals()[name]
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'speed_runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def _installed_version() -> str:
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
