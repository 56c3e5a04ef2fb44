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

Time caches (§8.3) are the same ring with an instant per entry: an entry is still held iff its
``seq`` is within the optional cap and the unit's instant is within ``duplicate_window`` of the
entry's. A cache's time before a unit is max(its time before the batch, the unit's instant), since
units come in instant order, so uncontested units need not be seen here either.

Apama caches (§8.2) are not: every key moves between queues with the acceptances of its sender and
the shared queue's newest instant, so their messages and their parent entries come here
(``ApamaQueues``), and the kernel reports their final queues as ``entry`` rows and their time as a
``clock`` row. Their uncontested messages still need no decision: they come ``passive``, with the
uncontested acceptances before them, and the kernel only puts their keys in their sender's queue
at the sequence number ``transforms.verdicts`` gives them, reporting nothing for them. A quiet
sender's (``transforms.quiet_senders``: its queue cannot overflow in the batch) do not come at
all, nor do the parent's entries in its queue that the batch never names: they stay where they
are, and the snapshot takes them from Spark.
"""

from __future__ import annotations

import gc
import heapq
from collections import deque
from operator import attrgetter
from typing import Iterable, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from msgdedup.config import APAMA, TIME
from msgdedup.engine.windows import CacheWindow

SNAPSHOT_PHASE = 0
MESSAGE_PHASE = 1

DELIVERED = "delivered"
DROPPED = "dropped"
DUPLICATE = "duplicate"
TRANSACTION_REJECTED = "transaction_rejected"

# What the kernel reports: a verdict per contested message; for Apama caches, their entries after
# the batch and their time (kinds ``entry`` and ``clock``).
VERDICT, ENTRY, CLOCK = "verdict", "entry", "clock"
SENDER_QUEUE, SHARED_QUEUE = "sender", "shared"

OUTPUT_SCHEMA = pa.schema([
    ("kind", pa.string()),
    ("row_id", pa.int64()),
    ("outcome", pa.string()),
    ("reason", pa.string()),
    ("duplicate_of", pa.string()),
    ("cache_seq", pa.int64()),
    ("cache", pa.string()),
    ("contested_rank", pa.int64()),
    ("accepted_after", pa.int64()),
    ("dedup_key", pa.string()),
    ("message_id", pa.string()),
    ("address", pa.string()),
    ("accepted_batch_id", pa.string()),
    ("received_at_us", pa.int64()),
    ("source_id", pa.string()),
    ("queue", pa.string()),
])
_FLUSH_ROWS = 8192
# The columns each kind of row fills (the others are null), in the order the Decider keeps them.
VERDICT_FIELDS = ("row_id", "outcome", "reason", "duplicate_of", "cache_seq", "cache", "contested_rank",
                  "accepted_after")
# (``entry`` rows: besides ``cache``, each field and the ``_Entry`` attribute it is read from)
ENTRY_FIELDS = {"cache_seq": "seq", "dedup_key": "key", "message_id": "message_id", "address": "address",
                "accepted_batch_id": "batch_id", "received_at_us": "instant", "source_id": "source",
                "queue": "queue"}
CLOCK_FIELDS = ("cache", "received_at_us")


def output_batch(kind: str, fields: tuple[str, ...], rows: list[tuple]) -> pa.RecordBatch:
    """``rows`` (tuples of ``fields``) of one ``kind`` as a batch of OUTPUT_SCHEMA. Built by column,
    the unused ones as null arrays: converting whole rows of mostly-null fields cost more than
    deciding them."""
    return output_columns(kind, len(rows), dict(zip(fields, zip(*rows, strict=True), strict=True)))


def output_columns(kind: str, n: int, columns: Mapping[str, list]) -> pa.RecordBatch:
    """``n`` rows of one ``kind`` given by column (field -> values) as a batch of OUTPUT_SCHEMA."""
    return pa.RecordBatch.from_arrays(
        [pa.array([kind] * n, pa.string()) if f.name == "kind"
         else pa.array(columns[f.name], f.type) if f.name in columns else pa.nulls(n, f.type)
         for f in OUTPUT_SCHEMA], schema=OUTPUT_SCHEMA)


class _Entry:
    """An accepted key in an Apama cache, and the queue it sits in (None: it has left the cache)."""

    __slots__ = ("key", "seq", "message_id", "address", "batch_id", "instant", "source", "queue")

    def __init__(self, key, seq, message_id, address, batch_id, instant, source, queue=None):
        self.key, self.seq, self.message_id, self.address = key, seq, message_id, address
        self.batch_id, self.instant, self.source, self.queue = batch_id, instant, source, queue


class ApamaQueues:
    """One Apama cache (§8.2), as the reference model's ``ApamaCache`` but indexed: a key is found
    by a dict look-up, not a scan of every queue, and the shared queue is a heap. Entries that
    leave a sender's queue out of order (a resend) are skipped lazily."""

    def __init__(self, window: CacheWindow, clock: int | None) -> None:
        self.per_source_window = window.setting.per_source_window
        self.expiry_us = window.setting.expiry_seconds * 1_000_000
        self.clock = clock
        self.where: dict[str, _Entry] = {}
        self.senders: dict[str | None, deque] = {}
        self.live: dict[str | None, int] = {}
        self.shared: list = []  # heap of (instant, seq, entry)
        self.newest: int | None = None

    @classmethod
    def carried(cls, window: CacheWindow, rows: list[_Entry]) -> "ApamaQueues":
        """The parent's queues under this batch's window: the seed's own rules with the new
        limits (§8.5), in the model's order (shared queue first, then each sender's, oldest first)."""
        queues = cls(window, window.clock_us)
        for entry in sorted((e for e in rows if e.queue == SHARED_QUEUE), key=lambda e: (e.instant, e.seq)):
            queues._to_shared(entry)
        by_sender: dict = {}
        for entry in rows:
            if entry.queue == SENDER_QUEUE:
                by_sender.setdefault(entry.source, []).append(entry)
        for source in sorted(by_sender, key=lambda s: (s is not None, s or "")):
            for entry in sorted(by_sender[source], key=lambda e: e.seq):
                queues._to_sender(entry)
        return queues

    def find(self, key: str) -> _Entry | None:
        return self.where.get(key)

    def accept(self, key, seq, message_id, address, batch_id, at, source) -> None:
        self.clock = at if self.clock is None else max(at, self.clock)
        self._to_sender(_Entry(key, seq, message_id, address, batch_id, self.clock, source))

    def on_duplicate(self, entry: _Entry, source: str | None, at: int) -> None:
        """A resend from the sender whose queue holds the key moves it to the shared queue, at
        the resend's instant (the model's ``on_duplicate``)."""
        if entry.queue != SENDER_QUEUE or entry.source != source:
            return
        self._leave_sender(entry)
        self.clock = at if self.clock is None else max(at, self.clock)
        self._to_shared(_Entry(entry.key, entry.seq, entry.message_id, entry.address, entry.batch_id,
                               self.clock, entry.source))

    def _to_sender(self, entry: _Entry) -> None:
        if self.per_source_window == 0:
            self._to_shared(entry)
            return
        entry.queue = SENDER_QUEUE
        self.where[entry.key] = entry
        source = entry.source
        queue = self.senders.get(source)
        if queue is None:
            queue = self.senders[source] = deque()
        queue.append(entry)
        self.live[source] = self.live.get(source, 0) + 1
        while self.live[source] > self.per_source_window:
            oldest = queue.popleft()
            if oldest.queue == SENDER_QUEUE:  # else it left already (a resend moved it)
                self._leave_sender(oldest)
                self._to_shared(oldest)

    def _leave_sender(self, entry: _Entry) -> None:
        entry.queue = None
        self.live[entry.source] -= 1
        if not self.live[entry.source]:
            del self.live[entry.source], self.senders[entry.source]
        if self.where.get(entry.key) is entry:
            del self.where[entry.key]

    def _to_shared(self, entry: _Entry) -> None:
        if self.expiry_us == 0:
            entry.queue = None  # no time queue: the key is forgotten
            return
        entry.queue = SHARED_QUEUE
        self.where[entry.key] = entry
        heapq.heappush(self.shared, (entry.instant, entry.seq, entry))
        self.newest = entry.instant if self.newest is None else max(self.newest, entry.instant)
        while self.shared[0][0] < self.newest - self.expiry_us:
            _, _, gone = heapq.heappop(self.shared)
            gone.queue = None
            if self.where.get(gone.key) is gone:
                del self.where[gone.key]

    def entries(self) -> list[_Entry]:
        held = [e for source in sorted(self.senders, key=lambda s: (s is not None, s or ""))
                for e in self.senders[source] if e.queue == SENDER_QUEUE]
        return held + [e for _, _, e in sorted(self.shared, key=lambda t: (t[0], t[1]))]


class Decider:
    """Walks the sorted stream; see the module docstring.

    ``windows`` are the batch's caches (windows.resolve). Count and time entries are
    ``(cache, key) -> (seq, message_id, instant)``; the newest acceptance of a key wins, and whether
    an entry still counts is decided by its sequence number (and instant) at look-up time.
    """

    def __init__(self, windows: Mapping[str, CacheWindow], batch_id: str) -> None:
        self.windows = windows
        self.batch_id = batch_id
        self.accepted: dict[str, int] = {}  # contested acceptances so far, per cache
        self.entries: dict[tuple[str, str], tuple[int, str, int | None]] = {}
        self.apama_rows: dict[str, list[_Entry]] = {name: [] for name, w in windows.items() if w.policy == APAMA}
        self.apama: dict[str, ApamaQueues] | None = None
        self.verdicts: list[tuple] = []  # VERDICT_FIELDS
        # the open unit: (row_id, message_id, txn_id, address, cache, key, free_before, contested_rank,
        # unit_us, source_id)
        self.unit: list[tuple] = []

    def run(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            c = batch.to_pydict()
            rows = zip(c["phase"], c["row_id"], c["message_id"], c["txn_id"], c["address"], c["cache"],
                       c["dedup_key"], c["cache_seq"], c["free_before"], c["contested_rank"], c["unit_us"],
                       c["source_id"], c["received_at_us"], c["queue"], c["accepted_batch_id"], c["passive"],
                       strict=True)
            for (phase, row_id, message_id, txn_id, address, cache, key, seq, free_before, rank, unit_us, source,
                 instant, queue, accepted_batch_id, passive) in rows:
                if phase == SNAPSHOT_PHASE:
                    if cache in self.apama_rows:
                        self.apama_rows[cache].append(
                            _Entry(key, seq, message_id, address, accepted_batch_id, instant, source, queue))
                    else:
                        self.entries[(cache, key)] = (seq, message_id, instant)
                    continue
                if self.unit and (passive or txn_id is None or self.unit[-1][2] != txn_id):
                    self._decide_unit()
                if passive:  # an uncontested acceptance of an Apama cache: its key cannot be found there
                    self._queues(cache).accept(key, self._last_seq(cache, free_before) + 1, message_id, address,
                                               self.batch_id, unit_us, source)
                elif txn_id is None and cache is not None:
                    self._decide_single(row_id, message_id, address, cache, key, free_before, rank, unit_us, source)
                else:
                    self.unit.append((row_id, message_id, txn_id, address, cache, key, free_before, rank, unit_us,
                                      source))
            if len(self.verdicts) >= _FLUSH_ROWS:
                yield self._flush()
        if self.unit:
            self._decide_unit()
        if self.verdicts:
            yield self._flush()
        yield from self._report_apama()

    def _flush(self) -> pa.RecordBatch:
        rows, self.verdicts = self.verdicts, []
        return output_batch(VERDICT, VERDICT_FIELDS, rows)

    def _queues(self, cache: str) -> ApamaQueues:
        if self.apama is None:  # every parent entry has been read: the stream sorts them first
            self.apama = {name: ApamaQueues.carried(self.windows[name], rows) for name, rows in self.apama_rows.items()}
        return self.apama[cache]

    def _last_seq(self, cache: str, free_before: int) -> int:
        return self.windows[cache].last_seq + free_before + self.accepted.get(cache, 0)

    def _now(self, cache: str, unit_us: int) -> int:
        """§8.4: the cache's time at a unit; units come in instant order, so only the time it
        had before the batch can be later."""
        clock = self.windows[cache].clock_us
        return unit_us if clock is None else max(unit_us, clock)

    def _hit(self, cache: str, key: str, free_before: int, unit_us: int):
        """The entry ``key`` hits as the cache stands before the unit (its message_id at [1])."""
        window = self.windows[cache]
        if window.policy == APAMA:
            entry = self._queues(cache).find(key)
            return None if entry is None else (entry, entry.message_id)
        entry = self.entries.get((cache, key))
        if entry is None:
            return None
        size = window.floor_size
        if size is not None and entry[0] <= self._last_seq(cache, free_before) - size:
            return None
        if window.policy == TIME and self._now(cache, unit_us) - entry[2] > window.setting.duplicate_window_us:
            return None
        return entry

    # -- one unit (spec §4) ---------------------------------------------------------------------
    def _decide_single(self, row_id, message_id, address, cache, key, free_before, rank, unit_us, source) -> None:
        """``_decide_unit`` for the most common unit, one message with a key, without its lists."""
        hit = self._hit(cache, key, free_before, unit_us)
        apama = self.windows[cache].policy == APAMA
        if hit is not None:
            if apama:  # §8.2: a sender's own resend moves its key to the shared queue
                self._queues(cache).on_duplicate(hit[0], source, unit_us)
            self.verdicts.append((row_id, DROPPED, DUPLICATE, hit[1], None, cache, rank, self.accepted.get(cache, 0)))
            return
        seq = self._last_seq(cache, free_before) + 1
        accepted = self.accepted[cache] = self.accepted.get(cache, 0) + 1
        if apama:
            self._queues(cache).accept(key, seq, message_id, address, self.batch_id, unit_us, source)
        else:
            self.entries[(cache, key)] = (seq, message_id, self._now(cache, unit_us))
        self.verdicts.append((row_id, DELIVERED, None, None, seq, cache, rank, accepted))

    def _decide_unit(self) -> None:
        unit, self.unit = self.unit, []
        verdicts: list[tuple[str, str | None]] = []  # (reason or DELIVERED, duplicate_of)
        first_copy: dict[tuple[str, str], str] = {}
        cause = first_hit = None
        for _, message_id, _, _, cache, key, free_before, _, unit_us, _ in unit:
            if cache is None:
                verdicts.append((DELIVERED, None))
                continue
            hit = self._hit(cache, key, free_before, unit_us)
            if hit is not None:
                verdicts.append((DUPLICATE, hit[1]))
                cause = cause or message_id
                first_hit = first_hit or hit
            elif (cache, key) in first_copy:
                # Same key twice in one transaction: the later copy is a duplicate (deviation).
                verdicts.append((DUPLICATE, first_copy[(cache, key)]))
            else:
                first_copy[(cache, key)] = message_id
                verdicts.append((DELIVERED, None))

        if cause is not None and unit[0][2] is None and self.windows[unit[0][4]].policy == APAMA:
            # §8.2: a sender's own resend moves its key to the shared queue (a single message only:
            # a rejected transaction changes no cache)
            self._queues(unit[0][4]).on_duplicate(first_hit[0], unit[0][9], unit[0][8])

        decided = []
        for (row_id, message_id, _, address, cache, key, free_before, _, unit_us, source), (verdict, duplicate_of) \
                in zip(unit, verdicts, strict=True):
            if verdict == DELIVERED and cause is not None:
                verdict, duplicate_of = TRANSACTION_REJECTED, cause
            if verdict != DELIVERED:
                decided.append((row_id, DROPPED, verdict, duplicate_of, None))
                continue
            seq = None
            if cache is not None:
                seq = self._last_seq(cache, free_before) + 1
                self.accepted[cache] = self.accepted.get(cache, 0) + 1
                if self.windows[cache].policy == APAMA:
                    self._queues(cache).accept(key, seq, message_id, address, self.batch_id, unit_us, source)
                else:
                    self.entries[(cache, key)] = (seq, message_id, self._now(cache, unit_us))
            decided.append((row_id, DELIVERED, None, None, seq))
        for (_, _, _, _, cache, _, _, rank, _, _), verdict in zip(unit, decided, strict=True):
            after = self.accepted.get(cache, 0) if cache is not None else None
            self.verdicts.append((*verdict, cache, rank, after))

    def _report_apama(self) -> Iterator[pa.RecordBatch]:
        """Every Apama cache's queues after the batch (its snapshot rows) and its time. Built by
        column, an attribute at a time: as many rows as the batch has messages, at 1M messages
        building a tuple per entry cost about a second more."""
        clocks = []
        for name in self.apama_rows:
            queues = self._queues(name)
            held = queues.entries()
            for start in range(0, len(held), _FLUSH_ROWS):
                chunk = held[start:start + _FLUSH_ROWS]
                columns = {field: list(map(attrgetter(attribute), chunk)) for field, attribute in ENTRY_FIELDS.items()}
                yield output_columns(ENTRY, len(chunk), {"cache": [name] * len(chunk), **columns})
            clocks.append((name, queues.clock))
        if clocks:
            yield output_batch(CLOCK, CLOCK_FIELDS, clocks)


def decide(batches: Iterable[pa.RecordBatch], windows: Mapping[str, CacheWindow], batch_id: str
           ) -> Iterator[pa.RecordBatch]:
    """mapInArrow entry point: the whole (single-partition) sorted stream in, verdicts out.

    Python's cyclic garbage collector is off while the kernel runs: an Apama cache keeps every
    accepted key as an object until the batch ends, and each collection walked all of them again,
    which was half the kernel's time at 1M messages (docs/benchmarks.md). The kernel's objects
    form no cycles, so reference counting frees them as before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield from Decider(windows, batch_id).run(batches)
    finally:
        if enabled:
            gc.enable()


def decide_table(stream: Iterable[pa.RecordBatch], windows: Mapping[str, CacheWindow], batch_id: str) -> pa.Table:
    """``decide`` on the driver: the whole sorted stream in, its output as one table."""
    return pa.Table.from_batches(list(decide(stream, windows, batch_id)), schema=OUTPUT_SCHEMA)


def rows_of(output: pa.Table, kind: str) -> pa.Table:
    """The rows of one ``kind`` (VERDICT, ENTRY, CLOCK) of the kernel's ``output`` that the driver
    holds (``decide_table``'s; transforms.kernel_rows does the same for a Spark frame of it)."""
    return output.filter(pc.equal(output["kind"], kind))


def clocks_of(output: pa.Table) -> dict[str, int]:
    """Each Apama cache's time after the batch (its CLOCK row) in the kernel's ``output``."""
    clocks = rows_of(output, CLOCK)
    return dict(zip(clocks["cache"].to_pylist(), clocks["received_at_us"].to_pylist(), strict=True))
