"""The run manifest's cache counters and fingerprints.

The snapshot fingerprint is what makes history checkable: each manifest records the fingerprint
of the parent snapshot it started from, so a re-run of an older batch can tell whether the later
batches are still built on the same cache state or must be invalidated. It covers what a later
batch inherits: every cache's counter and its entries (each cache's entries are hashed by Spark,
in parallel, see ``transforms.entry_digests``, and folded here, ``cache_digests``).
"""

from __future__ import annotations

import hashlib
import json

from dataclasses import dataclass
from typing import Iterable, Mapping

from msgdedup.engine.reading import InputFile
from msgdedup.engine.windows import CacheWindow, record

MANIFEST_VERSION = 1


def _sha256(document) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def input_fingerprint(input_path: str, files: list[InputFile]) -> dict:
    listed = [{"path": f.path, "size": f.size} for f in files]
    return {"path": input_path, "files": listed, "fingerprint": _sha256(listed)}


def cache_counters(windows: Mapping[str, CacheWindow], accepted: Mapping[str, int],
                   clocks: Mapping[str, int | None]) -> dict[str, dict]:
    """Every cache after the batch (the parent's and those the batch's messages met, ``accepted``:
    cache -> keys accepted): its window (windows.record), counter and, beside the counter of
    a time or Apama cache, its time (``clocks``, §8.5). ``entries`` and ``addresses`` (those of
    its entries, how a later batch finds the window of a cache it does not use) are filled in once
    the snapshot is written."""
    caches = {}
    for name, w in windows.items():
        if not (w.inherited or name in accepted):
            continue  # named only by lines that were not checked (a repeated message_id)
        # an empty cache names no address: the parent's would give it, in a later batch, the window
        # of an address none of its keys come from any more (an empty cache is carried unchanged)
        cache = {"address": w.address, "addresses": [], **record(w.setting), "entries": 0,
                 "last_seq": w.last_seq + accepted.get(name, 0)}
        if w.timed:
            cache["clock_us"] = clocks.get(name)
        caches[name] = cache
    return caches


@dataclass(frozen=True)
class CacheDigest:
    """One cache's entries in a snapshot: how many, their digest, the addresses they come from."""

    entries: int
    digest: str
    addresses: list[str]


def cache_digests(parts: Iterable[Mapping]) -> dict[str, CacheDigest]:
    """``transforms.entry_digests``' rows folded per cache. The digest is the two XORs, each as
    16 hex digits of its 64 bits (as Spark's ``format_string("%016x")`` printed them when the
    engine folded them itself: the fingerprints of committed batches do not change)."""
    folded: dict[str, list] = {}
    for part in parts:
        cache = folded.setdefault(part["cache"], [0, 0, 0, set()])
        cache[0] += part["entries"]
        cache[1] ^= part["xor_a"]
        cache[2] ^= part["xor_b"]
        if part["address"] is not None:
            cache[3].add(part["address"])
    bits = (1 << 64) - 1
    return {name: CacheDigest(entries, f"{a & bits:016x}{b & bits:016x}", sorted(addresses))
            for name, (entries, a, b, addresses) in folded.items()}


def snapshot_fingerprint(caches: dict[str, dict], entry_digests: dict[str, str]) -> str:
    digest = hashlib.sha256()
    for name in sorted(caches):
        clock = caches[name].get("clock_us")  # none for count caches: their fingerprints are as before
        digest.update(f"{name}\0{caches[name]['last_seq']}\0{entry_digests.get(name, '')}".encode())
        digest.update(b"\n" if clock is None else f"\0{clock}\n".encode())
    return digest.hexdigest()
