"""Fingerprints and the run manifest.

The snapshot fingerprint is what makes history checkable: each manifest records the fingerprint of
the parent snapshot it started from, so a re-run of an older batch can tell whether the later
batches are still built on the same cache state (same fingerprint) or must be invalidated.
"""

from __future__ import annotations

import hashlib
import json

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from msgdedup.engine.reading import InputFile

MANIFEST_VERSION = 1


def _sha256(document) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def input_fingerprint(input_path: str, files: list[InputFile]) -> dict:
    listed = [{"path": f.path, "size": f.size} for f in files]
    return {"path": input_path, "files": listed, "fingerprint": _sha256(listed)}


def snapshot_fingerprint(entries: DataFrame, caches: dict[str, dict]) -> str:
    """An order-independent digest of the cache entries plus every cache's counter.

    Entries are hashed row by row on the executors and the hashes summed in two 32-bit halves
    (no overflow below 2**31 rows), so nothing proportional to the snapshot reaches the driver.
    """
    row_hash = F.xxhash64("cache", "dedup_key", "cache_seq", "message_id")
    totals = entries.agg(
        F.count(F.lit(1)).alias("n"),
        F.coalesce(F.sum(row_hash.bitwiseAND(F.lit(0xFFFFFFFF))), F.lit(0)).alias("lo"),
        F.coalesce(F.sum(F.shiftrightunsigned(row_hash, 32)), F.lit(0)).alias("hi"),
    ).first()
    counters = {name: info["last_seq"] for name, info in caches.items()}
    return _sha256({"entries": [totals["n"], int(totals["lo"]), int(totals["hi"])], "counters": counters})
