"""A tiny hand-written warehouse for the drill-down pages, with the engine's output schemas
(engine/transforms.py; the same columns as tests/quality/warehouse_fixture.py) written by
pyarrow, in several files and small row groups so that paging crosses both.

Batch ``BATCH`` (parent ``PARENT``):

- delivered: ``m-1`` .. ``m-3`` and ``<b>m-html</b>`` (address ``<i>orders</i>``);
- dropped: ``DUPLICATES`` duplicates ``d-000`` .. of ``m-old`` (accepted in ``OLDER``, still in
  the parent snapshot) or ``m-1`` (delivered in this batch), alternately; transaction ``T1``:
  ``t-dup`` (a duplicate of ``m-parent``, accepted in ``PARENT``) and ``t-2``, ``t-3`` rejected
  because of it; ``<script>d-html</script>``, a duplicate of ``<b>m-html</b>``;
- quarantine: a ``<script>`` raw line, a 9000-character one, and ``QUARANTINED - 2`` more.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq

OLDER, PARENT, BATCH = "2026-11-21T03", "2026-11-21T04", "2026-11-21T05"
DUPLICATES = 130
QUARANTINED = 75
HOSTILE_RAW = "<script>alert('raw')</script>"
HOSTILE_ID = "<b>m-html</b>"
HOSTILE_DROPPED = "<script>d-html</script>"
HOSTILE_ADDRESS = "<i>orders</i>"
T0 = datetime(2026, 11, 21, 5, 0, tzinfo=timezone.utc)

_MESSAGE = [
    ("message_id", pa.string()), ("address", pa.string()), ("received_at", pa.timestamp("us", tz="UTC")),
    ("properties", pa.map_(pa.string(), pa.string())), ("txn_id", pa.string()), ("source_id", pa.string()),
    ("seq", pa.int64()), ("body", pa.string()), ("extra_fields", pa.map_(pa.string(), pa.string())),
    ("source_file", pa.string()), ("line_number", pa.int64()),
]
DELIVERED = pa.schema(_MESSAGE + [("cache", pa.string()), ("dedup_key", pa.string()), ("cache_seq", pa.int64())])
DROPPED = pa.schema(_MESSAGE + [("cache", pa.string()), ("dedup_key", pa.string()), ("reason", pa.string()),
                                ("duplicate_of", pa.string())])
QUARANTINE = pa.schema([("raw_line", pa.string()), ("source_file", pa.string()), ("line_number", pa.int64()),
                        ("error", pa.string())])
ID_CACHE = pa.schema([("cache", pa.string()), ("dedup_key", pa.string()), ("cache_seq", pa.int64()),
                      ("message_id", pa.string()), ("address", pa.string()), ("accepted_batch_id", pa.string())])


def _message(message_id, line, key, txn=None, address="orders.eu"):
    return {"message_id": message_id, "address": address, "received_at": T0 + timedelta(seconds=line),
            "properties": [("_AMQ_DUPL_ID", key)], "txn_id": txn, "source_id": "producer-1", "seq": line,
            "body": f"<p>body of {message_id}</p>", "extra_fields": [], "source_file": "file:/raw/part-0.jsonl",
            "line_number": line}


def _write(directory, schema, rows, files=2, row_group_size=10):
    directory.mkdir(parents=True, exist_ok=True)
    per_file = -(-len(rows) // files) if rows else 0
    for i in range(files):
        part = rows[i * per_file:(i + 1) * per_file]
        table = pa.Table.from_pylist(part, schema=schema)
        pq.write_table(table, directory / f"part-{i:05d}.parquet", row_group_size=row_group_size)


def dropped_rows():
    rows = []
    for i in range(DUPLICATES):
        target = "m-old" if i % 2 == 0 else "m-1"
        row = _message(f"d-{i:03d}", 100 + i, "k-old" if target == "m-old" else "k-1")
        row.update(cache="orders.eu", dedup_key=row["properties"][0][1], reason="duplicate", duplicate_of=target)
        rows.append(row)
    for message_id, reason, of, line in (("t-dup", "duplicate", "m-parent", 300),
                                         ("t-2", "transaction_rejected", "t-dup", 301),
                                         ("t-3", "transaction_rejected", "t-dup", 302)):
        row = _message(message_id, line, f"k-{message_id}", txn="T1")
        row.update(cache="orders.eu", dedup_key=row["properties"][0][1], reason=reason, duplicate_of=of)
        rows.append(row)
    row = _message(HOSTILE_DROPPED, 400, "k-html", address=HOSTILE_ADDRESS)
    row.update(cache=HOSTILE_ADDRESS, dedup_key="k-html", reason="duplicate", duplicate_of=HOSTILE_ID)
    rows.append(row)
    return rows


def build(root):
    """Write the warehouse under ``root``; return ``root``."""
    (root / "runs").mkdir(parents=True)
    by_reason = {"duplicate": DUPLICATES + 2, "transaction_rejected": 2}
    manifest = {
        "batch_id": BATCH, "run_id": "r5", "committed_at": "2026-11-21T06:00:00+00:00",
        "parent": {"batch_id": PARENT, "snapshot_fingerprint": "x"},
        "counts": {"input_lines": 4 + DUPLICATES + 4 + QUARANTINED, "delivered": 4,
                   "dropped": DUPLICATES + 4, "quarantined": QUARANTINED, "by_reason": by_reason,
                   "by_address": {"orders.eu": {"delivered": 3, "duplicate": DUPLICATES + 1, "transaction_rejected": 2},
                                  HOSTILE_ADDRESS: {"delivered": 1, "duplicate": 1, "transaction_rejected": 0}}},
        "caches": {"orders.eu": {"address": "orders.eu", "id_cache_size": 10, "entries": 10, "last_seq": 40}},
    }
    (root / "runs" / f"{BATCH}.json").write_text(json.dumps(manifest))
    for b in (OLDER, PARENT):
        (root / "runs" / f"{b}.json").write_text(json.dumps({"batch_id": b, "run_id": f"r-{b}", "counts": {}}))
    delivered = []
    for i, message_id in enumerate(["m-1", "m-2", "m-3", HOSTILE_ID]):
        address = HOSTILE_ADDRESS if message_id == HOSTILE_ID else "orders.eu"
        row = _message(message_id, i + 1, f"k-{i}", address=address)
        row.update(cache=row["address"], dedup_key=f"k-{i}", cache_seq=30 + i)
        delivered.append(row)
    _write(root / "delivered" / f"batch_id={BATCH}", DELIVERED, delivered)
    _write(root / "dropped" / f"batch_id={BATCH}", DROPPED, dropped_rows(), files=3)
    quarantine = [{"raw_line": HOSTILE_RAW if i == 0 else "y" * 9000 if i == 1 else f"not json {i}",
                   "source_file": "file:/raw/part-0.jsonl", "line_number": 1000 + i,
                   "error": "not valid JSON: <b>bad</b>"} for i in range(QUARANTINED)]
    _write(root / "quarantine" / f"batch_id={BATCH}", QUARANTINE, quarantine)
    parent_cache = [
        {"cache": "orders.eu", "dedup_key": "k-old", "cache_seq": 5, "message_id": "m-old", "address": "orders.eu",
         "accepted_batch_id": OLDER},
        {"cache": "orders.eu", "dedup_key": "k-parent", "cache_seq": 9, "message_id": "m-parent",
         "address": "orders.eu", "accepted_batch_id": PARENT},
    ] + [{"cache": "orders.eu", "dedup_key": f"k-filler-{i}", "cache_seq": 10 + i, "message_id": f"f-{i}",
          "address": "orders.eu", "accepted_batch_id": PARENT} for i in range(30)]
    _write(root / "id_cache" / f"batch_id={PARENT}", ID_CACHE, parent_cache)
    return root
