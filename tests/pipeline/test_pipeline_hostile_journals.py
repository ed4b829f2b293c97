"""Journals a member of the environment doctors: a padded copy of another node's journal, a corrupt
or renamed compressed journal, a journal that shrinks while it is copied, names holding control
characters. None of them may hide another journal's records, stop the analysis, or reach the
terminal unescaped; the store and `--full` count the same records."""
from __future__ import annotations

import gzip
import json
import lzma
import os

from speedtui.pipeline import format_summary, journals, load_summary
from speedtui.pipeline.common import visible
from speedtui.pipeline.job import run_incremental, run_pipeline
from speedtui.pipeline.journals import read_head, scan, stage_whole
from speedtui.pipeline.reference import analyze

EVIL = "evil\x1b]2;owned\x07\x9b.jsonl"   # ESC ] 2 ; … BEL sets a terminal's title; U+009B is a CSI


def record(node: str, i: int) -> str:
    return json.dumps({"ts": 1750000000.5 + i, "node": node, "dir": "out", "peer": "p", "type": "MESSAGE",
                       "seq": i, "size": 5, "outcome": "sent"}) + "\n"


def write(path, node: str, first: int, count: int, mode: str = "w") -> None:
    with open(path, mode) as f:
        f.write("".join(record(node, i) for i in range(first, first + count)))


def head_of(path) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        return read_head(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def no_control(value) -> bool:
    text = json.dumps(value, ensure_ascii=False)
    return "\x1b" not in text and "\x07" not in text and "\x9b" not in text


# ------------------------------------------------------------------ A: a padded copy takes nothing over

def test_a_padded_copy_hides_no_records_in_the_store_and_store_equals_full(spark, tmp_path):
    traces = tmp_path / "speed_traces"
    traces.mkdir()
    write(traces / "a.jsonl", "a", 0, 60)
    write(traces / "b.jsonl", "b", 0, 40)
    store, out = str(tmp_path / "store"), str(tmp_path / "report")
    assert run_incremental([str(traces)], store, out, spark=spark)["totals"]["records"] == 100
    write(traces / "a.jsonl", "a", 60, 12, mode="a")            # a grows by 12 genuine records
    first = open(traces / "a.jsonl", "rb").readline()
    fake = traces / "zz-fake.jsonl"
    fake.write_bytes(first + b" \n" * 150000)                   # longer, with a's first line
    s = run_incremental([str(traces)], store, out, spark=spark)
    assert s["ingest"]["rotated"] == []                         # the fake took a's place before
    assert str(fake) in s["ingest"]["skipped"]
    assert s["totals"]["records"] == 112                        # a's 12 new records are in
    state = json.load(open(os.path.join(store, "state.json")))
    entry = state["files"][head_of(traces / "a.jsonl")]
    assert entry["path"] == str(traces / "a.jsonl") and entry["offset"] == os.path.getsize(traces / "a.jsonl")
    fake.unlink()
    write(traces / "a.jsonl", "a", 72, 3, mode="a")
    s = run_incremental([str(traces)], store, out, spark=spark)
    assert s["ingest"]["rotated"] == [] and s["ingest"]["replaced"] == []
    full = run_pipeline([str(traces)], str(tmp_path / "full"), spark=spark)
    assert s["totals"]["records"] == full["totals"]["records"] == 115
    assert s["totals"] == full["totals"] == analyze([str(traces)])["summary"]["totals"]


def test_a_an_offset_beyond_the_end_or_before_changed_bytes_is_not_used(tmp_path):
    """Pure: a known offset that does not fit the file (beyond its end: a state written when
    another file held the journal; or the bytes before it changed) reads the file from its start."""
    traces = tmp_path / "speed_traces"
    traces.mkdir()
    write(traces / "a.jsonl", "a", 0, 20)
    size, head = os.path.getsize(traces / "a.jsonl"), head_of(traces / "a.jsonl")
    known = {head: {"path": str(traces / "a.jsonl"), "offset": 300087}}        # an older store's entry
    plan = scan([str(traces)], known, str(tmp_path / "staging1"))
    assert [(r.start, r.end) for r in plan.ranges] == [(0, size)]
    assert plan.files[head]["offset"] == size and plan.replaced == [str(traces / "a.jsonl")]
    # the journal's name gone, another name holds its first line but not its bytes: not read on from there
    done = plan.files
    os.replace(traces / "a.jsonl", tmp_path / "away.jsonl")
    fake = traces / "a-copy.jsonl"
    fake.write_bytes(open(tmp_path / "away.jsonl", "rb").readline() + b" \n" * 4000)
    plan = scan([str(traces)], done, str(tmp_path / "staging2"))
    assert plan.rotated == [] and [(r.start, r.end) for r in plan.ranges] == [(0, os.path.getsize(fake))]
    # a rotation (rename: the same file, or the same bytes before the offset) is read on
    os.replace(tmp_path / "away.jsonl", traces / "a.jsonl.1")
    write(traces / "a.jsonl.1", "a", 20, 2, mode="a")
    fake.unlink()
    plan = scan([str(traces)], done, str(tmp_path / "staging3"))
    assert plan.rotated == [f"{traces / 'a.jsonl'} -> {traces / 'a.jsonl.1'}"]
    assert [(r.start, r.end) for r in plan.ranges] == [(size, os.path.getsize(traces / "a.jsonl.1"))]


# ------------------------------------------------------------------ B: compressed journals

def test_b_compressed_journals_are_read_in_every_mode_and_a_corrupt_one_is_skipped(spark, tmp_path):
    traces = tmp_path / "speed_traces"
    traces.mkdir()
    write(traces / "a.jsonl", "a", 0, 10)
    (traces / "z.jsonl.1.gz").write_bytes(gzip.compress("".join(record("z", i) for i in range(20)).encode()))
    (traces / "junk.jsonl.gz").write_bytes(b"this is not gzip\n")
    (traces / "x.jsonl.2.XZ").write_bytes(lzma.compress("".join(record("x", i) for i in range(5)).encode()))
    store = run_incremental([str(traces)], str(tmp_path / "store"), str(tmp_path / "report"), spark=spark)
    full = run_pipeline([str(traces)], str(tmp_path / "full"), spark=spark)
    reference = analyze([str(traces)])["summary"]   # the oracle reads them as a run does (it stopped at junk)
    for s in (store, full, reference):
        assert s["totals"]["records"] == 35 and s["malformed_lines"] == 0
    problem = f"{traces / 'junk.jsonl.gz'}: not a readable gzip file; skipped"
    assert str(traces / "junk.jsonl.gz") in store["ingest"]["skipped"]
    assert store["ingest"]["problems"] == [problem]
    # a whole run reports what it skipped as the store does, on the terminal too
    assert full["staging"] == {"skipped": [str(traces / "junk.jsonl.gz")], "problems": [problem]}
    assert load_summary(str(tmp_path / "full"))["staging"] == full["staging"]
    for s in (store, full):
        assert f"1 journal skipped: {problem}" in format_summary(s).splitlines()
    # read once: the next run finds nothing new in it (and does not decompress it again)
    again = run_incremental([str(traces)], str(tmp_path / "store"), str(tmp_path / "report"), spark=spark)
    assert again["ingest"]["new_bytes"] == 0 and again["totals"]["records"] == 35


def test_b_stage_whole_decompresses_and_lists_what_does_not_decompress(tmp_path):
    traces = tmp_path / "speed_traces"
    traces.mkdir()
    data = "".join(record("z", i) for i in range(20)).encode()
    (traces / "z.jsonl.1.gz").write_bytes(gzip.compress(data[:900]) + gzip.compress(data[900:]))  # two members
    (traces / "cut.jsonl.gz").write_bytes(gzip.compress(data)[:-30])                            # ends early
    (traces / "junk.jsonl.gz").write_bytes(b"this is not gzip\n")
    problems: list[str] = []
    staged, skipped = stage_whole([str(traces)], str(tmp_path / "staging"), problems=problems)
    assert [open(p, "rb").read() for p in staged] == [data]
    assert not any(p.endswith(".gz") for p in staged)
    assert sorted(os.path.basename(p) for p in skipped) == ["cut.jsonl.gz", "junk.jsonl.gz"]
    assert len(problems) == 2 and all(line.endswith("; skipped") for line in problems)


def test_b_a_decompression_bomb_is_skipped_not_written_out(tmp_path, monkeypatch):
    """A member's small compressed file that decompresses to far more than a journal would (1 MB
    of gzip holds 1 GB of zeros) is skipped and listed: written out whole, it would fill the disk
    the staged copies go to. (Bounds lowered here: 2 MiB and 10 times its size.)"""
    monkeypatch.setattr(journals, "INFLATE_FLOOR", 2 << 20)
    monkeypatch.setattr(journals, "INFLATE_RATIO", 10)
    traces = tmp_path / "speed_traces"
    traces.mkdir()
    (traces / "bomb.jsonl.gz").write_bytes(gzip.compress(b"\n" * (64 << 20)))  # 64 MiB in ~65 KB
    data = "".join(record("z", i) for i in range(20)).encode()
    (traces / "z.jsonl.1.gz").write_bytes(gzip.compress(data))
    problems: list[str] = []
    staging = tmp_path / "staging"
    staged, skipped = stage_whole([str(traces)], str(staging), problems=problems)
    assert [open(p, "rb").read() for p in staged] == [data]
    assert [os.path.basename(p) for p in skipped] == ["bomb.jsonl.gz"]
    assert "decompresses to more than" in problems[0]
    assert sum(f.stat().st_size for f in staging.rglob("*") if f.is_file()) < 1 << 20  # nothing of it kept


# ------------------------------------------------------------------ C: a journal that shrinks while it is copied

def shrink_while_copied(monkeypatch, name: str) -> None:
    """The journal `name` is cut to 60 bytes just as its bytes are copied (what a member's loop of
    ftruncate does at the wrong moment), deterministically."""
    real = journals.copy_fd

    def copy_fd(src_fd, start, end, out_path, shown, *args, **kw):
        if os.path.basename(shown) == name:
            os.truncate(shown, 60)
        return real(src_fd, start, end, out_path, shown, *args, **kw)

    monkeypatch.setattr(journals, "copy_fd", copy_fd)


def test_c_a_journal_that_shrinks_while_copied_is_skipped_and_full_goes_on(spark, tmp_path, monkeypatch):
    traces = tmp_path / "speed_traces"
    traces.mkdir()
    write(traces / "a.jsonl", "a", 0, 10)
    write(traces / EVIL, "e", 0, 50)
    shrink_while_copied(monkeypatch, EVIL)
    s = run_pipeline([str(traces)], str(tmp_path / "full"), spark=spark)
    assert s["totals"]["records"] == 10
    assert s["staging"]["problems"] == [f"{visible(str(traces / EVIL))}: became shorter while it was read; skipped"]


def test_c_the_store_skips_it_lists_it_visibly_and_reads_it_next_time(tmp_path, monkeypatch):
    traces = tmp_path / "speed_traces"
    traces.mkdir()
    write(traces / "a.jsonl", "a", 0, 10)
    write(traces / EVIL, "e", 0, 50)
    shrink_while_copied(monkeypatch, EVIL)
    plan = scan([str(traces)], {}, str(tmp_path / "staging"))
    assert [os.path.basename(r.path) for r in plan.ranges] == ["a.jsonl"]
    assert len(plan.skipped) == 1 and len(plan.problems) == 1
    assert no_control([plan.skipped, plan.problems])
    assert "evil\\x1b]2;owned\\x07\\x9b.jsonl" in plan.problems[0] and "shorter" in plan.problems[0]
    assert len(plan.files) == 1                     # nothing of it is known: read whole next time
    write(traces / EVIL, "e", 0, 50)
    problems: list[str] = []
    staged, skipped = stage_whole([str(traces)], str(tmp_path / "staging2"), problems=problems)
    assert len(staged) == 1 and no_control([skipped, problems]) and "shorter" in problems[0]
    monkeypatch.undo()
    fd = os.open(traces / EVIL, os.O_RDONLY)
    try:
        journals.copy_fd(fd, 0, 10_000, str(tmp_path / "x"), str(traces / EVIL))
    except OSError as exc:
        assert no_control(str(exc))
    else:
        raise AssertionError("a short copy must raise")
    finally:
        os.close(fd)
    write(traces / EVIL, "e", 0, 50)
    plan = scan([str(traces)], plan.files, str(tmp_path / "staging3"))   # read whole next time
    assert [os.path.basename(r.path) for r in plan.ranges] == [EVIL] and plan.ranges[0].start == 0


def test_c_names_in_every_listing_are_visible(tmp_path):
    traces = tmp_path / "speed_traces"
    traces.mkdir()
    write(traces / EVIL, "e", 0, 3)
    os.mkfifo(traces / ("fifo\x1b[2J.jsonl"))
    (traces / ("torn\x1b.jsonl")).write_text('{"ts":')
    plan = scan([str(traces)], {}, str(tmp_path / "staging"))
    assert len(plan.skipped) == 1 and len(plan.waiting) == 1
    known = plan.files
    os.replace(traces / EVIL, traces / (EVIL + ".1"))           # rotated
    plan = scan([str(traces)], known, str(tmp_path / "staging2"))
    assert len(plan.rotated) == 1
    assert no_control([plan.skipped, plan.waiting, plan.rotated, plan.replaced, plan.problems])


def test_a_a_padded_copy_planted_before_the_first_run_takes_nothing_over(tmp_path):
    """Pure: no state yet, two files with node a's first line: the one named for its node
    (a.jsonl, as the runtime names it) is the journal, however long the other is."""
    traces = tmp_path / "speed_traces"
    traces.mkdir()
    write(traces / "a.jsonl", "a", 0, 20)
    first = open(traces / "a.jsonl", "rb").readline()
    (traces / "0-fake.jsonl").write_bytes(first + b" \n" * 20000)
    (traces / "zz-fake.jsonl").write_bytes(first + b" \n" * 20000)
    plan = scan([str(traces)], {}, str(tmp_path / "staging"))
    assert [os.path.basename(r.path) for r in plan.ranges] == ["a.jsonl"]
    write(traces / "a.jsonl", "a", 20, 5, mode="a")
    plan = scan([str(traces)], plan.files, str(tmp_path / "staging2"))
    assert [os.path.basename(r.path) for r in plan.ranges] == ["a.jsonl"]
    assert sorted(os.path.basename(p) for p in plan.skipped) == ["0-fake.jsonl", "zz-fake.jsonl"]
