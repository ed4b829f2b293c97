"""The key table (ui/keymap.py): one source for the bindings, the action bar, the palette and the
help screen, and the one statement of the read-only rule."""

from speedtui.ui import keymap
from speedtui.ui.app import SpeedApp
from speedtui.ui.views.leases import LeasesView
from speedtui.ui.views.traces import TracesView
from speedtui.ui.widgets.matrix import AccessMatrix


def test_binding_ids_are_unique_and_every_list_names_known_keys():
    ids = [k.id for k in keymap.KEYS if k.id]
    assert len(ids) == len(set(ids))
    for binding_id in keymap.ACTION_BAR + tuple(i for i in keymap.PALETTE_ORDER if i != "themes"):
        assert keymap.key(binding_id).id == binding_id
    assert all(k.palette for k in keymap.palette_keys() if k is not None)


def test_the_widgets_take_their_bindings_from_the_table():
    for scope, cls in (("app", SpeedApp), ("leases", LeasesView), ("traces", TracesView),
                       ("access-matrix", AccessMatrix)):
        assert [(b.key, b.action, b.id) for b in cls.BINDINGS] == \
               [(k.keys, k.action, k.id) for k in keymap.KEYS if k.scope == scope]


def test_a_read_only_console_offers_exactly_what_changes_nothing():
    for k in keymap.KEYS:
        assert keymap.offered(k.scope, k.name, readonly=False) is True
        assert keymap.offered(k.scope, k.name, readonly=True) is (not k.changes), k
    changing = {(k.scope, k.name) for k in keymap.KEYS if k.changes}
    assert {("app", "launch"), ("app", "stop_node"), ("app", "grant"), ("app", "call"), ("app", "send"),
            ("leases", "reap"), ("traces", "replay"), ("access", "grant"), ("audit", "rerun"),
            ("security", "lift")} <= changing
    assert keymap.action_bar() == [("launch", "n Launch"), ("stop_node", "d Stop"), ("grant", "g Grant"),
                                   ("call", "F Call"), ("send", "m Message"), ("jump", ": Jump"), ("help", "? Help")]
