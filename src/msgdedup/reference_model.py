"""The reference model: docs/semantics.md as plain Python, small enough to read against the spec.

It is the oracle of the property-based tests: the Spark engine must give exactly its outputs,
message by message. It favours obviousness over speed (caches are scanned linearly, a batch is
held in memory), and it shares only the envelope parser with the engine, so that the engine's
ordering, unit building, cache window and commit logic are checked against an independent
implementation.

The count cache is Artemis' ring (§3). The two other policies of §8 sit beside it with the same
small interface (``find``, ``accept``, ``on_duplicate``, ``reconfigured``), so that deciding a
unit (§4) reads the same whatever the policy: ``TimeCache`` (a NATS-style duplicate window) and
``ApamaCache`` (Apama's per-sender queues and shared time queue, in the seed's words).
"""

from __future__ import annotations

from bisect import insort
from collections import deque
from dataclasses import dataclass, field, replace

from msgdedup.config import APAMA, AUDIT_COVERAGE, AUDIT_OFF, COUNT, TIME, AddressSetting, AddressSettings
from msgdedup.envelope import InvalidLine, Message, parse_line, printable_raw_line
from msgdedup.keys import bridge_cache_name, cache_key

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
    instant: int | None = None
    """Time and Apama caches: the cache's time (µs) when the key entered it (§8)."""
    source: str | None = None
    """Apama caches: the sender (``source_id``) whose queue the key entered."""


@dataclass
class Cache:
    """A fixed-size ring of accepted keys, oldest first (spec §3): policy ``count``.

    ``left`` holds the entries that left the ring, oldest first, for the window-miss audit (§9);
    nothing that decides an outcome reads it."""

    size: int
    last_seq: int = 0
    entries: deque = field(default_factory=deque)
    left: deque = field(default_factory=deque)

    def find(self, key: str, at: int | None = None) -> CacheEntry | None:
        for entry in self.entries:
            if entry.key == key:
                return entry
        return None

    def accept(self, key: str, message_id: str, address: str, batch_id: str,
               at: int | None = None, source: str | None = None) -> int:
        self.last_seq += 1
        self.entries.append(CacheEntry(key, self.last_seq, message_id, address, batch_id))
        while len(self.entries) > self.size:
            self.left.append(self.entries.popleft())
        return self.last_seq

    def find_left(self, key: str, at: int | None = None) -> CacheEntry | None:
        """§9: the latest entry of ``key`` that left the window, if the cache still remembers one."""
        return _latest(self.left, key)

    def miss(self, entry: CacheEntry, counter_before: int, at: int) -> tuple[int, int]:
        """§9: (needed, missed_by) in acceptances: the window that would have held ``entry`` at
        the lookup of a unit that found the counter at ``counter_before``."""
        needed = counter_before - entry.seq + 1
        return needed, needed - self.size

    def reach(self, horizon: int) -> int:
        """§9: how far back, in acceptances, the cache remembers keys that left: its window and
        ``horizon`` windows more."""
        return self.size * (1 + horizon)

    def forget(self, horizon: int) -> None:
        """§9, at the end of a batch: entries beyond the reach are forgotten."""
        while self.left and self.left[0].seq <= self.last_seq - self.reach(horizon):
            self.left.popleft()

    def on_duplicate(self, entry: CacheEntry, source: str | None, at: int) -> None:
        """A found entry is not refreshed or moved (§3)."""

    def resized(self, size: int) -> "Cache":
        """A shrinking cache keeps its newest entries (spec §5)."""
        entries = list(self.entries)
        kept = entries[-size:] if size > 0 else []
        shed = entries[:len(entries) - len(kept)]  # they leave the window like any evicted entry
        return Cache(size=size, last_seq=self.last_seq, entries=deque(kept),
                     left=deque(sorted([*self.left, *shed], key=lambda e: e.seq)))

    def fits(self, setting: AddressSetting) -> bool:
        return setting.policy == COUNT and setting.id_cache_size == self.size

    def reconfigured(self, setting: AddressSetting):
        if setting.policy == COUNT:
            return self.resized(setting.id_cache_size)
        return _new_cache(setting, self.last_seq, clock=None)  # §8.5: another policy starts empty

    def state(self) -> tuple:
        return tuple(self.entries)

    def rows(self) -> list[tuple[CacheEntry, dict]]:
        return [(entry, {}) for entry in self.entries]


def _latest(entries, key: str) -> CacheEntry | None:
    for entry in reversed(entries):
        if entry.key == key:
            return entry
    return None


def _later(at: int, clock: int | None) -> int:
    """§8.4: a cache's time never goes back; a unit older than the cache's newest key happens,
    for that cache, at the time of that newest key."""
    return at if clock is None else max(at, clock)


@dataclass
class TimeCache:
    """Policy ``time`` (§8.3): the keys accepted within the last ``duplicate_window``, and, with
    ``id_cache_size``, only the last that many of them. Instants never decrease along the queue
    (``_later``), so both limits expire from its head."""

    window_us: int
    cap: int | None
    last_seq: int = 0
    clock: int | None = None
    entries: deque = field(default_factory=deque)
    left: deque = field(default_factory=deque)
    """§9: the entries that expired or that the cap evicted, oldest first (audit only)."""

    def find(self, key: str, at: int) -> CacheEntry | None:
        now = _later(at, self.clock)
        for entry in self.entries:
            if entry.key == key and now - entry.instant <= self.window_us:
                return entry
        return None

    def accept(self, key: str, message_id: str, address: str, batch_id: str,
               at: int, source: str | None = None) -> int:
        self.clock = _later(at, self.clock)
        self.last_seq += 1
        self.entries.append(CacheEntry(key, self.last_seq, message_id, address, batch_id, self.clock))
        self._expire()
        return self.last_seq

    def on_duplicate(self, entry: CacheEntry, source: str | None, at: int) -> None:
        """No refresh on a hit (§8.3): the window counts from the accepted message."""

    def _expire(self) -> None:
        while self.entries and self.clock - self.entries[0].instant > self.window_us:
            self.left.append(self.entries.popleft())
        while self.cap is not None and len(self.entries) > self.cap:
            self.left.append(self.entries.popleft())

    def find_left(self, key: str, at: int) -> CacheEntry | None:
        """§9: the latest entry of ``key`` no longer in the window at ``at``: one that left, or
        one still queued that has expired by then (entries leave the queue only on an acceptance)."""
        now = _later(at, self.clock)
        queued = _latest(self.entries, key)
        if queued is not None:
            return queued if now - queued.instant > self.window_us else None
        return _latest(self.left, key)

    def miss(self, entry: CacheEntry, counter_before: int, at: int) -> tuple[int, int]:
        """§9: (needed, missed_by) in microseconds: the window that would have held ``entry`` at
        the unit's time. A key the cap evicted needs no longer window: missed_by <= 0."""
        needed = _later(at, self.clock) - entry.instant
        return needed, needed - self.window_us

    def reach(self, horizon: int) -> int:
        """§9: how far back, in microseconds, the cache remembers keys that left."""
        return self.window_us * (1 + horizon)

    def forget(self, horizon: int) -> None:
        """§9, at the end of a batch: keys that entered more than the reach before the cache's
        time are forgotten (instants never decrease along the record)."""
        while self.left and self.clock - self.left[0].instant > self.reach(horizon):
            self.left.popleft()

    def fits(self, setting: AddressSetting) -> bool:
        return setting.policy == TIME and (setting.duplicate_window_us, setting.id_cache_size) == (
            self.window_us, self.cap)

    def reconfigured(self, setting: AddressSetting):
        """§8.5: a shorter window or a smaller cap drops what falls out; another policy starts empty."""
        if setting.policy != TIME:
            return _new_cache(setting, self.last_seq, self.clock)
        cache = TimeCache(setting.duplicate_window_us, setting.id_cache_size, self.last_seq, self.clock,
                          deque(self.entries), deque(self.left))
        cache._expire()
        return cache

    def state(self) -> tuple:
        return (self.clock, tuple(self.entries))

    def rows(self) -> list[tuple[CacheEntry, dict]]:
        return [(entry, {"received_at_us": entry.instant}) for entry in self.entries]


@dataclass
class ApamaCache:
    """Policy ``apama`` (§8.2), the seed's last paragraphs as data:

    "a set of fixed-size per-sourceId queues, and when the queue is full the oldest items are
    expired to a shared queue ordered by timestamp whose items are expired based on a time window."
    Messages without ``source_id`` all share one queue (the key ``None``).
    """

    per_source_window: int
    expiry_us: int
    last_seq: int = 0
    clock: int | None = None
    senders: dict = field(default_factory=dict)  # source_id -> deque of entries, oldest first
    shared: list = field(default_factory=list)   # entries ordered by (instant, seq)

    @property
    def entries(self) -> list[CacheEntry]:
        return [entry for _, queue in self._senders_in_order() for entry in queue] + list(self.shared)

    def find(self, key: str, at: int | None = None) -> CacheEntry | None:
        """"The uniqueMessageId is expected to be unique across all messages within the domain,
        including messages with different messageSourceIds": every queue is searched."""
        for entry in self.entries:
            if entry.key == key:
                return entry
        return None

    def accept(self, key: str, message_id: str, address: str, batch_id: str,
               at: int, source: str | None = None) -> int:
        self.clock = _later(at, self.clock)
        self.last_seq += 1
        entry = CacheEntry(key, self.last_seq, message_id, address, batch_id, self.clock, source)
        if self.per_source_window == 0:
            self._to_shared(entry)  # per-sender queues disabled: straight to the time queue
            return self.last_seq
        queue = self.senders.setdefault(source, deque())
        queue.append(entry)
        # "expired from the per-source queue (and moved to the time-based queue) when it is full of newer ids"
        while len(queue) > self.per_source_window:
            self._to_shared(queue.popleft())
        return self.last_seq

    def on_duplicate(self, entry: CacheEntry, source: str | None, at: int) -> None:
        """"... or when a newer message with the same uniqueMessageId already in the queue for that
        source is received." The id enters the time queue at the time that newer message was
        received (the queue is "ordered by time received"), still naming the accepted message.
        A hit in another sender's queue or in the shared queue changes nothing (§8.2)."""
        queue = self.senders.get(source)
        if queue is not None and entry in queue:
            queue.remove(entry)
            if not queue:
                del self.senders[source]
            self.clock = _later(at, self.clock)
            self._to_shared(replace(entry, instant=self.clock))

    def _to_shared(self, entry: CacheEntry) -> None:
        """"Expired from the time-based queue when older than the newest item in it by more than
        dupDetectionExpiryTimeSecs"; with expiry 0 there is no time queue and the id is forgotten."""
        if self.expiry_us == 0:
            return
        insort(self.shared, entry, key=lambda e: (e.instant, e.seq))
        newest = self.shared[-1].instant
        self.shared = [e for e in self.shared if newest - e.instant <= self.expiry_us]

    def _senders_in_order(self):
        return sorted(self.senders.items(), key=lambda item: (item[0] is not None, item[0] or ""))

    def fits(self, setting: AddressSetting) -> bool:
        return setting.policy == APAMA and (setting.per_source_window, setting.expiry_seconds * 1_000_000) == (
            self.per_source_window, self.expiry_us)

    def reconfigured(self, setting: AddressSetting):
        """§8.5: the new limits applied by the seed's own rules: a smaller per-sender window moves
        each sender's oldest ids to the time queue, a shorter expiry drops what falls out of it."""
        if setting.policy != APAMA:
            return _new_cache(setting, self.last_seq, self.clock)
        cache = ApamaCache(setting.per_source_window, setting.expiry_seconds * 1_000_000,
                           self.last_seq, self.clock)
        for entry in self.shared:
            cache._to_shared(entry)
        for source, queue in self._senders_in_order():
            kept = list(queue)
            if cache.per_source_window == 0:
                moved, kept = kept, []
            else:
                moved, kept = kept[:-cache.per_source_window], kept[-cache.per_source_window:]
            for entry in moved:
                cache._to_shared(entry)
            if kept:
                cache.senders[source] = deque(kept)
        return cache

    def state(self) -> tuple:
        return (self.clock, tuple((s, tuple(q)) for s, q in self._senders_in_order()), tuple(self.shared))

    def rows(self) -> list[tuple[CacheEntry, dict]]:
        rows = [(e, {"received_at_us": e.instant, "source_id": s, "queue": "sender"})
                for s, queue in self._senders_in_order() for e in queue]
        return rows + [(e, {"received_at_us": e.instant, "source_id": e.source, "queue": "shared"})
                       for e in self.shared]


def _new_cache(setting: AddressSetting, last_seq: int = 0, clock: int | None = None):
    """An empty cache of the setting's policy; its acceptance counter continues (§3)."""
    if setting.policy == TIME:
        return TimeCache(setting.duplicate_window_us, setting.id_cache_size, last_seq, clock)
    if setting.policy == APAMA:
        return ApamaCache(setting.per_source_window, setting.expiry_seconds * 1_000_000, last_seq, clock)
    return Cache(size=setting.id_cache_size, last_seq=last_seq)


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
    window_misses: list[dict] = field(default_factory=list)
    """§9: delivered messages a bigger window would have dropped, with ``needed`` and ``missed_by``."""
    audit_horizon: int = AUDIT_OFF
    """§9: the audit's horizon in windows; 0: the audit was off for this batch."""

    def snapshot_entries(self) -> list[dict]:
        """Every cache's entries; time and Apama caches add what their policy needs (§8.5)."""
        return [
            {"cache": name, "dedup_key": e.key, "cache_seq": e.seq, "message_id": e.message_id,
             "address": e.address, "accepted_batch_id": e.batch_id, **extra}
            for name, cache in self.caches.items()
            for e, extra in cache.rows()
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
                caches[name] = _carried(name, cache, settings)
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


def _carried(name: str, cache, settings: AddressSettings):
    """A parent's cache under this batch's config (§5, §8.5), as a new object."""
    for entry in cache.entries:
        setting = settings.setting_for(entry.address)
        domain = setting.domain_of(entry.address)
        if name in (domain, bridge_cache_name(domain)):
            return cache.reconfigured(setting)
    # Empty (it is configured when next used), or no address uses it any more (its addresses moved
    # to another domain): carried unchanged, so that moving them back finds it as it was.
    return cache.reconfigured(_setting_of(cache))


def _setting_of(cache) -> AddressSetting:
    if isinstance(cache, TimeCache):
        return AddressSetting(id_cache_size=cache.cap, policy=TIME, duplicate_window_us=cache.window_us)
    if isinstance(cache, ApamaCache):
        return AddressSetting(id_cache_size=None, policy=APAMA, per_source_window=cache.per_source_window,
                              expiry_seconds=cache.expiry_us // 1_000_000)
    return AddressSetting(id_cache_size=cache.size)


def _state(caches: dict[str, Cache]) -> tuple:
    """What a later batch inherits: every cache's entries (where they sit) and counter."""
    return tuple(sorted((name, cache.last_seq, cache.state()) for name, cache in caches.items()))


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
        cache, key = _cache_and_key(message, settings)
        valid.append(Checked(message, line, cache, key))

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
    misses: list[dict] = []
    horizon = settings.audit_horizon
    for unit in _units(messages):
        for checked in unit:
            if checked.cache is not None:
                _prepare_cache(caches, checked.cache, settings.setting_for(checked.message.address))
        _process_unit(unit, caches, batch_id, delivered, dropped, misses if horizon else None, horizon)
    for cache in caches.values():
        if _audited(cache):
            if horizon:
                cache.forget(horizon)
            else:
                cache.left.clear()  # §9: with the audit off nothing is remembered

    return BatchResult(batch_id, parent, delivered, dropped, quarantined, caches, window_misses=misses,
                       audit_horizon=horizon)


def _cache_and_key(message: Message, settings: AddressSettings) -> tuple[str | None, str | None]:
    """§3 and §8.1: the key, and the cache of the address's domain (the address itself unless
    ``domain`` says otherwise; bridge ids in ``BRIDGE.<domain>``)."""
    ck = cache_key(message.address, message.properties, settings)
    if ck is None:
        return None, None
    domain = settings.domain(message.address)
    return (domain if ck.cache == message.address else bridge_cache_name(domain)), ck.key


def _prepare_cache(caches: dict, name: str, setting: AddressSetting) -> None:
    """A cache seen for the first time starts empty; one whose window changed is reconfigured."""
    if name not in caches:
        caches[name] = _new_cache(setting)
    elif not caches[name].fits(setting):
        caches[name] = caches[name].reconfigured(setting)


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


def _process_unit(unit, caches, batch_id, delivered, dropped, misses, horizon) -> None:
    """§4, one unit: look up against the caches as they stand before the unit.

    §8: the unit happens at its commit point, the ``received_at`` of its last message: time and
    Apama caches look up and accept at that instant.
    """
    at = unit[-1].message.received_at_us
    hits: dict[int, CacheEntry] = {}
    repeats: dict[int, Checked] = {}
    first_copy: dict[tuple[str, str], Checked] = {}
    for i, checked in enumerate(unit):
        if checked.cache is None:
            continue
        entry = caches[checked.cache].find(checked.key, at)
        if entry is not None:
            hits[i] = entry
        elif (checked.cache, checked.key) in first_copy:
            repeats[i] = first_copy[(checked.cache, checked.key)]  # §4.5 (deviation)
        else:
            first_copy[(checked.cache, checked.key)] = checked

    if hits:
        # §4.2/4.3: a duplicate drops itself, and a transaction with one is dropped whole.
        if unit[0].message.txn_id is None:
            # §8.2: an Apama sender's own resend moves its id to the time queue; a rejected
            # transaction changes no cache at all.
            caches[unit[0].cache].on_duplicate(hits[0], unit[0].message.source_id, at)
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
    before = {c.cache: caches[c.cache].last_seq for c in unit if c.cache is not None}
    for i, checked in enumerate(unit):
        if i in repeats:
            dropped.append(_dropped(checked, DUPLICATE, repeats[i].message.message_id))
            continue
        if checked.cache is not None and misses is not None:
            _audit(checked, caches[checked.cache], before[checked.cache], at, horizon, misses)
        seq = None
        if checked.cache is not None:
            seq = caches[checked.cache].accept(
                checked.key, checked.message.message_id, checked.message.address, batch_id,
                at=at, source=checked.message.source_id)
        delivered.append({**_identity(checked), "cache_seq": seq})


def _audited(cache) -> bool:
    """§9: count and time windows are audited; an Apama id leaves by the sender's count and then
    by time, so no single window size would have caught it."""
    return isinstance(cache, (Cache, TimeCache))


def _audit(checked: Checked, cache, counter_before: int, at: int, horizon: int, misses: list[dict]) -> None:
    """§9: a delivered key the cache remembers as having left its window is a window miss."""
    if not _audited(cache):
        return
    entry = cache.find_left(checked.key, at)
    if entry is None:
        return
    needed, missed_by = cache.miss(entry, counter_before, at)
    if needed <= cache.reach(horizon):
        misses.append({**_identity(checked), "previous_message_id": entry.message_id,
                       "previous_batch_id": entry.batch_id, "needed": needed, "missed_by": missed_by})


def window_audit(result: BatchResult) -> dict[str, dict]:
    """§9, per audited cache: its misses, the largest ``missed_by`` and the recommended window
    (the smallest holding AUDIT_COVERAGE of the misses' ``needed``); in acceptances for a count
    window, in microseconds for a time window. Empty when the audit was off."""
    audit = {}
    if not result.audit_horizon:
        return audit
    for name, cache in sorted(result.caches.items()):
        if not _audited(cache):
            continue
        needed = sorted(m["needed"] for m in result.window_misses if m["cache"] == name)
        rank = -(-len(needed) * AUDIT_COVERAGE // 1)  # nearest rank: ceil(coverage × n)
        window = cache.size if isinstance(cache, Cache) else cache.window_us
        recommended = max(window, needed[int(rank) - 1]) if needed else window
        max_missed_by = max((m["missed_by"] for m in result.window_misses if m["cache"] == name), default=0)
        if isinstance(cache, Cache):
            audit[name] = {"misses": len(needed), "max_missed_by": max_missed_by, "id_cache_size": window,
                           "recommended_id_cache_size": recommended}
        else:
            audit[name] = {"misses": len(needed), "max_missed_by_us": max_missed_by, "duplicate_window_us": window,
                           "recommended_duplicate_window_us": recommended}
    return audit


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
