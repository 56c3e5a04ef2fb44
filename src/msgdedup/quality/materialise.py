"""Computing the checked tables once, so that GX's many small queries only scan them.

GX resolves several metrics per expectation (counts, sample values, sample rows), each a Spark
query of the table it is given. Given the lazy table, every one of those queries would re-run
the table's scans, joins and aggregations; given a cached table, each is a scan of a small
in-memory table. This module computes and caches the tables (``MaterialisedTables``) in a
Spark session of its own (``gate_session``). The exception is a table that is a plain scan of
the outputs (``Scanned``): GX asks a passing table only its row count and one aggregation, and
the scan those need costs less than the one that would cache the table.

The gate is short, so its Spark work runs on a cold JVM, where building a plan or making a
pass over a batch costs several times what it costs warm, and a lone query leaves cores idle
at every stage boundary. So the tables are built and computed concurrently, one thread each,
and the gate validates each table as soon as it is cached.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from msgdedup import driver_memory
from msgdedup.engine.planning import derived_session, heap_share
from msgdedup.local_frames import local_frame
from msgdedup.repeats import repeated_values, values_frame

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
LIMIT_INITIAL_PARTITIONS = "spark.sql.limit.initialNumPartitions"
# Arrow -> pandas: nullable integers stay integers (pandas' default makes a column with a null float)
_NULLABLE_INTEGERS = {pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int32Dtype()}

# A frame of "exceptions" (repeated ids, keys accepted again, shared sequence numbers) with at
# most this many rows is brought to the driver and given to the checked table as a local table;
# a larger one (a badly broken batch) stays in Spark and is joined by a shuffle as before, so the
# driver's memory stays bounded.
SMALL_ROWS = 10_000

# Spark compresses a cached table batch by batch, and to choose a scheme for a column it first
# runs every scheme's statistics over every value of it (for a string column, a dictionary of up to
# 32,767 distinct values per batch of 10,000 rows). The checked tables' columns are mostly
# distinct strings (message_ids, keys), which no scheme shrinks much, so at 1M messages caching
# them compressed took about 2 s more of a warm 13 s gate (docs/benchmarks.md). Uncompressed they are some
# 270 bytes a batch line (1M lines: messages 147 MiB and key_window 109 MiB, against 29 and
# 77 MiB compressed), so they are cached uncompressed when that fits this share of the driver's
# heap, which holds the cache in local mode (with a 1g driver: up to about a million lines).
# On a cluster the executors hold it, whose heaps are usually the larger. 0 always compresses.
CACHE_COMPRESSED = "spark.sql.inMemoryColumnarStorage.compressed"
UNCOMPRESSED_LINE_BYTES = 280
UNCOMPRESSED_HEAP_SHARE = 0.3
UNCOMPRESSED_HEAP_SHARE_CONF = "spark.msgdedup.gateUncompressedHeapShare"


def gate_session(spark: SparkSession) -> SparkSession:
    """A session of the same application (same SparkContext, same cache) for the gate's queries.

    It starts from the caller's SQL settings and differs in two. Unless the application
    configured ``spark.sql.shuffle.partitions``, the gate's shuffles use twice the default
    parallelism instead of Spark's 200: adaptive execution merges small partitions when it
    reads a shuffle, but every map task still writes all of them first, and the gate's
    shuffles are small (a batch's ids and keys). And a ``limit`` query scans all partitions of
    a cached table at once (below). A session of its own keeps these settings out of the
    caller's queries (the dedup step may share the application).
    """
    session = derived_session(spark, {})
    configured = spark.conf.getAll
    parallelism = max(1, spark.sparkContext.defaultParallelism)
    if SHUFFLE_PARTITIONS not in configured:
        session.conf.set(SHUFFLE_PARTITIONS, str(2 * parallelism))
    # GX's sample queries (limit 20) find nothing in a passing table: scan all of a cached
    # table's partitions (MaterialisedTables keeps at most ``parallelism``) in one job, not two.
    session.conf.set(LIMIT_INITIAL_PARTITIONS, str(parallelism))
    return session


def cache_settings(spark: SparkSession, input_lines: int) -> dict[str, str]:
    """The gate session's cache settings for a batch of ``input_lines`` lines: uncompressed when
    its checked tables fit ``UNCOMPRESSED_HEAP_SHARE`` of the heap so (and the application did not
    set the compression itself). The tables' rows are the same either way."""
    if CACHE_COMPRESSED in spark.conf.getAll:
        return {}
    if input_lines * UNCOMPRESSED_LINE_BYTES > heap_share(spark, UNCOMPRESSED_HEAP_SHARE_CONF, UNCOMPRESSED_HEAP_SHARE):
        return {}
    return {CACHE_COMPRESSED: "false"}


@dataclass(frozen=True)
class Scanned:
    """A checked table that GX validates as it is, not cached first: one whose plan is a plain scan
    of the outputs, with no shuffle (every exception it joins back to its rows is empty, so Spark's
    optimiser drops those joins, or a local table: ``SmallFrames``, and ``key_window``'s keys
    accepted again, computed first).

    GX asks a passing table its row count (Parquet answers from its row-group counts) and one
    aggregation of every expectation's unexpected rows (the gate asks no samples of it,
    ``gate._counted``): one scan of the Parquet columns it checks. Caching it first is a scan of
    every column it keeps, then the cache's build, then GX's two queries of the cache: at 1M
    messages ``messages`` and ``key_window`` took 2.5 s each to cache, against 0.3-0.7 s for
    GX's queries of the scans (docs/benchmarks.md, "The checked tables that are plain scans").
    A table that fails is cached before GX asks it for samples (``MaterialisedTables.keep``)."""

    frame: DataFrame


class MaterialisedTables:
    """The checked tables, each built, computed and cached once, in background threads.

    ``tables`` maps a name to a function that builds the table's (lazy) DataFrame: building
    one means analysing its plan, which on a cold JVM takes a noticeable part of a second, so
    that happens in the table's thread too. A table built as ``Scanned`` is handed to GX as it
    is, not cached (``scanned`` names those); one built as a pandas frame was made on the driver
    by its builder (id_cache, from counts the gate holds already) and is validated on pandas.

    A table is cut to at most the application's default parallelism in partitions (no
    shuffle): GX's sample queries (``limit 20``) scan a table partition by partition in
    successive jobs until they have their rows, and a passing table has none to find.

    ``on_driver``: each table is collected to the driver as a pandas frame instead (one Spark
    job), for GX's pandas engine: a small batch's tables are a few thousand rows, which pandas
    checks in milliseconds, where GX's Spark queries cost a fraction of a second each.
    ``driver_rows``: a table computed in Spark that turns out to have at most this many rows is
    collected from its cache to a pandas frame all the same (-1: none is). A large batch's
    counts, caches and transactions are a few rows to some ten thousand (4, 400 and 13,876 at
    1M messages): the six to twelve GX queries of each, on a Spark frame, were each planned and
    scheduled on the driver beside the large tables' work, on the gate's critical path.
    """

    def __init__(self, spark: SparkSession, tables: dict[str, Callable[[], DataFrame | Scanned | pd.DataFrame]],
                 on_driver: bool = False, driver_rows: int = -1) -> None:
        self._spark = spark
        self._on_driver = on_driver
        self._driver_rows = driver_rows
        self._parallelism = max(1, spark.sparkContext.defaultParallelism)
        self._started = time.perf_counter()
        self._finished: dict[str, float] = {}
        self._cached: list[DataFrame] = []
        self.scanned: set[str] = set()
        self._pool = ThreadPoolExecutor(max_workers=len(tables), thread_name_prefix="gx-gate-derive")
        self._futures: dict[str, Future] = {name: self._pool.submit(self._compute, name, build)
                                            for name, build in tables.items()}

    def _compute(self, name: str, build: Callable[[], DataFrame | Scanned | pd.DataFrame]) -> DataFrame | pd.DataFrame:
        # Job groups are per thread: the Spark UI shows which table a job computes.
        self._spark.sparkContext.setJobGroup(f"gx-gate-derive-{name}", f"GX gate: compute the checked table {name}")
        built = build()
        if isinstance(built, pd.DataFrame):  # made on the driver by its builder
            self._finished[name] = time.perf_counter()
            return built
        scanned = isinstance(built, Scanned)
        frame = built.frame if scanned else built
        if self._on_driver:
            table = _to_pandas(frame)
        elif scanned:
            table = frame
            self.scanned.add(name)
        else:
            table = self.keep(frame)
            if table.count() <= self._driver_rows:
                table = _to_pandas(table)
        self._finished[name] = time.perf_counter()
        return table

    def keep(self, frame: DataFrame) -> DataFrame:
        """``frame`` cached until ``close`` (lazily: the next query computes it), in at most the
        default parallelism in partitions. A ``Scanned`` table that fails is kept so before GX
        asks it for samples, a query per expectation."""
        # as rows, not serialized: a serialized block spilled to disk is read back into one
        # heap buffer of its whole size (engine.batch._kept says more)
        table = frame.coalesce(self._parallelism).persist(StorageLevel.MEMORY_AND_DISK_DESER)
        self._cached.append(table)
        return table

    def as_cached(self) -> Iterator[tuple[str, DataFrame | pd.DataFrame]]:
        """``(name, table)`` as each table is cached (re-raises what computing one raised)."""
        pending = {future: name for name, future in self._futures.items()}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=lambda f: list(self._futures.values()).index(f)):
                yield pending.pop(future), future.result()

    def seconds(self) -> float:
        """From the start until the last table was cached."""
        return round(max(self._finished.values(), default=self._started) - self._started, 3)

    def cancel(self) -> None:
        """Cancel the tables not computed yet (the gate failed); ``close`` still has to be called."""
        _cancel(self._spark, self._futures)

    def close(self) -> None:
        """Release the cached tables; a table still being computed (the gate failed) is cancelled."""
        self.cancel()
        self._pool.shutdown(wait=True)
        for frame in self._cached:
            frame.unpersist()


# The column of repeated hashes a SmallFrames frame is given (``tables._possibly_repeated``'s ``hashes``).
HASH_COLUMN = "_hash"
HASHES = "exception_hashes"  # the job group of their pass over the outputs

# ``SmallFrames``' hashes on the driver: a row of three nullable 64-bit hashes is about 25 bytes in
# Arrow, held by the driver's JVM while it serves them and by its Python while numpy sorts a
# column, counted as 8 bytes a hash and 8 more a row; they are collected when the rows fit this
# share of the driver's heap (a 1M batch and its own 1M snapshot entries with four hashes, 76 MiB;
# with its parent's 1M entries too, its own are left out, and the 2M rows of three take 61 MiB: a
# 1g driver holds them; a 5M batch's go to the aggregations).
HASH_BYTES = 8
HASHES_HEAP_SHARE = 0.1
HASHES_HEAP_SHARE_CONF = "spark.msgdedup.gateHashesHeapShare"


def hashes_on_driver(spark: SparkSession, rows: float, kinds: int) -> bool:
    """Whether ``SmallFrames`` finds the repeated hashes of ``rows`` rows of ``kinds`` hashes each on
    the driver (the same frames either way, not the same cost); 0 for the share: never."""
    return rows * HASH_BYTES * (kinds + 1) <= heap_share(spark, HASHES_HEAP_SHARE_CONF, HASHES_HEAP_SHARE)


def _to_pandas(frame: DataFrame) -> pd.DataFrame:
    """``frame`` collected as GX's pandas engine validates a table (nullable integers stay integers)."""
    return frame.toArrow().to_pandas(types_mapper=_NULLABLE_INTEGERS.get)


def local_to_pandas(frame: DataFrame) -> pd.DataFrame:
    """``_to_pandas`` of a frame of a few rows that Spark answers on the driver (a local relation):
    collected as rows, which runs no Spark job, where ``toArrow`` runs one."""
    rows = [row.asDict() for row in frame.collect()]
    return pa.Table.from_pylist(rows, schema=to_arrow_schema(frame.schema)).to_pandas(
        types_mapper=_NULLABLE_INTEGERS.get)


class SmallFrames:
    """The few rows the checked tables join back to every row, computed first, each once.

    The checked tables find what is wrong by aggregation (a message_id in two rows, a key
    accepted again, a ``cache_seq`` used twice); normally nothing is, and joining those few
    rows back to the million rows of a batch by a shuffle moves every row for nothing. So each
    such frame is computed first (in a thread of its own) and, when it has at most ``SMALL_ROWS``
    rows, brought to the driver and handed to the table as a broadcast table; when it is empty
    (the normal case) as an empty relation, which Spark's optimiser drops from the plan
    altogether (a left join to nothing, a semi join to nothing), so the table is a single pass
    over the outputs. Larger, the frame is handed over as the lazy aggregation, joined by a
    shuffle as before. Either way the table's rows are the same.

    Each frame narrows the rows it aggregates to those whose 64-bit hash repeats. ``frames``
    maps its name to a function of those repeated hashes (``_hash``; None: the frame finds them
    by an aggregation of its own). ``hashes``: a frame with a column of each frame's hashes,
    named as the frame (null where a row has none of that kind), whose repeats are then found
    on the driver, in one pass over the outputs without a shuffle, and handed to each frame as a
    local table (None where more than ``limit`` repeat: a badly broken batch). The caller gives
    it where its rows fit the driver (``hashes_on_driver``). ``tallied``: a column of ``hashes``
    that is no hash but a small number naming where each row comes from, whose rows per value
    that pass counts as well (``tally``), for a check that counts rows.
    """

    def __init__(self, spark: SparkSession, frames: dict[str, Callable[[DataFrame | None], DataFrame]],
                 limit: int = SMALL_ROWS, hashes: Callable[[], DataFrame] | None = None,
                 tallied: str | None = None) -> None:
        self._spark = spark
        self._limit = limit
        self._tallied = tallied
        self._tally: dict[int, int] = {}
        self._frames = tuple(frames)
        self.rows: dict[str, int | None] = {}
        self._pool = ThreadPoolExecutor(max_workers=len(frames) + 1, thread_name_prefix="gx-gate-small")
        self._futures: dict[str, Future] = {}
        if hashes is not None:
            self._futures[HASHES] = self._pool.submit(self._repeated_on_driver, hashes)
        self._repeats = self._futures.get(HASHES)
        self._futures.update({name: self._pool.submit(self._compute, name, build) for name, build in frames.items()})

    def _repeated_on_driver(self, hashes: Callable[[], DataFrame]) -> _CollectedHashes:
        self._spark.sparkContext.setJobGroup(f"gx-gate-derive-{HASHES}", "GX gate: compute the exceptions' hashes")
        table = hashes().toArrow()
        if self._tallied in table.column_names:
            counted = table[self._tallied].value_counts().to_pylist()
            self._tally = {c["values"]: c["counts"] for c in counted if c["values"] is not None}
            table = table.drop_columns([self._tallied])
        return _CollectedHashes(table, self._frames)

    def _compute(self, name: str, build: Callable[[DataFrame | None], DataFrame]) -> DataFrame:
        self._spark.sparkContext.setJobGroup(f"gx-gate-derive-{name}", f"GX gate: compute {name}")
        frame = build(self._repeated(name))
        local, self.rows[name] = local_when_small(frame, self._limit)
        return frame if local is None else F.broadcast(local)

    def _repeated(self, name: str) -> DataFrame | None:
        """``name``'s repeated hashes as a local table, found on the driver in this frame's own
        thread, as soon as the hashes are collected (numpy's sort releases the GIL: the frames'
        sorts run at once, and a frame waits for its own column only, not for all four); None
        where the hashes were not collected, their table has no column for ``name``, or more than
        ``limit`` repeat."""
        if self._repeats is None:
            return None
        values = self._repeats.result().repeated(name)
        if values is None or len(values) > self._limit:
            return None
        return values_frame(self._spark, values, HASH_COLUMN)

    def tally(self) -> dict[int, int] | None:
        """Rows per value of the ``tallied`` column, once the hashes' pass is done (a value no row
        has is not listed); None without that pass. Re-raises what the pass raised."""
        if self._repeats is None:
            return None
        self._repeats.result()
        return dict(self._tally)

    def get(self, name: str) -> DataFrame:
        """The frame, once computed (local when small); re-raises what computing it raised."""
        return self._futures[name].result()

    def cancel(self) -> None:
        """Cancel the frames not computed yet (the gate failed); ``close`` still has to be called."""
        _cancel(self._spark, self._futures)

    def close(self) -> None:
        """Wait for the threads, cancelling any frame still being computed (nothing is cached)."""
        self.cancel()
        self._pool.shutdown(wait=True)


class _CollectedHashes:
    """The exceptions' hashes collected to the driver, held until each column a frame asks for
    (``names``) has been searched for its repeats, then freed (their tens of MiB at 1M messages
    given back to the system)."""

    def __init__(self, table: pa.Table, names: Iterable[str]) -> None:
        self._table: pa.Table | None = table
        self._left = set(table.column_names) & set(names)
        self._lock = threading.Lock()

    def repeated(self, name: str) -> np.ndarray | None:
        """The values ``name``'s column holds more than once (``repeats.repeated_values``); None
        where no frame asks for such a column or it was searched already (each column is searched
        once)."""
        with self._lock:
            table = self._table if name in self._left else None
        if table is None:
            return None
        values = repeated_values(table[name])
        del table
        with self._lock:
            self._left.discard(name)
            last = not self._left
            if last:
                self._table = None
        if last:
            driver_memory.release()
        return values


def local_when_small(frame: DataFrame, limit: int = SMALL_ROWS) -> tuple[DataFrame | None, int | None]:
    """``frame`` computed once and handed back as a local table with its row count, when it has at
    most ``limit`` rows; else ``(None, None)``, and the caller keeps the lazy frame (the driver's
    memory stays bounded). An empty one comes back as ``frame.limit(0)``, which Spark's optimiser
    turns into an empty local relation: the frame is not computed again, and a join to it is
    dropped from the plan."""
    rows = rows_when_small(frame, limit)
    if rows is None:
        return None, None
    if not rows:
        return frame.limit(0), 0
    return local_frame(frame.sparkSession, rows, frame.schema), len(rows)


def rows_when_small(frame: DataFrame, limit: int = SMALL_ROWS) -> list[Row] | None:
    """``frame``'s rows, computed once, when it has at most ``limit``; else None (the driver's
    memory stays bounded)."""
    rows = frame.limit(limit + 1).collect()
    return None if len(rows) > limit else rows


def _cancel(spark: SparkSession, futures: dict[str, Future]) -> None:
    """Cancel futures not started yet and the Spark jobs of those running (by their job group)."""
    for name, future in futures.items():
        if not future.cancel() and not future.done():
            spark.sparkContext.cancelJobGroup(f"gx-gate-derive-{name}")
