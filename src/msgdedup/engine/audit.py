"""The window-miss audit (docs/semantics.md §9) as DataFrame functions: which delivered keys a
bigger window would have caught, and the record of keys that left their window that makes it
possible. Nothing here decides an outcome; the reference model's ``_audit`` is the oracle.

    parent's left_keys + parent snapshot + this batch's acceptances
        --left_keys--> this batch's left_keys (the horizon's worth of keys that left the window)
    the same, on the delivered messages of keys that can have an earlier acceptance
    (``audit_keys``, ``audit_candidates``) --window_misses--> one row per miss: needed, missed_by
    misses --summary--> per cache: misses, largest missed_by, recommended window

Count windows are measured in acceptances (``cache_seq``), time windows in microseconds (the
entries' ``received_at_us``); ``bounds`` (one small row per audited cache) says which. Only a key
that is repeated (in the batch, or met in the parent snapshot: ``repeated_keys``) or remembered
in the parent's record can have an earlier acceptance, so the ordered pass runs on those keys
only: usually a few rows, never the whole batch.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.window import Window

from msgdedup.config import AUDIT_COVERAGE, COUNT, TIME
from msgdedup.engine import kernel, transforms

# A left key's record: a snapshot entry's columns without the Apama ones. Declared in Arrow: a
# batch whose outputs the driver writes writes an empty record with pyarrow (no Spark frame).
ENTRY_ARROW_SCHEMA = pa.schema([field for field in transforms.SNAPSHOT_ARROW_SCHEMA
                                if field.name not in ("source_id", "queue")])
ENTRY_COLUMNS = ENTRY_ARROW_SCHEMA.names
ENTRY_SCHEMA = from_arrow_schema(ENTRY_ARROW_SCHEMA)
BOUNDS_SCHEMA = ("cache string, policy string, window long, reach long, floor long, oldest_us long, "
                 "remembered_seq long, remembered_us long")
AUDITED = (COUNT, TIME)
"""§9: an Apama id leaves by its sender's count and then by time: no one window size to recommend."""
_LONGEST = 2 ** 62  # a reach beyond any cache_seq or instant difference, that still fits in a long


def left_keys(entries: DataFrame | None, parent_left: DataFrame | None, bounds: DataFrame) -> DataFrame:
    """The keys the caches remember as having left their window (§9) after this batch.

    ``entries``: the parent snapshot and this batch's acceptances (``transforms.acceptances``;
    the parent's alone where none of the batch's can have left, ``acceptances_may_leave``; None:
    neither has any); those outside their cache's new snapshot have left: at or below ``floor`` (counter - count
    limit) or before ``oldest_us`` (time - duplicate_window), the limits ``transforms.snapshot``
    keeps. The parent's record (``parent_left``) has left already, whatever its seq: an entry a
    smaller window dropped does not come back when the window grows (§5). Both are kept while
    within the reach (window x (1 + horizon)): above ``remembered_seq`` for a count window, at or
    after ``remembered_us`` for a time window."""
    bounded = F.broadcast(bounds)
    remembered = ((F.col("remembered_seq").isNull() | (F.col("cache_seq") > F.col("remembered_seq")))
                  & (F.col("remembered_us").isNull() | (F.col("received_at_us") >= F.col("remembered_us"))))
    parts = []
    if entries is not None:
        parts.append(entries.join(bounded, "cache").filter(~transforms.within_limits() & remembered)
                     .select(*ENTRY_COLUMNS))
    if parent_left is not None:
        parts.append(parent_left.join(bounded, "cache").filter(remembered).select(*ENTRY_COLUMNS))
    return parts[0].unionByName(parts[1]) if len(parts) == 2 else parts[0]


def acceptances_may_leave(caches: dict[str, dict], accepted: dict[str, int]) -> bool:
    """Whether one of the batch's acceptances (``accepted``: per cache) can be out of its audited
    cache's snapshot already (``caches``: the manifest's, after the batch), so that ``left_keys``
    must read them: on a count window only where the batch accepted more keys than it holds
    (its acceptances are the last ones, up to ``last_seq``); on a time window whenever it
    accepted any (a batch can span more than the window). Otherwise only the parent's entries
    and record can have left."""
    for name, cache in caches.items():
        if cache["policy"] not in AUDITED or not accepted.get(name):
            continue
        floor, oldest_us = transforms.snapshot_limits(cache)
        if oldest_us is not None or (floor is not None and cache["last_seq"] - accepted[name] < floor):
            return True
    return False


def audit_keys(repeated_keys: DataFrame, left_met: DataFrame | None) -> DataFrame:
    """The (cache, dedup_key) pairs that can have an earlier acceptance: repeated ones and those
    the parent's record remembers (``left_met``, its entries semi-joined with the batch's keys)."""
    keys = repeated_keys.select("cache", "dedup_key")
    if left_met is not None:
        keys = keys.unionByName(left_met.select("cache", "dedup_key")).distinct()
    return keys


def _delivered(verdicts: DataFrame) -> DataFrame:
    """The acceptances among ``verdicts``: delivered, with a key."""
    return verdicts.filter((F.col("outcome") == kernel.DELIVERED) & F.col("cache").isNotNull())


def audit_candidates(verdicts: DataFrame, keys: DataFrame) -> DataFrame:
    """What ``window_misses`` reads of the verdicts, in one pass over them: the delivered messages
    of ``keys`` (``audit_keys``: the only ones a window can have missed), with ``audited`` true,
    and the other delivered messages of transactions but their last (whose first acceptance can
    come before an audited message's). Few, as ``keys`` and transactions usually are;
    ``window_misses`` reads them twice, so a caller keeps them. (The transactions' messages were
    a second pass over every verdict, once the audited ones were known: 0.4-0.8 s at 1M.)"""
    audited = F.broadcast(keys.select("cache", "dedup_key", F.lit(True).alias("audited")))
    return (_delivered(verdicts).join(audited, ["cache", "dedup_key"], "left")
            .withColumn("audited", F.coalesce("audited", F.lit(False)))
            .filter(F.col("audited") | _in_transaction()))


def _in_transaction() -> Column:
    """A message of a transaction but its last: its unit is another message (assign_units)."""
    return F.col("unit_row") != F.col("row_id")


def window_misses(candidates: DataFrame, earlier: DataFrame, bounds: DataFrame, batch_id: str) -> DataFrame:
    """One row per audited message of ``candidates`` (``audit_candidates``) whose key had been
    accepted before on its cache within the reach (§9), with ``needed`` (the window that would
    have held the earlier acceptance at the message's lookup) and ``missed_by`` (needed - window).

    ``earlier``: the parent's entries of the audited keys (record and snapshot: disjoint in
    cache_seq). A unit's lookup happens before its first acceptance on each cache, so the
    counter then is that acceptance's cache_seq - 1. On a time window the lookup happens at the
    cache's time then, which is the instant the message's key enters with. Any earlier
    acceptance of a delivered key was out of the window at the lookup, or the message would have
    been dropped.
    """
    audited = candidates.filter("audited")
    # A transaction's lookup comes before its first acceptance on each cache; a single message's
    # first acceptance is its own. The other delivered messages of the audited messages'
    # transactions (the audited units are broadcast):
    in_txn = (candidates.filter(_in_transaction())
              .join(F.broadcast(audited.select("unit_row").distinct()), "unit_row", "left_semi")
              .groupBy("cache", "unit_row").agg(F.min("cache_seq").alias("txn_first")))
    mine = audited.join(in_txn, ["cache", "unit_row"], "left").select(
        *ENTRY_COLUMNS[:5], F.lit(batch_id).alias("accepted_batch_id"), "received_at_us",
        F.coalesce("txn_first", "cache_seq").alias("unit_first"), F.lit(True).alias("this_batch"))
    before = earlier.select(*ENTRY_COLUMNS, F.lit(None).cast("long").alias("unit_first"),
                            F.lit(False).alias("this_batch"))
    in_order = Window.partitionBy("cache", "dedup_key").orderBy("cache_seq")
    previous = mine.unionByName(before).select(
        "*", *[F.lag(c).over(in_order).alias(f"previous_{name}") for c, name in (
            ("cache_seq", "seq"), ("received_at_us", "us"), ("message_id", "message_id"),
            ("accepted_batch_id", "batch_id"))])
    needed = F.when(F.col("policy") == TIME, F.col("received_at_us") - F.col("previous_us")).otherwise(
        F.col("unit_first") - F.col("previous_seq"))
    return (previous.filter(F.col("this_batch") & F.col("previous_seq").isNotNull())
            .join(F.broadcast(bounds.select("cache", "policy", "window", "reach")), "cache")
            .withColumn("needed", needed)
            .filter(F.col("needed") <= F.col("reach"))
            .select("cache", "dedup_key", "message_id", "address", "previous_message_id", "previous_batch_id",
                    "needed", (F.col("needed") - F.col("window")).alias("missed_by")))


def summary(misses: DataFrame) -> DataFrame:
    """Per cache with misses: their count, the largest ``missed_by`` and the smallest window that
    holds AUDIT_COVERAGE of them (``percentile_disc``: the nearest rank). Few rows."""
    return misses.groupBy("cache").agg(
        F.count(F.lit(1)).alias("misses"), F.max("missed_by").alias("max_missed_by"),
        F.expr(f"percentile_disc({AUDIT_COVERAGE}) WITHIN GROUP (ORDER BY needed)").alias("covering"))


def bounds_rows(caches: dict[str, dict], horizon: int) -> list[tuple]:
    """One BOUNDS_SCHEMA row per audited cache after the batch (the manifest's ``caches``), for
    ``left_keys`` and ``window_misses``: its window in its own unit, the reach (window x (1 +
    horizon)), the limits of its snapshot (as ``transforms.snapshot`` keeps it) and the oldest
    seq or instant its record remembers."""
    rows = []
    for name, c in caches.items():
        if c["policy"] not in AUDITED:
            continue
        window = c["id_cache_size"] if c["policy"] == COUNT else c["duplicate_window_us"]
        reach = min(window * (1 + horizon), _LONGEST)
        clock = c.get("clock_us")
        remembered = ((c["last_seq"] - reach, None) if c["policy"] == COUNT
                      else (None, None if clock is None else clock - reach))
        rows.append((name, c["policy"], window, reach, *transforms.snapshot_limits(c), *remembered))
    return rows


def report(caches: dict[str, dict], rows: list) -> dict[str, dict]:
    """The manifest's ``window_audit``: every audited cache, with or without misses (``rows``:
    ``summary``). Count windows in acceptances, time windows in microseconds (as the model's
    ``window_audit``)."""
    found = {r["cache"]: r for r in rows}
    audit = {}
    for name, c in sorted(caches.items()):
        if c["policy"] not in AUDITED:
            continue
        r = found.get(name)
        window = c["id_cache_size"] if c["policy"] == COUNT else c["duplicate_window_us"]
        misses, max_missed_by = (r["misses"], r["max_missed_by"]) if r else (0, 0)
        recommended = max(window, int(r["covering"])) if r else window
        if c["policy"] == COUNT:
            audit[name] = {"address": c["address"], "policy": COUNT, "misses": misses, "max_missed_by": max_missed_by,
                           "id_cache_size": window, "recommended_id_cache_size": recommended}
        else:
            audit[name] = {"address": c["address"], "policy": TIME, "misses": misses,
                           "max_missed_by_us": max_missed_by, "duplicate_window_us": window,
                           "recommended_duplicate_window_us": recommended}
    return audit
