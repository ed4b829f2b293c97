"""The command palette's entries and the help screen's key list, built from the app's bindings:
views, themes, every action with its key, and every node and service (to jump to)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Iterable

from textual.app import SystemCommand
from textual.binding import Binding
from textual.markup import escape

from .screens.jump import JumpTarget

if TYPE_CHECKING:
    from .app import SpeedApp


def key_of(app: "SpeedApp", binding_id: str) -> str:
    for b in app.BINDINGS:
        if isinstance(b, Binding) and b.id == binding_id:
            return app.get_key_display(b)
    return ""


def palette_commands(app: "SpeedApp", views: list[tuple[str, str]]) -> Iterable[SystemCommand]:
    def keyed(help_text: str, binding_id: str) -> str:
        key = key_of(app, binding_id)
        return f"key {key} · {help_text}" if key else help_text

    for vid, label in views:
        yield SystemCommand(f"View: {label}", keyed(f"Show the {label} view", f"app.{vid}"), partial(app.action_show, vid))
    yield SystemCommand("Jump", keyed("To a node, a service or a view, with completion", "app.jump"), app.action_jump)
    yield SystemCommand("Time travel", keyed("The registry and traffic at a past moment, from the journals",
                                             "app.past"), app.action_time_travel)
    for name in app.theme_names():
        yield SystemCommand(f"Theme: {name}", "Switch theme (remembered across runs)", partial(setattr, app, "theme", name))
    yield SystemCommand("Help", keyed("Views, keys and the config file", "app.help"), app.action_help)
    yield SystemCommand("Pause/resume traces", "key p in Traces · Freeze the traces view",
                        lambda: app.view_widget("traces").action_pause())
    yield SystemCommand("All fabrics", "key a in Fabrics · Clear the fabric filter", partial(app.set_fabric, None))
    if not app.readonly and app.actions is not None:
        yield SystemCommand("Launch node", keyed("Start a node in this console or as a `speed node` process",
                                                 "app.launch"), app.action_launch)
        yield SystemCommand("Stop node", keyed("Stop a node this console started or administers (operator key)",
                                               "app.stop"), app.action_stop_node)
        yield SystemCommand("Grant or revoke", keyed("Change allow entries of its nodes and of nodes trusting its "
                                                     "operator key", "app.grant"), app.action_grant)
        yield SystemCommand("Fire SPC call", keyed("Call a service from one of this console's nodes", "app.call"),
                            app.action_call)
        yield SystemCommand("Send message", keyed("Send a MESSAGE from one of this console's nodes", "app.send"),
                            app.action_send)
        yield SystemCommand("Reap stale entry", "key x in Leases · Remove the selected stale registry entry",
                            lambda: app.view_widget("leases").action_reap())
        yield SystemCommand("Replay selected envelope", "key R in Traces · Re-deliver the selected traced envelope",
                            lambda: app.view_widget("traces").action_replay())
        yield SystemCommand("Run analytics", "key a in Analytics · Analyse the journals with the Spark pipeline",
                            lambda: (app.action_show("analytics"), app.view_widget("analytics").action_run()))
    yield SystemCommand("Export traces", "key E in Traces · The filtered traces as JSON lines",
                        lambda: app.view_widget("traces").action_export())
    yield SystemCommand("Export access matrix", "key E in Access · CSV and JSON",
                        lambda: app.view_widget("access").action_export())
    yield SystemCommand("Read durable outboxes", "key r in Durable · What waits in every outbox (`speed outbox`)",
                        lambda: (app.action_show("durable"), app.view_widget("durable").action_relist()))
    yield SystemCommand("Verify durable receipts", "key v in Durable · A node's receipt chains (`speed receipts`)",
                        lambda: (app.action_show("durable"), app.view_widget("durable").action_verify()))
    # the palette reads its titles as markup, and members name nodes (files) and services: escaped
    for target in sorted(app.jump_targets().values(), key=lambda t: (t.kind, t.name)):
        if target.kind == "node":
            yield SystemCommand(f"Node: {escape(target.name)}", "Show it in Leases", partial(app.jump_to, target))
        elif target.kind == "service":
            yield SystemCommand(f"Service: {escape(target.name)}", "The nodes that offer it, in Leases",
                                partial(app.jump_to, JumpTarget("service", target.name)))


def help_rows(app: "SpeedApp", views: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    rows = []
    seen = set()
    for (_node, binding, enabled, tooltip) in app.screen.active_bindings.values():
        if binding.id and binding.id not in seen and enabled:
            seen.add(binding.id)
            rows.append((app.get_key_display(binding), binding.description or binding.action, binding.id))
    for vid, label in views:
        w = app.view_widget(vid)
        for b in w.BINDINGS:
            if isinstance(b, Binding) and b.id and b.id not in seen and w.check_action(b.action.split("(")[0], ()):
                seen.add(b.id)
                rows.append((app.get_key_display(b), f"{label}: {b.description}", b.id))
    return rows
