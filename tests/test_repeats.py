"""Values that repeat, found on the driver (msgdedup.repeats)."""

from __future__ import annotations

import pyarrow as pa

from msgdedup.repeats import repeated_values, values_frame


def test_each_value_held_more_than_once_is_found_once_across_chunks_and_nulls_are_no_value():
    column = pa.chunked_array([pa.array([5, 1, None, 9], pa.int64()), pa.array([1, None, 5, 5, -3], pa.int64())])

    assert repeated_values(column).tolist() == [1, 5]
    assert repeated_values(pa.array([None, None], pa.int64())).tolist() == []
    assert repeated_values(pa.array([], pa.int64())).tolist() == []


def test_the_values_become_a_local_frame_of_longs(spark):
    frame = values_frame(spark, repeated_values(pa.array([7, 7, 2**62, 2**62, 3], pa.int64())), "id_hash")

    assert frame.schema.simpleString() == "struct<id_hash:bigint>"
    assert sorted(r.id_hash for r in frame.collect()) == [7, 2**62]
    assert "LocalRelation" in frame._jdf.queryExecution().optimizedPlan().toString()
    empty = values_frame(spark, repeated_values(pa.array([1, 2], pa.int64())), "_hash")
    assert empty.collect() == [] and "LocalRelation <empty>" in empty._jdf.queryExecution().optimizedPlan().toString()
