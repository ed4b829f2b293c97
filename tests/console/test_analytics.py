"""Analytics view: the pipeline runs in a worker with progress; its summary is shown and kept."""

import json

from speedtui.services.history import AuditLog

from .conftest import SIZE, run_async, wait_for


@run_async
async def test_analysis_runs_in_worker_and_shows_summary(fixture_app, fixture_env):
    """The real pipeline (a local SparkSession) runs from the view; what it writes agrees with the
    pure-Python reference over the same journals."""
    from speedtui.pipeline.reference import analyze

    root, key, paths = fixture_env
    app = fixture_app(steady=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("6")
        await pilot.press("a")
        view = app.view_widget("analytics")
        await wait_for(pilot, lambda: view.running, timeout=30, what="the analysis to start")
        await wait_for(pilot, lambda: not view.running, timeout=600, what="the analysis to finish")
        assert "report written" in str(view.query_one("#an-status").render()), view.query_one("#an-status").render()
        assert view.summary["spc"][0]["service"] == "calculateTax"
    written = json.loads((paths.analytics_dir / "summary.json").read_text())
    expected = analyze([str(root / "speed_traces")])["summary"]
    assert written["engine"] != expected["engine"]  # Spark wrote it, the reference checks it
    assert written["totals"] == expected["totals"] and written["totals"]["malformed"] == 2
    assert [(r["target"], r["service"], r["calls"], r["successes"]) for r in written["spc"]] == \
        [(r["target"], r["service"], r["calls"], r["successes"]) for r in expected["spc"]]
    assert AuditLog(paths.audit_log(root)).entries()[-1].action == "analyze"
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
