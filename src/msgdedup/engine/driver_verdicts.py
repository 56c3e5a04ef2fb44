"""Every message's verdict of a batch ranked on the driver whose kernel ran there too, in numpy:
the tally, the delivered messages' numbers by line and the dropped ones' verdicts.

``transforms.verdicts`` gives every message its verdict in Spark, a pass over every unit; the batch
then ran two jobs over those verdicts only to bring something back to the driver: the tally (an
aggregation of every verdict, ``transforms.verdict_counts``) and the delivered messages' numbers
(every delivered verdict collected, for line_lookup.by_line). But the driver already holds what a
verdict is made of, where the units were ranked on it (unit_ranks.rank: each message's unit,
whether it is contested and its ranks) and the kernel decided the contested units on it (their
verdicts and ``accepted_after``). So ``decide`` numbers the uncontested messages as
``transforms.verdicts`` does, takes the contested ones' from the kernel, and counts them by
(address, cache, outcome, reason); the dropped ones' verdicts are the kernel's, a few rows. Spark
still computes the verdicts once, for what needs the messages' keys (the new snapshot and the
window-miss audit); nothing is collected from them.

The tally needs each message's address, which the driver knows by its 32-bit hash
(unit_ranks.address_hash): used only where the batch's addresses' hashes are distinct, like the
caches' (batch._names_by_hash). The engine-vs-model property tests run this plan
("small") and the one it replaces ("by line": the kernel in a Spark task).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import from_arrow_schema

from msgdedup.engine import kernel, line_lookup
from msgdedup.engine.transforms import QUARANTINED
from msgdedup.engine.unit_ranks import Ranks
from msgdedup.engine.windows import CacheWindow

# What the dropped output takes of its verdicts (transforms.verdicts_for(..., DROPPED)).
DROPPED_SCHEMA = pa.schema([("row_id", pa.int64()), ("reason", pa.string()), ("duplicate_of", pa.string())])
DROPPED_SPARK_SCHEMA = from_arrow_schema(DROPPED_SCHEMA)
# Between a verdict's outcome and reason, to tell the kernel's few kinds of verdict apart at once.
_APART = "\x00"


@dataclass(frozen=True)
class Verdicts:
    """What the batch needs of its verdicts on the driver."""

    tally: list[dict]       # transforms.verdict_counts' rows
    dropped: pa.Table       # DROPPED_SCHEMA
    lookup: pa.Table | None  # line_lookup.LOOKUP_SCHEMA (None: not asked for, or it does not fit)


def decide(ranks: Ranks, decided: pa.Table, windows: Mapping[str, CacheWindow], caches: Mapping[int, str],
           addresses: Mapping[int, str], copies: int, lookup: bool) -> Verdicts:
    """The verdicts of ``ranks``' messages: ``decided`` is the kernel's output (kernel.OUTPUT_SCHEMA)
    for their contested units, ``caches`` and ``addresses`` name the hashes (unit_ranks.cache_hash,
    address_hash), ``copies`` counts the repeated message ids left out of ``ranks`` (quarantined);
    ``lookup``: also the delivered messages' numbers by line (line_lookup.by_line)."""
    verdict = decided.filter(pc.equal(decided["kind"], kernel.VERDICT))
    n, keyed = len(ranks.row_id), ranks.keyed
    # the kernel's verdict of every contested message, found by row_id
    contested = np.flatnonzero(ranks.in_contested)
    by_row = np.argsort(verdict["row_id"].to_numpy())
    kernel_rows = verdict["row_id"].to_numpy()[by_row]
    at = np.minimum(np.searchsorted(kernel_rows, ranks.row_id[contested]), max(len(kernel_rows) - 1, 0))
    if len(contested) and (not len(kernel_rows) or (kernel_rows[at] != ranks.row_id[contested]).any()):
        raise RuntimeError("the kernel gave no verdict for a message of a contested unit")
    mine = by_row[at] if len(contested) else np.empty(0, np.int64)  # their rows of ``verdict``

    # per cache, by its index in ``names``: the counter and time before the batch
    hashes = np.array(sorted(caches), np.int64)
    names = [caches[h] for h in hashes.tolist()]
    cache = np.zeros(n, np.int64)
    cache[keyed] = np.searchsorted(hashes, ranks.cache_hash[keyed])
    last_seq = np.array([windows[name].last_seq for name in names] + [0], np.int64)
    timed = np.array([windows[name].timed for name in names] + [False])
    has_clock = np.array([windows[name].clock_us is not None for name in names] + [False])
    clock_us = np.array([windows[name].clock_us or 0 for name in names] + [0], np.int64)

    # cache_seq (transforms.verdicts): an uncontested message with a key is accepted, numbered
    # after its cache's counter, the uncontested acceptances up to it and the contested ones the
    # kernel reported at the contested message ranked just before it in its cache; a contested
    # message's is the kernel's
    reported = verdict.filter(verdict["cache"].is_valid())
    reported_at = (pc.index_in(reported["cache"], value_set=pa.array(names, pa.string())).to_numpy().astype(np.int64)
                   << 32) | reported["contested_rank"].to_numpy()
    by_rank = np.argsort(reported_at)
    reported_at = reported_at[by_rank]
    accepted_after = pc.fill_null(reported["accepted_after"], 0).to_numpy()[by_rank]
    free = np.flatnonzero(keyed & ~ranks.in_contested)
    after = np.zeros(len(free), np.int64)
    if len(reported_at):
        wanted = (cache[free] << 32) | ranks.contested_rank[free]
        found = np.minimum(np.searchsorted(reported_at, wanted), len(reported_at) - 1)
        hit = reported_at[found] == wanted
        after[hit] = accepted_after[found[hit]]
    seq, has_seq = np.zeros(n, np.int64), np.zeros(n, bool)
    seq[free], has_seq[free] = last_seq[cache[free]] + ranks.free_rank[free] + after, True
    seq[contested] = pc.fill_null(verdict["cache_seq"], 0).to_numpy()[mine]
    has_seq[contested] = verdict["cache_seq"].is_valid().to_numpy(zero_copy_only=False)[mine]
    # an acceptance on a time or Apama cache enters at the later of its unit's instant and the
    # cache's time before the batch (§8.4)
    entered = has_seq & keyed & timed[cache]
    entered_us = np.where(has_clock[cache], np.maximum(ranks.unit_us, clock_us[cache]), ranks.unit_us)

    # the outcome and reason of each message, as an index in ``kinds``: every uncontested message
    # is delivered, a contested one as the kernel says
    pairs = pc.dictionary_encode(pc.binary_join_element_wise(
        verdict["outcome"], pc.fill_null(verdict["reason"], ""), _APART).combine_chunks())
    named = [tuple(pair.split(_APART)) for pair in pairs.dictionary.to_pylist()]
    kinds = [(kernel.DELIVERED, None)] + [(o, r or None) for o, r in named if (o, r) != (kernel.DELIVERED, "")]
    kernel_kind = np.array([kinds.index((o, r or None)) for o, r in named], np.int64)[pairs.indices.to_numpy()]
    kind = np.zeros(n, np.int64)
    kind[contested] = kernel_kind[mine]
    tally = _tally(pa.table({"address": ranks.address_hash, "cache": pa.array(cache, mask=~keyed),
                             "kind": kind, "entered": pa.array(entered_us, mask=~entered)}),
                   addresses, names, kinds)
    if copies:
        tally.append({"address": None, "cache": None, "outcome": QUARANTINED, "reason": None, "count": copies,
                      "clock_us": None})

    dropped = verdict.filter(pc.equal(verdict["outcome"], kernel.DROPPED)).select(DROPPED_SCHEMA.names)
    numbers = None
    if lookup:
        delivered = np.flatnonzero(np.isin(kind, [i for i, (o, _) in enumerate(kinds) if o == kernel.DELIVERED]))
        numbers = line_lookup.by_line(pa.table({
            "row_id": ranks.row_id[delivered],
            "seq_in_batch": pa.array((seq - last_seq[cache])[delivered], mask=~has_seq[delivered]),
            "received_at_us": pa.array(entered_us[delivered], mask=~entered[delivered]),
        }))
    return Verdicts(tally, dropped.cast(DROPPED_SCHEMA), numbers)


def _tally(messages: pa.Table, addresses: Mapping[int, str], caches: list[str],
           kinds: list[tuple[str, str | None]]) -> list[dict]:
    """transforms.verdict_counts of ``messages`` given by codes: their ``address`` hash, ``cache``
    (an index in ``caches``; null: none), ``kind`` (an index in ``kinds``: outcome and reason) and
    the instant each ``entered`` a time or Apama cache with (null: none)."""
    grouped = messages.group_by(["address", "cache", "kind"]).aggregate([([], "count_all"), ("entered", "max")])
    columns = (grouped[name].to_pylist() for name in ("address", "cache", "kind", "count_all", "entered_max"))
    return [{"address": addresses[a], "cache": None if c is None else caches[c], "outcome": kinds[k][0],
             "reason": kinds[k][1], "count": count, "clock_us": latest}
            for a, c, k, count, latest in zip(*columns, strict=True)]
