"""The `quota` known-answer vectors (tests/vectors/quota_vectors.json, written by an independent
generator from docs/PROTOCOL.md) against the runtime's reading of entries, its ledger and its token
bucket; and the file is what the generator writes today."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from speed_runtime.core.entry import RegistryEntry
from speed_runtime.core.quota import Ledger, Limits, TokenBucket, entry_limits

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATH = os.path.join(REPO, "tests", "vectors", "quota_vectors.json")
VECTORS = json.load(open(PATH, encoding="utf-8"))


def test_the_vector_file_is_what_the_generator_writes():
    out = subprocess.run([sys.executable, os.path.join(REPO, "tests", "vectors", "generate_quota_vectors.py")],
                         capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(out.stdout) == VECTORS


def check_limits(case: dict) -> None:
    """An entry and a sender name -> the limits (or None) the runtime reads."""
    entry = RegistryEntry.from_json(case["entry"].encode())
    got = entry_limits(entry.features, entry.extra, case["sender"])
    expect = case["expect"]
    if expect is None:
        assert got is None
    else:
        assert got == Limits(expect["pending"], expect["pendingBytes"], expect["rate"], expect["burst"])


def check_admission(case: dict) -> None:
    """Limits and steps -> the runtime ledger's verdict for each send, on the files still present."""
    lim = case["limits"]
    limits = Limits(lim["pending"], lim["pendingBytes"])
    ledger, gone, verdicts, index = Ledger(), set(), [], 0
    for step in case["steps"]:
        if "gone" in step:
            gone.update(f"f{i}" for i in step["gone"])
            continue
        if step.get("answer"):
            verdict = "ok"
        else:
            verdict = ledger.blocking_limit(limits, step["send"])
            if verdict is not None:  # what a sender does before it waits: look the names up
                ledger.prune_front(lambda name: name not in gone)
                ledger.prune_all(lambda name: name not in gone)
                verdict = ledger.blocking_limit(limits, step["send"])
            verdict = verdict or "ok"
        verdicts.append(verdict)
        if verdict == "ok":
            ledger.add(f"f{index}", step["send"])
            index += 1
    assert verdicts == case["expect"]


def check_bucket(case: dict) -> None:
    """A rate, a burst and attempt times -> the delays the runtime's token bucket gives."""
    bucket = TokenBucket(case["rate"], case["burst"])
    delays = []
    for t in case["times_ms"]:
        delay = bucket.delay_ms(t)
        if delay == 0:
            assert bucket.take(t)
        delays.append(delay)
    assert delays == case["expect_delay_ms"]


@pytest.mark.parametrize("case", VECTORS["limits"], ids=lambda c: c["name"])
def test_limits_read_from_an_entry(case):
    check_limits(case)


@pytest.mark.parametrize("case", VECTORS["admission"], ids=lambda c: c["name"])
def test_admission_follows_the_files_still_present(case):
    check_admission(case)


@pytest.mark.parametrize("case", VECTORS["bucket"], ids=lambda c: c["name"])
def test_token_bucket_delays(case):
    check_bucket(case)
