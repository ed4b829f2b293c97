"""Installed without the `analytics` extra (a fresh virtual environment, `pip install .`): `speedtui
analyze` and the console's analytics child each answer with one sentence naming what to install,
never a traceback."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from speedtui.pipeline.common import PipelineError
from speedtui.pipeline.worker import AnalyticsWorker

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SENTENCE = "the analytics extra is not installed (no Python module pyspark): install it with " \
           "`pip install 'speedtui[analytics]'`."


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    """(python, env) of a new virtual environment with the project installed without extras."""
    d = tmp_path_factory.mktemp("bare")
    src = d / "src"                                      # a copy: the build leaves nothing in the repository
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(REPO, name), src / name)
    for package in ("speed_runtime", "speedtui"):
        shutil.copytree(os.path.join(REPO, package), src / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "venv", str(d / "venv")], check=True, timeout=300)
    python = str(d / "venv" / "bin" / "python")
    p = subprocess.run([python, "-m", "pip", "install", "-q", str(src)], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(XDG_DATA_HOME=str(d / "data"), XDG_CONFIG_HOME=str(d / "config"))
    check = subprocess.run([python, "-c", "import pyspark"], capture_output=True, text=True, env=env, cwd=d)
    assert check.returncode != 0 and "No module named 'pyspark'" in check.stderr
    return python, env, d


@pytest.mark.timeout(900)
def test_analyze_without_the_extra_is_one_sentence(bare, tmp_path):
    python, env, d = bare
    (tmp_path / "root" / "speed_traces").mkdir(parents=True)
    speedtui = os.path.join(os.path.dirname(python), "speedtui")
    for args in (["analyze", "--dir", str(tmp_path / "root")],
                 ["analyze", "--traces", str(tmp_path / "root" / "speed_traces"), "--out", str(tmp_path / "o")],
                 ["analytics-server", "start"]):
        p = subprocess.run([speedtui, *args], capture_output=True, text=True, env=env, cwd=d, timeout=300)
        assert p.returncode == 2, (args, p.stderr)
        assert "Traceback" not in p.stderr
        assert p.stderr.strip() == f"error: {SENTENCE}", p.stderr


@pytest.mark.timeout(900)
def test_the_console_analytics_child_without_the_extra_is_one_sentence(bare, tmp_path, monkeypatch):
    """What the Analytics view runs (worker.AnalyticsWorker), with the bare environment's Python."""
    python, env, _ = bare
    for k in ("PYTHONPATH", "VIRTUAL_ENV"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(sys, "executable", python)
    worker = AnalyticsWorker(str(tmp_path / "analytics.log"), idle_seconds=30)
    try:
        with pytest.raises(PipelineError) as err:
            worker.analyse({"traces": [str(tmp_path)], "store": str(tmp_path / "store"), "out": str(tmp_path / "o")})
        assert str(err.value) == SENTENCE
    finally:
        worker.close()
