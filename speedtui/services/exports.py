"""Exports the operator asks for (filtered traces, the access matrix, a lease history): new files
(mode 0600) in the environment's own data folder, never overwriting one. What members wrote is
data there too (principle (f)): no control character is written (``core.visible``), and no CSV
cell is a formula for the spreadsheet that opens it."""

from __future__ import annotations

import csv
import io
import os
import time
from pathlib import Path
from typing import Iterable

from speed_runtime.core.visible import visible, visible_lines

# a spreadsheet takes a cell starting with one of these for a formula (or a tab or CR before one)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> str:
    """``value`` as a CSV cell a spreadsheet shows as text: its control characters written out, and
    a leading ``'`` where it would otherwise start a formula (OWASP's advice for CSV injection)."""
    text = visible(str(value))
    return "'" + text if text.startswith(FORMULA_START) else text


def csv_lines(rows: Iterable[Iterable[object]]) -> list[str]:
    """``rows`` as CSV lines, every cell through ``csv_cell``."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([csv_cell(c) for c in row] for row in rows)
    return buf.getvalue().splitlines()


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
            for line in lines:  # each line as its producer made it, with nothing that acts on a terminal
                fh.write(visible_lines(line) + "\n")
        return path
    raise OSError(f"too many exports named {safe}-{stamp} in {folder}")
