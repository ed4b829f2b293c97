"""Batches of roll-ups (rollup.py): ONE Spark job makes one, the driver keeps, stores, merges and
compacts them (Arrow tables; no Spark).

    batch = ingest(spark, paths)                   # the one Spark job: lines -> roll-ups
    save(batch, dir); batch = load(dir)            # the store's batches on disk (Parquet)
    batch = compact([b1, b2, ...])                 # many batches -> one, same answers

Everything after the ingest is work on what it returned, which is small (roll-ups: a few MB for
millions of records): on such inputs a Spark job costs its fixed overhead (0.1-0.9 s measured on
two cores), the driver's Arrow code a few milliseconds. It also runs the same way whether the
session is embedded or a Spark Connect client (no RDD, SparkContext or JVM access is needed).
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any

from .common import PERCENTILE_ACCURACY
from .records import read_records
from .rollup import CALL, CALLEE, DONE, OPEN_COLUMNS, ROW_COLUMNS, ROWS_DDL, SPC_DONE_DDL, SPC_OPEN_DDL, ingest_sql

ROW_PARTS = "rows"
SPC_DONE = "spc_done"
SPC_OPEN = "spc_open"
#: a batch's roll-ups on disk: rows/tag=N/day=YYYY-MM-DD (the UTC day of the records), so a reader of
#: the store can take one kind of roll-up, or some days of it, without listing the rest
ROW_PARTITIONS = ("tag", "day")
_TYPES = {"int": "int32", "bigint": "int64", "double": "float64", "string": "string", "date": "date32",
          "binary": "binary", "boolean": "bool_"}


def arrow_schema(ddl: str):
    """The Arrow schema of a Spark DDL column list ("a string, n bigint, ...")."""
    import pyarrow as pa
    fields = []
    for col in ddl.split(","):
        name, typ = col.strip().split(" ", 1)
        fields.append(pa.field(name, pa.list_(pa.string()) if typ == "array<string>" else
                               getattr(pa, _TYPES[typ])()))
    return pa.schema(fields)


def _conform(table, ddl: str):
    """table with exactly ddl's columns and types (Spark returns large strings, older batches may
    lack nothing but their order may differ)."""
    schema = arrow_schema(ddl)
    return table.select(schema.names).cast(schema)


@dataclass
class Batch:
    rows: Any      # pyarrow.Table, ROWS_DDL: every roll-up but the call legs
    done: Any      # SPC_DONE_DDL: calls resolved inside the batch, per (target, service), with a sketch
    open: Any      # SPC_OPEN_DDL: call legs waiting for their other half

    @classmethod
    def empty(cls) -> "Batch":
        return cls(*(arrow_schema(d).empty_table() for d in (ROWS_DDL, SPC_DONE_DDL, SPC_OPEN_DDL)))


def ingest(spark, paths: list[str], *, since=None, until=None, batch_id: int = 0,
           accuracy: int = PERCENTILE_ACCURACY, step=None) -> Batch:
    """Roll up the journal files `paths`: one scan of the lines, one Spark job, the result brought
    to the driver as Arrow."""
    import pyarrow.compute as pc
    if step:
        step("parse")
    if not paths:
        return Batch.empty()
    read_records(spark, paths).createOrReplaceTempView("speed_records")
    got = spark.sql(ingest_sql("speed_records", since, until, batch_id, accuracy)).toArrow()
    if step:
        step("calls")
    tag = got["tag"]
    done = got.filter(pc.equal(tag, DONE))
    spc = done["spc"].combine_chunks()
    done_cols = {"caller": done["a"], "target": done["b"], "service": done["d"],
                 **{f.name: spc.field(f.name) for f in spc.type}}
    import pyarrow as pa
    legs = pc.is_in(tag, pa.array([CALL, CALLEE], pa.int32()))
    return Batch(rows=_conform(got.filter(pc.and_(pc.not_equal(tag, DONE), pc.invert(legs))), ROWS_DDL),
                 done=_conform(pa.table(done_cols), SPC_DONE_DDL),
                 open=_conform(got.filter(legs).select(list(OPEN_COLUMNS)), SPC_OPEN_DDL))


def _partitioning():
    import pyarrow as pa
    import pyarrow.dataset as ds
    return ds.partitioning(pa.schema([("tag", pa.int32()), ("day", pa.date32())]), flavor="hive")


def save(batch: Batch, batch_dir: str) -> None:
    """The batch as Parquet (lz4) in batch_dir: rows/ partitioned by kind and UTC day, spc_done/,
    spc_open/ (one file each)."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq
    shutil.rmtree(batch_dir, ignore_errors=True)
    os.makedirs(batch_dir, mode=0o700)
    fmt = ds.ParquetFileFormat()
    ds.write_dataset(batch.rows, os.path.join(batch_dir, ROW_PARTS), format=fmt, partitioning=_partitioning(),
                     basename_template="part-{i}.parquet", file_options=fmt.make_write_options(compression="lz4"),
                     existing_data_behavior="overwrite_or_ignore")
    for name, table in ((SPC_DONE, batch.done), (SPC_OPEN, batch.open)):
        os.makedirs(os.path.join(batch_dir, name))
        pq.write_table(table, os.path.join(batch_dir, name, "part-0.parquet"), compression="lz4")


def load(batch_dir: str) -> Batch:
    """A batch saved by save() (or written by Spark in the same layout)."""
    import pyarrow.dataset as ds

    def read(name: str, ddl: str, **kw):
        path = os.path.join(batch_dir, name)
        if not os.path.isdir(path):
            return arrow_schema(ddl).empty_table()
        return _conform(ds.dataset(path, format="parquet", **kw).to_table(), ddl)

    return Batch(rows=read(ROW_PARTS, ROWS_DDL, partitioning=_partitioning()),
                 done=read(SPC_DONE, SPC_DONE_DDL), open=read(SPC_OPEN, SPC_OPEN_DDL))


def compact(batches: list[Batch], accuracy: int = PERCENTILE_ACCURACY) -> Batch:
    """Many batches -> one that gives the same report: rows merged by key, calls per (target,
    service) merged (sketch unions), open legs merged per call leg."""
    import pyarrow as pa
    from .call_legs import merged_done, open_calls
    rows = pa.concat_tables([b.rows for b in batches])
    keys = [c for c in ROW_COLUMNS if c in ("tag", "a", "b", "c", "d", "m", "x", "day")]
    aggs = [("n", "sum"), ("bytes", "sum"), ("tmin", "min"), ("tmax", "max"), ("nreq", "sum"), ("nresp", "sum"),
            ("resp_ts", "min"), ("code", "min"), ("lat", "min"), ("chunks", "sum"), ("rel", "sum"),
            ("score", "max")]       # rows hold no call legs: resp_ts, code and lat are null there
    g = rows.group_by(keys, use_threads=False).aggregate(aggs)
    g = g.rename_columns([n if n in keys else n.rsplit("_", 1)[0] for n in g.column_names])
    done = merged_done([b.done for b in batches], [], accuracy, keep_callers=True)
    done_schema = arrow_schema(SPC_DONE_DDL)
    done_rows = [{**r, "sketch": (r["sketch"].serialize() if r["sketch"] is not None else None)} for r in done]
    legs = open_calls([b.open for b in batches], merge_only=True)
    return Batch(rows=_conform(g, ROWS_DDL), done=pa.Table.from_pylist(done_rows, schema=done_schema),
                 open=pa.Table.from_pylist(legs, schema=arrow_schema(SPC_OPEN_DDL)))
