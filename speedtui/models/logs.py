"""The logs of the nodes the console started: per node a ring of its last lines (stdout, stderr of
a `speed node` process; health and lease lines of every node of the console), kept after the node
ends with how it ended. Pure: lines and times in; what a node wrote is data (``visible``), cut to
a bounded length, so the memory a chatty node can take is bounded by the ring's size."""

from __future__ import annotations

import signal
from collections import deque
from dataclasses import dataclass, field
from itertools import count

from speed_runtime.core.visible import visible

LINES_PER_NODE = 2000  # the ring of each node's log
LINE_CHARS = 1000  # a longer line is cut (and says so)
LOGS_KEPT = 32  # logs of nodes that ended are dropped, oldest first, beyond this many logs

STREAMS = ("stdout", "stderr", "health", "console")  # console: what the console itself notes (started, ended)


@dataclass(frozen=True)
class LogLine:
    seq: int  # the order lines arrived in, across nodes (the "all nodes" view merges by it)
    ts: float
    node: str
    stream: str
    text: str


@dataclass
class NodeLog:
    name: str
    kind: str  # "process" | "in-process"
    pid: int | None = None
    lines: deque[LogLine] = field(default_factory=lambda: deque(maxlen=LINES_PER_NODE))
    dropped: int = 0  # lines the ring let go
    ended: str | None = None  # how it ended ("exited with status 0"), None while it runs

    @property
    def state(self) -> str:
        what = f"{self.kind}, pid {self.pid}" if self.pid else self.kind
        return f"{self.name} ({what}): {self.ended or 'running'}"


def exit_sentence(returncode: int | None) -> str:
    """How a process ended, from ``Popen.returncode`` (negative: the signal that ended it)."""
    if returncode is None:
        return "ended"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"ended by {name} (signal {-returncode})"
    return f"exited with status {returncode}"


def clean(text: str) -> str:
    """A line as it may be shown: no control character (``visible``), at most ``LINE_CHARS``."""
    cut = len(text) > LINE_CHARS
    shown = visible(text[:LINE_CHARS])[:LINE_CHARS]
    return shown + " …(cut)" if cut else shown


class LogBook:
    """The logs by node name. A node started again under the same name continues its log (the
    console notes the new start)."""

    def __init__(self, lines_per_node: int = LINES_PER_NODE, logs_kept: int = LOGS_KEPT) -> None:
        self._logs: dict[str, NodeLog] = {}
        self._seq = count()
        self.lines_per_node = lines_per_node
        self.logs_kept = logs_kept
        self.version = 0  # bumped with every change (the pane redraws when it moved)

    def open(self, name: str, kind: str, ts: float, pid: int | None = None, note: str = "") -> None:
        log = self._logs.get(name)
        if log is None:
            self._drop_ended()
            log = self._logs[name] = NodeLog(name, kind, pid, deque(maxlen=self.lines_per_node))
        log.kind, log.pid, log.ended = kind, pid, None
        self.add(name, "console", note or (f"started ({kind}, pid {pid})" if pid else f"started ({kind})"), ts)

    def _drop_ended(self) -> None:
        ended = [n for n, log in self._logs.items() if log.ended is not None]
        while len(self._logs) >= self.logs_kept and ended:
            del self._logs[ended.pop(0)]

    def add(self, name: str, stream: str, text: str, ts: float) -> None:
        log = self._logs.get(name)
        if log is None:
            return  # not a node of ours (or its log was dropped)
        if len(log.lines) == log.lines.maxlen:
            log.dropped += 1
        log.lines.append(LogLine(next(self._seq), ts, name, stream, clean(text)))
        self.version += 1

    def end(self, name: str, how: str, ts: float) -> None:
        log = self._logs.get(name)
        if log is None or log.ended is not None:
            return
        log.ended = how
        self.add(name, "console", how, ts)

    def names(self) -> list[str]:
        return list(self._logs)

    def states(self) -> list[str]:
        return [log.state for log in self._logs.values()]

    def summary(self, name: str | None = None) -> str:
        """One line: the node's state, or for all nodes how many run and how each other one ended."""
        if name is not None:
            log = self._logs.get(name)
            return log.state if log is not None else ""
        running = sum(1 for log in self._logs.values() if log.ended is None)
        ended = [f"{log.name} {log.ended}" for log in self._logs.values() if log.ended is not None]
        nodes = "node" if len(self._logs) == 1 else "nodes"
        return f"{len(self._logs)} {nodes}, {running} running" + (f"; {'; '.join(ended)}" if ended else "")

    def has(self, name: str) -> bool:
        return name in self._logs

    def lines(self, name: str | None = None) -> list[LogLine]:
        """One node's lines, or every node's in the order they arrived (``name`` None)."""
        if name is not None:
            log = self._logs.get(name)
            return list(log.lines) if log is not None else []
        merged = [line for log in self._logs.values() for line in log.lines]
        merged.sort(key=lambda line: line.seq)
        return merged

    def last(self, name: str, stream: str) -> str:
        """The last line ``name`` wrote on ``stream`` ("" when none): a failure's sentence."""
        log = self._logs.get(name)
        return next((line.text for line in reversed(log.lines) if line.stream == stream), "") if log else ""
