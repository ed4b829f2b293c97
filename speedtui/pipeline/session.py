"""Java and module checks, the SparkSession the pipeline creates (embedded, or a Spark Connect
client), and progress from Spark's status tracker or the Connect server's progress reports."""
from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
from typing import Any, Callable

from .common import JavaMissingError, PipelineError


JAVA_MISSING = ("Java was not found (no `java` on PATH and JAVA_HOME unset or invalid): "
                "install Java 17+, e.g. `apt-get install openjdk-17-jre-headless`.")


#: what each way of running needs (the `analytics` extra installs all of it)
MODULES = ("pyspark", "pyarrow", "datasketches")
CONNECT_MODULES = ("pandas", "grpc", "grpc_status", "google.protobuf")


def require_modules(remote: bool = False) -> None:
    """PipelineError (one sentence) naming what to install when a module the analysis needs is missing."""
    import importlib.util
    for name in MODULES + (CONNECT_MODULES if remote else ()):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise PipelineError(f"the analytics extra is not installed (no Python module {name}): install it with "
                                f"`pip install 'speedtui[analytics]'`.")


def is_connect(spark) -> bool:
    """Whether spark is a Spark Connect client session (no SparkContext, no JVM here)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def find_java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        cand = os.path.join(home, "bin", "java")
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
        return None
    return shutil.which("java")


def java_major(java: str) -> int | None:
    """Major version of `java -version` (8 for 1.8), None if it cannot be told."""
    import subprocess
    try:
        p = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', p.stderr + p.stdout)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def check_java() -> str:
    """Path of the java Spark will use; JavaMissingError (one sentence) if there is none or it
    is older than 17. Runs before any Spark start-up."""
    home = os.environ.get("JAVA_HOME")
    java = find_java()
    if java is None:
        if home:
            raise JavaMissingError(f"JAVA_HOME ({home}) has no bin/java: point it at Java 17+ or "
                                   f"unset it, and install Java 17+ if needed, e.g. "
                                   f"`apt-get install openjdk-17-jre-headless`.")
        raise JavaMissingError(JAVA_MISSING)
    major = java_major(java)
    if major is not None and major < 17:
        raise JavaMissingError(f"{java} is Java {major}, too old for Spark 4: install Java 17+, "
                               f"e.g. `apt-get install openjdk-17-jre-headless`.")
    return java


def default_driver_memory() -> str:
    """Half of this machine's memory, between 1g and 16g: in local mode the driver is the only
    executor, and 4g ran out of heap at 50M records where 12g (half of 24 GiB) was enough."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return "4g"
    return f"{max(1, min(16, total // 2 // 2**30))}g"


#: log4j2 settings for a JVM the pipeline starts: warnings and errors only, on stderr (which the
#: console's analysis worker sends to its log file, never to the terminal)
LOG4J2 = """rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
logger.netty.name = io.netty
logger.netty.level = error
logger.nativeloader.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativeloader.level = error
logger.utils.name = org.apache.spark.util.Utils
logger.utils.level = error
"""


def log4j_file() -> str:
    path = os.path.join(tempfile.gettempdir(), f"speed-pipeline-log4j2-{os.getuid()}.properties")
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == LOG4J2:
                return path
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".log4j2-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(LOG4J2)
    os.replace(tmp, path)
    return path


#: session settings the pipeline sets on a Spark Connect session (the rest are the server's)
CONNECT_CONF = ("spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled", "spark.sql.session.timeZone",
                "spark.sql.json.enablePartialResults")


def cds_option() -> str:
    """With SPEED_SPARK_CDS=1, the JVM option of application class-data sharing for the driver: the
    first JVM writes an archive of the classes it loaded when it exits (-XX:ArchiveClassesAtExit),
    later ones map it instead of loading and verifying those classes (-XX:SharedArchiveFile). The
    archive is per Java and pyspark version, in the user's cache directory; a JVM that cannot use
    it says so in its log and starts as without it."""
    if os.environ.get("SPEED_SPARK_CDS") != "1":
        return ""
    import pyspark
    java = check_java()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    d = os.path.join(cache, "speedtui", "spark-cds")
    os.makedirs(d, mode=0o700, exist_ok=True)
    tag = re.sub(r"[^A-Za-z0-9.]+", "_", f"{os.path.realpath(java)}-{java_major(java)}-{pyspark.__version__}")[-120:]
    archive = os.path.join(d, f"{tag}.jsa")
    quiet = "-Xlog:cds*=off"            # its notes on classes it cannot archive are not the user's concern
    if os.path.exists(archive):
        return f"-XX:SharedArchiveFile={archive} -Xshare:auto {quiet}"
    return f"-XX:ArchiveClassesAtExit={archive} {quiet}"


def pipeline_conf(shuffle_partitions: int | None = None) -> dict:
    """The pipeline's Spark settings (an embedded session's; a Connect server started by
    `speedtui analytics-server` gets the same)."""
    parts = shuffle_partitions or int(os.environ.get("SPEED_SHUFFLE_PARTITIONS", "0") or 0)
    if not parts:
        # the shuffles are of small roll-ups: a few partitions per core is plenty
        parts = max(4, 2 * (os.cpu_count() or 2))
    log_opt = f"-Dlog4j2.configurationFile=file:{log4j_file()}"
    cds = cds_option()
    conf = {"spark.sql.shuffle.partitions": str(parts),
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.adaptive.enabled": "true",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.json.enablePartialResults": "true",
            # every query shape of a run stays compiled for the next run of a reused session
            "spark.sql.codegen.cache.maxEntries": "1000",
            # the throughput collector: a whole `speedtui analyze` process took 36 s instead of 41 s
            # with the default G1 at 5M records on 2 cores (medians of 3+, alternated), warm runs the same
            "spark.driver.extraJavaOptions": f"{log_opt} -XX:+UseParallelGC {cds}".strip(),
            "spark.executor.extraJavaOptions": log_opt,
            "spark.driver.memory": os.environ.get("SPEED_SPARK_DRIVER_MEMORY") or default_driver_memory()}
    if not os.environ.get("SPARK_UI"):
        conf["spark.ui.enabled"] = "false"
    return conf


def make_spark(master: str | None = None, shuffle_partitions: int | None = None,
               app_name: str = "speed-trace-analytics", *, loopback: bool | None = None,
               extra_conf: dict | None = None, remote: str | None = None):
    """A SparkSession for the pipeline: embedded (a JVM in this process's care), or with remote
    (sc://HOST:PORT) a client of that Spark Connect server. loopback (default: when the master is
    local or on 127.0.0.1, or SPARK_LOCAL_IP is 127.0.0.1) pins the driver's host and bind address to
    127.0.0.1, so nothing listens on an external address."""
    if remote:
        return connect_session(remote, shuffle_partitions)
    check_java()
    from pyspark.sql import SparkSession
    master = master or os.environ.get("SPEED_SPARK_MASTER") or "local[*]"
    b = SparkSession.builder.appName(app_name).master(master)
    if loopback is None:
        loopback = (master.startswith("local") or "127.0.0.1" in master
                    or os.environ.get("SPARK_LOCAL_IP") == "127.0.0.1")
    conf = pipeline_conf(shuffle_partitions)
    if loopback:
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    conf.update(extra_conf or {})
    for k, v in conf.items():
        b = b.config(k, v)
    try:
        spark = b.getOrCreate()
    except Exception as exc:  # the JVM failed to start
        raise PipelineError(f"Spark could not start: {str(exc).splitlines()[0] if str(exc) else exc}") from exc
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def connect_session(url: str, shuffle_partitions: int | None = None):
    """A Spark Connect session to url with the pipeline's session settings; PipelineError (one
    sentence) if the server does not answer."""
    import socket
    from urllib.parse import urlparse
    parsed = urlparse(url.replace("sc://", "http://", 1)) if url.startswith("sc://") else None
    if parsed is None or not parsed.hostname:
        raise PipelineError(f"{url} is not a Spark Connect URL: give sc://HOST:PORT, e.g. sc://127.0.0.1:15002.")
    try:
        socket.create_connection((parsed.hostname, parsed.port or 15002), timeout=10).close()
    except OSError as exc:
        raise PipelineError(f"no Spark Connect server answers at {url} ({exc.strerror or exc}): start one with "
                            f"`speedtui analytics-server start` or give the URL of a running one.") from None
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)      # pandas version notes of the client
        try:
            # the Connect client's own builder: it also works beside an embedded session (the benchmark)
            from pyspark.sql.connect.session import SparkSession as ConnectSession
            spark = ConnectSession.builder.remote(url).getOrCreate()
            conf = pipeline_conf(shuffle_partitions)
            for key in CONNECT_CONF:
                spark.conf.set(key, conf[key])
        except Exception as exc:  # noqa: BLE001 - gRPC and server errors: one sentence
            raise PipelineError(f"the Spark Connect server at {url} failed: "
                                f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}") from None
    return spark


class Progress:
    """Polls spark.sparkContext.statusTracker() and reports (fraction, text) monotonically."""

    def __init__(self, spark, callback: Callable[[float, str], Any] | None,
                 steps: "tuple[tuple[str, float], ...]", interval: float = 0.25):
        """steps: (name, share of the run's time) in order; the shares add up to 1."""
        self.cb = callback
        self.spark = spark
        self.names = [name for name, _ in steps]
        self.shares = [share for _, share in steps]
        self.starts = [sum(self.shares[:i]) for i in range(len(steps))]
        self.index = 0
        self.last = 0.0
        self.interval = interval
        self.lock = threading.Lock()
        self.emit_lock = threading.Lock()
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None

    def __enter__(self):
        if self.cb is not None and is_connect(self.spark):
            self.spark.registerProgressHandler(self._connect_progress)   # the server reports its stages
        elif self.cb is not None:
            self.thread = threading.Thread(target=self._run, name="speed-pipeline-progress", daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
        if self.cb is not None and is_connect(self.spark):
            self.spark.removeProgressHandler(self._connect_progress)

    def _connect_progress(self, stages, inflight_tasks, operation_id=None, done=False) -> None:
        stages = list(stages or [])
        total = sum(s.num_tasks for s in stages)
        if total and not self.stop_event.is_set():
            finished = sum(s.num_completed_tasks for s in stages)
            self._emit(finished / total * 0.95, f"{self.names[self.index]}: {len(stages)} stage(s), "
                                                f"{finished}/{total} tasks done")

    def step(self, name: str) -> None:
        with self.lock:
            self.index = self.names.index(name)
        self._emit(0.0, name)

    def done(self, text: str = "done") -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
        self._emit_raw(1.0, text)

    def _emit(self, inner: float, text: str) -> None:
        with self.lock:
            frac = self.starts[self.index] + self.shares[self.index] * max(0.0, min(1.0, inner))
        self._emit_raw(frac, text)

    def _emit_raw(self, frac: float, text: str) -> None:
        if self.cb is None:
            return
        with self.emit_lock:  # one call at a time, fractions never go down
            frac = max(self.last, min(1.0, frac))
            self.last = frac
            try:
                self.cb(frac, text)
            except Exception:
                pass

    def _run(self) -> None:
        tracker = self.spark.sparkContext.statusTracker()
        while not self.stop_event.wait(self.interval):
            try:
                ids = tracker.getActiveStageIds()
                done = total = 0
                for sid in ids:
                    info = tracker.getStageInfo(sid)
                    if info is not None:
                        done += info.numCompletedTasks
                        total += info.numTasks
            except Exception:
                continue
            if total:
                name = self.names[self.index]
                self._emit(done / total * 0.95,
                           f"{name}: {len(ids)} active stage(s), {done}/{total} tasks done")
