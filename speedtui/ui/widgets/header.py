"""Header: directory, key fingerprint and operator key fingerprint (never a key), node counts,
envelope-rate sparkline."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Sparkline, Static

MIN_DIR_CELLS = 12  # below this a shortened directory says little: only a fabric filter or a pause goes lower
MIN_DIR_CELLS_SQUEEZED = 6


@dataclass(frozen=True)
class HeaderInfo:
    dir_label: str
    fingerprint: str
    counts: tuple[tuple[str, int], ...]  # (status, count), sorted
    demo: bool = False
    readonly: bool = False
    fabric: str | None = None
    paused: bool = False
    operator: str | None = None  # the operator key's fingerprint, if one is loaded


def shorten_path(path: str, cells: int) -> str:
    """`path` in at most `cells` cells, keeping its end (the part that tells environments apart)."""
    if len(path) <= cells:
        return path
    return "…" + path[len(path) - max(cells, 2) + 1:]


def header_text(info: HeaderInfo, width: int) -> Text:
    """The header's left part in `width` cells: the counts lose their words first (and "operator"
    becomes "op"), then the directory keeps only its end, then the operator key's fingerprint its
    first 8 digits (`16ccdefa…`), so that a fabric filter and a pause are still read whole; the key's
    fingerprint and the badges always stay."""
    counts = dict(info.counts)
    for wordy in (True, False):
        t = _compose(info, counts, wordy, info.dir_label)
        if t.cell_len <= width:
            return t
    spare = width - (t.cell_len - len(info.dir_label))
    floor = _dir_floor(info)
    t = _compose(info, counts, False, shorten_path(info.dir_label, max(spare, floor)))
    if t.cell_len <= width or not info.operator:
        return t
    return _compose(info, counts, False, shorten_path(info.dir_label, max(spare, floor)), short_operator=True)


def whole_cells(info: HeaderInfo) -> int:
    """The cells the header's left part needs to show every part whole but the directory."""
    return _compose(info, dict(info.counts), False, shorten_path(info.dir_label, _dir_floor(info))).cell_len


def _dir_floor(info: HeaderInfo) -> int:
    return MIN_DIR_CELLS_SQUEEZED if info.fabric is not None or info.paused or info.operator else MIN_DIR_CELLS


def _compose(info: HeaderInfo, counts: dict[str, int], wordy: bool, dir_label: str,
             short_operator: bool = False) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(" SPEED ", style="bold reverse")
    if info.demo:
        t.append(" DEMO ", style="bold black on yellow")
    if info.readonly:
        t.append(" READONLY ", style="bold black on cyan")
    t.append(f" {dir_label} ", style="bold")
    for status, mark, style in (("online", "●", "green"), ("leaving", "◐", "yellow"), ("stale", "○", "red")):
        n = counts.get(status, 0)
        t.append(f" {mark} {n} {status}" if wordy else f" {mark}{n}", style=style)
    t.append("  key ", style="dim")
    t.append(info.fingerprint, style="bold")
    if info.operator:
        t.append("  operator " if wordy else "  op ", style="dim")
        t.append(info.operator[:8] + "…" if short_operator else info.operator, style="bold")
    if info.fabric is not None:
        t.append(f"  fabric: {info.fabric or '(ungrouped)'}", style="bold magenta")
    if info.paused:
        t.append("  TRACES PAUSED", style="bold red")
    return t


class SpeedHeader(Horizontal):
    DEFAULT_CSS = """
    SpeedHeader { height: 1; dock: top; background: $panel; }
    SpeedHeader #hdr-info { width: 1fr; height: 1; }
    SpeedHeader #hdr-rate { width: 13; height: 1; content-align: right middle; }
    SpeedHeader Sparkline { width: 24; height: 1; }
    SpeedHeader.-narrow Sparkline { display: none; }
    """
    NARROW = 110  # below this many columns the sparkline gives its cells to the fingerprint
    RATE_CELLS, SPARK_CELLS = 13, 24  # as in DEFAULT_CSS

    def __init__(self, dir_label: str, fingerprint: str, readonly: bool, demo: bool,
                 operator: str | None = None) -> None:
        super().__init__()
        self.operator = operator
        self.dir_label = dir_label
        self.fingerprint = fingerprint
        self.readonly = readonly
        self.demo = demo
        self._info_sig: tuple | None = None
        self._series_sig: tuple | None = None
        self._latest: HeaderInfo | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="hdr-info")
        yield Static(id="hdr-rate")
        yield Sparkline([0.0] * 24, id="hdr-spark", summary_function=max)

    def on_mount(self) -> None:
        self._info = self.query_one("#hdr-info", Static)
        self._rate = self.query_one("#hdr-rate", Static)
        self._spark = self.query_one("#hdr-spark", Sparkline)

    def update_info(self, counts: dict[str, int], rate_series: list[float], paused: bool = False,
                    fabric: str | None = None) -> None:
        if not hasattr(self, "_info"):
            return
        self._latest = HeaderInfo(self.dir_label, self.fingerprint, tuple(sorted(counts.items())), self.demo,
                                  self.readonly, fabric, paused, self.operator)
        self._fit_sparkline()
        self._paint_info()
        # the current second is still filling: only complete seconds are shown, so the rate
        # repaints once a second under traffic instead of on every drain (10 a second)
        complete = rate_series[:-1] if len(rate_series) >= 2 else rate_series
        series = tuple(complete[-24:])
        if series == self._series_sig:
            return
        self._series_sig = series
        shown = complete[-1] if complete else 0
        # one line of fixed size: a repaint, not a relayout of the whole screen (a full reflow
        # took 20-60 ms under load and ran on every header change)
        self._rate.update(Text(f"{shown:,.0f} env/s ", style="dim"), layout=False)
        self._spark.data = list(series) or [0.0]

    def _paint_info(self) -> None:
        width = self._info.size.width
        if self._latest is None or width <= 0:
            return
        sig = (self._latest, width)
        if sig == self._info_sig:
            return  # nothing changed: no repaint
        self._info_sig = sig
        self._info.update(header_text(self._latest, width), layout=False)

    def _fit_sparkline(self) -> None:
        """The sparkline gives its cells to the text on a narrow terminal, and whenever the text
        would not fit whole beside it (an operator key and a fabric filter at 120 columns)."""
        beside = self.size.width - self.RATE_CELLS - self.SPARK_CELLS
        narrow = self.size.width < self.NARROW or (self._latest is not None and whole_cells(self._latest) > beside)
        if narrow != self.has_class("-narrow"):
            self.set_class(narrow, "-narrow")
            self.call_after_refresh(self._paint_info)  # the info part's new width is known after layout

    def on_resize(self) -> None:
        self._fit_sparkline()
        self.call_after_refresh(self._paint_info)  # the info part's new width is known after layout
