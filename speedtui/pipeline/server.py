"""A local Spark Connect server from the pip-installed pyspark (`speedtui analytics-server`): one warm
JVM that outlives the processes using it, so `speedtui analyze` and the console pay no JVM start
and no cold compilation per analysis.

    start(port=15002)     spark-submit of pyspark's SparkConnectServer, bound to 127.0.0.1 only,
                          in its own process group, its log in DATA/analytics-server/server.log
    status()              {"url", "pid", "log", "running": bool, ...} or None
    stop()                SIGTERM to its process group (SIGKILL after a grace period)
    running_url()         its sc:// URL while it answers, else None

The state (`server.json`: pid, port, URL) lives beside the log; a server that died is noticed by
its pid and port, not trusted from the file.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time

from .common import PipelineError
from .session import check_java, pipeline_conf

DEFAULT_PORT = 15002
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def server_dir() -> str:
    """DATA/analytics-server (the console's data directory, as for the reports and stores)."""
    from ..paths import Paths
    return str(Paths.default().data_dir / "analytics-server")


def _files(directory: str | None) -> tuple[str, str, str]:
    d = directory or server_dir()
    return d, os.path.join(d, "server.json"), os.path.join(d, "server.log")


def _answers(port: int, timeout: float = 2.0) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=timeout).close()
        return True
    except OSError:
        return False


def _alive(pid: int) -> bool:
    """The process runs and is a Spark Connect server (a pid reused by another program is not)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return False
    except OSError:
        return False
    return SERVER_CLASS.encode() in cmd


def status(directory: str | None = None) -> dict | None:
    """The server's state with "running" (its process lives and its port answers), or None if
    none was started."""
    _, state_file, _ = _files(directory)
    try:
        with open(state_file, encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, ValueError):
        return None
    state["running"] = _alive(int(state.get("pid", -1))) and _answers(int(state.get("port", 0)))
    return state


def running_url(directory: str | None = None) -> str | None:
    st = status(directory)
    return st["url"] if st and st["running"] else None


def start(port: int = DEFAULT_PORT, master: str = "local[*]", directory: str | None = None,
          timeout: float = 300.0) -> dict:
    """Start the server and wait until it takes connections; its state. PipelineError (one
    sentence) if one runs already, the port is taken, or it does not come up."""
    d, state_file, log_path = _files(directory)
    st = status(directory)
    if st and st["running"]:
        raise PipelineError(f"an analytics server already runs at {st['url']} (pid {st['pid']}); "
                            f"`speedtui analytics-server stop` ends it.")
    if _answers(port):
        raise PipelineError(f"port {port} on 127.0.0.1 is already in use: choose another with --port.")
    check_java()
    from pyspark.find_spark_home import _find_spark_home
    home = _find_spark_home()
    os.makedirs(d, mode=0o700, exist_ok=True)
    conf = pipeline_conf()
    conf.update({"spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(port),
                 "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                 "spark.sql.warehouse.dir": os.path.join(d, "warehouse")})
    cmd = [os.path.join(home, "bin", "spark-submit"), "--class", SERVER_CLASS, "--name", "speedtui analytics server",
           "--master", master]
    for k, v in conf.items():
        cmd += ["--conf", f"{k}={v}"]
    env = dict(os.environ, SPARK_HOME=home, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=d, SPARK_PID_DIR=d)
    with open(log_path, "ab") as log:
        log.write(f"--- analytics server starting {time.strftime('%Y-%m-%d %H:%M:%S')} on 127.0.0.1:{port}\n".encode())
        log.flush()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=d, env=env,
                                start_new_session=True, close_fds=True)
    state = {"pid": proc.pid, "port": port, "url": f"sc://127.0.0.1:{port}", "log": log_path, "master": master,
             "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise PipelineError(f"the analytics server stopped while starting (exit status {proc.returncode}); "
                                f"see {log_path}.")
        if _answers(port, timeout=0.5):           # the gRPC port opens once the server is ready
            break
        if time.monotonic() > deadline:
            _end_group(proc.pid)
            raise PipelineError(f"the analytics server did not start within {timeout:g} s; see {log_path}.")
        time.sleep(0.25)
    tmp = state_file + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f)
    os.replace(tmp, state_file)
    return dict(state, running=True)


def _end_group(pid: int, grace: float = 30.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not _alive(pid):
                try:
                    os.waitpid(pid, os.WNOHANG)     # our child when started by this process
                except ChildProcessError:
                    pass
                return
            time.sleep(0.1)


def stop(directory: str | None = None) -> dict | None:
    """End the server (its process group); its last state, or None if none was started."""
    _, state_file, _ = _files(directory)
    st = status(directory)
    if st is None:
        return None
    if _alive(int(st["pid"])):
        _end_group(int(st["pid"]))
    os.unlink(state_file)
    return st
