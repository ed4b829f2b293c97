"""Analytics view: run the trace pipeline in a worker (progress bar) and show summary.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, ProgressBar, Sparkline, Static


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v:.1f}"


def bar(n: float, top: float, width: int = 24) -> Text:
    filled = 0 if top <= 0 else max(1 if n else 0, round(width * n / top))
    return Text("█" * filled, style="red") + Text(f" {n:g}")


def summary_renderable(s: dict) -> Group:
    parts: list = []
    tr = s.get("time_range") or {}
    head = Text()
    head.append("report ", style="bold")
    head.append(f"generated {s.get('generated_at', '?')}  window {tr.get('start_iso')} → {tr.get('end_iso')}",
                style="dim")
    if s.get("message"):
        head.append(f"\n{s['message']}", style="yellow")
    parts.append(head)
    totals = s.get("totals") or {}
    t = Table(title="totals", title_justify="left", box=None, padding=(0, 2))
    keys = [k for k in ("records", "envelopes_sent", "bytes_sent", "accepted", "rejected", "spc_calls",
                        "spc_success_rate")
            if k in totals] or list(totals)[:8]
    for k in keys:
        t.add_column(k, justify="right")
    t.add_row(*[_pct(totals[k]) if k.endswith("rate") else str(totals[k]) for k in keys])
    parts.append(t)
    if s.get("spc"):
        t = Table(title="SPC by target and service", title_justify="left", box=None, padding=(0, 1))
        for c in ("target", "service", "calls", "ok", "errors", "no resp", "success", "p50 ms", "p95 ms",
                  "p99 ms", "error codes"):
            t.add_column(c, justify="left" if c in ("target", "service", "error codes") else "right")
        for r in s["spc"][:15]:
            t.add_row(r["target"], r["service"], str(r["calls"]), str(r["successes"]), str(r["errors"]),
                      str(r["no_response"]), _pct(r["success_rate"]), _ms(r["p50_ms"]), _ms(r["p95_ms"]),
                      _ms(r["p99_ms"]), ", ".join(f"{k}={v}" for k, v in (r.get("error_codes") or {}).items()))
        parts.append(t)
    if s.get("top_talkers"):
        t = Table(title="top talkers", title_justify="left", box=None, padding=(0, 1))
        for c in ("source", "target", "envelopes", "bytes"):
            t.add_column(c, justify="right" if c in ("envelopes", "bytes") else "left")
        for r in s["top_talkers"][:10]:
            t.add_row(r["source"], r["target"], str(r["envelopes"]), str(r["bytes"]))
        parts.append(t)
    rej = s.get("rejections") or {}
    if rej.get("by_reason"):
        t = Table(title=f"rejections ({rej.get('total', 0)})", title_justify="left", box=None, padding=(0, 1))
        t.add_column("reason")
        t.add_column("count")
        top = max(rej["by_reason"].values())
        for reason, n in rej["by_reason"].items():
            t.add_row(reason, bar(n, top))
        parts.append(t)
        if rej.get("bursts"):
            parts.append(Text("bursts: " + "; ".join(f"{b['node']} {b['reason']} x{b['rejections']}"
                                                      for b in rej["bursts"][:5]), style="yellow"))
    if s.get("availability"):
        t = Table(title="availability", title_justify="left", box=None, padding=(0, 1))
        for c in ("node", "availability", "sessions", "restarts", "crashes", "left", "lost", "late", "online"):
            t.add_column(c, justify="left" if c == "node" else "right")
        for r in s["availability"][:20]:
            t.add_row(r["node"], _pct(r["availability"]), str(r["sessions"]), str(r["restarts"]), str(r["crashes"]),
                      str(r["graceful_departures"]), str(r["lost_leases"]), str(r["late_renewals"]),
                      "yes" if r["online_at_end"] else "no")
        parts.append(t)
    return Group(*parts)


class AnalyticsView(Vertical):
    BINDINGS = [Binding("a", "run", "Run analysis", id="analytics.run")]

    def compose(self) -> ComposeResult:
        with Horizontal(classes="toolbar"):
            yield Button("Analyse journals", id="an-run", variant="primary", compact=True)
            yield Static(id="an-status", classes="hint")
        yield ProgressBar(total=1.0, show_eta=False, id="an-progress")
        yield Static("traffic over time (envelopes per bucket)", classes="section")
        yield Sparkline([0.0], id="an-traffic", classes="-empty")
        with VerticalScroll(id="an-body"):
            yield Static(id="an-summary")

    def on_mount(self) -> None:
        self.running = False
        self.query_one("#an-progress", ProgressBar).update(progress=0.0)
        self.query_one("#an-progress", ProgressBar).display = False
        self.query_one("#an-traffic", Sparkline).display = False
        self.load_last()

    def summary_path(self) -> Path:
        return self.app.paths.analytics_dir / "summary.json"

    def load_last(self) -> None:
        p = self.summary_path()
        try:
            s = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.query_one("#an-status", Static).update(
                Text("no report yet: press a (or the button) to analyse the journals in speed_traces/", style="dim"))
            self.query_one("#an-summary", Static).update("")
            return
        self.show_summary(s, "last report (analytics/summary.json in the data directory); a runs a new analysis")

    def show_summary(self, s: dict, note: str) -> None:
        self.summary = s
        self.query_one("#an-status", Static).update(Text(note, style="dim"))
        self.query_one("#an-summary", Static).update(summary_renderable(s))
        buckets = ((s.get("traffic_over_time") or {}).get("buckets")) or []
        spark = self.query_one("#an-traffic", Sparkline)
        spark.data = [float(b["envelopes"]) for b in buckets] or [0.0]
        spark.display = bool(buckets)

    def refresh_view(self, force: bool = False) -> None:
        pass

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_run()

    def action_run(self) -> None:
        if self.running:
            self.app.notify("the analysis is already running")
            return
        self.running = True
        self.query_one("#an-progress", ProgressBar).display = True
        self.query_one("#an-progress", ProgressBar).update(progress=0.0)
        self.query_one("#an-status", Static).update(Text("starting…", style="yellow"))
        self.app.run_analysis()

    def progress(self, fraction: float, text: str) -> None:
        self.query_one("#an-progress", ProgressBar).update(progress=max(0.0, min(1.0, fraction)))
        self.query_one("#an-status", Static).update(Text(text, style="yellow"))

    def finished(self, ok: bool, summary: Any, error: str) -> None:
        self.running = False
        if ok and isinstance(summary, dict):
            self.query_one("#an-progress", ProgressBar).update(progress=1.0)
            self.show_summary(summary, f"report written to {self.summary_path()}")
        else:
            self.query_one("#an-status", Static).update(Text(f"analysis failed: {error}", style="bold red"))
