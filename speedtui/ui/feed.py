"""The console's data flow: what the reader threads put on the bridge, taken in on the UI thread
ten times a second (`drain`) and once a second for lease countdowns (`tick`), into the models of
ConsoleState; then only the active view is redrawn, and only when something changed."""
from __future__ import annotations

import time
from typing import Callable

from speed_runtime.core.visible import visible

from ..models.registry import lock_banner
from ..services.bridge import Bridge
from ..services.clock import Clock
from ..services.registry import entry_exists, host_facts
from ..services.sources import JournalTailer, RegistrySource
from .port import UiPort
from .state import ConsoleState


TICK_SHARE = 0.05  # the most of the UI thread's time the once-a-second refresh of every row may take


class Feed:
    def __init__(self, bridge: Bridge, state: ConsoleState, clock: Clock, port: UiPort,
                 changed: Callable[[bool], None], show_banner: Callable[[str], None],
                 warn: Callable[[str], None]) -> None:
        self.bridge = bridge
        self.state = state
        self.clock = clock
        self.port = port  # notifications
        self.changed = changed  # something to redraw (True: the registry too)
        self.show_banner = show_banner  # the banner's lines ("" hides it)
        self.warn = warn  # a reader's error, to the log
        self.dirty = True          # traces changed since the last redraw
        self.registry_dirty = True  # the registry changed since the last redraw
        self._banner = ""
        self._health_version = 0
        self._ticks_to_skip = 0
        self._entry_exists = entry_exists(state.root)  # a node judged dead may have just exited cleanly

    def start_readers(self) -> list:
        """The registry and journal readers (threads), after one synchronous read each: the first
        frame already shows the environment."""
        readers = [RegistrySource(self.bridge, self.state.root), JournalTailer(self.bridge, self.state.root)]
        for reader in readers:
            reader.step()
        for reader in readers:
            reader.start()
        return readers

    def drain(self) -> None:
        state, registry, traces, clock = self.state, self.state.registry, self.state.traces, self.clock
        d = self.bridge.drain()
        now = clock.time()
        replays = state.replays
        if d.records:
            traces.add(d.records)
            self._tell(replays.match_records(d.records))
            state.keycheck.observe(d.records)
            self.dirty = True
        health_changed = traces.health_version != self._health_version  # a node reported (or cleared) a problem
        if health_changed:
            self._health_version = traces.health_version
            registry.health = traces.health_marks(now)
        if d.registry is not None:
            registry.update(d.registry, now, host_facts(clock.boottime()))
        if health_changed:  # every row's mark: `update` keeps the rows of the entries that did not change
            registry.refresh(now, host_facts(clock.boottime()))
            self.registry_dirty = True
        if registry.just_died:
            registry.forget_removed(self._entry_exists)
        if d.registry is not None:
            state.history.observe(now, registry.rows)
            self.registry_dirty = True
        if d.lock is not None:
            state.lock_text = lock_banner(d.lock.pid, d.lock.seconds, d.lock.problem)
        self._note_problems(d.problems)
        traces.bad_lines += d.bad_lines
        traces.dropped += d.dropped
        for note in d.notes:
            if isinstance(note, tuple) and note and note[0] == "error":
                self.warn(note[1])
        if d.registry is not None:
            self._tell(replays.match_counters(registry.by_name(), traces.journaling))
        self._tell(replays.expire(now))
        banner = "\n".join(t for t in (state.lock_text, state.keycheck.banner()) if t)
        if banner != self._banner:
            self._banner = banner
            self.show_banner(banner)
        if self.registry_dirty or self.dirty:
            self.changed(self.registry_dirty)
            self.registry_dirty = self.dirty = False

    def tick(self) -> None:
        """Once a second: lease countdowns and heartbeat ages move even without file events. Every
        row is built again, so with many nodes (a quarter of a second at 10,000) the refresh is
        spaced out to take at most TICK_SHARE of the UI thread: what changed in the registry is
        still shown at once (`drain`), only the countdowns of the others move less often."""
        if self._ticks_to_skip:
            self._ticks_to_skip -= 1
            return
        started = time.perf_counter()
        state, now = self.state, self.clock.time()
        state.registry.health = state.traces.health_marks(now)  # a passing problem's mark goes after a minute
        state.registry.refresh(now, host_facts(self.clock.boottime()))
        if state.registry.just_died:
            state.registry.forget_removed(self._entry_exists)
        state.history.observe(now, state.registry.rows)  # a lease that ran out is a change to remember
        self.registry_dirty = True
        self._ticks_to_skip = int((time.perf_counter() - started) / TICK_SHARE)

    def _tell(self, notes) -> None:
        for n in notes:
            self.port.notify(n.text, title="replay", severity="error" if n.alarming else "information")

    def _note_problems(self, problems: dict[str, str | None]) -> None:
        """Files a reader skips: listed in the traces status line, and told once. Their names are
        a member's choice (`[a="]x.jsonl`, an ESC in a name): kept as ``visible`` writes them."""
        known = self.state.reader_problems
        for where, text in problems.items():
            where, text = visible(where), None if text is None else visible(text)
            if where == "registry":  # an empty Leases table says why (ROOT removed is not "no entries")
                self.state.registry.problem = text
                self.registry_dirty = True
            if text is None:
                known.pop(where, None)
                continue
            if known.get(where) != text:
                self.port.notify(text, title=f"{where} skipped", severity="warning", timeout=8)
            known[where] = text
            self.dirty = True
