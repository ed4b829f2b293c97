"""The analytics view's tables of logical messages, threat scores and durable messages, rendered
from the reference's report of the extension journals (tests/pipeline/pipeline_journals.py)."""
from __future__ import annotations

import os
import sys

from rich.console import Console

from speedtui.pipeline.reference import analyze
from speedtui.ui.views.analytics import extension_tables, summary_renderable

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pipeline"))
from pipeline_journals import write_extension_journals  # noqa: E402


def _text(renderable) -> str:
    console = Console(width=160, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_extension_tables_show_messages_threats_and_durable(tmp_path):
    summary = analyze([write_extension_journals(tmp_path / "traces")])["summary"]
    text = _text(summary_renderable(summary))
    assert "logical messages (4 sent, 7 chunks, 3 retransmissions, 1 send errors)" in text
    assert "threat scores and quarantines (1 quarantined now)" in text
    assert "durable messages" in text
    line = next(x for x in text.splitlines() if x.split()[:2] == ["b", "y"])
    assert line.split()[-1] == "quarantined" and "5.5" in line


def test_a_report_without_the_sections_shows_no_extension_table():
    assert extension_tables({"totals": {}}) == []
    assert extension_tables({"messages": {"links": []}, "threats": {"pairs": []}, "durable": {"links": []}}) == []
