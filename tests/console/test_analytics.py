"""Analytics view: the pipeline runs in a worker with progress; its summary is shown and kept."""

import json

from speedtui.fixture import sample_summary
from speedtui.models.history import AuditLog

from .conftest import SIZE, run_async, wait_for


@run_async
async def test_analysis_runs_in_worker_and_shows_summary(fixture_app, fixture_env, monkeypatch):
    import speedtui.pipeline.job as job

    root, key, paths = fixture_env
    seen = {}

    def fake_run_pipeline(inputs, out_dir, master=None, since=None, until=None, progress=None, **kw):
        seen["inputs"] = inputs
        for i in range(5):
            progress(i / 4, f"step {i}")
        s = sample_summary()
        from pathlib import Path

        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "summary.json").write_text(json.dumps(s))
        return s

    monkeypatch.setattr(job, "run_pipeline", fake_run_pipeline)
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("6")
        await pilot.press("a")
        view = app.view_widget("analytics")
        await wait_for(pilot, lambda: not view.running, what="analysis finished")
        assert seen["inputs"] == [str(root / "speed_traces")]
        assert "report written" in str(view.query_one("#an-status").render())
        assert view.summary["spc"][0]["service"] == "calculateTax"
    assert json.loads((paths.analytics_dir / "summary.json").read_text())["totals"]["records"] == 38
    assert AuditLog(paths.audit_log).entries()[-1].action == "analyze"
    # the next start shows the last report at once
    app2 = fixture_app(steady=True)
    async with app2.run_test(size=SIZE) as pilot:
        await pilot.press("6")
        assert "last report" in str(app2.view_widget("analytics").query_one("#an-status").render())


@run_async
async def test_analysis_failure_is_one_sentence(fixture_app, monkeypatch):
    import speedtui.pipeline.job as job

    def boom(*a, **k):
        raise job.PipelineError("Java is not installed.")

    monkeypatch.setattr(job, "run_pipeline", boom)
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("6")
        await pilot.press("a")
        view = app.view_widget("analytics")
        await wait_for(pilot, lambda: not view.running, what="analysis finished")
        assert "analysis failed: Java is not installed." in str(view.query_one("#an-status").render())
