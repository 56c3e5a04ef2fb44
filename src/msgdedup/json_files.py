"""The warehouse's small JSON documents (manifests, gate results, publish records) on a local disk.

The Airflow side (publish step, Data quality view) reads them with plain Python I/O. One reader
and one writer, so that every caller agrees on what a damaged document is and how a new one
lands: read whole or refused with a readable reason; written to a temporary sibling, fsynced,
renamed, and the directory fsynced, so a power loss leaves the old file or the new one.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


class DocumentError(ValueError):
    """A JSON document that is missing, unreadable, or not a JSON object."""


def read_object(path: str | os.PathLike, what: str = "document") -> dict[str, Any]:
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise DocumentError(f"{what} {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise DocumentError(f"{what} {path} is unreadable: {exc}") from None
    if not isinstance(data, dict):
        raise DocumentError(f"{what} {path} is not a JSON object")
    return data


def read_object_or_none(path: str | os.PathLike) -> dict[str, Any] | None:
    """For views: a missing or damaged document shows as absent instead of failing the page."""
    try:
        return read_object(path)
    except DocumentError:
        return None


def write_atomic(path: str | os.PathLike, data: dict[str, Any]) -> None:
    """Write ``data`` so that readers see either the old or the new file, whole, even after a crash."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
