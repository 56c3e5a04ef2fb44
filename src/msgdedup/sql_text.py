"""Python values written into Spark SQL text (``spark.sql``, ``F.expr``), quoted once here."""

from __future__ import annotations


def sql_string(text: str) -> str:
    """``text`` as a Spark SQL string literal (backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
