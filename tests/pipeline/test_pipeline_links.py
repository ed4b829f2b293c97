"""Journals are read through the descriptor that was checked, never reopened by name, and links a
member of the environment plants in speed_traces/ are never followed: not by `--full`/`--traces`
(every line), not by the store, not when a name is swapped for a link between the check and the
read. The planted files hold valid records of a node called "secret": it must appear nowhere."""
from __future__ import annotations

import json
import os

from speedtui.pipeline.job import run_incremental, run_pipeline

SECRET = ('{"ts":1750000000.5,"node":"secret","dir":"out","peer":"leak","type":"MESSAGE","seq":1,"size":7,'
          '"outcome":"sent"}\n')
HONEST = ('{"ts":1750000001.5,"node":"a","dir":"out","peer":"b","type":"MESSAGE","seq":1,"size":5,'
          '"outcome":"sent"}\n')


def environment(tmp_path):
    """ROOT/speed_traces with one honest journal, and a private file elsewhere that the operator can read."""
    traces = tmp_path / "root" / "speed_traces"
    traces.mkdir(parents=True)
    (traces / "a.jsonl").write_text(HONEST * 3)
    private = tmp_path / "private.jsonl"
    private.write_text(SECRET * 5)
    os.chmod(private, 0o600)
    return traces, private


def leaked(summary: dict, out) -> bool:
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        text = json.dumps(summary) + f.read()
    return "secret" in text or "leak" in text


def test_full_analysis_follows_no_link(spark, tmp_path):
    traces, private = environment(tmp_path)
    os.symlink(private, traces / "link.jsonl")
    out = tmp_path / "report"
    s = run_pipeline([str(traces)], str(out), spark=spark)
    assert not leaked(s, out)
    assert s["totals"]["records"] == 3 and s["totals"]["nodes"] == 1


def test_store_reads_what_it_checked_even_if_the_name_is_swapped(spark, tmp_path, monkeypatch):
    """Between the check (open without following, fstat) and the copy the journal's name becomes a
    link to the private file: what is read is the journal that was checked."""
    import speedtui.pipeline.journals as journals
    traces, private = environment(tmp_path)
    real_read_head = journals.read_head

    def read_head_then_swap(fd, size):
        head = real_read_head(fd, size)
        swap = traces / "swap.tmp"
        os.symlink(private, swap)
        os.replace(swap, traces / "a.jsonl")            # the name now points at the private file
        return head

    monkeypatch.setattr(journals, "read_head", read_head_then_swap)
    out = tmp_path / "report"
    s = run_incremental([str(traces)], str(tmp_path / "store"), str(out), spark=spark)
    assert not leaked(s, out)
    assert s["totals"]["records"] == 3 and s["ingest"]["new_bytes"] == len(HONEST) * 3


def test_store_follows_no_linked_traces_directory(spark, tmp_path):
    """ROOT/speed_traces itself replaced by a link to another directory is not read."""
    traces, private = environment(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.replace(private, elsewhere / "x.jsonl")
    linked = tmp_path / "root2" / "speed_traces"
    linked.parent.mkdir()
    os.symlink(elsewhere, linked)
    out = tmp_path / "report"
    s = run_incremental([str(linked)], str(tmp_path / "store"), str(out), spark=spark)
    assert not leaked(s, out)
    assert s["totals"]["records"] == 0 and s["ingest"]["skipped"] == [str(linked)]
