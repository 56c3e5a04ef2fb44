"""Python values written into Spark SQL text (``spark.sql``, ``F.expr``), quoted once here.

SQL text is also the cheap way to give Spark many literals: a column expression made in Python
costs a py4j call per literal, a text is sent whole and parsed in the JVM (``is_in``)."""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import Column
from pyspark.sql import functions as F


def sql_string(text: str) -> str:
    """``text`` as a Spark SQL string literal (backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_identifier(name: str) -> str:
    """``name`` as a Spark SQL identifier (backquoted, backquotes doubled)."""
    return "`" + name.replace("`", "``") + "`"


def is_in(column: str, values: Iterable[str]) -> Column:
    """``F.col(column).isin(values)``, the same expression, made by one py4j call. ``isin`` turns
    each value into a literal with a call of its own: 0.2-0.6 s for the 400 caches of the bench's
    200 addresses, three times in a batch with Apama caches (docs/benchmarks.md)."""
    values = list(values)
    if not values:  # no SQL text for an empty list
        return F.col(column).isin([])
    return F.expr(f"{sql_identifier(column)} IN ({', '.join(map(sql_string, values))})")
