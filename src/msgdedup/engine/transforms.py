"""The engine's steps, each a function of DataFrames (no I/O, no session state).

    raw lines --parsing--> parsed --split_valid--> valid / invalid
    valid keys (KEY_COLUMNS) --flag_duplicate_message_ids--> messages / copies (quarantined)
    messages --assign_units--> units positioned at their commit point
    units + parent snapshot --decide--> verdicts, cache entries, counters
    valid + verdicts --judge--> delivered / dropped / quarantined outputs

Only the narrow key columns go through the ordering and deciding; the wide rows are shuffled
once, when the verdicts are joined back.

Row identity: ``row_id = file_index << 40 | line_number`` where ``file_index`` is the rank of the
file's path, so ordering by row_id is ordering by (file path, line number): the spec's tie-break.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from msgdedup.config import AddressSettings
from msgdedup.engine import kernel
from msgdedup.engine.parsing import LINE_BITS

MESSAGE_COLUMNS = [
    "message_id", "address", "received_at", "properties", "txn_id", "source_id", "seq", "body",
    "extra_fields", "source_file", "line_number",
]
# What deciding needs of a message: the wide columns (body, properties, ...) stay out of every
# shuffle but the last one, which joins the verdicts back.
KEY_COLUMNS = ["row_id", "message_id", "address", "received_us", "txn_id", "cache", "dedup_key"]
QUARANTINED = "quarantined"

OUTPUT_SPARK_SCHEMA = from_arrow_schema(kernel.OUTPUT_SCHEMA)


def split_valid(parsed: DataFrame) -> tuple[DataFrame, DataFrame]:
    return parsed.filter(F.col("error").isNull()), parsed.filter(F.col("error").isNotNull())


# -- message ids ----------------------------------------------------------------------------------
def flag_duplicate_message_ids(keys: DataFrame, source_files: list[str]) -> DataFrame:
    """A message_id names one delivery attempt: later copies of one are quarantined.

    ``keys`` has KEY_COLUMNS; ``source_files`` is the batch's sorted file listing (a row_id's
    file index points into it). Adds ``copy_error``: null for the first copy in arrival order
    (and every unique id), the quarantine reason for the others. Split with ``messages`` and
    ``copies``.
    """
    repeated = (
        keys.groupBy("message_id")
        .agg(F.count(F.lit(1)).alias("copies"),
             F.min_by("row_id", F.struct("received_us", "row_id")).alias("first_row"))
        .filter(F.col("copies") > 1)
        .select("message_id", "first_row")
    )
    flagged = keys.join(repeated, "message_id", "left")
    is_copy = F.col("first_row").isNotNull() & (F.col("first_row") != F.col("row_id"))
    names = F.create_map(*[x for i, name in enumerate(source_files) for x in (F.lit(i), F.lit(name))]) \
        if source_files else F.create_map().cast("map<int,string>")
    first_file = F.try_element_at(names, F.shiftright("first_row", LINE_BITS).cast("int"))
    first_line = F.col("first_row").bitwiseAND((1 << LINE_BITS) - 1)
    error = F.format_string("duplicate message_id '%s' (first at %s:%d)", F.col("message_id"), first_file, first_line)
    return flagged.withColumn("copy_error", F.when(is_copy, error)).drop("first_row")


def messages(flagged: DataFrame) -> DataFrame:
    return flagged.filter(F.col("copy_error").isNull()).drop("copy_error")


def copies(flagged: DataFrame) -> DataFrame:
    return flagged.filter(F.col("copy_error").isNotNull()).select("row_id", F.col("copy_error").alias("error"))


# -- units ----------------------------------------------------------------------------------------
def assign_units(messages: DataFrame) -> DataFrame:
    """Position every message's unit: itself, or its transaction's last message (spec §2)."""
    in_txn = messages.filter(F.col("txn_id").isNotNull())
    commit_points = in_txn.groupBy("txn_id").agg(F.max(F.struct("received_us", "row_id")).alias("commit_point"))
    singles = (messages.filter(F.col("txn_id").isNull())
               .withColumn("unit_us", F.col("received_us")).withColumn("unit_row", F.col("row_id")))
    # Joined apart from the single messages: they all share the null txn_id, one skewed partition.
    transactions = (
        in_txn.join(commit_points, "txn_id")
        .withColumn("unit_us", F.col("commit_point.received_us"))
        .withColumn("unit_row", F.col("commit_point.row_id"))
        .drop("commit_point")
    )
    return singles.unionByName(transactions)


# -- decide ---------------------------------------------------------------------------------------
_STREAM_COLUMNS = [
    "phase", "k1", "k2", "k3", "k4", "row_id", "message_id", "txn_id", "address", "cache",
    "dedup_key", "cache_seq", "accepted_batch_id",
]


def decision_stream(units: DataFrame, parent_snapshot: DataFrame | None) -> DataFrame:
    """One sorted partition: the parent's cache entries in sequence order, then every message in
    unit order (messages of a transaction keep their own order)."""
    messages = units.select(
        F.lit(kernel.MESSAGE_PHASE).alias("phase"),
        F.col("unit_us").alias("k1"), F.col("unit_row").alias("k2"),
        F.col("received_us").alias("k3"), F.col("row_id").alias("k4"),
        "row_id", "message_id", "txn_id", "address", "cache", "dedup_key",
        F.lit(None).cast("long").alias("cache_seq"),
        F.lit(None).cast("string").alias("accepted_batch_id"),
    )
    # Spark runs no task for an empty partition: the end marker makes sure the kernel always runs.
    end = units.sparkSession.range(1).select(
        F.lit(kernel.END_PHASE).alias("phase"),
        *[F.lit(0).cast("long").alias(k) for k in ("k1", "k2", "k3", "k4")],
        F.lit(None).cast("long").alias("row_id"),
        *[F.lit(None).cast("string").alias(c) for c in ("message_id", "txn_id", "address", "cache", "dedup_key")],
        F.lit(None).cast("long").alias("cache_seq"),
        F.lit(None).cast("string").alias("accepted_batch_id"),
    )
    stream = messages.unionByName(end)
    if parent_snapshot is not None:
        entries = parent_snapshot.select(
            F.lit(kernel.SNAPSHOT_PHASE).alias("phase"),
            F.col("cache_seq").alias("k1"), F.lit(0).cast("long").alias("k2"),
            F.lit(0).cast("long").alias("k3"), F.lit(0).cast("long").alias("k4"),
            F.lit(None).cast("long").alias("row_id"), "message_id",
            F.lit(None).cast("string").alias("txn_id"), "address", "cache", "dedup_key",
            "cache_seq", "accepted_batch_id",
        )
        stream = entries.unionByName(stream)
    return stream.repartition(1).sortWithinPartitions("phase", "k1", "k2", "k3", "k4")


def decide(stream: DataFrame, settings: AddressSettings, batch_id: str,
           counters: dict[str, dict]) -> DataFrame:
    """Verdicts, cache entries and counters (kernel.OUTPUT_SCHEMA rows) for a decision stream."""
    return stream.mapInArrow(
        lambda batches: kernel.decide(batches, settings, batch_id, counters), OUTPUT_SPARK_SCHEMA
    )


# -- outputs --------------------------------------------------------------------------------------
def verdicts(decisions: DataFrame, copies: DataFrame) -> DataFrame:
    """One row per valid message: the kernel's verdict, or quarantined as a repeated message_id."""
    decided = decisions.filter(F.col("record_type") == kernel.VERDICT).select(
        "row_id", "outcome", "reason", "duplicate_of", "cache_seq", F.lit(None).cast("string").alias("error"))
    quarantined = copies.select(
        "row_id", F.lit(QUARANTINED).alias("outcome"), F.lit(None).cast("string").alias("reason"),
        F.lit(None).cast("string").alias("duplicate_of"), F.lit(None).cast("long").alias("cache_seq"), "error")
    return decided.unionByName(quarantined)


def judge(valid: DataFrame, verdicts: DataFrame) -> DataFrame:
    """Valid messages with their verdicts: the one shuffle of wide rows (raw lines stay out)."""
    return valid.drop("error", "raw_line").join(verdicts, "row_id")


def delivered(judged: DataFrame) -> DataFrame:
    return (
        judged.filter(F.col("outcome") == kernel.DELIVERED)
        .sortWithinPartitions("received_us", "row_id")
        .select(*MESSAGE_COLUMNS, "cache", "dedup_key", "cache_seq")
    )


def dropped(judged: DataFrame) -> DataFrame:
    return (
        judged.filter(F.col("outcome") == kernel.DROPPED)
        .sortWithinPartitions("received_us", "row_id")
        .select(*MESSAGE_COLUMNS, "cache", "dedup_key", "reason", "duplicate_of")
    )


def quarantine(invalid: DataFrame, valid: DataFrame, verdicts: DataFrame) -> DataFrame:
    """Invalid lines and repeated message_ids, with their raw lines, in input order."""
    columns = ["raw_line", "source_file", "line_number", "error", "row_id"]
    repeated = verdicts.filter(F.col("outcome") == QUARANTINED).select("row_id", "error")
    copies = valid.drop("error").join(repeated, "row_id").select(*columns)
    return invalid.select(*columns).unionByName(copies).sortWithinPartitions("row_id").drop("row_id")


def snapshot(decisions: DataFrame) -> DataFrame:
    return (
        decisions.filter(F.col("record_type") == kernel.ENTRY)
        .select("cache", "dedup_key", "cache_seq", "message_id", "address", "accepted_batch_id")
    )


def cache_state(decisions: DataFrame) -> DataFrame:
    """Per cache: counter, size and fill; plus one row carrying the snapshot digest."""
    return (
        decisions.filter(F.col("record_type").isin(kernel.COUNTER, kernel.DIGEST))
        .select("record_type", "cache", "address", F.col("cache_seq").alias("last_seq"),
                "id_cache_size", "entries", "digest")
    )
