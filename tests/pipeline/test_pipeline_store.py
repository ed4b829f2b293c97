"""The incremental store on real, changing journal files: growth, torn last lines, rotation (also
with an unread tail), truncation, copies, a crash between batch and state, and rebuild. After
every step the store's report must equal the pure-Python reference over every complete record
ever written (the oracle): no record counted twice, none lost."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from speedtui.pipeline.job import run_incremental
from speedtui.pipeline.reference import analyze
from speedtui.pipeline.simulate import simulate
from speedtui.pipeline.store import Store

KEYS = ("totals", "top_talkers", "rejections", "traffic_over_time", "time_range", "spc", "availability",
        "other_records", "messages", "threats", "durable")


class Journals:
    """A live journal directory written line by line, and the oracle of every complete line."""

    def __init__(self, tmp_path, source: dict[str, list[str]]):
        self.live = tmp_path / "speed_traces"
        self.live.mkdir()
        self.oracle = tmp_path / "oracle"
        self.oracle.mkdir()
        self.pending = {name: list(lines) for name, lines in source.items()}
        self.written: list[str] = []
        self.torn: dict[str, str] = {}

    def append(self, name: str, count: int, torn: bool = False) -> None:
        lines = [self.pending[name].pop(0) for _ in range(min(count, len(self.pending[name])))]
        with open(self.live / f"{name}.jsonl", "a") as f:
            if name in self.torn:                    # finish the torn line first
                f.write(self.torn.pop(name) + "\n")
            f.write("".join(line + "\n" for line in lines))
            self.written += lines
            if torn and self.pending[name]:
                line = self.pending[name].pop(0)
                half = len(line) // 2
                f.write(line[:half])
                self.torn[name] = line[half:]
                self.written.append(line)            # complete once its rest is written

    def rotate(self, name: str) -> None:
        """As speed_runtime.journal.JournalWriter._rotate does: NAME.jsonl.i -> .i+1, NAME.jsonl -> .1"""
        base = self.live / f"{name}.jsonl"
        for i in range(3, 0, -1):
            src = base if i == 1 else self.live / f"{name}.jsonl.{i - 1}"
            if src.exists():
                os.replace(src, self.live / f"{name}.jsonl.{i}")

    def expected(self) -> dict:
        complete = [line for line in self.written if not any(line.endswith(rest) and line != rest
                                                             for rest in self.torn.values())]
        (self.oracle / "all.jsonl").write_text("".join(line + "\n" for line in complete))
        return analyze([str(self.oracle)])["summary"]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    d = tmp_path_factory.mktemp("src")
    simulate(str(d), nodes=3, records=3000, seed=9, minutes=20, malformed=0.0)
    return {p[:-len(".jsonl")]: open(d / p).read().splitlines() for p in sorted(os.listdir(d))}


def analyse(spark, j: Journals, store, out, **kw) -> dict:
    return run_incremental([str(j.live)], str(store), str(out), spark=spark, **kw)


def agree(got: dict, exp: dict) -> None:
    for key in KEYS:
        assert got[key] == exp[key], key


def test_growth_torn_lines_rotation_truncation_and_rebuild(spark, tmp_path, source):
    j = Journals(tmp_path, source)
    store, out = tmp_path / "store", tmp_path / "report"
    a, b, c = sorted(source)
    for name in source:
        j.append(name, 300, torn=True)
    s = analyse(spark, j, store, out)
    agree(s, j.expected())
    assert s["ingest"]["batches"] == 1 and s["totals"]["malformed"] == 0   # torn lines wait

    for name in source:                       # growth, the torn lines completed
        j.append(name, 200)
    agree(analyse(spark, j, store, out), j.expected())

    j.rotate(a)                               # rotation: a.jsonl -> a.jsonl.1, a new a.jsonl
    j.append(a, 150)
    j.append(c, 100)                          # c grows and rotates before the next run:
    j.rotate(c)                               # its unread tail is now in c.jsonl.1
    j.append(c, 50, torn=True)
    s = analyse(spark, j, store, out)
    agree(s, j.expected())
    assert sorted(s["ingest"]["rotated"]) == [f"{j.live}/{a}.jsonl -> {j.live}/{a}.jsonl.1",
                                             f"{j.live}/{c}.jsonl -> {j.live}/{c}.jsonl.1"]

    with open(j.live / f"{b}.jsonl", "w"):     # truncation: b starts again, new records follow
        pass
    j.append(b, 120)
    shutil.copy(j.live / f"{a}.jsonl.1", j.live / f"{a}.copy")   # a copy is the same journal
    s = analyse(spark, j, store, out)
    agree(s, j.expected())
    assert s["ingest"]["replaced"] == [f"{j.live}/{b}.jsonl"]
    assert f"{j.live}/{a}.copy" in s["ingest"]["skipped"]

    again = analyse(spark, j, store, out)     # nothing new: the same report, no new batch
    agree(again, s)
    assert again["ingest"]["new_bytes"] == 0 and again["ingest"]["batches"] == s["ingest"]["batches"]

    os.unlink(j.live / f"{a}.copy")
    for name in list(j.torn):
        j.append(name, 0)                     # no torn line left: the reference would count it
    rebuilt = analyse(spark, j, store, out, rebuild=True)   # from the journals as they are now
    now = analyze([str(j.live)])["summary"]                 # (b's first records are gone)
    agree(rebuilt, now)
    assert rebuilt["ingest"]["batches"] == 1
    assert rebuilt["totals"]["records"] < s["totals"]["records"]


def test_crash_between_batch_and_state_counts_nothing_twice(spark, tmp_path, source):
    """A batch directory that state.json does not list (the run died before its commit) is
    removed and its bytes are read again."""
    j = Journals(tmp_path, source)
    store, out = tmp_path / "store", tmp_path / "report"
    for name in source:
        j.append(name, 200)
    analyse(spark, j, store, out)
    saved = json.loads((store / "state.json").read_text())
    for name in source:
        j.append(name, 100)
    analyse(spark, j, store, out)
    (store / "state.json").write_text(json.dumps(saved))    # as if the run died before its commit
    assert len(os.listdir(store / "batches")) == 2
    s = analyse(spark, j, store, out)
    agree(s, j.expected())
    assert sorted(os.listdir(store / "batches")) == ["b000001", "b000002"]   # made again


def test_many_batches_are_compacted_with_the_same_answers(spark, tmp_path, source, monkeypatch):
    import speedtui.pipeline.store as store_mod
    monkeypatch.setattr(store_mod, "MAX_BATCHES", 2)
    j = Journals(tmp_path, source)
    store, out = tmp_path / "store", tmp_path / "report"
    for _ in range(3):
        for name in source:
            j.append(name, 150, torn=True)
        s = analyse(spark, j, store, out)
    agree(s, j.expected())
    assert os.listdir(store / "batches") == ["b000004"]
    for name in source:
        j.append(name, 150)
    s = analyse(spark, j, store, out)
    agree(s, j.expected())
    assert s["ingest"]["batches"] == 2


def test_roll_ups_are_partitioned_by_utc_day_across_midnight_and_compaction(spark, tmp_path, monkeypatch):
    """Journals that cross midnight UTC: each batch's roll-ups are in one directory per kind and
    day (rows/tag=N/day=YYYY-MM-DD), also after compaction, and the answers are the reference's."""
    import speedtui.pipeline.store as store_mod
    monkeypatch.setattr(store_mod, "MAX_BATCHES", 1)
    d = tmp_path / "src"
    simulate(str(d), nodes=3, records=2000, seed=4, start_ts=1_764_201_000.0, minutes=40, malformed=0.0)  # 23:50 UTC
    src = {p[:-len(".jsonl")]: open(d / p).read().splitlines() for p in sorted(os.listdir(d))}
    j = Journals(tmp_path, src)
    store, out = tmp_path / "store", tmp_path / "report"

    def days() -> set[str]:
        (batch,) = os.listdir(store / "batches")
        rows = store / "batches" / batch / "rows"
        return {day for tag in os.listdir(rows) if tag.startswith("tag=")
                for day in os.listdir(rows / tag) if day.startswith("day=")}

    for name in src:
        j.append(name, 100)                                 # the first six minutes or so
    agree(analyse(spark, j, store, out), j.expected())
    assert days() == {"day=2025-11-26"}
    for name in src:
        j.append(name, 10_000)
    agree(analyse(spark, j, store, out), j.expected())      # a second batch, then compacted into one
    assert days() == {"day=2025-11-26", "day=2025-11-27"}


def test_fifo_and_symlink_are_not_read(spark, tmp_path, source):
    j = Journals(tmp_path, source)
    name = sorted(source)[0]
    j.append(name, 50)
    os.mkfifo(j.live / "trap.jsonl")
    os.symlink("/etc/passwd", j.live / "link.jsonl")
    s = analyse(spark, j, tmp_path / "store", tmp_path / "report")
    agree(s, j.expected())
    assert sorted(os.path.basename(p) for p in s["ingest"]["skipped"]) == ["link.jsonl", "trap.jsonl"]


def test_store_in_use_and_damaged_state_are_one_sentence(spark, tmp_path, source):
    from speedtui.pipeline import PipelineError
    j = Journals(tmp_path, source)
    j.append(sorted(source)[0], 10)
    st = Store(str(tmp_path / "store"))
    with st.locked():
        with pytest.raises(PipelineError, match="another analysis is using the store"):
            analyse(spark, j, tmp_path / "store", tmp_path / "report")
    (tmp_path / "store" / "state.json").write_text("{torn")
    with pytest.raises(PipelineError, match="rebuild it with `speedtui analyze --rebuild`"):
        analyse(spark, j, tmp_path / "store", tmp_path / "report")
    s = analyse(spark, j, tmp_path / "store", tmp_path / "report", rebuild=True)
    agree(s, j.expected())


def test_a_store_begun_before_positions_were_checked_says_so_until_rebuilt(spark, tmp_path, source):
    """Read positions kept as older versions kept them (path and offset only) may have been taken
    over by a copy of a journal, its records then kept out for good: every run says so, and how to
    mend it, until `--rebuild` (it was not said at all)."""
    from speedtui.pipeline.summary import format_summary
    j = Journals(tmp_path, source)
    name = sorted(source)[0]
    j.append(name, 40)
    s = analyse(spark, j, tmp_path / "store", tmp_path / "report")
    assert s["ingest"]["unchecked_positions"] is False and "--rebuild" not in format_summary(s)
    state_file = tmp_path / "store" / "state.json"
    state = json.loads(state_file.read_text())
    state["files"] = {h: {"path": e["path"], "offset": e["offset"]} for h, e in state["files"].items()}
    state_file.write_text(json.dumps(state))                   # as a store begun before 7 December
    for more in (20, 20):                                       # the positions are checked from now on,
        j.append(name, more)                                    # the batches still hold what they hold
        s = analyse(spark, j, tmp_path / "store", tmp_path / "report")
        agree(s, j.expected())
        assert s["ingest"]["unchecked_positions"] is True
        assert "run `speedtui analyze --rebuild` once" in format_summary(s)
    s = analyse(spark, j, tmp_path / "store", tmp_path / "report", rebuild=True)
    agree(s, j.expected())
    assert s["ingest"]["unchecked_positions"] is False and "--rebuild" not in format_summary(s)


def _session_state(spark) -> tuple:
    cached = spark._jsparkSession.sharedState().cacheManager().isEmpty()
    return (spark.conf.get("spark.sql.adaptive.enabled"), spark.conf.get("spark.sql.shuffle.partitions"), cached)


def test_a_run_leaves_the_session_as_it_found_it_also_when_its_job_fails(spark, tmp_path, source, monkeypatch):
    """A run is one Spark job and driver-side work: a reused session (the console's) keeps its
    settings and holds no cached data afterwards, also when the job fails; the store is unharmed."""
    import speedtui.pipeline.batches as batches
    from speedtui.pipeline import PipelineError
    j = Journals(tmp_path, source)
    for name in source:
        j.append(name, 200)
    before = _session_state(spark)
    assert before[2], "the session held cached data before the test"
    analyse(spark, j, tmp_path / "store", tmp_path / "report")
    assert _session_state(spark) == before
    # the ingest's query fails
    for name in source:
        j.append(name, 100)
    monkeypatch.setattr(batches, "ingest_sql", lambda *a, **k: "SELECT raise_error('injected failure') AS x")
    with pytest.raises(PipelineError, match="injected failure"):
        analyse(spark, j, tmp_path / "store", tmp_path / "report")
    assert _session_state(spark) == before
    monkeypatch.undo()
    agree(analyse(spark, j, tmp_path / "store", tmp_path / "report"), j.expected())
