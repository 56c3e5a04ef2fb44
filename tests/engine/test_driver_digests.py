"""The snapshot digests the driver computes (engine/driver_digests.py) against Spark's own: a
snapshot's fingerprint must be the same whichever plan wrote it."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from msgdedup.engine import driver_digests, manifest, transforms

LONGS = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.integers(-3, 3))
# lengths around XXH64's steps (4- and 8-byte tails, 32-byte stripes) and multi-byte characters
TEXT = st.one_of(st.none(), st.text(max_size=80), st.text(st.sampled_from("aé€𝄞"), max_size=40),
                 st.sampled_from(["", "k", "key-1", "x" * 31, "y" * 32, "z" * 33, "w" * 64, "v" * 71]))


def _entries(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=transforms.SNAPSHOT_ARROW_SCHEMA)


def _spark_hashes(frame, *first) -> list[int]:
    """Spark's ``xxhash64(*first, *DIGESTED)`` of every row, as the unsigned 64 bits."""
    hashes = frame.select(F.xxhash64(*first, *transforms.DIGESTED).alias("h")).toArrow()["h"].to_pylist()
    return [v & ((1 << 64) - 1) for v in hashes]


ENTRY = st.fixed_dictionaries({
    "cache": st.sampled_from(["q.a", "q.b", "BRIDGE.q.a"]), "dedup_key": TEXT, "cache_seq": LONGS,
    "message_id": TEXT, "address": st.sampled_from([None, "q.a", "q.b", "q.c"]),
    "accepted_batch_id": st.sampled_from(["b0", "b1"]), "received_at_us": LONGS, "source_id": TEXT,
    "queue": st.sampled_from([None, "sender", "shared"]),
})


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(ENTRY, max_size=60))
def test_the_driver_hashes_as_spark_does(spark, rows):
    table = _entries(rows)
    frame = spark.createDataFrame(table, transforms.SNAPSHOT_SCHEMA)
    digested = [table[name] for name in transforms.DIGESTED]
    assert driver_digests.xxhash64(digested).tolist() == _spark_hashes(frame)
    assert driver_digests.xxhash64(digested, first_int=1).tolist() == _spark_hashes(frame, F.lit(1))
    # and folded per cache, as the manifest records them
    expected = manifest.cache_digests(transforms.entry_digests(frame).collect())
    assert manifest.cache_digests(driver_digests.entry_digests(table)) == expected


def test_a_driver_plan_and_a_spark_plan_record_the_same_fingerprints(spark, tmp_path):
    """The same two batches (the second on the first's snapshot, which evicts), decided and
    written by the driver and by Spark: the same caches, digests and fingerprints."""
    from msgdedup.config import parse_settings
    from msgdedup.engine import batch
    from msgdedup.engine.planning import DRIVER_DECIDE_LINES_CONF

    from tests.engine.support import message, write_batch

    def lines(first: int) -> dict[str, list]:
        return {f"part-{p}.jsonl": [message(f"m{i}-{p}", ("orders", "payments")[i % 2], at=i, key=f"k{i // 6}",
                                            txn=f"t{i // 4}" if i % 3 == 0 else None)
                                    for i in range(first + p, first + 60, 2)] for p in range(2)}

    inputs = [tmp_path / "in0", tmp_path / "in1"]
    write_batch(inputs[0], lines(0))
    write_batch(inputs[1], lines(30))
    config = parse_settings({"address_settings": {"#": {"id_cache_size": 4}}})
    recorded = {}
    for plan, rows in (("driver", None), ("spark", "-1")):
        if rows is not None:
            spark.conf.set(DRIVER_DECIDE_LINES_CONF, rows)
        try:
            recorded[plan] = [batch.run_batch(spark, str(path), str(tmp_path / plan), f"2026-11-21T0{i}", config)
                              for i, path in enumerate(inputs)]
        finally:
            spark.conf.unset(DRIVER_DECIDE_LINES_CONF)
    for driver, in_spark in zip(recorded["driver"], recorded["spark"], strict=True):
        assert driver["counts"] == in_spark["counts"]
        assert driver["caches"] == in_spark["caches"]
        assert driver["snapshot_fingerprint"] == in_spark["snapshot_fingerprint"]
    assert recorded["driver"][1]["counts"]["dropped"] > 0


def test_many_rows_of_one_length_are_hashed_in_slices(spark, monkeypatch):
    """Rows of one byte length are gathered a slice at a time (a snapshot can hold a million
    entries): the slices' hashes are the whole's."""
    monkeypatch.setattr(driver_digests, "_GATHERED", 100)
    table = _entries([{"cache": "q", "dedup_key": f"key-{i:05d}", "cache_seq": i, "message_id": f"m{i % 7}" * 9,
                       "address": "q", "accepted_batch_id": "b0", "received_at_us": None, "source_id": None,
                       "queue": None} for i in range(500)])
    frame = spark.createDataFrame(table, transforms.SNAPSHOT_SCHEMA)
    assert driver_digests.xxhash64([table[name] for name in transforms.DIGESTED]).tolist() == _spark_hashes(frame)
