"""unit_ranks.py on tiny frames: the driver places, marks and ranks the units as transforms.py's
windows and aggregation do, across files, with gaps in the lines and a transaction whose last two
messages share an instant, and finds Apama caches' quiet senders and resting entries as its
aggregation and joins do; a key hash shared by two keys (which a generated stream never reaches)
only makes more units contested. The engine-vs-model property tests run it on whole batches
("small", "by line")."""

import numpy as np
import pyarrow as pa
from pyspark.sql import functions as F

from msgdedup.engine import kernel, line_lookup, transforms, unit_ranks
from msgdedup.engine.parsing import LINE_BITS
from msgdedup.local_frames import local_frame
from msgdedup.repeats import values_frame

MESSAGES = "row_id long, message_id string, received_us long, txn_id string, cache string, dedup_key string, " \
           "address string"
RANKED = ["unit_us", "unit_row", "contested", "free_rank", "contested_rank"]


def _row(file_index: int, line: int) -> int:
    return (file_index << LINE_BITS) | line


# Two files, lines missing in each (invalid lines); transactions across files and caches.
ROWS = [
    (_row(0, 1), "m1", 10, None, "c", "k1", "a"),   # k1 again at row (1, 2): both contested
    (_row(0, 2), "m2", 20, "t", "c", "k2", "a"),    # transaction t: its last message is (1, 4), at 40 us
    (_row(0, 4), "m3", 30, None, "c", "k3", "a"),
    (_row(0, 5), "m4", 5, None, "d", "k4", "a"),    # the parent holds k4 in d
    (_row(1, 2), "m5", 15, None, "c", "k1", "a"),
    (_row(1, 3), "m6", 25, "t", "d", "k5", "a"),
    (_row(1, 4), "m7", 40, "t", None, None, "a"),   # t's message without a key
    (_row(1, 7), "m8", 35, "u", "d", "k6", "a"),    # transaction u, alone
    (_row(1, 8), "m9", 50, None, None, None, "a"),  # a single message without a key
    (_row(1, 9), "m10", 45, None, "d", "k5", "a"),  # k5 again: t is contested
    (_row(0, 6), "m11", 60, "v", "c", "k7", "a"),   # transaction v: two messages at one instant, so
    (_row(1, 10), "m12", 60, "v", "c", "k8", "a"),  # its commit point is the later row, (1, 10)
    (_row(1, 11), "m13", 55, "v", "d", "k9", "a"),
]


def _by_spark(spark, messages, parent_keys):
    batch_keys = transforms.batch_keys(messages)
    met = transforms.entries_met(parent_keys, batch_keys)
    marked = transforms.mark_repeated(messages, transforms.repeated_keys(batch_keys, met), [])
    return {r["row_id"]: tuple(r[c] for c in RANKED)
            for r in transforms.rank_in_caches(transforms.assign_units(marked)).collect()}


def _by_driver(spark, messages, met_hashes):
    by_line, ranks = unit_ranks.rank(messages.select(*unit_ranks.columns([])).toArrow(), met_hashes)
    units = unit_ranks.units(messages, spark.createDataFrame(by_line, unit_ranks.RANKS_SPARK_SCHEMA), [])
    got = {r["row_id"]: tuple(r[c] for c in RANKED) for r in units.collect()}
    assert ranks.contested == sum(r[2] for r in got.values())
    return got


def _hashes(spark, keys: list[tuple]) -> np.ndarray:
    frame = spark.createDataFrame(keys, "cache string, dedup_key string")
    return np.array([r[0] for r in frame.select(unit_ranks.key_hash()).collect()], np.int64)


def test_the_driver_places_marks_and_ranks_units_as_the_windows_and_the_aggregation_do(spark):
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
    assert expected[_row(0, 6)][:2] == expected[_row(1, 11)][:2] == (60, _row(1, 10))


def test_a_key_hash_shared_with_the_parents_entries_only_contests_more_units(spark):
    """A unique key whose hash the parent's entries have (as a collision would make it) has its
    unit contested, so the kernel decides it on its key; nothing else changes but the ranks that
    count contested and uncontested messages."""
    messages = spark.createDataFrame(ROWS, MESSAGES)
    exact = _by_driver(spark, messages, np.empty(0, np.int64))
    collided = _by_driver(spark, messages, _hashes(spark, [("c", "k3")]))
    assert exact[_row(0, 4)][2] is False and collided[_row(0, 4)][2] is True
    assert {r for r in exact if exact[r][2] != collided[r][2]} == {_row(0, 4)}


def test_ranks_that_do_not_fit_a_list_column_are_refused(spark, monkeypatch):
    """Each file's lines here are one block: one fits, two do not."""
    monkeypatch.setattr(unit_ranks, "_MAX_ELEMENTS", line_lookup.BLOCK_LINES)
    messages = spark.createDataFrame(ROWS, MESSAGES).filter(F.col("row_id") < _row(1, 0))
    assert unit_ranks.rank(messages.select(*unit_ranks.columns([])).toArrow(), np.empty(0, np.int64)) is not None
    assert unit_ranks.rank(spark.createDataFrame(ROWS, MESSAGES)
                           .select(*unit_ranks.columns([])).toArrow(), np.empty(0, np.int64)) is None


# Apama caches c (2 keys per sender) and d (3); e counts. Senders: c/p1 loud (2 messages and an
# entry of the parent's), c/p2 and c's null sender quiet, d/p1 quiet (3 messages), d/p3 quiet
# with entries only (one named by the batch), d/p4 loud (4 entries: its window shrank).
SENT = "row_id long, message_id string, received_us long, txn_id string, cache string, dedup_key string, " \
       "source_id string, address string"
SENT_ROWS = [
    (_row(0, 1), "s1", 1, None, "c", "a1", "p1", "a"), (_row(0, 2), "s2", 2, None, "c", "a2", "p1", "a"),
    (_row(0, 3), "s3", 3, "t", "c", "a3", "p2", "a"), (_row(0, 4), "s4", 4, "t", "d", "b1", "p1", "a"),
    (_row(0, 5), "s5", 5, None, "c", "a4", None, "a"), (_row(0, 6), "s6", 6, None, "c", "a5", None, "a"),
    (_row(1, 1), "s7", 7, None, "d", "b2", "p1", "a"), (_row(1, 2), "s8", 8, None, "d", "b3", "p1", "a"),
    (_row(1, 3), "s9", 9, None, "e", "x", "p1", "a"), (_row(1, 5), "s10", 10, None, None, None, "p2", "a"),
]
ENTRIES = [("c", "old1", "p1", kernel.SENDER_QUEUE), ("c", "old2", "p9", kernel.SHARED_QUEUE),
           ("d", "r1", "p3", kernel.SENDER_QUEUE), ("d", "b3", "p3", kernel.SENDER_QUEUE)] + \
          [("d", f"f{i}", "p4", kernel.SENDER_QUEUE) for i in range(4)]
WINDOWS = {"c": 2, "d": 3}


def test_the_driver_finds_quiet_senders_and_resting_entries_as_spark_does(spark):
    messages = spark.createDataFrame(SENT_ROWS, SENT)
    parent = spark.createDataFrame(
        [(c, k, i, f"m-{k}", "addr", "b0", 0, s, q) for i, (c, k, s, q) in enumerate(ENTRIES)],
        transforms.SNAPSHOT_SCHEMA)
    windows = local_frame(spark, list(WINDOWS.items()), "cache string, per_source_window long")
    quiet = transforms.quiet_senders(messages, parent, windows)
    expected = {r["row_id"]: r["quiet"] for r in transforms.mark_repeated(
        messages, spark.createDataFrame([], "cache string, dedup_key string"), list(WINDOWS), quiet).collect()}
    assert {r for r, q in expected.items() if q} == {_row(0, 3), _row(0, 4), _row(0, 5), _row(0, 6), _row(1, 1),
                                                     _row(1, 2)}

    rows = messages.select(*unit_ranks.columns(list(WINDOWS))).toArrow()
    hashes = dict(local_frame(spark, [(c,) for c in WINDOWS], "cache string")
                  .select("cache", unit_ranks.cache_hash()).collect())
    got, quiet_hashes = unit_ranks.quiet_senders(rows, {hashes[c]: w for c, w in WINDOWS.items()},
                                                 unit_ranks.held(parent).toArrow())
    assert dict(zip(rows["row_id"].to_pylist(), got.tolist(), strict=True)) == expected
    by_line, _ = unit_ranks.rank(rows, np.empty(0, np.int64), got)
    units = unit_ranks.units(messages, spark.createDataFrame(by_line, unit_ranks.RANKS_SPARK_SCHEMA),
                             list(WINDOWS))
    assert {r["row_id"]: r["quiet"] for r in units.collect()} == expected
    assert {r["row_id"] for r in units.filter("sequential").collect()} == {r[0] for r in SENT_ROWS if r[4] in WINDOWS}

    flags = lambda frame: {(r["cache"], r["dedup_key"]): (r["named"], r["resting"])  # noqa: E731
                           for r in frame.collect()}
    by_spark = flags(transforms.named_entries(parent, transforms.batch_keys(messages), quiet))
    batch_hashes = values_frame(spark, rows["key_hash"].drop_null().unique().to_numpy(), "key_hash")
    by_driver = flags(unit_ranks.named_entries(parent, batch_hashes, values_frame(spark, quiet_hashes,
                                                                                  unit_ranks.SENDER)))
    assert by_driver == by_spark
    assert {k for k, (_, resting) in by_spark.items() if resting} == {("d", "r1")}


def test_a_sender_hash_shared_by_two_senders_only_makes_fewer_quiet(spark):
    """Two senders sharing a hash (as a collision would make them) are counted as one, held to
    the smaller window: d/p1's three messages and c/p2's one do not fit c's 2."""
    messages = spark.createDataFrame(SENT_ROWS, SENT)
    rows = messages.select(*unit_ranks.columns(list(WINDOWS))).toArrow()
    hashes = dict(local_frame(spark, [(c,) for c in WINDOWS], "cache string")
                  .select("cache", unit_ranks.cache_hash()).collect())
    empty = unit_ranks.HELD_SCHEMA.empty_table()
    limits = {hashes[c]: w for c, w in WINDOWS.items()}
    exact, _ = unit_ranks.quiet_senders(rows, limits, empty)
    senders = rows[unit_ranks.SENDER].to_numpy(zero_copy_only=False)
    d_p1 = senders[rows["row_id"].to_pylist().index(_row(1, 1))]
    c_p2 = senders[rows["row_id"].to_pylist().index(_row(0, 3))]
    shared = rows.set_column(rows.schema.get_field_index(unit_ranks.SENDER), unit_ranks.SENDER,
                             pa.array(np.where(senders == c_p2, d_p1, senders), pa.int64(),
                                      mask=~rows[unit_ranks.SENDER].is_valid().to_numpy(zero_copy_only=False)))
    collided, _ = unit_ranks.quiet_senders(shared, limits, empty)
    assert not (collided & ~exact).any()
    changed = {r for r, a, b in zip(rows["row_id"].to_pylist(), exact, collided, strict=True) if a != b}
    assert changed == {_row(0, 3), _row(0, 4), _row(1, 1), _row(1, 2)}


DELIVERED = "message_id string, address string, source_id string, cache string, dedup_key string, " \
            "cache_seq long, entered_at_us long"


def test_the_quiet_senders_acceptances_are_found_among_the_delivered_messages(spark):
    """What the snapshot keeps of an Apama batch ranked on the driver (batch._acceptances): the
    uncontested acceptances of quiet senders, as transforms.acceptances gives them with their
    ``queue``; not a contested one (the kernel's queues hold it), not a loud sender's, not one of
    a count cache whose sender's hash is a quiet one's, not a message without a key."""
    delivered = spark.createDataFrame([
        ("m1", "a", "p1", "q", "k1", 1, 100),      # quiet p1, uncontested: queued
        ("m2", "a", "p1", "q", "k2", 2, 110),      # contested: the kernel accepted it
        ("m3", "a", "p2", "q", "k3", 3, 120),      # p2 is loud
        ("m4", "a", None, "q", "k4", 4, 130),      # the senders without a source_id share a queue
        ("m5", "b", "p1", "c", "k1", 1, None),     # a count cache
        ("m6", "b", "p1", None, None, None, None),  # no key
    ], DELIVERED)
    sender = lambda cache, source: spark.range(1).select(  # noqa: E731
        F.xxhash64(F.lit(cache), F.lit(source).cast("string"))).first()[0]
    quiet = values_frame(spark, np.array([sender("q", "p1"), sender("q", None), sender("c", "p1")]),
                         unit_ranks.SENDER)
    kernel_seqs = spark.createDataFrame([("q", 2)], "cache string, cache_seq long")
    found = unit_ranks.queued_acceptances(delivered, ["q"], quiet, kernel_seqs, "B1")
    assert sorted(tuple(r) for r in found.select(*transforms.SNAPSHOT_COLUMNS).collect()) == [
        tuple({"cache": "q", "dedup_key": key, "cache_seq": seq, "message_id": mid, "address": "a",
               "accepted_batch_id": "B1", "received_at_us": at, "source_id": source,
               "queue": kernel.SENDER_QUEUE}[c] for c in transforms.SNAPSHOT_COLUMNS)
        for key, seq, mid, at, source in (("k1", 1, "m1", 100, "p1"), ("k4", 4, "m4", 130, None))]
