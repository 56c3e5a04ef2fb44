"""unit_ranks.py on tiny frames: the driver marks and ranks the units as transforms.py's aggregation
and window do, across files and with gaps in the lines; a key hash shared by two keys (which a
generated stream never reaches) only makes more units contested. The engine-vs-model property
tests run it on whole batches ("small", "by line")."""

import numpy as np
from pyspark.sql import functions as F

from msgdedup.engine import transforms, unit_ranks
from msgdedup.engine.parsing import LINE_BITS

MESSAGES = "row_id long, message_id string, received_us long, txn_id string, cache string, dedup_key string"
RANKED = ["unit_us", "unit_row", "contested", "free_rank", "contested_rank"]


def _row(file_index: int, line: int) -> int:
    return (file_index << LINE_BITS) | line


# Two files, lines missing in each (invalid lines); transactions across files and caches.
ROWS = [
    (_row(0, 1), "m1", 10, None, "c", "k1"),   # k1 again at row (1, 2): both contested
    (_row(0, 2), "m2", 20, "t", "c", "k2"),    # transaction t: its last message is (1, 4), at 40 us
    (_row(0, 4), "m3", 30, None, "c", "k3"),
    (_row(0, 5), "m4", 5, None, "d", "k4"),    # the parent holds k4 in d
    (_row(1, 2), "m5", 15, None, "c", "k1"),
    (_row(1, 3), "m6", 25, "t", "d", "k5"),
    (_row(1, 4), "m7", 40, "t", None, None),   # t's message without a key
    (_row(1, 7), "m8", 35, "u", "d", "k6"),    # transaction u, alone
    (_row(1, 8), "m9", 50, None, None, None),  # a single message without a key
    (_row(1, 9), "m10", 45, None, "d", "k5"),  # k5 again: t is contested
]


def _by_spark(spark, messages, parent_keys):
    batch_keys = transforms.batch_keys(messages)
    met = transforms.entries_met(parent_keys, batch_keys)
    marked = transforms.mark_repeated(messages, transforms.repeated_keys(batch_keys, met), [])
    return {r["row_id"]: tuple(r[c] for c in RANKED)
            for r in transforms.rank_in_caches(transforms.assign_units(marked)).collect()}


def _by_driver(spark, messages, met_hashes):
    positioned = transforms.position_units(messages)
    ranks, contested = unit_ranks.rank(positioned.select(*unit_ranks.columns()).toArrow(), met_hashes)
    units = unit_ranks.units(positioned, spark.createDataFrame(ranks, unit_ranks.RANKS_SPARK_SCHEMA))
    got = {r["row_id"]: tuple(r[c] for c in RANKED) for r in units.collect()}
    assert contested == sum(r[2] for r in got.values())
    return got


def _hashes(spark, keys: list[tuple]) -> np.ndarray:
    frame = spark.createDataFrame(keys, "cache string, dedup_key string")
    return np.array([r[0] for r in frame.select(unit_ranks.key_hash()).collect()], np.int64)


def test_the_driver_marks_and_ranks_units_as_the_aggregation_and_the_window_do(spark):
    messages = spark.createDataFrame(ROWS, MESSAGES)
    parent = [("d", "k4"), ("d", "gone")]
    met = _hashes(spark, [("d", "k4")])  # the parent's entry the batch's keys meet (batch._ranks finds it)
    expected = _by_spark(spark, messages, spark.createDataFrame(parent, "cache string, dedup_key string"))
    assert _by_driver(spark, messages, met) == expected
    # and the plan's answer itself: t is one contested unit at (1, 4); k4 is contested by its entry
    assert expected[_row(0, 2)] == (40, _row(1, 4), True, 1, 3)  # after k1's two and k3 in c
    assert expected[_row(0, 5)] == (5, _row(0, 5), True, 0, 1)
    assert expected[_row(1, 4)] == (40, _row(1, 4), True, None, None)
    assert expected[_row(0, 4)] == (30, _row(0, 4), False, 1, 2)


def test_a_key_hash_shared_with_the_parents_entries_only_contests_more_units(spark):
    """A unique key whose hash the parent's entries have (as a collision would make it) has its
    unit contested, so the kernel decides it on its key; nothing else changes but the ranks that
    count contested and uncontested messages."""
    messages = spark.createDataFrame(ROWS, MESSAGES)
    exact = _by_driver(spark, messages, np.empty(0, np.int64))
    collided = _by_driver(spark, messages, _hashes(spark, [("c", "k3")]))
    assert exact[_row(0, 4)][2] is False and collided[_row(0, 4)][2] is True
    assert {r for r in exact if exact[r][2] != collided[r][2]} == {_row(0, 4)}


def test_ranks_that_do_not_fit_spark_arrays_are_refused(spark, monkeypatch):
    monkeypatch.setattr(unit_ranks, "_MAX_ELEMENTS", 5)
    messages = spark.createDataFrame(ROWS, MESSAGES).filter(F.col("row_id") < _row(1, 0))
    positioned = transforms.position_units(messages)
    assert unit_ranks.rank(positioned.select(*unit_ranks.columns()).toArrow(), np.empty(0, np.int64)) is not None
    assert unit_ranks.rank(transforms.position_units(spark.createDataFrame(ROWS, MESSAGES))
                           .select(*unit_ranks.columns()).toArrow(), np.empty(0, np.int64)) is None
