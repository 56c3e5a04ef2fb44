"""The run manifest's cache counters and fingerprints.

The snapshot fingerprint is what makes history checkable: each manifest records the fingerprint
of the parent snapshot it started from, so a re-run of an older batch can tell whether the later
batches are still built on the same cache state or must be invalidated. It covers what a later
batch inherits: every cache's counter and its entries (each cache's entries are hashed by Spark,
in parallel, see ``transforms.entry_digests``).
"""

from __future__ import annotations

import hashlib
import json

from msgdedup.config import AddressSettings
from msgdedup.engine.reading import InputFile

MANIFEST_VERSION = 1


def _sha256(document) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def input_fingerprint(input_path: str, files: list[InputFile]) -> dict:
    listed = [{"path": f.path, "size": f.size} for f in files]
    return {"path": input_path, "files": listed, "fingerprint": _sha256(listed)}


def cache_counters(parent: dict[str, dict], accepted: dict[str, tuple[str, int]],
                   settings: AddressSettings) -> dict[str, dict]:
    """Every cache after the batch: the parent's, and those the batch met (``accepted``: cache ->
    (address, keys accepted)). ``entries`` is filled in once the snapshot is written."""
    caches = {name: {"address": info["address"], "last_seq": info["last_seq"]} for name, info in parent.items()}
    for name, (address, count) in accepted.items():
        cache = caches.setdefault(name, {"address": address, "last_seq": 0})
        cache["last_seq"] += count
    return {
        name: {"address": c["address"], "id_cache_size": settings.id_cache_size(c["address"]),
               "entries": 0, "last_seq": c["last_seq"]}
        for name, c in sorted(caches.items())
    }


def snapshot_fingerprint(caches: dict[str, dict], entry_digests: dict[str, str]) -> str:
    digest = hashlib.sha256()
    for name in sorted(caches):
        digest.update(f"{name}\0{caches[name]['last_seq']}\0{entry_digests.get(name, '')}\n".encode())
    return digest.hexdigest()
