"""Writing raw batches and reading a batch's committed outputs, for the engine tests."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.dataset as ds

from msgdedup.reference_model import RawLine, window_audit

OUTPUTS = ("delivered", "dropped", "quarantine", "id_cache", "left_keys")


def message(mid, address="a", at=1, key=None, bridge=None, txn=None, **extra):
    """A valid envelope; ``at`` is seconds after 2026-11-21T05:00:00Z."""
    properties = {}
    if key is not None:
        properties["_AMQ_DUPL_ID"] = key
    if bridge is not None:
        properties["_AMQ_BRIDGE_DUP"] = bridge
    doc = {"message_id": mid, "address": address,
           "received_at": f"2026-11-21T05:{at // 60:02d}:{at % 60:02d}Z"}
    if properties:
        doc["properties"] = properties
    if txn is not None:
        doc["txn_id"] = txn
    doc.update(extra)
    return doc


def encode(line) -> bytes:
    if isinstance(line, bytes):
        return line
    if isinstance(line, str):
        return line.encode("utf-8")
    return json.dumps(line).encode("utf-8")


def write_batch(directory: Path, files: dict[str, list]) -> list[RawLine]:
    """Write JSON-lines files; returns the lines as the reference model sees them."""
    directory.mkdir(parents=True, exist_ok=True)
    raw_lines = []
    for name in sorted(files):
        encoded = [encode(line) for line in files[name]]
        (directory / name).write_bytes(b"".join(e + b"\n" for e in encoded))
        source = "file:" + os.path.abspath(directory / name)
        raw_lines += [RawLine(source, i + 1, e) for i, e in enumerate(encoded)]
    return raw_lines


def read_output(warehouse: Path, name: str, batch_id: str) -> list[dict]:
    path = warehouse / name / f"batch_id={batch_id}"
    if not path.exists():
        raise AssertionError(f"{path} missing")
    return ds.dataset(str(path), format="parquet").to_table().to_pylist()


def manifest(warehouse: Path, batch_id: str) -> dict:
    return json.loads((warehouse / "runs" / f"{batch_id}.json").read_text())


def outcome_view(warehouse: Path, batch_id: str) -> dict:
    """The comparable content of a committed batch (what the model also produces)."""
    delivered = read_output(warehouse, "delivered", batch_id)
    dropped = read_output(warehouse, "dropped", batch_id)
    quarantine = read_output(warehouse, "quarantine", batch_id)
    snapshot = read_output(warehouse, "id_cache", batch_id)
    return {
        "delivered": sorted(
            (r["source_file"], r["line_number"], r["message_id"], r["cache"], r["dedup_key"], r["cache_seq"])
            for r in delivered),
        "dropped": sorted(
            (r["source_file"], r["line_number"], r["message_id"], r["reason"], r["duplicate_of"])
            for r in dropped),
        "quarantine": sorted((r["source_file"], r["line_number"], r["error"]) for r in quarantine),
        "snapshot": sorted(_entry(r) for r in snapshot),
        "counters": {name: (info["last_seq"], info.get("clock_us"))
                     for name, info in manifest(warehouse, batch_id)["caches"].items()},
        "left_keys": sorted(
            (r["cache"], r["dedup_key"], r["cache_seq"], r["message_id"], r["accepted_batch_id"],
             r.get("received_at_us")) for r in read_output(warehouse, "left_keys", batch_id)),
        "window_audit": _missed(manifest(warehouse, batch_id)["window_audit"]),
    }


def _entry(row: dict) -> tuple:
    """A snapshot entry: what every policy keeps, and what time and Apama caches add (§8.5)."""
    return (row["cache"], row["dedup_key"], row["cache_seq"], row["message_id"], row["accepted_batch_id"],
            row.get("received_at_us"), row.get("source_id"), row.get("queue"))


def _missed(audit: dict) -> dict:
    """The window-miss audit of the caches with misses (§9), count and time windows alike. A cache
    without any may report another window: the model keeps an unused, empty cache at its old size
    until it is used, the engine reports the address's size in this batch's config; neither
    changes anything."""
    return {name: tuple(sorted((k, v) for k, v in a.items() if k not in ("address", "policy")))
            for name, a in audit.items() if a["misses"]}


def model_view(result) -> dict:
    return {
        "delivered": sorted(
            (r["source_file"], r["line_number"], r["message_id"], r["cache"], r["dedup_key"], r["cache_seq"])
            for r in result.delivered),
        "dropped": sorted(
            (r["source_file"], r["line_number"], r["message_id"], r["reason"], r["duplicate_of"])
            for r in result.dropped),
        "quarantine": sorted((r["source_file"], r["line_number"], r["error"]) for r in result.quarantined),
        "snapshot": sorted(_entry(e) for e in result.snapshot_entries()),
        "counters": {name: (cache.last_seq, getattr(cache, "clock", None)) for name, cache in result.caches.items()},
        "left_keys": sorted((name, e.key, e.seq, e.message_id, e.batch_id, e.instant)
                            for name, cache in result.caches.items() for e in getattr(cache, "left", ())),
        "window_audit": _missed(window_audit(result)),
    }
