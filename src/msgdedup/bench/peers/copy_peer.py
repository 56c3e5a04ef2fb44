"""Peer "copy": read the raw batch with the explicit schema and write it as Parquet.

The least any pipeline over these batches does (read, parse, write); the batch command's cost is
quoted as a multiple of this.

    spark-submit src/msgdedup/bench/peers/copy_peer.py --input DIR --output DIR
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from msgdedup.bench.peers import read_raw, run_app


def run(spark: SparkSession, input_path: str, output_path: str) -> None:
    read_raw(spark, input_path).write.mode("overwrite").parquet(output_path)


def main(argv: list[str] | None = None) -> int:
    return run_app(run, "bench peer: copy a raw batch to Parquet", "msgdedup-bench-copy", argv)


if __name__ == "__main__":
    sys.exit(main())
