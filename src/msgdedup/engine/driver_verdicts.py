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
# A cache without a time before the batch (§8.4): any instant is later.
_NO_CLOCK = np.iinfo(np.int64).min
# Messages taken at a time (``decide``).
_CHUNK = 1 << 17
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
    ``lookup``: also the delivered messages' numbers by line (line_lookup.by_line).

    The messages are taken ``_CHUNK`` at a time: the driver holds the ranks meanwhile, and a few
    whole-batch temporaries of 8 bytes a message were 85 MiB more at 1M, at the time of a batch's
    peak memory (docs/benchmarks.md)."""
    names = [caches[h] for h in sorted(caches)]
    verdicts = _KernelVerdicts(kernel.rows_of(decided, kernel.VERDICT), names, windows)
    cache_hashes = np.array(sorted(caches), np.int64)
    timed = np.array([windows[name].timed for name in names] + [False])
    clock_us = np.array([_NO_CLOCK if windows[name].clock_us is None else windows[name].clock_us
                         for name in names] + [_NO_CLOCK], np.int64)
    delivered_kinds = [i for i, (outcome, _) in enumerate(verdicts.kinds) if outcome == kernel.DELIVERED]
    counts: dict[int, list] = {}  # _count's code -> [messages, the latest instant one entered with]
    numbered = []
    for start in range(0, len(ranks.row_id), _CHUNK):
        part = slice(start, start + _CHUNK)
        keyed = ranks.keyed[part]
        # each message's cache, by its index in ``names`` (len(names): none)
        cache = np.full(len(keyed), len(names), np.int32)
        cache[keyed] = np.searchsorted(cache_hashes, ranks.cache_hash[part][keyed])
        seq, has_seq, kind = verdicts.of(ranks, part, cache)
        # an acceptance on a time or Apama cache enters at the later of its unit's instant and the
        # cache's time before the batch (§8.4)
        entered = has_seq & timed[cache] if timed.any() else None
        entered_us = None if entered is None else np.maximum(ranks.unit_us[part], clock_us[cache])
        _count(counts, ranks.address_hash[part], cache, kind, entered_us, entered)
        if lookup:
            delivered = np.isin(kind, delivered_kinds)
            columns = {"row_id": pa.array(ranks.row_id[part][delivered]),
                       "seq_in_batch": pa.array(seq[delivered], mask=~has_seq[delivered])}
            if entered is not None:
                columns["received_at_us"] = pa.array(entered_us[delivered], mask=~entered[delivered])
            numbered.append(pa.record_batch(columns))
    tally = []
    for code, (count, latest) in counts.items():
        cache, (outcome, reason) = (code >> 8) & 0xFFFFFF, verdicts.kinds[code & 0xFF]
        tally.append({"address": addresses[code >> 32], "cache": None if cache == len(names) else names[cache],
                      "outcome": outcome, "reason": reason, "count": count, "clock_us": latest})
    if copies:
        tally.append({"address": None, "cache": None, "outcome": QUARANTINED, "reason": None, "count": copies,
                      "clock_us": None})
    numbers = line_lookup.by_line(pa.Table.from_batches(numbered)) if lookup and numbered else None
    return Verdicts(tally, verdicts.dropped(), numbers)


class _KernelVerdicts:
    """The kernel's verdicts of a batch's contested messages, by row_id, and what they tell of its
    uncontested ones: ``accepted_after`` of each contested message, by cache and contested rank."""

    def __init__(self, verdict: pa.Table, names: list[str], windows: Mapping[str, CacheWindow]) -> None:
        self.verdict = verdict
        by_row = np.argsort(verdict["row_id"].to_numpy())
        self.row_id = verdict["row_id"].to_numpy()[by_row]
        # the outcome and reason of each, as an index in ``kinds``: every uncontested message is
        # delivered, a contested one as the kernel says
        pairs = pc.dictionary_encode(pc.binary_join_element_wise(
            verdict["outcome"], pc.fill_null(verdict["reason"], ""), _APART).combine_chunks())
        named = [tuple(pair.split(_APART)) for pair in pairs.dictionary.to_pylist()]
        self.kinds = [(kernel.DELIVERED, None)] + [(o, r or None) for o, r in named if (o, r) != (kernel.DELIVERED, "")]
        self.kind = np.array([self.kinds.index((o, r or None)) for o, r in named], np.int8)[
            pairs.indices.to_numpy()][by_row]
        # the number in the batch of the acceptances it made: its cache_seq less its cache's
        # counter before the batch (line_lookup's ``seq_in_batch``)
        cache = pc.fill_null(pc.index_in(verdict["cache"], value_set=pa.array(names, pa.string())),
                             len(names)).to_numpy().astype(np.int64)  # len(names): no cache
        last_seq = np.array([windows[name].last_seq for name in names] + [0], np.int64)
        self.seq = (pc.fill_null(verdict["cache_seq"], 0).to_numpy() - last_seq[cache])[by_row]
        self.has_seq = verdict["cache_seq"].is_valid().to_numpy(zero_copy_only=False)[by_row]
        keyed = verdict["cache"].is_valid()
        at = (cache[keyed.to_numpy(zero_copy_only=False)] << 32) | verdict["contested_rank"].filter(keyed).to_numpy()
        by_rank = np.argsort(at)
        self.reported_at = at[by_rank]
        self.accepted_after = pc.fill_null(verdict["accepted_after"].filter(keyed), 0).to_numpy()[by_rank]

    def of(self, ranks: Ranks, part: slice, cache: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each of ``ranks``' messages in ``part`` (in ``cache``, an index): its acceptance's
        number in the batch, whether it has one, and its kind of verdict (an index in ``kinds``),
        as transforms.verdicts gives them. An uncontested message with a key is accepted after the
        uncontested acceptances up to it and the contested ones the kernel reported at the
        contested message ranked just before it in its cache; a contested message is the kernel's."""
        contested = ranks.in_contested[part]
        free = ranks.keyed[part] & ~contested
        seq = np.where(free, ranks.free_rank[part].astype(np.int64), 0)
        if len(self.reported_at):
            wanted = (cache[free].astype(np.int64) << 32) | ranks.contested_rank[part][free]
            found = np.minimum(np.searchsorted(self.reported_at, wanted), len(self.reported_at) - 1)
            seq[free] += np.where(self.reported_at[found] == wanted, self.accepted_after[found], 0)
        rows = ranks.row_id[part][contested]
        mine = np.minimum(np.searchsorted(self.row_id, rows), max(len(self.row_id) - 1, 0))
        if len(rows) and (not len(self.row_id) or (self.row_id[mine] != rows).any()):
            raise RuntimeError("the kernel gave no verdict for a message of a contested unit")
        seq[contested], has_seq, kind = self.seq[mine], free, np.zeros(len(free), np.int8)
        has_seq[contested], kind[contested] = self.has_seq[mine], self.kind[mine]
        return seq, has_seq, kind

    def dropped(self) -> pa.Table:
        return self.verdict.filter(pc.equal(self.verdict["outcome"], kernel.DROPPED)).select(
            DROPPED_SCHEMA.names).cast(DROPPED_SCHEMA)


def _count(counts: dict[int, list], address: np.ndarray, cache: np.ndarray, kind: np.ndarray,
           entered_us: np.ndarray | None, entered: np.ndarray | None) -> None:
    """Add messages to ``counts`` (transforms.verdict_counts by a 64-bit code: the ``address``
    hash, its sign kept, the ``cache``'s index and the ``kind``), and the latest instant each
    group's messages ``entered`` a time or Apama cache with (``entered_us``)."""
    code = (address.astype(np.int64) << 32) | (cache.astype(np.int64) << 8) | kind
    groups, group, sizes = np.unique(code, return_inverse=True, return_counts=True)
    latest = known = None
    if entered is not None:
        latest, known = np.full(len(groups), _NO_CLOCK), np.zeros(len(groups), bool)
        np.maximum.at(latest, group[entered], entered_us[entered])
        known[group[entered]] = True
    for i, (value, size) in enumerate(zip(groups.tolist(), sizes.tolist(), strict=True)):
        bucket = counts.setdefault(value, [0, None])
        bucket[0] += size
        if known is not None and known[i]:
            bucket[1] = int(latest[i]) if bucket[1] is None else max(bucket[1], int(latest[i]))
