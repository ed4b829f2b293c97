"""Analytics view: runs the trace pipeline of this environment (ROOT) in the analytics child
process (speedtui/pipeline/worker.py: a client of a configured or running Spark Connect server, else
one embedded JVM, reused, kept warm while the view is open, freed when idle, its output in a log
file), with progress, elapsed time and an estimate, and shows the environment's summary.json."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from speed_runtime.core.visible import visible, visible_data
from speed_runtime.fsutil import TRACES_DIR
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Button, ProgressBar, Static

from ..messages import PipelineFinished, PipelineProgress
from ..widgets.timechart import TimeChart
from .. import keymap


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v:.1f}"


def bar(n: float, top: float, width: int = 24) -> Text:
    filled = 0 if top <= 0 else max(1 if n else 0, round(width * n / top))
    return Text("█" * filled, style="red") + Text(f" {n:g}")


TOTALS = {"records": "records", "envelopes_sent": "envelopes sent", "bytes_sent": "bytes sent",
          "accepted": "accepted", "rejected": "rejected", "spc_calls": "SPC calls", "spc_success_rate": "SPC success"}


def _table(title: str) -> Table:
    return Table(title=Text(title, style="bold"), title_justify="left", box=None, padding=(0, 1))


def _add_row(t: Table, *cells: Any) -> None:
    """A row of Text cells: a str cell of a rich table is markup, and the report's names and reasons
    come from the journals members write."""
    t.add_row(*(Text(c) if isinstance(c, str) else c for c in cells))


def _column(t: Table, header: str, left: bool = False, name: bool = False) -> None:
    """A header is never cut (its width is the least the column gets); a cell too wide for a
    narrow terminal wraps onto a second line instead of losing its end to an ellipsis. A name
    (node, service, reason) is never broken mid-word: the other columns give way first."""
    t.add_column(header, justify="left" if left or name else "right", min_width=len(header), overflow="fold",
                 no_wrap=name)


def summary_renderable(s: dict) -> Group:
    parts: list = []
    tr = s.get("time_range") or {}
    head = Text()
    head.append("report ", style="bold")
    head.append(f"generated {s.get('generated_at', '?')} · window {tr.get('start_iso')} → {tr.get('end_iso')}",
                style="dim")
    if s.get("message"):
        head.append(f"\n{s['message']}", style="yellow")
    from ...pipeline.summary import skipped_line, unchecked_line  # loaded when a report is shown, not before
    for line in (skipped_line(s), unchecked_line(s)):
        if line:
            head.append(f"\n{line}", style="yellow")
    parts.append(head)
    totals = s.get("totals") or {}
    keys = [k for k in TOTALS if k in totals] or list(totals)[:8]
    line = Text()
    line.append("totals  ", style="bold")
    for i, k in enumerate(keys):  # one line that wraps between figures: nothing is cut at 80 columns
        value = _pct(totals[k]) if k.endswith("rate") else f"{totals[k]:,}" if isinstance(totals[k], int) \
            else str(totals[k])
        label = TOTALS.get(k, k.replace("_", " ")).replace(" ", "\u00a0")  # a label is never split
        line.append((" · " if i else "") + f"{label} ")
        line.append(value, style="bold")
    parts.append(line)
    cov = s.get("coverage")
    if cov:
        parts.append(coverage_line(cov))
    if s.get("spc"):
        t = _table("SPC by target and service (latency in ms)")
        for c in ("target", "service", "calls", "ok", "err", "none", "succ", "p50", "p95", "p99", "codes"):
            _column(t, c, left=c == "codes", name=c in ("target", "service"))
        for r in s["spc"][:15]:
            _add_row(t, r["target"], r["service"], str(r["calls"]), str(r["successes"]), str(r["errors"]),
                     str(r["no_response"]), _pct(r["success_rate"]), _ms(r["p50_ms"]), _ms(r["p95_ms"]),
                     _ms(r["p99_ms"]), ", ".join(f"{k}={v}" for k, v in (r.get("error_codes") or {}).items()))
        parts.append(t)
    if s.get("top_talkers"):
        t = _table("top talkers")
        for c in ("source", "target", "envelopes", "bytes"):
            _column(t, c, name=c in ("source", "target"))
        for r in s["top_talkers"][:10]:
            _add_row(t, r["source"], r["target"], str(r["envelopes"]), str(r["bytes"]))
        parts.append(t)
    rej = s.get("rejections") or {}
    if rej.get("by_reason"):
        t = _table(f"rejections ({rej.get('total', 0)})")
        _column(t, "reason", name=True)
        _column(t, "count", left=True)
        top = max(rej["by_reason"].values())
        for reason, n in rej["by_reason"].items():
            _add_row(t, reason, bar(n, top))
        parts.append(t)
        if rej.get("bursts"):
            parts.append(Text("bursts: " + "; ".join(f"{b['node']} {b['reason']} x{b['rejections']}"
                                                      for b in rej["bursts"][:5]), style="yellow"))
    if s.get("availability"):
        t = _table("availability")
        for c in ("node", "availability", "sessions", "restarts", "crashes", "left", "lost", "late", "online"):
            _column(t, c, name=c == "node")
        for r in s["availability"][:20]:
            _add_row(t, r["node"], _pct(r["availability"]), str(r["sessions"]), str(r["restarts"]),
                     str(r["crashes"]), str(r["graceful_departures"]), str(r["lost_leases"]), str(r["late_renewals"]),
                     "yes" if r["online_at_end"] else "no")
        parts.append(t)
    parts += extension_tables(s)
    return Group(*parts)


def coverage_line(cov: dict) -> Text:
    """What the figures cover: "journals from 4 of 6 nodes", who keeps none, and the SPC calls
    counted from callees' records because their callers keep no journal."""
    journals, nodes = cov.get("journals", 0), cov.get("nodes", 0)
    line = Text()
    line.append("covers  ", style="bold")
    line.append(f"journals from {journals} of {nodes} nodes" if journals < nodes else f"journals from all {nodes} nodes")
    missing = cov.get("without_journal") or []
    if missing:
        more = nodes - journals - len(missing)
        line.append(" · no journal: " + ", ".join(missing) + (f" and {more} more" if more > 0 else ""), style="dim")
    if cov.get("spc_calls_from_callees"):
        line.append(f" · {cov['spc_calls_from_callees']:,} SPC calls counted from their callees' records")
    return line


def _data_table(title: str, columns: tuple[str, ...], rows: list[tuple], left: int = 2) -> Table:
    """A plain table; the first `left` columns are left-aligned, the rest are numbers."""
    t = _table(title)
    for i, c in enumerate(columns):
        _column(t, c, name=i < left)
    for r in rows:
        _add_row(t, *(("-" if v is None else str(v)) for v in r))
    return t


def extension_tables(s: dict) -> list:
    """The logical messages, threat scores and durable messages of the report (sections a report
    made before they existed does not have; empty sections are not shown)."""
    parts: list = []
    m = s.get("messages") or {}
    if m.get("links"):
        mt = m.get("totals") or {}
        parts.append(_data_table(
            f"logical messages ({mt.get('sent', 0)} sent, {mt.get('chunks', 0)} chunks, "
            f"{mt.get('retransmissions', 0)} retransmissions, {mt.get('send_errors', 0)} send errors)",
            ("source", "target", "sent", "reliable", "chunks", "retrans", "acked", "send err", "delivered",
             "dup", "voided"),
            [(r["source"], r["target"], r["sent"], r["reliable"], r["chunks"], r["retransmissions"],
              r["acknowledged"], r["send_errors"], r["delivered"], r["duplicates"], r["voided"])
             for r in m["links"]]))
    th = s.get("threats") or {}
    if th.get("pairs"):
        parts.append(_data_table(
            f"threat scores and quarantines ({(th.get('totals') or {}).get('quarantined_now', 0)} quarantined now)",
            ("receiver", "sender", "raised", "quarantined", "released", "lifted", "max score", "removed unread",
             "now"),
            [(r["receiver"], r["sender"], r["raised"], r["quarantined"], r["released"], r["lifted"],
              "-" if r["max_score"] is None else f"{r['max_score']:g}", r["quarantined_rejections"],
              "quarantined" if r["quarantined_now"] else "") for r in th["pairs"]]))
    d = s.get("durable") or {}
    if d.get("links"):
        parts.append(_data_table(
            "durable messages",
            ("sender", "receiver", "stored", "delivered", "handled", "failed", "expired", "duplicates", "receipts",
             "send err"),
            [(r["sender"], r["receiver"], r["stored"], r["delivered"], r["handled"], r["failed"], r["expired"],
              r["duplicates"], r["receipts"], r["send_errors"]) for r in d["links"]]))
    return parts


def duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


class AnalysisPlanned(Message):
    """The analysis knows how many new bytes it reads and how long it should take."""

    def __init__(self, new_bytes: int, estimate: float | None) -> None:
        super().__init__()
        self.new_bytes, self.estimate = new_bytes, estimate


class AnalyticsView(Vertical):
    BINDINGS = keymap.bindings("analytics")
    #: the analytics child exits after this many idle seconds (SPEED_ANALYTICS_IDLE overrides)
    IDLE_SECONDS = 300.0

    def compose(self) -> ComposeResult:
        with Horizontal(classes="toolbar"):
            yield Button("Analyse journals", id="an-run", variant="primary", compact=True)
            yield Static(id="an-status", classes="hint")
        yield ProgressBar(total=1.0, show_eta=False, id="an-progress")
        yield TimeChart(caption="envelopes sent", id="an-chart")
        with VerticalScroll(id="an-body"):
            yield Static(id="an-summary")

    def on_mount(self) -> None:
        self.running = False
        self.worker = None
        self.keepalives = 0
        self.runs = 0                           # analyses finished (well or not) in this view
        self.warmed: float | None = None        # seconds the pre-warm took, once it is done
        self._worker_lock = threading.Lock()
        self.started = 0.0
        self.estimate: float | None = None
        self.fraction, self.step_text = 0.0, ""
        self.query_one("#an-progress", ProgressBar).update(progress=0.0)
        self.query_one("#an-progress", ProgressBar).display = False
        self.query_one("#an-chart", TimeChart).display = False
        self.load_last()
        if self._prewarm_wanted():
            self.run_worker(self._prewarm, thread=True, group="analytics-warm", name="analytics-warm")
        self.set_interval(max(1.0, self._idle_seconds() / 3), self._keep_warm)

    # ------------------------------------------------------------------ a warm Spark
    def _idle_seconds(self) -> float:
        return float(os.environ.get("SPEED_ANALYTICS_IDLE") or self.IDLE_SECONDS)

    def _prewarm_wanted(self) -> bool:
        """Start Spark at the console's start when this environment was analysed before (a report
        exists), or SPEED_ANALYTICS_PREWARM=1; never with SPEED_ANALYTICS_PREWARM=0."""
        wanted = os.environ.get("SPEED_ANALYTICS_PREWARM")
        return wanted == "1" or (wanted != "0" and self.summary_path().exists())

    def _ensure_worker(self):
        from ...pipeline.commands import choose_remote
        from ...pipeline.worker import AnalyticsWorker
        with self._worker_lock:             # the pre-warm and `a` run in threads
            if self.worker is None:
                self.worker = AnalyticsWorker(str(self.log_path), idle_seconds=self._idle_seconds(),
                                              remote=choose_remote(None))
            return self.worker

    def _prewarm(self) -> None:
        """Thread worker: the child, its Spark and the job compiled and run on the journals' last
        lines, ready before `a`."""
        from ...pipeline.common import PipelineError
        try:
            self.warmed = self._ensure_worker().warm([str(self.traces_dir)])
        except (PipelineError, OSError):
            pass                        # `a` reports what is wrong

    def _shown(self) -> bool:
        node = self
        while node is not None and node is not self.screen:
            if not node.display:
                return False
            node = node.parent
        return True

    def _keep_warm(self) -> None:
        """While the view is open, the child is not released for idleness."""
        if self.worker is not None and not self.running and self._shown():
            self.run_worker(self._ping, thread=True, group="analytics-warm", name="analytics-ping")

    def _ping(self) -> None:
        if self.worker is not None and self.worker.ping():
            self.keepalives += 1

    def on_resize(self) -> None:
        # a third of the view, 6 to 14 rows: 80x24 keeps room for the tables below
        self.query_one("#an-chart", TimeChart).styles.height = max(6, min(14, self.size.height // 3))

    def on_unmount(self) -> None:
        if self.worker is not None:
            self.worker.close()

    # ------------------------------------------------------------------ where things live
    @property
    def env_dir(self) -> Path:
        return self.app.paths.env_dir(self.app.root)

    @property
    def traces_dir(self) -> Path:
        return self.app.root / TRACES_DIR

    def summary_path(self) -> Path:
        return self.env_dir / "analytics" / "summary.json"

    @property
    def log_path(self) -> Path:
        return self.env_dir / "analytics.log"

    def load_last(self) -> None:
        p = self.summary_path()
        try:
            s = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.query_one("#an-status", Static).update(Text(
                f"no report yet for {self.app.dir_label}: press a (or the button) to analyse its journals", style="dim"))
            self.query_one("#an-summary", Static).update("")
            return
        self.show_summary(s, f"last report of {self.app.dir_label}; a runs a new analysis")

    def show_summary(self, s: dict, note: str, fresh: bool = False) -> None:
        s = visible_data(s)  # names, reasons, messages: from journals members write
        self.summary = s
        self.query_one("#an-status", Static).update(Text(note, style="dim"))
        body = summary_renderable(s)
        if fresh:  # the report's own path heads a report just written (the toolbar keeps to three lines)
            body = Group(Text(f"report file {self.summary_path()}", style="dim"), body)
        self.query_one("#an-summary", Static).update(body)
        tot = s.get("traffic_over_time") or {}
        buckets = tot.get("buckets") or []
        chart = self.query_one("#an-chart", TimeChart)
        # the axis spans the traffic (the report's window also covers lease records: two hours of
        # axis put a minute of traffic in one bar at its edge)
        chart.set_series([(b["t"], b["envelopes"]) for b in buckets if b.get("envelopes")],
                         tot.get("bucket_seconds") or 60)
        chart.display = bool(buckets)

    def refresh_view(self, force: bool = False) -> None:
        pass

    # ------------------------------------------------------------------ running
    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_run()

    def action_run(self) -> None:
        if self.running:
            self.app.notify("the analysis is already running")
            return
        self.running = True
        self.started, self.estimate, self.fraction, self.step_text = time.monotonic(), None, 0.0, "starting"
        self.query_one("#an-progress", ProgressBar).display = True
        self.query_one("#an-progress", ProgressBar).update(progress=0.0)
        self._show_running()
        self._ticker = self.set_interval(1.0, self._show_running)
        self.run_worker(self._analyse, thread=True, exclusive=True, group="analytics", name="analytics")

    def _analyse(self) -> None:
        """Thread worker: one analysis in the child; progress and the outcome go out as messages
        (they reach the app, which routes them back here and audits the run)."""
        from ...pipeline.common import PipelineError
        worker = self._ensure_worker()
        env = self.env_dir
        request = {"traces": [str(self.traces_dir)], "store": str(env / "analytics-store"),
                   "out": str(env / "analytics")}

        def on_event(event: dict) -> None:
            if event.get("event") == "plan":
                self.post_message(AnalysisPlanned(int(event.get("new_bytes") or 0), event.get("estimate")))
            elif event.get("event") == "progress":
                self.post_message(PipelineProgress(float(event["fraction"]), str(event["text"])))

        try:
            summary = worker.analyse(request, on_event)
        except PipelineError as exc:
            self.post_message(PipelineFinished(False, None, str(exc)))
            return
        except OSError as exc:
            self.post_message(PipelineFinished(False, None, f"the analytics worker could not start: {exc}"))
            return
        self.post_message(PipelineFinished(True, summary))

    def on_analysis_planned(self, msg: AnalysisPlanned) -> None:
        self.estimate = msg.estimate
        self._show_running()

    def _show_running(self) -> None:
        if not self.running:
            return
        elapsed = time.monotonic() - self.started
        left = None
        if self.estimate is not None:
            left = max(0.0, self.estimate - elapsed)
        if self.fraction >= 0.1:                 # the run's own pace, once it has one
            left = elapsed * (1.0 - self.fraction) / self.fraction
        text = Text(f"{self.step_text} · {duration(elapsed)} elapsed", style="yellow")
        text.append(f" · about {duration(left)} left" if left is not None else " · estimating…", style="yellow")
        # (the log's path comes with the outcome: with it, this line would not fit three rows at 80 columns)
        self.query_one("#an-status", Static).update(text)

    def progress(self, fraction: float, text: str) -> None:
        self.fraction, self.step_text = max(0.0, min(1.0, fraction)), text
        self.query_one("#an-progress", ProgressBar).update(progress=self.fraction)
        self._show_running()

    def finished(self, ok: bool, summary: Any, error: str) -> None:
        self.running = False
        self.runs += 1
        ticker = getattr(self, "_ticker", None)
        if ticker is not None:
            ticker.stop()
        elapsed = duration(time.monotonic() - self.started)
        if ok and isinstance(summary, dict):
            self.query_one("#an-progress", ProgressBar).update(progress=1.0)
            self.show_summary(summary, f"report of {self.app.dir_label} written in {elapsed} · log {self.log_path}",
                              fresh=True)
        else:
            self.query_one("#an-status", Static).update(Text(
                f"analysis failed: {visible(error)} (log {self.log_path})", style="bold red"))
