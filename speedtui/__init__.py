"""speedtui: the Textual operations console for SPEED environments. `__version__` is the installed
distribution's version, as `speed_runtime.__version__` (one distribution installs both)."""
from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "__version__":
        import speed_runtime

        return speed_runtime.__version__
    raise AttributeError(f"module 'speedtui' has no attribute {name!r}")
