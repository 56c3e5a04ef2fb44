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

# The Spark DDL of OUTPUT_SCHEMA, for mapInArrow.
OUTPUT_DDL = (
    "record_type string, row_id long, outcome string, reason string, duplicate_of string, "
    "cache string, dedup_key string, cache_seq long, message_id string, address string, "
    "accepted_batch_id string, id_cache_size long, entries long, digest string"
)

_FLUSH_ROWS = 8192


@dataclass
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


class _Output:
    """Column buffers flushed as Arrow record batches."""

    def __init__(self) -> None:
        self.columns = {name: [] for name in OUTPUT_SCHEMA.names}
        self.rows = 0

    def add(self, **values) -> None:
        for name, column in self.columns.items():
            column.append(values.get(name))
        self.rows += 1

    def flush(self, force: bool = False) -> Iterator[pa.RecordBatch]:
        if self.rows and (force or self.rows >= _FLUSH_ROWS):
            yield pa.RecordBatch.from_pydict(self.columns, schema=OUTPUT_SCHEMA)
            self.columns = {name: [] for name in OUTPUT_SCHEMA.names}
            self.rows = 0


class Decider:
    """Walks the sorted stream; see the module docstring."""

    def __init__(self, settings: AddressSettings, batch_id: str, counters: dict[str, dict]) -> None:
        self.settings = settings
        self.batch_id = batch_id
        self.caches: dict[str, IdCache] = {}
        for name, info in counters.items():
            self._cache(name, info["address"], info["last_seq"])
        self.out = _Output()
        self.unit: list[dict] = []

    def _cache(self, name: str, address: str, last_seq: int = 0) -> IdCache:
        cache = self.caches.get(name)
        if cache is None:
            cache = IdCache(self.settings.id_cache_size(address), address, last_seq)
            self.caches[name] = cache
        return cache

    # -- the stream ---------------------------------------------------------------------------
    def run(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            columns = batch.to_pydict()
            for i, phase in enumerate(columns["phase"]):
                if phase == SNAPSHOT_PHASE:
                    self._cache(columns["cache"][i], columns["address"][i]).restore(
                        columns["dedup_key"][i],
                        Entry(columns["cache_seq"][i], columns["message_id"][i], columns["accepted_batch_id"][i]),
                    )
                    continue
                row = {name: columns[name][i] for name in ("row_id", "message_id", "txn_id", "address", "cache", "dedup_key")}
                if self.unit and (row["txn_id"] is None or row["txn_id"] != self.unit[-1]["txn_id"]):
                    self._decide_unit()
                self.unit.append(row)
                if row["txn_id"] is None:
                    self._decide_unit()
            yield from self.out.flush()
        if self.unit:
            self._decide_unit()
        self._emit_state()
        yield from self.out.flush(force=True)

    # -- one unit (spec §4) ---------------------------------------------------------------------
    def _decide_unit(self) -> None:
        unit, self.unit = self.unit, []
        verdicts: list[tuple[str, str | None]] = []  # (reason or DELIVERED, duplicate_of)
        first_copy: dict[tuple[str, str], str] = {}
        cause = None
        for row in unit:
            cache_name = row["cache"]
            if cache_name is None:
                verdicts.append((DELIVERED, None))
                continue
            hit = self._cache(cache_name, row["address"]).entries.get(row["dedup_key"])
            if hit is not None:
                verdicts.append((DUPLICATE, hit.message_id))
                cause = cause or row["message_id"]
                continue
            ident = (cache_name, row["dedup_key"])
            if ident in first_copy:
                # Same key twice in one transaction: the later copy is a duplicate (deviation).
                verdicts.append((DUPLICATE, first_copy[ident]))
            else:
                first_copy[ident] = row["message_id"]
                verdicts.append((DELIVERED, None))

        for row, (verdict, duplicate_of) in zip(unit, verdicts):
            if verdict == DELIVERED and cause is not None:
                verdict, duplicate_of = TRANSACTION_REJECTED, cause
            if verdict != DELIVERED:
                self.out.add(record_type=VERDICT, row_id=row["row_id"], outcome=DROPPED,
                             reason=verdict, duplicate_of=duplicate_of, cache=row["cache"])
                continue
            seq = None
            if row["cache"] is not None:
                seq = self.caches[row["cache"]].accept(row["dedup_key"], row["message_id"], self.batch_id)
            self.out.add(record_type=VERDICT, row_id=row["row_id"], outcome=DELIVERED,
                         cache=row["cache"], cache_seq=seq)

    # -- the snapshot ---------------------------------------------------------------------------
    def _emit_state(self) -> None:
        """The snapshot: every cache's entries, its counter and fill, and a digest of it all.

        The digest covers what a later batch inherits (entries and counters, caches in name
        order), so two runs leave the same state iff their digests match.
        """
        digest = hashlib.sha256()
        for name in sorted(self.caches):
            cache = self.caches[name]
            self.out.add(record_type=COUNTER, cache=name, cache_seq=cache.last_seq,
                         address=cache.address, id_cache_size=cache.size, entries=len(cache.entries))
            digest.update(f"{name}\0{cache.last_seq}\n".encode())
            for key, entry in cache.entries.items():
                self.out.add(record_type=ENTRY, cache=name, dedup_key=key, cache_seq=entry.seq,
                             message_id=entry.message_id, address=cache.address,
                             accepted_batch_id=entry.batch_id)
                digest.update(f"{key}\0{entry.seq}\0{entry.message_id}\n".encode())
        self.out.add(record_type=DIGEST, digest=digest.hexdigest())


def decide(batches: Iterable[pa.RecordBatch], settings: AddressSettings, batch_id: str,
           counters: dict[str, dict]) -> Iterator[pa.RecordBatch]:
    """mapInArrow entry point: the whole (single-partition) sorted stream in, verdicts out."""
    return Decider(settings, batch_id, counters).run(batches)
