"""The same job through a real Spark Connect server started from the pip-installed pyspark by
`speedtui analytics-server start` (loopback only, its log and state in the data directory): the
Connect path, the embedded path and the pure-Python reference give the same answers, in `--traces`
mode and through the incremental store; a client process needs no Java; the server is always
stopped."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from speedtui.pipeline import server
from speedtui.pipeline.job import run_pipeline
from speedtui.pipeline.reference import analyze
from speedtui.pipeline.simulate import simulate

from test_pipeline_cluster import free_port

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEYS = ("totals", "top_talkers", "rejections", "traffic_over_time", "time_range", "spc", "availability",
        "malformed_lines", "empty", "other_records", "messages", "threats", "durable")


def speedtui(args: list[str], env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "speedtui", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=timeout)


def listening_addresses(port: int) -> set[str]:
    """Local addresses with a listening TCP socket on port (from /proc/net/tcp and tcp6)."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                addr, p = local.rsplit(":", 1)
                if state == "0A" and int(p, 16) == port:
                    out.add(addr)
    return out


@pytest.fixture
def connect_server(tmp_path):
    """(URL, env of a client whose data directory holds the server's state); started through the CLI."""
    env = dict(os.environ, PYTHONPATH=REPO, XDG_DATA_HOME=str(tmp_path / "data"),
               XDG_CONFIG_HOME=str(tmp_path / "config"), SPEED_SPARK_DRIVER_MEMORY="1g")
    env.pop("SPEED_ANALYTICS_REMOTE", None)
    port = free_port()
    directory = str(tmp_path / "data" / "speedtui" / "analytics-server")
    try:
        p = speedtui(["analytics-server", "start", "--port", str(port), "--master", "local[2]"], env)
        assert p.returncode == 0, p.stdout + p.stderr
        assert f"sc://127.0.0.1:{port}" in p.stdout
        yield f"sc://127.0.0.1:{port}", env, directory
    finally:
        st = server.status(directory)
        if st is not None:
            server.stop(directory)
            assert not server._alive(int(st["pid"])), "the Connect server still runs"


@pytest.mark.timeout(900)
def test_connect_embedded_and_reference_agree(spark, connect_server, tmp_path):
    url, env, directory = connect_server
    port = int(url.rsplit(":", 1)[1])
    loopback = {"0100007F", "0000000000000000FFFF00000100007F"}     # 127.0.0.1, also as ::ffff:127.0.0.1
    assert listening_addresses(port) and listening_addresses(port) <= loopback, "it listens on 127.0.0.1 only"
    st = server.status(directory)
    assert st["running"] and os.path.exists(st["log"]) and st["log"].startswith(directory)

    traces = str(tmp_path / "traces")
    simulate(traces, nodes=4, records=6000, seed=3, minutes=20, malformed=0.002)
    embedded = run_pipeline([traces], str(tmp_path / "embedded"), spark=spark)
    reference = analyze([traces])["summary"]
    no_java = dict(env, JAVA_HOME=str(tmp_path / "no-java"))          # a Connect client needs no Java
    p = speedtui(["analyze", "--remote", url, "--traces", traces, "--out", str(tmp_path / "remote"), "--quiet"],
                 no_java)
    assert p.returncode == 0, p.stderr[-3000:]
    remote = json.loads((tmp_path / "remote" / "summary.json").read_text())
    for key in KEYS:
        assert remote[key] == embedded[key], key
        if key not in ("availability",):
            assert remote[key] == reference[key], key
    assert remote["totals"]["records"] > 5000 and remote["malformed_lines"] > 0
    assert remote["totals"]["spc_calls"] > 100 and remote["rejections"]["bursts"]

    # the store through the running server, found without --remote (the data directory says it runs)
    root = tmp_path / "root"
    (root / "speed_traces").mkdir(parents=True)
    names = sorted(os.listdir(traces))
    for name in names:
        data = open(os.path.join(traces, name), "rb").read()
        cut = data.index(b"\n", len(data) // 2) + 1
        (root / "speed_traces" / name).write_bytes(data[:cut])
    p = speedtui(["analyze", "--dir", str(root), "--quiet"], no_java)
    assert p.returncode == 0, p.stderr[-3000:]
    for name in names:                                   # the rest of every journal: a second batch
        data = open(os.path.join(traces, name), "rb").read()
        with open(root / "speed_traces" / name, "ab") as f:
            f.write(data[data.index(b"\n", len(data) // 2) + 1:])
    p = speedtui(["analyze", "--dir", str(root), "--quiet"], no_java)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "2 batch(es)" in p.stdout
    report = str(p.stdout.strip().splitlines()[-1].split("report: ", 1)[1])
    stored = json.loads(open(report).read())
    for key in ("totals", "top_talkers", "rejections", "traffic_over_time", "spc", "other_records", "messages",
                "threats", "durable"):
        assert stored[key] == reference[key], key

    p = speedtui(["analytics-server", "status"], env)
    assert p.returncode == 0 and "running" in p.stdout
    p = speedtui(["analytics-server", "stop"], env)
    assert p.returncode == 0 and "stopped" in p.stdout
    assert not server._alive(int(st["pid"]))
    p = speedtui(["analyze", "--remote", url, "--traces", traces, "--out", str(tmp_path / "gone"), "--quiet"],
                 no_java)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().count("\n") == 0 and "no Spark Connect server answers" in p.stderr
