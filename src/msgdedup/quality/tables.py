"""The checked tables: pure DataFrame functions that turn a batch's outputs into tables GX checks.

Each invariant of exactly-once delivery is recomputed here *from the outputs themselves*
(delivered rows, dropped rows, the parent's ID-cache snapshot, the manifest), never from the
engine's own verdicts: a gate that trusted ``dropped`` would share the engine's bugs. Every
table carries, per row, a readable description of what is wrong (null when the row is fine),
so that the GX expectation is a plain "this column is null" and the Data Docs page lists the
offending rows by name (GX only renders sample *values*, not the rows' keys, in the bounded
SUMMARY result format that keeps the driver's memory independent of the data size).

Everything is distributed: joins, windows and aggregations; nothing is collected here. The one
step that can run on the driver is ``key_window``'s window over the acceptances of the keys
accepted again, when the caller has collected those few rows (``previous_acceptances``).
Uniqueness is checked here rather than by GX expectations (``expect_column_values_to_be_unique``,
``expect_compound_columns_to_be_unique``): GX re-evaluates an expectation's condition once per
metric it needs (count, sample values, sample rows), so a window inside the condition is a
shuffle per metric, while a column computed here is computed once and GX then only scans it.
And it is checked by aggregation, not by a window over every row: the repeated values are
normally few, so joining them back to the rows is cheap, where a window sorts every row. The
aggregation that looks for them groups 64-bit hashes of the values, then the values of the few
rows whose hash repeats (``_possibly_repeated``).
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from pyspark.sql import Column, DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from msgdedup.local_frames import local_frame
from msgdedup.sql_text import sql_string

DUPLICATE = "duplicate"
TRANSACTION_REJECTED = "transaction_rejected"

REQUIRED_FIELDS = ("message_id", "address", "received_at")


def cache_sizes(spark: SparkSession, manifest: Mapping) -> DataFrame:
    """``cache, policy, id_cache_size, duplicate_window_us, manifest_entries`` from the manifest
    (one small row per cache). ``id_cache_size`` is the count limit (null for Apama caches and
    time caches without a cap); manifests before policies existed are all ``count``."""
    return local_frame(
        spark, _cache_size_rows(manifest), "cache string, policy string, id_cache_size long, duplicate_window_us long, "
                                           "per_source_window long, expiry_us long, manifest_entries long")


def _cache_size_rows(manifest: Mapping) -> list[tuple]:
    return [
        (name, info.get("policy", "count"), _int_or_none(info.get("id_cache_size")),
         _int_or_none(info.get("duplicate_window_us")), _int_or_none(info.get("per_source_window")),
         None if info.get("expiry_seconds") is None else int(info["expiry_seconds"]) * 1_000_000,
         int(info.get("entries", 0)))
        for name, info in ((name, manifest["caches"][name]) for name in manifest_caches(manifest))
    ]


def manifest_caches(manifest: Mapping) -> list[str]:
    """The manifest's caches by name, sorted: the order ``cache_sizes`` lists them in, and the
    places ``exception_hashes`` tallies a snapshot's entries by."""
    return sorted(manifest.get("caches") or {})


def keeps_sender_queues(manifest: Mapping) -> bool:
    """Whether any cache of the manifest is an Apama cache with sender queues (§8.2): only then can
    ``key_window`` find a key still held in its sender's queue."""
    return any(info.get("policy") == "apama" and (info.get("per_source_window") or 0) > 0
               for info in (manifest.get("caches") or {}).values())


def has_apama_caches(manifest: Mapping) -> bool:
    """Whether any cache of the manifest is an Apama cache (§8.2)."""
    return any(info.get("policy") == "apama" for info in (manifest.get("caches") or {}).values())


def _hash_of(columns: tuple[str, ...]) -> Column:
    """The 64-bit hash the exceptions are narrowed by: one definition, since the frames of repeated
    hashes are joined back to their rows by it."""
    return F.xxhash64(*columns)


def _repeated_hashes(rows: DataFrame, columns: tuple[str, ...]) -> DataFrame:
    """``_hash``: each 64-bit hash of ``columns`` that more than one of ``rows`` has. Grouping a
    million distinct ids took 2.0 s on two cores, their hashes 0.9 s."""
    return (rows.groupBy(_hash_of(columns).alias("_hash")).count().where(F.col("count") > 1)
            .select("_hash"))


def _possibly_repeated(rows: DataFrame, columns: tuple[str, ...], hashes: DataFrame | None = None) -> DataFrame:
    """The rows whose values of ``columns`` may be in another row too: those whose 64-bit hash
    of them is (all of the repeated ones, and any that share a hash with another). The caller
    aggregates these by the values themselves, which decides: a hash only narrows the rows.
    The rows left are normally none, and their hashes are broadcast. ``hashes``: the repeated
    hashes (``_hash``) when the caller found them already (``exception_hashes``)."""
    if hashes is None:
        hashes = _repeated_hashes(rows, columns)
    return rows.join(F.broadcast(hashes), _hash_of(columns) == F.col("_hash"), "left_semi")


# The exceptions the checked tables are narrowed by, each found among the rows whose 64-bit hash
# repeats: the names of their frames (the gate's ``SmallFrames``) and of their hash columns in
# ``exception_hashes``.
REPEATED_MESSAGE_IDS = "repeated_message_ids"
REPEATED_KEY_HASHES = "repeated_key_hashes"
SHARED_CACHE_SEQ_COUNTS = "shared_cache_seq_counts"
REPEATED_HELD_KEYS = "repeated_held_keys"
EXCEPTIONS = (REPEATED_MESSAGE_IDS, SHARED_CACHE_SEQ_COUNTS, REPEATED_KEY_HASHES, REPEATED_HELD_KEYS)
# ``exception_hashes``' column naming where a row comes from, which that pass tallies: the output a
# row is of by its place in OUTPUTS (its rows per output are what ``output_counts`` counts); for an
# entry of this batch's snapshot, ENTRY_ORIGIN + 2 x its cache's place among the manifest's caches
# (``manifest_caches``), + 1 when it holds a key (its rows per cache are what ``id_cache_occupancy``
# counts, ``entries_by_cache``), or UNDECLARED_ENTRY when its cache is not one of them; null for the
# parent snapshot's rows.
OUTPUT_OF_ROW = "_output"
OUTPUTS = ("delivered", "dropped")
ENTRY_ORIGIN = len(OUTPUTS)
UNDECLARED_ENTRY = -1


def exception_hashes(delivered: DataFrame, dropped: DataFrame, parent_id_cache: DataFrame,
                     id_cache: DataFrame | None = None, caches: Sequence[str] = ()) -> DataFrame:
    """A row per row of delivered, dropped, the parent snapshot and this batch's (``id_cache``;
    None: left out, and so is its column: its exception then finds them itself), with the hash
    each exception groups that row by, or null where the exception does not look at the row: its
    message_id (``repeated_message_ids``: delivered and dropped), its cache and cache_seq
    (``shared_cache_seq_counts``: numbered deliveries), its cache and key
    (``repeated_key_hashes``: this batch's acceptances and the parent snapshot's;
    ``held_key_excess``: this batch's snapshot); and ``OUTPUT_OF_ROW``, the output a row is of,
    so that the same pass counts the outputs' rows (``accounting_from_counts``) and this batch's
    snapshot's entries per cache of ``caches`` (the manifest's, ``manifest_caches``), which
    ``id_cache_occupancy`` would otherwise count by an aggregation of the snapshot.

    The hashes that repeat in a column are the ones that exception's own aggregation finds. A
    caller that finds them itself (the gate, on the driver, ``materialise.SmallFrames``) reads the
    outputs once for the four, and shuffles nothing: at 1M messages the three aggregations of the
    outputs took 1.8-2.3 s of a warm application (5.6 s the first time), this frame collected and
    its repeats found by numpy 0.4-0.5 s (0.9 s; docs/benchmarks.md); the snapshot's aggregation,
    1.1-1.9 s of task time over its 500K entries."""
    none = F.lit(None).cast("long")

    def hash_where(condition: Column, columns: tuple[str, ...]) -> Column:
        return F.when(condition, _hash_of(columns))

    kinds = EXCEPTIONS if id_cache is not None else tuple(k for k in EXCEPTIONS if k != REPEATED_HELD_KEYS)

    def hashes(frame: DataFrame, output: str | Column | None = None, **columns: Column) -> DataFrame:
        code = output if isinstance(output, Column) else F.lit(None if output is None else OUTPUTS.index(output))
        return frame.select(*[columns.get(name, none).alias(name) for name in kinds],
                            code.cast("int").alias(OUTPUT_OF_ROW))

    ids = hash_where(F.col("message_id").isNotNull(), ("message_id",))
    rows = (
        hashes(delivered, "delivered", **{REPEATED_MESSAGE_IDS: ids,
                                          SHARED_CACHE_SEQ_COUNTS: hash_where(_is_numbered(), ("cache", "cache_seq")),
                                          REPEATED_KEY_HASHES: hash_where(_is_accepted(), _KEY)})
        .unionByName(hashes(dropped, "dropped", **{REPEATED_MESSAGE_IDS: ids}))
        .unionByName(hashes(parent_id_cache, **{REPEATED_KEY_HASHES: _hash_of(_KEY)}))
    )
    if id_cache is not None:
        held = hash_where(F.col("dedup_key").isNotNull(), _KEY)
        # each entry's cache by its place among ``caches``: a join on the names, so it is exact
        places = local_frame(id_cache.sparkSession, [(name, place) for place, name in enumerate(caches)],
                             "cache string, _place int")
        entries = id_cache.join(F.broadcast(places), "cache", "left")
        origin = F.when(F.col("_place").isNull(), F.lit(UNDECLARED_ENTRY)).otherwise(
            ENTRY_ORIGIN + 2 * F.col("_place") + F.col("dedup_key").isNotNull().cast("int"))
        rows = rows.unionByName(hashes(entries, origin, **{REPEATED_HELD_KEYS: held}))
    return rows


def entries_by_cache(tally: Mapping[int, int], caches: Sequence[str]) -> dict[str, tuple[int, int]] | None:
    """Each cache of ``caches`` that has an entry in this batch's snapshot: its entries, and those
    with a key, from the ``OUTPUT_OF_ROW`` tally of an ``exception_hashes`` pass given the snapshot
    and ``caches``; None when an entry's cache is not among them (the table's aggregation then
    names it)."""
    if tally.get(UNDECLARED_ENTRY):
        return None
    counts = {}
    for place, name in enumerate(caches):
        unkeyed, keyed = (tally.get(ENTRY_ORIGIN + 2 * place + k, 0) for k in (0, 1))
        if unkeyed + keyed:
            counts[name] = (unkeyed + keyed, keyed)
    return counts


def repeated_message_ids(delivered: DataFrame, dropped: DataFrame, hashes: DataFrame | None = None) -> DataFrame:
    """``message_id, _copies, _delivered_copies`` of every message_id in more than one row of
    delivered and dropped together (normally none). Aggregated over the id column only, so the
    rows themselves never move: ``messages`` joins these few back to them. ``hashes``: the
    repeated hashes of the ids, when the caller found them (``exception_hashes``)."""
    ids = (
        delivered.select("message_id", F.lit(1).alias("_is_delivered"))
        .unionByName(dropped.select("message_id", F.lit(0).alias("_is_delivered")))
    )
    return (
        _possibly_repeated(ids.where(F.col("message_id").isNotNull()), ("message_id",), hashes)
        .groupBy("message_id")
        .agg(F.count(F.lit(1)).alias("_copies"), F.sum("_is_delivered").cast("long").alias("_delivered_copies"))
        .where(F.col("_copies") > 1)
    )


def messages(delivered: DataFrame, dropped: DataFrame, repeated: DataFrame | None = None) -> DataFrame:
    """Every delivered and dropped message, labelled with its output.

    Checked for the required fields and for message_id uniqueness: a message_id names one
    delivery attempt, so it may appear in exactly one output, once. ``duplicate_message_id``
    says how often, and where, a repeated message_id occurs (null when it occurs once; a
    missing message_id is the required-field check's finding, not this one's).

    ``repeated``: ``repeated_message_ids(delivered, dropped)``, when the caller has computed it
    already (the gate does, once, and broadcasts it when it is small: then the rows are never
    shuffled).
    """
    columns = ["message_id", "address", "received_at", "source_file", "line_number"]
    rows = (
        delivered.select(F.lit("delivered").alias("output"), *columns)
        .unionByName(dropped.select(F.lit("dropped").alias("output"), *columns))
    )
    if repeated is None:
        repeated = repeated_message_ids(delivered, dropped)
    description = F.when(
        F.col("_copies").isNotNull(),
        F.format_string(
            "message_id %s is in %d rows (%d delivered, %d dropped); this one: %s, %s line %d",
            F.col("message_id"), F.col("_copies"), F.col("_delivered_copies"),
            F.col("_copies") - F.col("_delivered_copies"), F.col("output"), F.col("source_file"),
            F.col("line_number"),
        ),
    )
    return (
        rows.join(repeated, "message_id", "left")
        .select("output", *columns, description.alias("duplicate_message_id"))
    )


def _column_or_null(frame: DataFrame, column: str, kind: str = "long") -> Column:
    """A column of an output written before policies existed (an instant, a sender, a queue) is
    missing: null."""
    return F.col(column) if column in frame.columns else F.lit(None).cast(kind)


def _entry_policy(id_cache: DataFrame) -> Column:
    """The policy a snapshot entry was kept by (§8.5): Apama entries have a queue, time entries an
    instant, count entries neither."""
    if "queue" not in id_cache.columns:
        return F.lit("count")
    return (F.when(F.col("queue").isNotNull(), "apama").when(F.col("received_at_us").isNotNull(), "time")
            .otherwise("count"))


def _is_accepted() -> Column:
    """A delivery that is an acceptance of its key: one with a cache (the others have no key)."""
    return F.col("cache").isNotNull()


def _current_acceptances(delivered: DataFrame, batch_id: str) -> DataFrame:
    """This batch's checked deliveries as acceptances of their (cache, dedup_key), with the
    instant they entered a time or Apama cache with (§8.4)."""
    return delivered.where(_is_accepted()).select(
        "cache", "dedup_key", "cache_seq", "message_id",
        F.lit(batch_id).alias("accepted_batch_id"), F.lit(True).alias("_in_batch"),
        _column_or_null(delivered, "entered_at_us").alias("entered_at_us"),
        F.lit(None).cast("string").alias("_policy"),
        _column_or_null(delivered, "source_id", "string").alias("source_id"),
        F.lit("sender").alias("_queue"),  # an accepted key enters its sender's queue (Apama, §8.2)
    )


def _acceptances(delivered: DataFrame, parent_id_cache: DataFrame, batch_id: str) -> DataFrame:
    """This batch's acceptances and the parent snapshot's (what the cache held before)."""
    history = parent_id_cache.select(
        "cache", "dedup_key", "cache_seq", "message_id", "accepted_batch_id",
        F.lit(False).alias("_in_batch"), _column_or_null(parent_id_cache, "received_at_us").alias("entered_at_us"),
        _entry_policy(parent_id_cache).alias("_policy"),
        _column_or_null(parent_id_cache, "source_id", "string").alias("source_id"),
        _column_or_null(parent_id_cache, "queue", "string").alias("_queue"),
    )
    return _current_acceptances(delivered, batch_id).unionByName(history)


_KEY = ("cache", "dedup_key")


def repeated_key_hashes(delivered: DataFrame, parent_id_cache: DataFrame, batch_id: str) -> DataFrame:
    """``_hash``: the 64-bit hash of (cache, dedup_key) of every key accepted more than once in this
    batch and the parent snapshot together (normally few), the only keys with a previous acceptance,
    and of any key that shares its hash with another key's acceptance.

    ``key_window`` orders the acceptances of these hashes' keys, and a key among them accepted only
    once has no previous acceptance there, as it would have none anywhere: so the hashes need not be
    told apart from the keys by a second pass over the acceptances (two more jobs over a million
    deliveries, on the gate's critical path, whenever any hash repeats)."""
    return _repeated_hashes(_acceptances(delivered, parent_id_cache, batch_id).select(*_KEY), _KEY)


def _key_hash() -> Column:
    return _hash_of(_KEY)


def _is_numbered() -> Column:
    return F.col("cache").isNotNull() & F.col("cache_seq").isNotNull()


def _numbered(delivered: DataFrame) -> DataFrame:
    return delivered.where(_is_numbered())


def shared_cache_seq_counts(delivered: DataFrame, hashes: DataFrame | None = None) -> DataFrame:
    """``cache, cache_seq, _sharing`` of every (cache, cache_seq) that more than one delivery of
    this batch carries (normally none). ``hashes``: the repeated hashes of the numbers, when the
    caller found them (``exception_hashes``)."""
    return (
        _possibly_repeated(_numbered(delivered).select("cache", "cache_seq"), ("cache", "cache_seq"), hashes)
        .groupBy("cache", "cache_seq").agg(F.count(F.lit(1)).alias("_sharing"))
        .where(F.col("_sharing") > 1)
    )


def shared_cache_seqs(delivered: DataFrame, counts: DataFrame | None = None) -> DataFrame:
    """``shared_cache_seq_counts`` with ``_first_id, _last_id``: the least and the greatest
    message_id of the deliveries that share the number.

    The ids are aggregated apart, over the deliveries of the shared numbers only: the least of a
    string cannot be kept in Spark's hash aggregation (its buffers are fixed-width), so taking
    it in the counting aggregation would sort every delivery for nothing, where normally no
    number is shared. ``counts``: ``shared_cache_seq_counts(delivered)`` when the caller has
    computed it already (the gate does, and hands it over as a local table when it is small:
    then the deliveries are only scanned, and not at all when it is empty).
    """
    if counts is None:
        counts = shared_cache_seq_counts(delivered)
    ids = (
        _numbered(delivered).join(counts.select("cache", "cache_seq"), ["cache", "cache_seq"], "left_semi")
        .groupBy("cache", "cache_seq")
        .agg(F.min("message_id").alias("_first_id"), F.max("message_id").alias("_last_id"))
    )
    return counts.join(ids, ["cache", "cache_seq"])


# ``key_window``'s findings, as SQL: the JVM parses each in one call, where the same expressions
# built from Python Columns were some 300 py4j calls (of the 1,018 that built the table at 1M with
# a hot address), each a round trip to a JVM busy with the gate's other tables, on the gate's
# critical path (docs/benchmarks.md).
# Columns: a delivery, its previous acceptance (``prev_*``, null if none), the two's distance
# (``seq_gap``, ``time_gap_us``), its cache's window (``cache_sizes``), the Apama sender gaps.
_SAME_POLICY = "(prev_in_batch OR prev_policy = policy)"
_DUPLICATE_WITHIN_WINDOW = f"""CASE
  WHEN policy = 'count' AND {_SAME_POLICY} AND seq_gap <= id_cache_size
  THEN format_string({sql_string(
      "%s key %s: %s (cache_seq %d) delivered again %d accepted keys after %s (cache_seq %d, batch %s); "
      "the cache holds %d")},
    cache, dedup_key, message_id, cache_seq, seq_gap, prev_message_id, prev_cache_seq, prev_batch_id, id_cache_size)
  WHEN policy = 'time' AND {_SAME_POLICY} AND (id_cache_size IS NULL OR seq_gap <= id_cache_size)
       AND time_gap_us <= duplicate_window_us
  THEN format_string({sql_string(
      "%s key %s: %s delivered again %.6f s and %d accepted keys after %s (batch %s); "
      "the duplicate_window is %.6f s")},
    cache, dedup_key, message_id, time_gap_us / 1e6, seq_gap, prev_message_id, prev_batch_id,
    duplicate_window_us / 1e6)
  WHEN policy = 'apama' AND {_SAME_POLICY} AND _sender_since < per_source_window AND NOT _resent
  THEN format_string({sql_string(
      "%s key %s: %s delivered again while sender %s's queue still held it: the sender had "
      "%d keys accepted since %s (batch %s), its per_source_window is %d")},
    cache, dedup_key, message_id, coalesce(prev_source_id, '(no source)'), _sender_since, prev_message_id,
    prev_batch_id, per_source_window)
  WHEN policy = 'apama' AND {_SAME_POLICY} AND expiry_us > 0 AND time_gap_us <= expiry_us
  THEN format_string({sql_string(
      "%s key %s: %s delivered again %.6f s after %s (batch %s), inside the shared queue's "
      "expiry_seconds of %d")},
    cache, dedup_key, message_id, time_gap_us / 1e6, prev_message_id, prev_batch_id,
    CAST(expiry_us / 1000000 AS BIGINT))
END"""
# cache_seq numbers a cache's acceptances: two deliveries sharing one in this batch
# means one acceptance was counted twice (and the window arithmetic above is off).
_SHARED_CACHE_SEQ = f"""CASE WHEN _sharing IS NOT NULL
  THEN format_string({sql_string(
      "%s cache_seq %d is used by %d deliveries (message_id %s to %s); this one: %s, key %s")},
    cache, cache_seq, _sharing, _first_id, _last_id, message_id, dedup_key)
END"""


# The columns of an acceptance that ``key_window`` puts beside the next acceptance of its key.
_PREVIOUS = {
    "message_id": ("prev_message_id", "string"), "cache_seq": ("prev_cache_seq", "long"),
    "accepted_batch_id": ("prev_batch_id", "string"), "_in_batch": ("prev_in_batch", "boolean"),
    "entered_at_us": ("prev_entered_at_us", "long"), "_policy": ("prev_policy", "string"),
    "source_id": ("prev_source_id", "string"), "_queue": ("prev_queue", "string"),
}
# The order of a key's acceptances (``key_window``): by acceptance number, the parent's before this
# batch's, then by message_id; each ascending, nulls first.
_ACCEPTANCE_ORDER = ("cache_seq", "_in_batch", "message_id")


def previous_acceptances(accepted: Sequence[Row]) -> list[tuple]:
    """``key_window``'s window over the acceptances of the keys accepted again, on the driver: each of
    this batch's rows of ``accepted`` (``_acceptances``' columns) followed by its previous
    acceptance's ``_PREVIOUS`` columns, as Spark's ``lag`` over ``_KEY`` in ``_ACCEPTANCE_ORDER``
    gives them.

    For the few such rows a gate has collected (232 of a million messages with a hot address): in
    Spark the window is a shuffle and a sort whose code is compiled for those rows, and the query
    that settled them took 1.0-1.2 s of the gate's critical path, against 0.6-0.8 s for their
    collect with the window taken here (docs/benchmarks.md). Python's order of strings (by code
    point) is Spark's (by UTF-8 byte), and None sorts first as Spark's nulls do."""
    def nulls_first(value):
        return (value is not None, value)

    ordered = sorted(accepted, key=lambda row: tuple(nulls_first(row[c]) for c in (*_KEY, *_ACCEPTANCE_ORDER)))
    rows, before = [], None
    for row in ordered:
        same_key = before is not None and all(before[c] == row[c] for c in _KEY)
        if row["_in_batch"]:
            rows.append((*row, *[before[c] if same_key else None for c in _PREVIOUS]))
        before = row
    return rows


def key_window(delivered: DataFrame, dropped: DataFrame, parent_id_cache: DataFrame, sizes: DataFrame,
               batch_id: str, again: DataFrame | None = None, shared_numbers: DataFrame | None = None,
               repeats: int | None = None, sender_queues: bool = True,
               settle: Callable[[DataFrame], list[Row] | None] | None = None) -> DataFrame:
    """Each checked delivered message next to the previous acceptance of its key.

    The previous acceptance is looked for among this batch's deliveries and the parent's ID
    cache snapshot (what the cache held before this batch). Artemis' cache holds the last
    ``id_cache_size`` accepted keys, so a key may be accepted again only once it has been
    pushed out: its two ``cache_seq`` must be more than ``id_cache_size`` apart. A time cache
    (§8.3) forgets a key once either limit is passed: its two acceptances must be more than
    ``duplicate_window`` apart in the instants they entered with, or more than its cap apart.
    An Apama cache (§8.2) forgets a key only after it left its sender's queue and then the
    shared queue (``_apama_sender_gaps`` says what the outputs prove of each).
    A previous acceptance of another policy (the parent's entries of a cache whose policy changed
    started it empty, §8.5) is no finding.
    A key that is not in the parent snapshot was pushed out before this batch, which can only
    make the gap larger, so the snapshot is all the history needed.

    Only keys accepted more than once (in this batch and the snapshot together) have a
    previous acceptance; they are found by aggregation of their hashes (``repeated_key_hashes``)
    and only the acceptances of those hashes are put in order, the rest has none. ``again`` and
    ``shared_numbers`` (``shared_cache_seqs``) may be given already computed: the gate computes the
    hashes and the shared numbers' counts once and broadcasts them when they are small, so the
    deliveries are never shuffled. ``repeats`` is how many hashes ``again`` holds when the caller has counted them
    (it brought them to the driver): few enough to broadcast the Apama repeats too, and when none
    (the normal case) no delivery has a previous acceptance, so the table is its first
    acceptances alone. Spark would prune the other branch from an empty ``again`` anyway, but
    only after analysing and optimising it: a window, the Apama sender gaps and their joins,
    about a second of the driver's time on the gate's critical path at 1M. ``sender_queues``:
    False when no cache of the batch keeps sender queues (``keeps_sender_queues``): the Apama
    sender gaps are then null, and their joins are not built and planned. ``settle``: computes a
    frame once and returns its rows when they are few (None: too many), for the acceptances of
    the keys accepted again, whose window is then taken on the driver (``previous_acceptances``),
    and for Apama caches for those deliveries with their sender gaps: either way the table's
    rows of those keys are a local table, and the table is a plain scan of the deliveries again
    (``materialise.Scanned``).
    """
    current = _current_acceptances(delivered, batch_id)
    if again is None:
        again = repeated_key_hashes(delivered, parent_id_cache, batch_id)
    if shared_numbers is None:
        shared_numbers = shared_cache_seqs(delivered)
    # Each branch is checked apart, then the two are united: in the first acceptances' branch the
    # previous acceptance is null, so Spark folds the window finding to null there, and a query of
    # the table reads those deliveries' keys only. A finding's message names most of a delivery's
    # columns: read for every delivery, they made GX's count of the findings at 1M with a hot
    # address 0.7 s, against 0.24 s without keys accepted again (docs/benchmarks.md).
    first = _findings(
        (current if repeats == 0 else current.join(again, _key_hash() == again["_hash"], "left_anti"))
        .select("*", *[F.lit(None).cast(kind).alias(name) for name, kind in _PREVIOUS.values()], *_no_sender_gaps()),
        sizes, shared_numbers)
    if repeats == 0:
        return first
    accepted = _acceptances(delivered, parent_id_cache, batch_id).join(
        again, _key_hash() == again["_hash"], "left_semi")
    held = settle(accepted) if settle is not None else None
    if held is None:
        by_key = Window.partitionBy(*_KEY).orderBy(*[F.col(c).asc_nulls_first() for c in _ACCEPTANCE_ORDER])
        repeated = accepted.select(
            "*", *[F.lag(column).over(by_key).alias(name) for column, (name, _) in _PREVIOUS.items()]
        ).where(F.col("_in_batch"))
    else:
        schema = StructType([*accepted.schema.fields, *[StructField(name, accepted.schema[column].dataType)
                                                         for column, (name, _) in _PREVIOUS.items()]])
        repeated = local_frame(delivered.sparkSession, previous_acceptances(held), schema)
    if sender_queues:
        repeated = _apama_sender_gaps(repeated, delivered, dropped, parent_id_cache, sizes, repeats is not None)
        if settle is not None and (gaps := settle(repeated)) is not None:  # their joins computed once too
            repeated = local_frame(delivered.sparkSession, gaps, repeated.schema)
    else:  # no cache keeps sender queues: no gaps, and their joins not planned (0.3-0.8 s of the driver)
        repeated = repeated.select("*", *_no_sender_gaps())
    return _findings(repeated, sizes, shared_numbers).unionByName(first)


def _findings(rows: DataFrame, sizes: DataFrame, shared_numbers: DataFrame) -> DataFrame:
    """``key_window``'s rows (deliveries next to their previous acceptances) with their cache's
    window, their distance from the previous acceptance, and the findings."""
    placed = (
        rows
        .drop("_in_batch", "accepted_batch_id", "_policy", "source_id", "_queue", "prev_queue")
        .join(sizes.select("cache", "policy", "id_cache_size", "duplicate_window_us", "per_source_window",
                           "expiry_us"), "cache", "left")
        .withColumn("seq_gap", F.col("cache_seq") - F.col("prev_cache_seq"))
        .withColumn("time_gap_us", F.col("entered_at_us") - F.col("prev_entered_at_us"))
    )
    # A delivery's names first, in both branches (the Apama sender gaps' join put them there).
    columns = ["cache", "message_id", *[c for c in placed.columns if c not in (
        "cache", "message_id", "_sender_since", "_resent", "per_source_window", "expiry_us")]]
    return (
        placed.join(shared_numbers, ["cache", "cache_seq"], "left")
        .select(*columns, F.expr(_DUPLICATE_WITHIN_WINDOW).alias("duplicate_within_window"),
                F.expr(_SHARED_CACHE_SEQ).alias("shared_cache_seq"))
    )


def _no_sender_gaps() -> list[Column]:
    """``_apama_sender_gaps``' columns for deliveries it has nothing to say of."""
    return [F.lit(None).cast("long").alias("_sender_since"), F.lit(None).cast("boolean").alias("_resent")]


def _apama_sender_gaps(repeated: DataFrame, delivered: DataFrame, dropped: DataFrame, parent_id_cache: DataFrame,
                       sizes: DataFrame, broadcast: bool) -> DataFrame:
    """``repeated`` with ``_sender_since`` and ``_resent`` for the Apama deliveries whose key's
    previous acceptance sat in its sender's queue (nulls for the rest).

    The outputs do not keep each queue's history, but they prove what a key needed to leave its
    sender's queue (§8.2): either that sender accepted at least ``per_source_window`` keys after
    it (a push needs the queue full of newer ids; every one of them was accepted later), or that
    sender resent it outside a transaction (the move; ``duplicate_of`` names the accepted message).
    ``_sender_since`` counts the sender's keys accepted since: in this batch before the delivery
    (by ``cache_seq``), and, for a previous acceptance in the parent snapshot, the newer keys its
    sender's queue still held there (what fills the queue is what is in it, not what passed
    through). Fewer, and no resend, means the key was still in the queue: a duplicate delivered.
    Leaving the shared queue needs a newer item by more than ``expiry_seconds``, and no item is
    newer than the delivery itself, so two deliveries at most ``expiry_seconds`` apart (in the
    instants they entered with) are a finding too (``key_window``).
    """
    apama = sizes.where((F.col("policy") == "apama") & (F.col("per_source_window") > 0)).select("cache")
    candidates = (repeated.join(apama, "cache", "left_semi")
                  .where((F.col("prev_queue") == "sender")
                         & (F.col("prev_in_batch") | (F.col("prev_policy") == "apama")))
                  .select("cache", "message_id", "cache_seq", "prev_message_id", "prev_cache_seq", "prev_source_id"))
    if broadcast:
        candidates = F.broadcast(candidates)
    accepted = delivered.where(F.col("cache").isNotNull()).select(
        "cache", _column_or_null(delivered, "source_id", "string").alias("source_id"), "cache_seq")
    if "queue" in parent_id_cache.columns:
        accepted = accepted.unionByName(
            parent_id_cache.where(F.col("queue") == "sender").select("cache", "source_id", "cache_seq"))
    c, a = candidates.alias("c"), accepted.alias("a")
    since = (
        a.join(c, (F.col("a.cache") == F.col("c.cache")) & F.col("a.source_id").eqNullSafe(F.col("c.prev_source_id"))
               & (F.col("a.cache_seq") > F.col("c.prev_cache_seq")) & (F.col("a.cache_seq") < F.col("c.cache_seq")))
        .groupBy(F.col("c.cache").alias("cache"), F.col("c.message_id").alias("message_id"))
        .agg(F.count(F.lit(1)).alias("_since"))
    )
    r = dropped.where((F.col("reason") == DUPLICATE) & F.col("txn_id").isNull()).select(
        "cache", _column_or_null(dropped, "source_id", "string").alias("source_id"), "duplicate_of").alias("r")
    resent = (
        r.join(c, (F.col("r.cache") == F.col("c.cache")) & (F.col("r.duplicate_of") == F.col("c.prev_message_id"))
               & F.col("r.source_id").eqNullSafe(F.col("c.prev_source_id")))
        .select(F.col("c.cache").alias("cache"), F.col("c.message_id").alias("message_id"), F.lit(True).alias("_moved"))
        .distinct()
    )
    gaps = (candidates.select("cache", "message_id")
            .join(since, ["cache", "message_id"], "left").join(resent, ["cache", "message_id"], "left")
            .select("cache", "message_id", F.coalesce("_since", F.lit(0)).cast("long").alias("_sender_since"),
                    F.coalesce("_moved", F.lit(False)).alias("_resent")))
    return repeated.join(F.broadcast(gaps) if broadcast else gaps, ["cache", "message_id"], "left")


def transactions(delivered: DataFrame, dropped: DataFrame) -> DataFrame:
    """Per txn_id: how many messages were delivered and how many were dropped, and why.

    A transaction is delivered whole or not at all. The one legal mix is a key repeated
    inside the transaction: the repeat is dropped as ``duplicate`` of a delivered message of
    the same transaction. A ``duplicate`` of anything else (an earlier message, a message of
    another transaction) or a ``transaction_rejected`` next to delivered messages means the
    transaction was partly delivered.

    ``duplicates_of_outside`` counts, per dropped duplicate, the delivered transactional
    messages its ``duplicate_of`` names that belong to another transaction (1 when it names
    none). All four counts come from one aggregation by txn_id over one row per delivered
    message, dropped message and such pair: one shuffle instead of one per count and join.
    """
    delivered_txn = delivered.where(F.col("txn_id").isNotNull())
    dropped_txn = dropped.where(F.col("txn_id").isNotNull())
    delivered_ids = delivered_txn.select(F.col("message_id").alias("duplicate_of"), F.col("txn_id").alias("_of_txn"))
    zero = F.lit(0).cast("long")
    one = F.lit(1).cast("long")
    outside = (
        dropped_txn.where(F.col("reason") == DUPLICATE)
        .select("txn_id", "duplicate_of")
        .join(delivered_ids, "duplicate_of", "left")
        .where(F.col("_of_txn").isNull() | (F.col("_of_txn") != F.col("txn_id")))
        .select("txn_id", zero.alias("delivered"), zero.alias("dropped"), zero.alias("transaction_rejected"),
                one.alias("duplicates_of_outside"))
    )
    counted = (
        delivered_txn.select("txn_id", one.alias("delivered"), zero.alias("dropped"),
                             zero.alias("transaction_rejected"), zero.alias("duplicates_of_outside"))
        .unionByName(dropped_txn.select(
            "txn_id", zero.alias("delivered"), one.alias("dropped"),
            (F.col("reason") == TRANSACTION_REJECTED).cast("long").alias("transaction_rejected"),
            zero.alias("duplicates_of_outside")))
        .unionByName(outside)
    )
    counts = ("delivered", "dropped", "transaction_rejected", "duplicates_of_outside")
    table = counted.groupBy("txn_id").agg(
        *[F.coalesce(F.sum(c), F.lit(0)).cast("long").alias(c) for c in counts]
    )
    partial = F.when(
        (F.col("delivered") > 0) & ((F.col("transaction_rejected") > 0) | (F.col("duplicates_of_outside") > 0)),
        F.format_string(
            "transaction %s partly delivered: %d delivered, %d transaction_rejected, "
            "%d duplicate of a message outside the transaction",
            "txn_id", "delivered", "transaction_rejected", "duplicates_of_outside",
        ),
    )
    return table.withColumn("partial_delivery", partial)


ACCOUNTED = ("input_lines", "delivered", "dropped", "quarantined")


def output_counts(delivered: DataFrame, dropped: DataFrame, quarantine: DataFrame) -> DataFrame:
    """One row: ``delivered, dropped, quarantined`` row counts, in one query that reads no
    column (Parquet answers from its row-group counts)."""
    def tagged(frame: DataFrame, name: str) -> DataFrame:
        return frame.select(*[F.lit(1 if other == name else 0).alias(other)
                              for other in ("delivered", "dropped", "quarantined")])

    rows = tagged(delivered, "delivered").unionByName(tagged(dropped, "dropped")).unionByName(
        tagged(quarantine, "quarantined"))
    return rows.agg(*[F.coalesce(F.sum(c), F.lit(0)).cast("long").alias(c)
                      for c in ("delivered", "dropped", "quarantined")])


def accounting_from_counts(spark: SparkSession, manifest: Mapping, counts: Mapping[str, int]) -> DataFrame:
    """``count, declared, actual, batch_id`` from the outputs' row counts (``output_counts``,
    collected: three numbers) and the manifest's declared counts."""
    declared = manifest.get("counts") or {}
    actual = {name: int(counts[name]) for name in ("delivered", "dropped", "quarantined")}
    actual["input_lines"] = actual["delivered"] + actual["dropped"] + actual["quarantined"]
    return local_frame(
        spark, [(name, _int_or_none(declared.get(name)), actual[name], str(manifest.get("batch_id")))
         for name in ACCOUNTED],
        "count string, declared long, actual long, batch_id string",
    )


def accounting(
    spark: SparkSession, manifest: Mapping, delivered: DataFrame, dropped: DataFrame, quarantine: DataFrame
) -> DataFrame:
    """``count, declared, actual``: every input line is in exactly one output, and the
    manifest's counts are the outputs' row counts.

    One row per count (long format) so that a single pair expectation covers them all and
    its sample rows say which count is off. Runs ``output_counts`` (one small query).
    """
    return accounting_from_counts(spark, manifest, output_counts(delivered, dropped, quarantine).first().asDict())


def held_key_excess(id_cache: DataFrame, hashes: DataFrame | None = None) -> DataFrame:
    """``cache, _excess``: per cache, how many of its entries in this batch's snapshot hold a key
    it holds already (normally none: no row), found among the entries whose hash of (cache, key)
    repeats (``_possibly_repeated``). ``hashes``: those repeated hashes, when the caller found
    them (``exception_hashes``)."""
    keyed = id_cache.where(F.col("dedup_key").isNotNull())
    return (
        _possibly_repeated(keyed.select(*_KEY), _KEY, hashes).groupBy(*_KEY).agg(F.count(F.lit(1)).alias("_n"))
        .where(F.col("_n") > 1).groupBy("cache").agg(F.sum(F.col("_n") - 1).alias("_excess"))
    )


def id_cache_occupancy(id_cache: DataFrame, sizes: DataFrame, apama: bool = True,
                       excess: DataFrame | None = None) -> DataFrame:
    """Per cache: entries in this batch's snapshot against the cache's size.

    A snapshot larger than the cache would make the next batch see keys that Artemis had
    already forgotten (false duplicates); a key twice in one cache would mean the cache
    accepted a key it held; a cache missing from the manifest has no declared size. An Apama
    cache's sender queues hold at most ``per_source_window`` keys each and its shared queue spans
    at most ``expiry_seconds`` (§8.5).

    The entries are counted per cache, and the keys held more than once looked for among the
    entries whose hash of (cache, key) repeats (``_possibly_repeated``; normally none), rather than
    grouping every entry by its key: the same numbers for less work (1.1 s against 1.9 s for a
    warm gate's million entries, docs/benchmarks.md). The manifest's caches join the counts as rows
    of their own, which gives a full outer join's rows without another shuffle. ``apama``: False
    when no cache of the manifest is an Apama cache (``has_apama_caches``): the queues' checks
    compare with an Apama cache's windows, which no other cache has, so they are not computed
    (three Spark jobs over the snapshot). ``excess``: ``held_key_excess(id_cache)`` when the
    caller has computed it already (the gate does, from hashes it collected, and hands it over as
    a local table: then the snapshot is read once, and not shuffled). Where the caller has counted
    the entries already, ``id_cache_occupancy_of_counts`` gives the same rows on the driver.
    """
    if excess is None:
        excess = held_key_excess(id_cache)
    queues = _apama_queues(id_cache) if apama else _no_apama_queues(id_cache.sparkSession)
    declared = sizes.select("cache", F.lit(None).cast("long").alias("_held"), F.lit(None).cast("long").alias("_keyed"),
                            "policy", "id_cache_size", "manifest_entries")
    held = id_cache.groupBy("cache").agg(F.count(F.lit(1)).alias("_held"), F.count("dedup_key").alias("_keyed"))
    rows = held.select("cache", "_held", "_keyed", F.lit(None).cast("string").alias("policy"),
                       F.lit(None).cast("long").alias("id_cache_size"),
                       F.lit(None).cast("long").alias("manifest_entries")).unionByName(declared)
    table = rows.groupBy("cache").agg(
        F.max("policy").alias("policy"),
        F.max("id_cache_size").alias("id_cache_size"),
        F.coalesce(F.sum("_held"), F.lit(0)).cast("long").alias("entries"),
        F.coalesce(F.sum("_keyed"), F.lit(0)).cast("long").alias("_keyed"),
        F.coalesce(F.max("manifest_entries"), F.lit(0)).cast("long").alias("manifest_entries"),
    )
    # distinct keys: the entries with a key, less the repeats of each key held more than once
    table = (table.join(excess, "cache", "left")
             .withColumn("distinct_keys", (F.col("_keyed") - F.coalesce("_excess", F.lit(0))).cast("long"))
             .select("cache", "policy", "id_cache_size", "entries", "distinct_keys", "manifest_entries"))
    table = (table.join(queues, "cache", "left")
             .join(sizes.select("cache", "per_source_window", "expiry_us"), "cache", "left"))
    return _with_snapshot_problems(table)


def id_cache_occupancy_of_counts(spark: SparkSession, manifest: Mapping, held: Mapping[str, tuple[int, int]],
                                 excess: Mapping[str, int]) -> DataFrame:
    """``id_cache_occupancy``'s rows, made on the driver from counts the caller holds: ``held``,
    each cache's entries and entries with a key (``entries_by_cache``), and ``excess``, its keys
    held more than once (``held_key_excess``'s rows). Only for a manifest without Apama caches
    (``has_apama_caches``), whose queues need the snapshot's entries themselves, and a snapshot
    whose every entry's cache the manifest declares (no other cache is in ``held``): then every
    row is a declared cache's, joined to its counts here as the aggregation joins them in Spark,
    and the findings are the same expression's (``_with_snapshot_problems``), evaluated on these
    rows alone. The gate counts the entries in its one pass over the outputs' hashes: the
    aggregation of the snapshot and the table's shuffles were six Spark jobs and about 1.3 s of
    the two cores a 1M batch's gate is bound by (docs/benchmarks.md)."""
    rows = []
    for cache, policy, size, _, per_source_window, expiry_us, declared in _cache_size_rows(manifest):
        entries, keyed = held.get(cache, (0, 0))
        rows.append((cache, policy, size, entries, keyed - excess.get(cache, 0), declared,
                     None, None, None, per_source_window, expiry_us))
    return _with_snapshot_problems(local_frame(
        spark, rows, "cache string, policy string, id_cache_size long, entries long, distinct_keys long, "
                     "manifest_entries long, _longest_sender long, _sender string, _shared_span_us long, "
                     "per_source_window long, expiry_us long"))


def _with_snapshot_problems(table: DataFrame) -> DataFrame:
    """``id_cache_occupancy``'s rows with their findings (``snapshot_problem``), its working columns
    (the Apama queues' extremes, the windows they are held to) dropped."""
    problems = F.concat_ws(
        "; ",
        F.when(F.col("_longest_sender") > F.col("per_source_window"),
               F.format_string("Apama cache %s holds %d keys of sender %s, its per_source_window is %d", "cache",
                               "_longest_sender", "_sender", "per_source_window")),
        F.when(F.col("_shared_span_us") > F.col("expiry_us"),
               F.format_string("Apama cache %s's shared queue spans %.6f s, its expiry_seconds is %d", "cache",
                               F.col("_shared_span_us") / 1e6, (F.col("expiry_us") / 1_000_000).cast("long"))),
        F.when(F.col("policy").isNull(), F.format_string("cache %s is not declared in the manifest", "cache")),
        F.when(F.col("entries") != F.col("distinct_keys"),
               F.format_string("cache %s holds %d keys more than once", "cache",
                               F.col("entries") - F.col("distinct_keys"))),
        F.when(F.col("entries") != F.col("manifest_entries"),
               F.format_string("cache %s has %d entries, the manifest says %d",
                               "cache", "entries", "manifest_entries")),
    )
    return (table.withColumn("snapshot_problem", F.when(problems != "", problems))
            .drop("_longest_sender", "_sender", "_shared_span_us", "per_source_window", "expiry_us"))


def _apama_queues(id_cache: DataFrame) -> DataFrame:
    """Per Apama cache (§8.2): its longest sender queue (``_longest_sender``, ``_sender``) and how
    far apart the instants of its shared queue are (``_shared_span_us``). Few rows: Apama entries
    are bounded by their windows."""
    if "queue" not in id_cache.columns:  # a snapshot from before policies existed
        return _no_apama_queues(id_cache.sparkSession)
    senders = (id_cache.where(F.col("queue") == "sender").groupBy("cache", "source_id").count()
               .groupBy("cache").agg(F.max_by("source_id", "count").alias("_sender"),
                                     F.max("count").alias("_longest_sender")))
    shared = (id_cache.where(F.col("queue") == "shared").groupBy("cache")
              .agg((F.max("received_at_us") - F.min("received_at_us")).alias("_shared_span_us")))
    return senders.join(shared, "cache", "full")


def _no_apama_queues(spark: SparkSession) -> DataFrame:
    return local_frame(spark, [], "cache string, _longest_sender long, _sender string, _shared_span_us long")


def _int_or_none(value) -> int | None:
    return None if value is None else int(value)

