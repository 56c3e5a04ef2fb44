"""Raw lines -> typed messages or readable errors, mostly without leaving the JVM.

The envelope's rules live in one place, ``msgdedup.envelope``, in Python. Running that for every
line means shipping every line to a Python worker and back, which was the most expensive step of
a batch. So the lines are split in two:

* the **fast path**, in the JVM: lines that are *certainly* valid, decoded to exactly the values
  ``envelope.parse_line`` would give. ``msgdedup.jvm``'s ``EnvelopeFields`` reads a line in one
  strict pass of Jackson's parser and takes it only when it is a flat JSON object with only the
  known fields, each of its type, string values without ``\\u`` escapes, integers of at most 18
  digits, no repeated key and nothing after it; Spark's functions then take an ISO timestamp of
  one plain shape or epoch milliseconds. Narrow, so that the two decoders cannot disagree on it;
* everything else (errors, unknown fields, nulls, floats, escapes, unusual timestamps) goes to
  ``envelope.parse_line`` in a Python worker, which decides and words the error.

A property test feeds both paths the same generated lines (tests/engine/test_parsing.py): for any
line the fast path takes, its values must equal the Python ones. Spark's own ``from_json`` cannot
be the fast path: it coerces types (a number read as a string), reads ``{"a":1} junk`` as valid and
keeps one of a repeated key's values; doing it with Spark's functions instead (a regular
expression for the line, ``try_parse_json``, a VARIANT cast per value) took four times as long.
"""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from msgdedup import jvm
from msgdedup.envelope import (
    BRIDGE_DUPLICATE_ID_PROPERTY, DUPLICATE_ID_PROPERTY, MAX_EPOCH_MS, MAX_RECEIVED_US, MIN_EPOCH_MS,
    MIN_RECEIVED_US, InvalidLine, parse_line, printable_raw_line,
)
from msgdedup.engine.reading import FILE_INDEX, LINE_NUMBER, RAW, READ_ERROR, SOURCE_FILE
from msgdedup.keys import BRIDGE_CACHE_PREFIX

LINE_BITS = 40
# A row_id's low LINE_BITS bits: its line number in its file (the high bits are the file's index).
LINE_MASK = (1 << LINE_BITS) - 1

PARSED_SCHEMA = pa.schema([
    ("row_id", pa.int64()),
    ("source_file", pa.string()),
    ("line_number", pa.int64()),
    ("raw_line", pa.string()),
    ("error", pa.string()),
    ("message_id", pa.string()),
    ("address", pa.string()),
    ("received_at", pa.timestamp("us", tz="UTC")),
    ("received_us", pa.int64()),
    ("properties", pa.map_(pa.string(), pa.string())),
    ("txn_id", pa.string()),
    ("source_id", pa.string()),
    ("seq", pa.int64()),
    ("body", pa.string()),
    ("extra_fields", pa.map_(pa.string(), pa.string())),
])
# The same schema for Spark (mapInArrow, empty batches): derived, so the two cannot drift apart.
PARSED_SPARK_SCHEMA = from_arrow_schema(PARSED_SCHEMA)
PARSED_COLUMNS = PARSED_SCHEMA.names

# -- the fast path -----------------------------------------------------------------------------------
# One timestamp shape both Spark and datetime.fromisoformat read as the same instant.
TIMESTAMP_PATTERN = (
    r"^[1-9][0-9]{3}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?"
    r"(Z|[+-](0[0-9]|1[0-7]):[0-5][0-9])\z"
)


def fast_parse(lines: DataFrame) -> DataFrame:
    """Lines -> PARSED_COLUMNS plus ``raw`` and ``slow``: ``slow`` rows are left for
    ``slow_parse`` (their other columns are null); every other row is a valid message, or the
    row of an unreadable file (``READ_ERROR``, reading.py), which is its error."""
    text = F.col(RAW).cast("string")
    f = F.col("_f")
    iso, epoch_ms = f["received_iso"], f["received_ms"]
    iso_instant = iso.try_cast("timestamp")
    received_at = F.when(
        iso.isNotNull(),
        F.when(iso.rlike(TIMESTAMP_PATTERN)
               & F.unix_micros(iso_instant).between(MIN_RECEIVED_US, MAX_RECEIVED_US), iso_instant),
    ).when(
        epoch_ms.isNotNull(),
        F.when(epoch_ms.between(MIN_EPOCH_MS, MAX_EPOCH_MS), F.timestamp_micros(epoch_ms * 1000)),
    )
    message_id, address = f["message_id"], f["address"]
    fast = (message_id != "") & (address != "") & F.col("_received_at").isNotNull()
    empty_map = F.create_map().cast("map<string,string>")
    # One projection per step, so the line is decoded once and the fields are read once.
    checked = (
        lines
        .withColumn("_f", F.when(F.is_valid_utf8(RAW), jvm.envelope_fields(lines.sparkSession, F.col(RAW))))
        .withColumn("_received_at", received_at)
        .withColumn("slow", ~F.coalesce(fast, F.lit(False)) & F.col(READ_ERROR).isNull())
    )
    when_fast = lambda column: F.when(~F.col("slow") & F.col(READ_ERROR).isNull(), column)  # noqa: E731
    return checked.select(
        ((F.col(FILE_INDEX).cast("long") * (1 << LINE_BITS)) + F.col(LINE_NUMBER)).alias("row_id"),
        F.col(SOURCE_FILE).alias("source_file"),
        F.col(LINE_NUMBER).alias("line_number"),
        F.when(F.col(READ_ERROR).isNotNull(), F.lit("")).otherwise(when_fast(text)).alias("raw_line"),
        F.col(READ_ERROR).alias("error"),
        when_fast(message_id).alias("message_id"),
        when_fast(address).alias("address"),
        when_fast(F.col("_received_at")).alias("received_at"),
        when_fast(F.unix_micros("_received_at")).alias("received_us"),
        when_fast(F.coalesce(f["properties"], empty_map)).alias("properties"),
        *[when_fast(f[name]).alias(name) for name in ("txn_id", "source_id", "seq", "body")],
        when_fast(empty_map).alias("extra_fields"),
        F.when(F.col("slow"), F.col(RAW)).alias(RAW),
        "slow",
    )


# -- the slow path: envelope.py in a Python worker -----------------------------------------------
def _parse_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        c = batch.to_pydict()
        out = {name: [] for name in PARSED_COLUMNS}
        columns = (c["row_id"], c["source_file"], c["line_number"], c[RAW])
        for row_id, source_file, number, raw in zip(*columns, strict=True):
            out["row_id"].append(row_id)
            out["source_file"].append(source_file)
            out["line_number"].append(number)
            out["raw_line"].append(printable_raw_line(raw))
            try:
                message = parse_line(raw)
            except InvalidLine as error:
                out["error"].append(str(error))
                for name in PARSED_COLUMNS[5:]:
                    out[name].append(None)
                continue
            out["error"].append(None)
            out["message_id"].append(message.message_id)
            out["address"].append(message.address)
            out["received_at"].append(message.received_at_us)
            out["received_us"].append(message.received_at_us)
            out["properties"].append(list(message.properties.items()))
            out["txn_id"].append(message.txn_id)
            out["source_id"].append(message.source_id)
            out["seq"].append(message.seq)
            out["body"].append(message.body)
            out["extra_fields"].append(list(message.extra_fields.items()))
        yield pa.RecordBatch.from_pydict(out, schema=PARSED_SCHEMA)


def slow_parse(slow_rows: DataFrame) -> DataFrame:
    """The ``slow`` rows of ``fast_parse``, decided by ``envelope.parse_line``."""
    return slow_rows.select("row_id", "source_file", "line_number", RAW).mapInArrow(
        _parse_batches, PARSED_SPARK_SCHEMA)


def parse_on_driver(lines: pa.Table) -> pa.Table:
    """``reading.read_on_driver``'s lines, every one decided by ``envelope.parse_line`` here:
    PARSED_SCHEMA, the values the two paths above give (a small batch, planning.reads_on_driver)."""
    if lines.num_rows == 0:
        return PARSED_SCHEMA.empty_table()
    row_ids = pc.add(pc.multiply(lines[FILE_INDEX].cast(pa.int64()), 1 << LINE_BITS), lines[LINE_NUMBER])
    numbered = pa.table({"row_id": row_ids, "source_file": lines[SOURCE_FILE], "line_number": lines[LINE_NUMBER],
                         RAW: lines[RAW]})
    return pa.Table.from_batches(_parse_batches(numbered.to_batches()), PARSED_SCHEMA)


def census_on_driver(parsed: pa.Table) -> tuple[int, set[str], set[tuple[str, bool]]]:
    """``census`` of ``parse_on_driver``'s table: (lines, addresses, keyed)."""
    keyed = set()
    rows = zip(parsed["error"].to_pylist(), parsed["address"].to_pylist(), parsed["properties"].to_pylist(),
               strict=True)
    for error, address, properties in rows:
        values = dict(properties or ())
        bridge, duplicate_id = values.get(BRIDGE_DUPLICATE_ID_PROPERTY), values.get(DUPLICATE_ID_PROPERTY)
        if error is None and (bridge is not None or duplicate_id is not None):
            keyed.add((address, bridge is not None))
    addresses = set(pc.unique(parsed["address"]).drop_null().to_pylist())
    return parsed.num_rows, addresses, keyed


def parsed_lines(fast: DataFrame, slow: DataFrame | None) -> DataFrame:
    """Every line once: the fast rows and the decided slow ones (None: there were none)."""
    decided = fast.filter(~F.col("slow")).select(*PARSED_COLUMNS)
    return decided if slow is None else decided.unionByName(slow.select(*PARSED_COLUMNS))


def census(parsed: DataFrame) -> DataFrame:
    """One row: the lines (``lines``), how many the fast path left to Python (``slow``, when
    ``parsed`` is ``fast_parse``'s), the distinct addresses of the decided ones (``addresses``;
    few) and which of them carry keys (``keyed``: (address, bridge) pairs, windows.resolve).
    Whatever the batch needs to know before it decides, in one pass: the pass that computes (and
    caches) the parse."""
    slow = F.count_if(F.col("slow")) if "slow" in parsed.columns else F.lit(0).cast("long")
    bridge, duplicate_id = _key_properties()
    keyed = F.when(F.col("error").isNull() & (bridge.isNotNull() | duplicate_id.isNotNull()),
                   F.struct(F.col("address"), bridge.isNotNull().alias("bridge")))
    return parsed.agg(F.count(F.lit(1)).alias("lines"), slow.alias("slow"),
                      F.collect_set("address").alias("addresses"), F.collect_set(keyed).alias("keyed"))


def _key_properties() -> tuple[Column, Column]:
    return (F.try_element_at("properties", F.lit(BRIDGE_DUPLICATE_ID_PROPERTY)),
            F.try_element_at("properties", F.lit(DUPLICATE_ID_PROPERTY)))


# -- keys -------------------------------------------------------------------------------------------
def with_cache_keys(messages: DataFrame, domains: DataFrame) -> DataFrame:
    """Add ``cache`` and ``dedup_key`` (msgdedup.keys.cache_key, as a column expression).

    ``domains`` has one row per address of the batch (``address``, ``domain``: the cache its
    keys are checked in, ``checks``: False when detection is off): the Artemis-style address
    matching stays in Python (config.py) and runs once per address.
    """
    joined = messages.join(F.broadcast(domains), "address", "left")
    return _with_keys(joined, F.col("domain"), F.col("checks")).drop("domain", "checks")


def with_own_cache_keys(messages: DataFrame) -> DataFrame:
    """``with_cache_keys`` where every address is its own domain and checks its keys
    (config.AddressSettings.own_caches): no address has to be known first, so the pass that
    parses the lines can compute their keys too, and the census with them (``census_of_keys``)."""
    return _with_keys(messages, F.col("address"), F.lit(True))


def _with_keys(messages: DataFrame, domain: Column, checked: Column) -> DataFrame:
    bridge, duplicate_id = _key_properties()
    return (
        messages
        .withColumn("cache", F.when(checked & bridge.isNotNull(), F.concat(F.lit(BRIDGE_CACHE_PREFIX), domain))
                    .when(checked & duplicate_id.isNotNull(), domain))
        .withColumn("dedup_key", F.when(checked, F.coalesce(bridge, duplicate_id)))
    )


# What ``census_of_keys`` reads of every line, besides the key columns it passes on.
CENSUS_COLUMNS = ["slow", "valid", "address_seen", "bridge"]


def census_columns(parsed: DataFrame) -> list[Column]:
    """``CENSUS_COLUMNS`` of ``with_own_cache_keys(parsed)``'s rows (``parsed``: fast_parse's, or
    slow_parse's, which leaves no line to Python): whether the line is left to Python, whether it
    is a valid message, its address and whether its key is a bridge's."""
    slow = F.col("slow") if "slow" in parsed.columns else F.lit(False)
    return [slow.alias("slow"), (~slow & F.col("error").isNull()).alias("valid"),
            F.col("address").alias("address_seen"), _key_properties()[0].isNotNull().alias("bridge")]


def census_of_keys(rows: pa.Table) -> tuple[int, int, set[str], set[tuple[str, bool]], pa.Table]:
    """``census`` from rows the driver collected of every line (``CENSUS_COLUMNS`` and
    ``key_hash``, null for a message without a key, of ``with_own_cache_keys`` over fast_parse's
    or slow_parse's rows): (lines, slow, addresses, keyed, the valid messages' rows without
    ``CENSUS_COLUMNS``)."""
    valid = rows["valid"]
    keys = pc.and_(valid, rows["key_hash"].is_valid())
    pairs = pa.table({"address": rows["address_seen"].filter(keys), "bridge": rows["bridge"].filter(keys)})
    keyed = {(r["address"], r["bridge"]) for r in pairs.group_by(["address", "bridge"]).aggregate([]).to_pylist()}
    addresses = set(pc.unique(rows["address_seen"].filter(valid)).to_pylist())
    slow = pc.sum(rows["slow"].cast(pa.int64())).as_py() or 0
    messages = rows if pc.all(valid).as_py() else rows.filter(valid)  # nearly always all of them
    return rows.num_rows, slow, addresses, keyed, messages.drop_columns(CENSUS_COLUMNS)
