"""The window-miss audit (docs/semantics.md §9) as DataFrame functions: which delivered keys a
bigger window would have caught, and the record of keys that left their window that makes it
possible. Nothing here decides an outcome; the reference model's ``_audit`` is the oracle.

    parent's left_keys + parent snapshot + this batch's acceptances
        --left_keys--> this batch's left_keys (the horizon's worth of keys that left the window)
    the same, on the keys that can have an earlier acceptance (``audit_keys``)
        --window_misses--> one row per miss: needed, missed_by
    misses --summary--> per cache: misses, largest missed_by, recommended id_cache_size

Only a key that is repeated (in the batch, or met in the parent snapshot: ``repeated_keys``) or
remembered in the parent's record can have an earlier acceptance, so the ordered pass runs on
those keys only: usually a few rows, never the whole batch.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from msgdedup.config import AUDIT_COVERAGE, AUDIT_HORIZON_MULTIPLE, COUNT
from msgdedup.engine import kernel

ENTRY_COLUMNS = ["cache", "dedup_key", "cache_seq", "message_id", "address", "accepted_batch_id"]
ENTRY_SCHEMA = ("cache string, dedup_key string, cache_seq long, message_id string, address string, "
                "accepted_batch_id string")


def left_keys(entries: DataFrame, parent_left: DataFrame | None, bounds: DataFrame) -> DataFrame:
    """The keys the caches remember as having left their window (§9) after this batch.

    ``entries``: the parent snapshot and this batch's acceptances (``transforms.acceptances``);
    those at or below their cache's ``floor`` (counter - size: not in the new snapshot) have left.
    The parent's record (``parent_left``) has left already, whatever its seq: an entry a smaller
    window dropped does not come back when the window grows (§5). Both are kept while above ``floor - horizon``
    (``bounds``: ``cache``, ``floor``, ``horizon`` = size x AUDIT_HORIZON_MULTIPLE; small)."""
    bounded = F.broadcast(bounds.select("cache", "floor", "horizon"))
    remembered = F.col("cache_seq") > F.col("floor") - F.col("horizon")
    left = (entries.join(bounded, "cache").filter((F.col("cache_seq") <= F.col("floor")) & remembered)
            .select(*ENTRY_COLUMNS))
    if parent_left is not None:
        left = left.unionByName(parent_left.join(bounded, "cache").filter(remembered).select(*ENTRY_COLUMNS))
    return left


def audit_keys(repeated_keys: DataFrame, left_met: DataFrame | None) -> DataFrame:
    """The (cache, dedup_key) pairs that can have an earlier acceptance: repeated ones and those
    the parent's record remembers (``left_met``, its entries semi-joined with the batch's keys)."""
    keys = repeated_keys.select("cache", "dedup_key")
    if left_met is not None:
        keys = keys.unionByName(left_met.select("cache", "dedup_key")).distinct()
    return keys


def window_misses(verdicts: DataFrame, units: DataFrame, earlier: DataFrame, keys: DataFrame,
                  bounds: DataFrame, batch_id: str) -> DataFrame:
    """One row per delivered message of ``keys`` whose key had been accepted before on its cache
    within the horizon (§9), with ``needed`` (the window that would have held the earlier
    acceptance at the message's lookup) and ``missed_by`` (needed - size).

    ``earlier``: the parent's entries of ``keys`` (record and snapshot: disjoint in cache_seq);
    ``units``: row_id -> unit_row (the lookup of a unit happens before its first acceptance on
    each cache, so the counter then is that acceptance's cache_seq - 1).
    """
    delivered = verdicts.filter((F.col("outcome") == kernel.DELIVERED) & F.col("cache").isNotNull())
    # A transaction's lookup comes before its first acceptance on each cache; a single message's
    # first acceptance is its own. Only transactions need an aggregation (few rows).
    in_txn = (delivered.join(units.filter(F.col("unit_row") != F.col("row_id")).select("row_id", "unit_row"), "row_id")
              .groupBy("cache", "unit_row").agg(F.min("cache_seq").alias("txn_first")))
    audited = (delivered.join(F.broadcast(keys), ["cache", "dedup_key"], "left_semi")
               .join(units.select("row_id", "unit_row"), "row_id")
               .join(in_txn, ["cache", "unit_row"], "left"))
    mine = audited.select(*ENTRY_COLUMNS[:5], F.lit(batch_id).alias("accepted_batch_id"),
                          F.coalesce("txn_first", "cache_seq").alias("unit_first"), F.lit(True).alias("this_batch"))
    before = earlier.select(*ENTRY_COLUMNS, F.lit(None).cast("long").alias("unit_first"),
                            F.lit(False).alias("this_batch"))
    in_order = Window.partitionBy("cache", "dedup_key").orderBy("cache_seq")
    previous = mine.unionByName(before).select(
        "*", F.lag("cache_seq").over(in_order).alias("previous_seq"),
        F.lag("message_id").over(in_order).alias("previous_message_id"),
        F.lag("accepted_batch_id").over(in_order).alias("previous_batch_id"))
    needed = F.col("unit_first") - F.col("previous_seq")
    return (previous.filter(F.col("this_batch") & F.col("previous_seq").isNotNull())
            .join(F.broadcast(bounds.select("cache", "size", "horizon")), "cache")
            .withColumn("needed", needed)
            .filter(F.col("needed") <= F.col("size") + F.col("horizon"))
            .select("cache", "dedup_key", "message_id", "address", "previous_message_id", "previous_batch_id",
                    "needed", (F.col("needed") - F.col("size")).alias("missed_by")))


def summary(misses: DataFrame) -> DataFrame:
    """Per cache with misses: their count, the largest ``missed_by`` and the smallest window that
    holds AUDIT_COVERAGE of them (``percentile_disc``: the nearest rank). Few rows."""
    return misses.groupBy("cache").agg(
        F.count(F.lit(1)).alias("misses"), F.max("missed_by").alias("max_missed_by"),
        F.expr(f"percentile_disc({AUDIT_COVERAGE}) WITHIN GROUP (ORDER BY needed)").alias("covering"))


def bounds_rows(caches: dict[str, dict]) -> list[tuple[str, int, int, int]]:
    """(cache, size, floor, horizon) of every count cache after the batch, for ``left_keys`` and
    ``window_misses`` (the audit covers count windows only, §9)."""
    return [(name, c["id_cache_size"], c["last_seq"] - c["id_cache_size"], c["id_cache_size"] * AUDIT_HORIZON_MULTIPLE)
            for name, c in caches.items() if c["policy"] == COUNT]


def report(caches: dict[str, dict], rows: list) -> dict[str, dict]:
    """The manifest's ``window_audit``: every count cache, with or without misses (``rows``:
    ``summary``)."""
    found = {r["cache"]: r for r in rows}
    audit = {}
    for name, c in sorted(caches.items()):
        if c["policy"] != COUNT:
            continue
        r = found.get(name)
        audit[name] = {
            "address": c["address"],
            "misses": r["misses"] if r else 0,
            "max_missed_by": r["max_missed_by"] if r else 0,
            "id_cache_size": c["id_cache_size"],
            "recommended_id_cache_size": max(c["id_cache_size"], int(r["covering"])) if r else c["id_cache_size"],
        }
    return audit
