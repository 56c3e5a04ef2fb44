"""driver_verdicts.py on a tiny batch: the driver's tally, dropped verdicts and delivered numbers
by line are what transforms.verdicts gives in Spark from the same ranks and kernel output, with a
count cache that has a counter before the batch, a time cache with a clock, the parent's entries,
a transaction dropped whole and a repeated message id, whole and a few messages at a time. The
engine-vs-model property tests run it on whole batches ("small")."""

import numpy as np
import pytest

from msgdedup.config import TIME, AddressSetting
from msgdedup.engine import batch, driver_verdicts, kernel, line_lookup, transforms, unit_ranks
from msgdedup.engine.parsing import LINE_BITS
from msgdedup.engine.windows import CacheWindow
from msgdedup.local_frames import local_frame

KEYS = "row_id long, message_id string, address string, received_us long, txn_id string, source_id string, " \
       "cache string, dedup_key string"
WINDOWS = {
    "c": CacheWindow("c", AddressSetting(id_cache_size=3), "a1", last_seq=5, carried=True, inherited=True),
    "t": CacheWindow("t", AddressSetting(id_cache_size=None, policy=TIME, duplicate_window_us=50), "a2",
                     last_seq=2, clock_us=100, carried=True, inherited=True),
}


def _row(file_index: int, line: int) -> int:
    return (file_index << LINE_BITS) | line


ROWS = [
    (_row(0, 1), "m1", "a1", 10, None, None, "c", "k1"),
    (_row(0, 2), "m2", "a1", 20, None, None, "c", "k2"),    # k2 in the parent's c, still held: dropped
    (_row(0, 3), "m3", "a1", 30, "T", None, "c", "k1"),     # T repeats k1: dropped whole
    (_row(0, 4), "m4", "b9", 35, "T", None, None, None),    # T's message without a key, on another address
    (_row(0, 5), "m5", "a1", 40, None, None, "c", "k3"),
    (_row(1, 1), "m6", "a2", 50, None, None, "t", "x1"),    # before the cache's time: enters at 100
    (_row(1, 2), "m7", "a2", 120, None, None, "t", "x1"),   # x1 again, within 50 us of 100: dropped
    (_row(1, 4), "m8", "a2", 300, None, None, "t", "x2"),   # x2 in the parent's t, long gone: delivered
    (_row(1, 5), "m9", "b9", 310, None, None, None, None),
    (_row(1, 6), "m10", "a2", 320, None, None, "t", "x3"),
    (_row(1, 7), "m11", "a2", 60, None, None, "t", "x4"),    # the last line, entered before m8 and m10
]
PARENT = [("c", "k2", 4, "p2", "a1", "b0", None, None, None), ("t", "x2", 2, "p8", "a2", "b0", 100, None, None)]


@pytest.mark.parametrize("chunk", [2, 3, 1 << 17])
def test_the_driver_gives_the_verdicts_spark_gives(spark, monkeypatch, chunk):
    """Taken two and three messages at a time too, so that a transaction, a cache's ranks and a
    tally's group (its count and its latest instant) cross the chunks' bounds."""
    monkeypatch.setattr(driver_verdicts, "_CHUNK", chunk)
    messages = spark.createDataFrame(ROWS, KEYS)
    rows = messages.select(*unit_ranks.columns([])).toArrow()
    parent = spark.createDataFrame(PARENT, transforms.SNAPSHOT_SCHEMA)
    met = np.array([r[0] for r in parent.select(unit_ranks.key_hash()).collect()], np.int64)
    by_line, ranks = unit_ranks.rank(rows, met)
    units = unit_ranks.units(messages, spark.createDataFrame(by_line, unit_ranks.RANKS_SPARK_SCHEMA), [])
    stream = transforms.in_unit_order_on_driver(transforms.decision_stream(units, parent).toArrow())
    decided = kernel.decide_table(stream.to_batches(), WINDOWS, "b1")
    starts = local_frame(spark, [(n, w.last_seq, w.clock_us, w.timed) for n, w in WINDOWS.items()],
                         "cache string, last_seq long, clock_us long, timed boolean")
    copies = local_frame(spark, [(_row(1, 9), "duplicate message_id 'm1' (first at f0:1)")],
                         "row_id long, error string")
    verdicts = transforms.verdicts(units, spark.createDataFrame(decided, transforms.OUTPUT_SPARK_SCHEMA), copies,
                                   starts)

    caches = batch._names_by_hash(spark, list(WINDOWS), unit_ranks.cache_hash(), "cache")
    addresses = batch._names_by_hash(spark, ["a1", "a2", "b9"], unit_ranks.address_hash(), "address")
    got = driver_verdicts.decide(ranks, decided, WINDOWS, caches, addresses, copies=1, lookup=True)

    key = lambda r: tuple((k, repr(v)) for k, v in sorted(r.items()))  # noqa: E731
    expected_tally = [r.asDict() for r in transforms.verdict_counts(verdicts).collect()]
    assert sorted(got.tally, key=key) == sorted(expected_tally, key=key)
    dropped = transforms.verdicts_for(verdicts, kernel.DROPPED).collect()
    assert sorted(got.dropped.to_pylist(), key=key) == sorted((r.asDict() for r in dropped), key=key)
    numbered = line_lookup.numbered_in_batch(transforms.verdicts_for(verdicts, kernel.DELIVERED, keys=True),
                                             starts, instants=True)
    assert got.lookup.equals(line_lookup.by_line(numbered.toArrow()))

    # and the verdicts themselves: T dropped whole, k2 held by the parent, x1's resend in its window
    outcomes = {r["message_id"]: (r["outcome"], r["reason"], r["cache_seq"], r["received_at_us"])
                for r in verdicts.collect() if r["message_id"]}
    assert outcomes == {
        "m1": ("delivered", None, 6, None), "m2": ("dropped", "duplicate", None, None),
        "m3": ("dropped", "duplicate", None, None), "m4": ("dropped", "transaction_rejected", None, None),
        "m5": ("delivered", None, 7, None), "m6": ("delivered", None, 3, 100),
        "m7": ("dropped", "duplicate", None, None), "m8": ("delivered", None, 5, 300),
        "m9": ("delivered", None, None, None), "m10": ("delivered", None, 6, 320),
        "m11": ("delivered", None, 4, 100)}


def test_a_contested_message_the_kernel_did_not_decide_is_an_error(spark):
    messages = spark.createDataFrame(ROWS, KEYS)
    _, ranks = unit_ranks.rank(messages.select(*unit_ranks.columns([])).toArrow(), np.empty(0, np.int64))
    with pytest.raises(RuntimeError, match="no verdict"):
        driver_verdicts.decide(ranks, kernel.OUTPUT_SCHEMA.empty_table(), WINDOWS, {}, {}, copies=0, lookup=False)
