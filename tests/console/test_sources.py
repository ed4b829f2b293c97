"""Journal tailer and registry reader (threads not started: steps are called directly), and a
reader's thread with its watch (started, then stopped while the watch is still starting)."""

import json
import os
import threading

from watchdog.observers import Observer

from speedtui.services import sources
from speedtui.services.bridge import Bridge
from speedtui.services.registry import RegistryReader
from speedtui.services.sources import JournalTailer, RegistrySource

from ..helpers.wait import wait_until


def rec(i, node="a"):
    return json.dumps({"ts": float(i), "node": node, "dir": "out", "peer": "b", "type": "MESSAGE", "seq": i,
                       "outcome": "sent"})


def test_tailer_reads_new_bytes_torn_lines_rotation(tmp_path):
    tr = tmp_path / "speed_traces"
    tr.mkdir()
    j = tr / "a.jsonl"
    j.write_text(rec(1) + "\n" + "garbage\n" + rec(2)[:10])
    b = Bridge()
    t = JournalTailer(b, tmp_path)
    t.step()
    d = b.drain()
    assert [r.seq for r in d.records] == [1] and d.bad_lines == 1
    with open(j, "a") as fh:  # the torn line completes
        fh.write(rec(2)[10:] + "\n" + rec(3) + "\n")
    t.step()
    assert [r.seq for r in b.drain().records] == [2, 3]
    t.step()
    assert b.drain().records == []
    os.rename(j, tr / "a.jsonl.1")  # rotation: a new file under the old name
    j.write_text(rec(4) + "\n")
    t.step()
    assert [r.seq for r in b.drain().records] == [4]


def test_tailer_interleaves_journals_by_time(tmp_path):
    tr = tmp_path / "speed_traces"
    tr.mkdir()
    (tr / "a.jsonl").write_text(rec(1, "a") + "\n" + rec(3, "a") + "\n")
    (tr / "b.jsonl").write_text(rec(2, "b") + "\n")
    b = Bridge()
    JournalTailer(b, tmp_path).step()
    assert [r.seq for r in b.drain().records] == [1, 2, 3]


def test_registry_cache_rereads_only_changed_files(tmp_path):
    reg = tmp_path / "speed_registry"
    reg.mkdir()
    ids = {"a": "00000000-0000-4000-8000-00000000000a", "b": "00000000-0000-4000-8000-00000000000b"}
    for n in ("a", "b"):
        (reg / f"{n}.node").write_text(json.dumps({"name": n, "id": ids[n], "lastHeartbeat": 1.0}))
    reader = RegistryReader(tmp_path)
    first = reader.scan()
    second = reader.scan()
    assert all(x is y for x, y in zip(first, second))
    (reg / "b.node").write_text(json.dumps({"name": "b", "id": ids["b"], "lastHeartbeat": 2.0, "x": 1}))
    third = reader.scan()
    assert third[0] is first[0] and third[1] is not first[1] and third[1].entry.last_heartbeat == 2.0
    (reg / "a.node").unlink()
    fourth = reader.scan()
    assert [e.name for e in fourth] == ["b"] and fourth[0] is third[1]


def test_registry_source_pushes_only_on_change(tmp_path):
    reg = tmp_path / "speed_registry"
    reg.mkdir()
    (reg / "a.node").write_text(json.dumps({"name": "a", "id": "a", "lastHeartbeat": 1.0}))
    b = Bridge()
    s = RegistrySource(b, tmp_path)
    s.step()
    assert b.drain().registry is not None
    s.step()
    assert b.drain().registry is None


def test_bridge_bounds_pending_records():
    from speedtui.models.traces import parse_record

    b = Bridge(max_pending=10)
    b.push_records([parse_record(json.loads(rec(i))) for i in range(25)])
    d = b.drain()
    assert len(d.records) == 10 and d.dropped == 15 and d.records[0].seq == 15


def test_a_watch_still_starting_when_its_reader_is_stopped_is_stopped_too(tmp_path, monkeypatch):
    """The registry directory appears while the console runs (the first node creates it): the
    reader's thread starts its watch then, and the console may be closed at that very moment."""
    starting, go_on, made = threading.Event(), threading.Event(), []

    class SlowToStart(Observer):
        def start(self):
            made.append(self)
            starting.set()
            go_on.wait(10)
            super().start()

    monkeypatch.setattr(sources, "Observer", SlowToStart)
    (tmp_path / "speed_registry").mkdir()
    reader = RegistrySource(Bridge(), tmp_path)
    reader.start()
    assert starting.wait(10)
    stopper = threading.Thread(target=reader.stop, name="stopper")
    stopper.start()
    wait_until(reader.stop_event.is_set, what="stop() to have asked the thread to end")
    go_on.set()  # the watch finishes starting only after stop() was called
    stopper.join(10)
    wait_until(lambda: not reader.thread.is_alive(), what="the reader's thread to end")
    assert not made[0].is_alive() and reader.observer is None


def test_the_tailer_opens_only_the_journals_that_changed(tmp_path, monkeypatch):
    """Thousands of journals are looked at twice a second: one that is as the last read left it is
    not opened again (a stat of its name), and one that changed is read as before."""
    import speed_runtime.journal as journal
    traces = tmp_path / "speed_traces"
    traces.mkdir()
    for i in range(30):
        (traces / f"n{i:02d}.jsonl").write_text(rec(1000 + i) + "\n")
    opened = []
    real = journal.open_regular
    monkeypatch.setattr(journal, "open_regular", lambda path, flags: opened.append(os.path.basename(path))
                        or real(path, flags))
    b = Bridge()
    t = JournalTailer(b, tmp_path)
    t.step()
    assert len(b.drain().records) == 30 and len(opened) == 30 + 30  # start_near_end, then the read
    opened.clear()
    t.step()
    assert opened == [] and b.drain().records == []
    with open(traces / "n07.jsonl", "a") as f:
        f.write(rec(2000) + "\n")
    t.step()
    assert opened == ["n07.jsonl"] and [r.ts for r in b.drain().records] == [2000.0]


def test_the_watch_asks_the_kernel_for_no_event_of_our_own_reads(tmp_path):
    """Opening and closing a file to read it are events too: with thousands of journals read twice a
    second, watchdog's threads took a third of a core handling them, only to drop them."""
    from watchdog.observers.inotify_c import InotifyConstants
    (tmp_path / "speed_traces").mkdir()
    reader = JournalTailer(Bridge(), tmp_path)
    reader._watch()
    try:
        (emitter,) = reader.observer.emitters
        mask = emitter.get_event_mask_from_filter()
        assert mask & InotifyConstants.IN_MODIFY and mask & InotifyConstants.IN_MOVED_TO
        assert not mask & (InotifyConstants.IN_OPEN | InotifyConstants.IN_CLOSE_NOWRITE | InotifyConstants.IN_ACCESS)
    finally:
        reader._unwatch()
