"""A large, narrow frame brought to the driver through Parquet files its tasks write.

``DataFrame.toArrow`` hands the driver each task's share as one task result, and in local mode the
driver's JVM holds four or five copies of that share at once (the task's Arrow batches, the result
serialized, stored in the block manager, fetched, deserialized) in arrays large enough to be G1's
humongous objects: G1 grows the heap for the burst and keeps what it grew, and the batch's peak
memory follows (docs/benchmarks.md, "Where a 1M batch's heap goes"). Written as Parquet, each task
streams its rows out a page at a time, and the driver's Python reads the files with pyarrow: the
JVM never holds the table (on a warehouse the driver sees as local files; on HDFS or S3 each
file's bytes pass through it once, HadoopFS.read_bytes). It costs the write's commit and a read,
about half a second of a 1M batch, against some 100 MiB of peak (docs/benchmarks.md, "The
census's rows through files"), so it is for the one table of a row per message the driver needs
(batch._find_keys), not for small ones.

Uncompressed and without dictionaries: the rows are mostly 64-bit hashes, which neither shrinks, and
the files live only until the driver has read them.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema

from msgdedup.engine.filesystem import HadoopFS


def collect_through_files(frame: DataFrame, directory: str, fs: HadoopFS) -> pa.Table:
    """``frame``'s rows as ``frame.toArrow()`` gives them (its schema, its partitions' order),
    written to ``directory`` (a scratch directory of the run: layout.scratch_dir; it must not
    exist) by ``frame``'s own job, read by the driver and deleted."""
    schema = to_arrow_schema(frame.schema)
    (frame.write.mode("errorifexists")
     .option("compression", "none").option("parquet.enable.dictionary", "false")
     .parquet(directory))
    try:
        return fs.read_parquet(directory, schema)
    finally:
        fs.delete(directory)
