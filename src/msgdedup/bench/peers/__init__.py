"""Peers of the batch command for ``make bench``: the same raw batch through other Spark apps.

Each peer is a small spark-submit app (``copy_peer.py``, ``naive_peer.py``, ``streaming_peer.py``)
so that the harness pays JVM start-up for every contender exactly as for the batch command. The
logic lives in importable ``run()`` functions so the fast tests can check the outputs with one
shared in-process SparkSession instead of three JVMs.

What is shared lives here: the explicit read schema (a user who knows the envelope writes it down
instead of paying for schema inference) and the dedup key a hand-written pipeline would use.
"""

from __future__ import annotations

import argparse

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType

# The envelope of README.md ("Input"). received_at is read as text: it may be ISO-8601 or epoch
# milliseconds, and a JSON number read into a string column keeps its digits.
RAW_SCHEMA = StructType([
    StructField("message_id", StringType()),
    StructField("address", StringType()),
    StructField("received_at", StringType()),
    StructField("properties", MapType(StringType(), StringType())),
    StructField("txn_id", StringType()),
    StructField("source_id", StringType()),
    StructField("seq", LongType()),
    StructField("body", StringType()),
])


def read_raw(spark: SparkSession, path: str) -> DataFrame:
    """The raw batch with the explicit schema (``_SUCCESS`` and other ``_*`` files are skipped)."""
    return spark.read.schema(RAW_SCHEMA).json(path)


def received_ts(col: str = "received_at") -> Column:
    """received_at as a timestamp: epoch milliseconds or ISO-8601 with offset."""
    c = F.col(col)
    return (F.when(c.rlike(r"^-?\d+$"), F.timestamp_millis(c.cast("long")))
            .otherwise(F.to_timestamp(c)))


def dedup_key() -> Column:
    """The key a hand-written pipeline deduplicates on: ``_AMQ_DUPL_ID``, else the bridge id.

    Messages without either must all pass, so they get a key of their own (their message id);
    otherwise every keyless message of an address would collapse into one.
    """
    props = F.col("properties")
    return F.coalesce(props.getItem("_AMQ_DUPL_ID"),
                      F.concat(F.lit("bridge:"), props.getItem("_AMQ_BRIDGE_DUP")),
                      F.concat(F.lit("msg:"), F.col("message_id")))


def session(app_name: str) -> SparkSession:
    """The session of a peer app: master and memory come from spark-submit, like the batch command."""
    return (SparkSession.builder.appName(app_name)
            .config("spark.sql.session.timeZone", "UTC").getOrCreate())


def parser(description: str, checkpoint: bool = False) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--input", required=True, help="directory of one raw batch (*.jsonl)")
    p.add_argument("--output", required=True, help="Parquet output directory (overwritten)")
    if checkpoint:
        p.add_argument("--checkpoint", required=True, help="streaming checkpoint (state) directory")
        p.add_argument("--watermark", default="1 hour",
                       help="watermark delay on received_at = the dedup window (default 1 hour)")
    return p


def run_app(run, description: str, app_name: str, argv: list[str] | None = None,
            checkpoint: bool = False) -> int:
    """The ``main()`` of every peer app: parse the arguments, run in a session, always stop it."""
    args = parser(description, checkpoint).parse_args(argv)
    extra = (args.checkpoint, args.watermark) if checkpoint else ()
    spark = session(app_name)
    try:
        run(spark, args.input, args.output, *extra)
    finally:
        spark.stop()
    return 0
