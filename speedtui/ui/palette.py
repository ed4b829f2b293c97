"""The command palette's entries and the help screen's key list, both from the key table
(``keymap.py``): views, themes, every action with its key, and every node and service (to jump to)."""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Iterable

from textual.app import SystemCommand
from textual.binding import Binding
from textual.markup import escape

from . import keymap
from .screens.jump import JumpTarget

# ``app`` below is the console's App (it has the key actions, ``nav``, ``view_widget``, ``readonly``)


def key_of(app: Any, binding_id: str) -> str:
    for b in app.BINDINGS:
        if isinstance(b, Binding) and b.id == binding_id:
            return app.get_key_display(b)
    return ""


def _runs(app: Any, k: keymap.Key) -> Callable[[], object]:
    """What choosing ``k``'s palette entry does: its action, in its scope (a view's: that view,
    shown first when the entry says so)."""
    if k.scope == "app":
        if k.name == "show":
            return partial(app.action_show, k.action.split("'")[1])
        return getattr(app, f"action_{k.name}")
    if k.scope == "table":  # every table: the one with focus, else the shown view's first
        def run_on_table() -> None:
            from .widgets.fast_table import FastTable

            table = (app.focused if isinstance(app.focused, FastTable)
                     else next(iter(app.view_widget(app.active_view()).query(FastTable)), None))
            if table is None:
                app.notify("this view has no table", severity="warning")
            else:
                getattr(table, f"action_{k.name}")()

        return run_on_table
    view = k.scope

    def run() -> None:
        if k.palette_shows_view:
            app.action_show(view)
        getattr(app.view_widget(view), f"action_{k.name}")()

    return run


def palette_commands(app: Any) -> Iterable[SystemCommand]:
    may_change = not app.readonly and app.actions is not None
    for k in keymap.palette_keys():
        if k is None:
            for name in app.theme_names():
                yield SystemCommand(f"Theme: {name}", "Switch theme (remembered across runs)",
                                    partial(setattr, app, "theme", name))
            continue
        if k.changes and not may_change:
            continue
        if k.scope == "app":
            key = key_of(app, k.id or "")
            help_text = f"key {key} · {k.palette_help}" if key else k.palette_help
        else:
            where = "every table" if k.scope == "table" else keymap.VIEW_LABELS[k.scope]
            help_text = f"key {k.first_key} in {where} · {k.palette_help}"
        yield SystemCommand(k.palette, help_text, _runs(app, k))
    # the palette reads its titles as markup, and members name nodes (files) and services: escaped
    for target in sorted(app.nav.jump_targets().values(), key=lambda t: (t.kind, t.name)):
        if target.kind == "node":
            yield SystemCommand(f"Node: {escape(target.name)}", "Show it in Leases", partial(app.nav.jump_to, target))
        elif target.kind == "service":
            yield SystemCommand(f"Service: {escape(target.name)}", "The nodes that offer it, in Leases",
                                partial(app.nav.jump_to, JumpTarget("service", target.name)))


def help_rows(app: Any) -> list[tuple[str, str, str]]:
    """(key, what it does, binding id): the keys active now first, then every view's."""
    rows = []
    seen = set()
    for (_node, binding, enabled, tooltip) in app.screen.active_bindings.values():
        if binding.id and binding.id not in seen and enabled:
            seen.add(binding.id)
            rows.append((app.get_key_display(binding), binding.description or binding.action, binding.id))
    for vid, label in (*keymap.VIEWS, ("logs", "Logs (L)"), ("table", "Every table"), ("envelope", "Envelope inspector")):
        for b in keymap.bindings(vid):
            if b.id and b.id not in seen and keymap.offered(vid, b.action.split("(")[0], app.readonly):
                seen.add(b.id)
                rows.append((app.get_key_display(b), f"{label}: {b.description}", b.id))
    return rows
