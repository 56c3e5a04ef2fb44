"""local_frame: rows the driver holds, as a frame Spark scans without a Python worker."""

import time
from datetime import datetime

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema

from msgdedup.local_frames import LOCAL_RELATION_THRESHOLD, batches_frame, local_frame


def _plan(frame) -> str:
    return frame._jdf.queryExecution().optimizedPlan().getClass().getSimpleName()


def test_rows_come_back_as_given_and_the_frame_is_a_local_relation(spark):
    frame = local_frame(spark, [("a", 1, None), ("b", None, True)], "address string, n long, checks boolean")
    assert [tuple(r) for r in frame.collect()] == [("a", 1, None), ("b", None, True)]
    assert _plan(frame) == "LocalRelation"  # no PythonRDD: nothing to unpickle in a worker


def test_no_rows_keep_their_schema(spark):
    frame = local_frame(spark, [], "cache string, floor long")
    assert frame.collect() == [] and frame.columns == ["cache", "floor"]


def test_collected_rows_of_nested_types_round_trip(spark):
    source = spark.sql(
        "select 'x' as a, map('k', 1) as m, array(named_struct('p', 1, 'q', 'z')) as arr, "
        "named_struct('u', 2) as s, timestamp'2026-01-01 10:00:00' as ts, cast(null as binary) as b, X'01' as b2")
    rows = source.collect()
    frame = local_frame(spark, rows, source.schema)
    assert frame.collect() == rows
    assert rows[0]["ts"] == datetime(2026, 1, 1, 10, 0)


def test_a_collected_timestamp_is_the_same_instant_in_any_local_time_zone(spark, monkeypatch):
    """Spark collects timestamps as naive local times; the frame must hold the same instant."""
    source = spark.sql("select timestamp'2026-01-01 10:00:00' as ts")
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        rows = source.collect()
        assert local_frame(spark, rows, source.schema).collect() == rows
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_batches_frame_holds_the_table_and_is_not_a_local_relation(spark):
    """The arrays by block the driver hands Spark: a scan of Arrow batches, however small the table,
    with the same rows (lists, nulls), and the session's threshold as it was."""
    table = pa.table({"block": pa.array([0, 1], pa.int64()),
                      "unit_us": pa.array([[5, None, 7], []], pa.list_(pa.int64())),
                      "quiet": pa.array([[True], None], pa.list_(pa.bool_()))})
    before = spark.conf.get(LOCAL_RELATION_THRESHOLD)
    frame = batches_frame(spark, table, from_arrow_schema(table.schema))
    assert spark.conf.get(LOCAL_RELATION_THRESHOLD) == before
    assert _plan(frame) != "LocalRelation"
    assert frame.toArrow().to_pylist() == table.to_pylist()
    assert _plan(spark.createDataFrame(table, from_arrow_schema(table.schema))) == "LocalRelation"
