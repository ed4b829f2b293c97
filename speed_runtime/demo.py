"""The built-in demo services of wire contract §6."""
from __future__ import annotations

import math
import time
from typing import Any, Callable

from .core.errors import SpcError

MAX_SLEEP_SECONDS = 3600.0


def echo(arguments: dict) -> Any:
    return arguments


def _number(arguments: dict, field: str) -> float:
    value = arguments.get(field)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpcError("INVALID_ARGUMENTS", f"{field!r} must be a finite number")
    return value


def calculate_tax(arguments: dict) -> Any:
    return {"tax": _number(arguments, "amount") * 0.18}


def sleep(arguments: dict) -> Any:
    seconds = _number(arguments, "seconds")
    if not 0 <= seconds <= MAX_SLEEP_SECONDS:
        raise SpcError("INVALID_ARGUMENTS", f"'seconds' must be between 0 and {MAX_SLEEP_SECONDS:g}")
    time.sleep(seconds)
    return {"slept": seconds}


def fail(arguments: dict) -> Any:
    raise RuntimeError("the demo service 'fail' always fails")


DEMO_SERVICES: dict[str, Callable[[dict], Any]] = {
    "echo": echo,
    "calculateTax": calculate_tax,
    "sleep": sleep,
    "fail": fail,
}
