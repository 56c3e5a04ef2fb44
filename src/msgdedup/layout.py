"""The warehouse layout: every path of the warehouse, and the batch-id rule, defined once.

A warehouse root holds::

    runs/<ID>.json                    manifest of committed batch <ID> (its existence = committed)
    runs/<ID>.stale.json              manifest of a batch invalidated by reprocessing an older one
    <output>/batch_id=<ID>/           Parquet outputs: delivered, dropped, quarantine, id_cache, left_keys
    quality/<ID>/result.json          the GX gate's verdict on the batch
    quality/data_docs/                the Data Docs site of every gate run
    published/<ID>.json               write-audit-publish record (the gate passed for that run)
    _staging/<ID>/<run_id>/           a run's outputs before its commit (engine/warehouse.py)
    _staging/<ID>/<run_id>/_OWNER.json  who writes that run (engine/lease.py: recovery leaves live runs alone)
    _staging/<ID>/<run_id>/_scratch/<name>/  a table the run's tasks hand its driver (engine/file_collect.py),
                                      deleted once read
    _commits/<seq>.json               the commit log: entry <seq> is created exclusively, and that creation
                                      is a run's commit point (engine/warehouse.py)
    _WRITER.json                      the lease of the one writer at work (engine/lease.py)

Roots and results are plain strings joined with ``/``, so the same functions serve Hadoop URIs
(``file:/…``, ``hdfs://…``, used by the Spark apps) and local paths (used by the Airflow side,
which wraps them in ``pathlib.Path``). No Spark or Airflow import here: every component can use it.
"""

from __future__ import annotations

import os
import re

# What the GX gate checks: the outcome of every line and the ID cache later batches start from.
GATED_OUTPUTS = ("delivered", "dropped", "quarantine", "id_cache")
# left_keys: the keys that left their window, remembered for the window-miss audit
# (docs/semantics.md §9); committed with the batch, but no outcome depends on it.
LEFT_KEYS = "left_keys"
OUTPUTS = (*GATED_OUTPUTS, LEFT_KEYS)

RUNS = "runs"
QUALITY = "quality"
DATA_DOCS = "data_docs"
PUBLISHED = "published"
STAGING = "_staging"
TRASH = "_trash"  # _staging/_trash-<random>: a discarded run, renamed out of sight, then deleted
COMMITS = "_commits"
LEASE = "_WRITER.json"

MANIFEST_SUFFIX = ".json"
STALE_SUFFIX = ".stale.json"
# Inside a run's staging directory: the manifest to publish, and who owns the run.
STAGED_MANIFEST = "manifest.json"
OWNER = "_OWNER.json"
SCRATCH = "_scratch"
# Commit log entries are named by their sequence number, zero-padded so names sort in commit order.
COMMIT_ENTRY = re.compile(r"\A(\d{20})\.json\Z")


def _join(root: str | os.PathLike, *parts: str) -> str:
    return "/".join([os.fspath(root).rstrip("/"), *parts])


def runs_dir(root: str | os.PathLike) -> str:
    return _join(root, RUNS)


def manifest(root: str | os.PathLike, batch_id: str) -> str:
    return _join(root, RUNS, f"{batch_id}{MANIFEST_SUFFIX}")


def stale_manifest(root: str | os.PathLike, batch_id: str) -> str:
    return _join(root, RUNS, f"{batch_id}{STALE_SUFFIX}")


def output_dir(root: str | os.PathLike, name: str, batch_id: str) -> str:
    if name not in OUTPUTS:
        raise ValueError(f"unknown output {name!r}: one of {', '.join(OUTPUTS)}")
    return _join(root, name, f"batch_id={batch_id}")


def quality_dir(root: str | os.PathLike) -> str:
    return _join(root, QUALITY)


def gate_result(quality: str | os.PathLike, batch_id: str) -> str:
    """``result.json`` of a batch under a quality directory (``quality_dir(root)`` by default)."""
    return _join(quality, batch_id, "result.json")


def data_docs_dir(quality: str | os.PathLike) -> str:
    return _join(quality, DATA_DOCS)


def published_dir(root: str | os.PathLike) -> str:
    return _join(root, PUBLISHED)


def published(root: str | os.PathLike, batch_id: str) -> str:
    return _join(root, PUBLISHED, f"{batch_id}.json")


def staging_dir(root: str | os.PathLike, batch_id: str | None = None, run_id: str | None = None) -> str:
    parts = [p for p in (batch_id, run_id) if p is not None]
    return _join(root, STAGING, *parts)


def staging_trash(root: str | os.PathLike) -> str:
    """The prefix of the names discarded runs get (``-<random>`` is appended) before deletion."""
    return _join(root, STAGING, TRASH)


def staging_owner(root: str | os.PathLike, batch_id: str, run_id: str) -> str:
    return _join(root, STAGING, batch_id, run_id, OWNER)


def scratch_dir(staging: str, name: str) -> str:
    """A directory ``name`` among a run's scratch files, under its staging directory (``staging_dir(root,
    ID, run_id)``): hidden from the staged outputs, and discarded with the run if it fails."""
    return _join(staging, SCRATCH, name)


def commit_log_dir(root: str | os.PathLike) -> str:
    return _join(root, COMMITS)


def commit_entry(root: str | os.PathLike, seq: int) -> str:
    """The commit log's entry number ``seq`` (1, 2, ...)."""
    if seq < 1:
        raise ValueError(f"commit log entries start at 1, not {seq}")
    return _join(root, COMMITS, f"{seq:020d}.json")


def seq_of_commit_entry(file_name: str) -> int | None:
    """The sequence number of a file name in ``_commits/``, or None for anything else (temporaries)."""
    match = COMMIT_ENTRY.match(file_name)
    return int(match.group(1)) if match else None


def lease(root: str | os.PathLike) -> str:
    return _join(root, LEASE)


def batch_id_of_manifest(file_name: str) -> tuple[str, bool] | None:
    """``(batch_id, stale)`` of a file name in ``runs/``, or None for anything else."""
    for suffix, stale in ((STALE_SUFFIX, True), (MANIFEST_SUFFIX, False)):
        if file_name.endswith(suffix):
            batch_id = file_name[: -len(suffix)]
            return (batch_id, stale) if is_batch_id(batch_id) else None
    return None


# -- the batch-id rule --------------------------------------------------------------------------
# Batch ids name directories and order history (a batch's parent is the committed batch with the
# greatest smaller id), so they are plain names that sort in time order. Within one warehouse they
# also share one format: the first committed batch fixes it. Otherwise one mistyped id (``zz``, a
# test name) would sort after every hour and make every later hourly run "older than committed
# history" (stale) forever.
BATCH_ID_PATTERN = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,99}\Z")
HOURLY_PATTERN = re.compile(r"\A\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3])\Z")
HOURLY = "hourly"
NAMED = "named"


class BatchIdError(ValueError):
    """A batch id that must not name a batch (bad characters, or another format than the warehouse's)."""


def is_batch_id(value: object) -> bool:
    return isinstance(value, str) and bool(BATCH_ID_PATTERN.match(value)) and ".." not in value


def validate_batch_id(batch_id: object) -> str:
    if not is_batch_id(batch_id):
        raise BatchIdError(
            f"invalid batch id {batch_id!r}: use letters, digits, '-', '_' and '.', "
            "starting with a letter or digit, e.g. 2026-11-21T05 (ids must sort in time order)"
        )
    return batch_id  # type: ignore[return-value]


def batch_id_format(batch_id: str) -> str:
    """``hourly`` for ``YYYY-MM-DDTHH`` (what the DAG writes), else ``named``."""
    return HOURLY if HOURLY_PATTERN.match(batch_id) else NAMED


def check_batch_id_format(batch_id: str, committed: list[str]) -> None:
    """Refuse ``batch_id`` unless it has the format of the warehouse's committed batches."""
    validate_batch_id(batch_id)
    formats = {batch_id_format(b) for b in committed}
    wanted = batch_id_format(batch_id)
    if formats and wanted not in formats:
        example = max(committed)
        if HOURLY in formats:
            expected = f"hourly batch ids YYYY-MM-DDTHH (latest: {example})"
        else:
            expected = f"named batch ids (latest: {example}), not hourly ones"
        raise BatchIdError(
            f"batch id {batch_id!r} does not fit this warehouse, which holds {expected}: ids of "
            f"one warehouse share one format, so that they sort in time order; use another "
            f"warehouse for other ids"
        )
