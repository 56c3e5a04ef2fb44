"""The window-miss audit (docs/semantics.md §9) of a batch whose verdicts the driver holds:
``audit.summary(audit.window_misses(audit.audit_candidates(...)))`` in plain Python.

On Spark, the audit's ordered pass is one query over a few rows (the delivered messages of the
keys that can have an earlier acceptance, and the parent's entries of those keys), but planning
it and running its broadcasts and shuffle stages as jobs cost some 3-4 s of a 1M batch, about all
the audit cost there (docs/benchmarks.md, December 2). Where the driver holds the verdicts the
audit reads (a small batch decided on the driver: all of them; a batch whose kernel ran on the
driver: the contested messages', which hold every message of a key that repeats or that the
parent holds, and every message of such a message's transaction), it finds the misses itself,
the same way, from those verdicts and the parent's entries, collected (few rows).

Every delivered message with a key is looked at here, not only those of ``audit.audit_keys``: a
key that does not repeat and that the parent does not hold has no earlier acceptance, so it adds
no miss. The engine-vs-model property tests run this plan (the driver's, and "small": the kernel
on the driver) and audit.py's ("by line", "large": the kernel in a Spark task).
"""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise
from typing import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from msgdedup.config import AUDIT_COVERAGE, TIME
from msgdedup.engine import kernel

# What the audit reads of a verdict (transforms.VERDICT_COLUMNS).
VERDICT_COLUMNS = ["row_id", "outcome", "cache", "dedup_key", "cache_seq", "received_at_us", "unit_row"]
_KEYS = pa.schema([("cache", pa.string()), ("dedup_key", pa.string())])


def _plain_keys(table: pa.Table) -> pa.Table:
    """``table`` with its key columns as plain strings, so that its keys join another's."""
    for field in _KEYS:
        table = table.set_column(table.schema.get_field_index(field.name), field,
                                 table[field.name].cast(field.type))
    return table


def summary(verdicts: pa.Table, earlier: pa.Table, bounds: Iterable[tuple]) -> list[dict]:
    """``audit.summary``'s rows (``cache``, ``misses``, ``max_missed_by``, ``covering``), for
    ``audit.report``: the misses among ``verdicts`` (VERDICT_COLUMNS at least) against the
    parent's ``earlier`` acceptances of their keys (audit.ENTRY_COLUMNS: its snapshot's and its
    record's entries, disjoint in cache_seq), per audited cache of ``bounds``
    (audit.bounds_rows)."""
    bounded = {row[0]: row for row in bounds}  # cache -> (cache, policy, window, reach, ...)
    audited = pa.array(sorted(bounded), pa.string())
    delivered = _plain_keys(verdicts.filter(pc.and_(pc.equal(verdicts["outcome"], kernel.DELIVERED),
                                                    pc.is_in(verdicts["cache"], value_set=audited))))
    earlier = _plain_keys(earlier.filter(pc.is_in(earlier["cache"], value_set=audited)))
    # Only a key accepted twice (by the parent, or again in this batch) can have been missed; the
    # rest are filtered out in Arrow, so that few rows become Python objects.
    keys = list(_KEYS.names)
    counted = pa.concat_tables([delivered.select(keys), earlier.select(keys)])
    counted = counted.group_by(keys).aggregate([([], "count_all")])
    twice = counted.filter(pc.greater(counted["count_all"], 1)).select(keys)
    # A unit's lookup comes before its first acceptance on each cache: a transaction's is the
    # least cache_seq of its messages but its last (whose row_id is the unit's), a single
    # message's its own.
    in_txn = delivered.filter(pc.not_equal(delivered["unit_row"], delivered["row_id"]))
    txn_first = in_txn.group_by(["cache", "unit_row"]).aggregate([("cache_seq", "min")])
    mine = (delivered.select(VERDICT_COLUMNS).join(twice, keys, join_type="left semi")
            .join(txn_first, ["cache", "unit_row"], join_type="left outer"))
    # every acceptance of each key, the parent's and this batch's: (cache_seq, instant, the unit's
    # first acceptance: None for the parent's)
    history: dict[tuple, list[tuple]] = defaultdict(list)
    for e in earlier.join(twice, keys, join_type="left semi").to_pylist():
        history[e["cache"], e["dedup_key"]].append((e["cache_seq"], e["received_at_us"], None))
    for r in mine.to_pylist():
        first = r["cache_seq"] if r["cache_seq_min"] is None else r["cache_seq_min"]
        history[r["cache"], r["dedup_key"]].append((r["cache_seq"], r["received_at_us"], first))
    needed_by_cache: dict[str, list[int]] = defaultdict(list)
    missed_by: dict[str, int] = {}
    for (cache, _key), acceptances in history.items():
        if len(acceptances) < 2:
            continue
        _, policy, window, reach = bounded[cache][:4]
        acceptances.sort(key=lambda a: a[0])
        for previous, this in pairwise(acceptances):
            if this[2] is None:  # the parent's: not a miss of this batch
                continue
            if policy == TIME:
                needed = None if this[1] is None or previous[1] is None else this[1] - previous[1]
            else:
                needed = this[2] - previous[0]
            if needed is None or needed > reach:
                continue
            needed_by_cache[cache].append(needed)
            missed_by[cache] = max(missed_by.get(cache, needed - window), needed - window)
    found = []
    for cache, needed in sorted(needed_by_cache.items()):
        needed.sort()
        rank = -(-len(needed) * AUDIT_COVERAGE // 1)  # the nearest rank, as percentile_disc: ceil(coverage × n)
        found.append({"cache": cache, "misses": len(needed), "max_missed_by": missed_by[cache],
                      "covering": needed[int(rank) - 1]})
    return found
