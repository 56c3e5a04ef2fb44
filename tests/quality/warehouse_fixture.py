"""Hand-written committed batches that follow docs/architecture.md's output schemas exactly.

They let the gate be tested on precise, readable situations (and on corruptions of them)
independently of the engine; ``test_gate_engine.py`` runs the gate on the real engine's output.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

MESSAGE_DDL = (
    "message_id string, address string, received_at timestamp, properties map<string,string>, "
    "txn_id string, source_id string, seq long, body string, extra_fields map<string,string>, "
    "source_file string, line_number long"
)
DELIVERED_DDL = MESSAGE_DDL + ", cache string, dedup_key string, cache_seq long"
DROPPED_DDL = MESSAGE_DDL + ", cache string, dedup_key string, reason string, duplicate_of string"
QUARANTINE_DDL = "raw_line string, source_file string, line_number long, error string"
ID_CACHE_DDL = ("cache string, dedup_key string, cache_seq long, message_id string, address string, "
                "accepted_batch_id string")

T0 = datetime(2026, 11, 21, 4, 0, tzinfo=timezone.utc)


def message(message_id: str, line: int, key: str | None = None, txn: str | None = None,
            address: str = "orders.eu", source_file: str = "part-0.jsonl") -> dict:
    properties = {"_AMQ_DUPL_ID": key} if key is not None else {}
    return {
        "message_id": message_id, "address": address, "received_at": T0 + timedelta(seconds=line),
        "properties": properties, "txn_id": txn, "source_id": "producer-1", "seq": line,
        "body": f"body of {message_id}", "extra_fields": {}, "source_file": source_file,
        "line_number": line,
    }


def delivered(message_id: str, line: int, key: str | None, seq: int | None, txn: str | None = None,
              address: str = "orders.eu") -> dict:
    row = message(message_id, line, key, txn, address)
    row.update(cache=address if key is not None else None, dedup_key=key, cache_seq=seq)
    return row


def dropped(message_id: str, line: int, key: str, reason: str, duplicate_of: str, txn: str | None = None,
            address: str = "orders.eu") -> dict:
    row = message(message_id, line, key, txn, address)
    row.update(cache=address, dedup_key=key, reason=reason, duplicate_of=duplicate_of)
    return row


def entry(key: str, seq: int, message_id: str, batch_id: str, cache: str = "orders.eu") -> dict:
    return {"cache": cache, "dedup_key": key, "cache_seq": seq, "message_id": message_id,
            "address": cache, "accepted_batch_id": batch_id}


def write_rows(spark, path: str, rows: list[dict], ddl: str, mode: str = "overwrite") -> None:
    columns = [part.strip().split(" ")[0] for part in ddl.split(", ") if " " in part.strip()]
    # map<string,string> contains ", " inside <...> only without spaces, so the split above is safe.
    frame = spark.createDataFrame([tuple(row.get(c) for c in columns) for row in rows], ddl)
    frame.coalesce(1).write.mode(mode).parquet(path)


def write_batch(spark, warehouse: Path, batch_id: str, *, parent: str | None, delivered_rows, dropped_rows,
                quarantine_rows, id_cache_rows, caches: dict[str, int], input_lines: int | None = None) -> dict:
    """Write the four outputs and the manifest (last, as the engine commits)."""
    root = Path(warehouse)
    for name, rows, ddl in (
        ("delivered", delivered_rows, DELIVERED_DDL),
        ("dropped", dropped_rows, DROPPED_DDL),
        ("quarantine", quarantine_rows, QUARANTINE_DDL),
        ("id_cache", id_cache_rows, ID_CACHE_DDL),
    ):
        write_rows(spark, str(root / name / f"batch_id={batch_id}"), rows, ddl)
    counted = len(delivered_rows) + len(dropped_rows) + len(quarantine_rows)
    by_reason = {r: sum(1 for d in dropped_rows if d["reason"] == r) for r in ("duplicate", "transaction_rejected")}
    manifest = {
        "batch_id": batch_id,
        "run_id": f"run-{batch_id}",
        "engine_version": "0.1.0",
        "committed_at": "2026-11-21T06:00:00+00:00",
        "parent": {"batch_id": parent, "snapshot_fingerprint": "x"} if parent else None,
        "input": {"path": "raw", "files": [], "fingerprint": "x"},
        "config": {"address_settings": {}, "fingerprint": "x"},
        "counts": {
            "input_lines": counted if input_lines is None else input_lines,
            "delivered": len(delivered_rows), "dropped": len(dropped_rows), "quarantined": len(quarantine_rows),
            "by_reason": by_reason, "by_address": {},
        },
        "caches": {
            name: {"id_cache_size": size,
                   "entries": sum(1 for e in id_cache_rows if e["cache"] == name),
                   "last_seq": max([e["cache_seq"] for e in id_cache_rows if e["cache"] == name], default=0)}
            for name, size in caches.items()
        },
        "snapshot_fingerprint": "x",
        "timings": {"total_s": 0.0},
    }
    (root / "runs").mkdir(parents=True, exist_ok=True)
    (root / "runs" / f"{batch_id}.json").write_text(json.dumps(manifest))
    return manifest


def two_batches(spark, warehouse: Path) -> None:
    """B1 then B2 on cache ``orders.eu`` of size 3; both are correct.

    B1: m1..m4 delivered (m3, m4 in txn T1), m5 (T1) repeats m3's key inside T1 -> duplicate
    of m3 while the rest of T1 is delivered (legal), m6 has no key (not checked), one line
    quarantined. Snapshot after B1: seqs 2..4.
    B2: m11 first, a duplicate of m4 (in the parent snapshot); m7 (k1, whose seq 1 was pushed
    out), m8, T2 = m9+m10 delivered; T3 = m12 (duplicate of m8) + m13 rejected with it.
    """
    write_batch(
        spark, warehouse, "B1", parent=None,
        delivered_rows=[
            delivered("m1", 1, "k1", 1), delivered("m2", 2, "k2", 2),
            delivered("m3", 3, "k3", 3, txn="T1"), delivered("m4", 4, "k4", 4, txn="T1"),
            delivered("m6", 6, None, None),
        ],
        dropped_rows=[dropped("m5", 5, "k3", "duplicate", "m3", txn="T1")],
        quarantine_rows=[{"raw_line": "{not json", "source_file": "part-0.jsonl", "line_number": 7,
                          "error": "not valid JSON"}],
        id_cache_rows=[entry("k2", 2, "m2", "B1"), entry("k3", 3, "m3", "B1"), entry("k4", 4, "m4", "B1")],
        caches={"orders.eu": 3},
    )
    write_batch(
        spark, warehouse, "B2", parent="B1",
        delivered_rows=[
            delivered("m7", 2, "k1", 5), delivered("m8", 3, "k5", 6),
            delivered("m9", 4, "k6", 7, txn="T2"), delivered("m10", 5, "k7", 8, txn="T2"),
        ],
        dropped_rows=[
            dropped("m11", 1, "k4", "duplicate", "m4"),
            dropped("m12", 6, "k5", "duplicate", "m8", txn="T3"),
            dropped("m13", 7, "k8", "transaction_rejected", "m12", txn="T3"),
        ],
        quarantine_rows=[],
        id_cache_rows=[entry("k5", 6, "m8", "B2"), entry("k6", 7, "m9", "B2"), entry("k7", 8, "m10", "B2")],
        caches={"orders.eu": 3},
    )
