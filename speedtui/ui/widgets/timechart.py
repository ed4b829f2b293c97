"""A time-series bar chart with a value axis, a time axis and labels, sized to its widget.

    chart = TimeChart(caption="envelopes")
    chart.set_series([(t, value), ...], bucket_seconds=60)

Bars use eighth blocks, so a 6-row plot still shows 48 levels. When there are more buckets than
columns, neighbouring buckets are added up and the caption says the wider bucket; when there are
few, each is at most MAX_BAR_CELLS wide and the axis ends with the data. Times are UTC.
"""
from __future__ import annotations

import datetime as _dt
import math

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

EIGHTHS = " ▁▂▃▄▅▆▇█"
MAX_BAR_CELLS = 3  # a bucket is at most this wide: a few buckets are bars, not blocks across the pane


def compact(v: float) -> str:
    """1234 -> 1.2k, 5_600_000 -> 5.6M; small numbers as they are."""
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= div:
            s = f"{v / div:.1f}".rstrip("0").rstrip(".")
            return f"{s}{unit}"
    return f"{v:.0f}" if float(v).is_integer() else f"{v:.1f}"


def span_text(seconds: int) -> str:
    if seconds % 86400 == 0:
        return f"{seconds // 86400} d"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def _time_label(t: int, with_date: bool) -> str:
    d = _dt.datetime.fromtimestamp(t, _dt.timezone.utc)
    return d.strftime("%m-%d %H:%M" if with_date else "%H:%M")


def chart_lines(points: list[tuple[int, float]], bucket: int, width: int, height: int,
                caption: str, styles: dict[str, Style] | None = None,
                span: tuple[float, float] | None = None) -> list[Text]:
    """The chart as `height` lines of at most `width` cells; the time axis covers `span` (start,
    end) when given, else the points."""
    st = styles or {}
    bar, axis, label = st.get("bar", Style()), st.get("axis", Style()), st.get("label", Style())
    if not points or width < 20 or height < 4:
        return [Text(f"{caption}: no data", style=label)][:max(1, height)]
    first, last = min(t for t, _ in points), max(t for t, _ in points)
    if span is not None and span[0] is not None and span[1] is not None:
        first, last = min(first, int(span[0])), max(last, int(span[1]))
    t0 = first // bucket * bucket
    n = last // bucket - t0 // bucket + 1
    values = [0.0] * n
    for t, v in points:
        values[(t - t0) // bucket] += v
    vmax = max(values)
    ylabels = [compact(vmax), compact(vmax / 2), "0"]
    lw = max(len(s) for s in ylabels)
    plot_w = width - lw - 1
    per = max(1, math.ceil(n / plot_w))                  # buckets added up per column group
    if per > 1:
        values = [sum(values[i:i + per]) for i in range(0, n, per)]
        vmax = max(values)
        ylabels = [compact(vmax), compact(vmax / 2), "0"]
    cw = max(1, min(MAX_BAR_CELLS, plot_w // len(values)))  # columns per (merged) bucket
    plot_h = height - 3
    lines = [Text(f"{caption} per {span_text(bucket * per)} (UTC), peak {compact(vmax)}", style=label)]
    mid_row = plot_h // 2
    for r in range(plot_h):
        row_floor = (plot_h - 1 - r) * 8
        if r == 0:
            head = ylabels[0]
        elif r == mid_row and plot_h >= 4:
            head = ylabels[1]
        else:
            head = ""
        line = Text(head.rjust(lw), style=label)
        line.append("┤" if head else "│", style=axis)
        cells = []
        for v in values:
            level = 0 if vmax <= 0 else v / vmax * plot_h * 8
            if v > 0 and level < 1:
                level = 1                                # a non-zero bucket is never invisible
            fill = max(0, min(8, math.ceil(level - row_floor) if level > row_floor else 0))
            cells.append(EIGHTHS[fill] * cw)
        line.append("".join(cells), style=bar)
        lines.append(line)
    used = cw * len(values)
    with_date = (t0 // 86400) != ((t0 + (n - 1) * bucket) // 86400)  # the last bucket's start, not its end
    lab_len = len(_time_label(t0, with_date))
    every = max(1, math.ceil((lab_len + 2) / cw))        # buckets between time labels
    ticks = list(range(0, len(values), every))
    axis_line = [ylabels[2].rjust(lw), "└"] + ["─"] * used
    label_line = [" "] * (lw + 1 + used + lab_len)
    for i in ticks:
        pos = lw + 1 + i * cw
        axis_line[2 + i * cw] = "┬"
        text = _time_label(t0 + i * per * bucket, with_date)
        if pos + len(text) > width:
            break
        label_line[pos:pos + len(text)] = list(text)
    lines.append(Text("".join(axis_line)[:width], style=axis))
    lines.append(Text("".join(label_line).rstrip()[:width], style=label))
    return lines[:height]


class TimeChart(Widget):
    DEFAULT_CSS = """
    TimeChart { height: 10; }
    TimeChart > .timechart--bar { color: $accent; }
    TimeChart > .timechart--axis { color: $foreground-muted; }
    TimeChart > .timechart--label { color: $foreground-muted; }
    """
    COMPONENT_CLASSES = {"timechart--bar", "timechart--axis", "timechart--label"}

    def __init__(self, caption: str = "value", **kwargs) -> None:
        super().__init__(**kwargs)
        self.caption = caption
        self.points: list[tuple[int, float]] = []
        self.bucket = 60
        self.span: tuple[float, float] | None = None

    def set_series(self, points: list[tuple[int, float]], bucket_seconds: int,
                   span: tuple[float, float] | None = None) -> None:
        """points: (bucket start, value); span: the (start, end) the time axis covers."""
        self.points = [(int(t), float(v)) for t, v in points]
        self.bucket = max(1, int(bucket_seconds))
        self.span = span
        self.refresh()

    def render(self) -> Text:
        styles = {k: self.get_component_rich_style(f"timechart--{k}") for k in ("bar", "axis", "label")}
        lines = chart_lines(self.points, self.bucket, self.size.width, self.size.height, self.caption,
                            styles, self.span)
        return Text("\n").join(lines)
