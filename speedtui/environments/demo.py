"""`speedtui --demo`: a temporary environment that shows every view alive.

A private ROOT (0700) and key in a temporary directory, a handful of `speed node` processes in
several fabrics with mutual, one-way and missing grants, tracing on, and a traffic driver
(in-process node ``ops`` calling services about every second, an occasional failing call, an
occasional node killed so that its lease expires, then restarted).  ``stop()`` removes all."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ..services import runtime as rt
from ..models.commands import NodeSpec, node_command
from ..services.own_nodes import NodeLogs, OwnNode, OwnNodes, start_followed
from ..services.processes import _close_pipes, _terminate, speed_command

LEASE, HEARTBEAT = 8.0, 1.0

# name, fabrics, allow, services
PROCESS_NODES = [
    ("gateway", ["edge"], ["billing", "reports", "ops"], ["echo"]),
    ("billing", ["finance"], ["gateway", "ledger", "ops"], ["calculateTax", "echo", "fail"]),
    ("ledger", ["finance"], ["billing", "ops"], ["echo", "sleep"]),
    ("reports", ["analytics", "finance"], ["gateway"], ["echo"]),  # does not allow ops: missing grant
    ("archive", ["analytics"], [], ["echo"]),  # allows nobody
    ("flaky", ["analytics"], ["ops"], ["echo"]),  # killed now and then: its lease expires
]
DRIVER = NodeSpec("ops", groups=("ops",), allow=("gateway", "billing", "ledger", "flaky", "archive"),
                  services=("echo",), trace=True, lease_seconds=LEASE, heartbeat_seconds=HEARTBEAT)


class DemoEnvironment:
    def __init__(self, seed: int | None = None, period: float = 1.0, kill_every: float = 45.0) -> None:
        self.base: Path | None = None
        self.root: Path = Path()
        self.key_path: Path = Path()
        self.procs: dict[str, subprocess.Popen] = {}
        self.readers: dict[int, threading.Thread] = {}  # by pid: each process's output, into its log
        self.logs = NodeLogs()  # the nodes' output: the console's logs once handed over
        self.driver: Any = None
        self.period = period
        self.kill_every = kill_every
        self.rng = random.Random(seed)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.stats = {"calls": 0, "errors": 0, "kills": 0, "restarts": 0}

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "DemoEnvironment":
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.base = Path(tempfile.mkdtemp(prefix="speed-demo-", dir=shm))
        os.chmod(self.base, 0o700)
        self.root = self.base / "env"
        self.root.mkdir(mode=0o700)
        self.key_path = self.base / "speed.key"
        rt.generate_key_file(self.key_path)
        starters = [threading.Thread(target=self._spawn, args=(spec,)) for spec in PROCESS_NODES]
        for t in starters:
            t.start()
        for t in starters:
            t.join()
        missing = [spec[0] for spec in PROCESS_NODES if spec[0] not in self.procs]
        if missing:
            raise RuntimeError(f"demo nodes did not start: {', '.join(missing)}")
        import speed_runtime
        from speed_runtime.demo import DEMO_SERVICES

        key = rt.load_key(self.key_path)
        self.driver = speed_runtime.Node(str(self.root), key.runtime_key, DRIVER.name, groups=list(DRIVER.groups),
                                         allow=list(DRIVER.allow), trace=True, lease_seconds=LEASE,
                                         heartbeat_seconds=HEARTBEAT)
        self.driver.register("echo", DEMO_SERVICES["echo"])
        self.driver.start()
        self._thread = threading.Thread(target=self._traffic, name="speed-demo-traffic", daemon=True)
        self._thread.start()
        return self

    def _args(self, name: str, groups, allow, services) -> list[str]:
        spec = NodeSpec(name, tuple(groups), tuple(allow), tuple(services), trace=True, in_process=False,
                        lease_seconds=LEASE, heartbeat_seconds=HEARTBEAT)
        return node_command(self.root, self.key_path, spec).exec_argv(speed_command())

    def _spawn(self, spec) -> bool:
        name, groups, allow, services = spec
        proc, reader, line = start_followed(self._args(name, groups, allow, services), name, self.logs, 30.0)
        with self._lock:
            self.readers[proc.pid] = reader
        if not line.startswith("ready"):
            self._end(proc)
            return False
        with self._lock:
            self.procs[name] = proc
        return True

    def _end(self, proc: subprocess.Popen, signalled: bool = False) -> None:
        """Stop ``proc`` (SIGTERM unless ``signalled``, then SIGKILL), let its reader take the last
        lines, close its pipes."""
        _terminate(proc, close=False, signalled=signalled)
        with self._lock:
            reader = self.readers.pop(proc.pid, None)
        if reader is not None:
            reader.join(10)
        _close_pipes(proc)

    def hand_over(self, own: OwnNodes) -> None:
        """Hand the driver node to the console (its table of own nodes), so calls and grants can be
        made from it, and the nodes' logs (the demo started them: the console shows their output)."""
        own.logs = self.logs
        if self.driver is not None:
            own.add(OwnNode(spec=NodeSpec(**{**DRIVER.__dict__}), node=self.driver, started=time.time()))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        if self.driver is not None:
            try:
                self.driver.close()
            except Exception:  # noqa: BLE001
                pass
        with self._lock:
            procs, self.procs = list(self.procs.values()), {}
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in procs:
            self._end(p, signalled=True)
        if self.base is not None:
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = None

    # ------------------------------------------------------------------ traffic
    def _traffic(self) -> None:
        n = 0
        next_kill = time.monotonic() + self.kill_every
        restart_at: float | None = None
        futures = []
        while not self._stop.wait(self.period * (0.6 + 0.8 * self.rng.random())):
            n += 1
            calls = [("gateway", "echo", {"n": n}), ("billing", "calculateTax", {"amount": self.rng.randint(1, 999)}),
                     ("ledger", "echo", {"entry": n})]
            if n % 7 == 0:
                calls.append(("billing", "fail", {}))  # EXECUTION_FAILED
            if n % 11 == 0:
                calls.append(("billing", "calculateTax", {"amount": "lots"}))  # INVALID_ARGUMENTS
            if n % 13 == 0:
                calls.append(("reports", "echo", {}))  # reports does not allow ops: ACCESS_DENIED
            if n % 5 == 0 and "flaky" in self.procs:
                calls.append(("flaky", "echo", {"ping": n}))
            for target, service, args in calls:
                try:
                    futures.append(self.driver.call_async(target, service, args, timeout=5.0))
                    self.stats["calls"] += 1
                except Exception:  # noqa: BLE001 - refused before sending: counted, shown in traces
                    self.stats["errors"] += 1
            if n % 17 == 0:
                try:
                    self.driver.send("gateway", {"note": f"tick {n}"})
                except Exception:  # noqa: BLE001
                    pass
            futures = [f for f in futures if not f.done()]
            now = time.monotonic()
            if restart_at is None and now >= next_kill:
                p = self.procs.pop("flaky", None)
                if p is not None and p.poll() is None:
                    p.kill()  # no goodbye: the lease expires
                    p.wait(5)
                    self._end(p)
                    self.stats["kills"] += 1
                restart_at = now + LEASE + 6.0
            elif restart_at is not None and now >= restart_at:
                spec = next(s for s in PROCESS_NODES if s[0] == "flaky")
                if not self._stop.is_set() and self._spawn(spec):
                    self.stats["restarts"] += 1
                restart_at = None
                next_kill = now + self.kill_every
        # outstanding calls are left to time out: cancelling a Future that the runtime later
        # resolves kills its protocol thread (InvalidStateError in calls._resolve_call)
