"""Node names (wire contract §2)."""
from __future__ import annotations

import re

from .errors import InvalidNameError

NAME_RULE = "^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$"
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}")
RESERVED_NAMES = frozenset({"speed_registry", "speed_traces"})


def is_valid_name(name: object) -> bool:
    return isinstance(name, str) and _NAME.fullmatch(name) is not None and name not in RESERVED_NAMES


def validate_name(name: object) -> str:
    """Return `name` if it is a usable node name, else raise InvalidNameError quoting the rule."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise InvalidNameError(
            f"invalid node name {str(name)[:80]!r}: a name must match {NAME_RULE} "
            "(letters, digits, '_' and '-', not starting with '-', at most 64 characters)"
        )
    if name in RESERVED_NAMES:
        raise InvalidNameError(f"invalid node name {name!r}: it is reserved for the runtime")
    return name
