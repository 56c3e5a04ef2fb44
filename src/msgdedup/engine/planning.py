"""How the queries of one batch are planned: small inputs without adaptive execution.

Adaptive execution runs every shuffle stage as a Spark job of its own and re-plans between them:
a 20,000-message batch ran 47 jobs with it and 28 without (docs/benchmarks.md), and Spark's 200
shuffle partitions of a few rows each are 200 tasks to schedule. What adaptive execution is for
(skewed keys, joins it can turn into broadcasts, merging tiny partitions) does not arise at this
size; above it, the session's own settings apply. The plan changes no result: every query of the
engine and the gate is a deterministic function of its input whatever its plan (the
engine-vs-model property tests run under both).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from pyspark.sql import SparkSession

# Inputs up to this size (some 150,000 JSON messages, an hourly partition of most topics) are
# planned as small data; a Spark setting of the session can move the bound.
SMALL_INPUT_BYTES = 64 << 20
SMALL_INPUT_BYTES_CONF = "spark.msgdedup.smallInputBytes"


def small_plan(spark: SparkSession, input_bytes: int) -> dict[str, str]:
    """The SQL settings a batch of ``input_bytes`` of input is planned with: none above the bound;
    at most, no adaptive execution and one shuffle partition per core."""
    if input_bytes > int(spark.conf.get(SMALL_INPUT_BYTES_CONF, str(SMALL_INPUT_BYTES))):
        return {}
    return {"spark.sql.adaptive.enabled": "false",
            "spark.sql.shuffle.partitions": str(max(1, spark.sparkContext.defaultParallelism))}


@contextmanager
def planned_for(spark: SparkSession, input_bytes: int) -> Iterator[None]:
    """``small_plan`` on ``spark`` while the block runs, then the session's settings back. The
    session must run one batch at a time (the CLI, the batch service and the DAG's app do)."""
    settings = small_plan(spark, input_bytes)
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
