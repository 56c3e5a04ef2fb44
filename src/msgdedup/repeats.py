"""Values that repeat, found on the driver: a column of 64-bit hashes collected as Arrow and
sorted by numpy, instead of grouped by a Spark aggregation.

A search for repeated values (the engine's message ids, the gate's exceptions) first narrows the
rows to those whose 64-bit hash of the values repeats, normally none, and then decides on the
values themselves. Grouping a million hashes in Spark is a shuffle and two jobs; collected (8
bytes a row) and sorted by numpy, it is a fraction of that (docs/benchmarks.md). A caller collects
only where the hashes fit its share of the driver's heap, and aggregates in Spark otherwise.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StructField, StructType


def repeated_values(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """The values ``column`` holds more than once, each once, in order (its nulls left out)."""
    values = np.sort(column.drop_null().to_numpy())
    return np.unique(values[1:][values[1:] == values[:-1]])


def values_frame(spark: SparkSession, values: np.ndarray, name: str) -> DataFrame:
    """``values`` as a one-column frame of longs named ``name``: a local relation, scanned in the
    JVM only (msgdedup.local_frames says why)."""
    schema = StructType([StructField(name, LongType())])
    return spark.createDataFrame(pa.table({name: pa.array(values, pa.int64())}), schema)
