"""Peer "naive Spark": what a user writes by hand to deduplicate a batch.

``row_number()`` over (address, key) ordered by received_at, keep the first. No window, no cache
carried between batches, no transactions: cheaper than the batch command and not the same result
(it neither sees duplicates of earlier batches nor drops transactions) -- the price of
correctness is the gap between the two.

    spark-submit src/msgdedup/bench/peers/naive_peer.py --input DIR --output DIR
"""

from __future__ import annotations

import sys

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from msgdedup.bench.peers import dedup_key, read_raw, received_ts, run_app


def dedup(raw: DataFrame) -> DataFrame:
    """First message per (address, key) by arrival; ties broken by message id to be deterministic."""
    w = Window.partitionBy("address", "dedup_key").orderBy("received_ts", "message_id")
    return (raw.withColumn("received_ts", received_ts()).withColumn("dedup_key", dedup_key())
            .withColumn("_rn", F.row_number().over(w)).where(F.col("_rn") == 1).drop("_rn"))


def run(spark: SparkSession, input_path: str, output_path: str) -> None:
    dedup(read_raw(spark, input_path)).write.mode("overwrite").parquet(output_path)


def main(argv: list[str] | None = None) -> int:
    return run_app(run, "bench peer: naive row_number() dedup", "msgdedup-bench-naive", argv)


if __name__ == "__main__":
    sys.exit(main())
