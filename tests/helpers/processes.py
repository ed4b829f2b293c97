"""Real `speed node` processes for multi-process tests."""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field

SPEED = [sys.executable, "-m", "speed_runtime"]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class NodeProcess:
    name: str
    proc: subprocess.Popen
    lines: "queue.Queue[str]" = field(default_factory=queue.Queue)
    stderr: list[str] = field(default_factory=list)
    id: str = ""

    def read_line(self, timeout: float = 15.0) -> str:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"{self.name} printed nothing within {timeout} s; stderr: {''.join(self.stderr)}") from None

    def messages(self, count: int, timeout: float = 30.0) -> list[dict]:
        return [json.loads(self.read_line(timeout)) for _ in range(count)]

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def _pump(stream, sink) -> None:
    for line in stream:
        sink(line)
    stream.close()


class NodeProcesses:
    def __init__(self, root: str, key_path: str):
        self.root, self.key_path = root, key_path
        self.started: list[NodeProcess] = []

    def start(self, name: str, *, allow=(), services=(), groups=(), trace=False, lease=None, heartbeat=None,
              echo=False, extra=(), wait_ready=True, preexec_fn=None) -> NodeProcess:
        cmd = SPEED + ["node", "--dir", self.root, "--key", self.key_path, "--name", name]
        for flag, values in (("--allow", allow), ("--service", services), ("--group", groups)):
            for value in values:
                cmd += [flag, value]
        if trace:
            cmd.append("--trace")
        if echo:
            cmd.append("--echo-messages")
        if lease is not None:
            cmd += ["--lease", str(lease)]
        if heartbeat is not None:
            cmd += ["--heartbeat", str(heartbeat)]
        cmd += list(extra)
        return self._launch(name, cmd, wait_ready, preexec_fn=preexec_fn)

    def start_scripted(self, name: str, *, allow=(), delay_ms: float = 0.0, options: dict | None = None,
                       wait_ready: bool = True, preexec_fn=None) -> NodeProcess:
        """A node process whose behaviour the test sets (tests/helpers/scripted_node.py)."""
        cmd = [sys.executable, "-m", "tests.helpers.scripted_node", self.root, self.key_path, name,
               "--delay-ms", str(delay_ms), "--options", json.dumps(options or {})]
        for peer in allow:
            cmd += ["--allow", peer]
        return self._launch(name, cmd, wait_ready, preexec_fn=preexec_fn)

    def _launch(self, name: str, cmd: list[str], wait_ready: bool, preexec_fn=None) -> NodeProcess:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=preexec_fn,
                                cwd=REPO)
        node = NodeProcess(name, proc)
        threading.Thread(target=_pump, args=(proc.stdout, node.lines.put), daemon=True).start()
        threading.Thread(target=_pump, args=(proc.stderr, node.stderr.append), daemon=True).start()
        self.started.append(node)
        if wait_ready:
            line = node.read_line(30)
            assert line.startswith(f"ready {name} id="), line
            node.id = line.split("id=")[1].split()[0]
        return node

    def run(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
        """Run one `speed` command against this environment."""
        return subprocess.run(SPEED + list(args), capture_output=True, text=True, timeout=timeout)

    def stop_all(self) -> None:
        for node in self.started:
            node.stop()
