"""Fingerprints for the run manifest.

The snapshot fingerprint (computed by the kernel, which holds the caches anyway) is what makes
history checkable: each manifest records the fingerprint of the parent snapshot it started from,
so a re-run of an older batch can tell whether the later batches are still built on the same
cache state or must be invalidated.
"""

from __future__ import annotations

import hashlib
import json

from msgdedup.engine.reading import InputFile

MANIFEST_VERSION = 1


def _sha256(document) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def input_fingerprint(input_path: str, files: list[InputFile]) -> dict:
    listed = [{"path": f.path, "size": f.size} for f in files]
    return {"path": input_path, "files": listed, "fingerprint": _sha256(listed)}
