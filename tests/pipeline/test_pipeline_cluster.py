"""The same job on a real Spark standalone cluster started from the pip-installed pyspark alone:
a master and a worker (loopback only, the worker's files in a temp dir), `speedtui analyze
--master spark://127.0.0.1:PORT` in its own process; the answers equal the local run's. Both
JVMs (and the worker's executors) are always stopped."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from speedtui.pipeline.job import run_pipeline
from speedtui.pipeline.simulate import simulate

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEYS = ("totals", "top_talkers", "rejections", "traffic_over_time", "time_range", "spc", "availability",
        "malformed_lines", "empty")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_class() -> str:
    from pyspark.find_spark_home import _find_spark_home
    return os.path.join(_find_spark_home(), "bin", "spark-class")


def wait_for_line(path: str, text: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path, errors="replace") as f:
            if text in f.read():
                return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    with open(path, errors="replace") as f:
        raise AssertionError(f"no {text!r} in {path}:\n{f.read()[-3000:]}")


def stop_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=20)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture
def cluster(tmp_path):
    """(master URL, env for the driver); master and worker in their own process groups."""
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(tmp_path / "logs"),
               SPARK_WORKER_DIR=str(tmp_path / "work"), SPARK_NO_DAEMONIZE="1")
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []

    def start(args: list[str], log: str) -> subprocess.Popen:
        with open(tmp_path / log, "wb") as out:
            p = subprocess.Popen([spark_class(), *args], stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=env, start_new_session=True, cwd=tmp_path)
        procs.append(p)
        return p

    try:
        master = start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                        "--webui-port", str(free_port())], "master.log")
        wait_for_line(str(tmp_path / "master.log"), "I have been elected leader", master, 180)
        worker = start(["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", "1",
                        "--memory", "1g", "--work-dir", str(tmp_path / "work"),
                        "--webui-port", str(free_port())], "worker.log")
        wait_for_line(str(tmp_path / "worker.log"), "Successfully registered with master", worker, 180)
        yield url, env
    finally:
        for p in reversed(procs):
            stop_group(p)
        for p in procs:
            assert p.poll() is not None, "a cluster JVM is still running"


@pytest.mark.timeout(900)
def test_cluster_run_equals_local_run(spark, cluster, tmp_path):
    url, env = cluster
    traces = str(tmp_path / "traces")
    simulate(traces, nodes=4, records=6000, seed=3, minutes=20, malformed=0.002)
    local = run_pipeline([traces], str(tmp_path / "local"), spark=spark)
    env = dict(env, SPEED_SPARK_DRIVER_MEMORY="1g", PYTHONPATH=REPO)
    p = subprocess.run([sys.executable, "-m", "speedtui.pipeline.commands", "analyze", "--traces", traces,
                        "--out", str(tmp_path / "remote"), "--master", url, "--quiet"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    remote = json.loads((tmp_path / "remote" / "summary.json").read_text())
    for key in KEYS:
        assert remote[key] == local[key], key
    assert remote["totals"]["records"] > 5000 and remote["malformed_lines"] > 0
    # the executors ran on the worker, in its work directory
    apps = os.listdir(tmp_path / "work")
    assert len(apps) == 1 and apps[0].startswith("app-")
