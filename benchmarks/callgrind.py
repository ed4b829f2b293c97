"""Instructions between marks, counted by valgrind's callgrind: the same count whatever else the
machine is doing, where wall-clock figures on a shared machine are not.

A benchmark run under `run()` calls `mark(name)` at each point of interest; each mark makes
callgrind dump the instructions its process executed (all threads) since the process's previous
mark. `dumps()` reads them back, per process, in order. Outside callgrind `marker()` is None and
nothing is counted.

The marks go through a tiny C helper (valgrind's client requests are inline machine code, which
Python cannot issue by itself), compiled here with the system's `cc` against
`<valgrind/callgrind.h>`.
"""
from __future__ import annotations

import ctypes
import glob
import os
import re
import shutil
import subprocess
import sys
from typing import Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = "SPEED_BENCH_CALLGRIND_MARKS"  # path of the compiled helper, set for the processes of a run
_HELPER = r"""
#include <valgrind/callgrind.h>
void speed_mark(const char *name) { CALLGRIND_DUMP_STATS_AT(name); }
"""


def available() -> str | None:
    """None when callgrind runs can be made here, else one sentence saying what is missing."""
    if shutil.which("valgrind") is None:
        return "valgrind is not installed (apt-get install valgrind)"
    if shutil.which("cc") is None:
        return "no C compiler (cc) to build the mark helper"
    if not os.path.exists("/usr/include/valgrind/callgrind.h"):
        return "valgrind's headers are missing (<valgrind/callgrind.h>)"
    return None


def require() -> None:
    """Ends the program with one sentence (exit status 2) where callgrind runs cannot be made."""
    missing = available()
    if missing:
        print(f"cannot count instructions: {missing}.", file=sys.stderr)
        raise SystemExit(2)


def build_helper(directory: str) -> str:
    source = os.path.join(directory, "marks.c")
    library = os.path.join(directory, "marks.so")
    with open(source, "w", encoding="ascii") as f:
        f.write(_HELPER)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", library, source], check=True)
    return library


def marker() -> Callable[[str], None] | None:
    """`mark(name)` in a process of a callgrind run, else None."""
    path = os.environ.get(ENV)
    if not path:
        return None
    dump = ctypes.CDLL(path).speed_mark
    dump.argtypes = [ctypes.c_char_p]
    dump.restype = None
    return lambda name: dump(name.encode())


def run(argv: list[str], directory: str, env: dict[str, str] | None = None, separate_threads: bool = False) -> None:
    """Run `python argv...` and every Python process it starts under callgrind, marks enabled;
    the counts land in `directory`. With `separate_threads` each thread counts apart, and a mark
    dumps only its own thread's count."""
    helper = build_helper(directory)
    command = ["valgrind", "--tool=callgrind", "--trace-children=yes", "--dump-instr=no", "--dump-line=no",
               f"--separate-threads={'yes' if separate_threads else 'no'}", f"--callgrind-out-file={directory}/cg.%p",
               sys.executable, *argv]
    path = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO,
                   env={**os.environ, **(env or {}), ENV: helper, "PYTHONHASHSEED": "0", "PYTHONPATH": path})


_DESC = re.compile(r"^desc: Trigger: Client Request: (.*)$", re.M)
_TOTALS = re.compile(r"^totals: (\d+)$", re.M)
_NAME = re.compile(r"cg\.(\d+)\.(\d+)(?:-(\d+))?$")  # cg.<pid>.<dump>[-<thread>]


def dumps(directory: str) -> dict[tuple[int, int], list[tuple[str, int]]]:
    """{(pid, thread): [(mark, instructions since that thread's (or, threads not separated, that
    process's: thread 1) previous mark), ...]} in order."""
    out: dict[tuple[int, int], list[tuple[int, str, int]]] = {}
    for path in glob.glob(os.path.join(directory, "cg.*.*")):
        found = _NAME.search(os.path.basename(path))
        if found is None:
            continue
        pid, number, thread = int(found[1]), int(found[2]), int(found[3] or 1)
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        desc, totals = _DESC.search(text), _TOTALS.search(text)
        if desc and totals:
            out.setdefault((pid, thread), []).append((number, desc.group(1), int(totals.group(1))))
    return {key: [(name, count) for _, name, count in sorted(marks)] for key, marks in out.items()}
