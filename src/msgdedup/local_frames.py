"""Frames of the few rows the driver already holds: per cache, per address, per input file.

``SparkSession.createDataFrame`` given a list of rows pickles them, and every query that scans
the frame unpickles them in a Python worker: a Python stage of its own, up to a couple of seconds
on a busy 2-core machine, several times a batch (the profile in docs/benchmarks.md found ten of
them in a 350-message batch, 40% of its stage time). Given an Arrow table, Spark reads the Arrow
batches in the JVM and no Python worker is involved. pyspark has no public way to make such a
frame from rows, hence this one function.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Iterable, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType


def local_frame(spark: SparkSession, rows: Iterable[Sequence], schema: str | StructType) -> DataFrame:
    """``rows`` (tuples or Rows in the order of ``schema``'s fields; a DDL string or a StructType)
    as a DataFrame whose scans run in the JVM only."""
    struct = schema if isinstance(schema, StructType) else StructType.fromDDL(schema)
    arrow = to_arrow_schema(struct)
    rows = [tuple(_plain(v) for v in row) for row in rows]
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(arrow)
    arrays = [pa.array(list(c), type=f.type) for c, f in zip(columns, arrow, strict=True)]
    table = pa.Table.from_arrays(arrays, schema=arrow)
    return spark.createDataFrame(table, struct)


# Spark makes a frame of an Arrow table below this size a local relation (48 MiB by default).
LOCAL_RELATION_THRESHOLD = "spark.sql.execution.arrow.localRelationThreshold"


def batches_frame(spark: SparkSession, table: pa.Table, schema: StructType) -> DataFrame:
    """``table`` as a frame whose tasks read its Arrow batches, however small it is: for the
    driver's large tables that a query broadcasts, the arrays by block of lines (line_lookup.py,
    unit_ranks.py) and the kernel's decisions (4-25 MiB each at 1M messages).

    Spark keeps a table under its threshold as a local relation: rows in the driver's heap,
    copied by the optimizer, and a broadcast of it runs a job whose tasks get those rows Java-
    serialized one by one and send them back, several copies of the table at once, in objects
    large enough that G1 grows the heap for them (docs/benchmarks.md: a 1M batch's peak). As
    Arrow batches, a task carries each batch as one array and makes its rows itself. Not for
    every table: a local relation's exact size is what the planner chooses joins by, and an
    Apama batch's snapshot planned over queue entries taken from such a frame ran 246 tasks in
    7 s instead of 4 in 2 s (so batch._queues makes those a local relation of their own).
    pyspark takes no argument for it, so the session's threshold is lowered for this one call;
    the engine makes its frames from one thread."""
    before = spark.conf.get(LOCAL_RELATION_THRESHOLD)
    spark.conf.set(LOCAL_RELATION_THRESHOLD, "0")
    try:
        return spark.createDataFrame(table, schema)
    finally:
        spark.conf.set(LOCAL_RELATION_THRESHOLD, before)


def _plain(value):
    """A Row (a struct collected from Spark) as the dict pyarrow takes for a struct; lists and
    dicts of them likewise. A naive timestamp is what Spark collects: the instant in this
    process's local time (pyarrow would take it for UTC)."""
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.astimezone(timezone.utc)
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
