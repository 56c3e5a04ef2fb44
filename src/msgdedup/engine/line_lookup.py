"""A batch's delivered verdicts as arrays indexed by line number, one row per input file.

Writing ``delivered`` gives every delivered message (the wide rows: body, properties, ...) its
verdict's ``cache_seq`` and ``entered_at_us``. Joined to the messages, the verdicts were either
broadcast, a hashed relation of about 104 bytes a verdict in the driver's heap (96 MiB for a 1M
batch), or, too many for that, shuffled with the messages by row_id: a 5M batch's write moved
350 MiB of wide rows. But a row_id is a file and a line number (``parsing.LINE_BITS``), and each
file's lines are numbered 1, 2, ... So the verdicts fit in one array per file, indexed by line:
4 bytes a line for its acceptance's number in this batch (``seq_in_batch``: its ``cache_seq``
less its cache's counter before the batch, which a batch's lines bound), and 8 for
``entered_at_us`` where a time or Apama cache gives one. These few rows are broadcast, and every
message finds its verdict by its line number as it is read, without a shuffle, and its
``cache_seq`` by adding its cache's counter back (planning.looks_up_by_line says when;
docs/benchmarks.md).

Spark has no join that looks rows up by position, so the arrays are built on the driver: numpy
scatters a few million numbers in a fraction of a second (``by_line``). ``delivered`` is then a
broadcast join on the file and an array access, and gives ``transforms.delivered``'s rows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from msgdedup.engine.parsing import LINE_BITS, LINE_MASK
from msgdedup.engine.transforms import KEYS, MESSAGE_COLUMNS

# A delivered message without a cache_seq (it has no key): an acceptance of the batch is numbered
# from 1 in its cache.
NO_SEQ = 0
# One row per input file with a delivered message: its index (``row_id >> LINE_BITS``) and, at
# position ``line_number - 1``, the line's ``seq_in_batch`` (null: the line is not delivered;
# NO_SEQ: delivered without a cache_seq) and ``entered_at_us``, a null list when no verdict has
# an instant.
LOOKUP_SCHEMA = pa.schema([
    ("file_index", pa.int64()),
    ("seq_in_batch", pa.list_(pa.int32())),
    ("entered_at_us", pa.list_(pa.int64())),
])
LOOKUP_SPARK_SCHEMA = from_arrow_schema(LOOKUP_SCHEMA)
# A Spark array holds at most this many elements, and a list column's offsets are 32-bit.
_MAX_ELEMENTS = (1 << 31) - 16
_MAX_SEQ_IN_BATCH = np.iinfo(np.int32).max


def numbered_in_batch(verdicts: DataFrame, starts: DataFrame, instants: bool) -> DataFrame:
    """The delivered ``verdicts`` (``transforms.verdicts_for`` with the keys) as ``by_line`` reads
    them: ``row_id``, ``seq_in_batch`` (``cache_seq`` less its cache's ``last_seq`` in ``starts``,
    the counters before the batch: few rows; null without a cache_seq) and, with ``instants``,
    ``received_at_us``. A cache_seq is a long, but the acceptances of one batch fit 4 bytes."""
    counters = starts.select("cache", "last_seq")
    return verdicts.join(F.broadcast(counters), "cache", "left").select(
        "row_id", (F.col("cache_seq") - F.coalesce("last_seq", F.lit(0))).alias("seq_in_batch"),
        *(["received_at_us"] if instants else []))


def by_line(verdicts: pa.Table) -> pa.Table | None:
    """The delivered ``verdicts`` (``numbered_in_batch``) as LOOKUP_SCHEMA; None when they do not
    fit Spark's arrays or 4 bytes, or a seq_in_batch is not above NO_SEQ (then the caller joins
    them as before). Read a chunk at a time into one preallocated array per file and column, so no
    temporary of the whole verdicts is made; the arrays are copied once more into the list column."""
    chunks = verdicts.to_batches()
    sizes: dict[int, int] = {}  # file index -> its last delivered line
    for chunk in chunks:
        row_id = chunk["row_id"].to_numpy()
        files = row_id >> LINE_BITS
        for index in np.unique(files):
            last = int((row_id[files == index] & LINE_MASK).max())
            sizes[int(index)] = max(sizes.get(int(index), 0), last)
        bounds = pc.min_max(chunk["seq_in_batch"]).as_py()  # of the messages with a cache_seq
        if bounds["min"] is not None and (bounds["min"] <= NO_SEQ or bounds["max"] > _MAX_SEQ_IN_BATCH):
            return None
    if sum(sizes.values()) > _MAX_ELEMENTS:
        return None
    timed = "received_at_us" in verdicts.column_names and verdicts["received_at_us"].null_count < len(verdicts)
    seqs = {index: np.full(size, -1, np.int32) for index, size in sizes.items()}  # -1: not delivered
    instants = {index: np.zeros(size, np.int64) for index, size in sizes.items()} if timed else {}
    known = {index: np.zeros(size, bool) for index, size in sizes.items()} if timed else {}
    for chunk in chunks:
        row_id = chunk["row_id"].to_numpy()
        files, position = row_id >> LINE_BITS, (row_id & LINE_MASK) - 1
        seq = pc.fill_null(chunk["seq_in_batch"], NO_SEQ).to_numpy()
        if timed:
            instant = chunk["received_at_us"]
            instant, valid = pc.fill_null(instant, 0).to_numpy(), instant.is_valid().to_numpy(zero_copy_only=False)
        for index in np.unique(files):
            mine = files == index
            seqs[int(index)][position[mine]] = seq[mine]
            if timed:
                known[int(index)][position[mine]] = valid[mine]
                instants[int(index)][position[mine]] = instant[mine]
    indexes = sorted(sizes)
    return pa.table({
        "file_index": pa.array(indexes, pa.int64()),
        "seq_in_batch": per_file_lists([pa.array(seqs[i], mask=seqs[i] < NO_SEQ) for i in indexes], pa.int32()),
        "entered_at_us": per_file_lists([pa.array(instants[i], mask=~known[i]) for i in indexes], pa.int64()) if timed
        else pa.nulls(len(indexes), pa.list_(pa.int64())),
    }, schema=LOOKUP_SCHEMA)


def per_file_lists(arrays: list[pa.Array], kind: pa.DataType) -> pa.Array:
    """One list per file, from its array, without going through Python lists of numbers."""
    offsets = np.cumsum([0, *(len(a) for a in arrays)])
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.concat_arrays(arrays) if arrays
                                    else pa.array([], kind))


def delivered(messages: DataFrame, lookup: DataFrame, starts: DataFrame) -> DataFrame:
    """``transforms.delivered``'s rows: the valid ``messages`` (with their cache keys) whose line
    has a delivered verdict in ``lookup`` (``by_line``, few rows: broadcast), with its
    ``cache_seq`` (its cache's ``last_seq`` in ``starts``, the one ``numbered_in_batch`` took
    away, added back) and ``entered_at_us``. The messages are read once and keep their order."""
    line = F.col("line_number").try_cast("int")  # past an array's reach: null, as past its end
    at = lambda column: F.try_element_at(F.col(column), line)  # noqa: E731 - null past the array's end
    seq = at("seq_in_batch")
    counters = starts.select(F.col("cache").alias("_counter_cache"), F.col("last_seq").alias("_last_seq"))
    return (messages.drop("error", "raw_line")
            .join(F.broadcast(lookup.withColumnRenamed("file_index", "_file_index")),
                  F.shiftright("row_id", LINE_BITS) == F.col("_file_index"))
            .where(seq.isNotNull())
            .join(F.broadcast(counters), F.col("cache") == F.col("_counter_cache"), "left")
            .select(*MESSAGE_COLUMNS, *KEYS,
                    F.when(seq != NO_SEQ, F.coalesce("_last_seq", F.lit(0)) + seq).alias("cache_seq"),
                    at("entered_at_us").alias("entered_at_us")))
