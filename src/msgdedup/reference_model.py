"""The reference model: docs/semantics.md as plain Python, small enough to read against the spec.

It is the oracle of the property-based tests: the Spark engine must give exactly its outputs,
message by message. It favours obviousness over speed (caches are scanned linearly, a batch is
held in memory), and it shares only the envelope parser with the engine, so that the engine's
ordering, unit building, cache window and commit logic are checked against an independent
implementation.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from msgdedup.config import AddressSettings
from msgdedup.envelope import InvalidLine, Message, parse_line, printable_raw_line
from msgdedup.keys import cache_key

DELIVERED = "delivered"
DUPLICATE = "duplicate"
TRANSACTION_REJECTED = "transaction_rejected"


@dataclass(frozen=True)
class RawLine:
    source_file: str
    line_number: int
    raw: bytes


@dataclass(frozen=True)
class CacheEntry:
    key: str
    seq: int
    message_id: str
    address: str
    batch_id: str


@dataclass
class Cache:
    """A fixed-size ring of accepted keys, oldest first (spec §3)."""

    size: int
    last_seq: int = 0
    entries: deque = field(default_factory=deque)

    def find(self, key: str) -> CacheEntry | None:
        for entry in self.entries:
            if entry.key == key:
                return entry
        return None

    def accept(self, key: str, message_id: str, address: str, batch_id: str) -> int:
        self.last_seq += 1
        self.entries.append(CacheEntry(key, self.last_seq, message_id, address, batch_id))
        while len(self.entries) > self.size:
            self.entries.popleft()
        return self.last_seq

    def resized(self, size: int) -> "Cache":
        """A shrinking cache keeps its newest entries (spec §5)."""
        kept = list(self.entries)[-size:] if size > 0 else []
        return Cache(size=size, last_seq=self.last_seq, entries=deque(kept))


@dataclass(frozen=True)
class Checked:
    """A valid message at its place in the batch, with the cache and key it is checked by."""

    message: Message
    line: RawLine
    cache: str | None
    key: str | None

    @property
    def arrival(self) -> tuple:
        return (self.message.received_at_us, self.line.source_file, self.line.line_number)


@dataclass
class BatchResult:
    batch_id: str
    parent: str | None
    delivered: list[dict]
    dropped: list[dict]
    quarantined: list[dict]
    caches: dict[str, Cache]
    started_from: tuple = ()

    def snapshot_entries(self) -> list[dict]:
        return [
            {"cache": name, "dedup_key": e.key, "cache_seq": e.seq, "message_id": e.message_id,
             "address": e.address, "accepted_batch_id": e.batch_id}
            for name, cache in self.caches.items()
            for e in cache.entries
        ]

    def counters(self) -> dict[str, int]:
        return {name: cache.last_seq for name, cache in self.caches.items()}


class MustWait(Exception):
    """§5: stale batches are re-run in order, so a batch after a stale one waits for it."""


class ReferenceModel:
    """Runs batches one after another, keeping every committed batch's cache snapshot."""

    def __init__(self) -> None:
        self.committed: dict[str, BatchResult] = {}
        self.stale: set[str] = set()

    def parent_of(self, batch_id: str) -> str | None:
        earlier = [b for b in self.committed if b < batch_id]
        return max(earlier) if earlier else None

    def run_batch(self, batch_id: str, lines: list[RawLine], settings: AddressSettings) -> BatchResult:
        waiting_on = sorted(b for b in self.stale if b < batch_id)
        if waiting_on:
            raise MustWait(f"{batch_id} comes after stale {waiting_on}")
        parent = self.parent_of(batch_id)
        caches = {}
        if parent is not None:
            for name, cache in self.committed[parent].caches.items():
                address = cache.entries[0].address if cache.entries else None
                size = settings.id_cache_size(address) if address is not None else cache.size
                caches[name] = cache.resized(size)
        started_from = _state(self.committed[parent].caches) if parent is not None else _state({})
        result = _run(batch_id, parent, lines, settings, caches)
        result.started_from = started_from
        # §5: a batch older than committed ones may change the cache state the later ones started
        # from; if it does, they no longer stand (they are stale and must be re-run in order).
        later = sorted(b for b in self.committed if b > batch_id)
        if later and self.committed[later[0]].started_from != _state(result.caches):
            for stale in later:
                del self.committed[stale]
                self.stale.add(stale)
        self.stale.discard(batch_id)
        self.committed[batch_id] = result
        return result


def _state(caches: dict[str, Cache]) -> tuple:
    """What a later batch inherits: every cache's entries and counter."""
    return tuple(sorted((name, cache.last_seq, tuple(cache.entries)) for name, cache in caches.items()))


def _run(batch_id, parent, lines, settings, caches) -> BatchResult:
    quarantined: list[dict] = []
    valid: list[Checked] = []

    # §1: every line is a valid message or quarantined with a readable error.
    for line in lines:
        try:
            message = parse_line(line.raw)
        except InvalidLine as error:
            quarantined.append(_quarantine(line, str(error)))
            continue
        ck = cache_key(message.address, message.properties, settings)
        valid.append(Checked(message, line, ck.cache if ck else None, ck.key if ck else None))

    # §1 arrival order: received_at, then file path, then line number.
    valid.sort(key=lambda c: c.arrival)

    # A message_id names one delivery attempt; a second line with it is an export fault.
    first_seen: dict[str, Checked] = {}
    messages: list[Checked] = []
    for checked in valid:
        first = first_seen.get(checked.message.message_id)
        if first is None:
            first_seen[checked.message.message_id] = checked
            messages.append(checked)
        else:
            quarantined.append(_quarantine(
                checked.line,
                f"duplicate message_id '{checked.message.message_id}' "
                f"(first at {first.line.source_file}:{first.line.line_number})",
            ))

    delivered: list[dict] = []
    dropped: list[dict] = []
    for unit in _units(messages):
        for checked in unit:
            if checked.cache is not None:
                _prepare_cache(caches, checked.cache, settings.id_cache_size(checked.message.address))
        _process_unit(unit, caches, batch_id, delivered, dropped)

    return BatchResult(batch_id, parent, delivered, dropped, quarantined, caches)


def _prepare_cache(caches: dict[str, Cache], name: str, size: int) -> None:
    """A cache seen for the first time starts empty; one whose size changed is resized."""
    if name not in caches:
        caches[name] = Cache(size=size)
    elif caches[name].size != size:
        caches[name] = caches[name].resized(size)


def _units(messages: list[Checked]) -> list[list[Checked]]:
    """§2: a message alone, or all messages sharing a txn_id, positioned at the last one."""
    transactions: dict[str, list[Checked]] = {}
    positioned = []
    for checked in messages:
        txn = checked.message.txn_id
        if txn is None:
            positioned.append((checked.arrival, [checked]))
        else:
            transactions.setdefault(txn, []).append(checked)
    for members in transactions.values():
        positioned.append((members[-1].arrival, members))
    positioned.sort(key=lambda p: p[0])
    return [members for _, members in positioned]


def _process_unit(unit, caches, batch_id, delivered, dropped) -> None:
    """§4, one unit: look up against the caches as they stand before the unit."""
    hits: dict[int, CacheEntry] = {}
    repeats: dict[int, Checked] = {}
    first_copy: dict[tuple[str, str], Checked] = {}
    for i, checked in enumerate(unit):
        if checked.cache is None:
            continue
        entry = caches[checked.cache].find(checked.key)
        if entry is not None:
            hits[i] = entry
        elif (checked.cache, checked.key) in first_copy:
            repeats[i] = first_copy[(checked.cache, checked.key)]  # §4.5 (deviation)
        else:
            first_copy[(checked.cache, checked.key)] = checked

    if hits:
        # §4.2/4.3: a duplicate drops itself, and a transaction with one is dropped whole.
        cause = unit[min(hits)].message.message_id
        for i, checked in enumerate(unit):
            if i in hits:
                dropped.append(_dropped(checked, DUPLICATE, hits[i].message_id))
            elif i in repeats:
                dropped.append(_dropped(checked, DUPLICATE, repeats[i].message.message_id))
            else:
                dropped.append(_dropped(checked, TRANSACTION_REJECTED, cause))
        return

    # §4.4: delivered; keys enter their caches in message order.
    for i, checked in enumerate(unit):
        if i in repeats:
            dropped.append(_dropped(checked, DUPLICATE, repeats[i].message.message_id))
            continue
        seq = None
        if checked.cache is not None:
            seq = caches[checked.cache].accept(
                checked.key, checked.message.message_id, checked.message.address, batch_id)
        delivered.append({**_identity(checked), "cache_seq": seq})


def _identity(checked: Checked) -> dict:
    return {
        "source_file": checked.line.source_file,
        "line_number": checked.line.line_number,
        "message_id": checked.message.message_id,
        "address": checked.message.address,
        "cache": checked.cache,
        "dedup_key": checked.key,
    }


def _dropped(checked: Checked, reason: str, duplicate_of: str) -> dict:
    return {**_identity(checked), "reason": reason, "duplicate_of": duplicate_of}


def _quarantine(line: RawLine, error: str) -> dict:
    return {
        "source_file": line.source_file,
        "line_number": line.line_number,
        "raw_line": printable_raw_line(line.raw),
        "error": error,
    }
