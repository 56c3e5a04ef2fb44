"""The engine's steps, each a function of DataFrames (no I/O, no session state).

    raw lines --parsing--> parsed --split_valid--> valid / invalid
    valid keys (KEY_COLUMNS) --flag_duplicate_message_ids--> messages / copies (quarantined)
    messages + parent snapshot --mark_repeated, assign_units--> units, contested or not
    contested units (+ Apama senders' passive ones) + parent entries --decision_stream, decide--> the kernel's verdicts
    units + kernel verdicts --verdicts--> every message's verdict, acceptances numbered
    valid + verdicts --delivered, dropped, quarantine--> the outputs
    parent snapshot + acceptances --snapshot--> the new ID cache

Only the narrow key columns go through the ordering and deciding; the wide rows are only read
again when the verdicts are joined back. Only contested units (a key that occurs more than once
in the batch and the parent snapshot together) go through the single-task kernel; the rest is
decided by joins and windows, in parallel.

Row identity: ``row_id = file_index << 40 | line_number`` where ``file_index`` is the rank of the
file's path, so ordering by row_id is ordering by (file path, line number): the spec's tie-break.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window
from pyspark.sql.pandas.types import from_arrow_schema

from msgdedup.config import TIME
from msgdedup.engine import kernel
from msgdedup.engine.kernel import SENDER_QUEUE
from msgdedup.engine.windows import CacheWindow
from msgdedup.engine.parsing import LINE_BITS, LINE_MASK
from msgdedup.sql_text import is_in

MESSAGE_COLUMNS = [
    "message_id", "address", "received_at", "properties", "txn_id", "source_id", "seq", "body",
    "extra_fields", "source_file", "line_number",
]
# What deciding needs of a message: the wide columns (body, properties, ...) stay out of every
# shuffle but the last one, which joins the verdicts back.
KEY_COLUMNS = ["row_id", "message_id", "address", "received_us", "txn_id", "source_id", "cache", "dedup_key"]
# An ID-cache snapshot row (§5, §8.5): time and Apama caches add the instant a key entered with,
# Apama caches its sender and queue (null elsewhere).
# Declared once, in Arrow: the driver reads small snapshots with pyarrow (driver_decide.entries_met).
SNAPSHOT_ARROW_SCHEMA = pa.schema([
    ("cache", pa.string()), ("dedup_key", pa.string()), ("cache_seq", pa.int64()), ("message_id", pa.string()),
    ("address", pa.string()), ("accepted_batch_id", pa.string()), ("received_at_us", pa.int64()),
    ("source_id", pa.string()), ("queue", pa.string()),
])
SNAPSHOT_COLUMNS = SNAPSHOT_ARROW_SCHEMA.names
SNAPSHOT_SCHEMA = from_arrow_schema(SNAPSHOT_ARROW_SCHEMA)
QUARANTINED = "quarantined"

OUTPUT_SPARK_SCHEMA = from_arrow_schema(kernel.OUTPUT_SCHEMA)


def split_valid(parsed: DataFrame) -> tuple[DataFrame, DataFrame]:
    return parsed.filter(F.col("error").isNull()), parsed.filter(F.col("error").isNotNull())


# -- message ids ----------------------------------------------------------------------------------
def id_hash() -> Column:
    """A message id's 64-bit hash (``id_hash``): what ``repeated_id_hashes`` groups by."""
    return F.xxhash64("message_id")


def repeated_id_hashes(keys: DataFrame) -> DataFrame:
    """The ``id_hash`` of every message id that occurs more than once, and of any that shares its
    hash with another id (few rows, usually none): the ids ``repeated_message_ids`` needs to look
    at, found by grouping 8 bytes a message instead of the ids themselves. A million distinct ids
    grouped as strings took 2.0 s on two cores, as hashes 0.9 s (docs/benchmarks.md); a hash only
    chooses which ids are looked at, ``repeated_message_ids`` decides on the ids."""
    return keys.groupBy(id_hash().alias("id_hash")).count().filter(F.col("count") > 1).select("id_hash")


def with_repeated_hash(keys: DataFrame, hashes: DataFrame) -> DataFrame:
    """The rows of ``keys`` whose message id has one of ``hashes`` (``repeated_id_hashes``)."""
    return keys.join(hashes, id_hash() == hashes["id_hash"], "left_semi")


def repeated_message_ids(keys: DataFrame) -> DataFrame:
    """Message ids that occur more than once, with the row_id of their first copy in arrival order
    (few rows, usually none). ``keys``: every message, or at least every message whose id may
    repeat (``with_repeated_hash``)."""
    return (
        keys.groupBy("message_id")
        .agg(F.count(F.lit(1)).alias("copies"),
             F.min_by("row_id", F.struct("received_us", "row_id")).alias("first_row"))
        .filter(F.col("copies") > 1)
        .select("message_id", "first_row")
    )


def flag_duplicate_message_ids(keys: DataFrame, repeated: DataFrame | None, source_files: list[str]) -> DataFrame:
    """A message_id names one delivery attempt: later copies of one are quarantined.

    ``keys`` has KEY_COLUMNS, ``repeated`` is ``repeated_message_ids(keys)``, or None when that
    is known to be empty (the usual case: no join then); ``source_files`` is the batch's sorted
    file listing (a row_id's file index points into it). Adds ``copy_error``: null for the first
    copy in arrival order (and every unique id), the quarantine reason for the others. Split with
    ``messages`` and ``copies``.
    """
    if repeated is None:
        return keys.withColumn("copy_error", F.lit(None).cast("string"))
    flagged = keys.join(repeated, "message_id", "left")
    is_copy = F.col("first_row").isNotNull() & (F.col("first_row") != F.col("row_id"))
    names = F.create_map(*[x for i, name in enumerate(source_files) for x in (F.lit(i), F.lit(name))]) \
        if source_files else F.create_map().cast("map<int,string>")
    first_file = F.try_element_at(names, F.shiftright("first_row", LINE_BITS).cast("int"))
    first_line = F.col("first_row").bitwiseAND(LINE_MASK)
    error = F.format_string("duplicate message_id '%s' (first at %s:%d)", F.col("message_id"), first_file, first_line)
    return flagged.withColumn("copy_error", F.when(is_copy, error)).drop("first_row")


def messages(flagged: DataFrame) -> DataFrame:
    return flagged.filter(F.col("copy_error").isNull()).drop("copy_error")


def copies(flagged: DataFrame) -> DataFrame:
    return flagged.filter(F.col("copy_error").isNotNull()).select("row_id", F.col("copy_error").alias("error"))


# -- units ----------------------------------------------------------------------------------------
def batch_keys(messages: DataFrame) -> DataFrame:
    """Every (cache, dedup_key) of the batch and how often it occurs (``count``)."""
    return messages.filter(F.col("cache").isNotNull()).groupBy("cache", "dedup_key").count()


def entries_met(parent_snapshot: DataFrame, batch_keys: DataFrame) -> DataFrame:
    """The parent snapshot's entries whose key occurs in the batch: the only ones a message of the
    batch can hit. A semi-join that reads the snapshot once and keeps a few rows, so a batch's cost
    grows with the snapshot by one scan, not by a shuffle of it."""
    return parent_snapshot.join(batch_keys.select("cache", "dedup_key"), ["cache", "dedup_key"], "left_semi")


def repeated_keys(batch_keys: DataFrame, entries_met: DataFrame | None) -> DataFrame:
    """(cache, dedup_key) pairs that occur more than once in the batch and the parent snapshot
    together.

    A key that is not repeated can never be found in its cache (it was never accepted, or fell
    out of the cache before the snapshot), which is what lets most units skip the ordered pass.
    """
    repeated = batch_keys.filter(F.col("count") > 1).select("cache", "dedup_key")
    if entries_met is not None:
        repeated = repeated.unionByName(entries_met.select("cache", "dedup_key")).distinct()
    return repeated


def mark_repeated(messages: DataFrame, repeated: DataFrame, sequential: list[str],
                  quiet: DataFrame | None = None) -> DataFrame:
    """Add ``repeated``: the message's key is one of ``repeated`` (``repeated_keys``, and for
    Apama caches the keys of the parent's queues the batch meets); ``sequential``: its cache is
    one of ``sequential`` (Apama caches), whose acceptances move the queues, so the kernel sees
    their messages, the contested ones to decide, the others to keep the queues (kernel.py); and
    ``quiet``: its (cache, source_id) is one of ``quiet`` (``quiet_senders``), whose queue
    cannot overflow in this batch, so its uncontested messages need not reach the kernel."""
    in_sequential = F.coalesce(is_in("cache", sequential) if sequential else F.lit(False), F.lit(False))
    marked = (messages.join(repeated.withColumn("repeated", F.lit(True)), ["cache", "dedup_key"], "left")
              .withColumn("repeated", F.coalesce("repeated", F.lit(False)))
              .withColumn("sequential", in_sequential))
    if quiet is None:
        return marked.withColumn("quiet", F.lit(False))
    return with_quiet(marked, quiet).withColumn("quiet", in_sequential & F.col("quiet"))


def with_quiet(frame: DataFrame, quiet: DataFrame) -> DataFrame:
    """Add ``quiet``: the row's (cache, source_id) is one of ``quiet`` (``quiet_senders``). A
    null source_id is a sender too: the messages without one share a queue (§8.2)."""
    q = quiet.select(F.col("cache").alias("_q_cache"), F.col("source_id").alias("_q_source"))
    on = (F.col("cache") == F.col("_q_cache")) & F.col("source_id").eqNullSafe(F.col("_q_source"))
    return frame.join(q, on, "left").withColumn("quiet", F.col("_q_cache").isNotNull()).drop("_q_cache", "_q_source")


def named_entries(parent_apama: DataFrame, batch_keys: DataFrame, quiet: DataFrame) -> DataFrame:
    """The parent's Apama entries with ``named`` (the batch names the key: ``batch_keys``) and
    ``resting``: an entry in a quiet sender's queue whose key the batch never names is never found
    and never pushed out, so it stays in that queue as it is, without the kernel. One join for
    both uses (``contested_keys``, the kernel's entries), as the batch's keys rarely fit a broadcast."""
    named = batch_keys.select("cache", "dedup_key").withColumn("named", F.lit(True))
    return (with_quiet(parent_apama.join(named, ["cache", "dedup_key"], "left"), quiet)
            .withColumn("named", F.coalesce("named", F.lit(False)))
            .withColumn("resting", (F.col("queue") == SENDER_QUEUE) & F.col("quiet") & ~F.col("named"))
            .drop("quiet"))


def quiet_senders(messages: DataFrame, parent_apama: DataFrame | None, windows: DataFrame) -> DataFrame:
    """The (cache, source_id) pairs of Apama caches whose sender queue cannot overflow in this
    batch: the entries the parent left in it and the batch's messages to it (every acceptance
    there is one of them) fit ``per_source_window`` (``windows``: ``cache``,
    ``per_source_window`` of the Apama caches; small). Such a queue only ever grows in the batch,
    so its uncontested acceptances stay in it, where ``verdicts`` puts them without the kernel."""
    apama = windows.select("cache")
    load = messages.join(F.broadcast(apama), "cache").groupBy("cache", "source_id").count()
    if parent_apama is not None:
        held = (parent_apama.filter(F.col("queue") == SENDER_QUEUE).join(F.broadcast(apama), "cache")
                .groupBy("cache", "source_id").count())
        load = load.unionByName(held).groupBy("cache", "source_id").agg(F.sum("count").alias("count"))
    return (load.join(F.broadcast(windows), "cache")
            .filter(F.col("count") <= F.col("per_source_window")).select("cache", "source_id"))


def assign_units(messages: DataFrame) -> DataFrame:
    """Position every message's unit: itself, or its transaction's last message (spec §2).

    Adds ``unit_us``, ``unit_row`` and ``contested``: the unit holds a repeated key
    (``mark_repeated``), so only the ordered pass can decide it.

    A transaction's commit point is a window over its messages, not an aggregation joined back:
    the messages are read once and shuffled once (by txn_id), where the join read them twice and
    waited for the aggregation's result to be broadcast (docs/benchmarks.md). The single messages
    stay out of it: they all share the null txn_id, one skewed partition.
    """
    by_txn = Window.partitionBy("txn_id")
    commit_point = F.max(F.struct("received_us", "row_id")).over(by_txn)
    singles = (messages.filter(F.col("txn_id").isNull())
               .withColumns({"unit_us": F.col("received_us"), "unit_row": F.col("row_id"),
                             "contested": F.col("repeated")}))
    transactions = (
        messages.filter(F.col("txn_id").isNotNull())
        .withColumn("_commit_point", commit_point)
        .withColumns({"unit_us": F.col("_commit_point.received_us"), "unit_row": F.col("_commit_point.row_id"),
                      "contested": F.max("repeated").over(by_txn)})
        .drop("_commit_point")
    )
    return singles.unionByName(transactions).drop("repeated")


# Unit order, and message order inside a transaction: the order of spec §4.
_UNIT_ORDER = ["unit_us", "unit_row", "received_us", "row_id"]
# The order the kernel walks its stream in: the parent's entries, then the messages in unit order.
_STREAM_ORDER = ["phase", *_UNIT_ORDER]
# The messages without a key are spread over this many window partitions (their ranks are null).
_UNKEYED_SPREAD = 64


def rank_in_caches(units: DataFrame) -> DataFrame:
    """Add, for every message with a key, its place among its cache's messages in unit order:
    ``free_rank`` (uncontested messages up to it, itself included) and ``contested_rank``
    (contested ones). Every uncontested message is accepted, so for a contested message
    ``free_rank`` is the count of acceptances the kernel does not see (kernel.py).

    One window over every unit, keyed or not: split in two (the keyed ones ranked, the others
    passed by), the units' whole plan ran twice, each half of it reading the messages again. The
    messages without a key (null ``cache``) are spread over ``_UNKEYED_SPREAD`` partitions of
    their own by their row_id, not all sorted in one, and get null ranks.
    """
    keyed = F.col("cache").isNotNull()
    spread = F.when(~keyed, F.col("row_id") % _UNKEYED_SPREAD)
    upto = (Window.partitionBy("cache", spread).orderBy(*_UNIT_ORDER)
            .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    return units.select(
        "*",
        F.when(keyed, F.count_if(~F.col("contested")).over(upto)).alias("free_rank"),
        F.when(keyed, F.count_if(F.col("contested")).over(upto)).alias("contested_rank"))


# -- decide ---------------------------------------------------------------------------------------
def decision_stream(units: DataFrame, entries: DataFrame | None) -> DataFrame:
    """What the kernel reads (``in_unit_order`` puts it in its order): the parent's entries it
    needs (``entries``, SNAPSHOT_COLUMNS: those the batch's keys can meet, and every entry of an
    Apama cache), and the contested messages and the uncontested ones of Apama caches but
    ``quiet`` senders' (``passive``: the kernel only moves their keys through the queues,
    ``verdicts`` numbers them as every uncontested message)."""
    seen = units.filter(F.col("contested") | (F.col("sequential") & ~F.col("quiet")))
    none = lambda column, kind: F.lit(None).cast(kind).alias(column)  # noqa: E731
    passive = ~F.col("contested")
    messages = seen.select(
        F.lit(kernel.MESSAGE_PHASE).alias("phase"), *_UNIT_ORDER, "message_id", "txn_id", "address",
        "cache", "dedup_key", none("cache_seq", "long"),
        # an uncontested message's free_rank counts itself
        F.when(passive, F.col("free_rank") - 1).otherwise(F.col("free_rank")).alias("free_before"),
        "contested_rank", "source_id", none("received_at_us", "long"), none("queue", "string"),
        none("accepted_batch_id", "string"), passive.alias("passive"))
    stream = messages
    if entries is not None:
        entries = entries.select(
            F.lit(kernel.SNAPSHOT_PHASE).alias("phase"),
            *[F.lit(0).cast("long").alias(c) for c in _UNIT_ORDER], "message_id",
            none("txn_id", "string"), "address", "cache", "dedup_key",
            "cache_seq", none("free_before", "long"), none("contested_rank", "long"),
            "source_id", "received_at_us", "queue", "accepted_batch_id", F.lit(False).alias("passive"))
        stream = entries.unionByName(stream)
    return stream


def in_unit_order(stream: DataFrame) -> DataFrame:
    """A ``decision_stream`` as the kernel walks it, in one partition: the parent's entries, then
    the messages in unit order (messages of a transaction keep their own order)."""
    return stream.repartition(1).sortWithinPartitions(*_STREAM_ORDER)


def in_unit_order_on_driver(stream: pa.Table) -> pa.Table:
    """``in_unit_order`` for a stream the driver collected (``planning.kernel_on_driver``: a few
    rows), sorted by pyarrow: collected unsorted, it needs no exchange into one Spark task and
    no job for it. None of the sort's columns is null (a message's instant and row_id, 0 for
    an entry), so where Spark and pyarrow put nulls does not matter."""
    return stream.sort_by([(column, "ascending") for column in _STREAM_ORDER])


def decide(stream: DataFrame, windows: dict[str, CacheWindow], batch_id: str) -> DataFrame:
    """The kernel's output (kernel.OUTPUT_SCHEMA) for a ``decision_stream``, in one Spark task:
    verdicts, and the entries and time of the Apama caches."""
    return in_unit_order(stream).mapInArrow(lambda batches: kernel.decide(batches, windows, batch_id),
                                            OUTPUT_SPARK_SCHEMA)


def kernel_rows(decisions: DataFrame, kind: str) -> DataFrame:
    return decisions.filter(F.col("kind") == kind)


# -- outputs --------------------------------------------------------------------------------------
_KERNEL_VERDICT = ["outcome", "reason", "duplicate_of", "cache_seq"]
VERDICT_COLUMNS = ["row_id", "outcome", "reason", "duplicate_of", "cache_seq", "error",
                   "message_id", "address", "cache", "dedup_key", "source_id", "received_at_us", "queue",
                   "unit_row"]


def verdicts(units: DataFrame, decisions: DataFrame, copies: DataFrame, starts: DataFrame) -> DataFrame:
    """One row per valid message: delivered (every uncontested unit), the kernel's verdict, or
    quarantined as a repeated message_id; with the message's unit (``unit_row``), which the
    window-miss audit needs of its acceptances.

    An uncontested message's ``cache_seq`` is the parent's counter (``starts``: ``cache``,
    ``last_seq``, ``clock_us``, ``timed``: a time or Apama cache; small, windows.py) + its ``free_rank`` + the contested
    acceptances before it, which the kernel reported at the contested message ranked just before
    it (see kernel.py). An acceptance on a time or Apama cache enters at the cache's time then
    (``received_at_us``, §8.4): the later of its unit's instant and the cache's time before the
    batch, as units are decided in instant order.
    """
    decisions = kernel_rows(decisions, kernel.VERDICT)
    # One pass over the units: a free message takes the count its contested predecessor
    # (``contested_rank``) reported, a contested one its own verdict; both sides are small.
    accepted = decisions.filter(F.col("cache").isNotNull()).select("cache", "contested_rank", "accepted_after")
    decided = decisions.select("row_id", *[F.col(c).alias(f"_kernel_{c}") for c in _KERNEL_VERDICT])
    contested = F.col("contested")
    free_seq = F.coalesce("last_seq", F.lit(0)) + F.col("free_rank") + F.coalesce("accepted_after", F.lit(0))
    kernel_says = {c: F.col(f"_kernel_{c}") for c in _KERNEL_VERDICT}
    judged = (
        units.join(accepted, ["cache", "contested_rank"], "left")
        .join(decided, "row_id", "left")
        .join(F.broadcast(starts), "cache", "left")
        .select("row_id",
                F.when(contested, kernel_says["outcome"]).otherwise(F.lit(kernel.DELIVERED)).alias("outcome"),
                *[F.when(contested, kernel_says[c]).alias(c) for c in ("reason", "duplicate_of")],
                F.when(contested, kernel_says["cache_seq"]).otherwise(free_seq).alias("cache_seq"),
                "message_id", "address", "cache", "dedup_key", "source_id", "unit_us", "clock_us", "timed",
                F.when(~contested & F.col("quiet"), F.lit(SENDER_QUEUE)).alias("queue"), "unit_row")
    )
    timed = (judged
             .withColumn("received_at_us", F.when(F.col("timed") & F.col("cache_seq").isNotNull(),
                                                  F.greatest("unit_us", F.coalesce("clock_us", "unit_us"))))
             .withColumn("error", F.lit(None).cast("string")))
    quarantined = copies.select(
        "row_id", F.lit(QUARANTINED).alias("outcome"), *[F.lit(None).cast("string").alias(c) for c in (
            "reason", "duplicate_of")], F.lit(None).cast("long").alias("cache_seq"), "error",
        *[F.lit(None).cast("string").alias(c) for c in ("message_id", "address", "cache", "dedup_key", "source_id")],
        F.lit(None).cast("long").alias("received_at_us"), F.lit(None).cast("string").alias("queue"),
        F.lit(None).cast("long").alias("unit_row"))
    return timed.select(*VERDICT_COLUMNS).unionByName(quarantined.select(*VERDICT_COLUMNS))


def verdict_counts(verdicts: DataFrame) -> DataFrame:
    """Verdicts counted by (address, cache, outcome, reason): few rows, what the books, the
    counters and the manifest's per-address counts are made of; with the latest instant a key
    entered a time cache with (``clock_us``: the cache's time after the batch, §8.4)."""
    return verdicts.groupBy("address", "cache", "outcome", "reason").agg(
        F.count(F.lit(1)).alias("count"), F.max("received_at_us").alias("clock_us"))


# What each output takes of its verdicts. Narrow, so that a million delivered verdicts still fit a
# broadcast (planning.OUTPUT_VERDICT_BYTES) and the wide rows are joined where they are, never
# shuffled; the message's ``cache`` and ``dedup_key`` come from the message itself
# (``parsing.with_cache_keys``, the expression the verdicts' own come from) unless the verdicts
# bring them (``verdicts_for``'s ``keys``).
OUTPUT_VERDICT_COLUMNS = {
    kernel.DELIVERED: ["cache_seq", "received_at_us"],
    kernel.DROPPED: ["reason", "duplicate_of"],
}
KEYS = ["cache", "dedup_key"]


def verdicts_for(verdicts: DataFrame, outcome: str, keys: bool = False) -> DataFrame:
    """The verdicts of one output (``outcome``), with only the columns that output takes of them,
    and with the messages' cache keys if ``keys`` (then the messages come without them)."""
    return verdicts.filter(F.col("outcome") == outcome).select(
        "row_id", *OUTPUT_VERDICT_COLUMNS[outcome], *(KEYS if keys else []))


def judge(messages: DataFrame, verdicts: DataFrame) -> DataFrame:
    """Valid messages joined to the verdicts of one output (``verdicts_for``); raw lines stay out.
    One side brings the cache keys: the messages (``parsing.with_cache_keys``) or the verdicts.
    The rows keep the order they are read in (input order within each output file): sorting them
    again was a sort of the wide rows, which spilled at 1M messages, for no promise the outputs make."""
    return messages.drop("error", "raw_line").join(verdicts, "row_id")


# What each output takes of its verdicts, by output column: the message's columns and keys come first.
# (driver_outputs.py builds the same rows in Arrow.)
DELIVERED_VERDICT = {"cache_seq": "cache_seq", "entered_at_us": "received_at_us"}
DROPPED_VERDICT = {"reason": "reason", "duplicate_of": "duplicate_of"}
QUARANTINE_COLUMNS = ["raw_line", "source_file", "line_number", "error"]


def delivered(messages: DataFrame, verdicts: DataFrame) -> DataFrame:
    """``verdicts``: ``verdicts_for(..., DELIVERED)``."""
    return judge(messages, verdicts).select(
        *MESSAGE_COLUMNS, *KEYS, *(F.col(taken).alias(name) for name, taken in DELIVERED_VERDICT.items()))


def dropped(messages: DataFrame, verdicts: DataFrame) -> DataFrame:
    """``verdicts``: ``verdicts_for(..., DROPPED)``."""
    return judge(messages, verdicts).select(
        *MESSAGE_COLUMNS, *KEYS, *(F.col(taken).alias(name) for name, taken in DROPPED_VERDICT.items()))


def quarantine(invalid: DataFrame, valid: DataFrame, repeated: DataFrame | None) -> DataFrame:
    """Invalid lines and repeated message_ids (``copies``, or None when there are none: the
    usual case, which then needs no join of the wide rows), with their raw lines, in input order."""
    columns = [*QUARANTINE_COLUMNS, "row_id"]
    quarantined = invalid.select(*columns)
    if repeated is not None:
        quarantined = quarantined.unionByName(valid.drop("error").join(repeated, "row_id").select(*columns))
    return quarantined.sortWithinPartitions("row_id").drop("row_id")


def acceptances(verdicts: DataFrame, batch_id: str) -> DataFrame:
    """This batch's acceptances as cache entries (SNAPSHOT_COLUMNS); those that stay in an Apama
    sender's queue (``queue``) with their sender."""
    return (verdicts.filter(F.col("cache_seq").isNotNull())
            .select("cache", "dedup_key", "cache_seq", "message_id", "address",
                    F.lit(batch_id).alias("accepted_batch_id"), "received_at_us",
                    F.when(F.col("queue").isNotNull(), F.col("source_id")).alias("source_id"), "queue"))


def delivered_acceptances(delivered: DataFrame, batch_id: str) -> DataFrame:
    """``acceptances`` of a batch whose caches queue none (no Apama cache), from its ``delivered``
    output (``delivered``'s rows): the delivered messages with a cache_seq, which entered their
    cache at ``entered_at_us``."""
    return (delivered.filter(F.col("cache_seq").isNotNull())
            .select("cache", "dedup_key", "cache_seq", "message_id", "address",
                    F.lit(batch_id).alias("accepted_batch_id"), F.col("entered_at_us").alias("received_at_us"),
                    *(F.lit(None).cast("string").alias(c) for c in ("source_id", "queue"))))


def snapshot_limits(cache: dict) -> tuple[int | None, int | None]:
    """A count or time cache's snapshot limits after the batch (``cache``: its manifest entry):
    ``floor`` = new counter - count limit, ``oldest_us`` = the cache's time - duplicate_window,
    either None when the window has no such limit."""
    size = cache["id_cache_size"]
    timed = cache["policy"] == TIME and cache.get("clock_us") is not None
    return (None if size is None else cache["last_seq"] - size,
            cache["clock_us"] - cache["duplicate_window_us"] if timed else None)


def within_limits() -> Column:
    """An entry joined with its cache's ``snapshot_limits`` (``floor``, ``oldest_us``) is still
    in the cache: both limits only ever expire from the oldest end (§3, §8.3)."""
    return ((F.col("floor").isNull() | (F.col("cache_seq") > F.col("floor")))
            & (F.col("oldest_us").isNull() | (F.col("received_at_us") >= F.col("oldest_us"))))


def snapshot(entries: DataFrame, limits: DataFrame, apama_entries: DataFrame, queued: bool) -> DataFrame:
    """The new ID cache. Count and time caches: their ``entries`` (the parent's carried ones and
    this batch's ``acceptances``) still within their limits (``limits``: ``cache`` and its
    ``snapshot_limits``; small), ``within_limits``. Apama caches: the queues the kernel reports
    and the parent's entries that stayed in them (``apama_entries``, ``named_entries``), and, if
    ``queued`` (the batch has Apama caches: no other acceptance can), the acceptances that stay in
    a quiet sender's queue (``queue`` set: ``quiet_senders``), which the kernel never saw."""
    kept = entries.join(F.broadcast(limits), "cache").filter(within_limits()).select(*SNAPSHOT_COLUMNS)
    new = kept.unionByName(apama_entries.select(*SNAPSHOT_COLUMNS))
    if queued:
        new = new.unionByName(entries.filter(F.col("queue").isNotNull()).select(*SNAPSHOT_COLUMNS))
    return new


# What an entry's digest hashes (nulls hash as nothing).
DIGESTED = ["dedup_key", "cache_seq", "message_id", "received_at_us", "source_id", "queue"]


def entry_digests(snapshot: DataFrame) -> DataFrame:
    """Per cache and address of its entries: their count and a digest of them (few rows), which
    ``manifest.cache_digests`` folds into each cache's count, digest and addresses.

    The digest XORs two 64-bit hashes of every entry (key, seq, message_id, and where the policy
    keeps them its instant, sender and queue): the seq puts the order in each entry, the keys of
    a cache are distinct, so no sort is needed and the caches are hashed in parallel. XOR folds
    in any order, so the (cache, address) parts make the cache's. Grouped so, the aggregation is
    only counts and XORs: a set of addresses per cache (``collect_set``) made it an object
    aggregation, which falls back to sorting its input once a task meets more than 128 caches
    (``spark.sql.objectHashAggregate.sortBased.fallbackThreshold``). It tells runs apart, it is
    not a security measure.
    """
    return snapshot.groupBy("cache", "address").agg(
        F.count(F.lit(1)).alias("entries"),
        F.bit_xor(F.xxhash64(*DIGESTED)).alias("xor_a"),
        F.bit_xor(F.xxhash64(F.lit(1), *DIGESTED)).alias("xor_b"))
