"""The console's operator key (the `control` extension, README "## Operators"): which file, and
one sentence when it cannot be used.  The key itself is never shown: only its fingerprint.

Order: ``speedtui --operator-key PATH``, else ``"operator_key"`` in the console's config file,
else the runtime's default operator key file (``$SPEED_OPERATOR_KEY``, else
``~/.config/speed/operator.key``) when it exists."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from speed_runtime.control import OperatorKey, default_operator_key_path, load_operator_key
from speed_runtime.core.errors import SpeedError


@dataclass(frozen=True)
class OperatorChoice:
    """The operator key the console acts with (None: none), its file, and why it is missing."""

    key: OperatorKey | None = None
    path: Path | None = None
    problem: str | None = None  # one sentence when a key was named but cannot be used

    @property
    def fingerprint(self) -> str | None:
        return self.key.fingerprint if self.key is not None else None

    def __repr__(self) -> str:  # never the key
        return f"OperatorChoice(path={str(self.path)!r}, fingerprint={self.fingerprint!r})"


def resolve_operator_key(cli_path: str | os.PathLike | None = None,
                         config_path: str | os.PathLike | None = None) -> OperatorChoice:
    """The operator key named on the command line, else in the config file, else the default
    file if present; a missing or bad file is one sentence in ``problem`` (the console runs on)."""
    named = cli_path if cli_path is not None else config_path
    if named is not None:
        path = Path(os.path.expanduser(os.fspath(named)))
    else:
        path = Path(default_operator_key_path())
        if not path.exists() and not path.is_symlink():
            return OperatorChoice()
    try:
        key = load_operator_key(path)
    except SpeedError as exc:  # the runtime's sentence names the file and the fix, never the key
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "unreadable"
        return OperatorChoice(path=path, problem=f"operator key not loaded: {first}")
    except OSError as exc:
        return OperatorChoice(path=path, problem=f"operator key not loaded: {path}: {exc.strerror or exc}")
    return OperatorChoice(key=key, path=path)

