"""The incremental store: what is new in the journals is rolled up once, reports come from the
roll-ups of every batch so far.

    STORE/state.json      journals read so far (head -> path, offset, device/inode, digest of the
                          bytes before the offset), the batches, timings
    STORE/batches/bNNNNNN roll-ups of one ingest (batches.py)
    STORE/staging/        the new bytes of the journals while a batch is made
    STORE/lock            one ingest at a time (flock)

Commit order, so that a crash loses nothing and counts nothing twice: the new bytes are copied
to staging (through the descriptor each journal was checked with, journals.py), rolled up by one
Spark job, saved in ``batches/bN.tmp``, renamed to ``bN``, and only then state.json (new offsets
+ bN) is replaced; a batch directory state.json does not list is left over from a crash and
removed, its bytes are read again. The report is made on the driver from the batches' roll-ups
(report.py). After MAX_BATCHES batches the roll-ups are merged into one.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from contextlib import contextmanager

from .batches import compact, ingest, load, save
from .common import BURST_THRESHOLD, PERCENTILE_ACCURACY, PipelineError
from .journals import bundle, scan
from .report import build_report, write_tables

#: /4: the callees' side of SPC calls kept (for callers without a journal); /3: roll-ups partitioned
#: by kind and UTC day; /2 by kind only; /1 counted the extension kinds' records as malformed. An
#: older store is refused with what it lacks.
STATE_SCHEMA = "speed-analytics-store/4"
OLD_SCHEMAS = {"speed-analytics-store/1": "counted extension records as malformed",
               "speed-analytics-store/2": "did not partition its roll-ups by day",
               "speed-analytics-store/3": "did not keep the callees' side of SPC calls"}
MAX_BATCHES = 8


class Store:
    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self.state_file = os.path.join(self.path, "state.json")
        self.batches_dir = os.path.join(self.path, "batches")
        self.staging = os.path.join(self.path, "staging")

    # ------------------------------------------------------------------ state
    def empty_state(self) -> dict:
        return {"schema": STATE_SCHEMA, "files": {}, "batches": [], "next_batch": 1,
                "ingested_bytes": 0, "timings": {}}

    def load(self) -> dict:
        try:
            with open(self.state_file, encoding="utf-8") as f:
                state = json.load(f)
        except FileNotFoundError:
            return self.empty_state()
        except (OSError, ValueError) as exc:
            raise PipelineError(f"the analytics store {self.path} is damaged ({exc}): "
                                f"rebuild it with `speedtui analyze --rebuild`.") from None
        if isinstance(state, dict) and state.get("schema") in OLD_SCHEMAS:
            raise PipelineError(f"the analytics store {self.path} was made by an older version that "
                                f"{OLD_SCHEMAS[state['schema']]}: rebuild it with `speedtui analyze --rebuild`.")
        if not isinstance(state, dict) or state.get("schema") != STATE_SCHEMA:
            raise PipelineError(f"{self.state_file} is not a {STATE_SCHEMA} state: rebuild the "
                                f"store with `speedtui analyze --rebuild`.")
        return state

    def save(self, state: dict) -> None:
        tmp = self.state_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(state, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.state_file)

    def batch_dir(self, batch: int) -> str:
        return os.path.join(self.batches_dir, f"b{batch:06d}")

    @contextmanager
    def locked(self):
        os.makedirs(self.path, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(self.path, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise PipelineError(f"another analysis is using the store {self.path}; "
                                    f"try again when it has finished.") from None
            yield
        finally:
            os.close(fd)

    def clear(self) -> None:
        """Forget everything (for a rebuild from the journals as they are now)."""
        for name in ("batches", "staging", "state.json", "state.json.tmp"):
            p = os.path.join(self.path, name)
            if os.path.isdir(p):
                shutil.rmtree(p)
            elif os.path.exists(p):
                os.unlink(p)

    def tidy(self, state: dict) -> None:
        """Remove what a crashed run left: staging and batch directories state.json does not list."""
        shutil.rmtree(self.staging, ignore_errors=True)
        listed = {os.path.basename(self.batch_dir(b)) for b in state["batches"]}
        if os.path.isdir(self.batches_dir):
            for name in os.listdir(self.batches_dir):
                if name not in listed:
                    shutil.rmtree(os.path.join(self.batches_dir, name), ignore_errors=True)


def run_store(spark, inputs: list[str], store_path: str, out_uri: str, *, rebuild: bool = False,
              burst_threshold: int = BURST_THRESHOLD, accuracy: int = PERCENTILE_ACCURACY,
              step=None, on_plan=None) -> tuple[dict, dict]:
    """Ingest what is new in the journal directories `inputs` into the store (one Spark job), then
    write the report's tables in out_uri from every batch (on the driver). Returns (report parts for
    build_summary, ingest facts). on_plan(plan, state) is called once the new bytes are known (for
    an estimate)."""
    store = Store(store_path)
    with store.locked():
        if rebuild:
            store.clear()
        state = store.load()
        store.tidy(state)
        if any(isinstance(entry, dict) and "tail" not in entry for entry in state["files"].values()):
            # read positions kept before they were checked (11f76bc, 7 December 2026): a copy of a
            # journal could take one over and hide records for good; said on every run until a
            # rebuild, since the batches, not the positions, hold the damage if there is any
            state["unchecked_positions"] = True
        batches = [load(store.batch_dir(b)) for b in state["batches"]]
        plan = scan(inputs, state["files"], store.staging)
        if on_plan:
            on_plan(plan, state)
        timings: dict = {}
        t = time.monotonic()
        if plan.ranges:
            batch_id = state["next_batch"]
            batch = ingest(spark, bundle(plan.staged, store.staging), batch_id=batch_id, accuracy=accuracy,
                           step=step)
            tmp = store.batch_dir(batch_id) + ".tmp"
            save(batch, tmp)
            os.replace(tmp, store.batch_dir(batch_id))
            batches.append(batch)
            state["files"] = plan.files
            state["batches"].append(batch_id)
            state["next_batch"] = batch_id + 1
            state["ingested_bytes"] += plan.new_bytes
            timings["ingest_seconds"] = round(time.monotonic() - t, 3)
            timings["ingest_bytes"] = plan.new_bytes
            store.save(state)
        elif plan.files != state["files"]:
            state["files"] = plan.files            # renamed journals, nothing new in them
            store.save(state)
        shutil.rmtree(store.staging, ignore_errors=True)
        t = time.monotonic()
        parts, tables = build_report(batches, burst_threshold=burst_threshold, accuracy=accuracy, step=step)
        write_tables(tables, out_uri, spark)
        timings["report_seconds"] = round(time.monotonic() - t, 3)
        if len(state["batches"]) > MAX_BATCHES:
            batch_id = state["next_batch"]
            tmp = store.batch_dir(batch_id) + ".tmp"
            save(compact(batches, accuracy), tmp)
            os.replace(tmp, store.batch_dir(batch_id))
            state["batches"], state["next_batch"] = [batch_id], batch_id + 1
            store.save(state)
            store.tidy(state)
        state["timings"] = {**state.get("timings", {}), **timings}
        store.save(state)
        facts = {"store": store.path, "batches": len(state["batches"]), "new_bytes": plan.new_bytes,
                 "journals": len(plan.files), "rotated": plan.rotated, "replaced": plan.replaced,
                 "waiting": plan.waiting, "skipped": plan.skipped, "problems": plan.problems,
                 "ingested_bytes": state["ingested_bytes"],
                 "unchecked_positions": bool(state.get("unchecked_positions")), **timings}
        return parts, facts


def estimate_seconds(plan, state: dict) -> float | None:
    """How long ingesting plan's bytes and reporting should take, from the last run's speed."""
    t = state.get("timings") or {}
    if not t.get("ingest_bytes") or not t.get("ingest_seconds"):
        return None
    rate = t["ingest_bytes"] / max(t["ingest_seconds"], 1e-3)
    return plan.new_bytes / rate + float(t.get("report_seconds") or 0.0)
