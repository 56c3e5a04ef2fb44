"""A small batch decided on the driver: its key columns in, every message's verdict out.

A batch of a few thousand messages spent most of its time in Spark's fixed cost per job, not in
work: the plan of transforms.py (repeated message ids, repeated keys, units, ranks, the kernel's
stream, the verdicts) is about twenty Spark jobs, each paying its scheduling and planning, to
order rows one core orders in milliseconds. So when a batch's lines are few
(``planning.decides_on_driver``), the driver takes its narrow key columns (``key_columns``, from
the rows it parsed itself, planning.reads_on_driver; else collected, one job) and the parent's
entries those keys can meet (``entries_met``, from the parent's snapshot read here when it is
small, planning.snapshot_on_driver; else collected, one job), and decides here, in plain Python,
with the very kernel the Spark plan uses (``kernel.decide``): every unit goes through it, as if
every unit were contested, so no acceptance is numbered outside it. The outputs join these
verdicts back to the wide rows as they join the Spark plan's: in Spark, or on the driver where it
read the rows itself (driver_outputs.py).

The steps mirror transforms.py one for one (a message id's first copy in arrival order, a unit
at its transaction's last message, the order of spec §4); the engine-vs-model property tests run
both plans against the reference model.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from msgdedup.config import APAMA
from msgdedup.engine import kernel
from msgdedup.engine.transforms import KEY_COLUMNS, QUARANTINED, SNAPSHOT_ARROW_SCHEMA, VERDICT_COLUMNS
from msgdedup.engine.parsing import LINE_BITS, LINE_MASK
from msgdedup.engine.windows import CacheWindow
from msgdedup.envelope import BRIDGE_DUPLICATE_ID_PROPERTY, DUPLICATE_ID_PROPERTY
from msgdedup.keys import bridge_cache_name

# transforms.VERDICT_COLUMNS, typed: the verdicts as the outputs join them.
VERDICT_SCHEMA = pa.schema([
    ("row_id", pa.int64()), ("outcome", pa.string()), ("reason", pa.string()), ("duplicate_of", pa.string()),
    ("cache_seq", pa.int64()), ("error", pa.string()), ("message_id", pa.string()), ("address", pa.string()),
    ("cache", pa.string()), ("dedup_key", pa.string()), ("source_id", pa.string()),
    ("received_at_us", pa.int64()), ("queue", pa.string()), ("unit_row", pa.int64()),
])
assert VERDICT_SCHEMA.names == VERDICT_COLUMNS, "the verdicts of both plans have one shape"
assert KEY_COLUMNS[-2:] == ["cache", "dedup_key"], "key_columns adds the keys to the message's columns"
COPY_SCHEMA = pa.schema([("row_id", pa.int64()), ("error", pa.string())])
KEY_SCHEMA = pa.schema([("cache", pa.string()), ("dedup_key", pa.string())])
# What kernel.Decider reads of its stream (transforms.decision_stream's columns).
_STREAM_SCHEMA = pa.schema([
    ("phase", pa.int64()), ("unit_us", pa.int64()), ("unit_row", pa.int64()), ("received_us", pa.int64()),
    ("row_id", pa.int64()), ("message_id", pa.string()), ("txn_id", pa.string()), ("address", pa.string()),
    ("cache", pa.string()), ("dedup_key", pa.string()), ("cache_seq", pa.int64()), ("free_before", pa.int64()),
    ("contested_rank", pa.int64()), ("source_id", pa.string()), ("received_at_us", pa.int64()),
    ("queue", pa.string()), ("accepted_batch_id", pa.string()), ("passive", pa.bool_()),
])
_STREAM_ROWS = 8192


@dataclass(frozen=True)
class Decision:
    """What the Spark plan computes as frames, as Arrow tables the driver holds."""

    verdicts: pa.Table      # VERDICT_SCHEMA: one row per valid message (repeated message ids quarantined)
    copies: pa.Table        # COPY_SCHEMA: the repeated message ids and why (transforms.copies)
    repeated_keys: pa.Table  # KEY_SCHEMA: transforms.repeated_keys
    apama_entries: pa.Table  # kernel.OUTPUT_SCHEMA rows of kind ENTRY: the Apama caches' queues
    apama_clocks: dict[str, int | None]
    tally: list[dict]       # transforms.verdict_counts' rows


def decide(keys: pa.Table, entries: pa.Table | None, windows: Mapping[str, CacheWindow], batch_id: str,
           source_files: list[str]) -> Decision:
    """``keys``: the batch's valid messages (transforms.KEY_COLUMNS); ``entries``: the parent's
    entries the kernel needs (SNAPSHOT_COLUMNS: those the batch's keys meet, every entry of an
    Apama cache; None without a parent); ``source_files``: the batch's sorted file listing."""
    c = keys.to_pydict()
    rows = list(zip(c["row_id"], c["message_id"], c["address"], c["received_us"], c["txn_id"], c["source_id"],
                    c["cache"], c["dedup_key"], strict=True))
    messages, copies = _first_copies(rows, source_files)
    ordered = _in_unit_order(messages)
    stream = _stream(ordered, entries)
    out = kernel.decide_table(stream, windows, batch_id)
    verdicts = _verdicts(ordered, copies, kernel.rows_of(out, kernel.VERDICT), windows)
    return Decision(
        verdicts=verdicts,
        copies=pa.table({"row_id": [r for r, _ in copies], "error": [e for _, e in copies]}, schema=COPY_SCHEMA),
        repeated_keys=_repeated_keys(messages, entries, windows),
        apama_entries=kernel.rows_of(out, kernel.ENTRY),
        apama_clocks=kernel.clocks_of(out),
        tally=_tally(verdicts),
    )


def key_columns(parsed: pa.Table, domains: Mapping[str, tuple[str, bool]]) -> pa.Table:
    """parsing.with_cache_keys of the valid rows of ``parsed`` (parsing.PARSED_SCHEMA, as
    ``parsing.parse_on_driver`` gives it), as transforms.KEY_COLUMNS: a batch the driver parsed
    is decided here without a Spark job to compute its keys from the rows the driver holds.
    ``domains``: address -> (its cache's domain, whether it checks at all)."""
    valid = parsed.filter(pc.is_null(parsed["error"]))
    caches, keys = [], []
    for address, properties in zip(valid["address"].to_pylist(), valid["properties"].to_pylist(), strict=True):
        domain, checks = domains[address]
        values = dict(properties or ())
        bridge, duplicate_id = values.get(BRIDGE_DUPLICATE_ID_PROPERTY), values.get(DUPLICATE_ID_PROPERTY)
        if not checks:
            cache, key = None, None
        elif bridge is not None:  # a bridge's id is checked in a cache of its own, before a producer's
            cache, key = bridge_cache_name(domain), bridge
        else:
            cache, key = (domain if duplicate_id is not None else None), duplicate_id
        caches.append(cache)
        keys.append(key)
    columns = valid.select(KEY_COLUMNS[:-2])
    return columns.append_column("cache", pa.array(caches, pa.string())).append_column(
        "dedup_key", pa.array(keys, pa.string()))


def batch_keys(keys: pa.Table) -> pa.Table:
    """transforms.batch_keys without the counts: every (cache, dedup_key) of the batch once."""
    keyed = keys.select(["cache", "dedup_key"]).filter(pc.is_valid(keys["cache"]))
    return keyed.group_by(["cache", "dedup_key"]).aggregate([]).cast(KEY_SCHEMA)


def entries_met(snapshot: pa.Table, keys: pa.Table, apama: list[str]) -> pa.Table:
    """The parent's entries the kernel needs, from its snapshot read by the driver
    (transforms.SNAPSHOT_ARROW_SCHEMA, its carried caches): transforms.entries_met of the count
    and time caches' entries with the batch's keys (``batch_keys``), and every entry of an Apama
    cache (``apama``: their names)."""
    queued = pc.is_in(snapshot["cache"], value_set=pa.array(apama, pa.string()))
    met = snapshot.filter(pc.invert(queued)).join(keys, ["cache", "dedup_key"], join_type="left semi")
    return pa.concat_tables([met.select(SNAPSHOT_ARROW_SCHEMA.names), snapshot.filter(queued)])


def snapshot(verdicts: pa.Table, parent: pa.Table | None, apama: list[str],
             limits: Mapping[str, tuple[int | None, int | None]], apama_entries: pa.Table, batch_id: str) -> pa.Table:
    """transforms.snapshot of a batch decided here, from the parent's snapshot the driver read
    (``parent``: its carried caches, SNAPSHOT_ARROW_SCHEMA; None without a parent), so that the new
    ID cache is written without a Spark job: with a full cache, the parent's entries are most of
    a small batch's rows (a 20,000-message batch of the bench's history: 200,000 entries).

    ``verdicts``: ``decide``'s; ``apama``: the names of the Apama caches; ``limits``: per count or
    time cache its ``transforms.snapshot_limits`` (floor, oldest_us); ``apama_entries``: the
    kernel's ENTRY rows. As transforms.snapshot: this batch's acceptances and the parent's count
    and time entries within their cache's limits (SQL's logic of nulls: an unknown comparison
    keeps nothing), and the Apama caches' queues as the kernel reports them. (transforms.snapshot
    also takes the acceptances that stay in a quiet sender's queue without the kernel; in this
    plan the kernel sees every unit, so it reports those too.)"""
    accepted = verdicts.filter(pc.is_valid(verdicts["cache_seq"]))
    acceptances = pa.table({
        "cache": accepted["cache"], "dedup_key": accepted["dedup_key"], "cache_seq": accepted["cache_seq"],
        "message_id": accepted["message_id"], "address": accepted["address"],
        "accepted_batch_id": pa.repeat(pa.scalar(batch_id, pa.string()), accepted.num_rows),
        "received_at_us": accepted["received_at_us"],
        "source_id": pa.nulls(accepted.num_rows, pa.string()),  # a sender only beside a queue
        "queue": pa.nulls(accepted.num_rows, pa.string())}, schema=SNAPSHOT_ARROW_SCHEMA)
    entries = acceptances
    if parent is not None:
        counted = parent.filter(pc.invert(pc.is_in(parent["cache"], value_set=pa.array(apama, pa.string()))))
        entries = pa.concat_tables([acceptances, counted.cast(SNAPSHOT_ARROW_SCHEMA)])
    names = list(limits)
    limit = pc.index_in(entries["cache"], value_set=pa.array(names, pa.string()))  # null: no limits (Apama)
    floor = pc.take(pa.array([limits[n][0] for n in names], pa.int64()), limit)
    oldest = pc.take(pa.array([limits[n][1] for n in names], pa.int64()), limit)
    within = pc.and_kleene(
        pc.or_kleene(pc.is_null(floor), pc.greater(entries["cache_seq"], floor)),
        pc.or_kleene(pc.is_null(oldest), pc.greater_equal(entries["received_at_us"], oldest)))
    kept = entries.filter(pc.and_kleene(pc.is_valid(limit), within))
    return pa.concat_tables([kept, apama_entries.select(SNAPSHOT_ARROW_SCHEMA.names).cast(SNAPSHOT_ARROW_SCHEMA)])


def _first_copies(rows: list[tuple], source_files: list[str]) -> tuple[list[tuple], list[tuple[int, str]]]:
    """transforms.flag_duplicate_message_ids: a message id's first copy in arrival order is the
    message, the later ones are quarantined, naming the first."""
    first: dict[str, tuple[int, int]] = {}
    for row_id, message_id, _, received_us, *_ in rows:
        arrival = (received_us, row_id)
        if message_id not in first or arrival < first[message_id]:
            first[message_id] = arrival
    messages, copies = [], []
    for row in rows:
        row_id, message_id = row[0], row[1]
        first_row = first[message_id][1]
        if first_row == row_id:
            messages.append(row)
        else:
            file = source_files[first_row >> LINE_BITS]
            line = first_row & LINE_MASK
            copies.append((row_id, f"duplicate message_id '{message_id}' (first at {file}:{line})"))
    return messages, copies


def _in_unit_order(messages: list[tuple]) -> list[tuple[tuple, tuple[int, int]]]:
    """transforms.assign_units and the order of spec §4: each message with its unit's position
    (``unit_us``, ``unit_row``: its own, or its transaction's last message's), sorted by unit,
    then by arrival inside a transaction."""
    commit_points: dict[str, tuple[int, int]] = {}
    for row_id, _, _, received_us, txn_id, *_ in messages:
        if txn_id is not None:
            commit_points[txn_id] = max(commit_points.get(txn_id, (received_us, row_id)), (received_us, row_id))
    placed = [(m, commit_points[m[4]] if m[4] is not None else (m[3], m[0])) for m in messages]
    placed.sort(key=lambda p: (p[1], p[0][3], p[0][0]))
    return placed


def _stream(ordered: list[tuple[tuple, tuple[int, int]]], entries: pa.Table | None) -> list[pa.RecordBatch]:
    """transforms.decision_stream with every unit contested: the parent's entries, then every
    message in unit order, each ranked among its cache's messages (``contested_rank``) with no
    uncontested acceptance before it (``free_before`` 0)."""
    rank: Counter = Counter()
    columns: dict[str, list] = {name: [] for name in _STREAM_SCHEMA.names}
    if entries is not None:
        e = entries.to_pydict()
        n = entries.num_rows
        columns["phase"] += [kernel.SNAPSHOT_PHASE] * n
        for name in ("unit_us", "unit_row", "received_us", "row_id"):
            columns[name] += [0] * n
        for name in ("txn_id", "free_before", "contested_rank"):
            columns[name] += [None] * n
        columns["passive"] += [False] * n
        for name in ("message_id", "address", "cache", "dedup_key", "cache_seq", "source_id", "received_at_us",
                     "queue", "accepted_batch_id"):
            columns[name] += e[name]
    for (row_id, message_id, address, received_us, txn_id, source_id, cache, key), (unit_us, unit_row) in ordered:
        if cache is not None:
            rank[cache] += 1
        for name, value in (("phase", kernel.MESSAGE_PHASE), ("unit_us", unit_us), ("unit_row", unit_row),
                            ("received_us", received_us), ("row_id", row_id), ("message_id", message_id),
                            ("txn_id", txn_id), ("address", address), ("cache", cache), ("dedup_key", key),
                            ("cache_seq", None), ("free_before", 0 if cache is not None else None),
                            ("contested_rank", rank[cache] if cache is not None else None),
                            ("source_id", source_id), ("received_at_us", None), ("queue", None),
                            ("accepted_batch_id", None), ("passive", False)):
            columns[name].append(value)
    table = pa.table(columns, schema=_STREAM_SCHEMA)
    return table.to_batches(max_chunksize=_STREAM_ROWS)


def _verdicts(ordered: list[tuple[tuple, tuple[int, int]]], copies: list[tuple[int, str]], decided: pa.Table,
              windows: Mapping[str, CacheWindow]) -> pa.Table:
    """transforms.verdicts: the kernel's verdict of every message with its identity, the instant
    an acceptance enters a time or Apama cache with (the later of its unit's and the cache's time
    before the batch, §8.4), and the repeated message ids, quarantined."""
    d = decided.to_pydict()
    verdict_of = {row_id: (outcome, reason, duplicate_of, seq) for row_id, outcome, reason, duplicate_of, seq in zip(
        d["row_id"], d["outcome"], d["reason"], d["duplicate_of"], d["cache_seq"], strict=True)}
    columns: dict[str, list] = {name: [] for name in VERDICT_SCHEMA.names}
    for (row_id, message_id, address, _, _, source_id, cache, key), (unit_us, unit_row) in ordered:
        outcome, reason, duplicate_of, seq = verdict_of[row_id]
        entered = None
        if seq is not None and windows[cache].timed:
            clock = windows[cache].clock_us
            entered = unit_us if clock is None else max(unit_us, clock)
        for name, value in (("row_id", row_id), ("outcome", outcome), ("reason", reason),
                            ("duplicate_of", duplicate_of), ("cache_seq", seq), ("error", None),
                            ("message_id", message_id), ("address", address), ("cache", cache),
                            ("dedup_key", key), ("source_id", source_id), ("received_at_us", entered),
                            ("queue", None),  # the kernel reports every Apama entry here
                            ("unit_row", unit_row)):
            columns[name].append(value)
    for row_id, error in copies:
        for name in VERDICT_SCHEMA.names:
            columns[name].append({"row_id": row_id, "outcome": QUARANTINED, "error": error}.get(name))
    return pa.table(columns, schema=VERDICT_SCHEMA)


def _repeated_keys(messages: list[tuple], entries: pa.Table | None, windows: Mapping[str, CacheWindow]) -> pa.Table:
    """transforms.repeated_keys: keys that occur twice in the batch, or also in the parent's
    entries of a count or time cache."""
    occurs = Counter((m[6], m[7]) for m in messages if m[6] is not None)
    repeated = {key for key, n in occurs.items() if n > 1}
    if entries is not None:
        e = entries.to_pydict()
        repeated |= {(cache, key) for cache, key in zip(e["cache"], e["dedup_key"], strict=True)
                     if windows[cache].policy != APAMA}
    keys = sorted(repeated)
    return pa.table({"cache": [k[0] for k in keys], "dedup_key": [k[1] for k in keys]}, schema=KEY_SCHEMA)


def _tally(verdicts: pa.Table) -> list[dict]:
    """transforms.verdict_counts: verdicts counted by (address, cache, outcome, reason), with the
    latest instant a key entered each cache with."""
    v = verdicts.to_pydict()
    counts: dict[tuple, list] = {}
    for group, entered in zip(zip(v["address"], v["cache"], v["outcome"], v["reason"], strict=True),
                              v["received_at_us"], strict=True):
        bucket = counts.setdefault(group, [0, None])
        bucket[0] += 1
        if entered is not None and (bucket[1] is None or entered > bucket[1]):
            bucket[1] = entered
    return [{"address": a, "cache": c, "outcome": o, "reason": r, "count": n, "clock_us": clock}
            for (a, c, o, r), (n, clock) in counts.items()]
