"""driver_audit.py against audit.py: on generated verdicts and parent entries, the driver's misses
per cache are what audit.py's Spark functions find, given only the keys audit.audit_keys would
give them (repeated in the batch, or held by the parent): the driver looks at every delivered
key, and a key with no earlier acceptance must add nothing. A count and a time cache, with
transactions (a unit's lookup before its first acceptance). The engine-vs-model property tests
run both on whole batches."""

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msgdedup.engine import audit, driver_audit, kernel
from msgdedup.local_frames import local_frame

BATCH = "b1"
# (cache, policy, window, reach, floor, oldest_us, remembered_seq, remembered_us), as audit.bounds_rows
BOUNDS = [("c", "count", 2, 6, None, None, None, None), ("t", "time", 100, 300, None, None, None, None)]
VERDICTS = pa.schema([
    ("row_id", pa.int64()), ("outcome", pa.string()), ("cache", pa.string()), ("dedup_key", pa.string()),
    ("cache_seq", pa.int64()), ("message_id", pa.string()), ("address", pa.string()),
    ("received_at_us", pa.int64()), ("unit_row", pa.int64()),
])
ENTRIES = pa.schema([(name, pa.int64() if name in ("cache_seq", "received_at_us") else pa.string())
                     for name in audit.ENTRY_COLUMNS])


@st.composite
def batches(draw):
    """The parent's entries (seqs 1..) and this batch's units after them: each unit one message or
    a transaction of two or three, each message delivered with a key, dropped, or without a key."""
    keys = st.sampled_from(["k1", "k2", "k3", "k4", "k5"])
    seq = {"c": 0, "t": 0}
    instant = 0
    earlier = []
    for _ in range(draw(st.integers(0, 6))):
        cache = draw(st.sampled_from(["c", "t"]))
        seq[cache] += 1
        instant += draw(st.integers(1, 80))
        earlier.append({"cache": cache, "dedup_key": draw(keys), "cache_seq": seq[cache],
                        "message_id": f"p{len(earlier)}", "address": cache, "accepted_batch_id": "b0",
                        "received_at_us": instant if cache == "t" else None})
    # the parent's entries of a key are distinct in it: one per (cache, key)
    earlier = list({(e["cache"], e["dedup_key"]): e for e in earlier}.values())
    verdicts, row = [], 0
    for _ in range(draw(st.integers(1, 8))):
        size = draw(st.sampled_from([1, 1, 2, 3]))
        rows = list(range(row + 1, row + size + 1))
        row += size
        instant += draw(st.integers(1, 80))
        for r in rows:
            kind = draw(st.sampled_from(["delivered", "delivered", "dropped", "unkeyed"]))
            cache = draw(st.sampled_from(["c", "t"]))
            delivered = kind != "dropped"
            if delivered and kind != "unkeyed":
                seq[cache] += 1
            keyed = kind != "unkeyed"
            verdicts.append({
                "row_id": r, "outcome": kernel.DELIVERED if delivered else kernel.DROPPED,
                "cache": cache if keyed else None, "dedup_key": draw(keys) if keyed else None,
                "cache_seq": seq[cache] if delivered and keyed else None, "message_id": f"m{r}",
                "address": cache, "received_at_us": instant if delivered and keyed and cache == "t" else None,
                "unit_row": rows[-1]})
    return pa.Table.from_pylist(verdicts, VERDICTS), pa.Table.from_pylist(earlier, ENTRIES)


def _in_spark(spark, verdicts: pa.Table, earlier: pa.Table) -> list[dict]:
    """audit.py's summary, with the keys audit_keys gives: those repeated among the batch's
    delivered ones and the parent's."""
    delivered = [(c, k) for c, k, o in zip(verdicts["cache"].to_pylist(), verdicts["dedup_key"].to_pylist(),
                                           verdicts["outcome"].to_pylist(), strict=True)
                 if c is not None and o == kernel.DELIVERED]
    held = set(zip(earlier["cache"].to_pylist(), earlier["dedup_key"].to_pylist(), strict=True))
    repeated = sorted({key for key in delivered if delivered.count(key) > 1} | held)
    keys = local_frame(spark, repeated, "cache string, dedup_key string")
    candidates = audit.audit_candidates(spark.createDataFrame(verdicts), keys)
    before = spark.createDataFrame(earlier, audit.ENTRY_SCHEMA) if earlier.num_rows \
        else local_frame(spark, [], audit.ENTRY_SCHEMA)
    misses = audit.window_misses(candidates, before, local_frame(spark, BOUNDS, audit.BOUNDS_SCHEMA), BATCH)
    return sorted((r.asDict() for r in audit.summary(misses).collect()), key=lambda r: r["cache"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(batch=batches())
def test_the_driver_finds_the_misses_audit_py_finds(spark, batch):
    verdicts, earlier = batch
    assert driver_audit.summary(verdicts, earlier, BOUNDS) == _in_spark(spark, verdicts, earlier)


def test_a_transactions_miss_counts_from_its_first_acceptance():
    """k1 was accepted at seq 1 in the parent; the batch's transaction accepts k9 (seq 5), then k1
    (seq 6): its lookup came before seq 5, so a window of 4 would have held k1: missed by 2."""
    earlier = pa.Table.from_pylist([{"cache": "c", "dedup_key": "k1", "cache_seq": 1, "message_id": "p1",
                                     "address": "a", "accepted_batch_id": "b0", "received_at_us": None}], ENTRIES)
    verdicts = pa.Table.from_pylist([
        {"row_id": 1, "outcome": kernel.DELIVERED, "cache": "c", "dedup_key": "k4", "cache_seq": 4,
         "message_id": "n1", "address": "a", "received_at_us": None, "unit_row": 1},
        {"row_id": 2, "outcome": kernel.DELIVERED, "cache": "c", "dedup_key": "k9", "cache_seq": 5,
         "message_id": "n2", "address": "a", "received_at_us": None, "unit_row": 3},
        {"row_id": 3, "outcome": kernel.DELIVERED, "cache": "c", "dedup_key": "k1", "cache_seq": 6,
         "message_id": "n3", "address": "a", "received_at_us": None, "unit_row": 3},
    ], VERDICTS)
    bounds = [("c", "count", 2, 10, None, None, None, None)]
    assert driver_audit.summary(verdicts, earlier, bounds) == [
        {"cache": "c", "misses": 1, "max_missed_by": 2, "covering": 4}]


@pytest.mark.parametrize("needed, covering", [([3], 3), (list(range(1, 101)), 99), (list(range(1, 201)), 198)])
def test_the_recommended_window_holds_99_percent_of_the_misses(needed, covering):
    """The nearest rank, ceil(0.99 × n), as the model's window_audit and Spark's percentile_disc."""
    earlier = pa.Table.from_pylist([{"cache": "c", "dedup_key": f"k{n}", "cache_seq": 1000 - n, "message_id": "p",
                                     "address": "a", "accepted_batch_id": "b0", "received_at_us": None}
                                    for n in needed], ENTRIES)
    verdicts = pa.Table.from_pylist([{"row_id": i, "outcome": kernel.DELIVERED, "cache": "c", "dedup_key": f"k{n}",
                                      "cache_seq": 1000, "message_id": f"m{i}", "address": "a",
                                      "received_at_us": None, "unit_row": i} for i, n in enumerate(needed)], VERDICTS)
    bounds = [("c", "count", 1, 10_000, None, None, None, None)]
    [row] = driver_audit.summary(verdicts, earlier, bounds)
    assert (row["misses"], row["covering"], row["max_missed_by"]) == (len(needed), covering, max(needed) - 1)
