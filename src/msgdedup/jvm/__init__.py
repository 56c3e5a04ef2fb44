"""The project's own JVM code: one jar, added to a Spark session when a query first needs it.

Why a jar of our own: one function Spark lacks, the envelope's fields read from a raw line in one
strict pass (``EnvelopeFields.java``, engine/parsing.py's fast path), is most of what parsing a
batch costs when written with Spark's functions. The jar is compiled from the ``.java`` files
here by ``make setup`` (``scripts/build_jvm.sh``: ``javac`` against pyspark's own jars; no
Maven, which is out of reach at set-up and at run time) and found next to them.

Nothing is needed when Spark starts: ``ADD JAR`` puts the jar on the driver's class path and
ships it to the executors (a standalone cluster's too) from the driver, so applications run by
spark-submit, the batch service and the tests' sessions all get it the same way.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType

from msgdedup.sql_text import sql_string

JAR = Path(__file__).with_name("msgdedup-jvm.jar")

ENVELOPE_FIELDS = "msgdedup_envelope_fields"
_ENVELOPE_FIELDS_CLASS = "msgdedup.jvm.EnvelopeFields"
# EnvelopeFields.call's Row, field by field; received_at is one of received_iso (a string) and
# received_ms (an integer).
ENVELOPE_FIELDS_TYPE = (
    "struct<message_id string, address string, received_iso string, received_ms bigint, "
    "properties map<string,string>, txn_id string, source_id string, seq bigint, body string>")


class JarMissing(RuntimeError):
    """The jar was not built: ``make setup`` builds it."""


def envelope_fields(spark: SparkSession, raw: Column) -> Column:
    """``EnvelopeFields`` of a binary column: ENVELOPE_FIELDS_TYPE, or null for the slow way."""
    _register(spark)
    return F.call_function(ENVELOPE_FIELDS, raw)


def _register(spark: SparkSession) -> None:
    """Functions belong to a session (the engine plans a small input in a session of its own);
    the jar, once added, to the whole application."""
    if spark.catalog.functionExists(ENVELOPE_FIELDS):
        return
    if not JAR.is_file():
        raise JarMissing(f"{JAR} is missing: build it with `make setup` (scripts/build_jvm.sh)")
    added = [row[0] for row in spark.sql("LIST JARS").collect()]
    if not any(url.endswith(f"/{JAR.name}") for url in added):
        spark.sql(f"ADD JAR {sql_string(str(JAR))}")
    spark.udf.registerJavaFunction(ENVELOPE_FIELDS, _ENVELOPE_FIELDS_CLASS,
                                   DataType.fromDDL(ENVELOPE_FIELDS_TYPE))
