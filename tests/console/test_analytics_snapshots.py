"""Snapshots of the analytics view (report with its traffic chart, and no report) at 80x24,
120x36 and 160x48, from the deterministic fixture. Update with --snapshot-update."""

import json

import pytest

from speedtui.environments.fixture import sample_summary

SIZES = [(80, 24), (120, 36), (160, 48)]


@pytest.fixture(autouse=True)
def no_prewarm(monkeypatch):
    """A report exists here, which would pre-warm a Spark child: pictures need none."""
    monkeypatch.setenv("SPEED_ANALYTICS_PREWARM", "0")


def _with_report(fixture_env) -> None:
    root, _, paths = fixture_env
    report = paths.env_dir(root) / "analytics"
    report.mkdir(parents=True)
    (report / "summary.json").write_text(json.dumps(sample_summary()))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_analytics_report(snap_compare, fixture_app, fixture_env, size):
    _with_report(fixture_env)
    assert snap_compare(fixture_app(steady=True), press=["6"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_analytics_no_report(snap_compare, fixture_app, size):
    assert snap_compare(fixture_app(steady=True), press=["6"], terminal_size=size)
