"""The gate's own Spark session and its cached checked tables (no GX, no files)."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

from msgdedup.quality.materialise import (
    CACHE_COMPRESSED, LIMIT_INITIAL_PARTITIONS, SHUFFLE_PARTITIONS, UNCOMPRESSED_HEAP_SHARE_CONF,
    HASHES_HEAP_SHARE_CONF, UNCOMPRESSED_LINE_BYTES, MaterialisedTables, Scanned, SmallFrames, _CollectedHashes,
    cache_settings, gate_session, hashes_on_driver,
)


def test_gate_session_starts_from_the_callers_settings_and_keeps_its_own_to_itself(spark):
    caller = spark.newSession()
    caller.conf.set("spark.sql.caseSensitive", "true")
    caller.conf.unset(SHUFFLE_PARTITIONS)  # as in an application that never configured it

    session = gate_session(caller)

    parallelism = spark.sparkContext.defaultParallelism
    assert session.conf.get("spark.sql.caseSensitive") == "true"
    assert session.conf.get(SHUFFLE_PARTITIONS) == str(2 * parallelism)
    assert session.conf.get(LIMIT_INITIAL_PARTITIONS) == str(parallelism)
    assert caller.conf.get(SHUFFLE_PARTITIONS) == "200" and caller.conf.get(LIMIT_INITIAL_PARTITIONS) == "1"


def test_gate_session_keeps_a_configured_shuffle_partition_count(spark):
    assert gate_session(spark).conf.get(SHUFFLE_PARTITIONS) == spark.conf.get(SHUFFLE_PARTITIONS)


def test_small_frames_are_given_the_hashes_that_repeat_found_on_the_driver(spark):
    """With ``hashes``, each frame is built on the values of its column that repeat, found in one
    collected pass (nulls are no values): none (an empty relation, dropped from the plans that join
    it), a few (a local table of them), or more than ``limit`` (None: the frame aggregates its rows
    itself)."""
    hashes = spark.createDataFrame(
        [(i, 7 if i < 2 else 8 if i < 4 else 100 + i, i % 20, i % 3) for i in range(40)] + [(None,) * 4] * 2,
        "none long, few long, many long, part byte")
    given = {}

    def build(name):
        def frame(repeated):
            given[name] = repeated
            return spark.range(0) if repeated is None else repeated
        return frame

    small = SmallFrames(spark, {name: build(name) for name in ("none", "few", "many", "absent")}, limit=10,
                        hashes=lambda: hashes, tallied="part")
    try:
        # the tallied column is counted, not searched for repeats; a frame without a column aggregates itself
        assert small.tally() == {0: 14, 1: 13, 2: 13}
        assert small.get("absent").collect() == [] and given["absent"] is None and "part" not in given
        assert small.get("none").collect() == [] and given["none"].collect() == []
        assert "LocalRelation <empty>" in small.get("none")._jdf.queryExecution().optimizedPlan().toString()
        assert sorted(r._hash for r in given["few"].collect()) == [7, 8]
        assert sorted(r._hash for r in small.get("few").collect()) == [7, 8]
        assert small.get("many").collect() == [] and given["many"] is None
        assert small.rows == {"none": 0, "few": 2, "many": 0, "absent": 0}
    finally:
        small.close()
    without = SmallFrames(spark, {"none": build("none")}, limit=10)
    try:
        assert without.tally() is None
    finally:
        without.close()


def test_the_collected_hashes_are_let_go_once_each_column_is_searched():
    """Each frame searches its own column of the collected hashes (at once, in its own thread);
    the table is held until the last column a frame asks for is searched, then freed."""
    held = _CollectedHashes(pa.table({"a": [1, 1, 2, 2, 3], "b": [4, None, None, 4, 5], "c": [6, 6, 7, 8, 9]}),
                            names=("a", "b", "absent"))  # no frame asks for c
    assert held.repeated("absent") is None
    assert held.repeated("a").tolist() == [1, 2]
    assert held._table is not None
    assert held.repeated("b").tolist() == [4]
    assert held._table is None


def test_hashes_go_to_the_driver_while_they_fit_its_heaps_share(spark):
    heap = spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory()
    assert hashes_on_driver(spark, 1_000, 3)
    assert not hashes_on_driver(spark, heap, 3)
    # a fourth hash a row takes a fifth more
    fits = heap * 0.1 / 32
    assert hashes_on_driver(spark, fits * 0.99, 3) and not hashes_on_driver(spark, fits * 0.99, 4)
    spark.conf.set(HASHES_HEAP_SHARE_CONF, "0")
    try:
        assert not hashes_on_driver(spark, 1, 3)
    finally:
        spark.conf.unset(HASHES_HEAP_SHARE_CONF)


def test_tables_are_cached_uncompressed_only_while_they_fit_the_heaps_share(spark):
    session = spark.newSession()
    session.conf.unset(CACHE_COMPRESSED)
    session.conf.set(UNCOMPRESSED_HEAP_SHARE_CONF, "0.25")
    heap = spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory()
    fitting = int(heap * 0.25) // UNCOMPRESSED_LINE_BYTES

    assert cache_settings(session, fitting) == {CACHE_COMPRESSED: "false"}
    assert cache_settings(session, fitting + 1) == {}
    session.conf.set(UNCOMPRESSED_HEAP_SHARE_CONF, "0")
    assert cache_settings(session, 1) == {}
    # The application's own choice stands.
    session.conf.set(UNCOMPRESSED_HEAP_SHARE_CONF, "0.25")
    session.conf.set(CACHE_COMPRESSED, "true")
    assert cache_settings(session, 1) == {}


def test_tables_are_cached_until_closed_and_a_failing_table_fails_the_gate(spark):
    def broken():
        raise ValueError("cannot build this table")

    tables = MaterialisedTables(spark, {
        "numbers": lambda: spark.range(10).toDF("n"),
        "broken": broken,
        "letters": lambda: spark.createDataFrame([("a",), ("b",)], "letter string"),
    })
    seen = {}
    with pytest.raises(ValueError, match="cannot build this table"):
        for name, frame in tables.as_cached():
            seen[name] = frame
            assert frame.is_cached and frame.rdd.getNumPartitions() <= spark.sparkContext.defaultParallelism
    tables.close()

    assert set(seen) <= {"numbers", "letters"}
    assert all(not frame.is_cached for frame in seen.values())
    assert tables.seconds() >= 0


def test_a_scanned_table_comes_back_as_it_is_and_is_cached_only_when_kept(spark):
    tables = MaterialisedTables(spark, {
        "scanned": lambda: Scanned(spark.range(10).toDF("n")),
        "cached": lambda: spark.range(5).toDF("n"),
    }, driver_rows=-1)
    try:
        frames = dict(tables.as_cached())
        assert tables.scanned == {"scanned"}
        assert not frames["scanned"].is_cached and frames["cached"].is_cached
        kept = tables.keep(frames["scanned"])
        assert kept.is_cached and kept.count() == 10
    finally:
        tables.close()
    assert not kept.is_cached and not frames["cached"].is_cached


def test_a_table_with_few_rows_comes_back_as_a_pandas_frame_and_a_larger_one_stays_cached(spark):
    tables = MaterialisedTables(spark, {
        "few": lambda: spark.range(10).where("id < 3").toDF("n"),
        "many": lambda: spark.range(10).toDF("n"),
    }, driver_rows=3)
    try:
        frames = dict(tables.as_cached())
        assert isinstance(frames["few"], pd.DataFrame) and sorted(frames["few"]["n"]) == [0, 1, 2]
        assert str(frames["few"]["n"].dtype) == "Int64"  # nullable, as GX's pandas checkpoints expect
        assert not isinstance(frames["many"], pd.DataFrame) and frames["many"].is_cached
        assert frames["many"].count() == 10
    finally:
        tables.close()
    assert not frames["many"].is_cached


def test_small_frames_come_back_as_local_tables_and_large_ones_stay_lazy(spark):
    small = SmallFrames(spark, {
        "none": lambda _: spark.range(100).where("id < 0"),
        "few": lambda _: spark.range(100).where("id < 3"),
        "many": lambda _: spark.range(100).where("id < 50"),
    }, limit=10)
    try:
        # Empty: optimised into an empty local relation, so a join to it disappears from the plan.
        assert small.get("none").collect() == []
        assert "LocalRelation <empty>" in small.get("none")._jdf.queryExecution().optimizedPlan().toString()
        assert sorted(r.id for r in small.get("few").collect()) == [0, 1, 2]
        assert small.get("many").count() == 50
        assert small.rows == {"none": 0, "few": 3, "many": None}
    finally:
        small.close()
