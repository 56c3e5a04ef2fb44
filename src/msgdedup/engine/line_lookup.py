"""A batch's delivered verdicts as arrays indexed by line number, in blocks of lines.

Writing ``delivered`` gives every delivered message (the wide rows: body, properties, ...) its
verdict's ``cache_seq`` and ``entered_at_us``. Joined to the messages, the verdicts were either
broadcast, a hashed relation of about 104 bytes a verdict in the driver's heap (96 MiB for a 1M
batch), or, too many for that, shuffled with the messages by row_id: a 5M batch's write moved
350 MiB of wide rows. But a row_id is a file and a line number (``parsing.LINE_BITS``), and each
file's lines are numbered 1, 2, ... So the verdicts fit in arrays indexed by line:
4 bytes a line for its acceptance's number in this batch (``seq_in_batch``: its ``cache_seq``
less its cache's counter before the batch, which a batch's lines bound), and 8 for
``entered_at_us`` where a time or Apama cache gives one. These few rows are broadcast, and every
message finds its verdict by its line number as it is read, without a shuffle, and its
``cache_seq`` by adding its cache's counter back (planning.looks_up_by_line says when;
docs/benchmarks.md).

Spark has no join that looks rows up by position, so the arrays are built on the driver: numpy
scatters a few million numbers in a fraction of a second (``by_line``). ``delivered`` is then a
broadcast join on the block and an array access, and gives ``transforms.delivered``'s rows.

The arrays are cut in blocks of BLOCK_LINES lines, a row each, not one row per file: the driver's
JVM copies every row a few times (the local relation's rows, the broadcast's hashed relation, its
serialized blocks), and a row of half a G1 heap region or more (512 KiB with a 1g driver) is a
"humongous" object, allocated outside the young generation, whose copies made the heap grow by
about 400 MiB within a second and stay there (a 1M batch's units' ranks, 3 MiB a file; the
collector's log, docs/benchmarks.md). The same blocks carry the units' ranks (unit_ranks.py).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from msgdedup.engine.parsing import LINE_BITS
from msgdedup.engine.transforms import KEYS, MESSAGE_COLUMNS

# A block holds the lines of one file whose row_ids agree but in their low BLOCK_BITS bits (its key:
# ``row_id >> BLOCK_BITS``, unique across files since BLOCK_BITS < LINE_BITS), each at its row_id's
# low bits (the first block of a file has no line 0). 8,192 lines: at most 26 bytes a line
# (unit_ranks.RANKS_SCHEMA) is a row of 213 KiB, under G1's humongous bound with any heap.
BLOCK_BITS = 13
BLOCK_LINES = 1 << BLOCK_BITS
BLOCK_MASK = BLOCK_LINES - 1
assert BLOCK_BITS < LINE_BITS
# A delivered message without a cache_seq (it has no key): an acceptance of the batch is numbered
# from 1 in its cache.
NO_SEQ = 0
# One row per block with a delivered message: its key (``block_of``) and, at each line's place
# (``in_block``), the line's ``seq_in_batch`` (null: the line is not delivered; NO_SEQ: delivered
# without a cache_seq) and ``entered_at_us``, a null list when no verdict has an instant.
LOOKUP_SCHEMA = pa.schema([
    ("block", pa.int64()),
    ("seq_in_batch", pa.list_(pa.int32())),
    ("entered_at_us", pa.list_(pa.int64())),
])
LOOKUP_SPARK_SCHEMA = from_arrow_schema(LOOKUP_SCHEMA)
# A list column's offsets are 32-bit.
_MAX_ELEMENTS = (1 << 31) - 16
_MAX_SEQ_IN_BATCH = np.iinfo(np.int32).max


def block_of(row_id: Column) -> Column:
    """The key of the block that holds the line of ``row_id``."""
    return F.shiftright(row_id, BLOCK_BITS)


def in_block(row_id: Column) -> Column:
    """Where the line of ``row_id`` is in its block's arrays, as ``element_at`` counts (from 1)."""
    return (row_id.bitwiseAND(BLOCK_MASK) + 1).cast("int")


def blocks(row_ids: np.ndarray) -> np.ndarray:
    """The keys of the blocks that hold ``row_ids``' lines, sorted."""
    return np.unique(row_ids >> BLOCK_BITS)


def places(row_ids: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Where ``row_ids``' lines are in the blocks ``keys`` (``blocks``) laid end to end."""
    return np.searchsorted(keys, row_ids >> BLOCK_BITS) * BLOCK_LINES + (row_ids & BLOCK_MASK)


def block_lists(values: np.ndarray, known: np.ndarray, blocks: int) -> pa.ListArray:
    """One list per block (``blocks`` of them) of ``values`` (laid end to end as ``places`` counts),
    null where not ``known``: a row per block, without going through Python lists of numbers."""
    offsets = np.arange(0, (blocks + 1) * BLOCK_LINES, BLOCK_LINES, dtype=np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, mask=~known))


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
    fit a list column or 4 bytes, or a seq_in_batch is not above NO_SEQ (then the caller joins
    them as before). Read a chunk at a time into one preallocated array per column, so no
    temporary of the whole verdicts is made; the arrays are the list columns' values."""
    chunks = verdicts.to_batches()
    keys = np.empty(0, np.int64)
    for chunk in chunks:
        keys = np.union1d(keys, blocks(chunk["row_id"].to_numpy()))
        bounds = pc.min_max(chunk["seq_in_batch"]).as_py()  # of the messages with a cache_seq
        if bounds["min"] is not None and (bounds["min"] <= NO_SEQ or bounds["max"] > _MAX_SEQ_IN_BATCH):
            return None
    size = len(keys) * BLOCK_LINES
    if size > _MAX_ELEMENTS:
        return None
    timed = "received_at_us" in verdicts.column_names and verdicts["received_at_us"].null_count < len(verdicts)
    seqs = np.full(size, -1, np.int32)  # -1: not delivered
    instants, known = (np.zeros(size, np.int64), np.zeros(size, bool)) if timed else (None, None)
    for chunk in chunks:
        at = places(chunk["row_id"].to_numpy(), keys)
        seqs[at] = pc.fill_null(chunk["seq_in_batch"], NO_SEQ).to_numpy()
        if timed:
            instant = chunk["received_at_us"]
            known[at] = instant.is_valid().to_numpy(zero_copy_only=False)
            instants[at] = pc.fill_null(instant, 0).to_numpy()
    return pa.table({
        "block": pa.array(keys, pa.int64()),
        "seq_in_batch": block_lists(seqs, seqs >= NO_SEQ, len(keys)),
        "entered_at_us": block_lists(instants, known, len(keys)) if timed
        else pa.nulls(len(keys), pa.list_(pa.int64())),
    }, schema=LOOKUP_SCHEMA)


def delivered(messages: DataFrame, lookup: DataFrame, starts: DataFrame) -> DataFrame:
    """``transforms.delivered``'s rows: the valid ``messages`` (with their cache keys) whose line
    has a delivered verdict in ``lookup`` (``by_line``, few rows: broadcast), with its
    ``cache_seq`` (its cache's ``last_seq`` in ``starts``, the one ``numbered_in_batch`` took
    away, added back) and ``entered_at_us``. The messages are read once and keep their order."""
    at = lambda column: F.element_at(F.col(column), in_block(F.col("row_id")))  # noqa: E731
    seq = at("seq_in_batch")
    counters = starts.select(F.col("cache").alias("_counter_cache"), F.col("last_seq").alias("_last_seq"))
    return (messages.drop("error", "raw_line")
            .join(F.broadcast(lookup.withColumnRenamed("block", "_block")),
                  block_of(F.col("row_id")) == F.col("_block"))
            .where(seq.isNotNull())
            .join(F.broadcast(counters), F.col("cache") == F.col("_counter_cache"), "left")
            .select(*MESSAGE_COLUMNS, *KEYS,
                    F.when(seq != NO_SEQ, F.coalesce("_last_seq", F.lit(0)) + seq).alias("cache_seq"),
                    at("entered_at_us").alias("entered_at_us")))
