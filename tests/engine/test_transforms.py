"""transforms.py's steps on tiny frames, where a step makes a promise the property tests cannot
reach (a 64-bit hash collision does not happen in a generated stream)."""

from pyspark.sql import functions as F

from msgdedup.engine import transforms

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
