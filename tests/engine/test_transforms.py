"""transforms.py's steps on tiny frames, where a step makes a promise the property tests cannot
reach (a 64-bit hash collision does not happen in a generated stream)."""

from pyspark.sql import functions as F

from msgdedup.engine import manifest as manifests, transforms

KEYS = "row_id long, message_id string, received_us long"


def _rows(frame):
    return sorted(tuple(r) for r in frame.collect())


def test_repeated_message_ids_are_found_through_their_hashes(spark):
    keys = spark.createDataFrame(
        [(1, "a", 10), (2, "b", 20), (3, "a", 5), (4, "c", 40), (5, "b", 50), (6, "d", 60)], KEYS)
    hashes = transforms.repeated_id_hashes(keys)
    repeated = spark.createDataFrame([("a",), ("b",)], "message_id string")
    assert _rows(hashes) == _rows(repeated.select(F.xxhash64("message_id")))
    suspects = transforms.with_repeated_hash(keys, hashes)
    assert sorted(r["row_id"] for r in suspects.collect()) == [1, 2, 3, 5]
    # the first copy in arrival order: "a" arrived first at row 3 (5 us), "b" at row 2
    assert _rows(transforms.repeated_message_ids(suspects)) == [("a", 3), ("b", 2)]


def test_an_id_whose_hash_collides_with_another_is_not_taken_for_a_repeated_one(spark):
    """A hash only chooses which ids are looked at: an id that shares its hash with another (here
    made so by giving its hash as a suspect) but occurs once is not repeated."""
    keys = spark.createDataFrame([(1, "a", 10), (2, "a", 20), (3, "unique", 30)], KEYS)
    hashes = keys.select(transforms.id_hash().alias("id_hash")).distinct()  # every id suspected
    suspects = transforms.with_repeated_hash(keys, hashes)
    assert suspects.count() == 3
    assert _rows(transforms.repeated_message_ids(suspects)) == [("a", 1)]


UNIT_INPUT = "row_id long, received_us long, txn_id string, cache string, repeated boolean"


def test_units_sit_at_their_transactions_last_message_and_are_ranked_in_their_cache(spark):
    """A transaction is one unit at its last message (§2, §4), contested when any of its messages
    is, in whichever cache; each keyed message is ranked among its cache's in unit order, and a
    message without a key (null cache) has no rank, whichever window partition it was spread to."""
    messages = spark.createDataFrame([
        (1, 10, None, "c", False),   # a single message
        (2, 20, "t", "c", False),    # transaction t: its last message is row 4, at 40 us
        (3, 30, None, "c", True),    # a single contested message, before t's unit
        (4, 40, "t", None, False),   # t's message without a key
        (7, 25, "t", "d", True),     # t's repeated key, in another cache: all of t is contested
        (5, 35, "u", "d", False),    # transaction u, alone, before t's unit in cache d
        (6, 50, None, None, False),  # a single message without a key
    ], UNIT_INPUT)
    units = transforms.rank_in_caches(transforms.assign_units(messages))
    got = {r["row_id"]: (r["unit_us"], r["unit_row"], r["contested"], r["free_rank"], r["contested_rank"])
           for r in units.collect()}
    assert got == {
        1: (10, 1, False, 1, 0),
        3: (30, 3, True, 1, 1),
        2: (40, 4, True, 1, 2),    # t's unit comes after row 3's
        4: (40, 4, True, None, None),
        5: (35, 5, False, 1, 0),
        7: (40, 4, True, 1, 1),
        6: (50, 6, False, None, None),
    }


def test_a_caches_digest_folds_its_addresses_parts_into_what_one_pass_over_the_cache_gives(spark):
    """``entry_digests`` hashes each (cache, address) apart and ``manifest.cache_digests`` folds the
    parts: each cache's count, addresses and digest must be what one aggregation over the whole
    cache gives (the form every committed manifest's fingerprint was made with), negative hashes
    and null fields included."""
    snapshot = spark.createDataFrame([
        ("c", "k1", 1, "m1", "a1", "b1", None, None, None),
        ("c", "k2", 2, "m2", "a2", "b1", None, None, None),
        ("c", "k3", 3, "m3", "a1", "b2", None, None, None),
        ("t", "k1", 1, "m4", "a3", "b1", 1_000, None, None),
        ("q", "k9", 7, "m5", "a3", "b2", 2_000, "s1", "sender"),
    ] + [("c", f"x{i}", 10 + i, f"n{i}", "a2", "b2", None, None, None) for i in range(40)],
        transforms.SNAPSHOT_SCHEMA)
    entry = ["dedup_key", "cache_seq", "message_id", "received_at_us", "source_id", "queue"]
    whole = snapshot.groupBy("cache").agg(
        F.count(F.lit(1)).alias("entries"),
        F.format_string("%016x%016x", F.bit_xor(F.xxhash64(*entry)), F.bit_xor(F.xxhash64(F.lit(1), *entry)))
        .alias("digest"),
        F.array_sort(F.collect_set("address")).alias("addresses"))
    expected = {r["cache"]: manifests.CacheDigest(r["entries"], r["digest"], list(r["addresses"]))
                for r in whole.collect()}
    parts = transforms.entry_digests(snapshot).collect()
    assert len(parts) == 4  # (c, a1), (c, a2), (t, a3), (q, a3)
    assert manifests.cache_digests(parts) == expected
    assert expected["c"].entries == 43 and expected["c"].addresses == ["a1", "a2"]
    assert any(int(d.digest[:16], 16) >= 1 << 63 for d in expected.values()), "a negative hash, printed as Spark does"


def test_the_acceptances_read_from_the_delivered_output_are_those_of_the_verdicts(spark):
    """Without Apama caches, every acceptance is a delivered message with its cache_seq, and it
    entered its cache at the delivered output's ``entered_at_us``: the snapshot may take them from
    that output (batch._acceptances). A delivered message without a key, a dropped one, and a
    repeated message_id are no acceptance."""
    verdicts = spark.createDataFrame([
        (1, "delivered", None, None, 11, None, "m1", "a", "a", "k1", "p", None, None, 1),      # count cache
        (2, "delivered", None, None, 4, None, "m2", "t", "t", "k2", "p", 2_000, None, 2),      # time cache
        (3, "delivered", None, None, None, None, "m3", "a", None, None, "p", None, None, 3),  # no key
        (4, "dropped", "duplicate", "m1", None, None, "m4", "a", "a", "k1", "p", None, None, 4),
        (5, "quarantined", None, None, None, "repeated message_id", None, None, None, None, None, None, None, None),
    ], "row_id long, outcome string, reason string, duplicate_of string, cache_seq long, error string, "
       "message_id string, address string, cache string, dedup_key string, source_id string, "
       "received_at_us long, queue string, unit_row long")
    messages = verdicts.filter("message_id is not null").select(
        "row_id", *(F.col(c) if c in ("message_id", "address", "source_id") else F.lit(None).cast("string").alias(c)
                    for c in transforms.MESSAGE_COLUMNS))
    delivered = transforms.delivered(messages, transforms.verdicts_for(verdicts, "delivered", keys=True))
    got = transforms.delivered_acceptances(delivered, "b1")
    assert got.columns == transforms.acceptances(verdicts, "b1").columns
    assert _rows(got) == _rows(transforms.acceptances(verdicts, "b1")) == [
        ("a", "k1", 11, "m1", "a", "b1", None, None, None), ("t", "k2", 4, "m2", "t", "b1", 2_000, None, None)]
