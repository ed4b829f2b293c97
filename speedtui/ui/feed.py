"""The console's data flow: what the reader threads put on the bridge, taken in on the UI thread
ten times a second (`drain`) and once a second for lease countdowns (`tick`), into the models of
ConsoleState; then only the active view is redrawn, and only when something changed."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from speed_runtime.core.visible import visible
from textual.widgets import Static

from ..models.registry import lock_banner
from ..services.registry import host_facts
from ..services.sources import JournalTailer, RegistrySource

if TYPE_CHECKING:
    from .app import SpeedApp


class Feed:
    def __init__(self, app: "SpeedApp") -> None:
        self.app = app
        self.dirty = True          # traces changed since the last redraw
        self.registry_dirty = True  # the registry changed since the last redraw
        self._banner = ""
        self._health_version = 0

    def start_readers(self) -> list:
        """The registry and journal readers (threads), after one synchronous read each: the first
        frame already shows the environment."""
        readers = [RegistrySource(self.app.bridge, self.app.root), JournalTailer(self.app.bridge, self.app.root)]
        for reader in readers:
            reader.step()
        for reader in readers:
            reader.start()
        return readers

    def drain(self) -> None:
        app = self.app
        state, registry, traces = app.state, app.registry, app.traces
        d = app.bridge.drain()
        now = app.clock.time()
        replays = state.replays
        if d.records:
            traces.add(d.records)
            self._tell(replays.match_records(d.records))
            state.keycheck.observe(d.records)
            self.dirty = True
        if traces.health_version != self._health_version:  # a node reported (or cleared) a problem
            self._health_version = traces.health_version
            registry.health = traces.health_marks(now)
            if d.registry is None:
                registry.refresh(now, host_facts(app.clock.boottime()))
                self.registry_dirty = True
        if d.registry is not None:
            registry.update(d.registry, now, host_facts(app.clock.boottime()))
            state.history.observe(now, registry.rows)
            self.registry_dirty = True
        if d.lock is not None:
            state.lock_text = lock_banner(d.lock.pid, d.lock.seconds, d.lock.problem)
        self._note_problems(d.problems)
        traces.bad_lines += d.bad_lines
        traces.dropped += d.dropped
        for note in d.notes:
            if isinstance(note, tuple) and note and note[0] == "error":
                app.log.warning(note[1])
        if d.registry is not None:
            self._tell(replays.match_counters(registry.by_name(), traces.journaling))
        self._tell(replays.expire(now))
        self._show_banner("\n".join(t for t in (state.lock_text, state.keycheck.banner()) if t))
        if self.registry_dirty or self.dirty:
            app.refresh_active(registry=self.registry_dirty)
            self.registry_dirty = self.dirty = False

    def tick(self) -> None:
        """Once a second: lease countdowns and heartbeat ages move even without file events."""
        app = self.app
        now = app.clock.time()
        app.registry.health = app.traces.health_marks(now)  # a passing problem's mark goes after a minute
        app.registry.refresh(now, host_facts(app.clock.boottime()))
        app.state.history.observe(now, app.registry.rows)  # a lease that ran out is a change to remember
        self.registry_dirty = True

    def _tell(self, notes) -> None:
        for n in notes:
            self.app.notify(n.text, title="replay", severity="error" if n.alarming else "information")

    def _note_problems(self, problems: dict[str, str | None]) -> None:
        """Files a reader skips: listed in the traces status line, and told once. Their names are
        a member's choice (`[a="]x.jsonl`, an ESC in a name): kept as ``visible`` writes them."""
        known = self.app.state.reader_problems
        for where, text in problems.items():
            where, text = visible(where), None if text is None else visible(text)
            if text is None:
                known.pop(where, None)
                continue
            if known.get(where) != text:
                self.app.notify(text, title=f"{where} skipped", severity="warning", timeout=8)
            known[where] = text
            self.dirty = True

    def _show_banner(self, text: str) -> None:
        if text != self._banner:
            self._banner = text
            banner = self.app.query_one("#banner", Static)
            banner.update(Text("\n".join(f"⚠ {visible(line)}" for line in text.splitlines())))
            banner.display = bool(text)
