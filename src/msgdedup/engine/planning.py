"""How the queries of one batch are planned: small inputs without adaptive execution.

Adaptive execution runs every shuffle stage as a Spark job of its own and re-plans between them:
a 20,000-message batch ran 47 jobs with it and 28 without (docs/benchmarks.md), and Spark's 200
shuffle partitions of a few rows each are 200 tasks to schedule. What adaptive execution is for
(skewed keys, joins it can turn into broadcasts, merging tiny partitions) does not arise at this
size; above it, the session's own settings apply. The plan changes no result: every query of the
engine and the gate is a deterministic function of its input whatever its plan (the
engine-vs-model property tests run under both).

Also here: the few settings that make a batch cheaper and decide nothing (the static settings
an application starts with, which plan decides a batch on the driver, what is broadcast).
"""

from __future__ import annotations

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

# Inputs up to this size (some 150,000 JSON messages, an hourly partition of most topics) are
# planned as small data; a Spark setting of the session (or ``--conf`` of spark-submit) moves the bound.
SMALL_INPUT_BYTES = 64 << 20
SMALL_INPUT_BYTES_CONF = "spark.msgdedup.smallInputBytes"


def small_plan(spark: SparkSession, input_bytes: int) -> dict[str, str]:
    """The SQL settings a batch of ``input_bytes`` of input is planned with: none above the bound;
    at most, no adaptive execution and one shuffle partition per core."""
    if input_bytes > int(spark.conf.get(SMALL_INPUT_BYTES_CONF, str(SMALL_INPUT_BYTES))):
        return {}
    return {"spark.sql.adaptive.enabled": "false",
            "spark.sql.shuffle.partitions": str(max(1, spark.sparkContext.defaultParallelism))}


def derived_session(spark: SparkSession, settings: dict[str, str]) -> SparkSession:
    """A session of the same application (same SparkContext, same cache) with the caller's SQL
    settings and ``settings`` on top: its own, so neither the caller's later queries nor a batch
    running at the same time in another thread see them."""
    session = spark.newSession()
    for key, value in spark.conf.getAll.items():
        if (key.startswith("spark.sql.") and spark.conf.isModifiable(key)) or key.startswith("spark.msgdedup."):
            session.conf.set(key, value)
    for key, value in settings.items():
        session.conf.set(key, value)
    return session


def session_for(spark: SparkSession, input_bytes: int) -> SparkSession:
    """The session a batch of ``input_bytes`` of input runs in: ``spark`` itself, or for a small
    input a ``derived_session`` with ``small_plan``."""
    settings = small_plan(spark, input_bytes)
    return derived_session(spark, settings) if settings else spark


# Spark keeps the classes it compiles for query stages (whole-stage code generation) in one cache
# per JVM, keyed by their source, of 100 entries unless told otherwise. A batch and its gate
# compile a few hundred, so in a warm application (the batch service) every batch compiled most
# of its stages again, and the JVM then JIT-compiled those new classes again: the JIT compiler
# threads were the busiest of a warm 20K batch, ahead of Spark's tasks. With 1000 entries such a
# batch takes about 30% less CPU and wall time (docs/benchmarks.md). A static setting: it has to
# be there when the application starts; ``--conf`` of spark-submit still wins.
#
# Fair scheduling between pools: the gate validates each checked table (GX: a dozen queries of one
# or two tasks) while it still computes the others (jobs of many tasks), and in Spark's default
# FIFO order each of GX's queries waited for every task of the jobs submitted before it, so the
# validations piled up behind the computations and ran one after another at the end (about 2 s
# of a 1M batch's 16-19 s gate, docs/benchmarks.md). The gate's validations run in a pool of their own
# (``quality.gate.VALIDATION_POOL``), which now gets a task slot as soon as one is free. Every job
# without a pool (the dedup's, the gate's computations) shares the default pool, in FIFO order
# as before.
#
# Shuffle partitions of at most 16 MiB: adaptive execution merges a shuffle's partitions into ones
# of at most the advisory size (64 MiB by default), but no fewer than one per core. On two cores, a
# 5M batch's 54 MiB of message-id hashes and 58 MiB of keys went to two partitions each, whose
# aggregations spilled (86 and 40 MiB) and took 4.0 and 8.7 s; in four partitions of 16 MiB, 1.3 and
# 3.3 s without spilling (docs/benchmarks.md). A 1M batch's shuffles (10-40 MiB) keep about one
# partition per core. Small batches are planned without adaptive execution (``small_plan``).
#
# A Python worker is not kept for another task: a batch runs Python in two places only, the
# kernel (one task, when its stream is too long for the driver) and the lines the JVM's parse
# leaves to envelope.py (a task per input split that has some). Spark keeps an idle worker for a
# minute, and the kernel's, with every key of its stream still in its heap (about 200 MiB at 5M
# messages), then sat beside the JVM through the writes, where a batch peaks: a 5M batch peaked
# at 1,609 MiB against 1,730 (docs/benchmarks.md). A task that needs Python forks a fresh worker
# from Spark's daemon instead, a fraction of a second per task.
APPLICATION_DEFAULTS = {"spark.sql.codegen.cache.maxEntries": "1000", "spark.scheduler.mode": "FAIR",
                        "spark.sql.adaptive.advisoryPartitionSizeInBytes": "16m",
                        "spark.python.worker.reuse": "false"}


def application_settings() -> dict[str, str]:
    """The static settings an application that runs batches starts with: APPLICATION_DEFAULTS,
    each unless the application was given it (spark-submit's ``--conf``, spark-defaults.conf)."""
    SparkContext._ensure_initialized()  # the JVM: only then does SparkConf() read what it was given
    given = SparkConf()
    return {key: given.get(key, value) for key, value in APPLICATION_DEFAULTS.items()}


# Batches of up to this many lines are decided on the driver (engine/driver_decide.py): their key
# columns, some 100 bytes a message in Python, are collected there. Above it, Spark decides, and
# the driver holds nothing proportional to the batch. -1 turns the driver's plan off.
DRIVER_DECIDE_LINES = 200_000
DRIVER_DECIDE_LINES_CONF = "spark.msgdedup.driverDecideLines"


def driver_decide_lines(spark: SparkSession) -> int:
    """``DRIVER_DECIDE_LINES`` as the application configured it: the most rows the driver takes on."""
    return int(spark.conf.get(DRIVER_DECIDE_LINES_CONF, str(DRIVER_DECIDE_LINES)))


def decides_on_driver(spark: SparkSession, input_lines: int) -> bool:
    """Whether a batch of ``input_lines`` lines is decided on the driver: the outcome is the same
    either way (the engine-vs-model property tests run both), the cost is not. Twenty-odd Spark
    jobs of a fraction of a second each are most of a small batch's time; one core orders and
    decides 20,000 messages in about a tenth of a second."""
    return input_lines <= driver_decide_lines(spark)


# A batch of up to this many bytes of uncompressed JSON lines is read and parsed on the driver
# (reading.read_on_driver, parsing.parse_on_driver: envelope.py, some 15 µs a line), about 90,000
# messages: what Spark's reading costs a small batch is two jobs and their planning, seconds on a
# JVM that has not planned them yet, against a fraction of a second here. -1 keeps it in Spark.
DRIVER_READ_BYTES = 16 << 20
DRIVER_READ_BYTES_CONF = "spark.msgdedup.driverReadBytes"


def reads_on_driver(spark: SparkSession, input_bytes: int) -> bool:
    """Whether a batch of ``input_bytes`` (plain JSON lines) is read and parsed on the driver: the
    same lines, values and census either way (tests/engine/test_driver_reading.py), not the same cost."""
    return input_bytes <= int(spark.conf.get(DRIVER_READ_BYTES_CONF, str(DRIVER_READ_BYTES)))


# Whether the driver counts the lines of a batch's splits where it can (engine/split_lines.py) rather
# than a Spark job: the same counts either way (tests/engine/test_split_lines.py), a job and its
# planning less (a 1M batch's parse step 0.3-1.6 s shorter, docs/benchmarks.md). "false": always the job.
LINES_COUNTED_ON_DRIVER_CONF = "spark.msgdedup.linesCountedOnDriver"


def counts_lines_on_driver(spark: SparkSession) -> bool:
    """Whether reading.py may take its splits' line counts from split_lines.py."""
    return spark.conf.get(LINES_COUNTED_ON_DRIVER_CONF, "true").lower() != "false"


# A batch decided in Spark still sends only its contested units (and the parent entries they meet)
# through the sequential kernel, a small share of a large batch (about 61,000 rows of a million
# messages with 3% duplicates). A stream of up to this many rows is collected and decided on the
# driver, which already runs Python: no Python worker to start for one task, and none to hold in
# memory (150 MiB of a 1M batch's peak). Above it, the kernel runs as one Spark task, and the
# driver holds nothing proportional to the batch. -1 keeps the kernel in Spark.
DRIVER_KERNEL_ROWS = 250_000
DRIVER_KERNEL_ROWS_CONF = "spark.msgdedup.driverKernelRows"


def kernel_on_driver(spark: SparkSession, stream_rows: int) -> bool:
    """Whether a decision stream of ``stream_rows`` rows is decided on the driver: the same kernel
    on the same sorted stream either way (the engine-vs-model property tests run both)."""
    return stream_rows <= int(spark.conf.get(DRIVER_KERNEL_ROWS_CONF, str(DRIVER_KERNEL_ROWS)))


# A batch decided on the driver needs the parent's entries its keys meet (and every entry of an
# Apama cache). A parent snapshot of up to this many entries (its manifest counts them; some 100
# bytes each in Arrow) is read by the driver itself, 200,000 entries in 0.1-0.3 s, where collecting
# them from Spark costs two jobs and a Parquet scan's planning: a warm 20K batch with such a parent
# took about 0.4 s less (docs/benchmarks.md). Above it, Spark reads the snapshot and the driver
# collects what the keys meet. -1 keeps it in Spark.
DRIVER_SNAPSHOT_ROWS = 1_000_000
DRIVER_SNAPSHOT_ROWS_CONF = "spark.msgdedup.driverSnapshotRows"


def snapshot_on_driver(spark: SparkSession, entries: int) -> bool:
    """Whether a parent snapshot of ``entries`` entries is read on the driver for a batch decided
    there: the same entries meet the kernel either way (the engine-vs-model property tests run both)."""
    return entries <= int(spark.conf.get(DRIVER_SNAPSHOT_ROWS_CONF, str(DRIVER_SNAPSHOT_ROWS)))


# A join's smaller side (the verdicts an output keeps, the batch's keys) is broadcast, so the wide
# side is not shuffled, when its rows fit a share of the driver's heap: Spark builds the relation
# there, outside its memory manager, while (local mode) the same heap runs the tasks and keeps
# frames. Spark's own choice goes by a size estimate from file sizes, which is off by the columns
# the join does not read. Measured ("data size" of the BroadcastExchange): a 1M batch's delivered
# verdicts took 173 bytes a row, 160 MiB in all, and with a 1g driver that broadcast failed for
# want of memory in about one run in six. 0 turns these broadcasts off.
BROADCAST_ROW_BYTES = 192
BROADCAST_HEAP_SHARE = 0.1
BROADCAST_HEAP_SHARE_CONF = "spark.msgdedup.broadcastHeapShare"


# What an output joins of its verdicts (transforms.OUTPUT_VERDICT_COLUMNS: row_id and two narrow
# columns) is a smaller row: 969,687 delivered verdicts took 96 MiB, 104 bytes a row.
OUTPUT_VERDICT_BYTES = 104


# A batch decided in Spark gives its messages their delivered verdicts by line number
# (engine/line_lookup.py) when its arrays by line fit this share of the driver's heap, rather
# than joining the verdicts: a broadcast of about 104 bytes a verdict up to a million messages
# (OUTPUT_VERDICT_BYTES), above that a shuffle of both sides, the wide messages too. The driver's
# JVM holds the arrays about three times while the output is written (the frame it was given, the
# broadcast relation, its serialized blocks): 4 bytes a line (an int) three times, LINE_LOOKUP_BYTES,
# and 8 more (a long) where a cache keeps instants, INSTANT_LOOKUP_BYTES. With a 1g driver that is
# up to about 9M lines, 3M with instants. With longs for the numbers (24 bytes a line) a 5M batch's
# peak memory went up by more than the arrays (from 1,529-1,585 MiB to 1,700-1,800), so a 5M batch
# kept the shuffle then (docs/benchmarks.md). 0 turns the lookup off.
LINE_LOOKUP_BYTES = 12
INSTANT_LOOKUP_BYTES = 24
LINE_LOOKUP_HEAP_SHARE = 0.1
LINE_LOOKUP_HEAP_SHARE_CONF = "spark.msgdedup.lineLookupHeapShare"


def looks_up_by_line(spark: SparkSession, input_lines: int, instants: bool) -> bool:
    """Whether a batch of ``input_lines`` lines decided in Spark gets its delivered verdicts by
    line number (``instants``: a cache keeps them, a second array): the same rows either way (the
    engine-vs-model property tests run both), not the same cost."""
    line_bytes = LINE_LOOKUP_BYTES + (INSTANT_LOOKUP_BYTES if instants else 0)
    return input_lines * line_bytes <= heap_share(spark, LINE_LOOKUP_HEAP_SHARE_CONF, LINE_LOOKUP_HEAP_SHARE)


# A batch decided in Spark looks for repeated message ids among those whose 64-bit hash repeats
# (transforms.repeated_id_hashes). The hashes are collected to the driver and sorted there
# (msgdedup.repeats) when they fit this share of its heap: 8 bytes a message in the Arrow batches
# its JVM serves, counted twice for the copies on their way (with a 1g driver up to about 6M
# messages); else an aggregation groups them, a shuffle and two jobs (docs/benchmarks.md). 0: always
# the aggregation.
ID_HASH_BYTES = 16
ID_HASHES_HEAP_SHARE = 0.1
ID_HASHES_HEAP_SHARE_CONF = "spark.msgdedup.idHashesHeapShare"


def id_hashes_on_driver(spark: SparkSession, input_lines: int) -> bool:
    """Whether a batch of ``input_lines`` lines decided in Spark finds its repeated ids' hashes on
    the driver: the same ids either way (the engine-vs-model property tests run both), not the
    same cost."""
    return input_lines * ID_HASH_BYTES <= heap_share(spark, ID_HASHES_HEAP_SHARE_CONF, ID_HASHES_HEAP_SHARE)


# A batch decided in Spark places and ranks its messages in their caches on the driver
# (engine/unit_ranks.py) when they fit this share of its heap: per message four longs and two ints
# (row_id, two hashes, instant, cache and address hashes) and its transaction's id (an offset, and
# its characters where it has one) in the Arrow batches its JVM serves, then its unit's place (two
# longs): about 56 bytes where a few percent of the messages are in transactions; a long more
# where the batch has Apama caches (its sender's hash); counted twice for the copies on their way.
# What the driver keeps of them for its verdicts (unit_ranks.Ranks, driver_verdicts.py: about 42
# bytes a message, the collected rows freed) fits in the second count.
# A fifth of the heap, where the other collections take a tenth, so that a 1M batch qualifies with
# a 1g driver (up to about 1.7M messages). Else a window over the transactions places the units,
# an aggregation finds the repeated keys and a window over every keyed message ranks them: three
# shuffles more (docs/benchmarks.md), and one more finds the quiet senders. 0: always the
# aggregations and the windows.
RANK_ROW_BYTES = 112
SENDER_ROW_BYTES = 16
RANKS_HEAP_SHARE = 0.2
RANKS_HEAP_SHARE_CONF = "spark.msgdedup.ranksHeapShare"
# The batch's distinct key hashes, broadcast to find the parent's entries they meet: a long and
# its slot in Spark's hashed relation.
KEY_HASH_BYTES = 16


def ranks_on_driver(spark: SparkSession, input_lines: int, senders: bool) -> bool:
    """Whether a batch of ``input_lines`` lines decided in Spark (``senders``: with Apama caches)
    ranks its units on the driver: the same verdicts either way (the engine-vs-model property
    tests run both), not the same cost."""
    row_bytes = RANK_ROW_BYTES + (SENDER_ROW_BYTES if senders else 0)
    return input_lines * row_bytes <= heap_share(spark, RANKS_HEAP_SHARE_CONF, RANKS_HEAP_SHARE)


def heap_share(spark: SparkSession, conf: str, default: float) -> int:
    """Bytes of the driver's heap that the share ``conf`` (``default`` unless set) is."""
    share = float(spark.conf.get(conf, str(default)))
    return int(spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory() * share)


def broadcast_rows(spark: SparkSession, row_bytes: int = BROADCAST_ROW_BYTES) -> int:
    """Rows of ``row_bytes`` (BROADCAST_ROW_BYTES unless the frame is narrower) that the broadcast
    share of the driver's heap holds: a frame of at most this many rows is joined as a broadcast.
    Same outcome either way (the engine-vs-model property tests run both), not the same cost."""
    return heap_share(spark, BROADCAST_HEAP_SHARE_CONF, BROADCAST_HEAP_SHARE) // row_bytes
