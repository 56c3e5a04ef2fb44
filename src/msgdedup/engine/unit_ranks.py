"""The units of a batch decided in Spark, placed, contested or not and ranked in their caches, on the driver.

transforms.py's plan places each transaction at its last message by a window over the
transactions' messages, finds the keys that repeat (in the batch, or in the parent's snapshot) by
an aggregation of every key, marks the units holding one as contested, and ranks every keyed
message in its cache by a window in unit order (``transforms.rank_in_caches``): three shuffles, one
of them a sort of every keyed message (their cost at 1M is in docs/benchmarks.md). None
of it needs the keys themselves, only a few numbers per message: its key's 64-bit hash, its cache's
32-bit hash, its instant, its row_id and its transaction's id. The pass that computes the key
columns collects them (``COLLECTED``); numpy places each message's unit (its transaction's commit
point, ``positions``, where transforms.assign_units runs a window), finds the repeated
hashes and sorts the messages in unit order, and the units and ranks go back to Spark as arrays
indexed by line, as the delivered verdicts do (line_lookup.py): every message finds its own by
its line number, without a shuffle (``units``).

A hash only chooses which units are contested, never a verdict. A key whose hash occurs once in the
batch and not among the parent's entries' occurs once and is not in the snapshot, so its unit is
rightly left to ``transforms.verdicts`` (accepted). Two keys that share a hash make their units
contested, and the kernel decides them on the keys themselves (kernel.py: a contested unit whose
keys are unique is accepted there, numbered as ``transforms.verdicts`` would). Caches are told apart
by their hash only when the batch's caches' hashes are distinct (batch._names_by_hash); units by
their commit point's row_id, unique to each.

Apama caches (§8.2) need one number more per message: its sender queue's hash (``sender_hash``),
from which the driver finds the quiet senders (``quiet_senders``, transforms.quiet_senders by hash)
instead of an aggregation and a join in Spark. The parent's queue entries the batch's key hashes
name contest their keys, as the entries met do, and ``named_entries`` tells the kernel's from the
resting ones. A shared sender hash counts two senders as one, held to the smaller window: fewer
quiet senders, whose messages and entries the kernel then sees, as it sees a loud sender's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from msgdedup.engine import kernel, line_lookup, transforms
from msgdedup.engine.windows import CacheWindow
from msgdedup.repeats import repeated_values
from msgdedup.sql_text import is_in

# What the driver collects of every valid message (``columns``).
COLLECTED = ["row_id", "id_hash", "key_hash", "cache_hash", "address_hash", "received_us", "txn_id"]
# ... and of a message to an Apama cache (null for the others), where the batch has such caches.
SENDER = "sender_hash"
# One row per block of lines with a valid message (line_lookup.block_of): at each line's place
# (line_lookup.in_block), its message's unit (``unit_us``, ``unit_row``: transforms.assign_units),
# which is ``contested``, its sender ``quiet`` (transforms.quiet_senders: false but for Apama
# caches) and, for a message with a key, its ``free_rank`` and ``contested_rank``
# (transforms.rank_in_caches); null for a line without a valid message.
RANKS_SCHEMA = pa.schema([
    ("block", pa.int64()),
    ("unit_us", pa.list_(pa.int64())),
    ("unit_row", pa.list_(pa.int64())),
    ("contested", pa.list_(pa.bool_())),
    ("quiet", pa.list_(pa.bool_())),
    ("free_rank", pa.list_(pa.int32())),
    ("contested_rank", pa.list_(pa.int32())),
])
RANKS_SPARK_SCHEMA = from_arrow_schema(RANKS_SCHEMA)
# transforms.batch_keys' rows, of the contested messages (``contested_keys``).
KEY_COUNTS_SCHEMA = pa.schema([("cache", pa.string()), ("dedup_key", pa.string()), ("count", pa.int64())])
KEY_COUNTS_SPARK_SCHEMA = from_arrow_schema(KEY_COUNTS_SCHEMA)
# ``held``'s rows: the parent's entries in each Apama sender queue.
HELD_SCHEMA = pa.schema([(SENDER, pa.int64()), ("cache_hash", pa.int32()), ("count", pa.int64())])
# The columns of RANKS_SCHEMA that only a message with a key has.
_KEYED = ("free_rank", "contested_rank")
# A list column's offsets are 32-bit.
_MAX_ELEMENTS = (1 << 31) - 16


def key_hash() -> Column:
    """A message's or an entry's key as 64 bits (null without a cache)."""
    return F.when(F.col("cache").isNotNull(), F.xxhash64("cache", "dedup_key"))


def cache_hash() -> Column:
    """A cache's name as 32 bits (null without a cache)."""
    return F.when(F.col("cache").isNotNull(), F.hash("cache"))


def address_hash() -> Column:
    """An address as 32 bits: what the driver tallies the verdicts by (driver_verdicts.py)."""
    return F.hash("address")


def sender_hash() -> Column:
    """A message's or an entry's sender queue, its cache and ``source_id``, as 64 bits (a null
    source_id is a sender too, §8.2)."""
    return F.xxhash64("cache", "source_id")


def columns(sequential: list[str]) -> list[Column]:
    """``COLLECTED`` of messages (transforms.KEY_COLUMNS), and ``SENDER`` where the batch has
    ``sequential`` (Apama) caches."""
    collected = [F.col("row_id"), transforms.id_hash().alias("id_hash"), key_hash().alias("key_hash"),
                 cache_hash().alias("cache_hash"), address_hash().alias("address_hash"), F.col("received_us"),
                 F.col("txn_id")]
    if sequential:
        collected.append(F.when(is_in("cache", sequential), sender_hash()).alias(SENDER))
    return collected


def census_columns(senders: bool) -> list[Column]:
    """``columns`` as the parse's census collects them (batch._find_keys), before the batch's
    caches and their policies are known: with every keyed message's ``SENDER`` where ``senders``
    (the config has an Apama entry), which ``of_sequential`` then keeps for the Apama caches'."""
    return columns([]) + ([F.when(F.col("cache").isNotNull(), sender_hash()).alias(SENDER)] if senders else [])


def of_sequential(rows: pa.Table, sequential: list[int]) -> pa.Table:
    """``census_columns(True)``'s ``rows`` as ``columns`` collects them for the ``sequential``
    (Apama) caches, given by their cache_hash: ``SENDER`` of their messages only, and no
    ``SENDER`` column where there are none."""
    if not sequential:
        return rows.drop_columns([SENDER])
    mine = pc.is_in(rows["cache_hash"], value_set=pa.array(sequential, pa.int32()))
    return rows.set_column(rows.schema.get_field_index(SENDER), SENDER,
                           pc.if_else(mine, rows[SENDER], pa.scalar(None, pa.int64())))


def held(parent_apama: DataFrame) -> DataFrame:
    """HELD_SCHEMA's rows of the parent's Apama entries (``quiet_senders``' ``held``): few, one per
    sender queue."""
    return (parent_apama.filter(F.col("queue") == kernel.SENDER_QUEUE)
            .groupBy(sender_hash().alias(SENDER), cache_hash().alias("cache_hash")).count())


def quiet_senders(rows: pa.Table, windows: dict[int, int], held: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Which of ``rows`` (``COLLECTED`` and ``SENDER``) have a quiet sender, and the quiet senders'
    hashes: transforms.quiet_senders, by hash. A sender is quiet when the batch's messages to it
    and the parent's entries in its queue (``held``: HELD_SCHEMA, ``held``'s rows) fit the
    ``per_source_window`` of its cache (``windows``: by cache hash, every Apama cache)."""
    valid = rows[SENDER].is_valid()
    mine = valid.to_numpy(zero_copy_only=False)
    senders = np.concatenate([rows[SENDER].drop_null().to_numpy(), held[SENDER].to_numpy()])
    caches = np.concatenate([rows["cache_hash"].filter(valid).to_numpy(), held["cache_hash"].to_numpy()])
    counts = np.concatenate([np.ones(int(mine.sum()), np.int64), held["count"].to_numpy()])
    known = np.array(sorted(windows), np.int64)
    window = np.array([windows[h] for h in known], np.int64)[np.searchsorted(known, caches)]
    distinct, sender = np.unique(senders, return_inverse=True)
    load = np.bincount(sender, weights=counts, minlength=len(distinct))
    # senders sharing a hash are one, held to the smallest of their caches' windows
    smallest = np.full(len(distinct), np.iinfo(np.int64).max)
    np.minimum.at(smallest, sender, window)
    fits = load <= smallest
    quiet = np.zeros(len(rows), bool)
    quiet[mine] = fits[sender[:int(mine.sum())]]
    return quiet, distinct[fits]


def positions(rows: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Each of ``rows``' (``COLLECTED``) unit, as transforms.assign_units places it: ``unit_us``
    and ``unit_row``, a message's own instant and row_id, or its transaction's commit point's (the
    latest instant of its messages, the latest row_id among those). Transactions are told apart by
    their ids themselves (a dictionary of them), not by a hash: a unit decides outcomes."""
    received, row_id = rows["received_us"].to_numpy(), rows["row_id"].to_numpy()
    unit_us, unit_row = received.copy(), row_id.copy()
    in_txn = rows["txn_id"].is_valid().to_numpy(zero_copy_only=False)
    if in_txn.any():
        members = np.flatnonzero(in_txn)
        txn = pc.dictionary_encode(rows["txn_id"].filter(in_txn).combine_chunks()).indices.to_numpy()
        # by transaction, then instant, then row_id: the last of each transaction is its commit point
        order = np.lexsort((row_id[members], received[members], txn))
        last = order[np.r_[txn[order][1:] != txn[order][:-1], True]]  # one per transaction, by its code
        commit = members[last]
        unit_us[members], unit_row[members] = received[commit][txn], row_id[commit][txn]
    return unit_us, unit_row


@dataclass(frozen=True)
class Ranks:
    """Each message's units and ranks, in the order of the rows ranked, for the driver's verdicts
    (driver_verdicts.py), and how many messages are in contested units (``rank``)."""

    contested: int
    row_id: np.ndarray
    keyed: np.ndarray         # the message has a cache
    cache_hash: np.ndarray    # cache_hash(), 0 where not keyed
    address_hash: np.ndarray  # address_hash()
    unit_us: np.ndarray
    in_contested: np.ndarray  # its unit is contested
    free_rank: np.ndarray     # 0 where not keyed; 32 bits, as RANKS_SCHEMA's
    contested_rank: np.ndarray


def rank(rows: pa.Table, met_hashes: np.ndarray, quiet: np.ndarray | None = None) -> tuple[pa.Table, Ranks] | None:
    """The ranks of ``rows`` (``COLLECTED``: every valid message of the batch, no message id
    repeated), by line for Spark (RANKS_SCHEMA, ``units``) and by message for the driver; None
    where they do not fit a list column. ``met_hashes``: the key hashes of the parent's entries
    (and left keys, and named queue entries) that the batch's keys have; ``quiet``: which rows
    have a quiet sender (``quiet_senders``; None: no row)."""
    row_id = rows["row_id"].to_numpy()
    keyed = rows["key_hash"].is_valid().to_numpy(zero_copy_only=False)
    key = pc.fill_null(rows["key_hash"], 0).to_numpy()
    repeated = np.union1d(repeated_values(rows["key_hash"]), met_hashes)
    # a unit is contested when one of its messages' keys repeats; a unit is its commit point's row
    hit = keyed & np.isin(key, repeated)
    unit_us, unit_row = positions(rows)
    _, unit = np.unique(unit_row, return_inverse=True)
    contested = (np.bincount(unit, weights=hit) > 0)[unit]
    # ranks in unit order within each cache: count_if over rows up to the current one
    cache = pc.fill_null(rows["cache_hash"], 0).to_numpy()
    order_keys = [rows["row_id"].to_numpy(), rows["received_us"].to_numpy(), unit_row, unit_us]
    order = np.flatnonzero(keyed)[np.lexsort([k[keyed] for k in order_keys] + [cache[keyed]])]
    free_rank, contested_rank = np.zeros(len(rows), np.int64), np.zeros(len(rows), np.int64)
    if len(order):
        in_cache = cache[order]
        first = np.r_[True, in_cache[1:] != in_cache[:-1]]  # the first message of each cache
        for counted, out in ((~contested[order], free_rank), (contested[order], contested_rank)):
            running = np.cumsum(counted)
            before = running - counted  # counted before each message
            out[order] = running - np.maximum.accumulate(np.where(first, before, 0))
    quiet = np.zeros(len(rows), bool) if quiet is None else quiet
    ranks = _by_line(row_id, {"unit_us": unit_us, "unit_row": unit_row, "contested": contested, "quiet": quiet,
                              "free_rank": free_rank, "contested_rank": contested_rank}, keyed)
    if ranks is None:
        return None
    return ranks, Ranks(int(contested.sum()), row_id, keyed, cache, rows["address_hash"].to_numpy(), unit_us,
                        contested, free_rank.astype(np.int32), contested_rank.astype(np.int32))


def _by_line(row_id: np.ndarray, values: dict[str, np.ndarray], keyed: np.ndarray) -> pa.Table | None:
    """RANKS_SCHEMA's rows: ``values`` (by column) scattered to their messages' lines, in blocks
    (line_lookup.blocks). A line without a message is null, and so are the ranks of a message
    without a key."""
    keys = line_lookup.blocks(row_id)
    size = len(keys) * line_lookup.BLOCK_LINES
    if size > _MAX_ELEMENTS:
        return None
    at = line_lookup.places(row_id, keys)
    present, known = np.zeros(size, bool), np.zeros(size, bool)
    present[at], known[at] = True, keyed
    lists = {}
    for name, column in values.items():
        line = np.zeros(size, RANKS_SCHEMA.field(name).type.value_type.to_pandas_dtype())
        line[at] = column
        lists[name] = line_lookup.block_lists(line, known if name in _KEYED else present, len(keys))
    return pa.table({"block": pa.array(keys, pa.int64()), **lists}, schema=RANKS_SCHEMA)


def contested_keys(stream: pa.Table) -> pa.Table:
    """``transforms.batch_keys`` of the contested messages (KEY_COUNTS_SCHEMA), from the kernel's
    ``stream`` (transforms.decision_stream) that the driver holds: every contested message is in
    it, and so is every message of a key that repeats or that the parent holds; the passive ones
    (uncontested, of Apama caches) are not counted."""
    messages = stream.filter(pc.and_(pc.and_(pc.equal(stream["phase"], kernel.MESSAGE_PHASE),
                                             stream["cache"].is_valid()), pc.invert(stream["passive"])))
    counted = messages.group_by(["cache", "dedup_key"]).aggregate([([], "count_all")])
    return counted.select(["cache", "dedup_key", "count_all"]).rename_columns(KEY_COUNTS_SCHEMA.names).cast(
        KEY_COUNTS_SCHEMA)


def contested_verdicts(stream: pa.Table, decisions: pa.Table, windows: Mapping[str, CacheWindow]) -> pa.Table:
    """The kernel's verdicts of the contested messages with their keys, units and instants
    (driver_audit.VERDICT_COLUMNS, as transforms.verdicts gives them), from its ``stream``
    (transforms.decision_stream) and its output (kernel.OUTPUT_SCHEMA) that the driver holds:
    what the window-miss audit reads of the verdicts is among them. A message of a key that
    repeats, or that the parent's entries or record hold, is contested, and so is every message
    of its transaction (``_ranks``); the passive ones (uncontested, of Apama caches) are not."""
    messages = stream.filter(pc.and_(pc.equal(stream["phase"], kernel.MESSAGE_PHASE), pc.invert(stream["passive"])))
    verdicts = kernel.rows_of(decisions, kernel.VERDICT).select(["row_id", "outcome", "cache_seq"])
    joined = messages.select(["row_id", "unit_row", "unit_us", "cache", "dedup_key"]).join(
        verdicts, "row_id", join_type="inner")
    # an acceptance on a time or Apama cache enters at the later of its unit's instant and the
    # cache's time before the batch (§8.4)
    clocks = {name: w.clock_us for name, w in windows.items() if w.timed}
    if not clocks:
        return joined.append_column("received_at_us", pa.nulls(joined.num_rows, pa.int64()))
    entered = [None if seq is None or cache not in clocks else max(unit_us, unit_us if clocks[cache] is None
                                                                   else clocks[cache])
               for cache, seq, unit_us in zip(joined["cache"].to_pylist(), joined["cache_seq"].to_pylist(),
                                              joined["unit_us"].to_pylist(), strict=True)]
    return joined.append_column("received_at_us", pa.array(entered, pa.int64()))


def queued_acceptances(delivered: DataFrame, sequential: list[str], quiet_hashes: DataFrame,
                       kernel_seqs: DataFrame, batch_id: str) -> DataFrame:
    """transforms.acceptances' rows with a ``queue`` (``acceptances(...).filter(queue is not null)``),
    from the ``delivered`` output's rows instead of the verdicts: the acceptances in a quiet
    sender's queue are the uncontested messages of the ``sequential`` (Apama) caches whose sender
    is quiet (``quiet_hashes``' ``sender_hash``, distinct: the same hashes the units were marked
    quiet by, ``quiet_senders``); every such message is delivered with a cache_seq, and the
    contested ones among the delivered are those the kernel numbered (``kernel_seqs``: ``cache``,
    ``cache_seq`` of the kernel's acceptances, distinct). Both small sides are the caller's to
    broadcast. Made from the verdicts, the snapshot planned them again over every unit for these
    alone (docs/benchmarks.md)."""
    quiet = quiet_hashes.select(F.col(SENDER).alias("_quiet"))
    return (delivered.filter(F.col("cache_seq").isNotNull() & is_in("cache", sequential))
            .join(quiet, sender_hash() == F.col("_quiet"), "left_semi")
            .join(kernel_seqs, ["cache", "cache_seq"], "left_anti")
            .select("cache", "dedup_key", "cache_seq", "message_id", "address",
                    F.lit(batch_id).alias("accepted_batch_id"), F.col("entered_at_us").alias("received_at_us"),
                    "source_id", F.lit(kernel.SENDER_QUEUE).alias("queue")))


def named_entries(parent_apama: DataFrame, batch_hashes: DataFrame, quiet_hashes: DataFrame) -> DataFrame:
    """transforms.named_entries by hash: the parent's Apama entries with ``named`` (the batch's
    keys have its key's hash: ``batch_hashes``, ``key_hash``, distinct) and ``resting`` (in a quiet
    sender's queue, ``quiet_hashes``' ``sender_hash``, distinct, and not named). A shared hash
    only names more entries, or leaves fewer resting: the kernel sees them."""
    named = batch_hashes.select(F.col("key_hash").alias("_named"))
    quiet = quiet_hashes.select(F.col(SENDER).alias("_quiet"))
    return (parent_apama.join(named, key_hash() == F.col("_named"), "left")
            .join(quiet, sender_hash() == F.col("_quiet"), "left")
            .withColumn("named", F.col("_named").isNotNull())
            .withColumn("resting", (F.col("queue") == kernel.SENDER_QUEUE) & F.col("_quiet").isNotNull()
                        & ~F.col("named"))
            .drop("_named", "_quiet"))


def units(messages: DataFrame, ranks: DataFrame, sequential: list[str]) -> DataFrame:
    """``transforms.rank_in_caches(transforms.assign_units(transforms.mark_repeated(...)))``'s
    rows: ``messages`` (transforms.KEY_COLUMNS) with ``unit_us``, ``unit_row``, ``contested``,
    ``quiet``, ``free_rank`` and ``contested_rank`` found by line in ``ranks`` (``rank``, few
    rows: broadcast), and ``sequential``: its cache is one of ``sequential`` (Apama caches)."""
    line = line_lookup.in_block(F.col("row_id"))
    at = lambda column: F.element_at(F.col(column), line)  # noqa: E731
    in_sequential = F.coalesce(is_in("cache", sequential), F.lit(False)) if sequential else F.lit(False)
    return (messages
            .join(F.broadcast(ranks.withColumnRenamed("block", "_block")),
                  line_lookup.block_of(F.col("row_id")) == F.col("_block"))
            .select(*messages.columns, at("unit_us").alias("unit_us"), at("unit_row").alias("unit_row"),
                    in_sequential.alias("sequential"),
                    (in_sequential & at("quiet")).alias("quiet"),
                    at("contested").alias("contested"), at("free_rank").cast("long").alias("free_rank"),
                    at("contested_rank").cast("long").alias("contested_rank")))
