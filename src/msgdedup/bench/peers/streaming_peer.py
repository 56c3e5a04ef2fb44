"""Peer "Structured Streaming": Spark's built-in windowed dedup, ``dropDuplicatesWithinWatermark``.

The raw batch directory is a file stream source read with the explicit schema; the watermark is on
received_at and its delay is the dedup window; ``trigger(availableNow=True)`` processes what is
there and stops, so one run is one batch, with the dedup state kept in the checkpoint directory
between runs (the streaming way of carrying history). Output: Parquet file sink, append mode (a
first occurrence is emitted at once).

    spark-submit src/msgdedup/bench/peers/streaming_peer.py --input DIR --output DIR \
        --checkpoint DIR [--watermark "1 hour"]
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from msgdedup.bench.peers import RAW_SCHEMA, dedup_key, received_ts, run_app


def run(spark: SparkSession, input_path: str, output_path: str, checkpoint: str,
        watermark: str = "1 hour") -> None:
    stream = (spark.readStream.schema(RAW_SCHEMA).json(input_path)
              .withColumn("received_ts", received_ts())
              .withColumn("dedup_key", dedup_key())
              .withWatermark("received_ts", watermark)
              .dropDuplicatesWithinWatermark(["address", "dedup_key"]))
    query = (stream.writeStream.format("parquet").outputMode("append")
             .option("path", output_path).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    if query.exception() is not None:  # pragma: no cover - awaitTermination raises first
        raise RuntimeError(str(query.exception()))


def main(argv: list[str] | None = None) -> int:
    return run_app(run, "bench peer: dropDuplicatesWithinWatermark, trigger availableNow",
                   "msgdedup-bench-streaming", argv, checkpoint=True)


if __name__ == "__main__":
    sys.exit(main())
