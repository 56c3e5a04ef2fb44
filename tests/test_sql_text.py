"""sql_text: Python values written into Spark SQL text mean what they meant as Python values."""

from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from msgdedup.sql_text import is_in

# Names an address (so a cache) can have: SQL's quotes and escapes, a backquote, line ends, a NUL,
# what Spark's unescaping treats apart (\% and \_ keep their backslash, \u0041 is a code point).
AWKWARD = ["orders.a000", "it's", 'say "hi"', "a\\b", "a\\", "\\'", "x`y", "new\nline", "cr\rlf", "nul\x00",
           "é", "🙂", "100%", "a_b", "\\%", "\\_", "\\u0041", "", " "]


def _matches(spark, values, column):
    frame = spark.createDataFrame([(c,) for c in [*AWKWARD, "other", None]],
                                  StructType([StructField(column, StringType())]))
    return (frame.select(is_in(column, values).alias("ours"), F.col(column).isin(values).alias("isin"))
            .collect())


def test_is_in_answers_as_isin_for_awkward_names_and_null(spark):
    rows = _matches(spark, AWKWARD[::2], "cache")
    assert [r["ours"] for r in rows] == [r["isin"] for r in rows]
    assert [r["ours"] for r in rows] == [v in AWKWARD[::2] for v in AWKWARD] + [False, None]


def test_is_in_quotes_the_column_and_takes_an_empty_list(spark):
    rows = _matches(spark, ["x`y", "a\\b"], "odd name")
    assert [r["ours"] for r in rows] == [r["isin"] for r in rows]
    empty = _matches(spark, [], "cache")
    assert [r["ours"] for r in empty] == [r["isin"] for r in empty]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.text(max_size=6), min_size=1, max_size=5), st.text(max_size=6))
def test_is_in_finds_exactly_the_values_given(spark, values, other):
    frame = spark.createDataFrame([(v,) for v in [*values, other]], "cache string")
    found = [r[0] for r in frame.select(is_in("cache", values)).collect()]
    assert found == [True] * len(values) + [other in values]
