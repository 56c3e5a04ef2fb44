"""The checked tables as pure DataFrame functions, on tiny inputs (no GX, no files)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import Window
from pyspark.sql import functions as F

from msgdedup.quality import tables
from tests.quality.warehouse_fixture import DELIVERED_DDL, DROPPED_DDL, ID_CACHE_DDL, delivered, dropped, entry


def frame(spark, rows, ddl):
    columns = [part.strip().split(" ")[0] for part in ddl.split(", ")]
    return spark.createDataFrame([tuple(r.get(c) for c in columns) for r in rows], ddl)


def none_dropped(spark):
    return frame(spark, [], DROPPED_DDL)


def sizes(spark, **caches):
    return tables.cache_sizes(spark, {"caches": {c: {"id_cache_size": s, "entries": 0} for c, s in caches.items()}})


def test_key_window_measures_the_gap_to_the_parent_snapshot_and_within_the_batch(spark):
    parent = frame(spark, [entry("k2", 2, "m2", "B1"), entry("k3", 3, "m3", "B1"), entry("k4", 4, "m4", "B1")],
                   ID_CACHE_DDL)
    batch = frame(spark, [
        delivered("n1", 1, "k4", 5),   # k4 accepted at 4: gap 1 <= 3 -> duplicate within the window
        delivered("n2", 2, "k2", 6),   # k2 accepted at 2: gap 4 > 3 -> fine (pushed out)
        delivered("n3", 3, "k9", 7),
        delivered("n4", 4, "k9", 9),   # k9 again 2 later in this batch -> duplicate
        delivered("n5", 5, None, None),  # not checked
        delivered("n6", 6, "k1", 10),  # first time seen
    ], DELIVERED_DDL)

    rows = {r.message_id: r for r in tables.key_window(
        batch, none_dropped(spark), parent, sizes(spark, **{"orders.eu": 3}), "B2").collect()}

    assert set(rows) == {"n1", "n2", "n3", "n4", "n6"}
    assert (rows["n1"].prev_message_id, rows["n1"].seq_gap, rows["n1"].prev_batch_id) == ("m4", 1, "B1")
    assert rows["n1"].duplicate_within_window.startswith("orders.eu key k4: n1 (cache_seq 5) delivered again 1")
    assert (rows["n2"].seq_gap, rows["n2"].duplicate_within_window) == (4, None)
    assert (rows["n4"].prev_message_id, rows["n4"].seq_gap, rows["n4"].prev_batch_id) == ("n3", 2, "B2")
    assert rows["n4"].duplicate_within_window is not None
    assert rows["n3"].duplicate_within_window is None and rows["n6"].prev_message_id is None


def test_transactions_allow_a_repeat_inside_but_not_a_partial_delivery(spark):
    delivered_rows = frame(spark, [
        delivered("a1", 1, "k1", 1, txn="A"), delivered("a2", 2, "k2", 2, txn="A"),
        delivered("b1", 3, "k3", 3, txn="B"),
        delivered("c1", 5, "k5", 4, txn="C"),
        delivered("x", 7, "k7", 5),
    ], DELIVERED_DDL)
    dropped_rows = frame(spark, [
        dropped("a3", 2, "k1", "duplicate", "a1", txn="A"),            # repeat inside A: legal
        dropped("b2", 4, "k4", "transaction_rejected", "zz", txn="B"),  # B partly delivered
        dropped("c2", 6, "k7", "duplicate", "x", txn="C"),             # duplicate of a message outside C
        dropped("d1", 8, "k1", "duplicate", "a1", txn="D"),            # D rejected whole: fine
        dropped("d2", 9, "k8", "transaction_rejected", "d1", txn="D"),
    ], DROPPED_DDL)

    rows = {r.txn_id: r for r in tables.transactions(delivered_rows, dropped_rows).collect()}

    assert {t for t, r in rows.items() if r.partial_delivery} == {"B", "C"}
    assert (rows["A"].delivered, rows["A"].dropped, rows["A"].duplicates_of_outside) == (2, 1, 0)
    assert (rows["C"].duplicates_of_outside, rows["D"].delivered, rows["D"].dropped) == (1, 0, 2)


def test_accounting_and_id_cache_occupancy(spark):
    manifest = {"batch_id": "B", "counts": {"input_lines": 5, "delivered": 2, "dropped": 1, "quarantined": 1},
                "caches": {"orders.eu": {"id_cache_size": 2, "entries": 2}, "idle": {"id_cache_size": 5, "entries": 0}}}
    d = frame(spark, [delivered("a", 1, "k1", 1), delivered("b", 2, "k2", 2)], DELIVERED_DDL)
    x = frame(spark, [dropped("c", 3, "k1", "duplicate", "a")], DROPPED_DDL)
    q = spark.createDataFrame([("bad", "f", 4, "not JSON")],
                              "raw_line string, source_file string, line_number long, error string")

    counts = {r["count"]: (r.declared, r.actual) for r in tables.accounting(spark, manifest, d, x, q).collect()}
    assert counts == {"input_lines": (5, 4), "delivered": (2, 2), "dropped": (1, 1), "quarantined": (1, 1)}

    snapshot = frame(spark, [entry("k1", 1, "a", "B"), entry("k1", 2, "b", "B"),
                             entry("k", 1, "z", "B", cache="ghost")],
                     ID_CACHE_DDL)
    occupancy = {r.cache: r for r in tables.id_cache_occupancy(snapshot, tables.cache_sizes(spark, manifest)).collect()}
    assert (occupancy["orders.eu"].entries, occupancy["orders.eu"].snapshot_problem) == (
        2, "cache orders.eu holds 1 keys more than once")
    assert occupancy["idle"].snapshot_problem is None and occupancy["idle"].entries == 0
    assert occupancy["ghost"].snapshot_problem.startswith("cache ghost is not declared in the manifest")
    # no Apama cache in the manifest: the same rows without computing the queues
    assert not tables.has_apama_caches(manifest)
    without_queues = tables.id_cache_occupancy(snapshot, tables.cache_sizes(spark, manifest), apama=False)
    assert {r.cache: r for r in without_queues.collect()} == occupancy


def test_id_cache_occupancy_counts_every_repeat_of_a_key_and_an_entry_without_one(spark):
    """Keys held more than once are found through hashes first: the count is still exact, per cache."""
    manifest = {"caches": {"orders.eu": {"id_cache_size": 9, "entries": 5}, "orders.us": {"id_cache_size": 9,
                                                                                        "entries": 2}}}
    snapshot = frame(spark, [entry("k1", 1, "a", "B"), entry("k1", 2, "b", "B"), entry("k1", 3, "c", "B"),
                             entry("k2", 4, "d", "B"), entry("k3", 5, "e", "B"),
                             # the same key in another cache is no repeat; an entry without a key is
                             entry("k1", 1, "f", "B", cache="orders.us"), entry(None, 2, "g", "B", cache="orders.us")],
                     ID_CACHE_DDL)
    occupancy = {r.cache: r for r in tables.id_cache_occupancy(snapshot, tables.cache_sizes(spark, manifest)).collect()}
    assert (occupancy["orders.eu"].entries, occupancy["orders.eu"].distinct_keys) == (5, 3)
    assert occupancy["orders.eu"].snapshot_problem == "cache orders.eu holds 2 keys more than once"
    assert (occupancy["orders.us"].entries, occupancy["orders.us"].distinct_keys) == (2, 1)


def _occupancy_of_counts(spark, snapshot, manifest):
    """id_cache_occupancy_of_counts as the gate makes it: the entries per cache tallied by the
    hashes' pass, the keys held twice from the hashes that repeat; None where it falls back."""
    empty = frame(spark, [], DELIVERED_DDL)
    caches = tables.manifest_caches(manifest)
    rows = tables.exception_hashes(empty, none_dropped(spark), frame(spark, [], ID_CACHE_DDL), snapshot,
                                   caches).collect()
    origins = [r[tables.OUTPUT_OF_ROW] for r in rows]
    held = tables.entries_by_cache({o: origins.count(o) for o in set(origins)}, caches)
    if held is None:
        return None
    seen = [r[tables.REPEATED_HELD_KEYS] for r in rows if r[tables.REPEATED_HELD_KEYS] is not None]
    again = spark.createDataFrame([(h,) for h in {h for h in seen if seen.count(h) > 1}], "_hash long")
    excess = {r["cache"]: r["_excess"] for r in tables.held_key_excess(snapshot, again).collect()}
    return tables.id_cache_occupancy_of_counts(spark, manifest, held, excess)


def test_id_cache_occupancy_from_the_tallied_counts_is_the_aggregations_table(spark):
    """The gate makes the id_cache table on the driver from the entries its hashes' pass tallied per
    cache: the same rows and findings as the aggregation of the snapshot, for keys held more than
    once, entries without a key, a cache with no entry, a cache over its size and a manifest whose
    counts are wrong; and no table (the aggregation's, which names it) for an undeclared cache."""
    manifest = {"caches": {"orders.eu": {"id_cache_size": 4, "entries": 5}, "orders.us": {"id_cache_size": 9,
                                                                                        "entries": 3},
                           "idle": {"id_cache_size": 5, "entries": 0}, "late": {"policy": "time", "entries": 1,
                                                                                "duplicate_window_us": 10}}}
    snapshot = frame(spark, [entry("k1", 1, "a", "B"), entry("k1", 2, "b", "B"), entry("k1", 3, "c", "B"),
                             entry("k2", 4, "d", "B"), entry("k3", 5, "e", "B"),
                             entry("k1", 1, "f", "B", cache="orders.us"), entry(None, 2, "g", "B", cache="orders.us")],
                     ID_CACHE_DDL)
    aggregated = tables.id_cache_occupancy(snapshot, tables.cache_sizes(spark, manifest), apama=False)
    counted = _occupancy_of_counts(spark, snapshot, manifest)

    def rows(df):
        return sorted(tuple(r) for r in df.collect())

    assert counted.columns == aggregated.columns
    assert rows(counted) == rows(aggregated)
    problems = {r.cache: r.snapshot_problem for r in counted.collect()}
    assert (problems["orders.eu"], problems["idle"]) == ("cache orders.eu holds 2 keys more than once", None)
    assert problems["orders.us"].endswith("cache orders.us has 2 entries, the manifest says 3")
    assert problems["late"] == "cache late has 0 entries, the manifest says 1"
    empty = frame(spark, [], ID_CACHE_DDL)
    assert rows(_occupancy_of_counts(spark, empty, manifest)) == rows(
        tables.id_cache_occupancy(empty, tables.cache_sizes(spark, manifest), apama=False))
    ghost = frame(spark, [entry("k", 1, "z", "B", cache="ghost")], ID_CACHE_DDL)
    assert _occupancy_of_counts(spark, ghost, manifest) is None


def test_messages_describe_a_message_id_in_more_than_one_row(spark):
    d = frame(spark, [delivered("a", 1, "k1", 1), delivered("b", 2, "k2", 2)], DELIVERED_DDL)
    x = frame(spark, [dropped("a", 3, "k1", "duplicate", "a"), dropped("c", 4, "k3", "duplicate", "b"),
                      dropped(None, 5, "k4", "duplicate", "b"), dropped(None, 6, "k5", "duplicate", "b")], DROPPED_DDL)

    rows = {(r.output, r.line_number): r.duplicate_message_id for r in tables.messages(d, x).collect()}

    assert rows == {
        ("delivered", 1):
            "message_id a is in 2 rows (1 delivered, 1 dropped); this one: delivered, part-0.jsonl line 1",
        ("dropped", 3): "message_id a is in 2 rows (1 delivered, 1 dropped); this one: dropped, part-0.jsonl line 3",
        ("delivered", 2): None, ("dropped", 4): None,
        # A missing message_id is the required-field expectation's finding, not a repeated id.
        ("dropped", 5): None, ("dropped", 6): None,
    }


def test_key_window_names_deliveries_that_share_a_cache_seq(spark):
    parent = frame(spark, [], ID_CACHE_DDL)
    batch = frame(spark, [
        delivered("n1", 1, "k1", 5), delivered("n2", 2, "k2", 5),    # two keys, one acceptance number
        delivered("n3", 3, "k3", 6),
        delivered("n4", 4, "k4", 6, address="billing"),              # same number, other cache: fine
        delivered("n5", 5, "k5", None), delivered("n6", 6, "k6", None),  # missing: cache_seq's own check
    ], DELIVERED_DDL)

    rows = {r.message_id: r.shared_cache_seq
            for r in tables.key_window(batch, none_dropped(spark), parent,
                                       sizes(spark, **{"orders.eu": 3, "billing": 3}), "B1").collect()}

    assert rows["n1"] == "orders.eu cache_seq 5 is used by 2 deliveries (message_id n1 to n2); this one: n1, key k1"
    assert rows["n2"].endswith("this one: n2, key k2")
    assert [rows[m] for m in ("n3", "n4", "n5", "n6")] == [None, None, None, None]


def _every_exception(spark):
    """(parent snapshot, delivered, dropped) with an exception of each kind: n3 is delivered and
    dropped, n3 and n4 share cache_seq 7, k4 and k2 are in the parent, k9 is accepted twice; n5
    has no key, a dropped row no message_id."""
    parent = frame(spark, [entry("k2", 2, "m2", "B1"), entry("k4", 4, "m4", "B1")], ID_CACHE_DDL)
    batch = frame(spark, [
        delivered("n1", 1, "k4", 5), delivered("n2", 2, "k2", 6), delivered("n3", 3, "k9", 7),
        delivered("n4", 4, "k9", 7), delivered("n5", 5, None, None), delivered("n6", 6, "k1", 10),
    ], DELIVERED_DDL)
    gone = frame(spark, [dropped("n3", 7, "k9", "duplicate", "n3"), dropped(None, 8, "k3", "duplicate", "n1")],
                 DROPPED_DDL)
    return parent, batch, gone


def test_tables_are_the_same_with_their_exceptions_computed_first(spark):
    """The gate computes repeated ids, keys accepted again and shared cache_seqs first and hands
    them over as local tables (materialise.SmallFrames); the rows must be the ones computed in-plan."""
    parent, batch, gone = _every_exception(spark)
    size = sizes(spark, **{"orders.eu": 3})

    def local(df):
        return spark.createDataFrame(df.collect(), df.schema)

    def rows(df):
        return sorted((tuple(r) for r in df.collect()), key=repr)

    shared = tables.shared_cache_seqs(batch, local(tables.shared_cache_seq_counts(batch)))
    assert rows(shared) == rows(tables.shared_cache_seqs(batch)) == [("orders.eu", 7, 2, "n3", "n4")]
    again = local(tables.repeated_key_hashes(batch, parent, "B2"))
    assert again.count() == 3  # k4, k2 (each once here and in the parent) and k9 (twice here)
    assert rows(tables.key_window(batch, gone, parent, size, "B2", again, shared, repeats=again.count())) == rows(
        tables.key_window(batch, gone, parent, size, "B2"))
    assert rows(tables.messages(batch, gone, local(tables.repeated_message_ids(batch, gone)))) == rows(
        tables.messages(batch, gone))


def test_the_hashes_that_repeat_in_one_pass_are_those_each_exception_finds(spark):
    """``exception_hashes``: a column per exception over delivered, dropped and the parent snapshot
    together; the hashes that repeat in a column give each exception the rows its own aggregation
    gives it, for every kind of exception."""
    parent, batch, gone = _every_exception(spark)
    snapshot = frame(spark, [entry("k1", 1, "a", "B2"), entry("k1", 2, "b", "B2"), entry("k2", 3, "c", "B2"),
                             entry(None, 4, "d", "B2")], ID_CACHE_DDL)
    hashes = tables.exception_hashes(batch, gone, parent, snapshot).collect()
    without = [r.asDict() for r in tables.exception_hashes(batch, gone, parent).collect()]
    # without this batch's snapshot: its column and rows left out
    assert without == [{k: v for k, v in r.asDict().items() if k != tables.REPEATED_HELD_KEYS} for r in hashes[:-4]]
    # each row names its output, as output_counts counts them (the parent snapshot's rows none),
    # and this batch's entries their cache, undeclared where the pass was given no caches
    outputs = [r[tables.OUTPUT_OF_ROW] for r in hashes]
    counted = tables.output_counts(batch, gone, gone.limit(0)).first()
    assert [outputs.count(code) for code in range(len(tables.OUTPUTS))] == [counted[o] for o in tables.OUTPUTS]
    assert outputs.count(None) == 2 and outputs.count(tables.UNDECLARED_ENTRY) == 4

    def repeated(column):
        seen = [r[column] for r in hashes if r[column] is not None]
        values = sorted({h for h in seen if seen.count(h) > 1})
        return spark.createDataFrame([(h,) for h in values], "_hash long")

    def rows(df):
        return sorted((tuple(r) for r in df.collect()), key=repr)

    assert len(hashes) == 6 + 2 + 2 + 4
    assert rows(tables.repeated_message_ids(batch, gone, repeated(tables.REPEATED_MESSAGE_IDS))) == rows(
        tables.repeated_message_ids(batch, gone)) == [("n3", 2, 1)]
    assert rows(tables.shared_cache_seq_counts(batch, repeated(tables.SHARED_CACHE_SEQ_COUNTS))) == rows(
        tables.shared_cache_seq_counts(batch)) == [("orders.eu", 7, 2)]
    assert rows(repeated(tables.REPEATED_KEY_HASHES)) == rows(tables.repeated_key_hashes(batch, parent, "B2"))
    assert repeated(tables.REPEATED_KEY_HASHES).count() == 3  # k4, k2 and k9
    assert rows(tables.held_key_excess(snapshot, repeated(tables.REPEATED_HELD_KEYS))) == rows(
        tables.held_key_excess(snapshot)) == [("orders.eu", 1)]  # k1 held twice


def test_key_window_orders_keys_sharing_a_hash_with_another_as_keys_with_no_previous_acceptance(spark):
    """``key_window`` is told the hashes of the keys accepted again, which may also hold the hash of
    a key accepted once (two keys' hashes can be equal): such a key is put in order with the
    repeated ones and, alone in its window, has no previous acceptance, as before. Here every key's
    hash is given, as if each shared its hash with another."""
    parent = frame(spark, [entry("k2", 2, "m2", "B1"), entry("k4", 4, "m4", "B1")], ID_CACHE_DDL)
    batch = frame(spark, [
        delivered("n1", 1, "k4", 5), delivered("n2", 2, "k2", 6), delivered("n3", 3, "k9", 7),
        delivered("n4", 4, "k1", 8), delivered("n5", 5, None, None), delivered("n6", 6, "k1", 10),
    ], DELIVERED_DDL)
    size = sizes(spark, **{"orders.eu": 3})
    repeated = tables.repeated_key_hashes(batch, parent, "B2")
    every = tables.repeated_key_hashes(batch.unionByName(batch), parent, "B2")  # each key twice
    assert repeated.count() == 3 and every.count() == 4  # k4, k2, k1; and k9 (n5 is not checked)

    def rows(df):
        return sorted((tuple(r) for r in df.collect()), key=repr)

    told = tables.key_window(batch, none_dropped(spark), parent, size, "B2", every, repeats=every.count())
    assert told.schema == tables.key_window(batch, none_dropped(spark), parent, size, "B2").schema
    assert rows(told) == rows(tables.key_window(batch, none_dropped(spark), parent, size, "B2", repeated,
                                                repeats=repeated.count()))
    # n1 and n2 follow the parent's k4 and k2 (1 and 4 accepted keys after them), n6 follows n4 (k1, 2 after)
    assert {r.message_id: r.prev_message_id for r in told.collect()} == {
        "n1": "m4", "n2": "m2", "n3": None, "n4": None, "n6": "n4"}
    assert sorted(r.message_id for r in told.where("duplicate_within_window is not null").collect()) == ["n1", "n6"]


def _settled(frame):
    """The gate's ``settle``: a frame's rows, computed once."""
    return frame.collect()


def test_key_window_is_the_same_with_the_window_taken_on_the_driver(spark):
    """Given ``settle`` (the gate collects the acceptances of the keys accepted again), key_window
    puts them in order on the driver (``previous_acceptances``): the same rows and columns as
    Spark's window, with the parent's acceptances, keys sharing a hash, shared numbers, a
    delivery without a number and one without a key."""
    parent, batch, gone = _every_exception(spark)
    batch = batch.unionByName(frame(spark, [delivered("n7", 7, "k4", None), delivered("n8", 8, "k1", 3)],
                                    DELIVERED_DDL))
    size = sizes(spark, **{"orders.eu": 3})
    every = tables.repeated_key_hashes(batch.unionByName(batch), parent, "B2")  # each key's hash

    def rows(df):
        return sorted((tuple(r) for r in df.collect()), key=repr)

    for again in (tables.repeated_key_hashes(batch, parent, "B2"), every):
        told = tables.key_window(batch, gone, parent, size, "B2", again, repeats=again.count(), settle=_settled)
        in_plan = tables.key_window(batch, gone, parent, size, "B2", again, repeats=again.count())
        assert told.schema == in_plan.schema
        assert rows(told) == rows(in_plan)
        assert "Window" not in told._jdf.queryExecution().executedPlan().toString()
    # n7 (k4, no number) comes first, before the parent's m4 (4) and n1 (5); n6 (k1, 10) after n8 (k1, 3)
    assert {r.message_id: r.prev_message_id for r in told.collect()} == {
        "n1": "m4", "n2": "m2", "n3": None, "n4": "n3", "n6": "n8", "n7": None, "n8": None}


def test_an_apama_key_window_is_the_same_with_the_window_taken_on_the_driver(spark):
    """With Apama caches the deliveries of the keys accepted again are settled twice: their window
    on the driver, then their sender gaps; the findings are Spark's."""
    parent, batch, resends, size = _apama_batch(spark)
    again = tables.repeated_key_hashes(batch, parent, "B2")
    settled = []

    def settle(frame):
        settled.append(frame)
        return _settled(frame)

    told = tables.key_window(batch, resends, parent, size, "B2", again, repeats=again.count(), settle=settle)

    assert len(settled) == 2
    assert sorted(map(tuple, told.collect()), key=repr) == sorted(
        map(tuple, tables.key_window(batch, resends, parent, size, "B2").collect()), key=repr)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.sampled_from(["k1", "k2", "ké", None]),
                          st.one_of(st.none(), st.integers(0, 4)), st.booleans()), max_size=14))
def test_previous_acceptances_are_sparks_lag_over_each_key(spark, acceptances):
    """``previous_acceptances`` against Spark's own window over the same rows: ties in cache_seq,
    numbers missing, keys missing, the parent's and this batch's (message_ids differ, as an
    acceptance's own do: equal in every ordering column, Spark's order of two rows is arbitrary)."""
    rows = [(cache, key, seq, f"m{i}", "B2" if in_batch else "B1", in_batch, i, None if in_batch else "count",
             f"s{i % 3}", "sender") for i, (cache, key, seq, in_batch) in enumerate(acceptances)]
    accepted = spark.createDataFrame(rows, "cache string, dedup_key string, cache_seq long, message_id string, "
                                           "accepted_batch_id string, _in_batch boolean, entered_at_us long, "
                                           "_policy string, source_id string, _queue string")
    # the order written out here, not taken from tables: a key's acceptances by number, the parent's
    # before this batch's, then by message_id, nulls first
    by_key = Window.partitionBy("cache", "dedup_key").orderBy(
        *[F.col(c).asc_nulls_first() for c in ("cache_seq", "_in_batch", "message_id")])
    lagged = accepted.select("*", *[F.lag(c).over(by_key) for c in tables._PREVIOUS]).where("_in_batch")

    assert sorted(tables.previous_acceptances(accepted.collect()), key=repr) == sorted(
        map(tuple, lagged.collect()), key=repr)


def test_key_window_without_sender_queues_plans_no_sender_gaps(spark):
    """No cache keeps sender queues (count caches here): key_window adds null sender gaps instead
    of building their joins; the same rows and columns as with them."""
    parent = frame(spark, [entry("k2", 2, "m2", "B1"), entry("k4", 4, "m4", "B1")], ID_CACHE_DDL)
    batch = frame(spark, [delivered("n1", 1, "k4", 5), delivered("n2", 2, "k2", 6), delivered("n3", 3, "k2", 7),
                          delivered("n4", 4, "k1", 8)], DELIVERED_DDL)
    size = sizes(spark, **{"orders.eu": 3})

    told = tables.key_window(batch, none_dropped(spark), parent, size, "B2", sender_queues=False)
    in_plan = tables.key_window(batch, none_dropped(spark), parent, size, "B2")

    assert told.schema == in_plan.schema
    assert sorted(map(tuple, told.collect()), key=repr) == sorted(map(tuple, in_plan.collect()), key=repr)
    # cache_seq 4 -> 5 (n1 after the parent's k4) and 6 -> 7 (n3 after n2's k2) are inside the cache
    # of 3; 2 -> 6 (n2 after the parent's k2) is not
    assert [r.duplicate_within_window is not None for r in told.orderBy("message_id").collect()] == [
        True, False, True, False]
    assert not tables.keeps_sender_queues({"caches": {"orders.eu": {"policy": "count", "id_cache_size": 3}}})
    assert not tables.keeps_sender_queues({"caches": {"q": {"policy": "apama", "per_source_window": 0}}})
    assert tables.has_apama_caches({"caches": {"q": {"policy": "apama", "per_source_window": 0}}})
    assert tables.keeps_sender_queues({"caches": {"q": {"policy": "apama", "per_source_window": 2000}}})


def test_key_window_without_repeats_is_its_first_acceptances_alone(spark):
    """Told that no key was accepted again (``repeats=0``, the gate's normal case), key_window
    builds no window over the acceptances: the same rows and columns as computed in-plan."""
    parent = frame(spark, [entry("k2", 2, "m2", "B1"), entry("k4", 4, "m4", "B1")], ID_CACHE_DDL)
    batch = frame(spark, [
        delivered("n1", 1, "k1", 5), delivered("n2", 2, "k3", 6), delivered("n3", 3, "k5", 6),
        delivered("n4", 4, None, None),
    ], DELIVERED_DDL)
    size = sizes(spark, **{"orders.eu": 3})
    again = tables.repeated_key_hashes(batch, parent, "B2")
    assert again.count() == 0

    # the aggregation itself, not an empty relation Spark would prune the window with anyway
    told = tables.key_window(batch, none_dropped(spark), parent, size, "B2", again, repeats=0)
    in_plan = tables.key_window(batch, none_dropped(spark), parent, size, "B2")

    assert told.schema == in_plan.schema
    assert sorted(map(tuple, told.collect()), key=repr) == sorted(map(tuple, in_plan.collect()), key=repr)
    assert [r.shared_cache_seq for r in told.where("message_id = 'n2'").collect()] == [
        "orders.eu cache_seq 6 is used by 2 deliveries (message_id n2 to n3); this one: n2, key k3"]
    assert "Window" not in told._jdf.queryExecution().executedPlan().toString()


def test_shared_cache_seqs_are_counted_without_sorting_the_deliveries(spark):
    """The least and greatest message_id of a shared number are taken apart: in the counting
    aggregation a string's minimum would make Spark sort every delivery (a sort aggregate)."""
    batch = frame(spark, [delivered("n1", 1, "k1", 5), delivered("n2", 2, "k2", 5)], DELIVERED_DDL)
    plan = tables.shared_cache_seq_counts(batch)._jdf.queryExecution().executedPlan().toString()

    assert "HashAggregate" in plan and "SortAggregate" not in plan


def test_the_rows_looked_at_for_repeats_are_those_whose_values_repeat_together(spark):
    """Repeats are looked for by hashes of all the columns together: (c, 5) twice is a repeat,
    (c, 6) and (d, 5) are not, though each of their values is in another row."""
    rows = spark.createDataFrame([("c", 5), ("c", 6), ("d", 5), ("c", 5)], "cache string, cache_seq long")

    assert sorted(tuple(r) for r in tables._possibly_repeated(rows, ("cache", "cache_seq")).collect()) == [
        ("c", 5), ("c", 5)]


# §8.2: an Apama cache ``jms`` with per-sender queues of 2 and a shared queue of 10 s.
APAMA_DELIVERED_DDL = DELIVERED_DDL + ", entered_at_us long"
APAMA_ID_CACHE_DDL = ID_CACHE_DDL + ", received_at_us long, source_id string, queue string"


def _apama_delivered(message_id, key, seq, source, at):
    row = delivered(message_id, seq, key, seq, address="jms")
    row.update(source_id=source, entered_at_us=at * 1_000_000)
    return row


def _apama_resend(message_id, key, of, source, txn=None):
    row = dropped(message_id, 50, key, "duplicate", of, txn=txn, address="jms")
    row.update(source_id=source)
    return row


def _apama_entry(key, seq, message_id, source, at, queue):
    row = entry(key, seq, message_id, "B1", cache="jms")
    row.update(received_at_us=at * 1_000_000, source_id=source, queue=queue)
    return row


def _apama_batch(spark):
    """(parent snapshot, delivered, dropped, cache sizes) of an Apama cache ``jms``."""
    parent = frame(spark, [_apama_entry("a1", 1, "p1", "A", 0, "sender"), _apama_entry("a2", 2, "p2", "A", 1, "sender"),
                           _apama_entry("s1", 3, "p3", "B", 2, "shared")], APAMA_ID_CACHE_DDL)
    batch = frame(spark, [
        _apama_delivered("n4", "s1", 4, "B", 8),      # s1 entered the shared queue at 2 s: 6 s ago
        _apama_delivered("n1", "x1", 5, "A", 30),     # A's queue: a1 pushed out, [a2 x1]
        _apama_delivered("n2", "a2", 6, "A", 31),     # a2 still in A's queue: one key since
        _apama_delivered("n3", "a1", 7, "A", 32),     # a1 pushed out (3 keys since), 32 s ago: fine
        _apama_delivered("n5", "c1", 8, "C", 40),
        _apama_delivered("n6", "c1", 9, "C", 52),     # C resent c1 (moved to the shared queue), 12 s: fine
        _apama_delivered("n7", "d1", 10, "D", 60),
        _apama_delivered("n8", "d1", 11, "D", 75),    # D's resend was inside a transaction: moved nothing
        _apama_delivered("n9", "e1", 12, "E", 80),
        _apama_delivered("n10", "e1", 13, "F", 95),   # another sender: e1 is still in E's queue
        _apama_delivered("n11", "z1", 14, None, 100),
        _apama_delivered("n12", "y1", 15, None, 101),
        _apama_delivered("n13", "y2", 16, None, 102),
        _apama_delivered("n14", "z1", 17, None, 120),  # the no-source queue pushed z1 out, 20 s ago: fine
    ], APAMA_DELIVERED_DDL)
    resends = frame(spark, [_apama_resend("r1", "c1", "n5", "C"), _apama_resend("r2", "d1", "n7", "D", txn="T9")],
                    DROPPED_DDL)
    size = tables.cache_sizes(spark, {"caches": {"jms": {"policy": "apama", "per_source_window": 2,
                                                         "expiry_seconds": 10, "entries": 0}}})
    return parent, batch, resends, size


def test_key_window_proves_an_apama_key_left_its_senders_queue_and_the_shared_queue(spark):
    parent, batch, resends, size = _apama_batch(spark)

    findings = {r.message_id: r.duplicate_within_window
                for r in tables.key_window(batch, resends, parent, size, "B2").collect()}

    assert {m for m, f in findings.items() if f} == {"n4", "n2", "n8", "n10"}, findings
    assert findings["n2"] == ("jms key a2: n2 delivered again while sender A's queue still held it: the sender had "
                              "1 keys accepted since p2 (batch B1), its per_source_window is 2")
    assert "the sender had 0 keys accepted since n7" in findings["n8"]
    assert "while sender E's queue still held it" in findings["n10"]
    assert findings["n4"] == ("jms key s1: n4 delivered again 6.000000 s after p3 (batch B1), inside the shared "
                              "queue's expiry_seconds of 10")
