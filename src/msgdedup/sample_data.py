"""Realistic sample raw partitions: what a broker export looks like on a bad day.

Writes ``<out>/dt=YYYY-MM-DD/hour=HH/part-0000N.jsonl`` (one JSON envelope per line) and, last,
the partition's ``_SUCCESS`` marker. Deterministic for a given ``--seed`` and ``--start``.

What is in it (all with ``properties._AMQ_DUPL_ID`` unless said otherwise):

- several addresses (``orders.eu``, ``orders.us``, ``payments.eu``, ``inventory.updates``,
  ``telemetry.raw``), producers with a ``source_id`` and an increasing ``seq``;
- producer retries: the same duplicate id under a new message id, seconds later (sometimes the
  retry falls into the next hour: a duplicate across batches);
- redeliveries: the very same message exported again minutes later;
- transactions spanning ``orders.eu`` and ``payments.eu`` (same ``txn_id``), some replayed in full
  under a new ``txn_id`` after a "failover" (every message a duplicate -> the transaction is
  rejected), some replayed with one new message added (still rejected as a whole);
- bridge duplicates: messages forwarded by a core bridge carry ``properties._AMQ_BRIDGE_DUP``;
  a bridge resend repeats that id;
- keyless messages (``telemetry.raw``: no duplicate id at all);
- late resends: an ``inventory.updates`` producer restored from a backup resends messages of two
  to three hours earlier (new message ids, the same duplicate ids). The demo's window on that
  address (``DEMO_ADDRESS_SETTINGS``) holds about an hour of its keys, so they get through: what
  the window-miss audit (docs/semantics.md §9) is there to find;
- ``received_at`` as ISO-8601 with an offset or as epoch milliseconds;
- a few malformed lines (broken JSON, missing field, no UTC offset, wrong types, bad bytes).

CLI::

    python -m msgdedup.sample_data --out var/raw [--start 2026-11-21T00] [--hours 12] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ADDRESSES_KEYED = ("orders.eu", "orders.us", "payments.eu", "inventory.updates")
KEYLESS_ADDRESS = "telemetry.raw"
BRIDGED_ADDRESS = "orders.us"
TXN_ADDRESSES = ("orders.eu", "payments.eu")
OFFSETS = (timezone.utc, timezone(timedelta(hours=1)), timezone(timedelta(hours=-5)),
           timezone(timedelta(hours=5, minutes=30)))
SUCCESS_MARKER = "_SUCCESS"
LATE_RESEND_ADDRESS = "inventory.updates"
# The demo's address settings, one of each policy (docs/semantics.md §8): Artemis' default
# everywhere; on the late resends' address a window of about an hour of its keys (some 45 an hour),
# too small for a resend hours later; the orders addresses share one Apama cache (their producers
# are its senders; a redelivery minutes later is still in its sender's queue); payments a NATS-style
# time window, shorter than the longest redeliveries. The window-miss audit is on (it is off
# unless asked for), so the demo shows both windows that are too small.
DEMO_ADDRESS_SETTINGS = {"address_settings": {
    "#": {"id_cache_size": 20000},
    LATE_RESEND_ADDRESS: {"id_cache_size": 50},
    "orders.*": {"policy": "apama", "per_source_window": 200, "expiry_seconds": 300, "domain": "orders"},
    "payments.*": {"policy": "time", "duplicate_window": "PT10M"},
}, "window_audit": {"horizon": 4}}


@dataclass
class Event:
    at: datetime  # when the broker received it (UTC)
    doc: dict[str, Any] | None = None
    raw: bytes | None = None  # a malformed line, written as is


@dataclass
class Generator:
    rng: random.Random
    events: list[Event] = field(default_factory=list)
    seqs: dict[str, int] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)

    def _count(self, what: str, n: int = 1) -> None:
        self.stats[what] = self.stats.get(what, 0) + n

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _received_at(self, at: datetime) -> Any:
        if self.rng.random() < 0.3:
            return int(at.timestamp() * 1000)
        tz = self.rng.choice(OFFSETS)
        return at.astimezone(tz).isoformat(timespec="milliseconds")

    def message(self, at: datetime, address: str, *, keyed: bool = True, txn_id: str | None = None,
                dupl_id: str | None = None) -> dict[str, Any]:
        source = f"{address.split('.')[0]}-producer-{self.rng.randint(1, 3)}"
        seq = self.seqs.get(source, 0) + 1
        self.seqs[source] = seq
        doc: dict[str, Any] = {
            "message_id": self._uuid(),
            "address": address,
            "received_at": self._received_at(at),
            "properties": {},
            "source_id": source,
            "seq": seq,
            "body": json.dumps({"amount": self.rng.randint(1, 5000), "sku": f"SKU-{self.rng.randint(100, 999)}"}),
        }
        if keyed:
            doc["properties"]["_AMQ_DUPL_ID"] = dupl_id or f"{source}:{seq}"
        if txn_id:
            doc["txn_id"] = txn_id
        if self.rng.random() < 0.2:
            doc["properties"]["JMSPriority"] = self.rng.randint(0, 9)
        return doc

    def add(self, at: datetime, doc: dict[str, Any], what: str) -> None:
        self.events.append(Event(at=at, doc=doc))
        self._count(what)

    def hour(self, start: datetime, n: int) -> None:
        for _ in range(n):
            at = start + timedelta(seconds=self.rng.uniform(0, 3600))
            r = self.rng.random()
            if r < 0.12:
                self.add(at, self.message(at, KEYLESS_ADDRESS, keyed=False), "keyless")
            elif r < 0.20:
                self.transaction(at)
            elif r < 0.30:
                self.bridged(at)
            else:
                address = self.rng.choice(ADDRESSES_KEYED)
                doc = self.message(at, address)
                self.add(at, doc, "original")
                self.maybe_duplicate(at, doc)
        self.malformed(start)

    def maybe_duplicate(self, at: datetime, doc: dict[str, Any]) -> None:
        r = self.rng.random()
        if r < 0.06:  # producer retry: same duplicate id, new message id, seconds later
            later = at + timedelta(seconds=self.rng.uniform(1, 20))
            retry = dict(doc, message_id=self._uuid(), received_at=self._received_at(later),
                         properties=dict(doc["properties"]))
            self.add(later, retry, "producer_retry")
        elif r < 0.09:  # redelivery: the same message exported again, minutes later
            later = at + timedelta(seconds=self.rng.uniform(60, 900))
            self.add(later, dict(doc, received_at=self._received_at(later)), "redelivery")

    def transaction(self, at: datetime) -> None:
        txn = f"txn-{self._uuid()[:8]}"
        docs = []
        for i, address in enumerate(TXN_ADDRESSES * self.rng.randint(1, 2)):
            t = at + timedelta(milliseconds=50 * i)
            doc = self.message(t, address, txn_id=txn)
            docs.append((t, doc))
            self.add(t, doc, "txn_message")
        self._count("transaction")
        r = self.rng.random()
        if r < 0.35:  # replay after a failover: new txn id, same duplicate ids
            replay_txn = f"txn-{self._uuid()[:8]}"
            base = at + timedelta(seconds=self.rng.uniform(2, 40))
            for i, (_, doc) in enumerate(docs):
                t = base + timedelta(milliseconds=50 * i)
                self.add(t, dict(doc, message_id=self._uuid(), txn_id=replay_txn,
                                 received_at=self._received_at(t)), "txn_replayed_message")
            if self.rng.random() < 0.5:  # ...with a new message in it: still rejected as a whole
                t = base + timedelta(milliseconds=50 * len(docs))
                self.add(t, self.message(t, TXN_ADDRESSES[0], txn_id=replay_txn), "txn_replayed_message")
            self._count("transaction_replayed")

    def bridged(self, at: datetime) -> None:
        doc = self.message(at, BRIDGED_ADDRESS)
        doc["properties"]["_AMQ_BRIDGE_DUP"] = f"bridge-eu-us:{self._uuid()}"
        self.add(at, doc, "bridged")
        if self.rng.random() < 0.25:  # bridge resend after a reconnect
            later = at + timedelta(seconds=self.rng.uniform(1, 10))
            self.add(later, dict(doc, message_id=self._uuid(), received_at=self._received_at(later),
                                 properties=dict(doc["properties"])), "bridge_duplicate")

    def late_resends(self, start: datetime, end: datetime, per_hour: int = 3) -> None:
        """Generated after every hour (it only adds events): ``per_hour`` resends an hour, from the
        third hour on, of ``LATE_RESEND_ADDRESS`` originals two to three hours old."""
        originals = [e for e in self.events if e.doc and e.doc["address"] == LATE_RESEND_ADDRESS
                     and "txn_id" not in e.doc and "_AMQ_DUPL_ID" in e.doc["properties"]]
        hour = start + timedelta(hours=3)
        while hour < end:
            old = [e for e in originals if hour - timedelta(hours=3) <= e.at < hour - timedelta(hours=2)]
            for original in self.rng.sample(old, k=min(per_hour, len(old))):
                at = original.at + timedelta(hours=2, seconds=self.rng.uniform(0, 3600))
                self.add(at, dict(original.doc, message_id=self._uuid(), received_at=self._received_at(at),
                                  properties=dict(original.doc["properties"])), "late_resend")
            hour += timedelta(hours=1)

    def malformed(self, start: datetime) -> None:
        at = start + timedelta(seconds=self.rng.uniform(0, 3599))
        good = self.message(at, "orders.eu")
        candidates = [
            json.dumps(good)[:-7].encode(),  # truncated line
            json.dumps({k: v for k, v in good.items() if k != "address"}).encode(),
            json.dumps(dict(good, received_at=at.strftime("%Y-%m-%dT%H:%M:%S"))).encode(),  # no offset
            json.dumps(dict(good, seq="12")).encode(),
            b'{"message_id": "\xff\xfe-bad-bytes", "address": "orders.eu"}',
            b"[1, 2, 3]",
        ]
        for raw in self.rng.sample(candidates, k=self.rng.randint(1, 3)):
            self.events.append(Event(at=at, raw=raw))
            self._count("malformed")


def _line(event: Event) -> bytes:
    if event.raw is not None:
        return event.raw
    return json.dumps(event.doc, ensure_ascii=False, separators=(",", ":")).encode()


def write_partitions(out: Path, start: datetime, hours: int, seed: int = 7,
                     messages_per_hour: int = 250, files_per_partition: int = 2) -> dict[str, Any]:
    """Generate ``hours`` partitions from ``start`` (UTC, full hour); return counts per kind."""
    if start.tzinfo is None or (start.minute, start.second, start.microsecond) != (0, 0, 0):
        raise ValueError("start must be a timezone-aware full hour")
    start = start.astimezone(timezone.utc)
    gen = Generator(rng=random.Random(seed))
    for h in range(hours):
        gen.hour(start + timedelta(hours=h), messages_per_hour)
    end = start + timedelta(hours=hours)
    gen.late_resends(start, end)
    by_hour: dict[datetime, list[Event]] = {}
    for event in gen.events:
        if event.at < end:  # a retry past the last hour is simply not exported yet
            by_hour.setdefault(event.at.replace(minute=0, second=0, microsecond=0), []).append(event)
    partitions = []
    for h in range(hours):
        hour = start + timedelta(hours=h)
        pdir = out / f"dt={hour:%Y-%m-%d}" / f"hour={hour:%H}"
        pdir.mkdir(parents=True, exist_ok=True)
        (pdir / SUCCESS_MARKER).unlink(missing_ok=True)
        events = sorted(by_hour.get(hour, []), key=lambda e: e.at)
        # Exporter writes its files in arrival order, split in chunks.
        chunk = max(1, -(-len(events) // files_per_partition))
        for i in range(files_per_partition):
            part = events[i * chunk:(i + 1) * chunk]
            with (pdir / f"part-{i:05d}.jsonl").open("wb") as fh:
                for event in part:
                    fh.write(_line(event) + b"\n")
        (pdir / SUCCESS_MARKER).write_bytes(b"")  # last: the partition is complete
        partitions.append({"batch_id": f"{hour:%Y-%m-%dT%H}", "path": str(pdir), "lines": len(events)})
    return {"partitions": partitions, "kinds": dict(sorted(gen.stats.items()))}


def default_start(hours: int, now: datetime | None = None) -> datetime:
    """The ``hours`` complete hours ending with the last complete hour before ``now``."""
    now = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=hours)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="msgdedup.sample_data", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="raw root to write dt=/hour= partitions to")
    parser.add_argument("--start",
                        help="first hour YYYY-MM-DDTHH (UTC); default: --hours before the last complete hour")
    parser.add_argument("--hours", type=int, default=12)
    parser.add_argument("--messages-per-hour", type=int, default=250)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.hours < 1:
        parser.error("--hours must be at least 1")
    if args.start:
        try:
            start = datetime.strptime(args.start, "%Y-%m-%dT%H").replace(tzinfo=timezone.utc)
        except ValueError:
            parser.error(f"--start {args.start!r}: expected YYYY-MM-DDTHH")
    else:
        start = default_start(args.hours)
    result = write_partitions(args.out, start, args.hours, seed=args.seed,
                              messages_per_hour=args.messages_per_hour)
    for p in result["partitions"]:
        print(f"{p['batch_id']}  {p['lines']:5d} lines  {p['path']}")
    print("kinds: " + ", ".join(f"{k}={v}" for k, v in result["kinds"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
