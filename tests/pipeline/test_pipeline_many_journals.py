"""An environment of many traced nodes: thousands of small journals. Spark opens every file it
reads and lists more than 32 paths in a job of one task per path, so the staged copies reach it
joined into bundles (journals.bundle): 5,000 journals of five records took 40 s to analyse, one
file of their lines 16 s. A bundle must read exactly as its parts did."""
from __future__ import annotations

import gzip
import os

import pytest

from speedtui.pipeline import batches
from speedtui.pipeline.job import run_incremental, run_pipeline
from speedtui.pipeline.journals import bundle
from speedtui.pipeline.reference import analyze
from speedtui.pipeline.simulate import simulate

KEYS = ("totals", "top_talkers", "rejections", "traffic_over_time", "time_range", "spc", "availability",
        "other_records", "messages", "threats", "durable")


def _write(path, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


def test_small_copies_are_joined_in_order_with_every_line_whole(tmp_path):
    staging = tmp_path / "staging"
    staging.mkdir()
    parts = [_write(staging / "000-a.jsonl", b"a1\na2\n"),
             _write(staging / "001-b.jsonl", b"b1\nb2"),         # a torn last line: no newline
             _write(staging / "002-c.jsonl", b""),               # nothing to read
             _write(staging / "003-d.jsonl.gz", gzip.compress(b"d1\n")),
             _write(staging / "004-e.jsonl.1", b"e1\n"),         # a rotated journal: plain text
             _write(staging / "005-f.jsonl", b"f" * 40 + b"\n"),  # as large as a bundle: alone
             _write(staging / "006-g.jsonl", b"g1\n")]
    out = bundle(parts, str(staging), limit=12)
    kept = [p for p in out if not os.path.basename(p).startswith("bundle-")]
    assert kept == [parts[3], parts[5]]
    joined = [p for p in out if p not in kept]
    # a and b (12 bytes with b's added newline) fill the first bundle; e and g go in the next
    assert [open(p, "rb").read() for p in joined] == [b"a1\na2\nb1\nb2\n", b"e1\ng1\n"]
    assert sorted(os.listdir(staging)) == sorted(os.path.basename(p) for p in out)  # the parts are gone
    assert all(os.stat(p).st_mode & 0o777 == 0o600 for p in joined)


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """240 journals holding between them the lines of a simulated environment's three."""
    src = tmp_path_factory.mktemp("src")
    simulate(str(src), nodes=3, records=1200, seed=4, minutes=10, malformed=0.0)
    lines = [line for name in sorted(os.listdir(src)) for line in open(src / name).read().splitlines()]
    traces = tmp_path_factory.mktemp("root") / "speed_traces"
    traces.mkdir()
    for i in range(240):
        (traces / f"n{i:03d}.jsonl").write_text("".join(line + "\n" for line in lines[i::240]))
    return traces


@pytest.fixture
def paths_read(monkeypatch):
    """The paths each Spark read of the journals was given."""
    seen: list[list[str]] = []
    real = batches.read_records

    def read_records(spark, paths):
        seen.append(list(paths))
        return real(spark, paths)

    monkeypatch.setattr(batches, "read_records", read_records)
    return seen


def test_many_journals_reach_spark_as_one_bundle_and_read_as_they_are(spark, tmp_path, many, paths_read):
    expected = analyze([str(many)])["summary"]
    full = run_pipeline([str(many)], str(tmp_path / "full"), spark=spark)
    stored = run_incremental([str(many)], str(tmp_path / "store"), str(tmp_path / "report"), spark=spark)
    assert [len(p) for p in paths_read] == [1, 1]
    for key in KEYS:
        assert full[key] == expected[key], key
        assert stored[key] == expected[key], key
