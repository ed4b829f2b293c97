"""Header: directory, key fingerprint (never the key), node counts, envelope-rate sparkline."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Sparkline, Static


class SpeedHeader(Horizontal):
    DEFAULT_CSS = """
    SpeedHeader { height: 1; dock: top; background: $panel; }
    SpeedHeader #hdr-info { width: 1fr; height: 1; }
    SpeedHeader #hdr-rate { width: 14; height: 1; content-align: right middle; }
    SpeedHeader Sparkline { width: 30; height: 1; }
    """

    def __init__(self, dir_label: str, fingerprint: str, readonly: bool, demo: bool) -> None:
        super().__init__()
        self.dir_label = dir_label
        self.fingerprint = fingerprint
        self.readonly = readonly
        self.demo = demo

    def compose(self) -> ComposeResult:
        yield Static(id="hdr-info")
        yield Static(id="hdr-rate")
        yield Sparkline([0.0] * 30, id="hdr-spark", summary_function=max)

    def on_mount(self) -> None:
        self._info = self.query_one("#hdr-info", Static)
        self._rate = self.query_one("#hdr-rate", Static)
        self._spark = self.query_one("#hdr-spark", Sparkline)

    def update_info(self, counts: dict[str, int], rate_series: list[float], paused: bool = False,
                    fabric: str | None = None) -> None:
        # the current second is still filling: only complete seconds are shown, so the header
        # repaints once a second under traffic instead of on every drain (10 a second)
        complete = rate_series[:-1] if len(rate_series) >= 2 else rate_series
        sig = (tuple(sorted(counts.items())), tuple(complete[-30:]), paused, fabric)
        if sig == getattr(self, "_sig", None):
            return  # nothing changed: no repaint, no relayout
        self._sig = sig
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(" SPEED ", style="bold reverse")
        if self.demo:
            t.append(" DEMO ", style="bold black on yellow")
        if self.readonly:
            t.append(" READONLY ", style="bold black on cyan")
        t.append(f" ● {counts.get('online', 0)} online", style="green")
        t.append(f" ◐ {counts.get('leaving', 0)} leaving", style="yellow")
        t.append(f" ○ {counts.get('stale', 0)} stale ", style="red")
        t.append(" key ", style="dim")
        t.append(self.fingerprint, style="bold")
        t.append(f"  {self.dir_label}", style="bold")
        if fabric is not None:
            t.append(f"  fabric: {fabric or '(ungrouped)'}", style="bold magenta")
        if paused:
            t.append("  TRACES PAUSED", style="bold red")
        if not hasattr(self, "_info"):
            return
        # both are one line of fixed size: a repaint, not a relayout of the whole screen (a full
        # reflow took 20-60 ms under load and ran on every header change)
        self._info.update(t, layout=False)
        shown = complete[-1] if complete else 0
        self._rate.update(Text(f"{shown:,.0f} env/s ", style="dim"), layout=False)
        self._spark.data = complete[-30:] or [0.0]
