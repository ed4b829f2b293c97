"""What a hostile member can write into its journal must not reach `speedtui analyze`'s terminal as
control sequences, make totals wrap, crash the run after Spark with a traceback, or swell
summary.json (docs/ANALYTICS.md)."""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys

import pytest

from speedtui.pipeline.commands import _StderrProgress, add_subcommands
from speedtui.pipeline.common import PipelineError, iso, parse_time
from speedtui.pipeline.reference import analyze
from speedtui.pipeline import summary as summary_module
from speedtui.pipeline.summary import format_summary, write_summary

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DRIVER = ("import sys, argparse; from speedtui.pipeline.commands import add_subcommands; "
          "p = argparse.ArgumentParser(prog='speedtui'); s = p.add_subparsers(required=True); "
          "add_subcommands(s); a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a))")
T0 = 1_750_000_000.0
EVIL_NODE = "a\x1b]2;PWNED\x07\x1b[2J"
EVIL_PEER = "b\u009b31m\nforged line"
EVIL_REASON = "bad_tag\x1b[31m\r"
#: every control character a terminal acts on
CONTROLS = [chr(c) for c in (*range(0x00, 0x20), *range(0x7f, 0xa0))]


def _journal(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _hostile_records():
    recs = []
    for i in range(6):
        recs.append({"ts": T0 + i, "node": EVIL_NODE, "dir": "out", "peer": EVIL_PEER, "type": "MESSAGE",
                     "seq": i, "size": 10, "outcome": "sent"})
        recs.append({"ts": T0 + i, "node": EVIL_NODE, "dir": "in", "peer": EVIL_PEER, "type": "MESSAGE",
                     "seq": i, "size": 10, "outcome": "rejected", "reason": EVIL_REASON})
    return recs


def _assert_clean(text: str, lines: int | None = None):
    for ch in CONTROLS:
        if ch != "\n":
            assert ch not in text, repr(ch)
    assert not any(line.startswith(("forged line", "error: forged")) for line in text.split("\n"))
    if lines is not None:
        assert text.count("\n") == lines


# ---- defect 1: member text on the terminal -------------------------------------------------------

def test_format_summary_escapes_member_text(tmp_path):
    path = _journal(tmp_path / "t" / "evil.jsonl", _hostile_records())
    s = analyze([path])["summary"]
    assert s["top_talkers"][0]["source"] == EVIL_NODE                 # the data stays as written
    text = format_summary({**s, "out_dir": str(tmp_path / "o")})
    _assert_clean(text)
    assert "a\\x1b]2;PWNED\\x07\\x1b[2J -> b\\x9b31m\\x0aforged line" in text
    assert "bad_tag\\x1b[31m\\x0d" in text


def test_analyze_error_sentences_and_progress_escape_member_text(tmp_path, capsys):
    ap = argparse.ArgumentParser()
    add_subcommands(ap.add_subparsers(required=True))
    missing = str(tmp_path / "x\x1b]2;PWNED\x07\nerror: forged")
    args = ap.parse_args(["analyze", "--embedded", "--traces", missing, "--out", str(tmp_path / "o")])
    assert args.func(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "\x1b" not in err and "\x07" not in err
    assert "x\\x1b]2;PWNED\\x07\\x0aerror: forged does not exist" in err
    _StderrProgress()(0.5, "staging " + EVIL_NODE)
    _, err = capsys.readouterr()
    _assert_clean(err, lines=1)


def test_spark_analyze_prints_member_text_escaped(spark, tmp_path, capsys):
    _journal(tmp_path / "t" / "evil.jsonl", _hostile_records())
    ap = argparse.ArgumentParser()
    add_subcommands(ap.add_subparsers(required=True))
    args = ap.parse_args(["analyze", "--embedded", "--traces", str(tmp_path / "t"), "--out", str(tmp_path / "o")])
    assert args.func(args) == 0
    out, err = capsys.readouterr()
    _assert_clean(out)
    _assert_clean(err.replace("\r\x1b[K", ""))                       # the progress line's own redraw
    assert "top talker a\\x1b]2;PWNED\\x07\\x1b[2J -> b\\x9b31m\\x0aforged line: 6 envelopes" in out
    doc = json.load(open(tmp_path / "o" / "summary.json"))
    assert doc["top_talkers"][0]["source"] == EVIL_NODE            # summary.json keeps the data (JSON escapes)


# ---- defect 2: --since / --until -----------------------------------------------------------------

@pytest.mark.parametrize("text", ["1e20", "nan", "NaN", "inf", "-inf", "-1", "100000000001",
                                  "9999-01-01T00:00:00Z", "2025-13-45", "1e400"])
def test_parse_time_refuses_times_no_journal_has(text):
    with pytest.raises(PipelineError) as exc:
        parse_time(text)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e20, -1e20, 1e308, -1.0, 1e11 + 1])
def test_parse_time_refuses_numbers_and_iso_never_raises(value):
    with pytest.raises(PipelineError):
        parse_time(value)
    assert iso(value) is None or isinstance(iso(value), str)
    assert parse_time("1750000000") == T0 and parse_time("2025-06-15T15:06:40Z") == T0
    assert parse_time(0) == 0.0 and parse_time("1e11") == 1e11


@pytest.mark.parametrize("since", ["1e20", "nan"])
def test_analyze_bad_since_is_one_sentence_before_spark(tmp_path, since):
    """Exit 2 with one sentence before anything of Spark or Java is looked at (a JAVA_HOME without
    java would be the error otherwise)."""
    (tmp_path / "t").mkdir()
    env = dict(os.environ, JAVA_HOME=str(tmp_path / "nojava"), PYTHONPATH=REPO)
    env.pop("SPEED_ANALYTICS_REMOTE", None)
    p = subprocess.run([sys.executable, "-c", DRIVER, "analyze", "--embedded", "--traces", str(tmp_path / "t"),
                        "--out", str(tmp_path / "o"), "--since", since], capture_output=True, text=True,
                       env=env, timeout=120, cwd=REPO)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.count("\n") == 1 and "out of range" in p.stderr and "java" not in p.stderr


# ---- defect 3: sizes that would wrap the 64-bit totals ------------------------------------------

def _size_records():
    big = (1 << 63) - 1
    env = lambda i, size: {"ts": T0 + 120 * i, "node": "a", "dir": "out", "peer": "b",  # noqa: E731
                           "type": "EVENT", "seq": i, "size": size, "outcome": "sent"}
    return [env(0, big), env(1, big), env(2, 10), env(3, -1), env(4, 1 << 53), env(5, (1 << 53) + 1),
            {"ts": T0, "node": "a", "kind": "message", "dir": "out", "peer": "b", "event": "sent",
             "size": 5, "chunks": -2},
            {"ts": T0, "node": "a", "kind": "lease", "subject": "a", "event": "registered", "size": -1}]


def test_reference_counts_out_of_range_sizes_as_malformed(tmp_path):
    s = analyze([_journal(tmp_path / "t" / "a.jsonl", _size_records())])["summary"]
    assert s["malformed_lines"] == 5                      # two of 2^63-1, -1, 2^53+1, chunks -2
    assert s["totals"]["envelopes_sent"] == 2 and s["totals"]["bytes_sent"] == 10 + (1 << 53)


def test_spark_agrees_and_does_not_wrap(spark, tmp_path):
    from speedtui.pipeline.job import run_pipeline
    path = _journal(tmp_path / "t" / "a.jsonl", _size_records())
    s = run_pipeline([path], str(tmp_path / "o"), spark=spark)
    ref = analyze([path])["summary"]
    assert s["malformed_lines"] == 5 and s["totals"]["bytes_sent"] == 10 + (1 << 53)
    for key in ("totals", "malformed_lines", "top_talkers", "traffic_over_time"):
        assert s[key] == ref[key], key
    assert "(9,007,199,254,741,002 bytes)" in format_summary(s)


def test_driver_merge_refuses_sums_past_64_bits():
    import pyarrow as pa
    from speedtui.pipeline.report import check_sums
    rows = pa.table({"bytes": pa.array([1 << 62, 1 << 62, 1], pa.int64()), "chunks": pa.array([0, 0, 0], pa.int64())})
    with pytest.raises(PipelineError, match="64-bit"):
        check_sums(rows)
    check_sums(pa.table({"bytes": pa.array([1 << 62, None], pa.int64()), "chunks": pa.array([1, 2], pa.int64())}))


# ---- defect 4: summary.json's size ---------------------------------------------------------------

def test_ingest_lists_are_capped_in_summary_json(tmp_path):
    s = analyze([_journal(tmp_path / "t" / "a.jsonl", _hostile_records())])["summary"]
    n = 100_000
    s["out_dir"] = str(tmp_path / "o")
    s["ingest"] = {"store": str(tmp_path / "store"), "batches": 1, "new_bytes": 0, "journals": n,
                   "waiting": [f"/j/{i:06d}.jsonl" for i in range(n)], "skipped": [f"/s/{i}" for i in range(n)],
                   "rotated": [f"/r/{i}" for i in range(n)], "replaced": ["/x"]}
    os.makedirs(tmp_path / "o")
    write_summary(None, str(tmp_path / "o"), s)
    path = tmp_path / "o" / "summary.json"
    assert path.stat().st_size < 200_000
    ing = json.load(open(path))["ingest"]
    cap = summary_module.INGEST_LIST_CAP
    for k in ("waiting", "skipped", "rotated"):
        assert len(ing[k]) == cap and ing[f"{k}_more"] == n - cap
    assert ing["waiting"][0] == "/j/000000.jsonl" and ing["replaced"] == ["/x"] and "replaced_more" not in ing
    assert f", {n} rotated, 1 replaced" in format_summary(s)


def test_the_pipelines_inline_rule_for_untrusted_text_is_the_runtimes():
    """The pipeline ships alone too (spark-submit), with the runtime's rule copied inline: the
    same on every code point."""
    from speed_runtime.core.visible import visible
    from speedtui.pipeline.common import inline_visible
    every = "".join(map(chr, range(0x110000)))
    assert inline_visible(every) == visible(every)
