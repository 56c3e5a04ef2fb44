"""The streaming decider: verdicts for messages that arrive in unit order.

Spark sorts the batch (parent snapshot entries first, then messages by unit position and arrival)
into one stream; this module walks it once, holding only the ID caches and the current unit in
memory. That keeps memory bounded by the cache sizes plus one transaction, whatever the batch or
history size, and it keeps the per-address logic a plain loop that later cache policies (time
windows, per-sender windows) can extend.

Each cache is an insertion-ordered dict ``key -> entry``: a key is in the cache iff it is one of
the last ``id_cache_size`` keys accepted on it, which an OrderedDict evicting from the front gives
in O(1) per message (the reference model scans a deque; the two are checked against each other).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterable, Iterator

import pyarrow as pa

from msgdedup.config import AddressSettings

SNAPSHOT_PHASE = 0
MESSAGE_PHASE = 1
END_PHASE = 2  # one marker row closes every stream, so the state is emitted even for no messages

DELIVERED = "delivered"
DROPPED = "dropped"
DUPLICATE = "duplicate"
TRANSACTION_REJECTED = "transaction_rejected"

VERDICT = "verdict"
ENTRY = "entry"
COUNTER = "counter"
DIGEST = "digest"

OUTPUT_SCHEMA = pa.schema([
    ("record_type", pa.string()),
    ("row_id", pa.int64()),
    ("outcome", pa.string()),
    ("reason", pa.string()),
    ("duplicate_of", pa.string()),
    ("cache", pa.string()),
    ("dedup_key", pa.string()),
    ("cache_seq", pa.int64()),
    ("message_id", pa.string()),
    ("address", pa.string()),
    ("accepted_batch_id", pa.string()),
    ("id_cache_size", pa.int64()),
    ("entries", pa.int64()),
    ("digest", pa.string()),
])

_FLUSH_ROWS = 8192


@dataclass(slots=True)
class Entry:
    seq: int
    message_id: str
    batch_id: str


class IdCache:
    """The last ``size`` accepted keys of one cache, and the sequence counter of acceptances."""

    __slots__ = ("size", "address", "last_seq", "entries")

    def __init__(self, size: int, address: str, last_seq: int = 0) -> None:
        self.size = size
        self.address = address
        self.last_seq = last_seq
        self.entries: OrderedDict[str, Entry] = OrderedDict()

    def restore(self, key: str, entry: Entry) -> None:
        """Load a snapshot entry (in sequence order); a shrunk cache keeps the newest."""
        self.entries[key] = entry
        self._evict()

    def accept(self, key: str, message_id: str, batch_id: str) -> int:
        self.last_seq += 1
        self.entries[key] = Entry(self.last_seq, message_id, batch_id)
        self._evict()
        return self.last_seq

    def _evict(self) -> None:
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)


def _record_batch(record_type: str, columns: tuple[str, ...], rows: list[tuple]) -> pa.RecordBatch:
    """Rows of one record type (tuples in ``columns`` order) as a batch of OUTPUT_SCHEMA."""
    n = len(rows)
    values = dict(zip(columns, zip(*rows))) if rows else {}
    arrays = []
    for field in OUTPUT_SCHEMA:
        if field.name == "record_type":
            arrays.append(pa.array([record_type] * n, field.type))
        elif field.name in values:
            arrays.append(pa.array(values[field.name], field.type))
        else:
            arrays.append(pa.nulls(n, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=OUTPUT_SCHEMA)


VERDICT_COLUMNS = ("row_id", "outcome", "reason", "duplicate_of", "cache", "cache_seq")
ENTRY_COLUMNS = ("cache", "dedup_key", "cache_seq", "message_id", "address", "accepted_batch_id")
COUNTER_COLUMNS = ("cache", "cache_seq", "address", "id_cache_size", "entries")


class Decider:
    """Walks the sorted stream; see the module docstring.

    This loop runs once per message in a single task, so it is written for speed: rows are plain
    tuples, a message outside a transaction is decided without building a unit, and verdicts are
    buffered as tuples and turned into Arrow columns once per flush.
    """

    def __init__(self, settings: AddressSettings, batch_id: str, counters: dict[str, dict]) -> None:
        self.settings = settings
        self.batch_id = batch_id
        self.caches: dict[str, IdCache] = {}
        for name, info in counters.items():
            self._cache(name, info["address"], info["last_seq"])
        self.verdicts: list[tuple] = []
        # the open transaction: (row_id, message_id, txn_id, address, cache, key) tuples
        self.unit: list[tuple] = []

    def _cache(self, name: str, address: str, last_seq: int = 0) -> IdCache:
        cache = self.caches.get(name)
        if cache is None:
            cache = IdCache(self.settings.id_cache_size(address), address, last_seq)
            self.caches[name] = cache
        return cache

    # -- the stream ---------------------------------------------------------------------------
    def run(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            c = batch.to_pydict()
            rows = zip(c["phase"], c["row_id"], c["message_id"], c["txn_id"], c["address"],
                       c["cache"], c["dedup_key"], c["cache_seq"], c["accepted_batch_id"])
            for phase, row_id, message_id, txn_id, address, cache, key, seq, accepted in rows:
                if phase == SNAPSHOT_PHASE:
                    self._cache(cache, address).restore(key, Entry(seq, message_id, accepted))
                elif phase == END_PHASE:
                    continue
                elif txn_id is None:
                    if self.unit:
                        self._decide_transaction()
                    self._decide_single(row_id, message_id, address, cache, key)
                else:
                    if self.unit and self.unit[-1][2] != txn_id:
                        self._decide_transaction()
                    self.unit.append((row_id, message_id, txn_id, address, cache, key))
            if len(self.verdicts) >= _FLUSH_ROWS:
                yield self._flush_verdicts()
        if self.unit:
            self._decide_transaction()
        if self.verdicts:
            yield self._flush_verdicts()
        yield from self._state_batches()

    def _flush_verdicts(self) -> pa.RecordBatch:
        batch = _record_batch(VERDICT, VERDICT_COLUMNS, self.verdicts)
        self.verdicts = []
        return batch

    # -- one unit (spec §4) ---------------------------------------------------------------------
    def _decide_single(self, row_id, message_id, address, cache_name, key) -> None:
        if cache_name is None:
            self.verdicts.append((row_id, DELIVERED, None, None, None, None))
            return
        cache = self.caches.get(cache_name) or self._cache(cache_name, address)
        hit = cache.entries.get(key)
        if hit is not None:
            self.verdicts.append((row_id, DROPPED, DUPLICATE, hit.message_id, cache_name, None))
        else:
            self.verdicts.append((row_id, DELIVERED, None, None, cache_name,
                                  cache.accept(key, message_id, self.batch_id)))

    def _decide_transaction(self) -> None:
        unit, self.unit = self.unit, []
        verdicts: list[tuple[str, str | None]] = []  # (reason or DELIVERED, duplicate_of)
        first_copy: dict[tuple[str, str], str] = {}
        cause = None
        for _, message_id, _, address, cache_name, key in unit:
            if cache_name is None:
                verdicts.append((DELIVERED, None))
                continue
            hit = self._cache(cache_name, address).entries.get(key)
            if hit is not None:
                verdicts.append((DUPLICATE, hit.message_id))
                cause = cause or message_id
                continue
            if (cache_name, key) in first_copy:
                # Same key twice in one transaction: the later copy is a duplicate (deviation).
                verdicts.append((DUPLICATE, first_copy[(cache_name, key)]))
            else:
                first_copy[(cache_name, key)] = message_id
                verdicts.append((DELIVERED, None))

        for (row_id, message_id, _, _, cache_name, key), (verdict, duplicate_of) in zip(unit, verdicts):
            if verdict == DELIVERED and cause is not None:
                verdict, duplicate_of = TRANSACTION_REJECTED, cause
            if verdict != DELIVERED:
                self.verdicts.append((row_id, DROPPED, verdict, duplicate_of, cache_name, None))
                continue
            seq = None
            if cache_name is not None:
                seq = self.caches[cache_name].accept(key, message_id, self.batch_id)
            self.verdicts.append((row_id, DELIVERED, None, None, cache_name, seq))

    # -- the snapshot ---------------------------------------------------------------------------
    def _state_batches(self) -> Iterator[pa.RecordBatch]:
        """The snapshot: every cache's entries, its counter and fill, and a digest of it all.

        The digest covers what a later batch inherits (entries and counters, caches in name
        order), so two runs leave the same state iff their digests match.
        """
        digest = hashlib.sha256()
        counters, entries = [], []
        for name in sorted(self.caches):
            cache = self.caches[name]
            counters.append((name, cache.last_seq, cache.address, cache.size, len(cache.entries)))
            digest.update(f"{name}\0{cache.last_seq}\n".encode())
            for key, entry in cache.entries.items():
                entries.append((name, key, entry.seq, entry.message_id, cache.address, entry.batch_id))
                digest.update(f"{key}\0{entry.seq}\0{entry.message_id}\n".encode())
                if len(entries) >= _FLUSH_ROWS:
                    yield _record_batch(ENTRY, ENTRY_COLUMNS, entries)
                    entries = []
        if entries:
            yield _record_batch(ENTRY, ENTRY_COLUMNS, entries)
        if counters:
            yield _record_batch(COUNTER, COUNTER_COLUMNS, counters)
        yield _record_batch(DIGEST, ("digest",), [(digest.hexdigest(),)])


def decide(batches: Iterable[pa.RecordBatch], settings: AddressSettings, batch_id: str,
           counters: dict[str, dict]) -> Iterator[pa.RecordBatch]:
    """mapInArrow entry point: the whole (single-partition) sorted stream in, verdicts out."""
    return Decider(settings, batch_id, counters).run(batches)
