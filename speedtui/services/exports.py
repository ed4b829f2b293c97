"""Exports the operator asks for (filtered traces, the access matrix, a lease history): new files
(mode 0600) in the environment's own data folder, never overwriting one."""

from __future__ import annotations

import os
import time
from pathlib import Path


def write_export(folder: Path, kind: str, suffix: str, lines: list[str], now: float) -> Path:
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in kind)[:60] or "export"
    for n in range(1000):
        path = folder / f"{safe}-{stamp}{'' if n == 0 else f'-{n}'}.{suffix}"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for line in lines:
                fh.write(line + "\n")
        return path
    raise OSError(f"too many exports named {safe}-{stamp} in {folder}")
