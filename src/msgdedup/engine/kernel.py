"""The sequential decider: verdicts for the contested units of a batch, walked in unit order.

Most units need no sequential logic at all. A key that occurs once in the batch and is not in the
parent snapshot can never be found in its cache, so a unit made only of such keys is always
delivered: Spark decides those with joins and numbers their acceptances with a window
(transforms.py). Only the *contested* units (a single message whose key occurs again in the batch
or in the parent snapshot, or a transaction holding one such message) come here, in one sorted
stream: the parent entries of their keys, then their messages in unit order.

The cache is kept as sequence numbers rather than as a ring. A cache's counter counts every
acceptance on it (``last_seq``), so an entry accepted at ``seq`` is still among the last ``size``
accepted keys iff ``seq > last_seq - size``: that is the ring of spec §3, including a cache that
shrank or grew since the snapshot. Each contested message arrives with ``free_before``, the number
of uncontested acceptances on its cache before its unit, so the kernel knows ``last_seq`` at every
contested unit without seeing the uncontested ones.

In return, for every contested message with a key, the kernel reports ``accepted_after``: how many
contested messages its cache had accepted once the message's unit was decided. An uncontested
message numbers itself from that (``transforms.verdicts``): its ``cache_seq`` is the parent's
counter + the uncontested acceptances up to it + ``accepted_after`` of the last contested message
before it on its cache (``contested_rank`` names that message).
"""

from __future__ import annotations

from typing import Iterable, Iterator

import pyarrow as pa

from msgdedup.config import AddressSettings

SNAPSHOT_PHASE = 0
MESSAGE_PHASE = 1

DELIVERED = "delivered"
DROPPED = "dropped"
DUPLICATE = "duplicate"
TRANSACTION_REJECTED = "transaction_rejected"

OUTPUT_SCHEMA = pa.schema([
    ("row_id", pa.int64()),
    ("outcome", pa.string()),
    ("reason", pa.string()),
    ("duplicate_of", pa.string()),
    ("cache_seq", pa.int64()),
    ("cache", pa.string()),
    ("contested_rank", pa.int64()),
    ("accepted_after", pa.int64()),
])
_OUTPUT_COLUMNS = [field.name for field in OUTPUT_SCHEMA]
_FLUSH_ROWS = 8192


class Decider:
    """Walks the sorted stream; see the module docstring.

    ``counters`` are the parent's caches (``cache -> {"address", "last_seq", ...}``). Entries are
    ``(cache, key) -> (seq, message_id)``; the newest acceptance of a key wins, and whether an entry
    still counts is decided by its sequence number at look-up time.
    """

    def __init__(self, settings: AddressSettings, counters: dict[str, dict]) -> None:
        self.settings = settings
        self.base = {name: info["last_seq"] for name, info in counters.items()}
        self.sizes: dict[str, int] = {}
        self.accepted: dict[str, int] = {}  # contested acceptances so far, per cache
        self.entries: dict[tuple[str, str], tuple[int, str]] = {}
        self.verdicts: list[tuple] = []
        # the open unit: (row_id, message_id, txn_id, address, cache, key, free_before, contested_rank)
        self.unit: list[tuple] = []

    def run(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            c = batch.to_pydict()
            rows = zip(c["phase"], c["row_id"], c["message_id"], c["txn_id"], c["address"],
                       c["cache"], c["dedup_key"], c["cache_seq"], c["free_before"], c["contested_rank"], strict=True)
            for phase, row_id, message_id, txn_id, address, cache, key, seq, free_before, rank in rows:
                if phase == SNAPSHOT_PHASE:
                    self.entries[(cache, key)] = (seq, message_id)
                    continue
                if self.unit and (txn_id is None or self.unit[-1][2] != txn_id):
                    self._decide_unit()
                self.unit.append((row_id, message_id, txn_id, address, cache, key, free_before, rank))
            if len(self.verdicts) >= _FLUSH_ROWS:
                yield self._flush()
        if self.unit:
            self._decide_unit()
        if self.verdicts:
            yield self._flush()

    def _flush(self) -> pa.RecordBatch:
        rows, self.verdicts = self.verdicts, []
        columns = list(zip(*rows, strict=True))
        return pa.RecordBatch.from_arrays(
            [pa.array(values, field.type) for values, field in zip(columns, OUTPUT_SCHEMA, strict=True)],
            schema=OUTPUT_SCHEMA)

    def _size(self, cache: str, address: str) -> int:
        size = self.sizes.get(cache)
        if size is None:
            size = self.sizes[cache] = self.settings.id_cache_size(address)
        return size

    def _last_seq(self, cache: str, free_before: int) -> int:
        return self.base.get(cache, 0) + free_before + self.accepted.get(cache, 0)

    def _hit(self, cache: str, address: str, key: str, free_before: int) -> str | None:
        """The message_id of the accepted message ``key`` hits, as the cache stands before the unit."""
        entry = self.entries.get((cache, key))
        if entry is None or entry[0] <= self._last_seq(cache, free_before) - self._size(cache, address):
            return None
        return entry[1]

    # -- one unit (spec §4) ---------------------------------------------------------------------
    def _decide_unit(self) -> None:
        unit, self.unit = self.unit, []
        verdicts: list[tuple[str, str | None]] = []  # (reason or DELIVERED, duplicate_of)
        first_copy: dict[tuple[str, str], str] = {}
        cause = None
        for _, message_id, _, address, cache, key, free_before, _ in unit:
            if cache is None:
                verdicts.append((DELIVERED, None))
                continue
            hit = self._hit(cache, address, key, free_before)
            if hit is not None:
                verdicts.append((DUPLICATE, hit))
                cause = cause or message_id
            elif (cache, key) in first_copy:
                # Same key twice in one transaction: the later copy is a duplicate (deviation).
                verdicts.append((DUPLICATE, first_copy[(cache, key)]))
            else:
                first_copy[(cache, key)] = message_id
                verdicts.append((DELIVERED, None))

        decided = []
        for (row_id, message_id, _, _, cache, key, free_before, _), (verdict, duplicate_of) in zip(
                unit, verdicts, strict=True):
            if verdict == DELIVERED and cause is not None:
                verdict, duplicate_of = TRANSACTION_REJECTED, cause
            if verdict != DELIVERED:
                decided.append((row_id, DROPPED, verdict, duplicate_of, None))
                continue
            seq = None
            if cache is not None:
                seq = self._last_seq(cache, free_before) + 1
                self.accepted[cache] = self.accepted.get(cache, 0) + 1
                self.entries[(cache, key)] = (seq, message_id)
            decided.append((row_id, DELIVERED, None, None, seq))
        for (_, _, _, _, cache, _, _, rank), verdict in zip(unit, decided, strict=True):
            after = self.accepted.get(cache, 0) if cache is not None else None
            self.verdicts.append((*verdict, cache, rank, after))


def decide(batches: Iterable[pa.RecordBatch], settings: AddressSettings,
           counters: dict[str, dict]) -> Iterator[pa.RecordBatch]:
    """mapInArrow entry point: the whole (single-partition) sorted stream in, verdicts out."""
    return Decider(settings, counters).run(batches)
