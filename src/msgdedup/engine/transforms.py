"""The engine's steps, each a function of DataFrames (no I/O, no session state).

    raw lines --parse_lines--> parsed --split_valid--> valid / invalid
    valid --flag_duplicate_message_ids--> messages (+ quarantined copies)
    messages --assign_units--> units positioned at their commit point
    units + parent snapshot --decide--> verdicts, cache entries, counters
    messages + verdicts --delivered/dropped--> outputs

Row identity: ``row_id = file_index << 40 | line_number`` where ``file_index`` is the rank of the
file's path, so ordering by row_id is ordering by (file path, line number): the spec's tie-break.
"""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from msgdedup.config import AddressSettings
from msgdedup.engine import kernel
from msgdedup.engine.reading import FILE_URI, LINE_NUMBER, RAW, file_key
from msgdedup.envelope import InvalidLine, parse_line, printable_raw_line
from msgdedup.keys import cache_key

LINE_BITS = 40

MESSAGE_COLUMNS = [
    "message_id", "address", "received_at", "properties", "txn_id", "source_id", "seq", "body",
    "extra_fields", "source_file", "line_number",
]

PARSED_SCHEMA = pa.schema([
    ("row_id", pa.int64()),
    ("source_file", pa.string()),
    ("line_number", pa.int64()),
    ("raw_line", pa.string()),
    ("error", pa.string()),
    ("message_id", pa.string()),
    ("address", pa.string()),
    ("received_at", pa.timestamp("us", tz="UTC")),
    ("received_us", pa.int64()),
    ("properties", pa.map_(pa.string(), pa.string())),
    ("txn_id", pa.string()),
    ("source_id", pa.string()),
    ("seq", pa.int64()),
    ("body", pa.string()),
    ("extra_fields", pa.map_(pa.string(), pa.string())),
    ("cache", pa.string()),
    ("dedup_key", pa.string()),
])
# The same schema for Spark (mapInArrow, empty batches): derived, so the two cannot drift apart.
PARSED_SPARK_SCHEMA = from_arrow_schema(PARSED_SCHEMA)
OUTPUT_SPARK_SCHEMA = from_arrow_schema(kernel.OUTPUT_SCHEMA)


# -- parse ------------------------------------------------------------------------------------
def _parse_batches(batches: Iterator[pa.RecordBatch], settings: AddressSettings,
                   files: dict[str, tuple[int, str]]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        raws = batch.column(RAW).to_pylist()
        uris = batch.column(FILE_URI).to_pylist()
        numbers = batch.column(LINE_NUMBER).to_pylist()
        out = {name: [] for name in PARSED_SCHEMA.names}
        for raw, uri, number in zip(raws, uris, numbers):
            file_index, source_file = files[file_key(uri)]
            out["row_id"].append((file_index << LINE_BITS) | number)
            out["source_file"].append(source_file)
            out["line_number"].append(number)
            out["raw_line"].append(printable_raw_line(raw))
            try:
                message = parse_line(raw)
            except InvalidLine as error:
                out["error"].append(str(error))
                for name in PARSED_SCHEMA.names[5:]:
                    out[name].append(None)
                continue
            ck = cache_key(message.address, message.properties, settings)
            out["error"].append(None)
            out["message_id"].append(message.message_id)
            out["address"].append(message.address)
            out["received_at"].append(message.received_at_us)
            out["received_us"].append(message.received_at_us)
            out["properties"].append(list(message.properties.items()))
            out["txn_id"].append(message.txn_id)
            out["source_id"].append(message.source_id)
            out["seq"].append(message.seq)
            out["body"].append(message.body)
            out["extra_fields"].append(list(message.extra_fields.items()))
            out["cache"].append(ck.cache if ck else None)
            out["dedup_key"].append(ck.key if ck else None)
        yield pa.RecordBatch.from_pydict(out, schema=PARSED_SCHEMA)


def parse_lines(lines: DataFrame, settings: AddressSettings,
                files: dict[str, tuple[int, str]]) -> DataFrame:
    """Raw lines -> one row per line: a typed message with its cache and key, or an error.

    ``files`` maps each file's key (see ``reading.file_key``) to (file index, display path).
    """
    return lines.mapInArrow(lambda batches: _parse_batches(batches, settings, files), PARSED_SPARK_SCHEMA)


def split_valid(parsed: DataFrame) -> tuple[DataFrame, DataFrame]:
    return parsed.filter(F.col("error").isNull()), parsed.filter(F.col("error").isNotNull())


# -- message ids ----------------------------------------------------------------------------------
def flag_duplicate_message_ids(valid: DataFrame) -> tuple[DataFrame, DataFrame]:
    """A message_id names one delivery attempt: later copies of one are quarantined.

    Returns (messages, quarantined copies). The first copy in arrival order is kept.
    """
    arrival = F.struct("received_us", "row_id")
    repeated = (
        valid.groupBy("message_id")
        .agg(
            F.count(F.lit(1)).alias("copies"),
            F.min_by(F.struct("row_id", "source_file", "line_number"), arrival).alias("first"),
        )
        .filter(F.col("copies") > 1)
        .select("message_id", "first")
    )
    flagged = valid.join(repeated, "message_id", "left")
    is_copy = F.col("first").isNotNull() & (F.col("first.row_id") != F.col("row_id"))
    messages = flagged.filter(~is_copy).drop("first")
    copies = flagged.filter(is_copy).withColumn(
        "error",
        F.format_string(
            "duplicate message_id '%s' (first at %s:%d)",
            F.col("message_id"), F.col("first.source_file"), F.col("first.line_number"),
        ),
    ).drop("first")
    return messages, copies


# -- units ----------------------------------------------------------------------------------------
def assign_units(messages: DataFrame) -> DataFrame:
    """Position every message's unit: itself, or its transaction's last message (spec §2)."""
    commit_points = (
        messages.filter(F.col("txn_id").isNotNull())
        .groupBy("txn_id")
        .agg(F.max(F.struct("received_us", "row_id")).alias("commit_point"))
    )
    return (
        messages.join(commit_points, "txn_id", "left")
        .withColumn("unit_us", F.coalesce(F.col("commit_point.received_us"), F.col("received_us")))
        .withColumn("unit_row", F.coalesce(F.col("commit_point.row_id"), F.col("row_id")))
        .drop("commit_point")
    )


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
def with_verdicts(messages: DataFrame, decisions: DataFrame) -> DataFrame:
    verdicts = decisions.filter(F.col("record_type") == kernel.VERDICT).select(
        "row_id", "outcome", "reason", "duplicate_of", "cache_seq")
    return messages.join(verdicts, "row_id")


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


def quarantine(invalid: DataFrame, copies: DataFrame) -> DataFrame:
    columns = ["raw_line", "source_file", "line_number", "error"]
    return invalid.select(*columns, "row_id").unionByName(copies.select(*columns, "row_id")) \
        .sortWithinPartitions("row_id").drop("row_id")


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
